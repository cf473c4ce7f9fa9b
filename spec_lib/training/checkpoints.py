"""Which models an experiment uses: presets trained here (on first use), or real checkpoints
on local paths; wrapped for decoding.

* :func:`load_model`: the self-speculative model of a preset
  (:data:`spec_lib.training.presets.PRESETS`), or a local dual-mode checkpoint;
* :func:`load_dual_mode`: a dual-mode checkpoint from a local directory
  (``from_pretrained(local_files_only=True)``), e.g. Nemotron-Labs-Diffusion on the gpu
  profile; the MASK id comes from the argument, the config or the saved tokenizer; with
  ``adapter_path=`` the checkpoint plus a proposal-only ``peft`` LoRA adapter (seed 000,
  App. F.2: the adapter drafts, the checkpoint's AR mode verifies), a
  :class:`~spec_lib.lora.ProposalLoRALM`; ``peft`` is imported only then;
* :func:`load_drafter`: a separate drafter (DEER-style diffusion, or AR) from a local directory;
* DEER's frozen target and drafters: :func:`spec_lib.training.deer_models.load_deer` (kept apart
  so that DEER's training code is not in the import closure of the notebooks that never load it).

Local checkpoints that ship their own modelling code (``auto_map``) load only with
``trust_remote_code=True``; a directory without ``config.json`` or weights is refused with a
message naming what is missing, and so is an adapter directory that is not a plain LoRA
adapter of this checkpoint (checked before the checkpoint is read, and its shapes once it is).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..drafters import ARDrafter, DiffusionDrafter
from ..lora import MODES, adapter_directory, apply_adapter
from ..models import DualModeLM
from ..schedules.validation import is_int
from .cache import preset_config
from .presets import ABLATIONS, PRESETS
from .self_speculative import checkpoint_key, load_or_distill_variant, load_or_train

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


def _dtype(dtype: str) -> torch.dtype:
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {list(DTYPES)}, got {dtype!r}")
    return DTYPES[dtype]


WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


def _local_lm(path: str | Path, *, dtype: str, device: str, trust_remote_code: bool, argument: str):
    """``(hf_model, tokenizer or None)`` from a local checkpoint directory, checked first: the
    directory, its ``config.json`` and weights, and whether it ships its own modelling code
    (``auto_map``), which runs only with ``trust_remote_code=True``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not isinstance(trust_remote_code, bool):
        raise TypeError(f"trust_remote_code must be True or False, got {trust_remote_code!r}")
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{argument} {str(path)!r} is not a local checkpoint directory "
                                f"(no config.json); weights are never downloaded, give a local path")
    if not any((path / name).is_file() for name in WEIGHT_FILES):
        raise FileNotFoundError(f"{argument} {str(path)!r} has a config.json but no weights: expected one of "
                                f"{list(WEIGHT_FILES)} (save_pretrained writes them)")
    auto_map = json.loads((path / "config.json").read_text()).get("auto_map")
    if auto_map and not trust_remote_code:
        raise ValueError(f"{argument} {str(path)!r} ships its own modelling code (auto_map {auto_map}); "
                         f"pass trust_remote_code=True to run that code (it executes Python files from "
                         f"that directory)")
    torch_dtype = _dtype(dtype)
    tokenizer = None
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=trust_remote_code)
    except (OSError, ValueError):
        pass
    hf_model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=torch_dtype,
                                                    trust_remote_code=trust_remote_code).to(device)
    return hf_model.eval(), tokenizer


def _weight_names(path: Path) -> set[str] | None:
    """Parameter names in a local checkpoint's safetensors (the index, or the file's header;
    nothing is loaded); None for other formats or a path without them."""
    index, single = path / "model.safetensors.index.json", path / "model.safetensors"
    names = set()
    if index.is_file():
        names = set(json.loads(index.read_text()).get("weight_map", {}))
    elif single.is_file():
        from safetensors import safe_open

        with safe_open(single, framework="pt") as handle:
            names = set(handle.keys())
    return names or None


