"""`to_store`: a PyG dataset (``Data`` objects, e.g. an ``InMemoryDataset``) written to a graph
store, every per-node, per-edge and per-graph field kept, readable back field for field.

The steps, in order:

1. The first graph decides each field's level the way PyG batches it (`_field_specs`): a tensor
   PyG treats as a node attribute (``Data.is_node_attr``, concatenated along dim 0) is a node
   field, an edge attribute an edge field, anything else -- a tensor of another shape or a Python
   ``int``/``float``/``bool`` -- a graph field.
2. Every graph is checked against those specs (`_graph_row`): same fields, the right first
   dimension (its node or edge count), the same trailing shape and dtype; the first mismatch
   is a one-line `InputError` naming the graph and the field.
3. Chunks of graphs become `GraphArrays` and go through `GraphStoreWriter` (atomic: the store
   appears only when complete).

A graph field's stored row drops a leading dimension of 1 (QM9's ``y`` of shape ``[1, 19]`` is
stored ``[G, 19]``, as PyG batches it); the original per-graph shape and torch dtype (also
``bfloat16``, stored as ``float32``) are kept in the store's metadata under ``"torch_fields"``
(`graphbatch._fieldmeta.TorchField`), which the torch view of a store
(``graphbatch.torch.GraphStoreDataset``) reads to return each graph exactly as it was written.

torch and PyG are imported when `to_store` runs (a PyG user has them), never with the package.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import InputError, InputTypeError
from .._fieldmeta import TORCH_FIELDS_KEY, TorchField
from .._io import check_output_path
from ._graphs import GraphArrays
from ._store_write import STORE_SUFFIXES, GraphStoreWriter

if TYPE_CHECKING:
    import torch

__all__ = ["to_store"]

#: torch dtypes (by name) NumPy cannot hold, stored as float32 and cast back when read.
_WIDENED = frozenset({"bfloat16"})


def _dtype_name(dtype: torch.dtype, where: str) -> str:
    """The torch dtype's name (``float32``); complex numbers are refused."""
    if dtype.is_complex:
        raise InputTypeError(f"{where} is {dtype}: the store holds real numbers, bools and ints")
    return str(dtype).removeprefix("torch.")


def _as_tensor(value: Any, where: str) -> tuple[torch.Tensor, bool]:
    """``(tensor, python)``: a tensor field, or a Python scalar as a 0-d tensor."""
    import torch

    if isinstance(value, torch.Tensor):
        return value, False
    if isinstance(value, (bool, int, float)):
        return torch.tensor(value), True
    raise InputTypeError(
        f"{where} is a {type(value).__name__}: a store holds tensors and numbers; "
        "leave it out with exclude=(...)"
    )


def _keys(data: Any, exclude: frozenset[str]) -> list[str]:
    # a PyG Data iterates (key, value) pairs: .keys() is meant
    keys = [k for k in data.keys() if k not in exclude and k not in ("edge_index", "num_nodes")]  # noqa: SIM118
    return sorted(keys)


#: Graphs read ahead, at most, to settle a field whose level the first graphs leave open.
LOOKAHEAD = 4096

#: Preference among the levels a field fits in every graph read ahead (PyG's own order).
_PREFERENCE = ("edge", "node", "graph")


def _levels(data: Any, key: str, value: torch.Tensor, python: bool) -> set[str]:
    """The levels field ``key`` of ``data`` fits: edge/node where PyG batches it as an edge or
    node attribute (dim 0 the edge or node count), graph always."""
    out = {"graph"}
    if python or value.dim() == 0 or data.__cat_dim__(key, value) != 0:
        return out
    if data.is_edge_attr(key) and value.shape[0] == data.num_edges:
        out.add("edge")
    if data.is_node_attr(key) and value.shape[0] == data.num_nodes:
        out.add("node")
    return out


