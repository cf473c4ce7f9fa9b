"""transformers architectures: building small models offline, and which ones the dual-mode
adapter can drive.

:class:`spec_lib.models.DualModeLM` needs a causal LM that honours a custom additive 4D
``attention_mask``, explicit (repeated) ``position_ids`` and a cache that can be cropped
(seed 000, App. D.1: the AR and diffusion modes differ by the attention mask only).

* :data:`TESTED_MODEL_TYPES`: architectures whose every schedule is tested token-identical
  to ``generate`` (``tests/test_architectures.py``).
* :data:`UNSUPPORTED_MODEL_TYPES`: architectures rejected up front, with the reason.
* :func:`attention_window`: the sliding-window (or chunked) attention span of a config, if
  any.  Decoding is exact while every position a call touches stays inside the window;
  beyond it transformers' sliding cache cannot be cropped back, so longer decodes are
  rejected before any call (:func:`spec_lib.schedules.validation.validate`).
"""

from __future__ import annotations

import warnings

import torch

#: model_type values tested end to end (all four schedules equal generate in float64).
TESTED_MODEL_TYPES = ("qwen3", "qwen2", "llama", "mistral", "gemma3_text", "gpt2", "phi3")

#: model_type -> why the adapter cannot drive it.
UNSUPPORTED_MODEL_TYPES = {
    "bloom": "ALiBi position biases are computed inside the model from a 2-D padding mask; "
             "a custom 4D layout mask cannot express them",
    "mpt": "ALiBi position biases (see bloom)",
}


def check_architecture(config) -> None:
    """Reject architectures the adapter cannot drive; warn for ones that are not tested."""
    model_type = getattr(config, "model_type", None)
    if model_type in UNSUPPORTED_MODEL_TYPES or getattr(config, "alibi", False):
        reason = UNSUPPORTED_MODEL_TYPES.get(model_type, "ALiBi position biases")
        raise ValueError(f"hf_model of type {model_type!r} is not supported by DualModeLM: {reason}. "
                         f"Tested types: {list(TESTED_MODEL_TYPES)}")
    if model_type not in TESTED_MODEL_TYPES:
        warnings.warn(f"model type {model_type!r} is not among the tested types {list(TESTED_MODEL_TYPES)}; "
                      f"check greedy identity against generate (tests/test_architectures.py) before trusting it",
                      stacklevel=3)


def attention_window(config) -> int | None:
    """Smallest sliding-window / chunked-attention span of any layer, or None (full attention).

    Uses transformers' own reading of the config (the one that builds the cache layers).
    """
    from transformers.cache_utils import get_layer_types_and_kwargs

    try:
        _, per_layer = get_layer_types_and_kwargs(config)
    except (AttributeError, TypeError):                      # configs without per-layer info
        window = getattr(config, "sliding_window", None)
        return int(window) if window and getattr(config, "use_sliding_window", True) else None
    windows = [int(kw["sliding_window"]) for kw in per_layer if kw.get("sliding_window")]
    return min(windows) if windows else None


def build_qwen3(vocab_size: int, *, hidden_size: int = 64, num_layers: int = 2, num_heads: int = 4,
                max_positions: int = 512, seed: int = 0, dtype: torch.dtype = torch.float32):
    """A randomly initialised ``Qwen3ForCausalLM`` built offline from a config (no hub access).

    The global RNG state is restored afterwards, so building a model does not change what
    later random draws give.
    """
    from transformers import Qwen3Config, Qwen3ForCausalLM

    if hidden_size % num_heads:
        raise ValueError(f"hidden_size must be divisible by num_heads, got {hidden_size} and {num_heads}")
    config = Qwen3Config(vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=3 * hidden_size,
                         num_hidden_layers=num_layers, num_attention_heads=num_heads,
                         num_key_value_heads=max(1, num_heads // 2), head_dim=hidden_size // num_heads,
                         max_position_embeddings=max_positions, tie_word_embeddings=True)
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = Qwen3ForCausalLM(config).to(dtype).eval()
    finally:
        torch.random.set_rng_state(generator_state)
    return model
