"""Where notebooks write, and how: each run's outputs are published as one unit.

Layout (relative to the output root, the repository unless ``SPEC_LIB_OUTPUT_ROOT`` is set):

    results/<profile>/<notebook>.json   parameters, code version, metrics, checks, file manifest
    results/<profile>/<notebook>_<table>.csv
    figures/<profile>/<notebook>_<figure>.png|svg
    runs/<profile>/<notebook>.ipynb      executed notebooks (gitignored)

**One run, one set of files.**  :func:`save_table` and
:func:`spec_lib.notebook.plotting.save_figure` write into a staging directory of this
process (``.staging/<profile>/<notebook>.<pid>.<id>/``); :func:`save_results`, the last
call of every notebook, writes the JSON there and publishes the set: a journal naming the
staging directory is written first, then the notebook's old files are removed, the new ones
moved in (the JSON last) and the journal deleted.  A notebook that fails never publishes
(its old outputs stay untouched); a process killed while publishing leaves the journal,
and :func:`recover` (run by the runner and by every publish) rolls it forward.  The JSON
lists every file of its run with its sha256 (``files``), so :func:`check_published` can
tell a complete set from a mixed one.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import uuid
from pathlib import Path

import numpy as np

from ..io import REPO_ROOT, atomic_write_bytes, output_root
from ..provenance import git_commit
from .params import PROFILES, check_profile, declared_parameters, figures_dir, notebook_path, results_dir

STAGING = ".staging"
_STAGED: dict[tuple[str, str], Path] = {}          # (notebook, profile) -> this process's staging dir


def code_version(notebook: str | Path, profile: str) -> str:
    """The version of the code that decides the notebook's numbers at ``profile``
    (:func:`spec_lib.notebook.versions.code_version`): a result whose recorded version differs
    from this was produced by other code."""
    from .versions import code_version as version

    return version(notebook, profile)


# ----- staging and publishing ----------------------------------------------------------------------

def _staging_root(profile: str) -> Path:
    return output_root() / STAGING / check_profile(profile)


def staging_dir(notebook: str, profile: str) -> Path:
    """This process's staging directory for ``notebook`` (created on first use)."""
    key = (notebook, profile)
    path = _STAGED.get(key)
    if path is None or not path.exists():
        path = _staging_root(profile) / f"{notebook}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        (path / "results").mkdir(parents=True)
        (path / "figures").mkdir()
        _STAGED[key] = path
    return path


def stage_bytes(notebook: str, profile: str, kind: str, name: str, data: bytes) -> Path:
    """Write one output file into the staging set; returns the path it will be published at."""
    if kind not in ("results", "figures"):
        raise ValueError(f"kind must be 'results' or 'figures', got {kind!r}")
    atomic_write_bytes(staging_dir(notebook, profile) / kind / name, data)
    return output_root() / kind / profile / name


def belongs_to(notebook: str, name: str) -> bool:
    """Whether a results / figures file name is one of ``notebook``'s outputs."""
    return name == f"{notebook}.json" or name.startswith(f"{notebook}_")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _journal(notebook: str, profile: str) -> Path:
    return _staging_root(profile) / f"{notebook}.publish"


def publish(notebook: str, profile: str) -> None:
    """Replace the notebook's published outputs by this process's staged set (see the module
    docstring); the JSON must already be staged."""
    staged = _STAGED.pop((notebook, profile))
    if not (staged / "results" / f"{notebook}.json").exists():
        raise RuntimeError(f"{notebook}: nothing to publish (save_results writes the JSON first)")
    files = {kind: sorted(p.name for p in (staged / kind).glob("*")) for kind in ("results", "figures")}
    atomic_write_bytes(_journal(notebook, profile), json.dumps({"staging": staged.name, "files": files}).encode())
    _apply(notebook, profile)


