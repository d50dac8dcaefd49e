"""A `GraphStore` as a ``torch.utils.data.Dataset`` of PyG ``Data`` (imported only on demand)."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset
from torch_geometric.data import Data

from .._sizes import GraphSizes
from ._store import GraphStore

__all__ = ["GraphStoreDataset", "to_data"]


def _tensor(arr: np.ndarray) -> torch.Tensor:
    kind = arr.dtype.kind
    if kind == "b":
        return torch.from_numpy(np.array(arr, dtype=np.bool_))
    if kind in "iu":
        return torch.from_numpy(np.array(arr, dtype=np.int64))
    return torch.from_numpy(np.array(arr, dtype=np.float32))


def to_data(graph: dict[str, np.ndarray], num_nodes: int):
    """One graph dict (from `GraphStore.get`) as a PyG ``Data``: integer fields become ``long``,
    float fields ``float32``; ``edge_index`` is ``long [2, E]``; graph fields keep ``[1, ...]``."""
    return Data(num_nodes=int(num_nodes), **{k: _tensor(v) for k, v in graph.items()})


class GraphStoreDataset(Dataset):
    """``dataset[i]`` is graph ``i`` of ``store`` as a PyG ``Data`` (through the store's LRU
    cache). ``graph_sizes()`` reads sizes from the store's metadata without loading graphs."""

    def __init__(self, store: GraphStore | str, **store_options) -> None:
        self.store = store if isinstance(store, GraphStore) else GraphStore(store, **store_options)

    def __len__(self) -> int:
        return len(self.store)

    def __getitem__(self, i: int):
        i = int(i)
        graph = self.store.get(i)
        return to_data(graph, self.store.n_node[i % len(self.store)])

    def graph_sizes(self) -> GraphSizes:
        return self.store.graph_sizes()
