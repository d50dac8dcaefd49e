"""Collation of single-graph ``jraph.GraphsTuple`` objects into one of an exact padded shape."""

from __future__ import annotations

from typing import Iterator, NamedTuple, Sequence

import jraph
import numpy as np

from .._budget import Budget
from .._errors import InputError
from .._padlayout import check_cutoff, padding_edge_index, padding_positions

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
    shape,
    *,
    graph_index=None,
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
    do not fit ``shape`` with its padding reservation.
    """
    b = Budget.coerce(shape)
    n_node, n_edge, n_graph = b.n_node, b.n_edge, b.n_graph
    graphs = list(graphs)
    if graphs:
        batched = jraph.batch_np(graphs)
    elif template is not None:
        batched = _no_graphs(template)
    else:
        raise InputError("an empty batch needs template= (a graph giving feature shapes/dtypes)")
    g_real = int(batched.n_node.shape[0])
    n_real = int(np.sum(batched.n_node))
    e_real = int(np.sum(batched.n_edge))
    if n_real > n_node - 1 or e_real > n_edge or g_real > n_graph - 1:
        raise InputError(
            f"{g_real} graphs with {n_real} nodes and {e_real} edges do not fit the padded shape "
            f"({n_node}, {n_edge}, {n_graph}), which has room for {n_node - 1} real nodes, "
            f"{n_edge} real edges and {n_graph - 1} real graphs"
        )
    if graph_index is None:
        graph_index = np.arange(g_real, dtype=np.int64)
    graph_index = np.asarray(graph_index, dtype=np.int64).reshape(-1)
    if graph_index.shape[0] != g_real:
        raise InputError(f"graph_index has {graph_index.shape[0]} entries for {g_real} graphs")
    padded = jraph.pad_with_graphs(batched, n_node, n_edge, n_graph)
    cutoff = check_cutoff(cutoff)
    if cutoff is not None:
        padded = _apply_cutoff(padded, n_real, e_real, cutoff, position_key)
    gi = np.full(n_graph, -1, dtype=np.int64)
    gi[:g_real] = graph_index
    return PaddedGraphs(
        graphs=padded,
        node_mask=np.arange(n_node) < n_real,
        edge_mask=np.arange(n_edge) < e_real,
        graph_mask=np.arange(n_graph) < g_real,
        graph_index=gi,
    )


def _no_graphs(template: jraph.GraphsTuple) -> jraph.GraphsTuple:
    import jax

    empty = lambda x: np.zeros((0,) + np.shape(x)[1:], dtype=np.asarray(x).dtype)  # noqa: E731
    return jraph.GraphsTuple(
        n_node=np.zeros(0, dtype=np.int32), n_edge=np.zeros(0, dtype=np.int32),
        nodes=jax.tree_util.tree_map(empty, template.nodes),
        edges=jax.tree_util.tree_map(empty, template.edges),
        globals=jax.tree_util.tree_map(empty, template.globals),
        senders=np.zeros(0, dtype=np.int32), receivers=np.zeros(0, dtype=np.int32),
    )


def _apply_cutoff(padded, n_real, e_real, cutoff, position_key):
    nodes = padded.nodes
    if not isinstance(nodes, dict) or position_key not in nodes:
        raise InputError(
            f"cutoff needs node positions: graph.nodes must be a dict with key {position_key!r}"
        )
    n_node = int(np.sum(padded.n_node))
    e_pad = int(padded.senders.shape[0]) - e_real
    ei = padding_edge_index(n_real, n_node, e_pad, spread=True)
    senders = np.array(padded.senders)
    receivers = np.array(padded.receivers)
    senders[e_real:] = ei[0]
    receivers[e_real:] = ei[1]
    pos = np.array(nodes[position_key])
    real_max = pos[:n_real].max(axis=0) if n_real else np.zeros(pos.shape[1:])
    pos[n_real:] = padding_positions(real_max, n_node - n_real, cutoff, dtype=pos.dtype)
    nodes = dict(nodes)
    nodes[position_key] = pos
    return padded._replace(nodes=nodes, senders=senders, receivers=receivers)


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
    dataset,
    plan,
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
        yield collate([dataset[int(i)] for i in idx], plan.shape(b), graph_index=idx,
                      cutoff=cutoff, position_key=position_key, template=template)