def _apply(notebook: str, profile: str) -> None:
    """Roll a journaled publish forward (idempotent: safe to repeat after a crash at any point)."""
    journal = _journal(notebook, profile)
    entry = json.loads(journal.read_text())
    staged = _staging_root(profile) / entry["staging"]
    for kind in ("figures", "results"):                              # the results JSON last of all
        target = output_root() / kind / profile
        target.mkdir(parents=True, exist_ok=True)
        names = set(entry["files"][kind])
        for old in target.iterdir():
            if old.is_file() and belongs_to(notebook, old.name) and old.name not in names:
                old.unlink()
        for name in sorted(names, key=lambda n: n.endswith(".json")):
            source = staged / kind / name
            if source.exists():                                      # not moved before a crash
                os.replace(source, target / name)
    shutil.rmtree(staged, ignore_errors=True)
    journal.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recover(profile: str) -> list[str]:
    """Finish interrupted publishes of ``profile`` and delete staging sets of dead processes;
    returns the notebooks whose publish was rolled forward."""
    root = _staging_root(profile)
    if not root.exists():
        return []
    finished = []
    for journal in sorted(root.glob("*.publish")):
        notebook = journal.name[: -len(".publish")]
        _apply(notebook, profile)
        finished.append(notebook)
    for staged in root.iterdir():
        parts = staged.name.rsplit(".", 2)
        if staged.is_dir() and len(parts) == 3 and parts[1].isdigit() and not _alive(int(parts[1])):
            shutil.rmtree(staged, ignore_errors=True)
    return finished


def discard(notebook: str, profile: str) -> None:
    """Drop this process's staged, unpublished outputs of ``notebook``."""
    staged = _STAGED.pop((notebook, profile), None)
    if staged is not None:
        shutil.rmtree(staged, ignore_errors=True)


# ----- writers --------------------------------------------------------------------------------------

def _jsonable(value):
    """Convert numpy/torch scalars and arrays, tuples and non-finite floats for JSON."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return _jsonable(value.tolist())
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def save_table(frame, notebook: str, profile: str, name: str) -> Path:
    """Stage a pandas DataFrame as ``results/<profile>/<notebook>_<name>.csv``."""
    return stage_bytes(notebook, profile, "results", f"{notebook}_{name}.csv", frame.to_csv(index=False).encode())


def save_results(notebook: str, profile: str, namespace: dict, metrics: dict, checks: dict | None = None) -> None:
    """Write ``results/<profile>/<notebook>.json`` and publish the run's whole set of outputs.

    ``namespace`` is the notebook's ``globals()``: its parameter values are recorded by
    reading the names of the notebook's ``parameters`` cell, so nothing is listed twice.
    ``checks`` maps a check name to a bool (what the tests assert).  Call it last.  Prints
    one line naming what was published, relative to the output root (no machine paths in a
    notebook's outputs), and returns nothing.
    """
    check_profile(profile)
    names = declared_parameters(notebook_path(notebook))
    staged = staging_dir(notebook, profile)
    from .versions import version_of, version_parts

    parts = version_parts(notebook, profile)
    files = {f"{kind}/{profile}/{p.name}": _sha256(p) for kind in ("results", "figures")
             for p in sorted((staged / kind).glob("*"))}
    payload = {
        "notebook": notebook,
        "profile": profile,
        "parameters": {name: namespace[name] for name in names if name in namespace},
        "code_version": version_of(parts),
        "code_parts": parts,
        "git_commit": git_commit(),
        "metrics": metrics,
        "checks": checks or {},
        "files": files,
    }
    data = json.dumps(_jsonable(payload), indent=2, sort_keys=False).encode() + b"\n"
    stage_bytes(notebook, profile, "results", f"{notebook}.json", data)
    recover(profile)
    publish(notebook, profile)
    failed = sorted(name for name, passed in (checks or {}).items() if not passed)
    print(f"published results/{profile}/{notebook}.json and {len(files)} other files; checks: "
          f"{len(checks or {}) - len(failed)}/{len(checks or {})} pass" + (f" (failing: {', '.join(failed)})" if failed else ""))


def check_published(notebook: str, profile: str) -> list[str]:
    """Problems with a published set: files listed in the JSON that are missing or differ,
    and files of the notebook that the JSON does not list (a mixed set).  Empty if whole."""
    results = json.loads((results_dir(profile) / f"{notebook}.json").read_text())
    listed = results.get("files", {})
    problems = []
    for rel, digest in listed.items():
        path = output_root() / rel
        if not path.is_file():
            problems.append(f"missing {rel}")
        elif _sha256(path) != digest:
            problems.append(f"changed since the run: {rel}")
    for kind in ("results", "figures"):
        folder = output_root() / kind / profile
        for path in sorted(folder.glob(f"{notebook}*")) if folder.exists() else []:
            rel = f"{kind}/{profile}/{path.name}"
            if belongs_to(notebook, path.name) and path.name != f"{notebook}.json" and rel not in listed:
                problems.append(f"not from this run: {rel}")
    return problems


__all__ = ["PROFILES", "REPO_ROOT", "check_published", "code_version", "discard", "figures_dir", "publish",
           "recover", "results_dir", "save_results", "save_table", "stage_bytes"]
