"""The committed models: which checkpoints a profile's notebooks use, training them, committing
them into the repository and checking them.

``python -m spec_lib.notebook.store {list,train,commit,verify} [--profile cpu]``:

* ``list``: every checkpoint the profile uses (:func:`profile_checkpoints`), with its key and
  whether it is committed, cached in ``artifacts/`` or missing;
* ``train``: trains what is missing (with ``--retrain``: everything not yet in ``artifacts/``,
  ignoring the committed copies) into ``artifacts/``, each model after the ones it starts from;
* ``commit``: copies the trained checkpoints into ``models/<kind>/<key>/`` with a
  ``manifest.json`` (key, preset, parameters, training time, the CPU capability and torch it was
  trained with, the sha256 of every file), weights as float16 with ``--dtype float16``; removes
  committed folders that the profile no longer uses; with ``--partial``, commits what is trained
  and leaves the rest *pending* (a retraining that spans sessions, below);
* ``verify``: checks every committed folder against its manifest and its key against the code.

Loading (:func:`spec_lib.training.cache.checkpoint_dir`) takes the committed folder whenever one
exists for the key the current code computes, so a fresh clone trains nothing.  Weights stored as
float16 are loaded into float32 models (``from_pretrained`` casts), so results computed from
them come from the rounded weights, on every machine alike.

**A retraining that spans sessions.**  When a trainer changes, its checkpoints (and those that
start from them) get new keys, and training them all can take longer than one session.  Each
finished checkpoint is committed as it comes (``commit --partial``); the others are *pending*.
A pending checkpoint is allowed only while every committed result that used it is listed in the
stale ledger (``results/<profile>/STALE.md``, a regeneration under way):
:func:`unlisted_users_of_pending` names the ones that are not, and the tests fail on them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..io import atomic_directory
from ..training.cache import (MANIFEST, TRAINED_ON, artifacts_dir, checkpoint_files, committed_dir, read_manifest,
                    retrain_requested, sha256_file, verify_checkpoint)
from .params import results_dir

DTYPES = ("float32", "float16")


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint a profile uses: its cache folder ``kind/key``, what it is, and the call that
    loads it (training it first when it is missing)."""

    kind: str
    key: str
    preset: str
    description: str
    ensure: Callable[[], object]
    minutes: float = 0.0            # rough training time on 2 cores (what train() prints)
    #: notebooks (stems) that load it; None: every notebook that imports its training pipeline
    notebooks: tuple[str, ...] | None = None


def _ablations(profile: str) -> list[str]:
    from .params import load_params

    try:
        return list(load_params("10_train_self_speculative_model", profile).get("ablations", []))
    except FileNotFoundError:
        return []


