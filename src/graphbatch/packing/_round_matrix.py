"""The round matrix of the equal-cardinality partition kernels (`_partition`): the graphs
sorted by cost, descending, ties by index (`descending_order`: a counting sort chunk by chunk
for small integral costs), cut into rounds of ``B`` consecutive graphs (`round_matrix`). Costs
are integers (the ``kk`` cost model: quantised once), so every comparison is exact."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from numpy.typing import ArrayLike

from .._errors import InputError
from . import _memory
from ._assign import _sort_chunk
from ._memory import index_dtype

__all__ = ["round_matrix", "descending_order"]


def _integer_costs(costs: ArrayLike) -> np.ndarray:
    """``costs`` as an int64 array; `InputError` for non-integer values (quantise first)."""
    arr = np.asarray(costs)
    if arr.dtype.kind not in "iu" and arr.size and not np.array_equal(arr, np.floor(arr)):
        raise InputError(
            "partition costs must be integers (quantise a real cost model first: planners._cost)"
        )
    return arr.astype(np.int64, copy=False)


def round_matrix(costs: np.ndarray, num_batches: int) -> tuple[np.ndarray, np.ndarray]:
    """Graphs sorted by cost (descending, ties by index) cut into rounds of ``num_batches``.

    Returns ``(value, ident)`` of shape ``[R, B]``: ``ident`` holds graph indices (int32 when
    there are fewer than 2**31 graphs, else int64), or ``-1`` for the zero-cost dummies that fill
    the last round; ``value`` (int64) their costs (integers, `_integer_costs`).
    """
    costs = _integer_costs(costs)
    n = costs.shape[0]
    b = int(num_batches)
    if b < 1:
        raise InputError(f"num_batches must be >= 1, got {num_batches}")
    r = -(-n // b)
    ident = np.full(r * b, -1, dtype=index_dtype(n))
    value = np.zeros(r * b, dtype=np.int64)
    counts = _sort_by_count(costs, ident[:n])
    if counts is not None:  # the sorted costs are the keys, each repeated by its count
        _repeat_into(
            value, (counts.shape[0] - 1) - np.arange(counts.shape[0], dtype=np.int64), counts
        )
    else:
        step = _memory.PARTITION_CHUNK
        for s0 in range(0, n, step):  # chunk by chunk: no whole-array temporary
            value[s0 : min(n, s0 + step)] = costs[ident[s0 : min(n, s0 + step)]]
    return value.reshape(r, b), ident.reshape(r, b)


def _repeat_into(out: np.ndarray, values: np.ndarray, counts: np.ndarray) -> None:
    """``out[:counts.sum()] = np.repeat(values, counts)`` chunk by chunk (no temporary of the
    whole repeat)."""
    ends = np.cumsum(counts)
    n = int(ends[-1]) if ends.shape[0] else 0
    for s0 in range(0, n, _memory.PARTITION_CHUNK):
        s1 = min(n, s0 + _memory.PARTITION_CHUNK)
        k0 = int(np.searchsorted(ends, s0, side="right"))  # the value at position s0
        k1 = int(np.searchsorted(ends, s1, side="left"))  # the value at position s1 - 1
        cnt = counts[k0 : k1 + 1].copy()
        cnt[0] -= s0 - (int(ends[k0]) - int(counts[k0]))
        cnt[-1] -= int(ends[k1]) - s1
        out[s0:s1] = np.repeat(values[k0 : k1 + 1], cnt)


#: Largest integral cost `descending_order` counts by value (else a comparison sort).
_COUNTING_MAX = 1 << 20


def descending_order(costs: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``np.argsort(-costs, kind="stable")`` (indices, int32 below 2**31 graphs): costs in
    descending order, ties by index. Small non-negative integral costs (the linear model on
    counts) are placed by a counting sort chunk by chunk (no per-graph int64 temporaries).
    ``out`` (an int array of ``len(costs)``) receives the result when given."""
    n = costs.shape[0]
    if out is None:
        out = np.empty(n, index_dtype(n))
    _sort_by_count(costs, out)
    return out


def _sort_by_count(costs: np.ndarray, out: np.ndarray) -> np.ndarray | None:
    """`descending_order` into ``out``; returns the counting sort's counts (``counts[k]``
    graphs cost ``top - k``, ``top = len(counts) - 1``) where it placed the graphs by value,
    else ``None`` (a comparison sort, or no graphs)."""
    n = costs.shape[0]
    if n == 0:
        return None
    lo, hi = costs.min(), costs.max()
    integral = (
        lo >= 0
        and hi <= _COUNTING_MAX
        and (
            costs.dtype.kind in "iu"
            or _whole_numbers(
                costs[s0 : s0 + _memory.PARTITION_CHUNK]
                for s0 in range(0, n, _memory.PARTITION_CHUNK)
            )
        )
    )
    if not integral:
        out[:] = np.argsort(-costs, kind="stable")
        return None
    top = int(hi)
    counts = np.zeros(top + 1, np.int64)
    for s0 in range(0, n, _memory.PARTITION_CHUNK):
        counts += np.bincount(
            (top - costs[s0 : s0 + _memory.PARTITION_CHUNK]).astype(np.int64), minlength=top + 1
        )
    kdt = np.uint16 if top < 2**16 else np.int64
    ptr = np.zeros(top + 1, np.int64)  # next free position of each key (key 0 = largest cost)
    np.cumsum(counts[:-1], out=ptr[1:])
    for s0 in range(0, n, _memory.PARTITION_CHUNK):
        # 16-bit keys sort by radix
        key = (top - costs[s0 : s0 + _memory.PARTITION_CHUNK]).astype(kdt)
        srt, dest = _sort_chunk(key, ptr)
        srt += s0
        out[dest] = srt
    return counts


def _whole_numbers(blocks: Iterable[np.ndarray]) -> bool:
    """Whether every entry of the arrays ``blocks`` (the chunks of a larger array: no
    temporary of the whole) is a whole number."""
    return all(np.array_equal(v, np.floor(v)) for v in blocks)