def load_dual_mode(path: str | Path, mask_token_id: int | None = None, *, adapter_path: str | Path | None = None,
                   adapter_mode: str = "lean", dtype: str = "float32", device: str = "cpu",
                   trust_remote_code: bool = False):
    """``(DualModeLM, tokenizer)`` from a local checkpoint directory; with ``adapter_path``,
    ``(ProposalLoRALM, tokenizer)``: the checkpoint plus a proposal-only LoRA adapter.

    A proposal-only adapter (seed 000, App. F.2) is a ``peft`` LoRA adapter saved with
    ``save_pretrained``, trained to draft on proposal rows while the base weights stay frozen;
    here its update reaches proposal rows only (:mod:`spec_lib.lora`), so verification is the
    checkpoint's own AR mode, bitwise, and greedy outputs of every schedule are its AR outputs.

    Args:
        adapter_path: a local ``peft`` adapter directory for this checkpoint, or None.
        adapter_mode: how the update is computed inside a call, ``"paper"`` (App. F.2's: every
            row of the call, applied to proposal rows) or ``"lean"`` (proposal rows only);
            :data:`spec_lib.lora.MODES`.
        trust_remote_code: run modelling code the checkpoint ships (``auto_map`` in its
            config, e.g. Nemotron-Labs-Diffusion); off by default, and a checkpoint that
            needs it is refused with a message saying so.

    Raises:
        FileNotFoundError: the path does not exist, or holds no ``config.json`` or no weights;
            ``adapter_path`` is not a directory, or holds no ``adapter_config.json`` or no weights.
        ValueError: no MASK token id (argument, ``config.mask_token_id`` or the tokenizer's
            ``mask_token``), a MASK id that is not an int, an unknown ``dtype`` or
            ``adapter_mode``, custom code without ``trust_remote_code=True``, an adapter that is
            not plain LoRA on linear layers (:func:`spec_lib.lora.adapter_directory`), or one that
            does not fit the checkpoint (layers it lacks: refused before it is read; shapes: once it is).
        TypeError: ``adapter_path`` is not a path, ``trust_remote_code`` not a bool.
    """
    if mask_token_id is not None and not is_int(mask_token_id):
        raise ValueError(f"mask_token_id must be None or an int token id, got {mask_token_id!r}")
    if adapter_mode not in MODES:
        raise ValueError(f"adapter_mode must be one of {list(MODES)}, got {adapter_mode!r}")
    what = None
    if adapter_path is not None:
        adapter, modules = adapter_directory(adapter_path)
        what = f"adapter_path {str(adapter)!r} does not fit checkpoint_path {str(path)!r}"
        names = _weight_names(Path(path))
        if names is not None:                                  # "...self_attn.o_proj.weight" -> "o_proj"
            layers = {name.rsplit(".", 2)[-2] for name in names if "." in name}
            lacking = sorted({module.rsplit(".", 1)[-1] for module in modules} - layers)
            if lacking:
                raise ValueError(f"{what}: it adapts {lacking} layers and the checkpoint has none of that name "
                                 f"(an adapter trained for another base model?)")
    hf_model, tokenizer = _local_lm(path, dtype=dtype, device=device, trust_remote_code=trust_remote_code,
                                    argument="checkpoint_path")
    if mask_token_id is None:
        mask_token_id = getattr(hf_model.config, "mask_token_id", None)
    if mask_token_id is None and tokenizer is not None:
        mask_token_id = tokenizer.mask_token_id
    if mask_token_id is None:
        raise ValueError(f"no MASK token id for {str(path)!r}: pass mask_token_id, or save it as "
                         f"config.mask_token_id or as the tokenizer's mask_token")
    if adapter_path is not None:
        return apply_adapter(hf_model, adapter_path, mask_token_id, adapter_mode, what=what), tokenizer
    return DualModeLM(hf_model, mask_token_id), tokenizer


