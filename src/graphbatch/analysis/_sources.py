"""Size tables from files: ``.npz`` tables or graph stores (the inputs of every analysis)."""

from __future__ import annotations

import os

from .._sizes import GraphSizes

__all__ = ["load_sizes"]


def load_sizes(path: str | os.PathLike) -> GraphSizes:
    """A size table from ``.npz`` (the plan contract) or from a graph store (``.h5``/``.hdf5``,
    or a sharded store's ``.json`` manifest; read from size metadata only, no graph data and no
    shard is opened; needs ``graphbatch.datasets`` and h5py)."""
    if str(path).lower().endswith((".h5", ".hdf5", ".json")):
        from ..datasets import GraphStore

        with GraphStore(path, cache_size=0) as store:
            return store.graph_sizes()
    return GraphSizes.load(path)
