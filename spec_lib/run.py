"""Run notebooks headlessly with papermill: ``python -m spec_lib.run [--profile P] [NOTEBOOK ...]``.

* Parameters come from ``params/<profile>/<notebook>.yaml``; they are checked against the
  notebook's ``parameters`` cell (names and type annotations) *before anything runs*
  (papermill itself only warns on an unknown name).  ``profile`` is injected.
* Executed notebooks go to ``runs/<profile>/`` (gitignored); notebooks write their own
  results and figures (see :mod:`spec_lib.results`).
* A failed notebook is reported with its failing cell and error; the others still run;
  the exit status is non-zero.
* A notebook whose source, parameters and ``spec_lib`` code are unchanged since its last
  successful run is skipped unless ``--force``.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import sys
import time
import typing
from dataclasses import dataclass
from pathlib import Path

import nbformat
import yaml
from tqdm.auto import tqdm

from .results import PROFILES, REPO_ROOT, atomic_write_bytes, code_version, output_root

KERNEL_NAME = "spec-lib"
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
PARAMS_DIR = REPO_ROOT / "params"
INJECTED = ("profile",)


class ParameterError(ValueError):
    """A params file does not match its notebook."""


@dataclass(frozen=True)
class Declared:
    """One parameter of a notebook's ``parameters`` cell."""

    name: str
    annotation: str
    default: object


def declared_parameters(notebook: Path) -> dict[str, Declared]:
    """Parse the single ``parameters`` cell: ``name: type = literal  # comment`` lines."""
    nb = nbformat.read(notebook, as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise ParameterError(f"{notebook.name}: expected exactly one cell tagged 'parameters', found {len(cells)}")
    declared = {}
    for node in ast.parse(cells[0].source).body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None):
            raise ParameterError(f"{notebook.name}: every line of the parameters cell must be "
                                 f"'name: type = literal', got {ast.unparse(node)!r}")
        declared[node.target.id] = Declared(node.target.id, ast.unparse(node.annotation),
                                            ast.literal_eval(node.value))
    return declared


def _type_of(annotation: str):
    namespace = {"int": int, "float": float, "str": str, "bool": bool, "list": list, "dict": dict,
                 "tuple": tuple, "None": None, "Optional": typing.Optional}
    return eval(annotation, {"__builtins__": {}}, namespace)  # annotations are our own literals


def matches(value, annotation) -> bool:
    """Whether a YAML value fits a parameter annotation (int, float, str, bool, list[...], X | None)."""
    if annotation is None or annotation is type(None):
        return value is None
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, __import__("types").UnionType):
        return any(matches(value, arg) for arg in typing.get_args(annotation))
    if origin in (list, tuple):
        (inner,) = typing.get_args(annotation)[:1] or (object,)
        return isinstance(value, list) and all(matches(v, inner) for v in value)
    if origin is dict:
        key_t, val_t = typing.get_args(annotation)
        return isinstance(value, dict) and all(matches(k, key_t) and matches(v, val_t) for k, v in value.items())
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is object:
        return True
    return isinstance(value, annotation)


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def load_params(notebook: Path, profile: str) -> dict:
    """Read and check ``params/<profile>/<stem>.yaml`` against the notebook's parameters cell."""
    path = PARAMS_DIR / profile / f"{notebook.stem}.yaml"
    if not path.exists():
        raise ParameterError(f"{notebook.stem}: no parameters file {_rel(path)}")
    params = yaml.safe_load(path.read_text()) or {}
    if not isinstance(params, dict):
        raise ParameterError(f"{_rel(path)}: expected a mapping of parameter names to values")
    declared = declared_parameters(notebook)
    for name in INJECTED:
        if name not in declared:
            raise ParameterError(f"{notebook.name}: the parameters cell must declare {name!r} (set by the runner)")
        if name in params:
            raise ParameterError(f"{_rel(path)}: {name!r} is set by --profile, not by the file")
    unknown = sorted(set(params) - set(declared))
    if unknown:
        raise ParameterError(f"{_rel(path)}: unknown parameter(s) {unknown} for "
                             f"{notebook.name}; allowed: {sorted(set(declared) - set(INJECTED))}")
    for name, value in params.items():
        annotation = declared[name].annotation
        if not matches(value, _type_of(annotation)):
            raise ParameterError(f"{_rel(path)}: parameter {name!r} must be {annotation}, "
                                 f"got {value!r} ({type(value).__name__})")
    return {**params, "profile": profile}


