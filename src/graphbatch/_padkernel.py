"""The padding kernel: the steps that turn the real content of a batch into its padded layout.

Plain NumPy array functions (no torch, no jax), called by every collation path: the NumPy batch
reader `graphbatch._padbatch.pad_batch` (store batches for torch and JAX, and the JAX
`graphbatch.jax.collate` of in-memory graphs) and the torch `graphbatch.torch.collate`.

Layout of a batch of shape ``(n_node, n_edge, n_graph)`` holding ``G`` real graphs with ``N``
nodes and ``E`` edges (invariants every function here keeps):

* real graphs first, in the given order; their nodes ``0 .. N-1`` and edges ``0 .. E-1``;
* ``P = n_node - N >= 1`` padding nodes (``N .. n_node-1``) and ``n_edge - E >= 0`` padding
  edges, which join padding nodes only (`graphbatch._padlayout.padding_edge_index`);
* ``n_graph - G >= 1`` padding graph slots; one of them, the *owner*, holds every padding node
  and edge: the last slot ``n_graph - 1`` in the ``"torch"`` layout (so
  ``batch.max() + 1 == n_graph``), the first padding slot ``G`` in the ``"jraph"`` layout
  (``jraph.pad_with_graphs``); the other padding slots are empty;
* masks are True exactly on real rows; ``graph_index`` is the dataset index of each real graph
  and -1 for padding slots; counts, pointers, ``batch`` and ``graph_index`` are int64.

Units: counts of nodes, edges and graph slots; positions in the caller's length unit (the
``cutoff`` is in the same unit).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from ._budget import Budget
from ._errors import EdgeIndexError, InputError, InputTypeError
from ._padlayout import auto_spacing, padding_positions

__all__ = [
    "LAYOUTS",
    "padded_shape",
    "check_fits",
    "edge_index_bounds",
    "check_local_edge_index",
    "fill_padding_rows",
    "fill_structure",
    "padding_node_positions",
    "padding_owner",
    "padding_spacing",
    "shift_edge_index",
    "slot_counts",
]

#: Which graph slot owns the padding nodes and edges: the last one, or the first padding graph.
LAYOUTS = ("torch", "jraph")

#: The arrays `fill_structure` writes, with their length (a level of the shape) and dtype.
STRUCTURE = (
    ("batch", "node", np.int64),
    ("node_mask", "node", np.bool_),
    ("edge_mask", "edge", np.bool_),
    ("graph_mask", "graph", np.bool_),
    ("graph_index", "graph", np.int64),
)


def padded_shape(shape: Any) -> tuple[int, int, int]:
    """A padded shape as ``(n_node, n_edge, n_graph)`` Python ints.

    Args:
      shape: a tuple of three ints (returned as it is when valid: the per-batch fast path), or
        anything `graphbatch.Budget.coerce` takes (a `Budget`, a sequence, a mapping).

    Returns:
      ``(n_node, n_edge, n_graph)`` with ``n_node >= 1``, ``n_edge >= 0``, ``n_graph >= 2``.

    Raises:
      InputError / InputTypeError (``ValueError`` / ``TypeError``): from `Budget.coerce`,
        naming the bad value.
    """
    if (
        type(shape) is tuple
        and len(shape) == 3
        and all(type(x) is int for x in shape)
        and shape[0] >= 1
        and shape[1] >= 0
        and shape[2] >= 2
    ):
        return shape
    b = Budget.coerce(shape)
    return b.n_node, b.n_edge, b.n_graph


def padding_owner(layout: str, num_real_graphs: int, n_graph: int) -> int:
    """The graph slot that owns every padding node and edge.

    Args:
      layout: ``"torch"`` (the last slot) or ``"jraph"`` (the first padding slot).
      num_real_graphs: ``G``, real graphs of the batch (``G <= n_graph - 1``).
      n_graph: graph slots of the padded batch.

    Returns:
      ``n_graph - 1`` or ``G``.

    Raises:
      ValueError: for another ``layout``.
    """
    if layout == "torch":
        return n_graph - 1
    if layout == "jraph":
        return num_real_graphs
    raise InputError(f"layout must be one of {LAYOUTS}, got {layout!r}")


def check_fits(
    num_real: tuple[int, int, int], shape: tuple[int, int, int], where: str = ""
) -> None:
    """Check that the real content leaves the padding reservation free.

    Args:
      num_real: ``(G, N, E)`` real graphs, nodes and edges.
      shape: the padded ``(n_node, n_edge, n_graph)``.
      where: text naming the graphs (e.g. `` (dataset indices [...]...)``), put in the message.

    Raises:
      ValueError: when ``G > n_graph - 1`` (checked first), ``N > n_node - 1`` or
        ``E > n_edge``; the message names the counts and the room.
    """
    g_real, n_real, e_real = num_real
    n_node, n_edge, n_graph = shape
    if g_real > n_graph - 1:
        raise InputError(
            f"{g_real} graphs do not fit a padded shape with n_graph = {n_graph} "
            f"(room for {n_graph - 1} real graphs beside the padding graph)"
        )
    if n_real > n_node - 1 or e_real > n_edge:
        raise InputError(
            f"{g_real} graphs with {n_real} nodes and {e_real} edges{where} do not fit the padded "
            f"shape ({n_node}, {n_edge}, {n_graph}), which has room for {n_node - 1} real nodes "
            f"and {n_edge} real edges; the plan and the data disagree about graph sizes"
        )


def slot_counts(
    real_counts: Sequence[int] | np.ndarray,
    num_padding: int,
    n_graph: int,
    owner: int,
    *,
    counts_out: np.ndarray | None = None,
    ptr_out: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Rows (nodes or edges) per graph slot and their prefix sums.

    Args:
      real_counts: ``[G]`` rows of each real graph.
      num_padding: padding rows, all given to slot ``owner``.
      n_graph: graph slots (``G <= n_graph - 1``).
      owner: the owning slot (`padding_owner`), ``G <= owner < n_graph``.
      counts_out, ptr_out: optional int64 arrays ``[n_graph]`` / ``[n_graph + 1]`` to write.

    Returns:
      ``(counts, ptr)``: int64 ``[n_graph]`` (real counts, then 0 except ``num_padding`` at
      ``owner``) and int64 ``[n_graph + 1]``, ``ptr[0] = 0``, ``ptr[i + 1] = ptr[i] +
      counts[i]`` (so ``ptr[:G]`` are the real graphs' first rows, ``ptr[-1]`` the padded size).
    """
    counts = np.empty(n_graph, dtype=np.int64) if counts_out is None else counts_out
    ptr = np.empty(n_graph + 1, dtype=np.int64) if ptr_out is None else ptr_out
    g = len(real_counts)
    counts[:g] = real_counts
    counts[g:] = 0
    counts[owner] = num_padding
    ptr[0] = 0
    np.cumsum(counts, out=ptr[1:])
    return counts, ptr


