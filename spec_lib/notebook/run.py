"""Run notebooks headlessly with papermill: ``python -m spec_lib.run [--profile P] [NOTEBOOK ...]``.

* Parameters come from ``params/<profile>/<notebook>.yaml``; they are checked against the
  notebook's ``parameters`` cell (names and type annotations) *before anything runs*
  (papermill itself only warns on an unknown name).  ``profile`` is injected.
* Executed notebooks go to ``runs/<profile>/`` (gitignored); notebooks write their own
  results and figures, published as one set per run (see :mod:`spec_lib.notebook.results`).
* A failed notebook is reported with its failing cell and error; the others still run;
  the exit status is non-zero.
* A notebook whose source, parameters and imported ``spec_lib`` code are unchanged since
  its last successful run is skipped unless ``--force``.
* Params files that cannot be read (not UTF-8, invalid YAML, duplicate keys, a directory)
  stop the run before anything executes, with the file and line named (exit status 2).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

from tqdm.auto import tqdm

from ..io import atomic_write_bytes, output_root
from . import params as params_module
from .params import ParameterError, load_params
from .results import PROFILES, code_version, recover

KERNEL_NAME = "spec-lib"


def _stamp(notebook: Path, params: dict) -> str:
    """What a run depends on: the notebook's code version (cells, params file, imported
    library source) and the parameters passed."""
    blob = json.dumps({"code": code_version(notebook, params["profile"]), "params": params}, sort_keys=True)
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
    available = sorted(params_module.NOTEBOOKS_DIR.glob("*.ipynb"))
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
    for stem in recover(profile):
        print(f"  {stem}: finished publishing outputs of an interrupted run", file=sys.stderr)
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
                                       kernel_name=kernel, cwd=str(notebook.parent), progress_bar=False,
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
    recover(profile)                                 # staged outputs of failed notebooks are dropped
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
