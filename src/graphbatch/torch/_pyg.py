"""PyG front end: `collate` to a padded ``torch_geometric.data.Batch``, and `unpad`."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .._errors import InputError
from ._collate import collate_parts, structure
from ._schema import Schema

if TYPE_CHECKING:
    from torch_geometric.data import Batch, Data

__all__ = ["collate", "unpad", "unpad_graphs"]


def _pyg() -> tuple[type[Batch], type[Data]]:
    try:
        from torch_geometric.data import Batch, Data
    except ImportError as exc:  # pragma: no cover - exercised only without PyG
        raise ImportError(
            "graphbatch.torch.collate needs torch_geometric (pip install graphbatch[pyg]); "
            "graphbatch.torch.collate_dict works with plain torch"
        ) from exc
    return Batch, Data


def collate(
    data_list: Sequence[Any],
    shape: tuple[int, int, int] | Sequence[int],
    *,
    graph_index: Sequence[int] | np.ndarray | torch.Tensor | None = None,
    cutoff: float | None = None,
    schema: Schema | None = None,
    position_key: str = "pos",
) -> Batch:
    """Collate PyG ``Data`` objects into a ``Batch`` padded to ``shape = (n_node, n_edge,
    n_graph)``.

    Real graphs come first in the given order, then empty padding graphs, then the last graph
    slot, a padding graph owning every padding node (at least one) and padding edge (so
    ``batch.max() + 1 == n_graph`` always and stock PyG pooling returns ``n_graph`` rows).
    Every attribute is padded per its `FieldSpec` (inferred from ``__cat_dim__``,
    ``__inc__`` and shapes unless ``schema`` is given); node-index fields such as ``edge_index``
    point padding entries at padding nodes, so padding edges never touch a real node.

    The batch adds ``node_mask``/``edge_mask``/``graph_mask`` (bool, real = True), ``batch``,
    ``ptr`` and ``graph_index`` (dataset index of each real graph -- ``graph_index`` argument, or
    positions in ``data_list`` -- and -1 for padding graphs). ``num_graphs`` is the padded count.

    Geometry (safe by default whenever the graphs have positions: a float node-level field
    ``position_key``, or with ``cutoff``): padding node ``j`` (of ``P``) sits at
    ``max real coordinate + (j + 1) * 2s`` on every axis and padding edge ``k`` joins padding
    nodes ``k mod (P - 1)`` and the next one, where ``s = cutoff`` if given, else
    ``max(1, largest coordinate range of the real nodes)``. Guarantee, when ``P >= 2``: every
    padding edge joins two distinct padding nodes at distance exactly ``2 s sqrt(D)`` (> 0,
    finite, longer than ``cutoff``, and by default longer than twice the diameter of every real
    graph), and every padding node is farther than ``2s`` from every real node. With ``P == 1``
    (real nodes fill ``n_node - 1``) padding edges can only be self-loops of length 0:
    `graphbatch.torch.loader` avoids it by adding a spare padding node to every shape when
    positions exist; otherwise it happens in a plan's batches with
    ``pad_nodes - real_nodes == 1`` and padding edges. Without positions padding edges are
    self-loops of the first padding node.

    Raises ``ValueError`` if the graphs do not fit ``shape`` with its padding reservation, lack an
    attribute the others have, or have attribute sizes that disagree with their node/edge counts.
    """
    Batch, Data = _pyg()
    parts = collate_parts(
        data_list,
        shape,
        graph_index=graph_index,
        cutoff=cutoff,
        schema=schema,
        position_key=position_key,
    )
    base = type(data_list[0]) if len(data_list) else Data
    if not (isinstance(base, type) and issubclass(base, Data)):
        base = Data  # dicts and old-style Data (MACE's AtomicData) become a plain PyG Batch
    out = _new_batch(Batch, base)
    for key, value in parts.fields.items():
        out[key] = value
    for key, value in structure(parts).items():
        out[key] = value
    if parts.schema.node_anchor() is None:
        out.num_nodes = parts.shape[0]
        out._store._num_nodes = parts.node_counts.tolist()
    n_graph = parts.shape[2]
    node_ptr = torch.from_numpy(parts.node_ptr)
    edge_ptr = torch.from_numpy(parts.edge_ptr)
    graph_ptr = torch.arange(n_graph + 1)
    slices = {}
    inc_dict = {}
    for key, spec in parts.schema.items():
        slices[key] = {"node": node_ptr, "edge": edge_ptr, "graph": graph_ptr * spec.rows}[
            spec.level
        ]
        inc_dict[key] = parts.incs.get(key)
    out._slice_dict = slices
    out._inc_dict = inc_dict
    out._num_graphs = n_graph
    return out


_BATCH_CLASSES: dict[type, type] = {}


def _new_batch(Batch: type[Batch], base: type[Any]) -> Batch:
    """An empty ``Batch`` inheriting from ``base``. PyG's ``Batch(_base_cls=base)`` rebuilds a
    metaclass and inspects signatures on every call; the class it makes is cached here and, for
    ``base`` classes whose ``__init__`` needs no argument, instantiated directly."""
    cls = _BATCH_CLASSES.get(base)
    if cls is None:
        out = Batch(_base_cls=base)
        params = list(inspect.signature(base.__init__).parameters.values())[1:]
        simple = all(
            p.default is not inspect.Parameter.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            for p in params
        )
        if simple:
            _BATCH_CLASSES[base] = type(out)
        return out
    return type.__call__(cls)


def _real_counts(batch: Any) -> tuple[int, torch.Tensor, torch.Tensor]:
    g_real = int(batch["graph_mask"].sum())
    ptr = batch["ptr"]
    node_counts = (ptr[1:] - ptr[:-1])[:g_real]
    edge_ptr = batch["edge_ptr"] if isinstance(batch, dict) else batch._slice_dict["edge_index"]
    edge_counts = (edge_ptr[1:] - edge_ptr[:-1])[:g_real]
    return g_real, node_counts, edge_counts


def unpad(
    values: torch.Tensor, batch: Any, *, level: str | None = None
) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """Per-real-graph outputs from a tensor computed on a padded batch.

    ``level="graph"``: ``values`` is ``[n_graph, ...]``; returns the real rows ``[G, ...]`` in
    batch order (``batch.graph_index`` maps them to dataset indices). ``level="node"``/``"edge"``:
    ``values`` is ``[n_node, ...]``/``[n_edge, ...]``; returns a tuple of ``G`` tensors, one per
    real graph. Without ``level`` it is read from ``values.shape[0]`` (an error if ambiguous).
    ``batch`` is a collated ``Batch`` or a `collate_dict` result.
    """
    n_node = batch["node_mask"].shape[0]
    n_edge = batch["edge_mask"].shape[0]
    n_graph = batch["graph_mask"].shape[0]
    if level is None:
        matches = [
            lv
            for lv, n in (("node", n_node), ("edge", n_edge), ("graph", n_graph))
            if values.shape[0] == n
        ]
        if len(matches) != 1:
            raise InputError(
                f"cannot tell the level of values with {values.shape[0]} rows for a batch of "
                f"shape ({n_node}, {n_edge}, {n_graph}); pass level='node'|'edge'|'graph'"
            )
        level = matches[0]
    expected = {"node": n_node, "edge": n_edge, "graph": n_graph}.get(level)
    if expected is None:
        raise InputError(f"level must be 'node', 'edge' or 'graph', got {level!r}")
    if values.shape[0] != expected:
        raise InputError(f"{level}-level values need {expected} rows, got {values.shape[0]}")
    g_real, node_counts, edge_counts = _real_counts(batch)
    if level == "graph":
        return values[:g_real]
    counts = node_counts if level == "node" else edge_counts
    total = int(counts.sum())
    return torch.split(values[:total], counts.tolist())


def unpad_graphs(batch: Batch) -> list[Data]:
    """The real graphs of a padded PyG ``Batch`` as ``Data`` objects (like
    ``jraph.unpad_with_graphs``), with node indices relative to each graph again."""
    g_real = int(batch.graph_mask.sum())
    return [batch.get_example(i) for i in range(g_real)]
