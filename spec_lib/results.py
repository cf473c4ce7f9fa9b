"""Where notebooks write, and how: atomic JSON/CSV results stamped with the code version.

Layout (relative to the output root, the repository unless ``SPEC_LIB_OUTPUT_ROOT`` is set):

    results/<profile>/<notebook>.json   parameters, code version, metrics, checks
    results/<profile>/<notebook>_<table>.csv
    figures/<profile>/<notebook>_<figure>.png|svg
    runs/<profile>/<notebook>.ipynb      executed notebooks (gitignored)
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import math
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
PROFILES = ("smoke", "cpu", "gpu")
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def output_root() -> Path:
    """Root for results/, figures/ and runs/ (``SPEC_LIB_OUTPUT_ROOT`` or the repository)."""
    return Path(os.environ.get("SPEC_LIB_OUTPUT_ROOT", REPO_ROOT)).resolve()


def check_profile(profile: str) -> str:
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {list(PROFILES)}, got {profile!r}")
    return profile


def results_dir(profile: str) -> Path:
    return output_root() / "results" / check_profile(profile)


def figures_dir(profile: str) -> Path:
    return output_root() / "figures" / check_profile(profile)


def code_version() -> str:
    """sha256 (12 hex) of every source file of ``spec_lib``: changes when the code does."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        digest.update(path.relative_to(PACKAGE_DIR).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                             text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` via a temporary file and ``os.replace`` (no half files)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o666 & ~_UMASK)                 # mkstemp makes 0600; give normal permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


@contextlib.contextmanager
def atomic_directory(path: Path):
    """Yield a temporary sibling directory to fill; on success it replaces ``path`` whole
    (``os.replace``), on any error it is removed and ``path`` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}."))
    try:
        yield tmp
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


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


def parameter_names(notebook: str | Path) -> list[str]:
    """Names assigned in the notebook's ``parameters`` cell, in order."""
    import nbformat

    path = Path(notebook)
    if not path.suffix:
        path = REPO_ROOT / "notebooks" / f"{path.name}.ipynb"
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise ValueError(f"{path.name} must have exactly one cell tagged 'parameters', found {len(cells)}")
    tree = ast.parse(cells[0].source)
    names = []
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return names


def save_results(notebook: str, profile: str, namespace: dict, metrics: dict, checks: dict | None = None) -> Path:
    """Write ``results/<profile>/<notebook>.json`` atomically.

    ``namespace`` is the notebook's ``globals()``: its parameter values are recorded by
    reading the names of the notebook's ``parameters`` cell, so nothing is listed twice.
    ``checks`` maps a check name to a bool (what the tests assert).
    """
    parameters = {name: namespace[name] for name in parameter_names(notebook) if name in namespace}
    payload = {
        "notebook": notebook,
        "profile": check_profile(profile),
        "parameters": parameters,
        "code_version": code_version(),
        "git_commit": git_commit(),
        "metrics": metrics,
        "checks": checks or {},
    }
    data = json.dumps(_jsonable(payload), indent=2, sort_keys=False).encode() + b"\n"
    return atomic_write_bytes(results_dir(profile) / f"{notebook}.json", data)


def load_results(notebook: str, profile: str) -> dict:
    return json.loads((results_dir(profile) / f"{notebook}.json").read_text())


def save_table(frame, notebook: str, profile: str, name: str) -> Path:
    """Write a pandas DataFrame to ``results/<profile>/<notebook>_<name>.csv`` atomically."""
    data = frame.to_csv(index=False).encode()
    return atomic_write_bytes(results_dir(profile) / f"{notebook}_{name}.csv", data)
