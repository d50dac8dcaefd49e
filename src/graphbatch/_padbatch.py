"""The NumPy batch reader: concatenated graph arrays + an index list + a padded shape -> one
padded batch (NumPy arrays, masks, ``batch``/``ptr``, ``graph_index``) in one buffer.

Pure NumPy (no torch, no jax). Every collation path pads through it or through the steps it
is made of (`graphbatch._padkernel`): the store batch paths of both adapters (the torch adapter
wraps the result with ``torch.from_numpy``, zero-copy, into the same PyG ``Batch`` as
``graphbatch.torch.collate``; the JAX adapter wraps it into a ``jraph.GraphsTuple``) and the JAX
`graphbatch.jax.collate` of in-memory graphs (concatenated into a `PackedGraphs` first).

`pad_batch` runs the kernel's steps in order: (1) the real counts, checked against the padding
reservation (`_padkernel.check_fits`); (2) the shape's cached `_Program` and the batch's one
buffer; (3) rows per graph slot and their pointers (`_padkernel.slot_counts`); (4) edges
gathered, range-checked and shifted (`_padkernel.check_local_edge_index`,
`_padkernel.shift_edge_index`), padding edges wired (`_padlayout.padding_edge_index`); (5) every
field's real rows gathered and its padding rows filled (`_padkernel.padding_node_positions` for
the positions of a geometric batch); (6) ``batch``, masks and ``graph_index``
(`_padkernel.fill_structure`). What this module adds to the kernel is the gather and the memory:

Source: `PackedGraphs`, ``G`` graphs stored back to back (an on-disk store's memory-mapped
arrays, or arrays in memory). Reading a batch is vectorised: the batch's graph indices give row
ranges through the offsets, the ranges become one row-index array per level, and each array is
gathered with one fancy index, written straight into the padded output. Random graphs are cold
in the CPU caches: before gathering, the first row of every graph is read from each large array
in one short gather per array (`TOUCH_BYTES`), so the misses overlap instead of stalling the
gathers one graph at a time. What depends only on the padded shape and the options (buffer
layout, per-field gather plan) is a `_Program` made once per shape and cached on the source.

Layouts (`graphbatch._padkernel` states their invariants) of a batch of shape ``(n_node, n_edge,
n_graph)`` holding ``Gr`` real graphs with ``N`` nodes and ``E`` edges -- real graphs first, in
the given order, padding after them:

* ``"torch"``: the last graph slot ``n_graph - 1`` owns all ``n_node - N >= 1`` padding nodes and
  all ``n_edge - E`` padding edges (so ``batch.max() + 1 == n_graph``); slots ``Gr .. n_graph-2``
  are empty padding graphs.
* ``"jraph"``: slot ``Gr`` (the first padding graph) owns them, the rest are empty
  (``jraph.pad_with_graphs``).

Padding edges connect padding nodes only (`graphbatch._padlayout.padding_edge_index`); with a
``cutoff`` padding positions are placed by `graphbatch._padlayout.padding_positions`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from ._errors import InputError, InputTypeError
from ._padkernel import (
    LAYOUTS,
    check_fits,
    check_local_edge_index,
    edge_index_bounds,
    fill_padding_rows,
    fill_structure,
    padded_shape,
    padding_node_positions,
    padding_owner,
    shift_edge_index,
    slot_counts,
)
from ._padlayout import check_cutoff, padding_edge_index

__all__ = ["LAYOUTS", "PackedGraphs", "PaddedArrays", "buffer_layout", "pad_batch", "row_ranges"]


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
    _rows: dict[str, np.ndarray | None] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _layouts: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _max_nodes: int | None = field(default=None, init=False, repr=False, compare=False)

    def __len__(self) -> int:
        return int(self.n_node.shape[0])

    def level_of(self) -> dict[str, str]:
        """``{field: level}`` in storage order (node, then edge, then graph fields)."""
        return {
            **{k: "node" for k in self.node},
            **{k: "edge" for k in self.edge},
            **{k: "graph" for k in self.graph},
        }

    def max_nodes(self) -> int:
        """The largest node count of one graph (0 without graphs), computed once."""
        n = self._max_nodes
        if n is None:
            n = int(self.n_node.max(initial=0))
            object.__setattr__(self, "_max_nodes", n)
        return n

    def row_views(self) -> dict[str, np.ndarray | None]:
        """``{name: one-item-per-row view}`` of every array, made once: each row as one opaque
        ``void`` item of the row's bytes, so a gather copies whole rows with alignment 1
        (``edge_index`` ``[2, E]``: each entry one item). (A store's memory maps
        start at arbitrary file offsets: a ``float32`` array after a ``uint8`` one is not
        4-byte aligned, and NumPy gathers unaligned arrays element by element -- 10-20x
        slower -- and ``np.take`` even copies the whole unaligned array first.) ``None`` for
        an array that is not C-contiguous (gathered by plain fancy indexing). Checks once that
        every array has the rows the offsets address (``ValueError``)."""
        views = self._rows
        if views is None:
            g = len(self)
            totals = {
                "node": int(self.node_offsets[-1]),
                "edge": int(self.edge_offsets[-1]),
                "graph": g,
            }
            if self.node_offsets.shape != (g + 1,) or self.edge_offsets.shape != (g + 1,):
                raise InputError(
                    f"offsets of shape {self.node_offsets.shape} and "
                    f"{self.edge_offsets.shape} for {g} graphs (need {g + 1})"
                )
            ei = self.edge_index
            if ei.ndim != 2 or ei.shape[0] != 2 or ei.shape[1] < totals["edge"]:
                raise InputError(f"edge_index of shape {ei.shape} for {totals['edge']} edges")
            views = {"edge_index": _item_view(ei)}
            for level in ("node", "edge", "graph"):
                for name, arr in getattr(self, level).items():
                    if arr.shape[0] < totals[level]:
                        raise InputError(
                            f"{level} field {name!r} has {arr.shape[0]} rows, the "
                            f"offsets address {totals[level]}"
                        )
                    views[name] = _row_view(arr)
            object.__setattr__(self, "_rows", views)
        return views


def _row_view(arr: np.ndarray) -> np.ndarray | None:
    """``arr`` ``[R, ...]`` as a 1-D array of ``R`` void items of one row's bytes each (a view),
    or ``None`` when that view does not exist (not C-contiguous, zero-byte rows)."""
    if not arr.flags.c_contiguous or arr.ndim == 0:
        return None
    row_bytes = arr.dtype.itemsize * math.prod(arr.shape[1:])
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


#: Which rows a gather copies: one slice per graph (long runs) or a row-index array.
_RowSelection = list[slice] | np.ndarray


def _rows(starts: np.ndarray, counts: np.ndarray, first: np.ndarray, total: int) -> _RowSelection:
    """Where the rows of graphs with first rows ``starts`` and ``counts`` rows are: a list of
    one slice per graph with rows (long runs, see `RUN_ROWS`) or the row-index array
    (`row_ranges`)."""
    if total and total >= RUN_ROWS * starts.shape[0]:
        return [
            slice(a, a + n) for a, n in zip(starts.tolist(), counts.tolist(), strict=False) if n
        ]
    return row_ranges(starts, counts, first, total)


def _take_rows(
    arr: np.ndarray,
    view: np.ndarray | None,
    rows: _RowSelection,
    out: np.ndarray,
    axis: int = 0,
    same: bool | None = None,
) -> None:
    """``out[:] = arr[rows]`` along ``axis`` (0, or 1 for ``edge_index``), ``rows`` from `_rows`
    (in range), copying whole rows through ``view`` (`PackedGraphs.row_views`) when ``out`` has
    ``arr``'s dtype and is C-contiguous (``same``: that condition, when the caller knows it);
    otherwise cast as an assignment does."""
    if out.size == 0:
        return
    if same is None:
        same = view is not None and out.dtype == arr.dtype and out.flags.c_contiguous
    if same:
        assert view is not None  # `same` implies a row view
        dst = out.view(view.dtype) if axis else out.reshape(-1).view(np.uint8).view(view.dtype)
        if isinstance(rows, list):
            np.concatenate([view[:, r] if axis else view[r] for r in rows], axis=axis, out=dst)
        else:
            np.take(view, rows, axis=axis, out=dst, mode="clip")
    elif isinstance(rows, list):
        np.concatenate(
            [arr[:, r] if axis else arr[r] for r in rows], axis=axis, out=out, casting="unsafe"
        )
    elif view is not None:
        tmp = np.take(view, rows, axis=axis, mode="clip")
        out[...] = tmp.view(arr.dtype) if axis else tmp.view(arr.dtype).reshape(out.shape)
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
_STRUCT = (
    ("node_counts", "graph", np.int64),
    ("edge_counts", "graph", np.int64),
    ("node_ptr", "graph+1", np.int64),
    ("edge_ptr", "graph+1", np.int64),
    ("batch", "node", np.int64),
    ("node_mask", "node", np.bool_),
    ("edge_mask", "edge", np.bool_),
    ("graph_mask", "graph", np.bool_),
    ("graph_index", "graph", np.int64),
    ("edge_inc", "graph", np.int64),
    ("graph_ptr", "graph+1", np.int64),
)


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

    def __init__(
        self,
        source: PackedGraphs,
        shape: tuple[int, int, int],
        dtypes: Mapping[str, DTypeLike],
        index_dtype: DTypeLike,
    ) -> None:
        n = {"node": shape[0], "edge": shape[1], "graph": shape[2], "graph+1": shape[2] + 1}
        source.row_views()  # checks once that every array has the rows the offsets address
        specs: list[tuple[str, tuple[int, ...], np.dtype]] = [
            ("edge_index", (2, shape[1]), np.dtype(index_dtype))
        ]
        for level in ("node", "edge", "graph"):
            for name, arr in getattr(source, level).items():
                specs.append(
                    (name, (n[level], *arr.shape[1:]), np.dtype(dtypes.get(name, arr.dtype)))
                )
        specs += [(name, (n[level],), np.dtype(dt)) for name, level, dt in _STRUCT]
        self.entries = {}
        at = 0
        for name, shp, dt in specs:
            nbytes = dt.itemsize * math.prod(shp)
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
    (``fields``), the arrays to touch before gathering (``touch``), the edge index's range-check
    bounds (``ei_bounds``, `graphbatch._padkernel.edge_index_bounds`), and constant structure
    rows (``graph_ptr``, ``arange(n_graph + 1)``)."""

    __slots__ = (
        "entries",
        "nbytes",
        "offsets",
        "fields",
        "touch",
        "ei_view",
        "ei_bounds",
        "geometric",
        "graph_ptr",
    )

    def __init__(
        self,
        source: PackedGraphs,
        shape: tuple[int, int, int],
        dtypes: Mapping[str, DTypeLike],
        index_dtype: DTypeLike,
        layout: str,
        position_key: str,
    ) -> None:
        lay = _Layout(source, shape, dtypes, index_dtype)
        self.entries, self.nbytes, self.offsets = lay.entries, lay.nbytes, lay.offsets
        views = source.row_views()
        # fields in storage order: (name, level number, array, row view or None, whether rows
        # are copied as whole items (same dtype), offset, shape, dtype, is the position field)
        self.fields = []
        self.touch = []
        ei = source.edge_index
        # how the stored indices are range-checked (`_padkernel.edge_index_bounds`)
        self.ei_bounds = edge_index_bounds(ei.dtype, source.max_nodes())
        self.ei_view = views["edge_index"]
        if self.ei_view is not None and ei.shape[1] and ei.nbytes >= TOUCH_BYTES:
            self.touch.append((self.ei_view, 1, 1))
        for lv, level in enumerate(("node", "edge", "graph")):
            for name, arr in getattr(source, level).items():
                at, _, shp, dt = self.entries[name]
                view = views[name]
                same = view is not None and dt == arr.dtype
                self.fields.append(
                    (
                        name,
                        lv,
                        arr,
                        view,
                        same,
                        at,
                        shp,
                        dt,
                        level == "node" and name == position_key,
                    )
                )
                if (
                    view is not None
                    and level != "graph"
                    and arr.shape[0]
                    and arr.nbytes >= TOUCH_BYTES
                ):
                    self.touch.append((view, lv, 0))
        pos = source.node.get(position_key)
        # padding geometry by default: torch layout with float node positions (as
        # `graphbatch.torch.collate` does); with a cutoff always
        self.geometric = (
            layout == "torch"
            and pos is not None
            and np.issubdtype(np.dtype(dtypes.get(position_key, pos.dtype)), np.floating)
        )
        self.graph_ptr = np.arange(shape[2] + 1, dtype=np.int64)
        self.graph_ptr.flags.writeable = False


