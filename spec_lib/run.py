"""The notebook runner's command line: ``python -m spec_lib.run [--profile P] [NOTEBOOK ...]``.

* Parameters come from ``params/<profile>/<notebook>.yaml``; they are checked against the
  notebook's ``parameters`` cell (names and type annotations) *before anything runs*
  (papermill itself only warns on an unknown name).  ``profile`` is injected.
* Executed notebooks go to ``runs/<profile>/`` (gitignored); notebooks write their own
  results and figures, published as one set per run (see :mod:`spec_lib.notebook.results`).
* A failed notebook is reported with its failing cell and error; the others still run;
  the exit status is non-zero.
* With progress on (the default), the running notebook's current cell, its printed lines and
  its own progress bars are shown live (:mod:`spec_lib.notebook.live`); at the end a table
  lists every notebook with its status, time and results file.
* A notebook whose source, parameters and the code that decides its numbers are unchanged since
  its last successful run is skipped unless ``--force``.
* ``--stale`` runs only the notebooks whose committed results are missing or were produced by
  other code (:mod:`spec_lib.notebook.versions`), longest first (by ``run_times.json``), and keeps
  the ledger ``results/<profile>/STALE.md``: every stale notebook is listed before the first one
  starts and struck off the moment its results are published, so a regeneration can be
  committed notebook by notebook and continued later.  ``--list-stale`` only writes the ledger.
* Every successful run's wall time goes to ``results/<profile>/run_times.json``.
* ``--retrain`` ignores the committed models (``models/``): they are trained anew into
  ``artifacts/`` (:mod:`spec_lib.notebook.store`).
* ``--cluster local|local:N|ADDRESS`` runs independent notebooks in parallel on Dask
  (:mod:`spec_lib.notebook.cluster`), with the same skips, failures and results; a malformed
  address, or a scheduler that does not answer within ``--cluster-timeout`` seconds, is a
  one-line error (:mod:`spec_lib.cluster`).
* Bad arguments and params files that cannot be read (not UTF-8, invalid YAML, duplicate keys, a
  directory) stop the run before anything executes, with one line naming the problem (exit
  status 2, no traceback).
"""

from __future__ import annotations

import argparse
import os
import sys

from .cluster import DEFAULT_TIMEOUT
from .notebook.params import ParameterError
from .notebook.results import PROFILES
from .training.cache import retrain_requested


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run; the exit status: 0, 1 when a notebook failed, 2 for an argument
    error (reported in one line, before anything runs)."""
    parser = argparse.ArgumentParser(prog="python -m spec_lib.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", choices=PROFILES, default="cpu", help="parameter profile (default: cpu)")
    parser.add_argument("--force", action="store_true", help="re-run notebooks that are up to date")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--stale", action="store_true",
                        help="run only the notebooks whose results are missing or stale, longest first, keeping the "
                             "ledger results/<profile>/STALE.md")
    parser.add_argument("--list-stale", action="store_true",
                        help="write the ledger of stale results and print them; run nothing")
    parser.add_argument("--retrain", action="store_true",
                        help="ignore the committed models (models/) and train them anew into artifacts/")
    parser.add_argument("--cluster", metavar="ADDRESS",
                        help="run notebooks in parallel on a Dask cluster: 'local', 'local:N' (N worker processes) "
                             "or a scheduler address such as tcp://host:8786 (spec_lib.notebook.cluster)")
    parser.add_argument("--cluster-timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=f"with --cluster ADDRESS: seconds to wait for the scheduler to answer (default "
                             f"{DEFAULT_TIMEOUT:g})")
    parser.add_argument("--retries", type=int, default=0,
                        help="with --cluster: times Dask re-runs a notebook whose worker was lost (default 0)")
    parser.add_argument("notebooks", nargs="*", help="notebook stems or number prefixes (default: all)")
    args = parser.parse_args(argv)
    if args.retrain:
        os.environ["SPEC_LIB_RETRAIN"] = "1"                  # the notebook kernels inherit it
    try:
        retrain_requested()                                   # a bad SPEC_LIB_RETRAIN fails before any run
        if args.list_stale:
            from .notebook.run import stale_plan
            from .notebook.versions import ledger_path, read_ledger
            from .io import output_root

            selected = stale_plan(args.profile, args.notebooks)
            listed = read_ledger(args.profile)
            print(f"{len(selected)} of the selected notebooks stale; {len(listed)} listed in "
                  f"{ledger_path(args.profile).relative_to(output_root()).as_posix()}")
            return 0
        if args.cluster:
            from .notebook.cluster import run_on_cluster

            failed = run_on_cluster(args.profile, args.notebooks, args.cluster, force=args.force,
                                    progress=not args.no_progress, retries=args.retries, only_stale=args.stale,
                                    timeout=args.cluster_timeout)
        else:
            from .notebook.run import run

            failed = run(args.profile, args.notebooks, force=args.force, progress=not args.no_progress,
                         only_stale=args.stale)
    except (ParameterError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