def profile_checkpoints(profile: str) -> list[Checkpoint]:
    """Every trained checkpoint the notebooks of ``profile`` load (``cpu``, ``smoke``)."""
    from ..training import any_order, deer, proposal_lora
    from ..training.baseline_drafters import BASELINE_PRESETS
    from ..training.baselines import baseline_cache_key, save_baselines
    from ..training.block_drafters import DEDIT_PRESETS
    from ..training.feature_head_drafters import FEATURE_HEAD_PRESETS
    from ..training.feature_heads import feature_heads_cache_key, save_feature_heads
    from ..training.dedit import dedit_cache_key, save_block_drafters
    from ..training.frozen_editor_drafters import FROZEN_EDITOR_PRESETS
    from ..training.frozen_editors import frozen_editor_key, save_frozen_editors
    from ..training.presets import ABLATIONS, PRESETS
    from ..training.self_speculative import checkpoint_key, load_or_distill_variant, load_or_train, variant_key

    if profile not in PRESETS:
        raise ValueError(f"profile must be one of {list(PRESETS)}, got {profile!r}")
    target = PRESETS[profile]
    found = [Checkpoint("models", checkpoint_key(*target), profile, "self-speculative model (final and stage 1)",
                        lambda: load_or_train(*target), 35)]
    for name in _ablations(profile):
        found.append(Checkpoint("models", variant_key(*target, ABLATIONS[name]), f"{profile}/{name}",
                                f"stage-2 ablation {name!r} of the self-speculative model",
                                lambda name=name: load_or_distill_variant(*target, ABLATIONS[name]), 12,
                                notebooks=("10_train_self_speculative_model",)))
    dedit_config = DEDIT_PRESETS[profile]
    found.append(Checkpoint("dedit", dedit_cache_key(dedit_config), profile, "DFlash / DEdit drafters",
                            lambda: save_block_drafters(dedit_config), 25))
    for preset in (profile, f"{profile}-faithful"):
        config = deer.D2A_PRESETS[preset]
        found.append(Checkpoint("drafters", deer.deer_cache_key(config), preset, "DEER drafters (and the AR drafter)",
                                lambda config=config: deer.load_or_train_deer(config), 13))
    found.append(Checkpoint("baselines", baseline_cache_key(BASELINE_PRESETS[profile]), profile,
                            "Domino and DSpark heads", lambda: save_baselines(BASELINE_PRESETS[profile]), 17))
    found.append(Checkpoint("frozen_editors", frozen_editor_key(FROZEN_EDITOR_PRESETS[profile]), profile,
                            "editors on a frozen DFlash", lambda: save_frozen_editors(FROZEN_EDITOR_PRESETS[profile]),
                            25))
    found.append(Checkpoint("feature_heads", feature_heads_cache_key(FEATURE_HEAD_PRESETS[profile]), profile,
                            "Medusa, Hydra and EAGLE-3 drafters",
                            lambda: save_feature_heads(FEATURE_HEAD_PRESETS[profile]), 8))
    found.append(Checkpoint("lora", proposal_lora.lora_key(profile), profile, "AR base and proposal-only LoRA adapter",
                            lambda: proposal_lora.load_or_train(profile), 25))
    for name in any_order.PRESETS:
        found.append(Checkpoint("anyorder", any_order.checkpoint_key(profile, name), f"{profile}/{name}",
                                f"any-order model {name}", lambda name=name: any_order.load_or_train(profile, name),
                                9))
    return found


def status(checkpoint: Checkpoint) -> str:
    """``committed``, ``cached`` (trained into ``artifacts/``) or ``missing``; a retrain looks at
    ``artifacts/`` first."""
    committed = (committed_dir() / checkpoint.kind / checkpoint.key / MANIFEST).is_file()
    cached = (artifacts_dir() / checkpoint.kind / checkpoint.key / "record.json").is_file()
    if committed and not (retrain_requested() and cached):
        return "committed"
    return "cached" if cached else "missing"


def train(profile: str) -> list[Checkpoint]:
    """Train every checkpoint of ``profile`` that is missing (with ``SPEC_LIB_RETRAIN=1``: every
    one not in ``artifacts/``), in the order of :func:`profile_checkpoints` (each needs the
    ones before it); returns what was trained."""
    trained = []
    for checkpoint in profile_checkpoints(profile):
        where = status(checkpoint)
        if where == "cached" or (where == "committed" and not retrain_requested()):
            continue
        started = time.perf_counter()
        print(f"training {checkpoint.kind}/{checkpoint.key} ({checkpoint.description}, preset {checkpoint.preset}; "
              f"about {checkpoint.minutes:g} min on 2 cores)", flush=True)
        checkpoint.ensure()
        print(f"  done in {(time.perf_counter() - started) / 60:.1f} min", flush=True)
        trained.append(checkpoint)
    return trained


def _train_seconds(record: dict) -> float | None:
    """The training time a pipeline's record states (the pipelines name it differently)."""
    for name in ("train_seconds", "wall_seconds", "seconds"):
        if name in record:
            return float(record[name])
    parts = [record[n] for n in ("base_seconds", "adapter_seconds") if n in record]      # the LoRA pipeline
    return float(sum(parts)) if parts else None