def load_drafter(path: str | Path, kind: str, *, mask_token_id: int | None = None, sep_token_id: int | None = None,
                 context: int = 256, dtype: str = "float32", device: str = "cpu", trust_remote_code: bool = False):
    """A separate drafter from a local checkpoint directory: ``kind="diffusion"`` (DEER's
    one-step block drafter; MASK and SEP ids from the arguments, the config or the tokenizer)
    or ``kind="ar"`` (a small causal LM).  ``trust_remote_code`` as in :func:`load_dual_mode`."""
    if kind not in ("diffusion", "ar"):
        raise ValueError(f"kind must be 'diffusion' or 'ar', got {kind!r}")
    hf_model, tokenizer = _local_lm(path, dtype=dtype, device=device, trust_remote_code=trust_remote_code,
                                    argument="drafter path")
    if kind == "ar":
        return ARDrafter(hf_model)
    ids = {}
    for name, given in (("mask", mask_token_id), ("sep", sep_token_id)):
        value = given if given is not None else getattr(hf_model.config, f"{name}_token_id", None)
        if value is None and tokenizer is not None:
            value = getattr(tokenizer, f"{name}_token_id", None)
        if value is None:
            raise ValueError(f"no {name.upper()} token id for the diffusion drafter {str(path)!r}: pass "
                             f"{name}_token_id, or save it as config.{name}_token_id or in the tokenizer")
        ids[name] = value
    return DiffusionDrafter(hf_model, ids["mask"], ids["sep"], context=context)


def load_model(preset: str = "", checkpoint_path: str = "", *, adapter_path: str = "", adapter_mode: str = "lean",
               dtype: str = "float32", device: str = "cpu", progress: bool = True, trust_remote_code: bool = False):
    """``(DualModeLM, tokenizer)``: a real checkpoint if ``checkpoint_path`` is given (with
    ``adapter_path``, plus that proposal-only adapter: :func:`load_dual_mode`), else the preset's
    model, trained here on first use and cached (notebook 10 trains the same one)."""
    if adapter_path and not checkpoint_path:
        raise ValueError(f"adapter_path needs checkpoint_path (the checkpoint the adapter was trained for); a "
                         f"preset's model takes no adapter, got adapter_path {adapter_path!r}")
    if checkpoint_path:
        return load_dual_mode(checkpoint_path, adapter_path=adapter_path or None, adapter_mode=adapter_mode,
                              dtype=dtype, device=device, trust_remote_code=trust_remote_code)
    config = preset_config(PRESETS, preset, "model_preset", " (or give checkpoint_path)")
    torch_dtype = _dtype(dtype)
    trained = load_or_train(*config, progress=progress)
    hf_model = trained.hf_model.to(device=device, dtype=torch_dtype).eval()
    return DualModeLM(hf_model, trained.mask_token_id), trained.tokenizer


def recipe_models(preset: str, ablations=(), progress: bool = True):
    """``(trained, models)``: the preset's trained model and, wrapped for decoding, the final
    model, the model before self-distillation, and each named stage-2 ablation
    (:data:`spec_lib.training.presets.ABLATIONS`), trained on first use and cached."""
    preset_config(PRESETS, preset, "model_preset")
    unknown = [a for a in ablations if a not in ABLATIONS]
    if unknown:
        raise ValueError(f"ablations must be among {list(ABLATIONS)}, got {unknown}")
    trained = load_or_train(*PRESETS[preset], progress=progress)
    models = {"final": DualModeLM(trained.hf_model, trained.mask_token_id)}
    if trained.stage1 is not None:
        models["stage 1 (no self-distillation)"] = DualModeLM(trained.stage1, trained.mask_token_id)
    for name in ablations:
        variant = load_or_distill_variant(*PRESETS[preset], ABLATIONS[name], progress=progress)
        models[name] = DualModeLM(variant.hf_model, variant.mask_token_id)
    return trained, models


def model_key(preset: str) -> str:
    """The checkpoint key the current code computes for a preset (what results record)."""
    return checkpoint_key(*PRESETS[preset])