def edge_index_bounds(dtype: DTypeLike, max_nodes: int) -> tuple[np.dtype, int | None, bool]:
    """How `check_local_edge_index` compares stored indices of ``dtype``.

    One unsigned comparison catches negative and too-large indices alike: negative values read
    as unsigned are ``>= 2**(bits-1)``, so the bound of a graph is its node count capped there.

    Args:
      dtype: the integer dtype of the stored (local) edge index.
      max_nodes: the largest node count of one graph of the source.

    Returns:
      ``(unsigned dtype of the same size, cap or None where no graph has more nodes than the
      dtype's largest value + 1, whether node counts must be cast to the unsigned dtype to
      compare exactly (8-byte indices))``.

    Raises:
      TypeError: for a non-integer ``dtype``.
    """
    dtype = np.dtype(dtype)
    if dtype.kind not in "iu":
        raise InputTypeError(f"edge_index must hold integers, got dtype {dtype}")
    top = int(np.iinfo(dtype).max) + 1
    cap = top if dtype.kind == "i" and max_nodes > top else None
    return np.dtype(f"u{dtype.itemsize}"), cap, dtype.itemsize == 8


def check_local_edge_index(
    local: np.ndarray,
    node_counts: np.ndarray,
    edge_counts: np.ndarray,
    edge_first: np.ndarray,
    graph_ids: np.ndarray,
    bounds: tuple[np.dtype, int | None, bool],
) -> None:
    """Check that every edge of a batch joins nodes of its own graph.

    Args:
      local: ``[2, E]`` the real edges' *local* node indices (0-based within each graph), the
        edges of real graph ``i`` at ``edge_first[i] : edge_first[i] + edge_counts[i]``.
      node_counts, edge_counts: ``[G]`` nodes and edges of each real graph.
      edge_first: ``[G]`` exclusive prefix sums of ``edge_counts``.
      graph_ids: ``[G]`` dataset index of each real graph (for the message).
      bounds: `edge_index_bounds` of ``local.dtype``.

    Raises:
      EdgeIndexError: (a ``ValueError``) naming the first graph (dataset index) and edge with
        an index outside ``[0, nodes of its graph)`` (damaged data is never returned as a
        batch).
    """
    unsigned_dt, cap, wide = bounds
    unsigned = local.view(unsigned_dt)
    # the largest index of each graph with edges (reduceat over its run) against its node count
    if edge_counts.all():
        top = np.maximum.reduceat(unsigned, edge_first, axis=1)
        limit = node_counts
    else:
        has = edge_counts > 0
        top = np.maximum.reduceat(unsigned, edge_first[has], axis=1)
        limit = node_counts[has]
    if cap is not None:
        limit = np.minimum(limit, cap)
    if wide:
        limit = limit.astype(unsigned_dt)
    if (top >= limit).any():
        nodes = np.repeat(node_counts, edge_counts)
        limit = nodes if cap is None else np.minimum(nodes, cap)
        if wide:
            limit = limit.astype(unsigned_dt)
        e = int(np.flatnonzero((unsigned >= limit).any(axis=0))[0])
        g = int(graph_ids[np.searchsorted(np.cumsum(edge_counts), e, side="right")])
        raise EdgeIndexError(
            f"edge_index of graph {g} holds {local[:, e].tolist()}, outside its "
            f"{int(nodes[e])} nodes (indices must be local to their graph; "
            "read from a store, the store is damaged)"
        )