def _to_float16(folder: Path) -> None:
    """Rewrite every ``*.safetensors`` file under ``folder`` with its float32 tensors as float16."""
    import torch
    from safetensors.torch import load_file, save_file

    for path in sorted(folder.rglob("*.safetensors")):
        tensors = load_file(path)
        halved = {k: v.to(torch.float16) if v.dtype == torch.float32 else v for k, v in tensors.items()}
        from safetensors import safe_open

        with safe_open(path, "pt") as handle:
            metadata = handle.metadata()
        save_file(halved, path, metadata=metadata)


def manifest(checkpoint: Checkpoint, folder: Path, dtype: str) -> dict:
    """The manifest of a checkpoint folder about to be committed."""
    record = json.loads((folder / "record.json").read_text())
    trained_on = json.loads((folder / TRAINED_ON).read_text()) if (folder / TRAINED_ON).is_file() else {}
    parameters = {}
    for config in sorted(folder.rglob("*.safetensors")):
        from safetensors import safe_open

        with safe_open(config, "pt") as handle:
            count = sum(_numel(handle.get_slice(k).get_shape()) for k in handle.keys())
        parameters[config.parent.relative_to(folder).as_posix() or "."] = count
    return {"key": checkpoint.key, "kind": checkpoint.kind, "preset": checkpoint.preset,
            "description": checkpoint.description, "parameters": parameters,
            "train_seconds": _train_seconds(record),
            "trained_on": trained_on, "weights_dtype": dtype,
            "files": {rel: sha256_file(folder / rel) for rel in checkpoint_files(folder)}}


def _numel(shape) -> int:
    count = 1
    for size in shape:
        count *= int(size)
    return count


