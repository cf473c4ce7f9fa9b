"""Proposal-only LoRA (seed 000, App. F.2): an adapter that turns a causal LM into a drafter
while its AR verifier stays exactly the base model.

App. F.2 trains a low-rank adapter on the attention output projections with the diffusion
objective on proposal rows only, base weights frozen; inside a packed call the update is
computed for every row and applied only to the proposal rows (Packed-SS computes 2B rows and
applies B, Quadratic-SS computes B(B + 1) and applies B^2; Linear-SS runs its drafting call
with the adapter and its verify call without).  Verifier rows therefore see exactly the base
model, so greedy outputs equal the base model's AR outputs.

:class:`ProposalAdapter` applies a ``peft`` LoRA adapter (its weights, its ``scaling``) per row
of a call, in one of two ways (:data:`MODES`):

* ``"paper"``: App. F.2's: the update ``B A x * scaling`` is computed for every row of a call
  that has proposal rows, then multiplied by the proposal-row mask;
* ``"lean"``: the update is computed only for the proposal rows and added to them in place.  In
  every layout here the proposal rows are one contiguous run after the causal stream, so this
  is a slice (no gather, no copy) and one fused ``addmm_`` (the add and ``scaling`` folded in):
  three kernels per layer instead of the paper variant's five.  A non-contiguous row set falls
  back to gather + ``index_add_``.

The hooks serve inference (the model in eval mode: LoRA dropout is not applied).

``peft`` itself computes the base layer only (its adapter layers are disabled); the adapter's
update is added by a forward hook on each LoRA layer.  :class:`ProposalLoRALM` is a
:class:`~spec_lib.models.DualModeLM` whose proposal rows (segment > 0 in the layout) get the
update, so every schedule runs on it unchanged.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import torch

from . import masks
from .models import DualModeLM

#: how the adapter's update is computed inside a call (see the module docstring)
MODES = ("paper", "lean")


def lora_layers(peft_model) -> list:
    """The ``peft`` LoRA layers of a model (modules with ``lora_A`` / ``lora_B`` dicts)."""
    from peft.tuners.lora import LoraLayer

    return [m for m in peft_model.modules() if isinstance(m, LoraLayer)]


class ProposalAdapter:
    """Row-gated application of a ``peft`` LoRA adapter (see the module docstring).

    Args:
        peft_model: a ``peft.PeftModel`` holding one LoRA adapter (``get_peft_model`` or
            ``PeftModel.from_pretrained``); its adapter layers are disabled, so the model alone
            computes the base model, and :meth:`applied_to` adds the update to chosen rows.
        mode: ``"paper"`` or ``"lean"``.
    """

    def __init__(self, peft_model, mode: str = "lean") -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {list(MODES)}, got {mode!r}")
        layers = lora_layers(peft_model)
        if not layers:
            raise ValueError("peft_model holds no LoRA layer (build it with peft.get_peft_model(model, LoraConfig(...)) "
                             "or peft.PeftModel.from_pretrained)")
        self.adapter_name = peft_model.active_adapter
        if any(layer.use_dora.get(self.adapter_name, False) for layer in layers):
            raise ValueError("ProposalAdapter applies plain LoRA updates (B A x * scaling); this adapter uses DoRA "
                             "(LoraConfig(use_dora=True)), which it cannot gate per row")
        self.mode = mode
        self.peft_model = peft_model
        self.layers = layers
        self._local = threading.local()
        peft_model.base_model.disable_adapter_layers()          # peft computes the base layer only
        self._handles = [layer.register_forward_hook(self._hook) for layer in layers]

    @contextmanager
    def applied_to(self, proposal: torch.Tensor):
        """Within the block, forward calls add the update to rows where ``proposal`` ``(rows,)``
        is True (this thread only)."""
        self._local.proposal = proposal
        self._local.index = self._local.span = None
        if self.mode == "lean":
            index = proposal.nonzero()[:, 0]
            first, count = (int(index[0]), len(index)) if len(index) else (0, 0)
            if count and int(index[-1]) - first + 1 == count:         # one contiguous run: a slice
                self._local.span = (first, first + count)
            else:
                self._local.index = index
        try:
            yield
        finally:
            self._local.proposal = self._local.index = self._local.span = None

    def _hook(self, module, args, output):
        proposal = getattr(self._local, "proposal", None)
        if proposal is None:
            return output
        x = args[0]                                                   # (1, rows, d_in)
        lora_a = module.lora_A[self.adapter_name]
        lora_b = module.lora_B[self.adapter_name]
        scaling = module.scaling[self.adapter_name]
        if self.mode == "paper":                                      # every row computed, proposal rows applied
            update = lora_b(lora_a(x)) * scaling
            return output + update * proposal[None, :, None].to(update.dtype)
        span = self._local.span                                       # only proposal rows computed
        if span is not None and x.shape[0] == 1 and lora_b.bias is None:  # in place on the slice: 3 kernels
            start, stop = span
            hidden = torch.nn.functional.linear(x[0, start:stop], lora_a.weight)
            output[0, start:stop].addmm_(hidden.to(output.dtype), lora_b.weight.t().to(output.dtype), alpha=scaling)
            return output
        index = self._local.index if span is None else torch.arange(*span, device=output.device)
        if index is None or not len(index):
            return output
        update = lora_b(lora_a(x[:, index])) * scaling
        return output.index_add_(1, index, update.to(output.dtype))

    def remove(self) -> None:
        """Detach the hooks and re-enable peft's own adapter layers."""
        for handle in self._handles:
            handle.remove()
        self.peft_model.base_model.enable_adapter_layers()


class ProposalLoRALM(DualModeLM):
    """A :class:`~spec_lib.models.DualModeLM` over a causal LM plus a proposal-only LoRA adapter:
    the update reaches only proposal rows (segment > 0), so verify rows are the base model's.

    Args:
        peft_model: the base causal LM with its LoRA adapter (a ``peft.PeftModel``).
        mask_token_id: the MASK id (in the base model's vocabulary).
        mode: ``"paper"`` or ``"lean"`` (:data:`MODES`).
    """

    def __init__(self, peft_model, mask_token_id: int, mode: str = "lean") -> None:
        adapter = ProposalAdapter(peft_model, mode)
        super().__init__(peft_model.get_base_model(), mask_token_id)
        self.adapter = adapter

    @property
    def mode(self) -> str:
        return self.adapter.mode

    def forward_rows(self, layout: masks.Layout, keep_rows: torch.Tensor | int):
        proposal = layout.segment > 0
        if masks.call_kind(layout.kind).plain_causal:                 # verify-only: the base model
            return super().forward_rows(layout, keep_rows)
        with self.adapter.applied_to(proposal):
            return super().forward_rows(layout, keep_rows)


def adapter_rows(kind: str, m: int, width: int, mode: str) -> dict[str, int]:
    """Table 5's row counts of one steady-state call: ``selected`` (proposal rows, where the
    update is applied) and ``evaluated`` (rows whose update is computed: every row of a call with
    proposal rows in ``paper`` mode, the proposal rows in ``lean`` mode)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {list(MODES)}, got {mode!r}")
    spec = masks.call_kind(kind)
    selected = spec.n_blocks(m) * spec.block_rows(width) if not spec.plain_causal else 0
    total = spec.rows(0, m, width)
    evaluated = (total if selected else 0) if mode == "paper" else selected
    return {"rows": total, "selected": selected, "evaluated": evaluated}
