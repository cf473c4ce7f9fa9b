"""What a result or a checkpoint depends on: the library modules it imports, read from source.

A checkpoint's cache key and a benchmark's code version are hashes of the code of exactly the
``spec_lib`` modules reachable through import statements from a root (a training pipeline
module, a benchmark's entry modules), not of files named by hand: moving a file keeps the key
honest, editing a module the trainer imports retrains, and editing one it does not import (an
inference-only layout) does not.  The code is compared as its syntax tree with docstrings
dropped (:func:`normalized_source`): a comment, a docstring or a reformatting changes no key.
(A notebook's code version adds a behavioural fingerprint of the decoding core:
:mod:`spec_lib.notebook.versions`.)

Imports are read with :mod:`ast` from every statement, function bodies included (lazy
imports count).  ``from package import name`` counts the submodule ``package.name`` when
one exists, else the package itself.  Parent packages' ``__init__`` files are not implied
(they run at import time, but a module uses only what it imports by name).
"""

from __future__ import annotations

import ast
import hashlib
import subprocess
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

PACKAGE = "spec_lib"
PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent


def module_path(module: str) -> Path | None:
    """``spec_lib.a.b`` -> ``spec_lib/a/b.py`` or ``spec_lib/a/b/__init__.py`` (None if neither)."""
    if module != PACKAGE and not module.startswith(PACKAGE + "."):
        return None
    parts = module.split(".")[1:]
    base = PACKAGE_DIR.joinpath(*parts)
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return None


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = importer if is_package else importer.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def imports_in_source(source: str, importer: str = "", is_package: bool = False) -> set[str]:
    """``spec_lib`` modules imported anywhere in ``source`` (absolute or relative imports)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if module_path(alias.name))
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(importer, is_package, node)
            if not module_path(base):
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if module_path(candidate) else base)
    return found


@lru_cache(maxsize=None)
def _imports_of(module: str, path: Path, mtime_ns: int) -> frozenset[str]:
    return frozenset(imports_in_source(path.read_bytes().decode("utf-8"), module, path.name == "__init__.py"))


def closure(roots: Iterable[str], exclude: Iterable[str] = ()) -> list[str]:
    """Every ``spec_lib`` module reachable from ``roots`` by imports (roots included), sorted;
    modules in ``exclude`` are neither listed nor followed."""
    seen: set[str] = set(exclude)
    todo = [r for r in roots if module_path(r) and r not in seen]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        path = module_path(module)
        todo.extend(_imports_of(module, path, path.stat().st_mtime_ns) - seen)
    return sorted(seen - set(exclude))


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


def normalized_source(source: str) -> str:
    """``source`` as its syntax tree without docstrings, positions or comments (``ast.dump``):
    equal for two texts that differ only in comments, docstrings and formatting."""
    return ast.dump(_strip_docstrings(ast.parse(source)), annotate_fields=False, include_attributes=False)


@lru_cache(maxsize=None)
def _normalized_file(path: Path, mtime_ns: int, size: int) -> str:
    return normalized_source(path.read_bytes().decode("utf-8"))


def normalized_module(module: str) -> str:
    """:func:`normalized_source` of a ``spec_lib`` module's file (cached by its mtime and size)."""
    path = module_path(module)
    stat = path.stat()
    return _normalized_file(path, stat.st_mtime_ns, stat.st_size)


def source_hash(modules: Iterable[str], *extra: str | bytes, length: int = 16) -> str:
    """sha256 of the modules' names and normalized code (:func:`normalized_source`), plus
    ``extra`` parts (configs, parameters)."""
    digest = hashlib.sha256()
    for module in sorted(modules):
        digest.update(module.encode() + b"\0" + normalized_module(module).encode() + b"\0")
    for part in extra:
        digest.update((part.encode() if isinstance(part, str) else part) + b"\0")
    return digest.hexdigest()[:length]


def code_key(roots: Iterable[str], *extra: str | bytes, length: int = 16, exclude: Iterable[str] = ()) -> str:
    """:func:`source_hash` of the import closure of ``roots``, not following the modules in ``exclude``."""
    return source_hash(closure(roots, exclude), *extra, length=length)


def git_commit() -> str | None:
    """The repository's short HEAD commit, if it is a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                             text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