def commit(profile: str, dtype: str = "float32", prune: bool = True, partial: bool = False) -> list[Path]:
    """Copy every checkpoint of ``profile`` from ``artifacts/`` into the committed models (each
    folder written whole, its manifest last); already committed keys are kept as they are.
    With ``prune``, committed folders of this profile's kinds that it no longer uses are removed.
    With ``partial``, checkpoints not trained yet are left pending instead of refused.

    Raises:
        ValueError: an unknown ``dtype``.
        FileNotFoundError: a checkpoint of the profile is neither committed nor trained.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {list(DTYPES)}, got {dtype!r}")
    checkpoints = profile_checkpoints(profile)
    missing = [f"{c.kind}/{c.key}" for c in checkpoints if status(c) == "missing"]
    if missing and not partial:
        raise FileNotFoundError(f"not trained yet: {missing}; run python -m spec_lib.notebook.store train "
                                f"--profile {profile} first")
    written = []
    for checkpoint in checkpoints:
        target = committed_dir() / checkpoint.kind / checkpoint.key
        if (target / MANIFEST).is_file() or f"{checkpoint.kind}/{checkpoint.key}" in missing:
            continue
        source = artifacts_dir() / checkpoint.kind / checkpoint.key
        with atomic_directory(target) as tmp:
            shutil.copytree(source, tmp, dirs_exist_ok=True)
            if dtype == "float16":
                _to_float16(tmp)
            (tmp / MANIFEST).write_text(json.dumps(manifest(checkpoint, tmp, dtype), indent=2) + "\n")
        written.append(target)
    if prune:
        used = {(c.kind, c.key) for c in checkpoints}
        for kind in {c.kind for c in checkpoints}:
            for folder in sorted((committed_dir() / kind).glob("*")) if (committed_dir() / kind).is_dir() else []:
                if (kind, folder.name) not in used and _profile_of(folder) == profile:
                    shutil.rmtree(folder)
    return written


def _profile_of(folder: Path) -> str | None:
    """The profile a committed folder's manifest names (``cpu`` for presets ``cpu``, ``cpu/smax16``,
    ``cpu-faithful``), or None when its manifest cannot be read."""
    try:
        preset = str(read_manifest(folder).get("preset", ""))
    except ValueError:
        return None
    return preset.split("/")[0].removesuffix("-faithful")


def committed_folders() -> list[Path]:
    """Every committed checkpoint folder (``models/<kind>/<key>/`` with a manifest)."""
    return sorted(p.parent for p in committed_dir().glob(f"*/*/{MANIFEST}"))


def verify_all(profile: str | None = None) -> dict[str, list[str]]:
    """Problems per committed folder: files against the manifest, and (for ``profile``) keys the
    current code no longer computes.  Empty lists when all is well."""
    problems = {f"{p.parent.name}/{p.name}": verify_checkpoint(p) for p in committed_folders()}
    if profile is not None:
        used = {f"{c.kind}/{c.key}" for c in profile_checkpoints(profile)}
        for folder in committed_folders():
            name = f"{folder.parent.name}/{folder.name}"
            if name not in used and _profile_of(folder) in (profile, None):
                problems[name].append(f"no checkpoint of profile {profile!r} has this key (stale: the trainer or "
                                      f"its config changed; retrain and commit)")
    return problems


def pending(profile: str) -> list[Checkpoint]:
    """The checkpoints of ``profile`` that are not committed (trained in ``artifacts/`` or not)."""
    return [c for c in profile_checkpoints(profile) if not (committed_dir() / c.kind / c.key / MANIFEST).is_file()]


def unlisted_users_of_pending(profile: str, listed) -> dict[str, list[str]]:
    """``{"<preset> (<kind>)": [result stems]}``: committed results that used a checkpoint which is
    now pending and are not among ``listed``, the stems the stale ledger lists
    (:func:`spec_lib.notebook.versions.read_ledger`); empty when all is well."""
    names = {f"{c.preset} ({c.kind})" for c in pending(profile)}
    found: dict[str, list[str]] = {}
    for path in sorted(results_dir(profile).glob("*.json")):
        used = json.loads(path.read_text()).get("code_parts", {}).get("models", {})
        for name in sorted(names & set(used)):
            if path.stem not in listed:
                found.setdefault(name, []).append(path.stem)
    return found


def size_bytes() -> int:
    """Bytes of every committed file."""
    return sum(p.stat().st_size for p in committed_dir().rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spec_lib.notebook.store", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("list", "train", "commit", "verify"))
    parser.add_argument("--profile", default="cpu", help="the profile whose checkpoints to handle (default: cpu)")
    parser.add_argument("--retrain", action="store_true", help="train: ignore the committed checkpoints")
    parser.add_argument("--dtype", choices=DTYPES, default="float32", help="commit: how weights are stored")
    parser.add_argument("--partial", action="store_true",
                        help="commit: commit what is trained and leave the rest pending (listed stale results only)")
    args = parser.parse_args(argv)
    import os

    if args.retrain:
        os.environ["SPEC_LIB_RETRAIN"] = "1"
    try:
        if args.action == "list":
            minutes = megabytes = 0.0
            for c in profile_checkpoints(args.profile):
                folder, cost = committed_dir() / c.kind / c.key, ""
                if (folder / MANIFEST).is_file():
                    trained = (read_manifest(folder).get("train_seconds") or 0.0) / 60
                    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6
                    minutes, megabytes, cost = minutes + trained, megabytes + size, f" ({trained:.1f} min, {size:.1f} MB)"
                print(f"{status(c):9}  {c.kind}/{c.key}  {c.preset}: {c.description}{cost}")
            print(f"committed for {args.profile}: {megabytes:.1f} MB, {minutes:.1f} min of training (manifests); "
                  f"all committed models: {size_bytes() / 1e6:.1f} MB")
        elif args.action == "train":
            train(args.profile)
        elif args.action == "commit":
            for path in commit(args.profile, args.dtype, partial=args.partial):
                print(f"committed {path.relative_to(committed_dir().parent)}")
            print(f"committed models: {size_bytes() / 1e6:.1f} MB")
            for c in pending(args.profile):
                print(f"pending   {c.kind}/{c.key}  {c.preset}: {c.description}")
        else:
            problems = {k: v for k, v in verify_all(args.profile).items() if v}
            for name, found in problems.items():
                print(f"{name}: {'; '.join(found)}", file=sys.stderr)
            print(f"{len(committed_folders())} committed checkpoints, {size_bytes() / 1e6:.1f} MB, "
                  f"{len(problems)} with problems")
            return 1 if problems else 0
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
