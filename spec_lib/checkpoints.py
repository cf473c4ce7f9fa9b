"""Which model an experiment uses: a preset trained here, or a real checkpoint on disk.

* ``PRESETS``: the (ModelConfig, TrainConfig) pairs of the self-speculative model trained
  by notebook 10 at each profile; experiments load the same cached checkpoint.
* :func:`load_dual_mode`: a dual-mode checkpoint from a local directory
  (``from_pretrained(local_files_only=True)``), e.g. Nemotron-Labs-Diffusion on the gpu
  profile; the MASK id comes from the argument, the config or the saved tokenizer.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .models import DualModeLM
from .train import ModelConfig, TrainConfig, load_or_train

PRESETS: dict[str, tuple[ModelConfig, TrainConfig]] = {
    "smoke": (ModelConfig(vocab_size=512, hidden_size=64, num_layers=2, num_heads=4),
              TrainConfig(steps=30, batch_size=8, seq_len=128, width=15, widths=(3, 7, 15), decay=8.0,
                          max_files=20, eval_every=10, distill_steps=10, distill_prompts=16, distill_new_tokens=32)),
    "cpu": (ModelConfig(vocab_size=4096, hidden_size=256, num_layers=4, num_heads=4),
            TrainConfig(steps=550, batch_size=16, seq_len=256, width=31, widths=(3, 7, 15, 31), n_blocks=3,
                        p_full=0.75, decay=8.0, copy_share=0.03, eval_every=50,
                        distill_steps=300, distill_prompts=512, distill_new_tokens=128, distill_mix=0.75)),
}

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


def load_dual_mode(path: str | Path, mask_token_id: int | None = None, *, dtype: str = "float32",
                   device: str = "cpu"):
    """``(DualModeLM, tokenizer)`` from a local checkpoint directory.

    Raises:
        FileNotFoundError: the path does not exist or holds no ``config.json``.
        ValueError: no MASK token id (argument, ``config.mask_token_id`` or the tokenizer's
            ``mask_token``) or an unknown ``dtype``.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"checkpoint_path {str(path)!r} is not a local checkpoint directory "
                                f"(no config.json); weights are never downloaded, give a local path")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {list(DTYPES)}, got {dtype!r}")
    tokenizer = None
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError):
        pass
    hf_model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=DTYPES[dtype]).to(device)
    if mask_token_id is None:
        mask_token_id = getattr(hf_model.config, "mask_token_id", None)
    if mask_token_id is None and tokenizer is not None:
        mask_token_id = tokenizer.mask_token_id
    if mask_token_id is None:
        raise ValueError(f"no MASK token id for {str(path)!r}: pass mask_token_id, or save it as "
                         f"config.mask_token_id or as the tokenizer's mask_token")
    return DualModeLM(hf_model.eval(), int(mask_token_id)), tokenizer


def load_model(preset: str = "", checkpoint_path: str = "", *, dtype: str = "float32", device: str = "cpu",
               progress: bool = True):
    """``(DualModeLM, tokenizer)``: a real checkpoint if ``checkpoint_path`` is given, else the
    preset's model, trained here on first use and cached (notebook 10 trains the same one)."""
    if checkpoint_path:
        return load_dual_mode(checkpoint_path, dtype=dtype, device=device)
    if preset not in PRESETS:
        raise ValueError(f"model_preset must be one of {list(PRESETS)} (or give checkpoint_path), got {preset!r}")
    trained = load_or_train(*PRESETS[preset], progress=progress)
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {list(DTYPES)}, got {dtype!r}")
    hf_model = trained.hf_model.to(device=device, dtype=DTYPES[dtype]).eval()
    return DualModeLM(hf_model, trained.mask_token_id), trained.tokenizer
