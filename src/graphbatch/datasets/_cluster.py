"""Sharded store builds on a cluster engine (Dask ``distributed``): `build_sharded_store`.

The driver loads the source records once (`graphbatch.datasets._build.load_records`), cuts
them into ``shards`` contiguous partitions and submits one task per partition; each task runs
`graphbatch.datasets._build.write_partition` on a worker (one store file per shard, written
atomically by `GraphStoreWriter`). The records travel inside the task, so the scheduler can
re-run a task anywhere: a task that raises is retried ``retries`` times, and a task whose
worker dies (killed, out of memory) is re-scheduled on another worker by Dask (up to its
``distributed.scheduler.allowed-failures``, default 3), whose nanny restarts the dead worker.
A killed writer's temporary folder is removed by the retry (`remove_stale_temporaries`).

Each task also reads back the shard it wrote (`graphbatch.datasets._manifest.shard_facts`: the
store's own open checks, its size table, uuid, header CRC and file identity), so the workers do
that in parallel; the driver opens no shard: it checks that each file on disk is still the one
its writer read (`file_identity`: device, inode, size, modification time) and writes the
manifest (`graphbatch.datasets._manifest.write_manifest_of_facts`) last and atomically. Shard files
carry the build's random id (``<stem>-<id>-00003-of-00008.h5``), so a failed or killed build
never touches a complete earlier set: the old manifest still opens its old shards, and no
manifest refers to the new build's shards. A failed build removes the shards it wrote; once a
new manifest is in place the shards of the manifest it replaced are deleted.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
import uuid as uuidlib
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import BuildCancelled, InputError, ShardBuildError, StoreFormatError
from .._io import check_output_path
from .._validate import as_positive_int
from ._build import BuildOptions, load_records, record_count, slice_records, write_partition
from ._manifest import read_manifest, shard_facts, write_manifest_of_facts
from ._signals import sigint_held
from ._store_write import remove_stale_temporaries

__all__ = [
    "ENGINES",
    "BuildCancelled",
    "ShardBuildError",
    "ShardedBuildReport",
    "build_sharded_store",
    "partition_bounds",
]

#: Cluster engines a sharded build can run on.
ENGINES = ("dask",)


@dataclass(frozen=True)
class ShardedBuildReport:
    """What a sharded build produced. ``shard_seconds``/``shard_cpu_seconds``: wall and CPU
    (process) seconds each shard's final attempt took on its worker; ``engine_seconds``: wall
    time from submitting the tasks to the last shard's result; ``seconds``: driver wall time,
    loading the records, cluster start-up and the manifest included; ``phases``: ``seconds``
    split into the driver's phases in order (``checks``, ``read source``, ``partition``,
    ``cluster start (wait)``: what is left of the start after the source is read, ``submit``,
    ``tasks``, ``previous``, ``manifest``: written, and the replaced set's shards deleted,
    ``cluster close``)."""

    path: Path
    dataset: str
    shards: list[Path]
    n_graph: int
    n_node: int
    n_edge: int
    seconds: float
    engine_seconds: float
    shard_seconds: list[float]
    shard_cpu_seconds: list[float]
    failures: list = field(default_factory=list)
    phases: dict = field(default_factory=dict)

    @property
    def graphs_per_second(self) -> float:
        return self.n_graph / self.seconds if self.seconds > 0 else float("inf")

    @property
    def cpu_seconds_per_graph(self) -> float:
        return sum(self.shard_cpu_seconds) / self.n_graph if self.n_graph else 0.0


def partition_bounds(n_records: int, shards: int) -> np.ndarray:
    """int64 ``[shards + 1]``: partition ``s`` holds records ``bounds[s]:bounds[s+1]``
    (contiguous, sizes differ by at most one, none empty)."""
    shards = as_positive_int(shards, "shards")
    if shards > n_records:
        raise InputError(f"--shards {shards} is more than the {n_records} source records")
    return (np.arange(shards + 1, dtype=np.int64) * n_records) // shards


def _aborted(marker: str) -> bool:
    """Whether the driver has called this build off: its abort marker file exists (next to
    the shards, so every worker sees it). A file, not a Dask ``Event``: an ``Event`` makes each
    worker open a client of its own, which a worker stopped mid-task (the build called off)
    left unclosed -- its ``__del__`` then printed "RuntimeError: IOLoop is closed" tracebacks."""
    return os.path.exists(marker)


def _build_shard(task: dict) -> dict:
    """Cluster task: build one shard store; returns its summary (runs on a worker). A build the
    driver has called off (another shard failed) writes nothing: the task returns at once, or
    deletes the shard it has just written (the driver deletes the shards written before)."""
    wall0, cpu0 = time.perf_counter(), time.process_time()
    if _aborted(task["abort"]):
        return {"aborted": True}
    options = dict(task["options"])
    options["targets"] = tuple(options.get("targets", ()))
    opts = BuildOptions(**options)
    report = write_partition(
        task["path"],
        opts,
        task["records"],
        task["meta"],
        start=task["start"],
        workers=1,
        allow_empty=True,
    )
    if report.n_graph == 0:  # every record failed: no file (the manifest keeps them)
        return {
            "empty": True,
            "failures": report.failures,
            "seconds": time.perf_counter() - wall0,
            "cpu_seconds": time.process_time() - cpu0,
        }
    if _aborted(task["abort"]):  # checked after the rename: the driver's cleanup or this one
        report.path.unlink(missing_ok=True)
        return {"aborted": True}
    facts = shard_facts(report.path)  # read here, in parallel: the driver opens no shard
    return {
        "facts": facts,
        "failures": report.failures,
        "seconds": time.perf_counter() - wall0,
        "cpu_seconds": time.process_time() - cpu0,
    }


def _client(address: str | None, n_workers: int) -> tuple[Any, Any]:
    """A Dask client of the running cluster at ``address``, or of a new local cluster of
    ``n_workers`` single-threaded worker processes; returns ``(client, cluster or None)``."""
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
    # failures reach the driver as exceptions. The workers quiet theirs in `dask_setup`.
    cluster = LocalCluster(
        n_workers=n_workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
        preload=[__name__],
        silence_logs=logging.CRITICAL,
    )
    return Client(cluster), cluster


def dask_setup(worker: Any) -> None:
    """Preload hook, run in each worker process of the local cluster `_client` starts (not on
    a running cluster's workers): the engine's log stays quiet below CRITICAL there too. When
    a called-off build (SIGTERM) closes the cluster under busy workers, their heartbeats meet
    a closed scheduler and Dask logged "Failed to communicate with scheduler during heartbeat"
    with a traceback per worker, beside the one-line report; a task's failure still reaches
    the driver as its exception."""
    for name in ["distributed", *logging.root.manager.loggerDict]:
        if name == "distributed" or name.startswith("distributed."):
            logging.getLogger(name).setLevel(logging.CRITICAL)


class _ClusterStart:
    """`_client` run in a background thread: the local cluster's worker processes start
    (interpreter, imports, registration) while the driver reads and partitions the source."""

    def __init__(self, address: str | None, n_workers: int) -> None:
        pool = ThreadPoolExecutor(1, thread_name_prefix="graphbatch-cluster-start")
        with sigint_held():  # the thread and the worker processes it starts never see Ctrl-C
            self._future = pool.submit(_client, address, n_workers)
        pool.shutdown(wait=False)

    def result(self, stop: threading.Event | None = None) -> tuple[Any, Any]:
        """``(client, cluster or None)`` once started (re-raises a failed start); raises
        `BuildCancelled` as soon as ``stop`` is set (the caller then `discard`s)."""
        from concurrent.futures import TimeoutError as FutureTimeout

        while True:
            _check_stop(stop)
            try:
                return self._future.result(timeout=_POLL_S)
            except FutureTimeout:
                continue
            except Exception:
                _check_stop(stop)  # a start that failed because the build was called off
                raise

    def discard(self) -> None:
        """The build failed before using the cluster: close it once it has started."""
        try:
            client, cluster = self._future.result()
        except BaseException:
            return
        _close(client, cluster)


def _close(client: Any, cluster: Any) -> None:
    client.close()
    if cluster is not None:
        cluster.close()


#: Seconds between checks of a build's ``stop`` event while the driver waits.
_POLL_S = 0.2


def _check_stop(stop: threading.Event | None) -> None:
    if stop is not None and stop.is_set():
        raise BuildCancelled(
            "the sharded build was called off (terminated); no manifest was "
            "written and this build's shards were removed"
        )


def _completed(futures: Iterable[Any], stop: threading.Event | None) -> Iterator[Any]:
    """Yield ``futures`` as they finish, checking ``stop`` every `_POLL_S` seconds: the driver
    never waits inside the engine where a signal could interrupt it."""
    from distributed import wait as wait_for

    pending = set(futures)
    while pending:
        _check_stop(stop)
        try:
            done, pending = wait_for(pending, timeout=_POLL_S, return_when="FIRST_COMPLETED")
        except TimeoutError:
            continue
        yield from done


def _call_off(client: Any, marker: Path, futures: Iterable[Any], *, wait: bool = True) -> None:
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


def _remove(paths: Iterable[str | os.PathLike]) -> None:
    for p in paths:
        Path(p).unlink(missing_ok=True)


def _remove_dead_writers(directory: Path, stem: str, *, markers: bool = False) -> None:
    """Delete temporaries of shard writers (of earlier builds of this manifest) whose process
    is gone, e.g. after the whole build was killed (`remove_stale_temporaries`); with
    ``markers``, also the abort markers ``.<stem>-<build id>.abort`` of builds called off
    before (a new build starts: none of them runs any more)."""
    pattern = re.compile(rf"\.({re.escape(stem)}-[0-9a-f]{{8}}-\d{{5}}-of-\d{{5}}\.h5)\..+\.tmp$")
    marker = re.compile(rf"\.{re.escape(stem)}-[0-9a-f]{{8}}\.abort")
    names = set()
    for p in directory.iterdir():
        if m := pattern.fullmatch(p.name):
            names.add(m.group(1))
        elif markers and marker.fullmatch(p.name):
            p.unlink(missing_ok=True)
    for name in names:
        remove_stale_temporaries(directory / name)


def _previous_shards(out: Path) -> list[Path]:
    """Shard files of a complete manifest already at ``out`` (none if absent or unreadable)."""
    try:
        old = read_manifest(out)
    except (OSError, StoreFormatError):
        return []
    return [old.shard_path(s) for s in range(len(old.shards))]


def build_sharded_store(
    dataset: str,
    out: str | os.PathLike,
    *,
    shards: int,
    engine: str = "dask",
    address: str | None = None,
    workers: int | None = None,
    retries: int = 2,
    graph: str = "radius",
    cutoff: float = 6.0,
    k: int = 24,
    limit: int | None = None,
    source: str | os.PathLike | None = None,
    reverse_edges: bool = False,
    progress: bool = False,
    stop: threading.Event | None = None,
    column: str = "smiles",
    targets: Sequence[str] = (),
) -> ShardedBuildReport:
    """Build ``dataset`` as ``shards`` store files plus a JSON manifest at ``out``, converting
    the partitions on a Dask cluster: a local one with ``workers`` processes (default: CPUs),
    or the running cluster at ``address`` (its workers need graphbatch installed and the output
    folder on a shared file system). Dataset options as `graphbatch.datasets.build_store`
    (``limit`` is not supported for ``code``, whose records are files but whose limit counts
    functions). ``retries``: re-runs of a task that raised. Open the result with
    ``GraphStore(out)``. Raises `ShardBuildError` if a shard fails after its retries; no
    manifest is written then. A local cluster spawns its workers, which re-import the calling
    script: call this under ``if __name__ == "__main__":``.

    ``stop`` (a ``threading.Event``; ``graphbatch data build`` sets it on SIGTERM) calls the
    build off: the driver checks it between its steps and every 0.2 s while it waits, never
    inside the engine's calls, then cleans up as for a failed shard -- tasks called off, the
    cluster closed, this build's shards and its dead writers' temporaries removed -- and raises
    `BuildCancelled`. Once the manifest is written the build completes.
    """
    t0 = time.perf_counter()
    marks = [("start", t0)]

    def mark(name: str) -> None:
        marks.append((name, time.perf_counter()))

    if engine not in ENGINES:
        raise InputError(f"unknown engine {engine!r}; choose one of {ENGINES}")
    out = Path(out)
    if out.suffix != ".json":
        raise InputError(f"the manifest of a sharded store is a .json file, got {str(out)!r}")
    check_output_path(out, [source], "out", what="sharded store manifest")
    if address is not None and workers is not None:
        raise InputError(
            "--workers sizes a local cluster; a running cluster (--address) has its own workers"
        )
    retries = int(retries)
    if retries < 0:
        raise InputError(f"retries must be >= 0, got {retries}")
    opts = BuildOptions(
        dataset,
        graph=graph,
        cutoff=cutoff,
        k=k,
        limit=limit,
        source=None if source is None else str(source),
        reverse_edges=reverse_edges,
        column=column,
        targets=tuple(targets),
    ).check()
    if dataset == "code" and limit is not None:
        raise InputError(
            "--limit counts functions, but a sharded code build partitions files: "
            "build code shards without --limit (or use --source on a smaller "
            "folder)"
        )
    shards = as_positive_int(shards, "shards")
    n_workers = (os.cpu_count() or 1) if workers is None else as_positive_int(workers, "workers")
    if limit is not None:  # too many shards for the records asked for: say so before starting
        partition_bounds(int(limit), shards)
    mark("checks")
    starting = _ClusterStart(address, n_workers)  # meanwhile: read and partition the source
    try:
        _check_stop(stop)
        records, meta = load_records(opts)
        _check_stop(stop)
        mark("read source")
        bounds = partition_bounds(record_count(records), shards)
        directory = out.parent if str(out.parent) else Path(".")
        directory.mkdir(parents=True, exist_ok=True)
        _remove_dead_writers(directory, out.stem, markers=True)
        build_id = uuidlib.uuid4().hex[:8]
        paths = [
            directory / f"{out.stem}-{build_id}-{s:05d}-of-{shards:05d}.h5" for s in range(shards)
        ]
        mark("partition")
        _check_stop(stop)
        client, cluster = starting.result(stop)
    except BaseException:
        starting.discard()
        raise
    mark("cluster start (wait)")
    results: list[dict | None] = [None] * shards
    committed = False
    abort = directory / f".{out.stem}-{build_id}.abort"  # written only to call the build off
    futures: dict = {}
    try:
        t_submit = time.perf_counter()
        for s in range(shards):
            a, b = int(bounds[s]), int(bounds[s + 1])
            task = {
                "path": str(paths[s]),
                "options": opts.as_json(),
                "start": a,
                "abort": str(abort),
                "records": slice_records(records, a, b),
                "meta": {
                    **meta,
                    "shard": {"index": s, "of": shards, "records": [a, b], "build_id": build_id},
                },
            }
            futures[
                client.submit(
                    _build_shard,
                    task,
                    retries=retries,
                    pure=False,
                    key=f"graphbatch-shard-{build_id}-{s:05d}",
                )
            ] = s
        del records
        mark("submit")
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=shards, unit="shard", desc=f"{dataset} shards ({engine})")
        try:
            for fut in _completed(futures, stop):
                s = futures[fut]
                try:
                    results[s] = fut.result()
                except Exception as exc:
                    _call_off(client, abort, futures)
                    msg = " ".join(str(exc).split()) or type(exc).__name__
                    raise ShardBuildError(
                        f"shard {s} ({paths[s].name}, records "
                        f"{int(bounds[s])}:{int(bounds[s + 1])}) failed "
                        f"after the engine's retries: {type(exc).__name__}: "
                        f"{msg}; no manifest was written"
                    ) from exc
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()
        engine_seconds = time.perf_counter() - t_submit
        mark("tasks")
        finished = [r for r in results if r is not None]  # every shard (a failure raised)
        unsharded = sorted(
            int(i) for res in finished if res.get("empty") for i, _ in res["failures"]
        )
        built = [(paths[s], res) for s, res in enumerate(finished) if not res.get("empty")]
        if not built:
            raise InputError(
                f"no {dataset} graphs were built (limit={limit}, {len(unsharded)} failures)"
            )
        _check_stop(stop)
        previous = [p for p in _previous_shards(out) if p not in paths]
        workers_seen = len(client.scheduler_info().get("workers", {}))
        mark("previous")
        entries = write_manifest_of_facts(
            out,
            [r["facts"] for _, r in built],
            name=dataset,
            meta=meta,
            build={
                **opts.as_json(),
                "shards": shards,
                "engine": engine,
                "address": address,
                "workers": workers_seen,
                "retries": retries,
                "build_id": build_id,
                "records": [int(bounds[0]), int(bounds[-1])],
            },
            failed_without_shard=unsharded,
        )
        committed = True
        _remove(previous)
        mark("manifest")
    except BaseException as exc:
        if not committed:
            if futures and not isinstance(exc, ShardBuildError):  # interrupted: do not wait
                _call_off(client, abort, futures, wait=False)
            _remove(paths)  # this build's shards: no manifest refers to them
        raise
    finally:
        _close(client, cluster)
        if not committed:  # again: a task may have renamed its shard in place meanwhile
            _remove(paths)
            _remove_dead_writers(directory, out.stem)
            if cluster is not None:  # its workers are gone: no task looks for the marker
                abort.unlink(missing_ok=True)
        mark("cluster close")
    failures = sorted(f for res in finished for f in (tuple(x) for x in res["failures"]))
    return ShardedBuildReport(
        path=out,
        dataset=dataset,
        shards=[p for p, r in zip(paths, finished, strict=True) if not r.get("empty")],
        n_graph=sum(e.n_graph for e in entries),
        n_node=sum(e.n_node for e in entries),
        n_edge=sum(e.n_edge for e in entries),
        seconds=time.perf_counter() - t0,
        engine_seconds=engine_seconds,
        shard_seconds=[r["seconds"] for r in finished],
        shard_cpu_seconds=[r["cpu_seconds"] for r in finished],
        failures=failures,
        phases={name: t - marks[k][1] for k, (name, t) in enumerate(marks[1:])},
    )
