"""The driver's side of a Dask cluster for a sharded build: start a client (a new local
cluster, or a running one) in a background thread, wait for tasks while watching the build's
``stop`` event, call the tasks off, close. ``distributed`` is imported only here, when a build
starts one (the ``cluster`` extra)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .._errors import BuildCancelled
from ._signals import sigint_held

__all__ = [
    "ClusterStart",
    "POLL_S",
    "call_off",
    "check_stop",
    "close_client",
    "completed",
    "start_client",
]


def start_client(address: str | None, n_workers: int, preload: str) -> tuple[Any, Any]:
    """A Dask client of the running cluster at ``address``, or of a new local cluster of
    ``n_workers`` single-threaded worker processes, each importing module ``preload`` while it
    starts (and running its ``dask_setup(worker)``); returns ``(client, cluster or None)``."""
    try:
        from distributed import Client, LocalCluster
    except ImportError as exc:  # pragma: no cover - distributed is in the cluster extra
        raise ImportError("sharded builds need Dask: pip install 'graphbatch[cluster]'") from exc
    if address is not None:
        return Client(address, timeout="30s"), None
    # ":0": the scheduler's HTTP endpoint on a free port (builds side by side never collide);
    # preload: each worker imports the shard task's module while it starts, i.e. while the
    # driver still reads the source, not in its first task
    # silence_logs: the engine's own log (a task cancelled when a build is called off, a
    # scheduler closed under a busy worker) would print beside graphbatch's one-line report;
    # failures reach the driver as exceptions. The workers quiet theirs in ``dask_setup``.
    cluster = LocalCluster(
        n_workers=n_workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
        preload=[preload],
        silence_logs=logging.CRITICAL,
    )
    return Client(cluster), cluster


class ClusterStart:
    """`start_client` run in a background thread: the local cluster's worker processes start
    (interpreter, imports, registration) while the driver reads and partitions the source."""

    def __init__(self, address: str | None, n_workers: int, preload: str) -> None:
        pool = ThreadPoolExecutor(1, thread_name_prefix="graphbatch-cluster-start")
        with sigint_held():  # the thread and the worker processes it starts never see Ctrl-C
            self._future = pool.submit(start_client, address, n_workers, preload)
        pool.shutdown(wait=False)

    def result(self, stop: threading.Event | None = None) -> tuple[Any, Any]:
        """``(client, cluster or None)`` once started (re-raises a failed start); raises
        `BuildCancelled` as soon as ``stop`` is set (the caller then `discard`s)."""
        from concurrent.futures import TimeoutError as FutureTimeout

        while True:
            check_stop(stop)
            try:
                return self._future.result(timeout=POLL_S)
            except FutureTimeout:
                continue
            except Exception:
                check_stop(stop)  # a start that failed because the build was called off
                raise

    def discard(self) -> None:
        """The build failed before using the cluster: close it once it has started."""
        try:
            client, cluster = self._future.result()
        except BaseException:
            return
        close_client(client, cluster)


def close_client(client: Any, cluster: Any) -> None:
    """Close ``client``, then the local ``cluster`` it was started with (if any)."""
    client.close()
    if cluster is not None:
        cluster.close()


#: Seconds between checks of a build's ``stop`` event while the driver waits.
POLL_S = 0.2


def check_stop(stop: threading.Event | None) -> None:
    """Raise `BuildCancelled` once ``stop`` is set."""
    if stop is not None and stop.is_set():
        raise BuildCancelled(
            "the sharded build was called off (terminated); no manifest was "
            "written and this build's shards were removed"
        )


def completed(futures: Iterable[Any], stop: threading.Event | None) -> Iterator[Any]:
    """Yield ``futures`` as they finish, checking ``stop`` every `POLL_S` seconds: the driver
    never waits inside the engine where a signal could interrupt it."""
    from distributed import wait as wait_for

    pending = set(futures)
    while pending:
        check_stop(stop)
        try:
            done, pending = wait_for(pending, timeout=POLL_S, return_when="FIRST_COMPLETED")
        except TimeoutError:
            continue
        yield from done


def call_off(client: Any, marker: Path, futures: Iterable[Any], *, wait: bool = True) -> None:
    """Stop a failing build: write the abort marker, so that tasks not yet started return at
    once and running ones delete their shard after writing it; with ``wait``, return once every
    task has ended (and remove the marker), else cancel the tasks (the engine drops what they
    return; a running cluster's tasks may still look for the marker, which stays)."""
    from distributed import wait as wait_for

    try:
        marker.touch()
        if wait:
            wait_for(list(futures), timeout=3600)
            marker.unlink(missing_ok=True)  # every task has ended: none looks at it again
        else:
            client.cancel(list(futures))
    except Exception:
        pass