def _program(
    source: PackedGraphs,
    shape: tuple[int, int, int],
    dtypes: Mapping[str, DTypeLike],
    index_dtype: DTypeLike,
    layout: str,
    position_key: str,
) -> _Program:
    """The `_Program` for ``shape`` and these options, cached per source (a few distinct shapes
    per plan; fixed-shape strategies have one)."""
    cache = source._layouts
    try:
        key = (shape, index_dtype, layout, position_key, tuple(dtypes.items()))
        prog = cache.get(key)
    except TypeError:  # unhashable dtype spellings
        key = (
            shape,
            np.dtype(index_dtype).str,
            layout,
            position_key,
            tuple(sorted((k, np.dtype(v).str) for k, v in dtypes.items())),
        )
        prog = cache.get(key)
    if prog is None:
        if len(cache) >= 256:
            cache.clear()
        prog = cache[key] = _Program(source, shape, dtypes, index_dtype, layout, position_key)
    return prog


def buffer_layout(
    source: PackedGraphs,
    shape: Any,
    dtypes: Mapping[str, np.dtype] | None = None,
    index_dtype: DTypeLike = np.int64,
) -> _Layout:
    """Where `pad_batch` puts each array of a batch of ``shape`` from ``source`` with these
    ``dtypes``/``index_dtype``: ``.entries`` ``{name: (start, end, shape, dtype)}`` (byte
    range in the buffer; fields by name, structure arrays by their `PaddedArrays` attribute
    name) and ``.nbytes``, the buffer's size. Only the fields' trailing shapes and dtypes of
    ``source`` matter (zero-row arrays do). Bytes grow with each of ``n_node``, ``n_edge``,
    ``n_graph``."""
    return _Layout(source, padded_shape(shape), dtypes or {}, index_dtype)


