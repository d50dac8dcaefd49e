"""Memory discipline of the planning kernels, in one place: every chunk and window size, and
the chunked copies that keep per-graph working arrays narrow and short-lived.

A chunk size bounds a temporary (its memory is O(chunk), not O(graphs)) and never changes a
result: tests set each one to a few items and require the same plans
(tests/planners/test_plan_scale.py). Kernels read them here at call time (``_memory.NAME``), so one
assignment changes them everywhere. Index arrays are int32 below 2**31 graphs
(`index_dtype`); every `BatchPlan` array is still int64.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import DTypeLike

__all__ = ["index_dtype", "gather_counts", "take_into", "widen_into", "gather_batches"]

# -- windows of prefix sums -------------------------------------------------------------------
#: Graphs per window of prefix sums in `greedy_fill` (memory O(window), not O(graphs)).
GREEDY_WINDOW = 1 << 20
#: Graphs per window of prefix sums in `step_fill`.
STEP_WINDOW = 1 << 20
#: Most steps `step_fill` deals together in one vectorised block (0: every step dealt on its
#: own, the sequential path; tests compare the two).
STEP_BLOCK_STEPS = (1 << 16) - 1
#: Graphs per vectorised block of `step_fill` (a shortened step redoes the rest of its block).
STEP_BLOCK_GRAPHS = 1 << 16

# -- chunks of counting sorts and partitions ---------------------------------------------------
#: Keys per chunk of the counting sorts (`group_by_key`, the slot placement of
#: `assign_graphs`): cache-sized.
SORT_CHUNK = 1 << 14
#: Entries per chunk of rows when `assign_graphs` permutes the packs' graphs: cache-sized.
ASSIGN_ROWS_CHUNK = 1 << 16
#: Grid entries per chunk of rows in balanced dealing (loads, spill, slot assembly).
DEAL_ROWS = 1 << 20
#: Slots per chunk of `PackPatterns.slots`.
PATTERN_SLOTS = 1 << 20
#: Graphs per chunk of the round-matrix kernels (`round_matrix`, `descending_order`,
#: `stratified_assignment`, `columns_in_order`, the bins' costs of the balanced candidate).
PARTITION_CHUNK = 1 << 20
#: Round-matrix entries per chunk of batch pairs in `refine_in_place` (a sorted chunk fits the
#: cache: its binary searches stay cheap).
REFINE_CHUNK = 1 << 16
#: Slots per chunk when `spread_packs` keeps the slots not moved (boolean masks by chunk).
SPREAD_CHUNK = 1 << 20

# -- chunks of per-graph copies and sums -------------------------------------------------------
#: Graphs per chunk of `gather_counts` and of `PackedSizes` (packing and `gather`).
GATHER_CHUNK = 1 << 20
#: Graphs per chunk of `take_into`.
TAKE_CHUNK = 1 << 16
#: Graphs per chunk of `widen_into`.
WIDEN_CHUNK = 1 << 16
#: Graphs per chunk of `gather_batches` (its index temporaries stay cache-sized).
BATCH_GATHER_CHUNK = 1 << 16
#: Graphs per chunk when `PackedSizes.shuffled` packs and unpacks its int64 items.
SHUFFLE_CHUNK = 1 << 16
#: Graphs per chunk of `any_oversize`.
OVERSIZE_CHUNK = 1 << 16
#: Values per chunk of `batch_totals`.
TOTALS_CHUNK = 1 << 20


def index_dtype(n: int) -> type[np.int32] | type[np.int64]:
    """The narrowest of int32/int64 holding positions ``0..n``."""
    return np.int32 if n < 2**31 else np.int64


def gather_counts(column: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``column[index]`` in the narrowest of int16/int32/int64 holding every value of
    ``column``, gathered in chunks: no int64 copy of the whole gather. Sums of the result must
    ask for an int64 accumulator where ``np.sum`` would not (``np.add.reduceat``)."""
    n = index.shape[0]
    top = int(column.max()) if column.shape[0] else 0
    if top >= 2**31:
        return column[index]
    out = np.empty(n, np.int16 if top < 2**15 else np.int32)
    step = GATHER_CHUNK
    for s in range(0, n, step):
        out[s : s + step] = column[index[s : s + step]]
    return out


def take_into(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``values[index]`` written over ``index`` (same dtype) chunk by chunk; returns ``index``.
    ``values`` must not share memory with ``index``."""
    step = TAKE_CHUNK
    for s0 in range(0, index.shape[0], step):
        chunk = index[s0 : s0 + step]
        chunk[...] = values[chunk]
    return index


def widen_into(values: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``values`` (any int dtype) copied to the int64 array ``out`` of the same length, chunk
    by chunk (no int64 temporary of the whole); ``values`` may be a view of ``out`` whose
    element ``i`` lies within ``out[i]`` (as the order of `PackedSizes.shuffled` does).
    Returns ``out``."""
    step = WIDEN_CHUNK
    for s0 in range(0, out.shape[0], step):
        out[s0 : s0 + step] = values[s0 : s0 + step]
    return out


def gather_batches(
    order: np.ndarray, starts: np.ndarray, offsets: np.ndarray, dtype: DTypeLike | None = None
) -> np.ndarray:
    """The graphs of ``order[starts[b] : starts[b] + n_b]`` for each new batch ``b`` (``n_b`` =
    ``offsets[b+1] - offsets[b]``), concatenated (as ``dtype``, default ``order``'s, which
    must hold every value); built in chunks of about `BATCH_GATHER_CHUNK` graphs (whole
    batches), each gathered straight into the result."""
    out = np.empty(int(offsets[-1]), order.dtype if dtype is None else dtype)
    chunk = BATCH_GATHER_CHUNK
    nb = starts.shape[0]
    ramp = np.zeros(0, np.int64)  # 0, 1, 2, ...: positions within a chunk
    b0 = 0
    while b0 < nb:
        lo = int(offsets[b0])
        b1 = int(np.searchsorted(offsets, lo + chunk, "right")) - 1
        b1 = min(nb, max(b1, b0 + 1))
        hi = int(offsets[b1])
        if hi > lo:
            if ramp.shape[0] < hi - lo:
                ramp = np.arange(max(hi - lo, chunk), dtype=np.int64)
            # graph at new position g comes from order[g - offsets[b] + starts[b]]
            idx = np.repeat(starts[b0:b1] - offsets[b0:b1], np.diff(offsets[b0 : b1 + 1]))
            idx += lo
            idx += ramp[: hi - lo]
            # mode="clip": no buffered copy (the indices are in range)
            np.take(order, idx, out=out[lo:hi], mode="clip")
        b0 = b1
    return out