def shift_edge_index(
    local: np.ndarray, node_first: np.ndarray, edge_counts: np.ndarray, out: np.ndarray
) -> np.ndarray:
    """Local node indices to batch-global ones (senders/receivers of the padded batch).

    Args:
      local: ``[2, E]`` local indices, real graph ``i``'s edges forming its ``i``-th block.
      node_first: ``[G]`` first node of each real graph in the batch (``node_ptr[:G]``).
      edge_counts: ``[G]`` edges per real graph (summing to ``E``).
      out: ``[2, E]`` integer array written (cast as ``casting="unsafe"``).

    Returns:
      ``out``, ``local + node_first[graph of each edge]``.
    """
    np.add(local, np.repeat(node_first, edge_counts), out=out, casting="unsafe")
    return out


def fill_structure(
    shape: tuple[int, int, int],
    num_real: tuple[int, int, int],
    node_counts: np.ndarray,
    graph_ids: ArrayLike,
    out: Mapping[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """``batch``, the masks and ``graph_index`` of a padded batch.

    Args:
      shape: ``(n_node, n_edge, n_graph)``.
      num_real: ``(G, N, E)``.
      node_counts: int64 ``[n_graph]`` nodes per slot (`slot_counts`).
      graph_ids: ``[G]`` dataset index of each real graph.
      out: optional ``{name: array}`` of the arrays to write (names and shapes of `STRUCTURE`).

    Returns:
      ``{"batch": int64 [n_node] slot of every node, "node_mask"/"edge_mask"/"graph_mask":
      bool [n_node]/[n_edge]/[n_graph] (True on real rows), "graph_index": int64 [n_graph]
      (``graph_ids``, then -1)}``.
    """
    n = {"node": shape[0], "edge": shape[1], "graph": shape[2]}
    arrays = {
        name: (np.empty(n[level], dtype=dt) if out is None else out[name])
        for name, level, dt in STRUCTURE
    }
    arrays["batch"][:] = np.repeat(np.arange(shape[2], dtype=np.int64), node_counts)
    g_real, n_real, e_real = num_real
    for name, k in (("node_mask", n_real), ("edge_mask", e_real), ("graph_mask", g_real)):
        arrays[name][:k] = True
        arrays[name][k:] = False
    arrays["graph_index"][:g_real] = graph_ids
    arrays["graph_index"][g_real:] = -1
    return arrays


def padding_spacing(real_positions: np.ndarray, cutoff: float | None) -> float:
    """The spacing ``s`` of the padding geometry: ``cutoff`` when given, else
    `graphbatch._padlayout.auto_spacing` of the real positions ``[N, ...]`` (computed from the
    per-axis minima and maxima alone, which are all it uses).

    Raises:
      ValueError: for non-finite real positions when ``cutoff`` is ``None``.
    """
    if cutoff is not None:
        return cutoff
    k = real_positions.shape[0]
    if not k:
        return 1.0
    axes = _axes(real_positions)
    return auto_spacing(
        np.stack([axes.min(axis=1).astype(np.float64), axes.max(axis=1).astype(np.float64)])
    )


def padding_node_positions(
    real_positions: np.ndarray, num_padding: int, cutoff: float | None
) -> np.ndarray:
    """Positions of the padding nodes next to the real ones.

    Args:
      real_positions: ``[N, ...]`` real node positions (any real dtype; trailing dims are
        flattened to ``D`` axes).
      num_padding: ``P``, padding nodes.
      cutoff: the spacing ``s`` (a distance), or ``None`` for `padding_spacing`'s default.

    Returns:
      float64 ``[P, D]``: padding node ``j`` at ``max real coordinate + (j + 1) * 2s`` on every
      axis (0 for the maximum without real nodes), so padding nodes are farther than ``2s``
      from every real node and from each other (`graphbatch._padlayout.padding_positions`).

    Raises:
      ValueError: for non-finite real positions.
    """
    k = real_positions.shape[0]
    axes = _axes(real_positions)
    hi = axes.max(axis=1).astype(np.float64) if k else np.zeros(axes.shape[0])
    if cutoff is not None:
        spacing = cutoff
    elif k:
        spacing = auto_spacing(np.stack([axes.min(axis=1).astype(np.float64), hi]))
    else:
        spacing = auto_spacing(axes.T)
    return padding_positions(hi, num_padding, spacing)


def _axes(real: np.ndarray) -> np.ndarray:
    """``real`` ``[k, ...]`` as a transposed copy ``[D, k]`` (NumPy reduces ``[k, 3]`` along
    axis 0 ~30x slower than ``[3, k]`` along axis 1)."""
    k = real.shape[0]
    return real.reshape(k, math.prod(real.shape[1:])).T.copy()


def fill_padding_rows(out: np.ndarray, num_real_rows: int, value: ArrayLike) -> np.ndarray:
    """``out[num_real_rows:] = value`` (broadcast, cast as an assignment does); returns ``out``."""
    out[num_real_rows:] = value
    return out
