"""Where each array of a padded batch lies in the batch's one buffer, and that buffer.

`PaddedArrays` is one padded batch; every array in it is a view into one ``uint8`` buffer, at a
byte offset that is a multiple of `ALIGN` (`BufferLayout`, made by `buffer_layout`), so a batch
crosses a process boundary as one block. `new_buffer` makes (or checks a caller's) buffer.
Pure NumPy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from ._errors import InputTypeError
from ._packed import PackedGraphs
from ._padkernel import padded_shape

__all__ = ["ALIGN", "BufferLayout", "PaddedArrays", "buffer_layout", "new_buffer"]


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


class BufferLayout:
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


def buffer_layout(
    source: PackedGraphs,
    shape: Any,
    dtypes: Mapping[str, np.dtype] | None = None,
    index_dtype: DTypeLike = np.int64,
) -> BufferLayout:
    """Where `pad_batch` puts each array of a batch of ``shape`` from ``source`` with these
    ``dtypes``/``index_dtype``: ``.entries`` ``{name: (start, end, shape, dtype)}`` (byte
    range in the buffer; fields by name, structure arrays by their `PaddedArrays` attribute
    name) and ``.nbytes``, the buffer's size. Only the fields' trailing shapes and dtypes of
    ``source`` matter (zero-row arrays do). Bytes grow with each of ``n_node``, ``n_edge``,
    ``n_graph``."""
    return BufferLayout(source, padded_shape(shape), dtypes or {}, index_dtype)


def new_buffer(nbytes: int, allocate: Callable[[int], np.ndarray] | None) -> np.ndarray:
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
