"""Where outputs go, and atomic writes: a file or a directory appears whole or not at all.

Used by the checkpoint caches (:mod:`spec_lib.training.cache`) and the notebooks' results
(:mod:`spec_lib.notebook.results`).  Temporary files are created with mode 0o666, so the
process umask gives them the usual permissions (the umask is never read or changed).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def output_root() -> Path:
    """Root for results/, figures/, runs/ and artifacts/: ``SPEC_LIB_OUTPUT_ROOT`` or the repository."""
    return Path(os.environ.get("SPEC_LIB_OUTPUT_ROOT", REPO_ROOT)).resolve()


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` via a temporary sibling and ``os.replace`` (no half files)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


@contextlib.contextmanager
def atomic_directory(path: Path):
    """Yield a temporary sibling directory to fill; on success it replaces ``path`` whole,
    on any error it is removed and ``path`` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}"
    os.mkdir(tmp, 0o777)                           # the umask applies, as for any new directory
    try:
        yield tmp
        if path.exists():
            old = path.parent / f".{path.name}.old.{uuid.uuid4().hex}"
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
