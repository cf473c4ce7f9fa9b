"""The tested architecture list (spec_lib.architectures.TESTED_MODEL_TYPES): every schedule is
token-identical to ``generate`` on a tiny random model of each type, in float64; models the
adapter cannot drive are rejected up front; position limits and sliding windows are checked
before any call, including the draft rows that sit past the verified prefix."""

from __future__ import annotations

import pytest
import torch

from spec_lib import decode
from spec_lib.architectures import TESTED_MODEL_TYPES, attention_window
from spec_lib.models import DualModeLM

VOCAB = 40
MASK = VOCAB - 1


def tiny_model(model_type: str, **overrides):
    """A randomly initialised model of ``model_type``, small enough for a unit test."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if model_type == "gpt2":
        kwargs = dict(n_embd=32, n_layer=2, n_head=4, n_positions=128)
    else:
        kwargs = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=256)
        if model_type in ("qwen3", "gemma3_text"):
            kwargs["head_dim"] = 8
    ids = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)        # inside the tiny vocabulary
    config = AutoConfig.for_model(model_type, vocab_size=VOCAB, **{**kwargs, **ids, **overrides})
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config).to(torch.float64).eval()


def generate(hf_model, prompt: list[int], max_new_tokens: int) -> list[int]:
    ids = torch.tensor([prompt])
    out = hf_model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens, do_sample=False,
                            eos_token_id=None, pad_token_id=MASK)
    return out[0, len(prompt):].tolist()


@pytest.mark.parametrize("model_type", TESTED_MODEL_TYPES)
def test_every_schedule_equals_generate(model_type):
    hf_model = tiny_model(model_type)
    model = DualModeLM(hf_model, MASK)
    for prompt in ([3, 1, 4, 1, 5], [2, 7, 1, 8, 2, 8, 1, 8, 2, 8]):
        expected = generate(hf_model, prompt, 20)
        for schedule in ("ar", "linear", "quadratic", "packed"):
            for width in (1, 4):
                assert decode(model, prompt, schedule=schedule, width=width, max_new_tokens=20).tokens == expected, \
                    (model_type, schedule, width)


def test_alibi_models_are_rejected_up_front():
    from transformers import BloomConfig, BloomForCausalLM

    bloom = BloomForCausalLM(BloomConfig(vocab_size=VOCAB, hidden_size=32, n_layer=1, n_head=4))
    with pytest.raises(ValueError, match="type 'bloom' is not supported by DualModeLM: ALiBi"):
        DualModeLM(bloom, MASK)


def test_untested_types_warn():
    hf_model = tiny_model("olmo2")
    with pytest.warns(UserWarning, match="model type 'olmo2' is not among the tested types"):
        DualModeLM(hf_model, MASK)


def test_gpt2_position_limit_counts_the_draft_rows():
    hf_model = tiny_model("gpt2")                               # 128 learned positions
    model = DualModeLM(hf_model, MASK)
    prompt = list(range(1, 21))
    # Packed-SS's rows reach W = 7 positions past the last verified token: L <= 128 - 20 - 7 + 1.
    assert decode(model, prompt, schedule="packed", width=7, max_new_tokens=102).tokens == generate(hf_model, prompt, 102)
    with pytest.raises(ValueError, match=r"allowed: max_new_tokens <= 102"):
        decode(model, prompt, schedule="packed", width=7, max_new_tokens=103)   # AR alone would fit
    with pytest.raises(ValueError, match=r"allowed: max_new_tokens <= 94"):
        decode(model, prompt, schedule="quadratic", width=7, max_new_tokens=100)


@pytest.mark.parametrize("model_type", ["mistral", "gemma3_text"])
def test_sliding_window_models_decode_inside_the_window_and_refuse_beyond(model_type):
    hf_model = tiny_model(model_type, sliding_window=32)
    model = DualModeLM(hf_model, MASK)
    assert model.attention_window == attention_window(hf_model.config) == 32
    prompt = [3, 1, 4, 1, 5]
    # Packed-SS at W = 4 appends 2B = 10 rows per call to a cache of up to n + L - 2 entries: L <= 18.
    assert decode(model, prompt, schedule="packed", width=4, max_new_tokens=18).tokens == generate(hf_model, prompt, 18)
    with pytest.raises(ValueError, match=r"sliding-window attention of 32 positions.*allowed: max_new_tokens <= 18"):
        decode(model, prompt, schedule="packed", width=4, max_new_tokens=19)
    assert decode(model, prompt, schedule="ar", width=1, max_new_tokens=27).tokens == generate(hf_model, prompt, 27)


def test_qwen2_sliding_window_is_off_unless_enabled():
    assert attention_window(tiny_model("qwen2", sliding_window=16).config) is None
    assert attention_window(tiny_model("qwen2", sliding_window=16, use_sliding_window=True,
                                       max_window_layers=0).config) == 16
