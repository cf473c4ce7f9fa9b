"""One loader and one key convention for every model an experiment uses.

``load(kind, preset)`` returns the models of a kind at a preset (the committed weights when the
current code's training key matches them, else trained on first use and cached:
:mod:`spec_lib.training.cache`), and ``checkpoint_key(kind, preset)`` the key the current code
computes for them, which results record.  ``dtype`` is always a name (:data:`DTYPES`) and the
preset always ``preset``.

=================  =========================================================  ============================
kind               what (paper)                                               returns
=================  =========================================================  ============================
``target``         the self-speculative dual-mode model (seed 000, Sec. 2.2)   ``(DualModeLM, tokenizer)``
``lora``           an AR base with a proposal-only LoRA adapter (seed 000,     ``(models, tokenizer, trained)``
                   App. F.2)
``deer``           DEER's frozen target and its drafters (seed 001)            :class:`~spec_lib.training.deer_models.DeerModels`
``dedit``          DFlash / DEdit drafters on the target (seed 002)            :class:`~spec_lib.training.block_drafters.BlockDrafters`
``baselines``      Domino and DSpark on the DFlash backbone (seed 002)         :class:`~spec_lib.training.baseline_drafters.Baselines`
``frozen_editors`` editors of a frozen DFlash proposal (seed 002, Table 2(b))  :class:`~spec_lib.training.frozen_editor_drafters.FrozenEditors`
``feature_heads``  Medusa, Hydra and EAGLE-3 on the target's features (seed     :class:`~spec_lib.training.feature_head_drafters.FeatureHeadDrafters`
                   001's baselines)
``any_order``      an any-order model (seed 000, App. C); ``name=`` picks it   :class:`~spec_lib.training.any_order.TrainedAnyOrder`
=================  =========================================================  ============================

Real checkpoints on local paths load with ``load("target", checkpoint_path=...)`` (optionally
``adapter_path=``) or :func:`spec_lib.training.checkpoints.load_drafter`; nothing is downloaded.

The per-kind modules are named in :data:`MODULES` and imported by name when a kind is used, so
this module's own imports reach none of them: a result depends on the models of the kinds its
notebook names (``load("deer", ...)``; :mod:`spec_lib.notebook.versions` reads those names), not on
every model the registry can load.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

#: model kinds :func:`load` knows, and the modules (their loader, key and presets) behind each
MODULES: dict[str, tuple[str, ...]] = {
    "target": ("spec_lib.training.checkpoints",),
    "lora": ("spec_lib.training.lora_models", "spec_lib.training.proposal_lora"),
    "deer": ("spec_lib.training.deer_models", "spec_lib.training.deer"),
    "dedit": ("spec_lib.training.block_drafters",),
    "baselines": ("spec_lib.training.baseline_drafters",),
    "frozen_editors": ("spec_lib.training.frozen_editor_drafters",),
    "feature_heads": ("spec_lib.training.feature_head_drafters",),
    "any_order": ("spec_lib.training.any_order",),
}
KINDS = tuple(MODULES)


def _attr(kind: str, name: str):
    """``name`` from the first of ``kind``'s modules that has it."""
    for module in MODULES[kind]:
        found = getattr(importlib.import_module(module), name, None)
        if found is not None:
            return found
    raise AttributeError(f"none of {list(MODULES[kind])} has {name!r}")


@dataclass(frozen=True)
class _Kind:
    load: Callable                     # (preset, dtype, device, progress, **options) -> models
    key: Callable                      # (preset, **key_options) -> str
    presets: str                       # the name of its presets mapping
    any_dtype: bool                    # loads in every dtype of checkpoints.DTYPES (else float32 only)
    options: tuple[str, ...] = ()      # options of load
    key_options: tuple[str, ...] = ()  # options of checkpoint_key


def _target(preset, dtype, device, progress, checkpoint_path="", adapter_path="", adapter_mode="lean",
            trust_remote_code=False):
    return _attr("target", "load_model")(preset, checkpoint_path, adapter_path=adapter_path, adapter_mode=adapter_mode,
                                         dtype=dtype, device=device, progress=progress,
                                         trust_remote_code=trust_remote_code)


def _lora(preset, dtype, device, progress):
    return _attr("lora", "load_lora_preset")(preset, dtype=dtype, device=device, progress=progress)


def _deer(preset, dtype, device, progress):
    return _attr("deer", "load_deer")(preset, dtype=dtype, device=device, progress=progress)


