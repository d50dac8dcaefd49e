"""Graphs stored back to back (`PackedGraphs`) and the row copies a batch is gathered with.

A source holds ``G`` graphs as concatenated arrays; graph ``g``'s rows of a level are
``offsets[g]:offsets[g+1]``. `take_rows` copies a selection of rows -- one slice per graph, or a
row-index array from `row_ranges` -- into an output array, through one-item-per-row ``void``
views (`PackedGraphs.row_views`) so that unaligned memory maps gather at full speed. Pure NumPy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ._errors import InputError

__all__ = ["PackedGraphs", "RowSelection", "row_ranges", "take_rows"]


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


#: Which rows a gather copies: one slice per graph (long runs) or a row-index array.
RowSelection = list[slice] | np.ndarray


def take_rows(
    arr: np.ndarray,
    view: np.ndarray | None,
    rows: RowSelection,
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
