"""Dask cluster addresses, local clusters and connections: what the fan-out of a notebook's
grid (:mod:`spec_lib.studies.fanout`) and the parallel runner (:mod:`spec_lib.notebook.cluster`)
share.

An address is ``local`` / ``local:N`` (a :class:`distributed.LocalCluster` of N worker
processes, one thread each, started here) or a scheduler's address, ``tcp://host:port`` (also
``tls://``, ``ws://``, ``wss://``, ``ucx://``, or ``host:port`` for ``tcp://``).  A malformed
address and a scheduler that does not answer within ``timeout`` seconds raise
:class:`ClusterError` (a ``ValueError``) with a one-line message, before any work.
"""

from __future__ import annotations

import os
import re

#: Schemes of Dask's communication backends that take a host and a port.
SCHEMES = ("tcp", "tls", "ws", "wss", "ucx")
#: Seconds a connection to a scheduler waits for an answer, unless told otherwise.
DEFAULT_TIMEOUT = 10.0
DEFAULT_RESOURCES = {"CPU": 1}

# Dask's nanny starts each worker process with MALLOC_TRIM_THRESHOLD_=65536 (its default
# ``distributed.nanny.pre-spawn-environ``): glibc then hands freed memory back to the OS at every
# free above 64 KiB, and the decoders, which allocate and free many small tensors per forward
# call, decoded notebook 11's grid about 19% slower in a worker than in a plain process.
TRIM_VARIABLE = "MALLOC_TRIM_THRESHOLD_"
# None unsets a variable in these Dask config keys (distributed.nanny._get_env_variables).
NO_TRIM_CONFIG = {f"distributed.nanny.pre-spawn-environ.{TRIM_VARIABLE}": None,
                  f"distributed.nanny.environ.{TRIM_VARIABLE}": None}


class ClusterError(ValueError):
    """A cluster address that cannot be used: malformed, or no scheduler answers there."""


def parse_cluster(address) -> tuple[str, int | None]:
    """``local`` / ``local:N`` -> ``("local", N)`` (N defaults to 2); a scheduler address ->
    ``(address with its scheme, None)``.  Raises :class:`ClusterError` naming what is wrong."""
    if not isinstance(address, str):
        raise ClusterError(f"cluster must be a str ('local', 'local:N' or a scheduler address such as "
                           f"tcp://host:8786), got {address!r}")
    if address == "local" or address.startswith("local:"):
        count = address.partition(":")[2] or "2"
        if not count.isdigit() or int(count) < 1:
            raise ClusterError(f"cluster local:N needs N >= 1 workers, got {address!r}")
        return "local", int(count)
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "tcp", address
    if scheme not in SCHEMES:
        raise ClusterError(f"cluster address {address!r} has scheme {scheme!r}; allowed: {', '.join(SCHEMES)} "
                           f"(e.g. tcp://host:8786), 'local' or 'local:N'")
    match = re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[^:/\[\]]*)(?::([^/]*))?/?", rest)
    host, port = (match.group(1), match.group(2)) if match else (None, None)
    if not host:
        raise ClusterError(f"cluster address {address!r} names no host; expected {scheme}://host:port "
                           f"(e.g. tcp://127.0.0.1:8786)")
    if port is None or port == "":
        raise ClusterError(f"cluster address {address!r} names no port; expected {scheme}://{host}:port "
                           f"(the scheduler's, 8786 by default)")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ClusterError(f"cluster address {address!r} has port {port!r}; expected a number in [1, 65535]")
    return f"{scheme}://{host}:{int(port)}", None


def check_timeout(timeout) -> float:
    """``timeout`` as seconds > 0 (a finite number)."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < float("inf"):
        raise ClusterError(f"cluster timeout must be a number of seconds > 0, got {timeout!r}")
    return float(timeout)


def local_cluster(workers: int):
    """A local Dask cluster: ``workers`` processes, one thread each, ``CPU=1`` (and ``GPU=1``
    where torch sees one); no dashboard.

    Its workers run without Dask's malloc trim threshold (glibc's own adaptive one), whatever
    the Dask configuration: the nannies are created under :data:`NO_TRIM_CONFIG`
    (``distributed.nanny.pre-spawn-environ`` and ``distributed.nanny.environ`` with
    ``MALLOC_TRIM_THRESHOLD_: null``), and the variable is removed from this process's
    environment, which worker processes inherit (Dask's nanny writes it there when it starts a
    worker with its default; it has no effect on a process already running).  Workers added
    later by ``cluster.scale`` are not covered."""
    import dask.config
    from distributed import LocalCluster

    resources = dict(DEFAULT_RESOURCES)
    try:
        import torch

        if torch.cuda.is_available():
            resources["GPU"] = 1
    except ImportError:                                  # pragma: no cover - torch is a dependency
        pass
    os.environ.pop(TRIM_VARIABLE, None)
    with dask.config.set(NO_TRIM_CONFIG):
        return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, resources=resources,
                            dashboard_address=None)


def connect_scheduler(address: str, timeout: float = DEFAULT_TIMEOUT):
    """A :class:`distributed.Client` of the scheduler at ``address`` (parsed by
    :func:`parse_cluster`), or :class:`ClusterError` when none answers within ``timeout``
    seconds."""
    from distributed import Client

    target, workers = parse_cluster(address)
    if workers is not None:
        raise ClusterError(f"connect_scheduler needs a scheduler address, got {address!r} (use local_cluster)")
    seconds = check_timeout(timeout)
    try:
        return Client(target, timeout=seconds)
    except (OSError, TimeoutError) as err:          # distributed raises OSError("Timed out trying to connect ...")
        raise ClusterError(f"no Dask scheduler answered at {target} within {seconds:g} s "
                           f"({type(err).__name__}); start one (dask scheduler) or raise the timeout") from None
