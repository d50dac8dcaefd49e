"""A sharded build's files: its checked settings and the names it writes (`ShardedBuild`), the
partition of the source records (`partition_bounds`), and the removal of what a failed, killed
or replaced build leaves (its shards, dead writers' temporaries, abort markers, the shards of
the manifest a new one replaced)."""

from __future__ import annotations

import os
import re
import threading
import uuid as uuidlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import InputError, StoreFormatError
from .._io import check_output_path
from .._validate import as_positive_int
from ._build import BuildOptions
from ._manifest import read_manifest
from ._store_write import remove_stale_temporaries

__all__ = [
    "ENGINES",
    "ShardedBuild",
    "checked_build",
    "partition_bounds",
    "previous_shards",
    "remove_dead_writers",
    "remove_files",
    "remove_uncommitted",
]

#: Cluster engines a sharded build can run on.
ENGINES = ("dask",)


def partition_bounds(n_records: int, shards: int) -> np.ndarray:
    """int64 ``[shards + 1]``: partition ``s`` holds records ``bounds[s]:bounds[s+1]``
    (contiguous, sizes differ by at most one, none empty)."""
    shards = as_positive_int(shards, "shards")
    if shards > n_records:
        raise InputError(f"--shards {shards} is more than the {n_records} source records")
    return (np.arange(shards + 1, dtype=np.int64) * n_records) // shards


@dataclass(frozen=True)
class ShardedBuild:
    """One sharded build's checked settings and the names it writes: shard ``s`` of
    ``shards`` is ``paths[s]`` (``<stem>-<build_id>-00003-of-00008.h5`` beside the manifest
    ``out``); ``abort_marker`` is the file whose existence calls the build off (the shard
    tasks look for it)."""

    dataset: str
    out: Path
    directory: Path
    opts: BuildOptions
    shards: int
    engine: str
    address: str | None
    n_workers: int
    retries: int
    progress: bool
    stop: threading.Event | None
    build_id: str
    paths: list[Path]

    @property
    def abort_marker(self) -> Path:
        """Written only to call the build off; next to the shards, so every worker sees it."""
        return self.directory / f".{self.out.stem}-{self.build_id}.abort"


def checked_build(
    dataset: str,
    out: str | os.PathLike,
    *,
    shards: int,
    engine: str,
    address: str | None,
    workers: int | None,
    retries: int,
    progress: bool,
    stop: threading.Event | None,
    conversion: dict[str, Any],
) -> ShardedBuild:
    """`build_sharded_store`'s arguments checked (``InputError`` naming the value), before
    anything starts; ``conversion``: the `BuildOptions` besides the dataset, as given. A new
    random build id names the shards."""
    if engine not in ENGINES:
        raise InputError(f"unknown engine {engine!r}; choose one of {ENGINES}")
    out = Path(out)
    if out.suffix != ".json":
        raise InputError(f"the manifest of a sharded store is a .json file, got {str(out)!r}")
    source = conversion["source"]
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
        **{
            **conversion,
            "source": None if source is None else str(source),
            "targets": tuple(conversion["targets"]),
        },
    ).check()
    if dataset == "code" and opts.limit is not None:
        raise InputError(
            "--limit counts functions, but a sharded code build partitions files: "
            "build code shards without --limit (or use --source on a smaller "
            "folder)"
        )
    shards = as_positive_int(shards, "shards")
    n_workers = (os.cpu_count() or 1) if workers is None else as_positive_int(workers, "workers")
    if opts.limit is not None:  # too many shards for the records asked for: say so before starting
        partition_bounds(int(opts.limit), shards)
    directory = out.parent if str(out.parent) else Path(".")
    build_id = uuidlib.uuid4().hex[:8]
    return ShardedBuild(
        dataset=dataset,
        out=out,
        directory=directory,
        opts=opts,
        shards=shards,
        engine=engine,
        address=address,
        n_workers=n_workers,
        retries=retries,
        progress=progress,
        stop=stop,
        build_id=build_id,
        paths=[
            directory / f"{out.stem}-{build_id}-{s:05d}-of-{shards:05d}.h5" for s in range(shards)
        ],
    )


def remove_uncommitted(build: ShardedBuild, has_local_cluster: bool) -> None:
    """What a build that wrote no manifest leaves: its shards (a task may have renamed one in
    place after the first removal), its dead writers' temporaries, and -- once its local
    cluster's workers are gone, so no task looks for it -- its abort marker."""
    remove_files(build.paths)
    remove_dead_writers(build.directory, build.out.stem)
    if has_local_cluster:
        build.abort_marker.unlink(missing_ok=True)


def remove_files(paths: Iterable[str | os.PathLike]) -> None:
    """Delete ``paths`` (those absent are fine)."""
    for p in paths:
        Path(p).unlink(missing_ok=True)


def remove_dead_writers(directory: Path, stem: str, *, markers: bool = False) -> None:
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


def previous_shards(out: Path) -> list[Path]:
    """Shard files of a complete manifest already at ``out`` (none if absent or unreadable)."""
    try:
        old = read_manifest(out)
    except (OSError, StoreFormatError):
        return []
    return [old.shard_path(s) for s in range(len(old.shards))]
