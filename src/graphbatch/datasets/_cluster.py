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

Here: the driver's steps (`build_sharded_store`) and the task a worker runs (`_build_shard`).
The build's settings, file names and their cleanup are `graphbatch.datasets._shard_files`; the
cluster client, waiting and calling tasks off `graphbatch.datasets._dask_engine`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import BuildCancelled, InputError, ShardBuildError
from ._build import BuildOptions, load_records, record_count, slice_records, write_partition
from ._dask_engine import ClusterStart, call_off, check_stop, close_client, completed
from ._manifest import shard_facts, write_manifest_of_facts
from ._shard_files import (
    ENGINES,
    ShardedBuild,
    checked_build,
    partition_bounds,
    previous_shards,
    remove_dead_writers,
    remove_files,
    remove_uncommitted,
)

__all__ = [
    "ENGINES",
    "BuildCancelled",
    "ShardBuildError",
    "ShardedBuildReport",
    "build_sharded_store",
    "partition_bounds",
]


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
    ``open_store(out)``. Raises `ShardBuildError` if a shard fails after its retries; no
    manifest is written then. A local cluster spawns its workers, which re-import the calling
    script: call this under ``if __name__ == "__main__":``.

    ``stop`` (a ``threading.Event``; ``graphbatch data build`` sets it on SIGTERM) calls the
    build off: the driver checks it between its steps and every 0.2 s while it waits, never
    inside the engine's calls, then cleans up as for a failed shard -- tasks called off, the
    cluster closed, this build's shards and its dead writers' temporaries removed -- and raises
    `BuildCancelled`. Once the manifest is written the build completes.
    """
    phases = _Phases()
    build = checked_build(
        dataset,
        out,
        shards=shards,
        engine=engine,
        address=address,
        workers=workers,
        retries=retries,
        progress=progress,
        stop=stop,
        conversion={
            "graph": graph,
            "cutoff": cutoff,
            "k": k,
            "limit": limit,
            "source": source,
            "reverse_edges": reverse_edges,
            "column": column,
            "targets": targets,
        },
    )
    phases.mark("checks")
    # the cluster starts while the driver reads and partitions the source
    starting = ClusterStart(build.address, build.n_workers, preload=__name__)
    try:
        records, meta, bounds = _read_and_partition(build, phases)
        check_stop(build.stop)
        client, cluster = starting.result(build.stop)
    except BaseException:
        starting.discard()
        raise
    phases.mark("cluster start (wait)")
    committed = False
    futures: dict = {}
    try:
        t_submit = time.perf_counter()
        _submit_shards(client, build, records, meta, bounds, futures)
        del records  # the tasks hold them now
        phases.mark("submit")
        finished = _shard_results(client, build, futures, bounds)
        engine_seconds = time.perf_counter() - t_submit
        phases.mark("tasks")
        entries, previous = _write_manifest(build, client, finished, meta, bounds, phases)
        committed = True
        remove_files(previous)
        phases.mark("manifest")
    except BaseException as exc:
        if not committed:
            if futures and not isinstance(exc, ShardBuildError):  # interrupted: do not wait
                call_off(client, build.abort_marker, futures, wait=False)
            remove_files(build.paths)  # this build's shards: no manifest refers to them
        raise
    finally:
        close_client(client, cluster)
        if not committed:
            remove_uncommitted(build, has_local_cluster=cluster is not None)
        phases.mark("cluster close")
    return _report(build, finished, entries, engine_seconds, phases)


class _Phases:
    """The driver's wall-clock phases: `mark` ends one; `seconds` ``{phase: seconds}`` in
    order (`ShardedBuildReport.phases`)."""

    def __init__(self) -> None:
        self.marks = [("start", time.perf_counter())]

    def mark(self, name: str) -> None:
        self.marks.append((name, time.perf_counter()))

    def seconds(self) -> dict[str, float]:
        return {name: t - self.marks[k][1] for k, (name, t) in enumerate(self.marks[1:])}


def _read_and_partition(build: ShardedBuild, phases: _Phases) -> tuple[Any, dict, np.ndarray]:
    """The source's records and metadata, and the partition bounds (`partition_bounds`); the
    output folder made and the dead writers of earlier builds cleared."""
    check_stop(build.stop)
    records, meta = load_records(build.opts)
    check_stop(build.stop)
    phases.mark("read source")
    bounds = partition_bounds(record_count(records), build.shards)
    build.directory.mkdir(parents=True, exist_ok=True)
    remove_dead_writers(build.directory, build.out.stem, markers=True)
    phases.mark("partition")
    return records, meta, bounds


def _submit_shards(
    client: Any, build: ShardedBuild, records: Any, meta: dict, bounds: np.ndarray, futures: dict
) -> None:
    """One `_build_shard` task per partition, each carrying its records; ``futures`` gets
    ``{future: shard}`` as they are submitted (all of them to call off if one fails)."""
    for s in range(build.shards):
        a, b = int(bounds[s]), int(bounds[s + 1])
        task = {
            "path": str(build.paths[s]),
            "options": build.opts.as_json(),
            "start": a,
            "abort": str(build.abort_marker),
            "records": slice_records(records, a, b),
            "meta": {
                **meta,
                "shard": {
                    "index": s,
                    "of": build.shards,
                    "records": [a, b],
                    "build_id": build.build_id,
                },
            },
        }
        futures[
            client.submit(
                _build_shard,
                task,
                retries=build.retries,
                pure=False,
                key=f"graphbatch-shard-{build.build_id}-{s:05d}",
            )
        ] = s


def _shard_results(
    client: Any, build: ShardedBuild, futures: dict, bounds: np.ndarray
) -> list[dict]:
    """Every task's summary, in shard order, as they finish (a progress bar with
    ``progress``); the first task that failed after its retries calls the others off and
    raises `ShardBuildError`."""
    results: list[dict | None] = [None] * build.shards
    bar = None
    if build.progress:
        from tqdm import tqdm

        bar = tqdm(
            total=build.shards, unit="shard", desc=f"{build.dataset} shards ({build.engine})"
        )
    try:
        for fut in completed(futures, build.stop):
            s = futures[fut]
            try:
                results[s] = fut.result()
            except Exception as exc:
                call_off(client, build.abort_marker, futures)
                msg = " ".join(str(exc).split()) or type(exc).__name__
                raise ShardBuildError(
                    f"shard {s} ({build.paths[s].name}, records "
                    f"{int(bounds[s])}:{int(bounds[s + 1])}) failed "
                    f"after the engine's retries: {type(exc).__name__}: "
                    f"{msg}; no manifest was written"
                ) from exc
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return [r for r in results if r is not None]  # every shard (a failure raised)


def _built_shards(
    build: ShardedBuild, finished: list[dict]
) -> tuple[list[tuple[Path, dict]], list[int]]:
    """``(path, summary)`` of each shard written, and the record indices that failed in the
    shards left without a file (every record failed); ``InputError`` if no graph was built."""
    unsharded = sorted(int(i) for res in finished if res.get("empty") for i, _ in res["failures"])
    built = [(build.paths[s], res) for s, res in enumerate(finished) if not res.get("empty")]
    if not built:
        raise InputError(
            f"no {build.dataset} graphs were built (limit={build.opts.limit}, "
            f"{len(unsharded)} failures)"
        )
    return built, unsharded


def _write_manifest(
    build: ShardedBuild,
    client: Any,
    finished: list[dict],
    meta: dict,
    bounds: np.ndarray,
    phases: _Phases,
) -> tuple[list, list[Path]]:
    """The manifest at ``build.out``, atomically, from the shards' facts read by their tasks
    (`write_manifest_of_facts`): its shard entries, and the shards of the manifest it
    replaced (the caller deletes them once this one is in place)."""
    built, unsharded = _built_shards(build, finished)
    check_stop(build.stop)
    previous = [p for p in previous_shards(build.out) if p not in build.paths]
    workers_seen = len(client.scheduler_info().get("workers", {}))
    phases.mark("previous")
    entries = write_manifest_of_facts(
        build.out,
        [r["facts"] for _, r in built],
        name=build.dataset,
        meta=meta,
        build={
            **build.opts.as_json(),
            "shards": build.shards,
            "engine": build.engine,
            "address": build.address,
            "workers": workers_seen,
            "retries": build.retries,
            "build_id": build.build_id,
            "records": [int(bounds[0]), int(bounds[-1])],
        },
        failed_without_shard=unsharded,
    )
    return entries, previous


def _report(
    build: ShardedBuild,
    finished: list[dict],
    entries: list,
    engine_seconds: float,
    phases: _Phases,
) -> ShardedBuildReport:
    """The `ShardedBuildReport` of a completed build."""
    failures = sorted(f for res in finished for f in (tuple(x) for x in res["failures"]))
    return ShardedBuildReport(
        path=build.out,
        dataset=build.dataset,
        shards=[p for p, r in zip(build.paths, finished, strict=True) if not r.get("empty")],
        n_graph=sum(e.n_graph for e in entries),
        n_node=sum(e.n_node for e in entries),
        n_edge=sum(e.n_edge for e in entries),
        seconds=time.perf_counter() - phases.marks[0][1],
        engine_seconds=engine_seconds,
        shard_seconds=[r["seconds"] for r in finished],
        shard_cpu_seconds=[r["cpu_seconds"] for r in finished],
        failures=failures,
        phases=phases.seconds(),
    )
