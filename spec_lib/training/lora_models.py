"""Loading a causal LM plus a proposal-only LoRA adapter for decoding (seed 000, App. F.2).

There is one loader of a checkpoint plus an adapter:
:func:`spec_lib.training.checkpoints.load_dual_mode` with ``adapter_path=``, which checks the
adapter directory and applies it with :func:`spec_lib.lora.apply_adapter`; the result is a
:class:`~spec_lib.lora.ProposalLoRALM`: the checkpoint's AR mode verifies, the adapter drafts, so
every schedule's greedy output is the checkpoint's own AR output.  Here:

* :func:`load_proposal_lora`: that call under this module's argument names;
* :func:`load_lora_checkpoint`: a checkpoint plus an adapter as notebook 17's three models
  (:func:`every_mode`), e.g. on the gpu profile;
* :func:`load_lora_preset`: the same for the AR base and adapter trained here
  (:mod:`spec_lib.training.proposal_lora`, notebook 17).
"""

from __future__ import annotations

from pathlib import Path

from ..lora import MODES, ProposalLoRALM, apply_adapter
from ..models import DualModeLM
from .checkpoints import load_dual_mode


def load_proposal_lora(path: str | Path, adapter_path: str | Path, *, mode: str = "lean",
                       mask_token_id: int | None = None, dtype: str = "float32", device: str = "cpu",
                       trust_remote_code: bool = False):
    """``(ProposalLoRALM, tokenizer)`` from a local causal LM and a local ``peft`` adapter directory:
    ``load_dual_mode(path, mask_token_id, adapter_path=adapter_path, adapter_mode=mode, ...)``
    (:func:`~spec_lib.training.checkpoints.load_dual_mode`: same arguments, same errors)."""
    return load_dual_mode(path, mask_token_id, adapter_path=adapter_path, adapter_mode=mode, dtype=dtype,
                          device=device, trust_remote_code=trust_remote_code)


def every_mode(model: ProposalLoRALM) -> dict:
    """``{"base": DualModeLM, "paper": ProposalLoRALM, "lean": ProposalLoRALM}`` over ``model``'s
    weights (``model`` itself is its own mode's entry): the base drafts from MASK rows without the
    adapter, each adapter mode is active only inside its own model's calls, and sharing one set of
    weights keeps the base's logits bitwise comparable (copies can differ in the last bit on CPU)."""
    modes = {mode: model if mode == model.mode else ProposalLoRALM(model.adapter.peft_model, model.mask_token_id, mode)
             for mode in MODES}
    return {"base": DualModeLM(model.hf_model, model.mask_token_id), **modes}


def load_lora_checkpoint(path: str | Path, adapter_path: str | Path, *, mask_token_id: int | None = None,
                         dtype: str = "float32", device: str = "cpu", trust_remote_code: bool = False):
    """``(models, tokenizer)``: a local checkpoint plus a proposal-only adapter trained elsewhere
    (:func:`~spec_lib.training.checkpoints.load_dual_mode`) as :func:`every_mode`'s three models."""
    model, tokenizer = load_dual_mode(path, mask_token_id, adapter_path=adapter_path, adapter_mode="lean",
                                      dtype=dtype, device=device, trust_remote_code=trust_remote_code)
    return every_mode(model), tokenizer


def load_lora_preset(preset: str, *, dtype: str = "float32", device: str = "cpu", progress: bool = True):
    """``(models, tokenizer, trained)``: the preset's AR base and adapter (trained on first use,
    :mod:`spec_lib.training.proposal_lora`) as :func:`every_mode`'s three models, the tokenizer and
    the :class:`~spec_lib.training.proposal_lora.TrainedLoRA` record."""
    from .checkpoints import _dtype
    from .proposal_lora import load_or_train

    trained = load_or_train(preset, progress=progress)
    base = trained.base.to(device=device, dtype=_dtype(dtype))
    model = apply_adapter(base, trained.adapter_path, trained.mask_token_id, "lean")
    return every_mode(model), trained.tokenizer, trained
