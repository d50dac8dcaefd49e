"""A graph store as a ``torch.utils.data.Dataset`` of PyG ``Data``: `GraphStoreDataset`, the
per-graph torch view of any `graphbatch._source.GraphSource` (imported with PyG, on demand)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset
from torch_geometric.data import Data

from .._errors import InputTypeError
from .._fieldmeta import TORCH_FIELDS_KEY, TorchField
from .._sizes import GraphSizes
from .._source import GraphSource
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


def _written(arr: np.ndarray, spec: TorchField) -> Any:
    """A field as `graphbatch.datasets.to_store` received it: its torch dtype, its per-graph
    shape (graph fields), a Python scalar where it was one."""
    value = torch.from_numpy(np.array(arr)).to(getattr(torch, spec.dtype))
    if spec.level == "graph":
        value = value.reshape(spec.shape)
    return value.item() if spec.python else value


def to_data(
    graph: dict[str, np.ndarray], num_nodes: int, fields: dict[str, TorchField] | None = None
) -> StoreData:
    """One graph dict (from `GraphStore.get`) as a `StoreData`.

    Without ``fields``: integer fields become ``long``, float fields ``float32``; graph fields
    keep ``[1, ...]``. With ``fields`` (a store written by `graphbatch.datasets.to_store`: its
    ``meta["torch_fields"]``), each listed field gets back the dtype and per-graph shape it
    was written with. ``edge_index`` is always ``long [2, E]``."""
    fields = fields or {}
    values = {
        k: _written(v, fields[k]) if k in fields and k != "edge_index" else _tensor(v)
        for k, v in graph.items()
    }
    return StoreData(num_nodes=int(num_nodes), **values)


class GraphStoreDataset(Dataset):
    """``dataset[i]`` is graph ``i`` of ``store`` as a `StoreData` (through the store's LRU
    cache): the per-graph path, ``GraphStoreDataset(store)``. ``graph_sizes()`` reads sizes
    from the store's metadata.
    (``graphbatch.torch.loader(store, ...)`` on the `GraphStore` itself reads whole padded
    batches instead, without per-graph objects.)"""

    def __init__(self, store: Any) -> None:
        """``store``: an open graph store (`graphbatch.datasets.GraphStore`,
        ``ShardedGraphStore``: any `graphbatch._source.GraphSource`)."""
        if not isinstance(store, GraphSource):
            raise InputTypeError(
                "GraphStoreDataset needs a graph store (graphbatch.datasets.open_store(path)), "
                f"got {type(store).__name__}"
            )
        self.store = store
        meta = getattr(store, "meta", None)
        written = meta.get(TORCH_FIELDS_KEY) if isinstance(meta, dict) else None
        self._fields = (
            {k: TorchField.from_json(v) for k, v in written.items()}
            if isinstance(written, dict)
            else None
        )

    def __len__(self) -> int:
        return len(self.store)

    def __getitem__(self, i: int) -> StoreData:
        i = int(i)
        graph = self.store.get(i)
        return to_data(graph, self.store.n_node[i % len(self.store)], self._fields)

    def graph_sizes(self) -> GraphSizes:
        return self.store.graph_sizes()