def _field_specs(head: list[Any], exclude: frozenset[str]) -> dict[str, TorchField]:
    """Step 1: each field's level, dtype and shape, decided on the graphs read ahead: the
    level (in PyG's order of preference) that fits every one of them -- a field ``y`` of shape
    ``[1, T]`` fits the node level of a one-node graph, the graph level of all."""
    first = head[0]
    specs: dict[str, TorchField] = {}
    for key in _keys(first, exclude):
        value, python = _as_tensor(first[key], f"field {key!r} of graph 0")
        dtype = _dtype_name(value.dtype, f"field {key!r} of graph 0")
        fits = _levels(first, key, value, python)
        for g, data in enumerate(head[1:], start=1):
            if key in data and len(fits) > 1:
                other, other_python = _as_tensor(data[key], f"field {key!r} of graph {g}")
                fits &= _levels(data, key, other, other_python)
                if "graph" in fits and tuple(other.shape) != tuple(value.shape):
                    fits.discard("graph")
        level = next((lv for lv in _PREFERENCE if lv in fits), "graph")
        shape = tuple(value.shape) if level == "graph" else tuple(value.shape[1:])
        specs[key] = TorchField(level, dtype, shape, python)
    return specs


def _read_ahead(head: list[Any], items: Iterator[Any]) -> None:
    """Read graphs into ``head`` until `LOOKAHEAD` of them or the end."""
    for data in items:
        head.append(data)
        if len(head) >= LOOKAHEAD:
            return


def _graph_row(
    g: int, data: Any, specs: dict[str, TorchField], exclude: frozenset[str]
) -> tuple[int, np.ndarray, dict[str, np.ndarray]]:
    """Step 2: ``(n_node, edge_index, {field: array})`` of graph ``g``, checked against specs."""
    import torch

    keys = _keys(data, exclude)
    if keys != sorted(specs):
        raise InputError(
            f"graph {g} has fields {keys}, graph 0 has {sorted(specs)} "
            "(every graph needs the same fields; leave some out with exclude=(...))"
        )
    n_node = data.num_nodes
    if n_node is None:
        raise InputError(f"graph {g} has no node count (set num_nodes or a node field)")
    ei = data.edge_index if "edge_index" in data else torch.zeros((2, 0), dtype=torch.long)
    if not isinstance(ei, torch.Tensor) or ei.dim() != 2 or ei.shape[0] != 2:
        raise InputError(f"edge_index of graph {g} must be a [2, E] tensor, got {ei!r}")
    counts = {"node": int(n_node), "edge": int(ei.shape[1])}
    fields: dict[str, np.ndarray] = {}
    for key, spec in specs.items():
        where = f"field {key!r} of graph {g}"
        value, python = _as_tensor(data[key], where)
        if str(value.dtype) != f"torch.{spec.dtype}" or python != spec.python:
            raise InputError(f"{where} is {value.dtype}, graph 0's is torch.{spec.dtype}")
        shape = tuple(value.shape)
        expected = spec.shape if spec.level == "graph" else (counts[spec.level], *spec.shape)
        if shape != expected:
            raise InputError(f"{where} has shape {list(shape)}, expected {list(expected)}")
        arr = value.detach().cpu()
        if spec.dtype in _WIDENED:  # NumPy has no bfloat16: stored as float32, exactly
            arr = arr.to(torch.float32)
        fields[key] = arr.numpy().reshape(-1, *spec.stored_row())
    return counts["node"], ei.detach().cpu().numpy(), fields


def _chunks(
    graphs: Iterable[Any],
    specs: dict[str, TorchField],
    exclude: frozenset[str],
    chunk_graphs: int,
) -> Iterator[GraphArrays]:
    """Step 3: checked graphs gathered into `GraphArrays` of ``chunk_graphs`` graphs."""
    rows: list[tuple[int, np.ndarray, dict[str, np.ndarray]]] = []
    for g, data in enumerate(graphs):
        rows.append(_graph_row(g, data, specs, exclude))
        if len(rows) == chunk_graphs:
            yield _arrays(rows, specs)
            rows = []
    if rows:
        yield _arrays(rows, specs)


def _arrays(
    rows: list[tuple[int, np.ndarray, dict[str, np.ndarray]]], specs: dict[str, TorchField]
) -> GraphArrays:
    levels: dict[str, dict[str, np.ndarray]] = {"node": {}, "edge": {}, "graph": {}}
    for key, spec in specs.items():
        levels[spec.level][key] = np.concatenate([fields[key] for _, _, fields in rows])
    edge_index = np.concatenate([ei for _, ei, _ in rows], axis=1).astype(np.int64, copy=False)
    return GraphArrays(
        n_node=np.array([n for n, _, _ in rows], dtype=np.int64),
        n_edge=np.array([ei.shape[1] for _, ei, _ in rows], dtype=np.int64),
        edge_index=edge_index,
        node=levels["node"],
        edge=levels["edge"],
        graph=levels["graph"],
    )


