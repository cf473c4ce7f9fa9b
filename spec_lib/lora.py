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

:func:`adapter_directory` checks an adapter saved by ``peft``'s ``save_pretrained`` without loading
anything, :func:`check_adapter_fits` checks it against a loaded model, and :func:`apply_adapter`
wraps a model with it (``peft`` is imported there, not when this module is).  The checkpoint
loaders call them: :func:`spec_lib.training.checkpoints.load_dual_mode` with ``adapter_path=``.
"""

from __future__ import annotations

import json
import os
import threading
import warnings
from contextlib import contextmanager
from pathlib import Path

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
        dtype = lora_a.weight.dtype             # inputs in the adapter's dtype (peft keeps it float32 over a
        if self.mode == "paper":                # bfloat16 base), the update added in the output's; else no-ops
            update = lora_b(lora_a(x.to(dtype))) * scaling
            return output + (update * proposal[None, :, None].to(update.dtype)).to(output.dtype)
        span = self._local.span                                       # only proposal rows computed
        if span is not None and x.shape[0] == 1 and lora_b.bias is None:  # in place on the slice: 3 kernels
            start, stop = span
            hidden = torch.nn.functional.linear(x[0, start:stop].to(dtype), lora_a.weight)
            output[0, start:stop].addmm_(hidden.to(output.dtype), lora_b.weight.t().to(output.dtype), alpha=scaling)
            return output
        index = self._local.index if span is None else torch.arange(*span, device=output.device)
        if index is None or not len(index):
            return output
        update = lora_b(lora_a(x[:, index].to(dtype))) * scaling
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


# ----- a peft adapter directory: checked, then applied to a loaded model -----------------------------

#: the weight files of an adapter saved by peft's ``save_pretrained`` (one of them)
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
_PEFT_PREFIX = "base_model.model."                 # peft's prefix of the adapted modules' names on disk
_LORA_KEYS = (".lora_A.weight", ".lora_B.weight", ".lora_B.bias")


@contextmanager
def quiet_peft():
    """peft 0.21 reads transformers' deprecated ``is_gradient_checkpointing`` when it wraps a
    model (a FutureWarning naming a site-packages path); only that warning is silenced."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def _tensor_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Name -> shape of each tensor of a safetensors file (its header only) or a torch pickle."""
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(path, framework="pt") as handle:
            return {key: tuple(handle.get_slice(key).get_shape()) for key in handle.keys()}
    return {key: tuple(value.shape) for key, value in torch.load(path, map_location="cpu", weights_only=True).items()}


