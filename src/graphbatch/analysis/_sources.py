"""Size tables from files: ``.npz`` tables or graph stores (the inputs of every analysis), and
the files such an input stands for (what no output may replace)."""

from __future__ import annotations

import os
from pathlib import Path

from .._io import open_regular
from .._sizes import GraphSizes

__all__ = ["input_files", "load_sizes"]


def input_files(path: str | os.PathLike | None) -> list[Path]:
    """The files the input ``path`` stands for, for `graphbatch._io.check_output_path`: the
    path itself, plus every shard file a sharded store's manifest names (a manifest that cannot
    be read adds nothing: reading it fails later, before anything is written). ``None``: none."""
    if path is None:
        return []
    path = Path(path)
    try:
        with open_regular(path, "input") as fh:  # never blocks on a FIFO
            head = fh.read(64)
    except (OSError, ValueError):
        return [path]
    if head.lstrip()[:1] != b"{":
        return [path]
    try:
        from ..datasets import open_store

        with open_store(path, cache_size=0) as store:  # a manifest: opens no shard
            shards = list(getattr(store, "shard_paths", ()))
    except (ImportError, OSError, ValueError):
        return [path]
    return [path, *shards]


def load_sizes(path: str | os.PathLike) -> GraphSizes:
    """A size table from ``.npz`` (the plan contract) or from a graph store (``.h5``/``.hdf5``,
    or a sharded store's ``.json`` manifest; read from size metadata only, no graph data and no
    shard is opened; needs ``graphbatch.datasets`` and h5py)."""
    if str(path).lower().endswith((".h5", ".hdf5", ".json")):
        from ..datasets import open_store

        with open_store(path, cache_size=0) as store:
            return store.graph_sizes()
    return GraphSizes.load(path)
