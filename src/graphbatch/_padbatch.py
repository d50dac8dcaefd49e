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

The pieces: the source and its row copies are `graphbatch._packed` (`PackedGraphs`,
`row_ranges`), the batch and its buffer layout `graphbatch._padbuffer` (`PaddedArrays`,
`buffer_layout`); this module re-exports them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from ._errors import InputError, InputTypeError
from ._packed import PackedGraphs, RowSelection, row_ranges, take_rows
from ._padbuffer import BufferLayout, PaddedArrays, buffer_layout, new_buffer
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


#: Mean rows per graph from which a level is copied run by run (one ``memcpy`` per graph,
#: `np.concatenate` of slices) instead of row by row (`np.take` of a row-index array): long
#: runs (QM9 radius graphs: ~300 edges per graph) copy ~2x faster as runs; short ones (~20
#: nodes) pay more for a Python slice per graph than they save.
RUN_ROWS = 64


def _rows(starts: np.ndarray, counts: np.ndarray, first: np.ndarray, total: int) -> RowSelection:
    """Where the rows of graphs with first rows ``starts`` and ``counts`` rows are: a list of
    one slice per graph with rows (long runs, see `RUN_ROWS`) or the row-index array
    (`row_ranges`)."""
    if total and total >= RUN_ROWS * starts.shape[0]:
        return [
            slice(a, a + n) for a, n in zip(starts.tolist(), counts.tolist(), strict=False) if n
        ]
    return row_ranges(starts, counts, first, total)


#: Arrays of at least this many bytes are "touched" before a batch is gathered (see
#: `_Program.touch`); smaller ones stay in the CPU caches anyway.
TOUCH_BYTES = 1 << 22


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
        lay = BufferLayout(source, shape, dtypes, index_dtype)
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


def _index(index: ArrayLike, n: int) -> np.ndarray:
    """``index`` as a 1-D int64 array of graph indices, each in ``[0, n)`` (``IndexError``)."""
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
    shape = padded_shape(shape)
    if layout not in LAYOUTS:
        raise InputError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    idx = _index(index, len(source))
    cutoff = _checked_cutoff(source, cutoff, position_key)
    # 1. the real content, checked against the padding reservation
    nn, ne = source.n_node[idx], source.n_edge[idx]
    num_real = g_real, n_real, e_real = int(idx.shape[0]), int(nn.sum()), int(ne.sum())
    check_fits(num_real, shape, f" (dataset indices {idx[:8].tolist()}...)")
    # 2. what depends on the shape only (cached), and the batch's one buffer
    prog = _program(source, shape, dtypes or {}, index_dtype, layout, position_key)
    starts = (source.node_offsets[idx], source.edge_offsets[idx])
    _touch_first_rows(prog, starts, g_real)
    buf = new_buffer(prog.nbytes, allocate)
    out = {name: np.ndarray(shp, dt, buf, at) for name, (at, _, shp, dt) in prog.entries.items()}
    # 3. the layout: rows per graph slot and their pointers (`_padkernel.slot_counts`)
    _fill_slot_counts(out, shape, num_real, padding_owner(layout, g_real, shape[2]), nn, ne)
    node_first, edge_first = out["node_ptr"][:g_real], out["edge_ptr"][:g_real]
    rows = (_rows(starts[0], nn, node_first, n_real), _rows(starts[1], ne, edge_first, e_real), idx)
    geometric = cutoff is not None or prog.geometric
    # 4. edges: gathered, range-checked, shifted to batch-global indices; padding edges wired
    _gather_edge_index(
        source, prog, rows[1], e_real, idx, nn, ne, node_first, edge_first, out["edge_index"]
    )
    _fill_padding_edges(out, shape, num_real, spread=geometric)
    # 5. every field: real rows gathered, padding rows filled
    fields = {"edge_index": out["edge_index"]}
    fields.update(_gather_fields(prog, out, rows, num_real, geometric, cutoff, pad or {}))
    # 6. batch, masks, graph_index
    fill_structure(shape, num_real, out["node_counts"], idx, out=out)
    out["graph_ptr"][:] = prog.graph_ptr
    return _padded_arrays(out, fields, num_real, shape, layout, buf, prog.offsets)


def _checked_cutoff(source: PackedGraphs, cutoff: float | None, position_key: str) -> float | None:
    """``cutoff`` checked (`_padlayout.check_cutoff`); a cutoff needs the node field
    ``position_key``."""
    cutoff = check_cutoff(cutoff)
    if cutoff is not None and position_key not in source.node:
        raise InputError(
            f"cutoff needs node positions: no node-level field {position_key!r} (set position_key)"
        )
    return cutoff


def _fill_slot_counts(
    out: dict[str, np.ndarray],
    shape: tuple[int, int, int],
    num_real: tuple[int, int, int],
    owner: int,
    nn: np.ndarray,
    ne: np.ndarray,
) -> None:
    """Step 3: nodes and edges per graph slot (the real graphs' ``nn``/``ne``, all padding in
    slot ``owner``) and their prefix sums, into ``out``'s ``node_counts``/``node_ptr`` and
    ``edge_counts``/``edge_ptr`` (`_padkernel.slot_counts`)."""
    n_node, n_edge, n_graph = shape
    _, n_real, e_real = num_real
    slot_counts(
        nn, n_node - n_real, n_graph, owner, counts_out=out["node_counts"], ptr_out=out["node_ptr"]
    )
    slot_counts(
        ne, n_edge - e_real, n_graph, owner, counts_out=out["edge_counts"], ptr_out=out["edge_ptr"]
    )


def _fill_padding_edges(
    out: dict[str, np.ndarray],
    shape: tuple[int, int, int],
    num_real: tuple[int, int, int],
    spread: bool,
) -> None:
    """The padding edges of ``out["edge_index"]`` (joining padding nodes only,
    `_padlayout.padding_edge_index`; ``spread`` over distinct nodes in a geometric batch) and
    ``edge_inc``: each real graph's first node, 0 for padding graphs."""
    g_real, n_real, e_real = num_real
    padding_edge_index(
        n_real, shape[0], shape[1] - e_real, spread=spread, out=out["edge_index"][:, e_real:]
    )
    out["edge_inc"][:g_real] = out["node_ptr"][:g_real]
    out["edge_inc"][g_real:] = 0


def _padded_arrays(
    out: dict[str, np.ndarray],
    fields: dict[str, np.ndarray],
    num_real: tuple[int, int, int],
    shape: tuple[int, int, int],
    layout: str,
    buf: np.ndarray,
    offsets: Mapping[str, int],
) -> PaddedArrays:
    """The filled views ``out`` of buffer ``buf`` as a `PaddedArrays`."""
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
        offsets=offsets,
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


def _gather_edge_index(
    source: PackedGraphs,
    prog: _Program,
    edge_rows: RowSelection,
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
    take_rows(source.edge_index, prog.ei_view, edge_rows, local, axis=1)
    check_local_edge_index(local, nn, ne, edge_first, idx, prog.ei_bounds)
    shift_edge_index(local, node_first, ne, out[:, :e_real])


def _gather_fields(
    prog: _Program,
    out: dict[str, np.ndarray],
    rows: tuple[RowSelection, RowSelection, np.ndarray],
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
        take_rows(arr, view, rows[lv], a[:k], same=same)
        if geometric and is_pos:
            a[k:] = padding_node_positions(a[:k], shp[0] - k, cutoff).reshape(a[k:].shape)
        else:
            fill_padding_rows(a, k, pad.get(name, 0))
        fields[name] = a
    return fields
