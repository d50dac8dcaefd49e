"""Equal-cardinality partition kernels on raw cost arrays (no plan objects).

All kernels work on a *round matrix* (`round_matrix`, module `_round_matrix`): the graphs
sorted by cost (descending) and cut into ``R = ceil(N / B)`` rounds of ``B`` consecutive graphs
(the last round padded with zero-cost dummies). Every batch takes exactly one entry of every
round, so batch cardinalities differ by at most one and memory stays ``O(N)`` whatever the
number of batches ``B``.

Costs are integers (the ``kk`` cost model: quantised once), so loads are exact integer sums and
every comparison is exact: the same partition on every machine.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

import numpy as np
from numpy.typing import DTypeLike

from .._errors import InputError
from . import _memory
from ._memory import index_dtype

__all__ = [
    "balanced_ldm",
    "stratified_assignment",
    "refine_by_swaps",
    "refine_in_place",
    "columns_to_batches",
    "columns_in_order",
]


def balanced_ldm(
    value: np.ndarray | None,
    ident: np.ndarray,
    *,
    inplace: bool = False,
    row_costs: Callable[[np.ndarray], np.ndarray] | None = None,
) -> tuple[np.ndarray | None, np.ndarray]:
    """Karmarkar–Karp largest differencing over the rounds of a round matrix (balanced LDM).

    Each round is a ``B``-tuple of partial batches. Repeatedly the two tuples with the largest
    spread (max - min) are merged, the heaviest partial batch of one with the lightest of the
    other, and so on, which keeps exactly one graph per round in every batch. The final spread
    (heaviest - lightest batch) never exceeds the largest round spread. Time ``O(N log B)`` for
    ``N = R·B`` entries, memory ``O(N)`` (the textbook k-way differencing keeps a ``B``-tuple per
    graph, ``O(N·B)``): two int32 arrays of ``N`` besides the matrix (int64 past 2**31 entries).

    Returns the matrix rearranged so that column ``j`` lists the entries of batch ``j`` (each
    round's entries permuted within the round): new arrays, or ``value``/``ident`` themselves
    rearranged in place with ``inplace=True``.

    Memory-lean form: ``value=None`` with ``row_costs`` (a function from an array of graph ids,
    ``-1`` for dummies, to their int64 costs, ``0`` for dummies: the values the matrix would
    hold) computes each round's values when it is first merged, so the value matrix need not
    exist meanwhile; only ``ident`` is rearranged (in place) and ``(None, ident)`` returned.
    """
    r, b = ident.shape
    if value is None and (row_costs is None or not inplace):
        raise InputError("balanced_ldm without a value matrix needs row_costs and inplace=True")
    parent, roots = _difference_rounds(value, ident, row_costs)
    col = _root_columns(parent, roots, b).reshape(r, b)
    del roots
    if value is None:  # (lazy)
        for i in range(r):
            ident[i, col[i]] = ident[i].copy()
        return None, ident
    if not inplace:
        value, ident = value.copy(), ident.copy()
    # row i: the entry at column p goes to column col[i, p] (a permutation within the round)
    for i in range(r):
        value[i, col[i]] = value[i].copy()
        ident[i, col[i]] = ident[i].copy()
    return value, ident


def _difference_rounds(
    value: np.ndarray | None,
    ident: np.ndarray,
    row_costs: Callable[[np.ndarray], np.ndarray] | None,
) -> tuple[np.ndarray, np.ndarray]:
    """The differencing of `balanced_ldm`: ``(parent, roots)``, ``parent`` linking each flat
    position of the round matrix to the representative it was merged with (a forest), and
    ``roots`` the ``B`` representatives of the final tuple (in its order). Round values from
    ``value``, else from ``row_costs`` when a round is first merged."""
    r, b = ident.shape
    idt = index_dtype(r * b)
    # Each tuple: its partial-batch sums (sorted descending) and one representative flat
    # position per partial batch (None: round i's own positions, in order); `parent` links
    # merged positions to their representative.
    parent = np.arange(r * b, dtype=idt)
    # round rows are already sorted descending (views; None: computed when first merged)
    sums: list[np.ndarray | None] = [None] * r if value is None else [value[i] for i in range(r)]
    reps: list[np.ndarray | None] = [None] * r

    def rep(i: int) -> np.ndarray:
        ri = reps[i]
        return np.arange(i * b, (i + 1) * b, dtype=idt) if ri is None else ri

    def tuple_sums(i: int) -> np.ndarray:
        si = sums[i]
        if si is not None:
            return si
        assert row_costs is not None  # (lazy: checked by balanced_ldm)
        return row_costs(ident[i])

    if value is None:
        assert row_costs is not None
        ends = [row_costs(ident[i, [0, b - 1]]) for i in range(r)]
        heap = [(-(e[0] - e[1]), i) for i, e in enumerate(ends)]
        del ends
    else:
        heap = [(-(s[0] - s[-1]), i) for i, s in enumerate(sums) if s is not None]
    heapq.heapify(heap)
    while len(heap) > 1:
        _, i = heapq.heappop(heap)
        _, j = heapq.heappop(heap)
        merged = tuple_sums(i) + tuple_sums(j)[::-1]
        ri = rep(i)
        parent[rep(j)[::-1]] = ri
        perm = np.argsort(-merged, kind="stable")
        si = sums[i] = merged[perm]
        reps[i] = ri[perm]
        sums[j] = reps[j] = None
        heapq.heappush(heap, (-(si[0] - si[-1]), i))
    _, last = heap[0]
    return parent, rep(last)


def _root_columns(parent: np.ndarray, roots: np.ndarray, b: int) -> np.ndarray:
    """Each flat position's column (batch), in place of ``parent``: the column of its tree's
    root, ``roots[c]`` being column ``c``'s root. Pointer jumping chunk by chunk (no second
    array of ``N``: every position ends at its root whatever order the chunks take), then
    roots hold ``-1 - column``, every other position takes its root's column, then the roots
    theirs (no lookup array of ``N``)."""
    n = parent.shape[0]
    while True:
        changed = False
        for s0 in range(0, n, _memory.PARTITION_CHUNK):
            p = parent[s0 : s0 + _memory.PARTITION_CHUNK]
            g = parent[p]
            if not changed and not np.array_equal(g, p):
                changed = True
            parent[s0 : s0 + _memory.PARTITION_CHUNK] = g
        if not changed:
            break
    parent[roots] = -1 - np.arange(b, dtype=parent.dtype)
    for s0 in range(0, n, _memory.PARTITION_CHUNK):
        p = parent[s0 : s0 + _memory.PARTITION_CHUNK]
        inner = p >= 0
        p[inner] = -1 - parent[p[inner]]
    parent[roots] = -1 - parent[roots]
    return parent


def stratified_assignment(
    value: np.ndarray, ident: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Each round (stratum) dealt to the batches by an independent random permutation."""
    r, b = value.shape
    perm = rng.permuted(np.broadcast_to(np.arange(b), (r, b)), axis=1)
    return np.take_along_axis(value, perm, axis=1), np.take_along_axis(ident, perm, axis=1)