def row_ranges(
    starts: np.ndarray,
    lengths: np.ndarray,
    first: np.ndarray | None = None,
    total: int | None = None,
) -> np.ndarray:
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


def _index(index: ArrayLike, n: int) -> np.ndarray:
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
    index: ArrayLike,
    shape: Any,
    *,
    layout: str = "torch",
    cutoff: float | None = None,
    position_key: str = "pos",
    dtypes: Mapping[str, np.dtype] | None = None,
    index_dtype: DTypeLike = np.int64,
    pad: Mapping[str, ArrayLike] | None = None,
    allocate: Callable[[int], np.ndarray] | None = None,
) -> PaddedArrays:
    """Gather graphs ``index`` of ``source`` into one batch padded to ``shape`` exactly.

    Args:
      source: the graphs back to back (`PackedGraphs`).
      index: 1-D integer array, the graphs of the batch in batch order (dataset indices).
      shape: ``(n_node, n_edge, n_graph)`` or a `graphbatch.Budget`; the real content must
        leave the padding reservation free (nodes <= n_node - 1, edges <= n_edge, graphs <=
        n_graph - 1).
      layout: ``"torch"`` or ``"jraph"``: which slot owns the padding (module docstring).
      cutoff: a distance: padding nodes get positions (field ``position_key``) farther than
        ``2 * cutoff`` from real nodes and each other, and padding edges join distinct padding
        nodes where there are >= 2. In the torch layout the same geometry is used by default
        whenever ``position_key`` is a float node field, spaced by
        `graphbatch._padlayout.auto_spacing` (as `graphbatch.torch.collate`).
      position_key: the node field holding positions.
      dtypes: output dtype per field (default: the stored dtype).
      index_dtype: dtype of the output ``edge_index``.
      pad: pad value per field (default 0).
      allocate: ``allocate(nbytes)`` returns the batch's buffer: a new, writable, C-contiguous
        1-D ``uint8`` array of at least ``nbytes`` (e.g. in shared memory); default
        ``np.empty``. Buffers are never reused by the kernel.

    Returns:
      `PaddedArrays`: every array a view into one new buffer (``.buffer``; ``.offsets``: byte
      offset of each array, fields by name, structure arrays by attribute name), so a batch
      crosses a process boundary as one block; the buffer lives as long as any of its arrays.

    Raises:
      IndexError: for an index outside ``source``.
      ValueError: when the graphs do not fit ``shape``, for an unknown ``layout``, a ``cutoff``
        without positions, or a stored edge index outside its graph (damaged data: never
        returned as a batch).
      TypeError: for non-integer indices or edge indices, or a bad ``allocate`` result.
    """
    n_node, n_edge, n_graph = shape = padded_shape(shape)
    if layout not in LAYOUTS:
        raise InputError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    idx = _index(index, len(source))
    cutoff = check_cutoff(cutoff)
    dtypes = dtypes or {}
    if cutoff is not None and position_key not in source.node:
        raise InputError(
            f"cutoff needs node positions: no node-level field {position_key!r} (set position_key)"
        )
    # 1. the real content, checked against the padding reservation
    nn, ne = source.n_node[idx], source.n_edge[idx]
    num_real = g_real, n_real, e_real = int(idx.shape[0]), int(nn.sum()), int(ne.sum())
    check_fits(num_real, shape, f" (dataset indices {idx[:8].tolist()}...)")
    # 2. what depends on the shape only (cached), and the batch's one buffer
    prog = _program(source, shape, dtypes, index_dtype, layout, position_key)
    starts = (source.node_offsets[idx], source.edge_offsets[idx])
    _touch_first_rows(prog, starts, g_real)
    buf = _new_buffer(prog.nbytes, allocate)
    out = {name: np.ndarray(shp, dt, buf, at) for name, (at, _, shp, dt) in prog.entries.items()}
    # 3. the layout: rows per graph slot and their pointers (`_padkernel.slot_counts`)
    owner = padding_owner(layout, g_real, n_graph)
    slot_counts(
        nn, n_node - n_real, n_graph, owner, counts_out=out["node_counts"], ptr_out=out["node_ptr"]
    )
    slot_counts(
        ne, n_edge - e_real, n_graph, owner, counts_out=out["edge_counts"], ptr_out=out["edge_ptr"]
    )
    node_first, edge_first = out["node_ptr"][:g_real], out["edge_ptr"][:g_real]
    rows = (_rows(starts[0], nn, node_first, n_real), _rows(starts[1], ne, edge_first, e_real), idx)
    geometric = cutoff is not None or prog.geometric
    # 4. edges: gathered, range-checked, shifted to batch-global indices; padding edges wired
    _gather_edge_index(
        source, prog, rows[1], e_real, idx, nn, ne, node_first, edge_first, out["edge_index"]
    )
    padding_edge_index(
        n_real, n_node, n_edge - e_real, spread=geometric, out=out["edge_index"][:, e_real:]
    )
    out["edge_inc"][:g_real] = node_first
    out["edge_inc"][g_real:] = 0
    # 5. every field: real rows gathered, padding rows filled
    fields = {"edge_index": out["edge_index"]}
    fields.update(_gather_fields(prog, out, rows, num_real, geometric, cutoff, pad or {}))
    # 6. batch, masks, graph_index
    fill_structure(shape, num_real, out["node_counts"], idx, out=out)
    out["graph_ptr"][:] = prog.graph_ptr
    return PaddedArrays(
        fields=fields,
        node_counts=out["node_counts"],
        edge_counts=out["edge_counts"],
        node_ptr=out["node_ptr"],
        edge_ptr=out["edge_ptr"],
        batch=out["batch"],
        node_mask=out["node_mask"],
        edge_mask=out["edge_mask"],
        graph_mask=out["graph_mask"],
        graph_index=out["graph_index"],
        edge_inc=out["edge_inc"],
        num_real=num_real,
        shape=shape,
        layout=layout,
        buffer=buf,
        offsets=prog.offsets,
        graph_ptr=out["graph_ptr"],
    )


