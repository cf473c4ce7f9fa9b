"""Notebooks in parallel on a Dask cluster: ``python -m spec_lib.run --cluster ADDRESS``.

Dask ``distributed`` does the scheduling, the retries and the data movement; this module
only says what a notebook needs and hands each one to :func:`spec_lib.notebook.run.run_one`
on a worker, so skips, failures, stamps and the published results behave exactly as in the
serial runner.

* ``--cluster local`` (or ``local:N``) starts a :class:`distributed.LocalCluster` of N worker
  processes (default 2), one thread each, for the length of the run
  (:func:`spec_lib.cluster.local_cluster`: without Dask's malloc trim threshold); any other value
  is the address of a running scheduler (``tcp://host:8786``), whose workers keep the
  environment they were started with; a malformed address, or a scheduler that does not answer
  within ``timeout`` seconds, raises :class:`spec_lib.cluster.ClusterError` before anything runs.
* **Resources.**  A notebook declares what it needs per profile in its metadata,
  ``{"spec_lib": {"resources": {"gpu": {"GPU": 1}}}}``; without a declaration it needs
  ``{"CPU": 1}``.  Tasks are submitted with those Dask resources, so a worker must offer them
  (``dask worker --resources "CPU=1,GPU=1"``; local workers offer ``CPU=1``, and ``GPU=1``
  where torch sees a GPU).  A notebook whose resources no worker offers fails at once with a
  message naming them, rather than waiting for ever.
* **Order.**  ``{"spec_lib": {"needs": ["10_train_self_speculative_model"]}}`` in a
  notebook's metadata makes it start after that notebook (when both are selected): notebook
  10 trains the model that 11-14 load; run together, they would each train it.
* **Where files go.**  A worker writes results, figures, executed notebooks and cached models
  under the client's output root (the environment is passed to each task), so the workers
  must see the client's checkout at the same path: a local cluster, or a shared filesystem.
  Each task checks that first and fails with a clear message otherwise.

Timings measured by notebooks that share a machine are contended: run timing notebooks on
workers of their own (one per machine) when their numbers matter.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

from ..cluster import (DEFAULT_RESOURCES, DEFAULT_TIMEOUT, check_timeout, connect_scheduler, local_cluster,
                       parse_cluster)
from ..io import output_root
from ..training.cache import retrain_requested
from . import params as params_module
from . import run
from .results import recover

ENVIRONMENT = ("SPEC_LIB_OUTPUT_ROOT", "SPEC_LIB_NOTEBOOKS_DIR", "SPEC_LIB_PARAMS_DIR", "SPEC_LIB_ARTIFACTS",
               "SPEC_LIB_MODELS", "SPEC_LIB_RETRAIN", "SPEC_LIB_FINGERPRINT_CACHE")


def declared(notebook: Path, profile: str) -> tuple[dict[str, float], list[str]]:
    """What ``notebook``'s metadata declares: the Dask resources it needs at ``profile``
    (default ``CPU=1``) and the notebooks (stems) that must finish before it starts."""
    import nbformat

    meta = nbformat.read(notebook, as_version=4).metadata.get("spec_lib", {})
    if not isinstance(meta, dict):
        raise params_module.ParameterError(f"{notebook.name}: metadata 'spec_lib' must be a mapping, got {meta!r}")
    resources = meta.get("resources", {}).get(profile, DEFAULT_RESOURCES)
    if not isinstance(resources, dict) or not all(isinstance(v, (int, float)) and v > 0 for v in resources.values()):
        raise params_module.ParameterError(f"{notebook.name}: resources for {profile!r} must map names to positive "
                                           f"numbers, got {resources!r}")
    needs = meta.get("needs", [])
    if not isinstance(needs, list) or not all(isinstance(n, str) for n in needs):
        raise params_module.ParameterError(f"{notebook.name}: metadata 'needs' must be a list of notebook stems")
    return dict(resources), needs


def run_task(notebook: str, profile: str, params: dict, force: bool, environment: dict, *needs_done):
    """One notebook on a worker (``needs_done``: results of the notebooks it waits for)."""
    from . import live

    for name, value in environment.items():
        os.environ[name] = value
    params_module.NOTEBOOKS_DIR = Path(environment.get("SPEC_LIB_NOTEBOOKS_DIR", params_module.NOTEBOOKS_DIR))
    params_module.PARAMS_DIR = Path(environment.get("SPEC_LIB_PARAMS_DIR", params_module.PARAMS_DIR))
    path = Path(notebook)
    if not path.is_file() or not output_root().is_dir():
        return path.stem, "FAILED", None, (f"{path.stem}: failed: this worker does not see {path} or the output root "
                                           f"{output_root()} (workers need the checkout at the same path)")
    kernel = run.ensure_kernel()
    with live.text_progress_kernels():
        status, seconds, failure = run.run_one(path, params, profile, force=force, progress=False, kernel=kernel)
    return path.stem, status, seconds, failure


def run_on_cluster(profile: str, names: list[str], cluster: str, force: bool = False, progress: bool = True,
                   retries: int = 0, only_stale: bool = False, timeout: float = DEFAULT_TIMEOUT) -> int:
    """Execute the selected notebooks on a Dask cluster (with ``only_stale``: the stale ones,
    longest first, keeping the ledger, as :func:`spec_lib.notebook.run.run`); returns the
    number that failed.  ``timeout``: seconds a scheduler address has to answer."""
    from distributed import Client, as_completed
    from tqdm.auto import tqdm

    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise params_module.ParameterError(f"--retries must be an int >= 0, got {retries!r}")
    address, workers = parse_cluster(cluster)
    timeout = check_timeout(timeout)
    plans = run.stale_plan(profile, names) if only_stale else run.plan(profile, names)   # checks before any run
    force = force or only_stale or retrain_requested()
    wanted = {nb.stem: declared(nb, profile) for nb, _ in plans}
    for stem in recover(profile):
        print(f"  {stem}: finished publishing outputs of an interrupted run", file=sys.stderr)
    environment = {name: os.environ[name] for name in ENVIRONMENT if name in os.environ}
    environment.setdefault("SPEC_LIB_OUTPUT_ROOT", str(output_root()))
    output_root().mkdir(parents=True, exist_ok=True)            # each worker checks that it sees this folder
    owned = local_cluster(workers) if address == "local" else None
    summary, failures = {}, []
    try:
        with (Client(owned) if owned is not None else connect_scheduler(address, timeout)) as client:
            offered = [w.get("resources", {}) for w in client.scheduler_info()["workers"].values()]
            futures = {}
            for notebook, params in plans:
                needed, needs = wanted[notebook.stem]
                if not any(all(res.get(k, 0) >= v for k, v in needed.items()) for res in offered):
                    summary[notebook.stem] = ("FAILED", None)
                    failures.append(f"{notebook.stem}: not run: needs resources {needed}, and no worker of the cluster "
                                    f"offers them (workers offer {offered})")
                    continue
                waits = [futures[n] for n in needs if n in futures]
                futures[notebook.stem] = client.submit(
                    run_task, str(notebook.resolve()), profile, params, force, environment, *waits,
                    resources=needed, retries=retries, pure=False, key=f"{notebook.stem}-{uuid.uuid4().hex[:8]}")
            bar = tqdm(total=len(futures), desc=f"notebooks [{profile}] on {cluster}", unit="nb",
                       disable=not progress)
            stems = {future.key: stem for stem, future in futures.items()}
            for future in as_completed(list(futures.values())):
                try:
                    stem, status, seconds, failure = future.result()
                except Exception as err:                           # a worker died, retries spent, ...
                    stem, status, seconds = stems[future.key], "FAILED", None
                    failure = f"{stem}: failed on the cluster: {type(err).__name__}: {err}"
                summary[stem] = (status, seconds)
                run.finished(profile, stem, status, seconds)
                failures += [failure] if failure else []
                bar.set_postfix_str(f"{stem}: {status}")
                bar.update()
            bar.close()
    finally:
        if owned is not None:
            owned.close()
    ordered = [(nb.stem, *summary[nb.stem]) for nb, _ in plans]
    return run.finish(profile, ordered, failures)