def _stamp(notebook: Path, params: dict) -> str:
    nb = nbformat.read(notebook, as_version=4)
    sources = [c.source for c in nb.cells]
    blob = json.dumps({"cells": sources, "params": params, "code": code_version()}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def ensure_kernel() -> str:
    """Make sure the ``spec-lib`` kernel (this interpreter) is installed in ``sys.prefix``."""
    from jupyter_client.kernelspec import KernelSpecManager

    specs = KernelSpecManager().find_kernel_specs()
    if KERNEL_NAME not in specs:
        from ipykernel.kernelspec import install

        install(kernel_name=KERNEL_NAME, display_name="spec-lib (.venv)", prefix=sys.prefix)
    return KERNEL_NAME


def select_notebooks(names: list[str]) -> list[Path]:
    """All notebooks (sorted), or those named by stem, file name or number prefix."""
    available = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
    if not names:
        return available
    chosen = []
    for name in names:
        stem = Path(name).stem
        hits = [p for p in available if p.stem == stem or p.stem.split("_", 1)[0] == stem]
        if not hits:
            raise ParameterError(f"unknown notebook {name!r}; available: {[p.stem for p in available]}")
        chosen += [p for p in hits if p not in chosen]
    return chosen


def run(profile: str, names: list[str], force: bool = False, progress: bool = True) -> int:
    """Execute the selected notebooks; returns the number that failed."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    notebooks = select_notebooks(names)
    plans = [(nb, load_params(nb, profile)) for nb in notebooks]     # every check before any run
    kernel = ensure_kernel()
    runs = output_root() / "runs" / profile
    runs.mkdir(parents=True, exist_ok=True)
    failures, summary = [], []
    bar = tqdm(plans, desc=f"notebooks [{profile}]", unit="nb", disable=not progress)
    for notebook, params in bar:
        bar.set_postfix_str(notebook.stem)
        stamp_path = runs / f"{notebook.stem}.stamp"
        stamp = _stamp(notebook, params)
        finished = (output_root() / "results" / profile / f"{notebook.stem}.json").exists()
        if not force and finished and stamp_path.exists() and stamp_path.read_text().strip() == stamp:
            summary.append((notebook.stem, "up to date", 0.0))
            continue
        stamp_path.unlink(missing_ok=True)
        started = time.perf_counter()
        try:
            papermill.execute_notebook(str(notebook), str(runs / notebook.name), parameters=params,
                                       kernel_name=kernel, cwd=str(NOTEBOOKS_DIR), progress_bar=False,
                                       log_output=False)
        except PapermillExecutionError as err:
            where = f"cell In[{err.exec_count}]" if err.exec_count else f"cell #{err.cell_index}"
            first_line = next((ln for ln in (err.source or "").splitlines() if ln.strip()), "")
            failures.append(f"{notebook.stem}: failed in {where} ({first_line.strip()[:60]!r}): "
                            f"{err.ename}: {err.evalue or '(no message)'}")
            summary.append((notebook.stem, "FAILED", time.perf_counter() - started))
            continue
        except Exception as err:                                        # kernel death, I/O, ...
            failures.append(f"{notebook.stem}: failed: {type(err).__name__}: {err}")
            summary.append((notebook.stem, "FAILED", time.perf_counter() - started))
            continue
        atomic_write_bytes(stamp_path, stamp.encode())
        summary.append((notebook.stem, "ok", time.perf_counter() - started))
    width = max((len(s) for s, _, _ in summary), default=10)
    for stem, status, seconds in summary:
        print(f"  {stem:<{width}}  {status:<10}  {seconds:7.1f} s")
    for line in failures:
        print(f"FAILED {line}  (executed notebook: {runs.relative_to(output_root())})", file=sys.stderr)
    return len(failures)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spec_lib.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", choices=PROFILES, default="cpu", help="parameter profile (default: cpu)")
    parser.add_argument("--force", action="store_true", help="re-run notebooks that are up to date")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("notebooks", nargs="*", help="notebook stems or number prefixes (default: all)")
    args = parser.parse_args(argv)
    try:
        failed = run(args.profile, args.notebooks, force=args.force, progress=not args.no_progress)
    except ParameterError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
