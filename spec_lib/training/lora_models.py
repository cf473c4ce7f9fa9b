"""Loading a causal LM plus a proposal-only LoRA adapter for decoding (seed 000, App. F.2).

:func:`load_proposal_lora` takes any local causal LM checkpoint and a ``peft`` adapter directory
and returns a :class:`~spec_lib.lora.ProposalLoRALM`: the checkpoint's AR mode verifies, the
adapter drafts, so every schedule's greedy output is the checkpoint's own AR output.
:func:`load_lora_preset` does the same for the AR base and adapter trained here
(:mod:`spec_lib.training.proposal_lora`, notebook 17).
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from pathlib import Path

from ..lora import MODES, ProposalLoRALM
from ..models import DualModeLM
from .checkpoints import load_dual_mode


@contextmanager
def _quiet_peft():
    """peft 0.21 reads transformers' deprecated ``is_gradient_checkpointing`` when it wraps a
    model (a FutureWarning naming a site-packages path); only that warning is silenced."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def load_proposal_lora(path: str | Path, adapter_path: str | Path, *, mode: str = "lean",
                       mask_token_id: int | None = None, dtype: str = "float32", device: str = "cpu",
                       trust_remote_code: bool = False):
    """``(ProposalLoRALM, tokenizer)`` from a local causal LM and a local ``peft`` adapter directory.

    The checkpoint is read by :func:`~spec_lib.training.checkpoints.load_dual_mode` (same
    arguments, same errors); the MASK id comes from the argument, ``config.mask_token_id`` or the
    tokenizer's ``mask_token``.

    Raises:
        FileNotFoundError: ``adapter_path`` is not a directory holding ``adapter_config.json``.
        ValueError: an unknown ``mode`` (:data:`spec_lib.lora.MODES`), or what ``load_dual_mode`` raises.
    """
    from peft import PeftModel

    if mode not in MODES:
        raise ValueError(f"mode must be one of {list(MODES)}, got {mode!r}")
    adapter = Path(adapter_path)
    if not (adapter / "adapter_config.json").is_file():
        raise FileNotFoundError(f"adapter_path {str(adapter_path)!r} holds no adapter_config.json (a peft adapter "
                                f"saved with save_pretrained)")
    dual, tokenizer = load_dual_mode(path, mask_token_id, dtype=dtype, device=device,
                                     trust_remote_code=trust_remote_code)
    with _quiet_peft():
        peft_model = PeftModel.from_pretrained(dual.hf_model, adapter, is_trainable=False)
    return ProposalLoRALM(peft_model, dual.mask_token_id, mode), tokenizer


def load_lora_preset(preset: str, *, dtype: str = "float32", device: str = "cpu", progress: bool = True):
    """``(models, tokenizer, trained)``: the preset's AR base and adapter (trained on first use,
    :mod:`spec_lib.training.proposal_lora`) as ``{"base": DualModeLM, "paper": ProposalLoRALM,
    "lean": ProposalLoRALM}``, all three over one set of weights (the base drafts from an untrained
    MASK; each adapter mode is active only inside its own model's calls), the tokenizer and the
    :class:`~spec_lib.training.proposal_lora.TrainedLoRA` record."""
    from peft import PeftModel

    from .checkpoints import _dtype
    from .proposal_lora import load_or_train

    trained = load_or_train(preset, progress=progress)
    base = trained.base.to(device=device, dtype=_dtype(dtype))
    with _quiet_peft():
        peft_model = PeftModel.from_pretrained(base, trained.adapter_path, is_trainable=False)
    models = {mode: ProposalLoRALM(peft_model, trained.mask_token_id, mode) for mode in MODES}
    return {"base": DualModeLM(peft_model.get_base_model(), trained.mask_token_id), **models}, trained.tokenizer, trained