def _touch_first_rows(prog: _Program, starts: tuple[np.ndarray, np.ndarray], g_real: int) -> None:
    """Read the first row of every graph in each large array, one short gather per array: the
    loads are independent, so the CPU overlaps their cache and TLB misses (a random graph's rows
    are cold); the gathers then find them cached instead of waiting for one miss per graph per
    array in turn. Results are discarded."""
    if g_real:
        for view, lv, axis in prog.touch:
            view.take(starts[lv], axis=axis, mode="clip")


def _new_buffer(nbytes: int, allocate: Callable[[int], np.ndarray] | None) -> np.ndarray:
    """The batch's one buffer: ``np.empty`` or ``allocate(nbytes)``, checked."""
    buf = np.empty(nbytes, dtype=np.uint8) if allocate is None else allocate(nbytes)
    if not (
        isinstance(buf, np.ndarray)
        and buf.dtype == np.uint8
        and buf.ndim == 1
        and buf.shape[0] >= nbytes
        and buf.flags.c_contiguous
        and buf.flags.writeable
    ):
        raise InputTypeError(
            f"allocate({nbytes}) must return a writable 1-D uint8 array of at least {nbytes} bytes"
        )
    return buf


def _gather_edge_index(
    source: PackedGraphs,
    prog: _Program,
    edge_rows: _RowSelection,
    e_real: int,
    idx: np.ndarray,
    nn: np.ndarray,
    ne: np.ndarray,
    node_first: np.ndarray,
    edge_first: np.ndarray,
    out: np.ndarray,
) -> None:
    """The ``e_real`` real edges of ``out`` (the batch's ``edge_index``): local indices
    gathered, range-checked against each graph's node count
    (`_padkernel.check_local_edge_index`), then shifted by each graph's first node
    (`_padkernel.shift_edge_index`)."""
    if not e_real:
        return
    local = np.empty((2, e_real), dtype=source.edge_index.dtype)
    _take_rows(source.edge_index, prog.ei_view, edge_rows, local, axis=1)
    check_local_edge_index(local, nn, ne, edge_first, idx, prog.ei_bounds)
    shift_edge_index(local, node_first, ne, out[:, :e_real])


def _gather_fields(
    prog: _Program,
    out: dict[str, np.ndarray],
    rows: tuple[_RowSelection, _RowSelection, np.ndarray],
    num_real: tuple[int, int, int],
    geometric: bool,
    cutoff: float | None,
    pad: Mapping[str, ArrayLike],
) -> dict[str, np.ndarray]:
    """Every node/edge/graph field: real rows gathered into its place in the buffer, padding
    rows filled with its pad value, or -- the position field of a geometric batch -- with
    `_padkernel.padding_node_positions`. Returns ``{name: array}`` in storage order."""
    fields = {}
    real_n = (num_real[1], num_real[2], num_real[0])
    for name, lv, arr, view, same, _at, shp, _dt, is_pos in prog.fields:
        a = out[name]
        k = real_n[lv]
        _take_rows(arr, view, rows[lv], a[:k], same=same)
        if geometric and is_pos:
            a[k:] = padding_node_positions(a[:k], shp[0] - k, cutoff).reshape(a[k:].shape)
        else:
            fill_padding_rows(a, k, pad.get(name, 0))
        fields[name] = a
    return fields
