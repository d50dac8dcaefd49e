"""A graph store as a ``torch.utils.data.Dataset`` of PyG ``Data``: what
`graphbatch.datasets.GraphStore.to_torch` returns (imported with PyG, on demand)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset
from torch_geometric.data import Data

from .._sizes import GraphSizes
from ._schema import torch_dtype

__all__ = ["GraphStoreDataset", "StoreData", "to_data"]


class StoreData(Data):
    """A store graph as PyG ``Data`` whose batching follows the store's levels, not PyG's
    name rules: ``edge_index`` is ``[2, E]`` and offset by node counts; every other field is
    concatenated along dim 0 and never offset. (Plain ``Data`` would treat any field whose
    name contains ``index`` -- QM9's GDB id ``index``, code graphs' ``file_index`` -- as node
    indices and add node offsets to it in a batch.)"""

    def __cat_dim__(self, key: str, value: Any, *args: Any, **kwargs: Any) -> int:
        return 1 if key == "edge_index" else 0

    def __inc__(self, key: str, value: Any, *args: Any, **kwargs: Any) -> Any:
        return self.num_nodes if key == "edge_index" else 0


def _tensor(arr: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(arr, dtype=torch_dtype(arr.dtype)))


def to_data(graph: dict[str, np.ndarray], num_nodes: int) -> StoreData:
    """One graph dict (from `GraphStore.get`) as a `StoreData`: integer fields become ``long``,
    float fields ``float32``; ``edge_index`` is ``long [2, E]``; graph fields keep ``[1, ...]``."""
    return StoreData(num_nodes=int(num_nodes), **{k: _tensor(v) for k, v in graph.items()})


class GraphStoreDataset(Dataset):
    """``dataset[i]`` is graph ``i`` of ``store`` as a `StoreData` (through the store's LRU
    cache): the per-graph path. ``graph_sizes()`` reads sizes from the store's metadata.
    (``graphbatch.torch.loader(store, ...)`` on the `GraphStore` itself reads whole padded
    batches instead, without per-graph objects.)"""

    def __init__(self, store: Any) -> None:
        """``store``: an open `graphbatch.datasets.GraphStore` (or sharded store)."""
        self.store = store

    def __len__(self) -> int:
        return len(self.store)

    def __getitem__(self, i: int) -> StoreData:
        i = int(i)
        graph = self.store.get(i)
        return to_data(graph, self.store.n_node[i % len(self.store)])

    def graph_sizes(self) -> GraphSizes:
        return self.store.graph_sizes()