def _progress(graphs: Iterable[Any], total: int | None, enabled: bool) -> Iterable[Any]:
    if not enabled:
        return graphs
    from tqdm import tqdm

    return tqdm(graphs, total=total, unit="graph", desc="graphs -> store")


def to_store(
    dataset: Iterable[Any],
    path: str | os.PathLike[str],
    *,
    name: str | None = None,
    exclude: Iterable[str] = (),
    chunk_graphs: int = 1024,
    progress: bool = False,
    meta: dict[str, Any] | None = None,
) -> Path:
    """Write PyG ``Data`` graphs (a list, an ``InMemoryDataset``, any iterable) to a graph store.

    Args:
        dataset: the graphs, in order; graph ``i`` of the store is the ``i``-th one.
        path: the store to write (``.h5``); it appears only when complete and never replaces
            an input.
        name: the store's name (default: the dataset's class name).
        exclude: fields to leave out (strings and other non-numeric attributes must be).
        chunk_graphs: graphs converted and appended per block (memory, not the result).
        progress: show a progress bar (tqdm).
        meta: extra JSON-serialisable store metadata.

    Returns:
        The path of the written store. ``GraphStoreDataset(GraphStore(path))[i]`` (the store's
        torch view, ``graphbatch.torch.GraphStoreDataset``) equals
        ``dataset[i]`` field for field (dtype and shape included), and
        ``graphbatch.torch.loader(GraphStore(path), ...)`` reads padded batches from it.

    Raises:
        InputError: no graphs; a graph whose fields, shapes or dtypes differ from graph 0's
            (named by index and field).
        InputTypeError: a non-``Data`` item or a field that is neither a tensor nor a number.

    Example:
        >>> import torch, tempfile, os
        >>> from torch_geometric.data import Data
        >>> from graphbatch.datasets import GraphStore, to_store
        >>> ei = torch.tensor([[0, 1], [1, 2]])
        >>> g = Data(x=torch.randn(3, 4), edge_index=ei, y=torch.ones(1))
        >>> path = to_store([g, g], os.path.join(tempfile.mkdtemp(), "mine.h5"))
        >>> from graphbatch.torch import GraphStoreDataset
        >>> torch.equal(GraphStoreDataset(GraphStore(path))[1].x, g.x)
        True
    """
    from torch_geometric.data import Data

    check_output_path(
        path, _inputs_of(dataset), "path", suffixes=STORE_SUFFIXES, what="graph store"
    )
    exclude_set = frozenset(str(k) for k in exclude)
    if isinstance(chunk_graphs, bool) or not isinstance(chunk_graphs, int) or chunk_graphs < 1:
        raise InputError(f"chunk_graphs must be an int >= 1, got {chunk_graphs!r}")
    total = len(dataset) if hasattr(dataset, "__len__") else None  # type: ignore[arg-type]
    items = iter(_progress(dataset, total, progress))
    head: list[Any] = []
    _read_ahead(head, _checked(items, Data))
    if not head:
        raise InputError("to_store needs at least one graph, the dataset is empty")
    specs = _field_specs(head, exclude_set)
    store_meta = dict(meta or {})
    store_meta[TORCH_FIELDS_KEY] = {k: s.as_json() for k, s in specs.items()}
    store_meta.setdefault("data_class", type(head[0]).__qualname__)
    store_name = name if name is not None else type(dataset).__name__
    graphs = _chain(head, _checked(items, Data, start=len(head)))
    with GraphStoreWriter(path, name=store_name, meta=store_meta) as writer:
        for chunk in _chunks(graphs, specs, exclude_set, chunk_graphs):
            writer.append(chunk)
    return Path(path)


def _inputs_of(dataset: Any) -> list[Any]:
    """The files a store's own view (``GraphStoreDataset(store)``) reads: never the output."""
    store = getattr(dataset, "store", None)
    return [getattr(store, "path", None), *getattr(store, "shard_paths", ())]


def _checked(items: Iterator[Any], data_type: type, start: int = 0) -> Iterator[Any]:
    """``items``, each checked to be a PyG ``Data``."""
    for g, data in enumerate(items, start=start):
        if not isinstance(data, data_type):
            raise InputTypeError(f"graph {g} is a {type(data).__name__}, not a PyG Data")
        yield data


def _chain(head: list[Any], rest: Iterator[Any]) -> Iterator[Any]:
    yield from head
    yield from rest
