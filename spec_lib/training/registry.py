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
``any_order``      an any-order model (seed 000, App. C); ``name=`` picks it   :class:`~spec_lib.training.any_order.TrainedAnyOrder`
=================  =========================================================  ============================

Real checkpoints on local paths load with ``load("target", checkpoint_path=...)`` (optionally
``adapter_path=``) or :func:`spec_lib.training.checkpoints.load_drafter`; nothing is downloaded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .checkpoints import DTYPES

#: model kinds :func:`load` knows
KINDS = ("target", "lora", "deer", "dedit", "baselines", "frozen_editors", "any_order")


@dataclass(frozen=True)
class _Kind:
    load: Callable           # (preset, dtype, device, progress, **options) -> models
    key: Callable            # (preset, **options) -> str
    presets: Callable        # () -> the presets it has
    dtypes: tuple[str, ...]  # dtypes it can load in
    options: tuple[str, ...] = ()      # options of load
    key_options: tuple[str, ...] = ()  # options of checkpoint_key


def _target(preset, dtype, device, progress, checkpoint_path="", adapter_path="", adapter_mode="lean",
            trust_remote_code=False):
    from .checkpoints import load_model

    return load_model(preset, checkpoint_path, adapter_path=adapter_path, adapter_mode=adapter_mode, dtype=dtype,
                      device=device, progress=progress, trust_remote_code=trust_remote_code)


def _target_key(preset):
    from .checkpoints import model_key

    return model_key(preset)


def _target_presets():
    from .presets import PRESETS

    return list(PRESETS)


def _lora(preset, dtype, device, progress):
    from .lora_models import load_lora_preset

    return load_lora_preset(preset, dtype=dtype, device=device, progress=progress)


def _lora_key(preset):
    from .proposal_lora import lora_key

    return lora_key(preset)


def _lora_presets():
    from .proposal_lora import LORA_PRESETS

    return list(LORA_PRESETS)


def _deer(preset, dtype, device, progress):
    from .deer_models import load_deer

    return load_deer(preset, dtype=dtype, device=device, progress=progress)


def _deer_key(preset):
    from .deer import D2A_PRESETS, deer_cache_key

    return deer_cache_key(D2A_PRESETS[preset])


def _deer_presets():
    from .deer import D2A_PRESETS

    return list(D2A_PRESETS)


def _dedit(preset, dtype, device, progress):
    from .block_drafters import load_block_drafters

    return load_block_drafters(preset, progress=progress, device=device)


def _dedit_key(preset):
    from .block_drafters import drafter_key

    return drafter_key(preset)


def _dedit_presets():
    from .block_drafters import DEDIT_PRESETS

    return list(DEDIT_PRESETS)


def _baselines(preset, dtype, device, progress):
    from .baseline_drafters import load_baselines

    return load_baselines(preset, progress=progress, device=device)


def _baselines_key(preset):
    from .baseline_drafters import baseline_key

    return baseline_key(preset)


def _baselines_presets():
    from .baseline_drafters import BASELINE_PRESETS

    return list(BASELINE_PRESETS)


def _frozen_editors(preset, dtype, device, progress):
    from .frozen_editor_drafters import load_frozen_editors

    return load_frozen_editors(preset, progress=progress, device=device)


def _frozen_editors_key(preset):
    from .frozen_editor_drafters import editors_key

    return editors_key(preset)


def _frozen_editors_presets():
    from .frozen_editor_drafters import FROZEN_EDITOR_PRESETS

    return list(FROZEN_EDITOR_PRESETS)


def _any_order(preset, dtype, device, progress, name):
    from .any_order import load_or_train

    trained = load_or_train(preset, name, progress=progress)
    trained.model.to(device)
    return trained


def _any_order_key(preset, name):
    from .any_order import checkpoint_key as any_order_key

    return any_order_key(preset, name)


def _any_order_presets():
    from .any_order import CONFIGS

    return list(CONFIGS)


_KINDS: dict[str, _Kind] = {
    "target": _Kind(_target, _target_key, _target_presets, tuple(DTYPES),
                    ("checkpoint_path", "adapter_path", "adapter_mode", "trust_remote_code")),
    "lora": _Kind(_lora, _lora_key, _lora_presets, tuple(DTYPES)),
    "deer": _Kind(_deer, _deer_key, _deer_presets, tuple(DTYPES)),
    "dedit": _Kind(_dedit, _dedit_key, _dedit_presets, ("float32",)),
    "baselines": _Kind(_baselines, _baselines_key, _baselines_presets, ("float32",)),
    "frozen_editors": _Kind(_frozen_editors, _frozen_editors_key, _frozen_editors_presets, ("float32",)),
    "any_order": _Kind(_any_order, _any_order_key, _any_order_presets, ("float32",), ("name",), ("name",)),
}
assert tuple(_KINDS) == KINDS


def _check(kind, preset, options: dict, allowed: str, dtype: str | None = None) -> _Kind:
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {list(KINDS)}, got {kind!r}")
    spec = _KINDS[kind]
    names = getattr(spec, allowed)
    unknown = sorted(set(options) - set(names))
    if unknown:
        raise TypeError(f"kind {kind!r} takes the options {list(names)}, got {unknown}")
    if not (kind == "target" and options.get("checkpoint_path")) and preset not in spec.presets():
        raise ValueError(f"preset must be one of {spec.presets()} for kind {kind!r}, got {preset!r}")
    if kind == "any_order":
        from .any_order import CONFIGS

        if options.get("name") not in CONFIGS[preset]:
            raise ValueError(f"name must be one of {list(CONFIGS[preset])} for kind 'any_order' at preset "
                             f"{preset!r}, got {options.get('name')!r}")
    if dtype is not None and dtype not in spec.dtypes:
        raise ValueError(f"dtype must be one of {list(spec.dtypes)} for kind {kind!r} (a name, not a torch.dtype), "
                         f"got {dtype!r}")
    return spec


def load(kind: str, preset: str = "cpu", *, dtype: str = "float32", device: str = "cpu", progress: bool = True,
         **options):
    """The models of ``kind`` at ``preset`` (see the module docstring for what each returns),
    from the committed weights or the cache, trained on first use; ``options`` are the kind's own
    (``target``: ``checkpoint_path``, ``adapter_path``, ``adapter_mode``, ``trust_remote_code``;
    ``any_order``: ``name``).  Every argument is checked before anything is loaded or trained."""
    spec = _check(kind, preset, options, "options", dtype)
    return spec.load(preset, dtype, device, progress, **options)


def checkpoint_key(kind: str, preset: str = "cpu", **options) -> str:
    """The key the current code computes for the models of ``kind`` at ``preset`` (what results
    record, and what :func:`load` looks up)."""
    return _check(kind, preset, options, "key_options").key(preset, **options)


__all__ = ["KINDS", "checkpoint_key", "load"]
