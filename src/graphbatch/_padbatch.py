"""The framework-neutral padded-batch kernel: concatenated graph arrays + an index list + a padded
shape -> padded NumPy arrays, masks, ``batch``/``ptr`` and ``graph_index``.

Pure NumPy (no torch, no jax). The torch adapter wraps the result with ``torch.from_numpy``
(zero-copy) into the same PyG ``Batch`` as ``graphbatch.torch.collate``; the JAX adapter can wrap
it into a ``jraph.GraphsTuple`` (``layout="jraph"``).

Source: `PackedGraphs`, ``G`` graphs stored back to back (an on-disk store's memory-mapped
arrays, or arrays in memory). Reading a batch is vectorised: the batch's graph indices give row
ranges through the offsets, the ranges become one row-index array per level, and each array is
gathered with one fancy index, written straight into the padded output. Random graphs are cold
in the CPU caches: before gathering, the first row of every graph is read from each large array
in one short gather per array (`TOUCH_BYTES`), so the misses overlap instead of stalling the
gathers one graph at a time. What depends only on the padded shape and the options (buffer
layout, per-field gather plan) is a `_Program` made once per shape and cached on the source.

Layouts of a batch of shape ``(n_node, n_edge, n_graph)`` holding ``Gr`` real graphs with ``N``
nodes and ``E`` edges -- real graphs first, in the given order, padding after them:

* ``"torch"``: the last graph slot ``n_graph - 1`` owns all ``n_node - N >= 1`` padding nodes and
  all ``n_edge - E`` padding edges (so ``batch.max() + 1 == n_graph``); slots ``Gr .. n_graph-2``
  are empty padding graphs.
* ``"jraph"``: slot ``Gr`` (the first padding graph) owns them, the rest are empty
  (``jraph.pad_with_graphs``).

Padding edges connect padding nodes only (`graphbatch._padlayout.padding_edge_index`); with a
``cutoff`` padding positions are placed by `graphbatch._padlayout.padding_positions`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

import numpy as np

from ._budget import Budget
from ._errors import InputError, InputTypeError
from ._padlayout import auto_spacing, check_cutoff, padding_edge_index, padding_positions

__all__ = ["LAYOUTS", "PackedGraphs", "PaddedArrays", "buffer_layout", "pad_batch", "row_ranges"]

#: Which graph slot owns the padding nodes and edges: the last one, or the first padding graph.
LAYOUTS = ("torch", "jraph")


@dataclass(frozen=True)
class PackedGraphs:
    """``G`` graphs as concatenated arrays (read-only views are fine, e.g. ``np.memmap``).

    ``n_node``/``n_edge``: int64 ``[G]``; ``node_offsets``/``edge_offsets``: int64 ``[G + 1]``
    (graph ``g``'s rows are ``offsets[g]:offsets[g+1]``); ``edge_index``: int ``[2, E]`` with
    *local* node indices (row 0 = source); ``node``/``edge``/``graph``: ``{name: array}`` whose
    first dimension counts nodes / edges / graphs. Not validated row by row here: the producer
    (e.g. `graphbatch.datasets.GraphStore`, which checks its file on open) guarantees that the
    offsets are the prefix sums of the counts; `pad_batch` checks once that every array has the
    rows the offsets address, and range-checks the edge indices it reads.
    """

    n_node: np.ndarray
    n_edge: np.ndarray
    node_offsets: np.ndarray
    edge_offsets: np.ndarray
    edge_index: np.ndarray
    node: Mapping[str, np.ndarray] = field(default_factory=dict)
    edge: Mapping[str, np.ndarray] = field(default_factory=dict)
    graph: Mapping[str, np.ndarray] = field(default_factory=dict)
    _rows: dict | None = field(default=None, init=False, repr=False, compare=False)
    _layouts: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _max_nodes: int | None = field(default=None, init=False, repr=False, compare=False)

    def __len__(self) -> int:
        return int(self.n_node.shape[0])

    def level_of(self) -> dict[str, str]:
        """``{field: level}`` in storage order (node, then edge, then graph fields)."""
        return {**{k: "node" for k in self.node}, **{k: "edge" for k in self.edge},
                **{k: "graph" for k in self.graph}}

    def max_nodes(self) -> int:
        """The largest node count of one graph (0 without graphs), computed once."""
        if self._max_nodes is None:
            object.__setattr__(self, "_max_nodes", int(self.n_node.max(initial=0)))
        return self._max_nodes

    def row_views(self) -> dict[str, np.ndarray | None]:
        """``{name: one-item-per-row view}`` of every array, made once: each row as one opaque
        ``void`` item of the row's bytes, so a gather copies whole rows with alignment 1
        (``edge_index`` ``[2, E]``: each entry one item). (A store's memory maps
        start at arbitrary file offsets: a ``float32`` array after a ``uint8`` one is not
        4-byte aligned, and NumPy gathers unaligned arrays element by element -- 10-20x
        slower -- and ``np.take`` even copies the whole unaligned array first.) ``None`` for
        an array that is not C-contiguous (gathered by plain fancy indexing). Checks once that
        every array has the rows the offsets address (``ValueError``)."""
        if self._rows is None:
            g = len(self)
            totals = {"node": int(self.node_offsets[-1]), "edge": int(self.edge_offsets[-1]),
                      "graph": g}
            if self.node_offsets.shape != (g + 1,) or self.edge_offsets.shape != (g + 1,):
                raise InputError(f"offsets of shape {self.node_offsets.shape} and "
                                 f"{self.edge_offsets.shape} for {g} graphs (need {g + 1})")
            ei = self.edge_index
            if ei.ndim != 2 or ei.shape[0] != 2 or ei.shape[1] < totals["edge"]:
                raise InputError(f"edge_index of shape {ei.shape} for {totals['edge']} edges")
            views = {"edge_index": _item_view(ei)}
            for level in ("node", "edge", "graph"):
                for name, arr in getattr(self, level).items():
                    if arr.shape[0] < totals[level]:
                        raise InputError(f"{level} field {name!r} has {arr.shape[0]} rows, the "
                                         f"offsets address {totals[level]}")
                    views[name] = _row_view(arr)
            object.__setattr__(self, "_rows", views)
        return self._rows


def _row_view(arr: np.ndarray) -> np.ndarray | None:
    """``arr`` ``[R, ...]`` as a 1-D array of ``R`` void items of one row's bytes each (a view),
    or ``None`` when that view does not exist (not C-contiguous, zero-byte rows)."""
    if not arr.flags.c_contiguous or arr.ndim == 0:
        return None
    row_bytes = arr.dtype.itemsize * int(np.prod(arr.shape[1:], dtype=np.int64))
    if row_bytes == 0 or arr.dtype.hasobject:
        return None
    return arr.reshape(-1).view(np.uint8).view(np.dtype((np.void, row_bytes)))


def _item_view(arr: np.ndarray) -> np.ndarray | None:
    """``arr`` with each entry as one void item of its bytes (same shape), or ``None``."""
    if not arr.flags.c_contiguous or arr.dtype.hasobject or arr.dtype.itemsize == 0:
        return None
    return arr.view(np.dtype((np.void, arr.dtype.itemsize)))


#: Mean rows per graph from which a level is copied run by run (one ``memcpy`` per graph,
#: `np.concatenate` of slices) instead of row by row (`np.take` of a row-index array): long
#: runs (QM9 radius graphs: ~300 edges per graph) copy ~2x faster as runs; short ones (~20
#: nodes) pay more for a Python slice per graph than they save.
RUN_ROWS = 64


def _rows(starts: np.ndarray, counts: np.ndarray, first: np.ndarray, total: int):
    """Where the rows of graphs with first rows ``starts`` and ``counts`` rows are: a list of
    one slice per graph with rows (long runs, see `RUN_ROWS`) or the row-index array
    (`row_ranges`)."""
    if total and total >= RUN_ROWS * starts.shape[0]:
        return [slice(a, a + n) for a, n in zip(starts.tolist(), counts.tolist()) if n]
    return row_ranges(starts, counts, first, total)


def _take_rows(arr: np.ndarray, view: np.ndarray | None, rows, out: np.ndarray,
               axis: int = 0, same: bool | None = None) -> None:
    """``out[:] = arr[rows]`` along ``axis`` (0, or 1 for ``edge_index``), ``rows`` from `_rows`
    (in range), copying whole rows through ``view`` (`PackedGraphs.row_views`) when ``out`` has
    ``arr``'s dtype and is C-contiguous (``same``: that condition, when the caller knows it);
    otherwise cast as an assignment does."""
    if out.size == 0:
        return
    runs = isinstance(rows, list)
    if same is None:
        same = view is not None and out.dtype == arr.dtype and out.flags.c_contiguous
    if same:
        dst = out.view(view.dtype) if axis else out.reshape(-1).view(np.uint8).view(view.dtype)
        if runs:
            np.concatenate([view[:, r] if axis else view[r] for r in rows], axis=axis, out=dst)
        else:
            np.take(view, rows, axis=axis, out=dst, mode="clip")
    elif runs:
        np.concatenate([arr[:, r] if axis else arr[r] for r in rows], axis=axis, out=out,
                       casting="unsafe")
    elif view is not None:
        tmp = np.take(view, rows, axis=axis, mode="clip")
        out[...] = (tmp.view(arr.dtype) if axis else tmp.view(arr.dtype).reshape(out.shape))
    else:
        out[...] = np.take(arr, rows, axis=axis, mode="clip")


@dataclass(frozen=True)
class PaddedArrays:
    """One padded batch as NumPy arrays.

    ``fields``: ``{name: array}`` with ``edge_index`` ``[2, n_edge]`` (batch-global node indices)
    and every node/edge/graph field padded to ``n_node``/``n_edge``/``n_graph`` rows.
    ``node_counts``/``edge_counts``: int64 ``[n_graph]`` rows per graph slot (padding included
    in the owner slot); ``node_ptr``/``edge_ptr``: int64 ``[n_graph + 1]`` their prefix sums;
    ``batch``: int64 ``[n_node]`` graph slot of every node; ``node_mask``/``edge_mask``/
    ``graph_mask``: bool, real = True; ``graph_index``: int64 ``[n_graph]`` dataset index of each
    real graph, -1 for padding; ``edge_inc``: int64 ``[n_graph]`` the node offset added to each
    graph's ``edge_index`` (0 for padding graphs); ``num_real``: ``(graphs, nodes, edges)``.
    ``buffer``: the one ``uint8`` block all these arrays are views of, ``offsets`` their byte
    offsets in it (fields by name, the others by attribute name); ``graph_ptr``:
    ``arange(n_graph + 1)`` (one row per graph slot).
    """

    fields: dict[str, np.ndarray]
    node_counts: np.ndarray
    edge_counts: np.ndarray
    node_ptr: np.ndarray
    edge_ptr: np.ndarray
    batch: np.ndarray
    node_mask: np.ndarray
    edge_mask: np.ndarray
    graph_mask: np.ndarray
    graph_index: np.ndarray
    edge_inc: np.ndarray
    num_real: tuple[int, int, int]
    shape: tuple[int, int, int]
    layout: str
    buffer: np.ndarray | None = None
    offsets: Mapping[str, int] | None = None
    graph_ptr: np.ndarray | None = None


#: Byte alignment of every array inside a batch's buffer (a cache line; enough for any dtype).
ALIGN = 64
#: The structure arrays of a batch, in buffer order: (name, level of its length, dtype).
_STRUCT = (("node_counts", "graph", np.int64), ("edge_counts", "graph", np.int64),
           ("node_ptr", "graph+1", np.int64), ("edge_ptr", "graph+1", np.int64),
           ("batch", "node", np.int64), ("node_mask", "node", np.bool_),
           ("edge_mask", "edge", np.bool_), ("graph_mask", "graph", np.bool_),
           ("graph_index", "graph", np.int64), ("edge_inc", "graph", np.int64),
           ("graph_ptr", "graph+1", np.int64))


#: Arrays of at least this many bytes are "touched" before a batch is gathered (see
#: `_Program.touch`); smaller ones stay in the CPU caches anyway.
TOUCH_BYTES = 1 << 22


class _Layout:
    """Where each output array of a batch of ``shape`` lies in its one buffer: ``entries``
    ``{name: (offset, end, shape, dtype)}`` (fields by name, structure arrays by their
    `PaddedArrays` attribute name; offsets are multiples of `ALIGN`), ``offsets`` ``{name:
    offset}`` and ``nbytes``, the buffer's size. Only the fields' trailing shapes and dtypes of
    ``source`` matter."""

    __slots__ = ("entries", "nbytes", "offsets")

    def __init__(self, source: PackedGraphs, shape: tuple[int, int, int], dtypes, index_dtype):
        n = {"node": shape[0], "edge": shape[1], "graph": shape[2], "graph+1": shape[2] + 1}
        views = source.row_views()
        specs = [("edge_index", (2, shape[1]), np.dtype(index_dtype))]
        for level in ("node", "edge", "graph"):
            for name, arr in getattr(source, level).items():
                specs.append((name, (n[level], *arr.shape[1:]),
                              np.dtype(dtypes.get(name, arr.dtype))))
        specs += [(name, (n[level],), np.dtype(dt)) for name, level, dt in _STRUCT]
        self.entries = {}
        at = 0
        for name, shp, dt in specs:
            nbytes = dt.itemsize * int(np.prod(shp, dtype=np.int64))
            self.entries[name] = (at, at + nbytes, shp, dt)
            at += -(-nbytes // ALIGN) * ALIGN
        self.nbytes = max(at, ALIGN)
        self.offsets = MappingProxyType({name: e[0] for name, e in self.entries.items()})


class _Program:
    """Everything about reading batches of one padded shape from one source that does not
    depend on the batch (made once per shape, cached on the source): where each output array
    lies in the batch's one buffer (``entries``: ``{name: (offset, end, shape, dtype)}``,
    fields by name, structure arrays by their `PaddedArrays` attribute name; offsets are
    multiples of `ALIGN`; ``nbytes`` the buffer's size), the gather of every field
    (``fields``), the arrays to touch before gathering (``touch``), the edge index's unsigned
    view dtype for its range check, and constant structure rows (``arange(n_graph + 1)``)."""

    __slots__ = ("entries", "nbytes", "offsets", "fields", "touch", "ei_view", "ei_unsigned",
                 "ei_cap", "wide_bound", "geometric", "graph_ptr", "slots")

    def __init__(self, source: PackedGraphs, shape: tuple[int, int, int], dtypes, index_dtype,
                 layout: str, position_key: str):
        lay = _Layout(source, shape, dtypes, index_dtype)
        self.entries, self.nbytes, self.offsets = lay.entries, lay.nbytes, lay.offsets
        views = source.row_views()
        # fields in storage order: (name, level number, array, row view or None, whether rows
        # are copied as whole items (same dtype), offset, shape, dtype, is the position field)
        self.fields = []
        self.touch = []
        ei = source.edge_index
        if ei.dtype.kind not in "iu":
            raise InputTypeError(f"edge_index must hold integers, got dtype {ei.dtype}")
        self.ei_view = views["edge_index"]
        if self.ei_view is not None and ei.shape[1] and ei.nbytes >= TOUCH_BYTES:
            self.touch.append((self.ei_view, 1, 1))
        # One unsigned comparison catches negative and too-large indices alike: negative
        # values read as unsigned are >= 2**(bits-1), so the bound per graph is its node count
        # capped there (``ei_cap``: None where no graph has more nodes than that); node counts
        # compare exactly against 8-byte unsigned values only as that type (``wide_bound``).
        self.ei_unsigned = np.dtype(f"u{ei.dtype.itemsize}")
        top = int(np.iinfo(ei.dtype).max) + 1
        self.ei_cap = top if ei.dtype.kind == "i" and source.max_nodes() > top else None
        self.wide_bound = ei.dtype.itemsize == 8
        for lv, level in enumerate(("node", "edge", "graph")):
            for name, arr in getattr(source, level).items():
                at, _, shp, dt = self.entries[name]
                view = views[name]
                same = view is not None and dt == arr.dtype
                self.fields.append((name, lv, arr, view, same, at, shp, dt,
                                    level == "node" and name == position_key))
                if (view is not None and level != "graph" and arr.shape[0]
                        and arr.nbytes >= TOUCH_BYTES):
                    self.touch.append((view, lv, 0))
        pos = source.node.get(position_key)
        # padding geometry by default: torch layout with float node positions (as
        # `graphbatch.torch.collate` does); with a cutoff always
        self.geometric = layout == "torch" and pos is not None and np.issubdtype(
            np.dtype(dtypes.get(position_key, pos.dtype)), np.floating)
        self.graph_ptr = np.arange(shape[2] + 1, dtype=np.int64)
        self.graph_ptr.flags.writeable = False
        self.slots = self.graph_ptr[:-1]


def _program(source: PackedGraphs, shape, dtypes, index_dtype, layout: str,
             position_key: str) -> _Program:
    """The `_Program` for ``shape`` and these options, cached per source (a few distinct shapes
    per plan; fixed-shape strategies have one)."""
    cache = source._layouts
    try:
        key = (shape, index_dtype, layout, position_key, tuple(dtypes.items()))
        prog = cache.get(key)
    except TypeError:  # unhashable dtype spellings
        key = (shape, np.dtype(index_dtype).str, layout, position_key, tuple(sorted(
            (k, np.dtype(v).str) for k, v in dtypes.items())))
        prog = cache.get(key)
    if prog is None:
        if len(cache) >= 256:
            cache.clear()
        prog = cache[key] = _Program(source, shape, dtypes, index_dtype, layout, position_key)
    return prog


def buffer_layout(source: PackedGraphs, shape, dtypes: Mapping[str, np.dtype] | None = None,
                  index_dtype=np.int64) -> _Layout:
    """Where `pad_batch` puts each array of a batch of ``shape`` from ``source`` with these
    ``dtypes``/``index_dtype``: ``.entries`` ``{name: (start, end, shape, dtype)}`` (byte
    range in the buffer; fields by name, structure arrays by their `PaddedArrays` attribute
    name) and ``.nbytes``, the buffer's size. Only the fields' trailing shapes and dtypes of
    ``source`` matter (zero-row arrays do). Bytes grow with each of ``n_node``, ``n_edge``,
    ``n_graph``."""
    return _Layout(source, _shape(shape), dtypes or {}, index_dtype)


def row_ranges(starts: np.ndarray, lengths: np.ndarray, first: np.ndarray | None = None,
               total: int | None = None) -> np.ndarray:
    """The concatenation of ``arange(s, s + n)`` for each ``(s, n)`` (int64, vectorised).

    ``first`` (optional): the exclusive prefix sums of ``lengths`` and ``total`` their sum, when
    the caller has them already."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if total is None:
        total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    if first is None:
        first = np.zeros(lengths.shape[0], dtype=np.int64)
        np.cumsum(lengths[:-1], out=first[1:])
    out = np.repeat(np.asarray(starts, dtype=np.int64) - first, lengths)
    out += np.arange(total, dtype=np.int64)
    return out


def _shape(shape) -> tuple[int, int, int]:
    if type(shape) is tuple and len(shape) == 3 and all(type(x) is int for x in shape):
        if shape[0] >= 1 and shape[1] >= 0 and shape[2] >= 2:
            return shape
    b = Budget.coerce(shape)
    return b.n_node, b.n_edge, b.n_graph


def _index(index, n: int) -> np.ndarray:
    idx = np.asarray(index)
    if idx.ndim != 1:
        raise InputError(f"a batch index list must be 1-D, got shape {idx.shape}")
    if idx.size and idx.dtype.kind not in "iu":
        raise InputTypeError(f"graph indices must be integers, got dtype {idx.dtype}")
    idx = idx.astype(np.int64, copy=False)
    # one reduction: negative indices are huge as unsigned
    if idx.size and int(idx.view(np.uint64).max()) >= n:
        bad = idx[(idx < 0) | (idx >= n)][0]
        raise IndexError(f"graph index {int(bad)} out of range for {n} graphs")
    return idx


def pad_batch(
    source: PackedGraphs,
    index,
    shape,
    *,
    layout: str = "torch",
    cutoff: float | None = None,
    position_key: str = "pos",
    dtypes: Mapping[str, np.dtype] | None = None,
    index_dtype=np.int64,
    pad: Mapping[str, object] | None = None,
    allocate=None,
) -> PaddedArrays:
    """Gather graphs ``index`` of ``source`` into one batch padded to ``shape`` exactly.

    ``shape``: ``(n_node, n_edge, n_graph)`` or a `graphbatch.Budget`; the real content must
    leave the padding reservation free (nodes <= n_node - 1, edges <= n_edge, graphs <=
    n_graph - 1), else ``ValueError``. ``layout``: ``"torch"`` or ``"jraph"`` (module docstring).
    ``dtypes``: output dtype per field (default: the stored dtype); ``index_dtype``: dtype of the
    output ``edge_index``. ``pad``: pad value per field (default 0). ``cutoff`` (a distance):
    padding nodes get positions (field ``position_key``) farther than ``2 * cutoff`` from real
    nodes and each other, and padding edges join distinct padding nodes where there are >= 2.
    In the torch layout the same geometry is used by default whenever ``position_key`` is a
    float node field, spaced by `graphbatch._padlayout.auto_spacing` (as `graphbatch.torch.collate`).

    Every output array is a view into one new buffer per batch (``PaddedArrays.buffer``, 1-D
    ``uint8``; ``PaddedArrays.offsets``: byte offset of each array, fields by name, structure
    arrays by attribute name), so a batch crosses a process boundary as one block; the buffer
    lives as long as any of its arrays. ``allocate(nbytes)`` (optional) returns that buffer: a
    new, writable, C-contiguous ``uint8`` array of at least ``nbytes`` (e.g. in shared memory);
    default ``np.empty``. Buffers are never reused by the kernel.

    Raises ``IndexError`` for an index outside ``source``, and ``ValueError`` when a stored edge
    index points outside its graph (damaged data: never returned as a batch).
    """
    n_node, n_edge, n_graph = _shape(shape)
    if layout not in LAYOUTS:
        raise InputError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    idx = _index(index, len(source))
    cutoff = check_cutoff(cutoff)
    dtypes = dtypes or {}
    pad = pad or {}
    if cutoff is not None and position_key not in source.node:
        raise InputError(f"cutoff needs node positions: no node-level field {position_key!r} "
                         "(set position_key)")
    g_real = int(idx.shape[0])
    if g_real > n_graph - 1:
        raise InputError(f"{g_real} graphs do not fit a padded shape with n_graph = {n_graph} "
                         f"(room for {n_graph - 1} real graphs beside the padding graph)")
    nn = source.n_node[idx]
    ne = source.n_edge[idx]
    n_real = int(nn.sum())
    e_real = int(ne.sum())
    if n_real > n_node - 1 or e_real > n_edge:
        raise InputError(
            f"{g_real} graphs with {n_real} nodes and {e_real} edges (dataset indices "
            f"{idx[:8].tolist()}...) do not fit the padded shape ({n_node}, {n_edge}, {n_graph}), "
            f"which has room for {n_node - 1} real nodes and {n_edge} real edges; the plan and "
            "the data disagree about graph sizes")
    prog = _program(source, (n_node, n_edge, n_graph), dtypes, index_dtype, layout,
                    position_key)
    node_starts = source.node_offsets[idx]
    edge_starts = source.edge_offsets[idx]
    starts = (node_starts, edge_starts)
    # Touch the first row of every graph in each large array, one short gather per array:
    # the loads are independent, so the CPU overlaps their cache and TLB misses (a random
    # graph's rows are cold); the gathers below then find them cached instead of waiting
    # for one miss per graph per array in turn. Results are discarded.
    if g_real:
        for view, lv, axis in prog.touch:
            view.take(starts[lv], axis=axis, mode="clip")
    n_pad, e_pad = n_node - n_real, n_edge - e_real
    owner = n_graph - 1 if layout == "torch" else g_real
    entries = prog.entries
    buf = np.empty(prog.nbytes, dtype=np.uint8) if allocate is None else allocate(prog.nbytes)
    if not (isinstance(buf, np.ndarray) and buf.dtype == np.uint8 and buf.ndim == 1
            and buf.shape[0] >= prog.nbytes and buf.flags.c_contiguous and buf.flags.writeable):
        raise InputTypeError(f"allocate({prog.nbytes}) must return a writable 1-D uint8 array of at "
                        f"least {prog.nbytes} bytes")

    def new(name):
        at, _, shp, dt = entries[name]
        return np.ndarray(shp, dt, buf, at)

    geometric = cutoff is not None or prog.geometric

    node_counts, edge_counts = new("node_counts"), new("edge_counts")
    node_ptr, edge_ptr = new("node_ptr"), new("edge_ptr")
    for counts, ptr, real, n_extra in ((node_counts, node_ptr, nn, n_pad),
                                       (edge_counts, edge_ptr, ne, e_pad)):
        counts[:g_real] = real
        counts[g_real:] = 0
        counts[owner] = n_extra
        ptr[0] = 0
        np.cumsum(counts, out=ptr[1:])
    # real graphs come first in both layouts: ptr[:g_real] are their exclusive prefix sums
    node_first, edge_first = node_ptr[:g_real], edge_ptr[:g_real]
    node_rows = _rows(node_starts, nn, node_first, n_real)
    edge_rows = _rows(edge_starts, ne, edge_first, e_real)

    fields: dict[str, np.ndarray] = {}
    # edge_index: local -> batch-global indices, range-checked against each graph's node count
    ei = new("edge_index")
    if e_real:
        local = np.empty((2, e_real), dtype=source.edge_index.dtype)
        _take_rows(source.edge_index, prog.ei_view, edge_rows, local, axis=1)
        # the largest index of each graph with edges (reduceat over its run of edges) against
        # its node count, as unsigned values (negative ones are huge)
        unsigned = local.view(prog.ei_unsigned)
        if ne.all():
            top = np.maximum.reduceat(unsigned, edge_first, axis=1)
            limit = nn
        else:
            has = ne > 0
            top = np.maximum.reduceat(unsigned, edge_first[has], axis=1)
            limit = nn[has]
        if prog.ei_cap is not None:
            limit = np.minimum(limit, prog.ei_cap)
        if prog.wide_bound:
            limit = limit.astype(prog.ei_unsigned)
        if (top >= limit).any():
            nodes = np.repeat(nn, ne)
            limit = nodes if prog.ei_cap is None else np.minimum(nodes, prog.ei_cap)
            if prog.wide_bound:
                limit = limit.astype(prog.ei_unsigned)
            e = int(np.flatnonzero((unsigned >= limit).any(axis=0))[0])
            g = int(idx[np.searchsorted(np.cumsum(ne), e, side="right")])
            raise InputError(f"stored edge_index of graph {g} holds {local[:, e].tolist()}, "
                             f"outside its {int(nodes[e])} nodes (damaged store?)")
        np.add(local, np.repeat(node_first, ne), out=ei[:, :e_real], casting="unsafe")
    edge_inc = new("edge_inc")
    edge_inc[:g_real] = node_first
    edge_inc[g_real:] = 0
    padding_edge_index(n_real, n_node, e_pad, spread=geometric, out=ei[:, e_real:])
    fields["edge_index"] = ei

    rows = (node_rows, edge_rows, idx)
    real_n = (n_real, e_real, g_real)
    for name, lv, arr, view, same, at, shp, dt, is_pos in prog.fields:
        out = np.ndarray(shp, dt, buf, at)
        k = real_n[lv]
        _take_rows(arr, view, rows[lv], out[:k], same=same)
        if geometric and is_pos:
            out[k:] = _padding_positions(out[:k], shp[0] - k, cutoff).reshape(out[k:].shape)
        else:
            out[k:] = pad.get(name, 0)
        fields[name] = out

    batch = new("batch")
    batch[:] = np.repeat(prog.slots, node_counts)
    masks = []
    for name, k in (("node_mask", n_real), ("edge_mask", e_real), ("graph_mask", g_real)):
        m = new(name)
        m[:k] = True
        m[k:] = False
        masks.append(m)
    node_mask, edge_mask, graph_mask = masks
    graph_index = new("graph_index")
    graph_index[:g_real] = idx
    graph_index[g_real:] = -1
    graph_ptr = new("graph_ptr")
    graph_ptr[:] = prog.graph_ptr
    return PaddedArrays(
        fields=fields, node_counts=node_counts, edge_counts=edge_counts, node_ptr=node_ptr,
        edge_ptr=edge_ptr, batch=batch, node_mask=node_mask, edge_mask=edge_mask,
        graph_mask=graph_mask, graph_index=graph_index, edge_inc=edge_inc,
        num_real=(g_real, n_real, e_real), shape=(n_node, n_edge, n_graph), layout=layout,
        buffer=buf, offsets=prog.offsets, graph_ptr=graph_ptr,
    )


def _padding_positions(real: np.ndarray, n_pad: int, cutoff: float | None) -> np.ndarray:
    """Positions of the ``n_pad`` padding nodes next to the real positions ``real`` ``[k, ...]``:
    `graphbatch._padlayout.padding_positions` spaced by ``cutoff`` or, without one, by
    `graphbatch._padlayout.auto_spacing` of the real positions -- computed from the per-axis
    minima and maxima alone (the same values: both only use those; NaN and infinities reach
    them), taken over a transposed copy (NumPy reduces ``[k, 3]`` along axis 0 ~30x slower)."""
    k = real.shape[0]
    axes = real.reshape(k, int(np.prod(real.shape[1:], dtype=np.int64))).T.copy()  # [D, k]
    if k:
        hi = axes.max(axis=1).astype(np.float64)
        lo = axes.min(axis=1).astype(np.float64) if cutoff is None else None
    else:
        hi = np.zeros(axes.shape[0])
        lo = None
    if cutoff is not None:
        spacing = cutoff
    else:
        spacing = auto_spacing(np.stack([lo, hi]) if k else axes.T)
    return padding_positions(hi, n_pad, spacing)
