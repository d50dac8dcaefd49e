"""Collation of single-graph ``jraph.GraphsTuple`` objects into one of an exact padded shape.

One padding kernel: the graphs' feature trees are flattened and every leaf concatenated (as
``jraph.batch_np`` does) into a `graphbatch._padbatch.PackedGraphs`, which
`graphbatch._padbatch.pad_batch` pads in jraph's layout -- the same kernel as the store batch
path (`graphbatch.jax._source.StoreGraphs.read_batch`) and the torch adapter. What stays here is
JAX-specific: pytrees (any structure of ``nodes``/``edges``/``globals``, ``None`` included)
flattened and rebuilt, and the dtypes ``jraph.pad_with_graphs(jraph.batch_np(graphs))`` gives
``n_node``/``n_edge``/``senders``/``receivers`` (NumPy's promotion of the graphs' own dtypes
with jraph's int64 offsets and int32 padding graph), so results equal jraph's bit for bit.
Differences from jraph: an edge index outside its graph raises ``ValueError`` (jraph returns a
wrong batch), and the arrays of one batch are views of one buffer.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jraph
import numpy as np

from .._errors import InputError
from .._padbatch import PackedGraphs, pad_batch
from .._padkernel import check_fits, padded_shape
from .._padlayout import check_cutoff

if TYPE_CHECKING:
    from .._plan import BatchPlan

__all__ = ["PaddedGraphs", "collate", "unpad", "batches"]


class PaddedGraphs(NamedTuple):
    """A padded ``jraph.GraphsTuple`` with its masks (a pytree: pass it to a jitted step).

    ``node_mask``/``edge_mask``/``graph_mask`` are bool (True = real); ``graph_index`` holds the
    dataset index of each real graph and -1 for padding graphs.
    """

    graphs: jraph.GraphsTuple
    node_mask: np.ndarray
    edge_mask: np.ndarray
    graph_mask: np.ndarray
    graph_index: np.ndarray


def collate(
    graphs: Sequence[jraph.GraphsTuple],
    shape: Any,
    *,
    graph_index: Any = None,
    cutoff: float | None = None,
    position_key: str = "pos",
    template: jraph.GraphsTuple | None = None,
) -> PaddedGraphs:
    """Batch ``graphs`` (``jraph.GraphsTuple`` objects, NumPy leaves) and pad to ``shape``.

    ``shape = (n_node, n_edge, n_graph)`` (or a `graphbatch.Budget`). The result is exactly
    ``jraph.pad_with_graphs(jraph.batch_np(graphs), n_node, n_edge, n_graph)``: real graphs first,
    one padding graph owning every padding node and edge (padding edges are self-loops of the
    first padding node), then empty graphs, zero-filled features -- plus masks and
    ``graph_index``. With ``cutoff`` and ``nodes`` a dict holding positions under
    ``position_key``, padding nodes are placed farther than ``2 * cutoff`` from real nodes and
    each other and padding edges join distinct padding nodes, so every padding edge is longer than
    ``cutoff`` whenever the batch has >= 2 padding nodes (with one, they stay self-loops).
    An empty ``graphs`` (an all-padding batch of a distributed plan) needs ``template``, any
    graph of the dataset, for the feature shapes and dtypes. Raises ``ValueError`` if the graphs
    do not fit ``shape`` with its padding reservation, if their feature trees differ, or if a
    sender or receiver lies outside its graph.
    """
    shape = padded_shape(shape)
    graphs = list(graphs)
    if graphs:
        items = graphs
    elif template is not None:
        items = [_no_graphs(template)]
    else:
        raise InputError("an empty batch needs template= (a graph giving feature shapes/dtypes)")
    packed, trees = _concatenate(items)
    num_real = (len(packed), int(packed.node_offsets[-1]), int(packed.edge_offsets[-1]))
    check_fits(num_real, shape)
    g_real = num_real[0]
    if graph_index is None:
        graph_index = np.arange(g_real, dtype=np.int64)
    graph_index = np.asarray(graph_index, dtype=np.int64).reshape(-1)
    if graph_index.shape[0] != g_real:
        raise InputError(f"graph_index has {graph_index.shape[0]} entries for {g_real} graphs")
    cutoff = check_cutoff(cutoff)
    pos_name = trees.position_field(position_key)
    if cutoff is not None and pos_name is None:
        raise InputError(
            f"cutoff needs node positions: graph.nodes must be a dict with key {position_key!r}"
        )
    pad = pad_batch(
        packed,
        np.arange(g_real, dtype=np.int64),
        shape,
        layout="jraph",
        cutoff=cutoff,
        position_key=pos_name or "",
        index_dtype=trees.index_dtype,
    )
    pad.graph_index[:g_real] = graph_index
    f = pad.fields
    return PaddedGraphs(
        graphs=jraph.GraphsTuple(
            n_node=pad.node_counts.astype(trees.count_dtypes[0]),
            n_edge=pad.edge_counts.astype(trees.count_dtypes[1]),
            nodes=trees.unflatten("nodes", f),
            edges=trees.unflatten("edges", f),
            globals=trees.unflatten("globals", f),
            senders=f["edge_index"][0],
            receivers=f["edge_index"][1],
        ),
        node_mask=pad.node_mask,
        edge_mask=pad.edge_mask,
        graph_mask=pad.graph_mask,
        graph_index=pad.graph_index,
    )


class _Trees:
    """How the feature trees of a list of ``GraphsTuple``s map to the kernel's flat fields
    (``"nodes/0"``, ...), and the dtypes `jraph.pad_with_graphs(jraph.batch_np(...))` gives."""

    def __init__(
        self,
        defs: dict[str, Any],
        paths: dict[str, Any],
        count_dtypes: tuple[np.dtype, np.dtype],
        index_dtype: np.dtype,
    ) -> None:
        self.defs, self.paths = defs, paths
        self.count_dtypes, self.index_dtype = count_dtypes, index_dtype

    def position_field(self, key: str) -> str | None:
        """The field name of ``nodes[key]`` when ``nodes`` is a dict holding an array there."""
        for i, path in enumerate(self.paths["nodes"]):
            if (
                len(path) == 1
                and getattr(path[0], "key", None) == key
                and isinstance(path[0], jax.tree_util.DictKey)
            ):
                return f"nodes/{i}"
        return None

    def unflatten(self, level: str, fields: dict[str, Any]) -> Any:
        n = len(self.paths[level])
        return jax.tree_util.tree_unflatten(
            self.defs[level], [fields[f"{level}/{i}"] for i in range(n)]
        )


def _concatenate(items: list) -> tuple[PackedGraphs, _Trees]:
    """The graphs of ``items`` back to back as a `PackedGraphs` (every feature leaf concatenated
    as ``jraph.batch_np`` does, edges with graph-local indices), and their `_Trees`."""
    levels = {"nodes": "node", "edges": "edge", "globals": "graph"}
    fields: dict = {"node": {}, "edge": {}, "graph": {}}
    defs, paths = {}, {}
    for level, where in levels.items():
        joined = jax.tree_util.tree_map(
            lambda *xs: np.concatenate(xs), *[getattr(g, level) for g in items]
        )
        leaves, defs[level] = jax.tree_util.tree_flatten_with_path(joined)
        paths[level] = [p for p, _ in leaves]
        fields[where] = {f"{level}/{j}": leaf for j, (_, leaf) in enumerate(leaves)}
    n_node = np.concatenate([np.asarray(g.n_node) for g in items])
    n_edge = np.concatenate([np.asarray(g.n_edge) for g in items])
    senders = [np.asarray(g.senders) for g in items]
    local = np.stack(
        [np.concatenate(senders), np.concatenate([np.asarray(g.receivers) for g in items])]
    )
    nn = n_node.astype(np.int64)
    ne = n_edge.astype(np.int64)
    node_offsets = np.zeros(nn.shape[0] + 1, dtype=np.int64)
    np.cumsum(nn, out=node_offsets[1:])
    edge_offsets = np.zeros(ne.shape[0] + 1, dtype=np.int64)
    np.cumsum(ne, out=edge_offsets[1:])
    if nn.shape[0] != len(items):
        # items holding several graphs: item-local indices to graph-local ones
        item_graphs = np.array([np.shape(g.n_node)[0] for g in items])
        item_first = node_offsets[np.concatenate([[0], np.cumsum(item_graphs)[:-1]])]
        item_edges = np.array([s.shape[0] for s in senders])
        local = (
            local.astype(np.int64)
            + np.repeat(item_first, item_edges)
            - np.repeat(node_offsets[:-1], ne)
        )
    packed = PackedGraphs(nn, ne, node_offsets, edge_offsets, local, **fields)
    kinds = tuple(
        dict.fromkeys(
            (np.asarray(g.n_node).dtype, np.asarray(g.n_edge).dtype, s.dtype)
            for g, s in zip(items, senders, strict=False)
        )
    )
    return packed, _Trees(defs, paths, *_jraph_dtypes(kinds, len(items) > 1))


_DTYPES: dict[tuple[tuple[Any, ...], bool], Any] = {}


def _jraph_dtypes(
    kinds: tuple[Any, ...], several: bool
) -> tuple[tuple[np.dtype, np.dtype], np.dtype]:
    """``((n_node dtype, n_edge dtype), senders dtype)`` of ``jraph.pad_with_graphs(
    jraph.batch_np(items), ...)`` for items whose ``(n_node, n_edge, senders)`` dtypes are
    ``kinds`` (distinct, in order; ``several``: more than one item): the same NumPy operations
    (jraph's offset additions and concatenations with its int32 padding graph) on empty arrays
    of those dtypes, each kind twice when ``several`` so that every kind is among the items
    whose node counts make the offsets. Since NumPy 2 result dtypes depend on dtypes alone
    (NEP 50), not values; cached per ``kinds``."""
    key = (kinds, several)
    hit = _DTYPES.get(key)
    if hit is not None:
        return hit
    reps = list(kinds) * (2 if several else 1)
    n_nodes = [np.zeros(1, dtype=k[0]) for k in reps]

    def batch(
        parts: list[np.ndarray], counts: list[np.ndarray]
    ) -> np.ndarray:  # jraph's `_batch`: shifted indices of each part, concatenated
        offsets = np.cumsum(np.array([0] + [np.sum(c) for c in counts[:-1]]))
        return np.concatenate([p[:0] + o for p, o in zip(parts, offsets, strict=False)])

    n_node = np.concatenate([c[:0] for c in n_nodes])
    n_edge = np.concatenate([np.zeros(0, dtype=k[1]) for k in reps])
    senders = batch([np.zeros(0, dtype=k[2]) for k in reps], n_nodes)
    pad32 = np.zeros(0, dtype=np.int32)
    padded = batch([senders, pad32], [np.concatenate(n_nodes), pad32])
    if len(_DTYPES) >= 64:
        _DTYPES.clear()
    hit = _DTYPES[key] = (
        (np.concatenate([n_node, pad32]).dtype, np.concatenate([n_edge, pad32]).dtype),
        padded.dtype,
    )
    return hit


def _no_graphs(template: jraph.GraphsTuple) -> jraph.GraphsTuple:
    empty = lambda x: np.zeros((0, *np.shape(x)[1:]), dtype=np.asarray(x).dtype)  # noqa: E731
    return jraph.GraphsTuple(
        n_node=np.zeros(0, dtype=np.int32),
        n_edge=np.zeros(0, dtype=np.int32),
        nodes=jax.tree_util.tree_map(empty, template.nodes),
        edges=jax.tree_util.tree_map(empty, template.edges),
        globals=jax.tree_util.tree_map(empty, template.globals),
        senders=np.zeros(0, dtype=np.int32),
        receivers=np.zeros(0, dtype=np.int32),
    )


def unpad(padded: PaddedGraphs) -> list[jraph.GraphsTuple]:
    """The real graphs of a `PaddedGraphs`, one ``GraphsTuple`` each (``jraph.unpad_with_graphs``
    then ``jraph.unbatch_np``), in batch order; ``graph_index`` maps them to the dataset."""
    real = jraph.unpad_with_graphs(padded.graphs)
    n_graph = int(np.sum(np.asarray(padded.graph_mask)))
    if int(real.n_node.shape[0]) != n_graph:  # a real graph with no nodes at the end
        raise InputError("cannot unpad: the trailing real graph is empty")
    if not np.all(np.asarray(padded.edge_mask)[: int(np.sum(real.n_edge))]):
        raise InputError("cannot unpad: padding edges were reordered")
    return jraph.unbatch_np(real)


def batches(
    dataset: Any,
    plan: BatchPlan,
    *,
    rank: int | None = None,
    cutoff: float | None = None,
    position_key: str = "pos",
) -> Iterator[PaddedGraphs]:
    """Yield `collate` of every batch of ``plan`` (``dataset[i]`` gives a ``GraphsTuple``).

    For a distributed plan (with ``plan.rank``), ``rank`` selects that rank's batches in step
    order; without it every batch is yielded in plan order.
    """
    ids = np.arange(len(plan)) if rank is None else plan.rank_batches(rank)
    template = dataset[int(plan.order[0])] if plan.num_graphs else None
    for b in ids.tolist():
        idx = plan.batch(b)
        yield collate(
            [dataset[int(i)] for i in idx],
            plan.shape(b),
            graph_index=idx,
            cutoff=cutoff,
            position_key=position_key,
            template=template,
        )
