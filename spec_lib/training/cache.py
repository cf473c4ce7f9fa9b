"""Checkpoint caches: where trained models live and the keys that name them.

A checkpoint is saved with ``save_pretrained`` under ``artifacts/<kind>/<key>/`` and loaded
with ``from_pretrained(local_files_only=True)``.  Its key hashes the configuration, the data
fingerprint and the code of every ``spec_lib`` module the training pipeline imports
(:func:`spec_lib.provenance.code_key`, syntax trees without docstrings): changing a loss or the
loop retrains, adding an inference-only layout or editing a comment does not.  The modules that
only decide *where* a checkpoint lives or how keys are hashed (:data:`BOOKKEEPING`) are left out.

**Committed checkpoints.**  The models behind the committed results are in the repository,
under ``models/<kind>/<key>/`` with a ``manifest.json`` (:mod:`spec_lib.notebook.store`).
:func:`checkpoint_dir` returns that folder when it exists, so a fresh clone loads the committed
weights instead of training; with ``SPEC_LIB_RETRAIN=1`` (``python -m spec_lib.run --retrain``)
it returns the artifacts folder instead, where the model is trained anew.

**Resuming.**  While a checkpoint trains, each stage of its loop saves its state every
few minutes under ``artifacts/<kind>/<key>.partial/`` (:func:`stage_resume`); a run killed
and started again, in this session or a later one, continues from there, and the folder is
removed once the checkpoint is saved (:func:`finish_partial`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ..io import REPO_ROOT, atomic_directory, output_root
from ..provenance import code_key

#: Modules every pipeline imports that decide no weights: file locations, atomic writes, hashing.
BOOKKEEPING = ("spec_lib.io", "spec_lib.provenance", "spec_lib.training.cache")
MANIFEST = "manifest.json"
TRAINED_ON = "trained_on.json"
RETRAIN_ENV = "SPEC_LIB_RETRAIN"
RESUME_EVERY_ENV = "SPEC_LIB_RESUME_EVERY"


def artifacts_dir() -> Path:
    """Where checkpoints are cached: ``SPEC_LIB_ARTIFACTS`` or ``<output root>/artifacts``."""
    return Path(os.environ.get("SPEC_LIB_ARTIFACTS", output_root() / "artifacts")).resolve()


def committed_dir() -> Path:
    """Where the committed checkpoints are: ``SPEC_LIB_MODELS`` or ``<repository>/models``."""
    return Path(os.environ.get("SPEC_LIB_MODELS", REPO_ROOT / "models")).resolve()


def retrain_requested() -> bool:
    """Whether committed checkpoints are to be ignored (``SPEC_LIB_RETRAIN=1``)."""
    value = os.environ.get(RETRAIN_ENV, "")
    if value not in ("", "0", "1"):
        raise ValueError(f"{RETRAIN_ENV} must be '0' or '1' (or unset), got {value!r}")
    return value == "1"


def partial_dir(kind: str, key: str) -> Path:
    """Where checkpoint ``kind/key`` keeps its resumable training state while it trains."""
    return artifacts_dir() / kind / f"{key}.partial"


def stage_resume(kind: str, key: str, stage: str, generators=(), state: dict | None = None):
    """A :class:`spec_lib.training.loop.Resume` for one stage (one :func:`~spec_lib.training.loop.fit`
    call) of checkpoint ``kind/key``, saved every ``SPEC_LIB_RESUME_EVERY`` seconds (default 300)."""
    from .loop import Resume

    every = os.environ.get(RESUME_EVERY_ENV, "300")
    try:
        seconds = float(every)
    except ValueError:
        raise ValueError(f"{RESUME_EVERY_ENV} must be a number of seconds > 0, got {every!r}") from None
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in stage)
    return Resume(partial_dir(kind, key) / f"{safe}.pt", generators=tuple(generators),
                  state={} if state is None else state, every=seconds)


def finish_partial(kind: str, key: str) -> None:
    """Remove the resumable state of ``kind/key`` once its checkpoint is saved."""
    shutil.rmtree(partial_dir(kind, key), ignore_errors=True)


def preset_config(presets: dict, preset, argument: str = "preset", hint: str = ""):
    """``presets[preset]``, or a ValueError naming ``argument`` and the allowed presets."""
    if not isinstance(preset, str) or preset not in presets:
        raise ValueError(f"{argument} must be one of {list(presets)}{hint}, got {preset!r}")
    return presets[preset]


def save_networks(kind: str, key: str, train) -> Path:
    """The checkpoint folder of ``kind/key``, trained first when it holds no ``record.json``:
    ``train(key)`` returns ``(networks, history, record)``, saved atomically (each network with
    ``save_pretrained`` under its name, ``history.csv``, ``record.json``); its resumable state is
    then removed.  The "train if missing, save atomically" of the multi-network pipelines."""
    path = checkpoint_dir(kind, key)
    if not (path / "record.json").exists():
        networks, history, record = train(path.name)
        with checkpoint_writer(path) as tmp:
            for name, network in networks.items():
                network.save_pretrained(tmp / name)
            history.to_csv(tmp / "history.csv", index=False)
            (tmp / "record.json").write_text(json.dumps(record, indent=2))
        finish_partial(kind, path.name)
    return path


@dataclass
class TrainedNetworks:
    """What :func:`save_networks` saved, loaded: the networks by name, the training history
    (a ``pandas.DataFrame``), the record and the config they were trained with."""

    networks: dict
    history: object
    record: dict = field(default_factory=dict)
    config: object = None

    def network(self, name: str, argument: str = "kind"):
        """The network ``name``; a ValueError naming ``argument`` and the choices otherwise."""
        if name not in self.networks:
            raise ValueError(f"{argument} must be one of {list(self.networks)}, got {name!r}")
        return self.networks[name]


def checkpoint_dir(kind: str, key: str) -> Path:
    """The folder of checkpoint ``kind/key``: the committed one (``models/<kind>/<key>/``, checked
    against its manifest's sha256 on first use in a process) unless a retrain is requested, else
    ``artifacts/<kind>/<key>/`` (which may not exist yet: the caller trains into it)."""
    committed = committed_dir() / kind / key
    if (committed / MANIFEST).is_file() and not retrain_requested():
        _verified(committed)
        return committed
    return artifacts_dir() / kind / key


_VERIFIED: set[Path] = set()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


#: Files an operating system or an interpreter drops into folders, never part of a checkpoint.
JUNK = (".DS_Store", "Thumbs.db", "desktop.ini")


def _is_junk(rel: Path) -> bool:
    return rel.name in JUNK or "__pycache__" in rel.parts or rel.name.startswith("._")


def checkpoint_files(path: Path) -> list[str]:
    """Every file under a checkpoint folder but its manifest (and operating-system junk such as
    ``.DS_Store``), as sorted POSIX paths relative to it."""
    path = Path(path)
    return sorted(p.relative_to(path).as_posix() for p in path.rglob("*")
                  if p.is_file() and p.name != MANIFEST and not _is_junk(p.relative_to(path)))


def read_manifest(path: Path) -> dict:
    """The manifest of a committed checkpoint folder, checked to be a JSON object with ``key`` and
    ``files``.

    Raises:
        ValueError: naming the file, when it is not such an object.
    """
    file = Path(path) / MANIFEST
    try:
        manifest = json.loads(file.read_bytes())
    except (OSError, ValueError) as err:
        raise ValueError(f"{file}: not a readable JSON manifest ({err}); restore it with git or recommit the "
                         f"checkpoint (python -m spec_lib.notebook.store commit)") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict) or "key" not in manifest:
        raise ValueError(f"{file}: a manifest is a JSON object with 'key' and 'files' (path -> sha256)")
    return manifest


def verify_checkpoint(path: Path) -> list[str]:
    """What is wrong with a committed checkpoint folder against its manifest: a missing, changed
    or unlisted file, a key other than the folder's name, an unreadable manifest.  Empty when it
    is whole."""
    path = Path(path)
    try:
        manifest = read_manifest(path)
    except ValueError as err:
        return [str(err)]
    listed = manifest["files"]
    problems = [] if manifest.get("key") == path.name else \
        [f"manifest key {manifest.get('key')!r} is not the folder's name {path.name!r}"]
    for rel, digest in sorted(listed.items()):
        if not (path / rel).is_file():
            problems.append(f"missing {rel}")
        elif sha256_file(path / rel) != digest:
            problems.append(f"changed since it was committed: {rel} (sha256 differs)")
    problems += [f"not in the manifest: {rel}" for rel in checkpoint_files(path) if rel not in listed]
    return problems


def _verified(path: Path) -> None:
    if path in _VERIFIED:
        return
    problems = verify_checkpoint(path)
    if problems:
        raise RuntimeError(f"committed checkpoint {path.name} ({path.parent.name}) does not match its manifest: "
                           f"{'; '.join(problems[:3])}; restore it with git (git checkout -- models/ and, for "
                           f"files git does not know, git clean -n models/ then -f) or retrain with {RETRAIN_ENV}=1")
    _VERIFIED.add(path)


def weights_id(kind: str, key: str) -> str:
    """Which weights a load of ``kind/key`` uses: ``committed:<digest of the manifest's file list>``
    (float32 and float16 commits of one key differ here), or ``artifacts`` when the model comes
    from (or will be trained into) the artifacts folder."""
    committed = committed_dir() / kind / key
    if (committed / MANIFEST).is_file() and not retrain_requested():
        files = read_manifest(committed)["files"]
        return "committed:" + hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]
    return "artifacts"


def machine() -> dict:
    """What a training run's numbers depend on besides the code: torch, Python, and the CPU vector
    instruction set torch dispatched to (training is reproducible on one ISA, not across ISAs)."""
    import torch

    return {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
            "python": platform.python_version(), "machine": platform.machine()}


@contextlib.contextmanager
def checkpoint_writer(path: Path):
    """Yield a temporary folder to save a trained checkpoint into; on success it replaces
    ``path`` whole (:func:`spec_lib.io.atomic_directory`) with ``trained_on.json`` (:func:`machine`)
    added.  Committed checkpoints are never written: retrained models go to the artifacts folder."""
    path = Path(path).resolve()
    if path.is_relative_to(committed_dir()):
        raise RuntimeError(f"refusing to write into the committed models ({path}): train into the artifacts folder "
                           f"({RETRAIN_ENV}=1) and commit with python -m spec_lib.notebook.store commit")
    with atomic_directory(path) as tmp:
        yield tmp
        (tmp / TRAINED_ON).write_text(json.dumps(machine(), indent=2))


def cache_key(pipeline_module: str, **parts) -> str:
    """Key of a checkpoint trained by ``pipeline_module`` with these JSON-able ``parts``
    (configs, data fingerprint, keys of the models it starts from)."""
    return code_key([pipeline_module], json.dumps(parts, sort_keys=True, default=str), exclude=BOOKKEEPING)