def refine_by_swaps(
    value: np.ndarray, ident: np.ndarray, passes: int, target: int | None = None
) -> tuple[np.ndarray, np.ndarray, int]:
    """Pairwise one-for-one swap repair between heavy and light batches (columns).

    Per pass, batches are ranked by load and the ``i``-th heaviest is paired with the ``i``-th
    lightest; for each pair the single swap (any entry of one for any entry of the other) whose
    moved cost is closest to half the gap is made when it lowers the pair's maximum (moved cost
    strictly between 0 and the gap). Cardinalities never change. Vectorised over pairs with one
    ``searchsorted``: ``O(N log R)`` per pass. Stops after ``passes`` passes, when no pair
    improves, or once the heaviest load is ``<= target``. Dummies (``ident == -1``) never move.
    Returns copies and the swap count (`refine_in_place` changes the arrays themselves).
    """
    value, ident = value.copy(), ident.copy()
    swaps = refine_in_place(value, ident, passes, target)
    return value, ident, swaps


def _column_sums(block: np.ndarray) -> np.ndarray:
    """The sums of the columns of ``block`` (rounds x some batches), each summed as a
    contiguous row of its entries (integers: exact in any order)."""
    return np.ascontiguousarray(block.T).sum(axis=1)


def _batch_loads(value: np.ndarray) -> np.ndarray:
    """Per-batch (column) sums (`_column_sums`), chunk by chunk."""
    r, b = value.shape
    load = np.empty(b, value.dtype)
    step = max(1, _memory.PARTITION_CHUNK // max(r, 1))
    for c0 in range(0, b, step):
        load[c0 : c0 + step] = _column_sums(value[:, c0 : c0 + step])
    return load


#: Largest shifted search key of `refine_in_place` (int64 with headroom).
_KEY_LIMIT = 2**62


def refine_in_place(
    value: np.ndarray,
    ident: np.ndarray,
    passes: int,
    target: int | None = None,
    stop: Callable[[int, int], bool] | None = None,
) -> int:
    """`refine_by_swaps` on the round matrix itself (rounds x batches), changed in place; the
    pairs are handled in chunks, so extra memory stays O(chunk) whatever the number of graphs.
    ``value`` holds integer costs (int64, `round_matrix`): loads and moves are exact.
    ``stop(pass_index, heaviest_load)``, when given, is asked before every pass (after the
    ``target`` test) and ends the refinement when it returns ``True``. Returns the swap count."""
    r, b = value.shape
    half = b // 2
    if half == 0 or r == 0:
        return 0
    if value.dtype.kind not in "iu":
        raise InputError(f"refine_in_place needs an integer value matrix, got {value.dtype}")
    swaps = 0
    step = max(1, _memory.REFINE_CHUNK // r)  # pairs per chunk (cache-sized)
    vmax = max(int(np.abs(value[:, c0 : c0 + step]).max()) for c0 in range(0, b, step))
    # dummies never move: with at most one a column, its row (or -1) tells the real entries
    # without gathering the identities of every pair's columns
    dummy_row = _dummy_rows(ident, step)
    rows = np.arange(r, dtype=np.int16 if r < 2**15 else np.int64)
    load = _batch_loads(value).astype(np.int64)  # kept current: changed columns summed again
    for _pass in range(int(passes)):
        if target is not None and int(load.max()) <= target:
            break
        if stop is not None and stop(_pass, int(load.max())):
            break
        by_load = np.argsort(load, kind="stable")
        light_cols = by_load[:half]
        heavy_cols = by_load[::-1][:half]
        gap = load[heavy_cols] - load[light_cols]  # >= 0, non-increasing
        # a swap moves (heavy - light) strictly between 0 and the pair's gap: integer entries
        # move whole amounts, so a pair whose gap is at most 1 has none; only the pairs above
        # it are searched (the gaps of the ranked pairs never increase)
        live = int(np.count_nonzero(gap > 1))  # pairs [0, live) may swap
        if live == 0:
            break
        # in doubled units the light entry that would halve the gap, 2 heavy - gap, is whole;
        # the rows of a chunk side by side in one sorted vector, row p shifted by p * span
        # (span above the range of entries and keys), chunks short enough for int64 keys
        span = 2 * (2 * vmax + int(gap[0])) + 1
        pstep = max(1, min(step, _KEY_LIMIT // span))
        improved = 0
        for p0 in range(0, live, pstep):
            p1 = min(live, p0 + pstep)
            changed = _swap_chunk(
                value,
                ident,
                heavy_cols[p0:p1],
                light_cols[p0:p1],
                gap[p0:p1],
                span,
                dummy_row,
                rows,
            )
            if changed is None:
                continue
            improved += changed.shape[0] // 2
            load[changed] = _column_sums(value[:, changed])
        if improved == 0:
            break
        swaps += improved  # swaps exchange entries: vmax stays the same
    return swaps


def _swap_chunk(
    value: np.ndarray,
    ident: np.ndarray,
    heavy_cols: np.ndarray,
    light_cols: np.ndarray,
    gaps: np.ndarray,
    span: int,
    dummy_row: np.ndarray | None,
    rows: np.ndarray,
) -> np.ndarray | None:
    """One chunk of pairs of `refine_in_place`: for each pair of a heavy column
    ``heavy_cols[i]`` and a light column ``light_cols[i]`` with load gap ``gaps[i]``, the swap
    of one real entry of each whose moved cost is strictly between 0 and the gap and closest
    to half of it, made in ``value`` and ``ident``. The rows of the chunk are searched side by
    side in one sorted vector (row ``p`` shifted by ``p * span``). ``dummy_row``: each
    column's dummy row (`_dummy_rows`, ``None``: read ``ident``); ``rows``: ``arange(R)``.
    Returns the columns changed (the heavy ones, then the light ones), ``None`` when none."""
    r = value.shape[0]
    k = heavy_cols.shape[0]
    local = np.arange(k)
    heavy = np.ascontiguousarray(value[:, heavy_cols].T).astype(np.int64)  # [k, R]
    light = np.ascontiguousarray(value[:, light_cols].T).astype(np.int64)
    light_order = np.argsort(light, axis=1, kind="stable")
    base = local * r
    at = (light_order + base[:, None]).ravel()  # flat positions: light rows sorted
    light_sorted = light.ravel().take(at).reshape(k, r)
    if dummy_row is None:  # dummies never move: cardinalities stay as dealt
        heavy_real = ident[:, heavy_cols].T >= 0
        light_real = np.ascontiguousarray(ident[:, light_cols].T).ravel().take(at) >= 0
    else:
        heavy_real = rows[None, :] != dummy_row[heavy_cols][:, None]
        light_real = (light_order != dummy_row[light_cols][:, None]).ravel()
    shift = local * span
    flat = (2 * light_sorted + shift[:, None]).ravel()
    # a batch's entries run from large (early rounds) to small: searched last to first,
    # the keys mostly ascend, which keeps each binary search short
    keys = (2 * heavy - gaps[:, None] + shift[:, None])[:, ::-1].ravel()
    pos = np.searchsorted(flat, keys).reshape(k, r)[:, ::-1]
    none = np.iinfo(np.int64).max
    best = np.full(k, none)
    best_heavy = np.zeros(k, dtype=np.int64)
    best_light = np.zeros(k, dtype=np.int64)
    light_flat = light_sorted.ravel()
    for cand in (pos - 1, pos):
        c = cand - base[:, None]  # column within the sorted light row, clipped
        np.minimum(c, r - 1, out=c)
        np.maximum(c, 0, out=c)
        fi = c + base[:, None]
        moved = heavy - light_flat.take(fi)
        ok = (moved > 0) & (moved < gaps[:, None]) & heavy_real
        ok &= light_real.take(fi)
        # twice the distance of the move from half the gap
        score = np.where(ok, np.abs(gaps[:, None] - 2 * moved), none)
        j = np.argmin(score, axis=1)
        chosen_score = score[local, j]
        better = chosen_score < best
        best = np.where(better, chosen_score, best)
        best_heavy = np.where(better, j, best_heavy)
        best_light = np.where(better, c[local, j], best_light)
    p = np.flatnonzero(best < none)
    if p.shape[0] == 0:
        return None
    heavy_row = best_heavy[p]
    light_row = light_order[p, best_light[p]]
    heavy_col, light_col = heavy_cols[p], light_cols[p]
    kept_value = value[heavy_row, heavy_col].copy()
    value[heavy_row, heavy_col] = value[light_row, light_col]
    value[light_row, light_col] = kept_value
    kept_ident = ident[heavy_row, heavy_col].copy()
    ident[heavy_row, heavy_col] = ident[light_row, light_col]
    ident[light_row, light_col] = kept_ident
    return np.concatenate([heavy_col, light_col])


def _dummy_rows(ident: np.ndarray, step: int) -> np.ndarray | None:
    """Per column of the round matrix, the row of its dummy (``ident == -1``) or ``-1`` when it
    has none; ``None`` when a column holds more than one dummy. Found chunk by chunk."""
    r, b = ident.shape
    out = np.full(b, -1, np.int16 if r < 2**15 else np.int64)
    for c0 in range(0, b, step):
        d = ident[:, c0 : c0 + step] < 0
        count = d.sum(axis=0)
        if (count > 1).any():
            return None
        has = np.flatnonzero(count)
        out[c0 + has] = d[:, has].argmax(axis=0)
    return out


def columns_to_batches(ident: np.ndarray, num_graphs: int) -> np.ndarray:
    """Batch id per graph from a column-per-batch identity matrix (dummies ``-1`` ignored)."""
    r, b = ident.shape
    batch_of = np.empty(num_graphs, dtype=np.int64)
    cols = np.broadcast_to(np.arange(b, dtype=np.int64), (r, b))
    real = ident >= 0
    batch_of[ident[real]] = cols[real]
    return batch_of


def columns_in_order(
    ident: np.ndarray, cols: np.ndarray | None = None, dtype: DTypeLike = np.int64
) -> tuple[np.ndarray, np.ndarray]:
    """The real entries (``>= 0``) of the columns ``cols`` of ``ident`` (default: every column,
    in order), column after column, each column's in row order, as ``dtype``; and the real
    entries per column of ``cols`` (int64). Built chunk by chunk of columns. With ``cols``,
    ``ident`` is first copied batch-major, so the gather in ``cols`` order reads each column as
    one contiguous row (``R`` strided reads a column otherwise)."""
    r, b = ident.shape
    step = max(1, _memory.PARTITION_CHUNK // max(r, 1))
    real = np.empty(b, np.int64)
    if cols is None:
        for c0 in range(0, b, step):
            real[c0 : c0 + step] = r - np.count_nonzero(ident[:, c0 : c0 + step] < 0, axis=0)
        counts, k = real, b

        def block(j0: int) -> np.ndarray:  # columns j0.. as rows
            return ident[:, j0 : j0 + step].T
    else:
        rows = np.empty((b, r), ident.dtype)
        for c0 in range(0, b, step):
            rows[c0 : c0 + step] = ident[:, c0 : c0 + step].T
            real[c0 : c0 + step] = r - np.count_nonzero(rows[c0 : c0 + step] < 0, axis=1)
        counts, k = real[cols], cols.shape[0]
        del real

        def block(j0: int) -> np.ndarray:
            return rows[cols[j0 : j0 + step]]

    ends = np.zeros(k + 1, np.int64)
    np.cumsum(counts, out=ends[1:])
    out = np.empty(int(ends[-1]), dtype)
    for j0 in range(0, k, step):
        flat = np.ascontiguousarray(block(j0)).reshape(-1)
        lo, hi = int(ends[j0]), int(ends[min(k, j0 + step)])
        out[lo:hi] = flat if hi - lo == flat.shape[0] else flat[flat >= 0]
    return out, counts
