"""Running notebooks headlessly with papermill, one after another: what ``python -m
spec_lib.run`` (:mod:`spec_lib.run`, the command line) and the Dask runner
(:mod:`spec_lib.notebook.cluster`) both execute, so that both skip, fail, stamp and publish alike.

* Parameters come from ``params/<profile>/<notebook>.yaml``, checked against the notebook's
  ``parameters`` cell before anything runs (:func:`plan`); ``profile`` is injected.
* Executed notebooks go to ``runs/<profile>/`` (gitignored); notebooks write their own
  results and figures, published as one set per run (:mod:`spec_lib.notebook.results`).
* A failed notebook is reported with its failing cell and error; the others still run.
* A notebook whose code version (:mod:`spec_lib.notebook.versions`) and parameters are unchanged
  since its last successful run is skipped unless forced (:func:`run_one`).
* :func:`stale_plan` selects the notebooks whose results are missing or stale, longest first (by
  ``run_times.json``), and writes the ledger ``results/<profile>/STALE.md``; :func:`finished`
  records each run's time and strikes it off the ledger once its results are published.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

from tqdm.auto import tqdm

from ..io import atomic_write_bytes, output_root
from . import live as live_module
from . import params as params_module
from .params import ParameterError, load_params
from ..training.cache import retrain_requested
from .results import code_version, recover

KERNEL_NAME = "spec-lib"


def _stamp(version: str, params: dict) -> str:
    """What a run depends on: the notebook's code version (:mod:`spec_lib.notebook.versions`)
    and the parameters passed."""
    blob = json.dumps({"code": version, "params": params}, sort_keys=True)
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


def plan(profile: str, names: list[str]) -> list[tuple[Path, dict]]:
    """The selected notebooks with their checked parameters (every check before any run)."""
    return [(nb, load_params(nb, profile)) for nb in select_notebooks(names)]


RUN_TIMES = "run_times.json"


def run_times(profile: str) -> dict[str, float]:
    """Seconds of each notebook's last successful run at ``profile`` (``results/<profile>/run_times.json``)."""
    path = output_root() / "results" / profile / RUN_TIMES
    return json.loads(path.read_text()) if path.is_file() else {}


def record_run_time(profile: str, stem: str, seconds: float) -> None:
    times = run_times(profile)
    times[stem] = round(seconds, 1)
    atomic_write_bytes(output_root() / "results" / profile / RUN_TIMES,
                       (json.dumps(dict(sorted(times.items())), indent=1) + "\n").encode())


def longest_first(profile: str, plans: list[tuple[Path, dict]]) -> list[tuple[Path, dict]]:
    """``plans`` by decreasing recorded run time (never-timed notebooks first)."""
    times = run_times(profile)
    return sorted(plans, key=lambda item: -times.get(item[0].stem, float("inf")))


def stale_plan(profile: str, names: list[str], write: bool = True) -> list[tuple[Path, dict]]:
    """The selected notebooks whose results are missing or stale, longest first; the ledger
    lists them (when ``write``) before anything runs."""
    from .versions import list_stale, read_ledger, stale, write_ledger

    plans = plan(profile, names)
    recover(profile)                                  # an interrupted publish counts before staleness
    found = stale(profile, [nb for nb, _ in plans])
    if write:
        selected = {nb.stem for nb, _ in plans}
        kept = {k: v for k, v in read_ledger(profile).items() if k not in selected}
        write_ledger(profile, {**kept, **list_stale(profile, found)})
    for stem, reasons in found.items():
        print(f"  stale: {stem}: {'; '.join(reasons)}", file=sys.stderr)
    return longest_first(profile, [(nb, params) for nb, params in plans if nb.stem in found])


def finished(profile: str, stem: str, status: str, seconds: float | None) -> None:
    """After a notebook ran (in this process, whoever executed it): record its time and strike
    it off the ledger once its results are published."""
    from .versions import list_stale, read_ledger, stale, write_ledger

    if status != "ok":
        return
    record_run_time(profile, stem, seconds)
    entries = read_ledger(profile)
    if stem in entries:
        still = stale(profile, [stem])                # e.g. the code changed again since it started
        entries.pop(stem)
        write_ledger(profile, {**entries, **list_stale(profile, still)})


