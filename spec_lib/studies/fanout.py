"""The prompt x method grid of a decode notebook, fanned out over Dask workers.

:func:`spec_lib.studies.bench.run_grid` with ``client=`` hands each job, one (prompt,
sample) decoded by every method in the serial run's rotated order, to one worker, so that
the methods of a paired comparison share one machine's clock; the rows come back as the
serial run's table (in the same order), and the notebook computes aggregates and bootstrap
intervals from them exactly as before.  Dask ``distributed`` does the scheduling and the data
movement: the model and the methods (with their drafters) are scattered to every worker
once.  Each worker process runs one job at a time with ``threads`` torch threads.  Jobs are
submitted longest first (prompt length plus the slice's cap on new tokens,
:func:`submission_order`), so the last job to start is a short one; the rows still come back
in grid order.  A local cluster (:func:`connect` ``"local:N"``) runs its workers without Dask's
malloc trim threshold (:func:`spec_lib.cluster.local_cluster`).  This module knows nothing of
what a job decodes: the grid passes the functions that warm a worker up and compute a job's rows.

Greedy outputs, NFE and acceptance equal the serial run's as long as the model computes the
same logits on the workers (same device, dtype and thread count; a different thread count
can reorder float sums, so near-ties may resolve differently: compare with
:func:`spec_lib.studies.bench.identity_to_reference` and explain divergences by logit gaps as
for any greedy comparison).  Sampled outputs use the same per-(prompt, sample) seeds.
"""

from __future__ import annotations

import atexit
import uuid

import torch
from tqdm.auto import tqdm

from ..cluster import DEFAULT_TIMEOUT, connect_scheduler, local_cluster, parse_cluster

_WARM: set[tuple[int, int]] = set()           # (id(model), id(methods)) warmed up in this process


def connect(address: str, timeout: float = DEFAULT_TIMEOUT):
    """A Dask client for ``address``: ``""`` -> None (serial); ``local`` / ``local:N`` -> a new
    local cluster of N worker processes (default 2) with one thread each, closed at exit;
    anything else: the address of a running scheduler (``tcp://host:8786``), which must answer
    within ``timeout`` seconds (:func:`spec_lib.cluster.connect_scheduler`)."""
    if not isinstance(address, str):
        raise TypeError(f"cluster must be a str ('' for serial, 'local', 'local:N' or an address), got {address!r}")
    if address == "":
        return None
    from distributed import Client

    target, workers = parse_cluster(address)
    if workers is None:
        return connect_scheduler(target, timeout)
    cluster = local_cluster(workers)
    client = Client(cluster)
    atexit.register(cluster.close)
    atexit.register(client.close)
    return client


def _job(payload: tuple, job: int, spec: tuple, settings: dict, threads: int, rows, warm_up) -> list[dict]:
    """One job on a worker: ``rows(model, methods, job, spec, settings)``, after
    ``warm_up(model, methods, prompt, settings)`` once per process for each scattered payload."""
    model, methods = payload
    torch.set_num_threads(threads)
    key = (id(model), id(methods))
    if key not in _WARM:
        warm_up(model, methods, spec[3], settings)
        _WARM.add(key)
    return rows(model, methods, job, spec, settings)


def expected_cost(spec: tuple, settings: dict) -> int:
    """What a job is expected to cost, known before it runs: the prompt's length plus its
    slice's cap on new tokens (``spec = (slice, index, sample, token ids)``; every job is
    decoded by the same methods, and a response ends at the cap unless EOS comes first)."""
    return len(spec[3]) + settings["max_new_tokens"][spec[0]]


def submission_order(jobs: list[tuple], settings: dict) -> list[int]:
    """The jobs' indices, longest first by :func:`expected_cost` (ties in grid order): the
    order :func:`run_jobs` submits them in, so that no long job starts last and leaves the
    other workers idle at the end."""
    return sorted(range(len(jobs)), key=lambda job: (-expected_cost(jobs[job], settings), job))


def run_jobs(client, model, methods: list, jobs: list[tuple], settings: dict, *, rows, warm_up, threads: int = 1,
             progress: bool = True) -> list[dict]:
    """The rows of every job of :func:`spec_lib.studies.bench.run_grid`, computed on the
    client's workers by ``rows`` (:func:`spec_lib.studies.bench.job_rows`) after ``warm_up``
    (:func:`spec_lib.studies.bench.warm_up`; both module-level functions, which Dask sends by
    reference): submitted longest first (:func:`submission_order`), returned in job order."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be an int >= 1, got {threads!r}")
    if not client.scheduler_info().get("workers"):
        raise RuntimeError("the Dask cluster has no workers: start some, or pass client=None for a serial run")
    key = f"grid-{uuid.uuid4().hex}"      # a key of its own: a grid's cancel must not reach the next grid's payload
    payload = client.scatter({key: (model, list(methods))}, broadcast=True, hash=False)[key]
    futures = [None] * len(jobs)
    for rank, job in enumerate(submission_order(jobs, settings)):       # Dask runs higher priorities first
        futures[job] = client.submit(_job, payload, job, jobs[job], settings, threads, rows, warm_up, pure=False,
                                    priority=-rank)
    from distributed import as_completed

    for _ in tqdm(as_completed(futures), total=len(futures), desc="decoding (fanned out)", disable=not progress):
        pass
    rows = [row for part in client.gather(futures) for row in part]
    client.cancel(payload)
    return rows