def _deer_key(preset):
    return _attr("deer", "deer_cache_key")(_attr("deer", "D2A_PRESETS")[preset])


def _float32_loader(kind: str, name: str) -> Callable:
    """The loader of a kind trained and loaded in float32 only: ``name(preset, progress=, device=)``."""
    def load(preset, dtype, device, progress):
        return _attr(kind, name)(preset, progress=progress, device=device)
    return load


def _key(kind: str, name: str) -> Callable:
    def key(preset, **options):
        return _attr(kind, name)(preset, *options.values())
    return key


def _any_order(preset, dtype, device, progress, name):
    trained = _attr("any_order", "load_or_train")(preset, name, progress=progress)
    trained.model.to(device)
    return trained


_KINDS: dict[str, _Kind] = {
    "target": _Kind(_target, _key("target", "model_key"), "PRESETS", True,
                    ("checkpoint_path", "adapter_path", "adapter_mode", "trust_remote_code")),
    "lora": _Kind(_lora, _key("lora", "lora_key"), "LORA_PRESETS", True),
    "deer": _Kind(_deer, _deer_key, "D2A_PRESETS", True),
    "dedit": _Kind(_float32_loader("dedit", "load_block_drafters"), _key("dedit", "drafter_key"), "DEDIT_PRESETS",
                   False),
    "baselines": _Kind(_float32_loader("baselines", "load_baselines"), _key("baselines", "baseline_key"),
                       "BASELINE_PRESETS", False),
    "frozen_editors": _Kind(_float32_loader("frozen_editors", "load_frozen_editors"),
                            _key("frozen_editors", "editors_key"), "FROZEN_EDITOR_PRESETS", False),
    "feature_heads": _Kind(_float32_loader("feature_heads", "load_feature_heads"),
                           _key("feature_heads", "feature_heads_key"), "FEATURE_HEAD_PRESETS", False),
    "any_order": _Kind(_any_order, _key("any_order", "checkpoint_key"), "CONFIGS", False, ("name",), ("name",)),
}
assert tuple(_KINDS) == KINDS


def presets(kind: str) -> list[str]:
    """The presets of ``kind``."""
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {list(KINDS)}, got {kind!r}")
    return list(_attr(kind, _KINDS[kind].presets))


def _check(kind, preset, options: dict, allowed: str, dtype: str | None = None) -> _Kind:
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {list(KINDS)}, got {kind!r}")
    spec = _KINDS[kind]
    names = getattr(spec, allowed)
    unknown = sorted(set(options) - set(names))
    if unknown:
        raise TypeError(f"kind {kind!r} takes the options {list(names)}, got {unknown}")
    if preset not in presets(kind):
        raise ValueError(f"preset must be one of {presets(kind)} for kind {kind!r}, got {preset!r}")
    if kind == "any_order":
        names = list(_attr("any_order", "CONFIGS")[preset])
        if options.get("name") not in names:
            raise ValueError(f"name must be one of {names} for kind 'any_order' at preset {preset!r}, "
                             f"got {options.get('name')!r}")
    if dtype is not None:
        allowed_dtypes = list(_attr("target", "DTYPES")) if spec.any_dtype else ["float32"]
        if dtype not in allowed_dtypes:
            raise ValueError(f"dtype must be one of {allowed_dtypes} for kind {kind!r} (a name, not a torch.dtype), "
                             f"got {dtype!r}")
    return spec


def load(kind: str, preset: str = "cpu", *, dtype: str = "float32", device: str = "cpu", progress: bool = True,
         **options):
    """The models of ``kind`` at ``preset`` (see the module docstring for what each returns),
    from the committed weights or the cache, trained on first use; ``options`` are the kind's own
    (``target``: ``checkpoint_path``, ``adapter_path``, ``adapter_mode``, ``trust_remote_code``,
    with which the preset is not used but must still be one; ``any_order``: ``name``).  Every
    argument is checked before anything is loaded or trained."""
    spec = _check(kind, preset, options, "options", dtype)
    return spec.load(preset, dtype, device, progress, **options)


def checkpoint_key(kind: str, preset: str = "cpu", **options) -> str:
    """The key the current code computes for the models of ``kind`` at ``preset`` (what results
    record, and what :func:`load` looks up)."""
    return _check(kind, preset, options, "key_options").key(preset, **options)


__all__ = ["KINDS", "MODULES", "checkpoint_key", "load", "presets"]