def adapter_directory(adapter_path, argument: str = "adapter_path") -> tuple[Path, dict[str, tuple[int, int]]]:
    """Check a ``peft`` adapter directory before any model is loaded (App. F.2's adapter: plain
    LoRA on linear layers): ``(path, modules)``, ``modules`` mapping each adapted module's name in
    the base model to the ``(out_features, in_features)`` its weights expect.

    Raises:
        TypeError: ``adapter_path`` is not a str or a path.
        FileNotFoundError: not a directory, no ``adapter_config.json``, or no weights
            (:data:`ADAPTER_WEIGHTS`).
        ValueError: an empty path, a config that is not a JSON object, or an adapter the
            proposal-row hooks cannot gate: another ``peft_type`` than ``"LORA"``, DoRA,
            ``modules_to_save`` (whole modules, applied to every row), weights of other layers than
            linear ones, or no LoRA weights.
    """
    if not isinstance(adapter_path, (str, os.PathLike)):
        raise TypeError(f"{argument} must be a local adapter directory (str or Path) or None, got {adapter_path!r}")
    if not str(adapter_path):
        raise ValueError(f"{argument} is empty: give the local directory of a peft adapter, or None for no adapter")
    path = Path(adapter_path)
    named = f"{argument} {str(path)!r}"
    if not path.is_dir():
        raise FileNotFoundError(f"{named} is not a directory: give the local directory peft's save_pretrained "
                                f"wrote (adapter_config.json and its weights; adapters are never downloaded)")
    if not (path / "adapter_config.json").is_file():
        raise FileNotFoundError(f"{named} holds no adapter_config.json (a peft adapter saved with save_pretrained)")
    try:
        config = json.loads((path / "adapter_config.json").read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{named}: adapter_config.json is not valid JSON ({err})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{named}: adapter_config.json is not a JSON object")
    if config.get("peft_type") != "LORA":
        raise ValueError(f"{named} is a peft_type {config.get('peft_type')!r} adapter; a proposal-only adapter is "
                         f"plain LoRA (peft_type 'LORA')")
    if config.get("use_dora"):
        raise ValueError(f"{named} uses DoRA (use_dora true); the proposal-row hooks apply plain LoRA updates "
                         f"(B A x * scaling) only")
    if config.get("modules_to_save"):
        raise ValueError(f"{named} also saves whole modules (modules_to_save {config['modules_to_save']}), which "
                         f"would apply to every row, the verifier's included; only LoRA layers can be gated per row")
    weights = next((path / name for name in ADAPTER_WEIGHTS if (path / name).is_file()), None)
    if weights is None:
        raise FileNotFoundError(f"{named} has an adapter_config.json but no weights: expected one of "
                                f"{list(ADAPTER_WEIGHTS)} (peft's save_pretrained writes them)")
    shapes = _tensor_shapes(weights)
    other = [key for key in shapes if not key.endswith(_LORA_KEYS)]
    if other:
        raise ValueError(f"{named} holds weights the proposal-row hooks do not apply (LoRA on linear layers only), "
                         f"e.g. {other[:2]}")
    modules = {}
    for key, a in shapes.items():
        if not key.endswith(".lora_A.weight"):
            continue
        stem = key[: -len(".lora_A.weight")]
        b = shapes.get(stem + ".lora_B.weight")
        name = stem[len(_PEFT_PREFIX):] if stem.startswith(_PEFT_PREFIX) else stem
        if b is None or len(a) != 2 or len(b) != 2:
            raise ValueError(f"{named}: {name} has no 2-d lora_A and lora_B weights (LoRA of a linear layer)")
        modules[name] = (b[0], a[1])
    if not modules:
        raise ValueError(f"{named} holds no LoRA weights")
    return path, modules


def check_adapter_fits(hf_model, modules: dict[str, tuple[int, int]], what: str) -> None:
    """Refuse an adapter (``modules`` from :func:`adapter_directory`) that does not fit
    ``hf_model``: a module it adapts is missing, is not a linear layer, or has other shapes.
    ``what`` names both sides in the message."""
    lacking, wrong = [], []
    for name, (out_features, in_features) in modules.items():
        try:
            module = hf_model.get_submodule(name)
        except AttributeError:
            lacking.append(name)
            continue
        if not isinstance(module, torch.nn.Linear):
            wrong.append(f"{name} is a {type(module).__name__}, not a linear layer")
        elif (module.in_features, module.out_features) != (in_features, out_features):
            wrong.append(f"{name} maps {module.in_features} -> {module.out_features} features, the adapter "
                         f"{in_features} -> {out_features}")
    if lacking:
        raise ValueError(f"{what}: the model lacks {len(lacking)} of the {len(modules)} modules the adapter adapts, "
                         f"e.g. {lacking[:3]} (an adapter trained for another base model?)")
    if wrong:
        more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
        raise ValueError(f"{what}: {wrong[0]}{more} (an adapter trained for another base model?)")


def apply_adapter(hf_model, adapter_path, mask_token_id: int, mode: str = "lean", *,
                  what: str | None = None) -> ProposalLoRALM:
    """``hf_model`` (a transformers causal LM, changed in place: ``peft`` wraps its layers) with the
    ``peft`` LoRA adapter saved in ``adapter_path``, as a :class:`ProposalLoRALM` in ``mode``
    (seed 000, App. F.2: the update reaches proposal rows only).  The directory and its fit are
    checked first (:func:`adapter_directory`, :func:`check_adapter_fits`; ``what`` names the
    pairing in their messages)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {list(MODES)}, got {mode!r}")
    path, modules = adapter_directory(adapter_path)
    check_adapter_fits(hf_model, modules, what or f"adapter_path {str(path)!r} does not fit the model")
    from peft import PeftModel

    with quiet_peft():
        peft_model = PeftModel.from_pretrained(hf_model, path, is_trainable=False)
    return ProposalLoRALM(peft_model, mask_token_id, mode)


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