def run(profile: str, names: list[str], force: bool = False, progress: bool = True, only_stale: bool = False) -> int:
    """Execute the selected notebooks one after another (with ``only_stale``: the stale ones,
    longest first, keeping the ledger); returns the number that failed."""
    plans = stale_plan(profile, names) if only_stale else plan(profile, names)
    force = force or only_stale or retrain_requested()        # a retrain reruns what it retrains for
    kernel = ensure_kernel()
    for stem in recover(profile):
        print(f"  {stem}: finished publishing outputs of an interrupted run", file=sys.stderr)
    failures, summary = [], []
    bar = tqdm(plans, desc=f"notebooks [{profile}]", unit="nb", disable=not progress, position=0)
    with live_module.text_progress_kernels():
        for notebook, params in bar:
            bar.set_postfix_str(notebook.stem)
            status, seconds, failure = run_one(notebook, params, profile, force=force, progress=progress,
                                               kernel=kernel)
            finished(profile, notebook.stem, status, seconds)
            summary.append((notebook.stem, status, seconds))
            failures += [failure] if failure else []
    bar.close()
    return finish(profile, summary, failures)


def finish(profile: str, summary: list, failures: list[str]) -> int:
    """Drop staged outputs of failed notebooks, print the end table and the failures; returns
    the number of failures."""
    recover(profile)
    print(summary_table(summary, profile))
    for line in failures:
        print(f"FAILED {line}  (executed notebook: runs/{profile})", file=sys.stderr)
    return len(failures)


def run_one(notebook: Path, params: dict, profile: str, *, force: bool, progress: bool,
            kernel: str) -> tuple[str, float | None, str | None]:
    """Run one notebook unless it is up to date: ``(status, seconds or None, failure or None)``
    with status ``ok``, ``up to date`` or ``FAILED`` (the serial and the cluster runner both
    call this, so both skip, fail and stamp alike)."""
    runs = output_root() / "runs" / profile
    runs.mkdir(parents=True, exist_ok=True)
    stamp_path = runs / f"{notebook.stem}.stamp"
    version = code_version(notebook, profile)
    stamp = _stamp(version, params)
    published = output_root() / "results" / profile / f"{notebook.stem}.json"
    if not force and published.exists() and stamp_path.exists() and stamp_path.read_text().strip() == stamp:
        return "up to date", None, None
    stamp_path.unlink(missing_ok=True)
    started = time.perf_counter()
    failure = _execute(notebook, runs, params, kernel, progress)
    seconds = time.perf_counter() - started
    if failure is None and published.exists() and json.loads(published.read_text()).get("code_version") != version:
        failure = (f"{notebook.stem}: the code changed while it ran (its results record another code version "
                   f"than the one it started with); run it again")
    if failure is None:
        atomic_write_bytes(stamp_path, stamp.encode())
    return ("ok" if failure is None else "FAILED"), seconds, failure


def _execute(notebook: Path, runs: Path, params: dict, kernel: str, progress: bool) -> str | None:
    """Execute one notebook (live view when ``progress``); None, or why it failed."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    live = None
    if progress:
        import nbformat

        cells = sum(c.cell_type == "code" for c in nbformat.read(notebook, as_version=4).cells)
        live = live_module.LiveView(notebook.stem, cells + 1)          # + papermill's injected parameters
    try:
        papermill.execute_notebook(str(notebook), str(runs / notebook.name), parameters=params,
                                   kernel_name=kernel, cwd=str(notebook.parent), progress_bar=False,
                                   log_output=False, engine_name=live_module.ENGINE_NAME, live=live)
    except PapermillExecutionError as err:
        where = f"cell In[{err.exec_count}]" if err.exec_count else f"cell #{err.cell_index}"
        return (f"{notebook.stem}: failed in {where} ({live_module.first_line(err.source or '', 60)!r}): "
                f"{err.ename}: {err.evalue or '(no message)'}")
    except Exception as err:                                        # kernel death, I/O, ...
        return f"{notebook.stem}: failed: {type(err).__name__}: {err}"
    finally:
        if live is not None:
            live.close()
    return None


def summary_table(summary: list[tuple[str, str, float | None]], profile: str) -> str:
    """The end-of-run table: notebook, status, wall time, and where its results are (the
    results JSON, or the executed notebook for a failure), paths relative to the output root."""
    rows = [("notebook", "status", "time", "results")]
    for stem, status, seconds in summary:
        where = (f"runs/{profile}/{stem}.ipynb" if status == "FAILED" else f"results/{profile}/{stem}.json")
        shown = "-" if seconds is None else (f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min")
        rows.append((stem, status, shown, where))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)
