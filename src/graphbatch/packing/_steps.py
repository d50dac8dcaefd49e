"""Step fill: the greedy fill for data-parallel plans, ``ranks`` evenly filled batches a step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, overload

import numpy as np
from numpy.typing import NDArray

from .._budget import Budget
from .._errors import InputError
from .._exact import decimal, share_keys, sortable
from . import _memory
from ._balanced import _swap_repair
from ._greedy import batches_lower_bound
from ._memory import index_dtype

__all__ = ["step_fill", "SizePairs"]

#: Largest ``(max nodes + 1) * (max edges + 1)`` for which shares are ranked through a table.
_RANK_SPAN = 1 << 22
#: Most bits of the uint32 sort items of `_deal_block` (more: int64 items; tests lower it).
_ITEM_BITS = 32
#: Node/edge totals of a batch are counted in one float64 weight below this (tests lower it).
_EXACT_FLOAT = 2**53


@overload
def step_fill(
    nodes: np.ndarray,
    edges: np.ndarray,
    budget: Budget,
    ranks: int,
    fill: float = ...,
    steps: int | None = ...,
    *,
    return_totals: Literal[False] = ...,
    with_order: bool = ...,
    perm_out: np.ndarray | None = ...,
    pairs: SizePairs | None = ...,
    totals: tuple[int, int] | None = ...,
) -> tuple[NDArray[Any] | None, NDArray[np.int64]]: ...


@overload
def step_fill(
    nodes: np.ndarray,
    edges: np.ndarray,
    budget: Budget,
    ranks: int,
    fill: float = ...,
    steps: int | None = ...,
    *,
    return_totals: Literal[True],
    with_order: bool = ...,
    perm_out: np.ndarray | None = ...,
    pairs: SizePairs | None = ...,
    totals: tuple[int, int] | None = ...,
) -> tuple[NDArray[Any] | None, NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]: ...


def step_fill(
    nodes: np.ndarray,
    edges: np.ndarray,
    budget: Budget,
    ranks: int,
    fill: float = 0.99,
    steps: int | None = None,
    *,
    return_totals: bool = False,
    with_order: bool = True,
    perm_out: np.ndarray | None = None,
    pairs: SizePairs | None = None,
    totals: tuple[int, int] | None = None,
) -> (
    tuple[NDArray[Any] | None, NDArray[np.int64]]
    | tuple[NDArray[Any] | None, NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]
):
    """Greedy fill by steps of ``ranks`` batches, for data-parallel plans.

    Consecutive graphs (in the given order) make up a step while they fit ``fill`` (read by
    `decimal`: ``0.99`` is 99/100) of the step's capacity (``ranks`` times the budget's real
    capacities, rounded down); within the step they are dealt,
    largest share of the capacities first, in snake order over the ``ranks`` batches, so the
    batches of a step are filled evenly. A step whose dealt batches do not fit the budget is
    shortened until they do. Every step but possibly the last holds ``ranks`` non-empty batches;
    the last holds at least ``min(ranks, graphs)`` graphs spread over its batches.

    ``steps`` (default: the fewest at ``fill``) is the number of steps aimed at; a step that
    had to be shortened leaves its graphs to the following ones, and graphs left after the last
    planned step make further steps.

    ``nodes``/``edges`` may be any integer dtype (e.g. int32); sums are int64. Memory beyond the
    result is one window of prefix sums (``STEP_WINDOW`` graphs) and one block of steps.

    Vectorised: the step boundaries are a chain (each step's end depends on its start), found
    one step at a time from the prefix sums; the dealing and the fit check of up to
    ``STEP_BLOCK_STEPS`` consecutive steps are then done together (one sort by step and share),
    and only a step whose dealt batches do not fit goes through the per-step repair and
    shortening (after a shortened step the chain is found again from its new end).

    Returns ``(perm, offsets)``: positions in batch order (int32 when fewer than 2**31 graphs,
    else int64) and int64 batch boundaries; with ``return_totals`` also the int64 real node and
    edge totals of each batch. The number of batches is a multiple of ``ranks`` (empty batches
    only when there are fewer graphs than ``ranks`` in total). ``with_order=False`` returns
    ``None`` for ``perm`` (the same batches; their graphs are not recorded). ``perm_out``: an
    array of the ``perm`` dtype and length to write ``perm`` to (returned as ``perm``).
    ``pairs``: `SizePairs` of these graphs (in any order), ``totals``: their int node and edge
    sums, when already known."""
    m, r = int(nodes.shape[0]), int(ranks)
    cap_n, cap_e, cap_g = budget.node_capacity, budget.edge_capacity, budget.graph_capacity
    if totals is None:
        totals = (int(nodes.sum(dtype=np.int64)), int(edges.sum(dtype=np.int64)))
    tot_n, tot_e = totals
    # a step's room: `fill` of its capacity, rounded down (integers: exact)
    f = decimal(fill)
    room_n = r * cap_n * f.numerator // f.denominator
    room_e = r * cap_e * f.numerator // f.denominator
    room_g = r * cap_g
    # steps needed at `fill` of the capacity; every step then gets an even share of what is left
    if steps is None:
        steps = batches_lower_bound(tot_n, tot_e, m, room_n, room_e, room_g)
    reach = r * cap_g + 1  # a step never spans more graphs than this
    vectorised = _memory.STEP_BLOCK_STEPS and m
    ranker = _ShareRanks(nodes, edges, cap_n, cap_e, pairs) if vectorised else None
    window = _Window(nodes, edges)
    target = _StepTargets(m, r, steps, (tot_n, tot_e, room_n, room_e, room_g), window)
    record = _StepRecord(_perm_array(m, with_order, perm_out), r)
    caps = (cap_n, cap_e, cap_g)
    pos = 0
    while pos < m:
        window.cover(pos, reach)
        if ranker is None:  # the sequential path: one step at a time
            placed, tot, j = _one_step(nodes, edges, pos, target.end(pos, record.n_steps), r, *caps)
            record.keep(pos, placed, tot[None])
            pos = j
            continue
        # the chain of step ends inside this window, then the block dealt at once
        ends = _chain(
            target.end,
            pos,
            record.n_steps,
            m,
            window.a,
            window.hi,
            reach,
            r,
            steps,
            window.wn,
            window.we,
            target.totals,
        )
        # the block's graphs go straight into perm[pos:ends[-1]]: a step that does not fit as
        # dealt, and the steps after a shortened one, are written over later (never a range
        # below pos: positions are placed in increasing order)
        tot, fits = _deal_block(
            nodes, edges, pos, np.asarray(ends, np.int64), r, *caps, ranker, record.perm
        )
        pos = _keep_block(record, nodes, edges, pos, ends, tot, fits, r, caps)
    return record.result(return_totals)


def _perm_array(m: int, with_order: bool, perm_out: np.ndarray | None) -> np.ndarray | None:
    """The array `step_fill` writes its order to: ``perm_out`` (checked), a new one, or
    ``None`` without ``with_order``."""
    if not with_order:
        return None
    if perm_out is None:
        return np.empty(m, index_dtype(m))
    if perm_out.dtype != index_dtype(m) or perm_out.shape != (m,):
        raise InputError(
            f"perm_out must be a {np.dtype(index_dtype(m))} array of {m} items, "
            f"got {perm_out.dtype} of shape {perm_out.shape}"
        )
    return perm_out


class _Window:
    """Prefix sums of the node and edge counts over graphs ``a .. hi``: ``wn[i]`` is the sum
    of ``nodes[:a + i]`` (int64), slid forward as the fill goes (memory O(`STEP_WINDOW`))."""

    def __init__(self, nodes: np.ndarray, edges: np.ndarray) -> None:
        self.nodes, self.edges = nodes, edges
        self.a = self.hi = 0
        self.wn = self.we = np.zeros(1, np.int64)

    def cover(self, pos: int, reach: int) -> None:
        """Slide the window to start at ``pos`` (inside it) when a step from ``pos`` could
        reach past its end and the end is not the last graph."""
        m = self.nodes.shape[0]
        if pos + reach <= self.hi or self.hi >= m:
            return
        base_n, base_e = int(self.wn[pos - self.a]), int(self.we[pos - self.a])  # cn[pos]
        a, hi = pos, min(m, pos + max(_memory.STEP_WINDOW, reach))
        wn = np.empty(hi - a + 1, np.int64)
        we = np.empty(hi - a + 1, np.int64)
        wn[0], we[0] = base_n, base_e
        np.cumsum(self.nodes[a:hi], out=wn[1:], dtype=np.int64)
        np.cumsum(self.edges[a:hi], out=we[1:], dtype=np.int64)
        wn[1:] += base_n
        we[1:] += base_e
        self.a, self.hi, self.wn, self.we = a, hi, wn, we


class _StepTargets:
    """Where a step ends before the dealing's fit check (`end`): each step aims at an even
    share of what is left, at most its room; ``totals`` = ``(tot_n, tot_e, room_n, room_e,
    room_g)``."""

    def __init__(self, m: int, r: int, steps: int, totals: tuple, window: _Window) -> None:
        self.m, self.r, self.steps, self.totals, self.window = m, r, steps, totals, window

    def end(self, pos: int, k: int) -> int:
        """End of the step starting at ``pos`` when ``k`` steps came before. Scalar code: it
        runs once per step."""
        m, r = self.m, self.r
        tot_n, tot_e, room_n, room_e, room_g = self.totals
        a, wn, we = self.window.a, self.window.wn, self.window.we
        i = pos - a
        cpos_n, cpos_e = wn.item(i), we.item(i)
        left = self.steps - k
        if left < 1:
            left = 1
        # integer targets (an even share of what is left, at most the room), exact
        x = (tot_n - cpos_n) // left
        t_n = cpos_n + (x if x < room_n else room_n)
        x = (tot_e - cpos_e) // left
        t_e = cpos_e + (x if x < room_e else room_e)
        # the end: the first of the graph bound, the last position whose prefix sums stay
        # within the node and edge targets (prefix sums never fall: a bound is searched only
        # where it binds; the window holds the graph bound)
        g = -(-(m - pos) // left)
        j = pos + (g if g < room_g else room_g)
        if j > m:
            j = m
        if wn.item(j - a) > t_n:
            j = a + int(wn.searchsorted(t_n + 1)) - 1  # last position with cn <= t_n
        if we.item(j - a) > t_e:
            j = a + int(we.searchsorted(t_e + 1)) - 1
        if left == 1:
            j = (
                m
                if (tot_n - cpos_n <= room_n and tot_e - cpos_e <= room_e and m - pos <= room_g)
                else j
            )
        g = pos + r
        if j < g:
            j = g if g < m else m
        if 0 < m - j < r:  # leave the last step at least `ranks` graphs
            j = max(pos + 1, m - r)
        return j


class _StepRecord:
    """The steps made so far: their graphs in batch order (``perm``, ``None``: not recorded)
    and per step the [3, ranks] totals (graphs, real nodes, real edges) of its batches."""

    def __init__(self, perm: np.ndarray | None, r: int) -> None:
        self.perm = perm
        self.per_step = np.zeros((64, 3, r), np.int64)  # grown by doubling
        self.n_steps = 0

    def keep(self, pos: int, placed: np.ndarray | None, tot: np.ndarray) -> None:
        """Record consecutive steps from ``pos`` on: their graphs in batch order (``None``:
        already in ``perm``) and [steps, 3, ranks] totals."""
        if self.perm is not None and placed is not None:
            self.perm[pos : pos + placed.shape[0]] = placed
        k = tot.shape[0]
        while self.n_steps + k > self.per_step.shape[0]:
            self.per_step = np.concatenate([self.per_step, np.zeros_like(self.per_step)])
        self.per_step[self.n_steps : self.n_steps + k] = tot
        self.n_steps += k

    def result(
        self, return_totals: bool
    ) -> (
        tuple[NDArray[Any] | None, NDArray[np.int64]]
        | tuple[NDArray[Any] | None, NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]
    ):
        """`step_fill`'s result: ``(perm, offsets[, real nodes, real edges])``."""
        per_step = self.per_step[: self.n_steps]
        r = per_step.shape[2]
        offsets = np.zeros(self.n_steps * r + 1, np.int64)
        np.cumsum(per_step[:, 0].reshape(-1), out=offsets[1:])
        if return_totals:
            return (self.perm, offsets, per_step[:, 1].reshape(-1), per_step[:, 2].reshape(-1))
        return self.perm, offsets


def _keep_block(
    record: _StepRecord,
    nodes: NDArray[np.integer[Any]],
    edges: NDArray[np.integer[Any]],
    pos: int,
    ends: list[int],
    tot: np.ndarray,
    fits: np.ndarray,
    r: int,
    caps: tuple,
) -> int:
    """Record a dealt block of steps ending at ``ends``: the runs that fit as dealt as they
    are, a step that does not through the per-step repair (`_one_step`); after a shortened
    step the rest of the block is dropped (the chain goes on from its new end). Returns the
    position reached."""
    i = 0
    while i < len(ends):
        bad = np.flatnonzero(~fits[i:])
        f = len(ends) if bad.size == 0 else i + int(bad[0])
        if f > i:  # steps i..f-1 fit as dealt
            record.keep(pos, None, tot[i:f])
            pos, i = ends[f - 1], f
            if i == len(ends):
                break
        # step i does not fit as dealt: the per-step repair, and shortening if needed
        pl, tt, j = _one_step(nodes, edges, pos, ends[i], r, *caps)
        record.keep(pos, pl, tt[None])
        shortened = j != ends[i]
        pos, i = j, i + 1
        if shortened:  # the chain goes on from the new end
            break
    return pos


def _chain(
    step_end: Callable[[int, int], int],
    pos: int,
    k: int,
    m: int,
    a: int,
    hi: int,
    reach: int,
    r: int,
    steps: int,
    wn: np.ndarray,
    we: np.ndarray,
    totals: tuple,
) -> list[int]:
    """The ends of consecutive steps from ``pos`` (``k`` steps before it) while a step may
    start: below ``m``, its reach inside the window ``wn``/``we`` (prefix sums from ``a`` to
    ``hi``), at most `STEP_BLOCK_STEPS` steps and `STEP_BLOCK_GRAPHS` graphs from ``pos``.
    Each end is ``step_end(p, k)`` of `step_fill`; while more than one planned step is left
    and a step can take ``r`` graphs below ``m`` they are computed here inline (the same
    arithmetic, no call per step), the last steps by ``step_end`` itself."""
    tot_n, tot_e, room_n, room_e, room_g = totals
    # a step may start at p while p < lim (p + reach <= hi unless the window reaches m)
    lim = min(m, pos + _memory.STEP_BLOCK_GRAPHS, m if hi >= m else hi - reach + 1)
    n_max = _memory.STEP_BLOCK_STEPS
    ends: list[int] = []
    append = ends.append
    wn_item, we_item = wn.item, we.item
    wn_search, we_search = wn.searchsorted, we.searchsorted
    p = pos
    last = m - r  # an end above this leaves the last step fewer than `r` graphs
    n = 0  # len(ends)
    # the inline steps: while more than one step is left (left = steps - k - n > 1) and the
    # step can take `r` graphs below m (p + r < m, i.e. p < last)
    n_fast = min(n_max, steps - k - 1)
    lim_fast = min(lim, last)
    while p < lim_fast and n < n_fast:
        left = steps - k - n
        i = p - a
        cpos_n = wn_item(i)
        cpos_e = we_item(i)
        x = (tot_n - cpos_n) // left
        t_n = cpos_n + (x if x < room_n else room_n)
        x = (tot_e - cpos_e) // left
        t_e = cpos_e + (x if x < room_e else room_e)
        g = -(-(m - p) // left)
        j = p + (g if g < room_g else room_g)
        if j > m:
            j = m
        if wn_item(j - a) > t_n:
            j = a + int(wn_search(t_n + 1)) - 1
        if we_item(j - a) > t_e:
            j = a + int(we_search(t_e + 1)) - 1
        if j < p + r:
            j = p + r  # below m here
        if j > last and j < m:
            j = max(p + 1, last)
        append(j)
        n += 1
        p = j
    while p < lim and n < n_max:  # the last steps: step_end itself
        p = step_end(p, k + n)
        append(p)
        n += 1
    return ends


def _one_step(
    nodes: NDArray[np.integer[Any]],
    edges: NDArray[np.integer[Any]],
    pos: int,
    j: int,
    r: int,
    cap_n: int,
    cap_e: int,
    cap_g: int,
) -> tuple[NDArray[np.int64], NDArray[np.int64], int]:
    """One step from ``pos`` to at most ``j``: the graphs sorted by share, dealt in snake order
    over the ``r`` batches, repaired by one-for-one exchanges when a batch is over the budget,
    and shortened until the batches fit. Returns ``(placed positions in batch order, int64
    [3, r] totals (graphs, nodes, edges) per batch, the step's end)``."""
    while True:
        ln = nodes[pos:j].astype(np.int64)
        le = edges[pos:j].astype(np.int64)
        share = sortable(share_keys(ln, le, cap_n, cap_e))  # exact order of the shares
        srt = np.argsort(-share, kind="stable")  # positions relative to pos
        t = np.arange(srt.shape[0])
        row, col = t // r, t % r
        batch = np.where(row % 2 == 0, col, r - 1 - col)
        grid = np.full((r, int(row.max()) + 1), -1, np.int64)
        grid[batch, row] = t
        sn, se = ln[srt], le[srt]
        for repaired in (False, True):
            present = grid >= 0
            safe = np.where(present, grid, 0)
            bn = np.where(present, sn[safe], 0).sum(axis=1)
            be = np.where(present, se[safe], 0).sum(axis=1)
            if repaired or ((bn <= cap_n).all() and (be <= cap_e).all()):
                break  # (the repair leaves a grid without over-full batches as it is)
            # one-for-one exchanges bring over-full batches within the shape
            grid = _swap_repair(sn, se, grid, (cap_n, cap_e, cap_g))
        bg = present.sum(axis=1)
        if ((bn <= cap_n).all() and (be <= cap_e).all() and (bg <= cap_g).all()) or j - pos <= 1:
            break
        # shorten the step; its last graphs go to the following steps
        j = pos + max(1, min(j - pos - 1, (j - pos) * 49 // 50))
    return srt[grid[present]] + pos, np.stack([bg, bn, be]), j


class SizePairs:
    """The distinct ``(n, e)`` pairs of some graphs as ``n * width + e`` (ascending), ``width``
    = largest edge count + 1; ``pairs`` is ``None`` where a size is negative or
    ``(max n + 1) * width`` is above `_RANK_SPAN`. The same for any order of the graphs."""

    def __init__(self, nodes: np.ndarray, edges: np.ndarray) -> None:
        self.pairs: NDArray[np.intp] | None = None
        self.width = 0
        if not nodes.shape[0]:
            return
        lo = min(int(nodes.min()), int(edges.min()))
        top_n, top_e = int(nodes.max()), int(edges.max())
        span = (top_n + 1) * (top_e + 1)
        if lo < 0 or span > _RANK_SPAN:
            return
        self.width = top_e + 1
        present = np.zeros(span, bool)
        for s0 in range(0, nodes.shape[0], _memory.STEP_WINDOW):
            ln = nodes[s0 : s0 + _memory.STEP_WINDOW].astype(np.int64)
            ln *= self.width
            ln += edges[s0 : s0 + _memory.STEP_WINDOW]
            present[ln] = True
        self.pairs = np.flatnonzero(present)


class _ShareRanks:
    """Sort keys of the graphs' shares ``n / cap_n + e / cap_e`` (compared exactly, as in
    `_one_step`), largest share first: a uint16 rank per distinct ``(n, e)`` pair (equal shares,
    equal ranks) looked up in a table, or the negated exact key when the pairs are too many."""

    def __init__(
        self,
        nodes: NDArray[np.integer[Any]],
        edges: NDArray[np.integer[Any]],
        cap_n: int,
        cap_e: int,
        size_pairs: SizePairs | None = None,
    ) -> None:
        self.cn, self.ce = max(cap_n, 1), max(cap_e, 1)
        self.table: NDArray[np.uint16] | None = None
        if size_pairs is None:
            size_pairs = SizePairs(nodes, edges)
        if size_pairs.pairs is None:
            return
        self.width = size_pairs.width
        pairs = size_pairs.pairs
        span = int(pairs[-1]) + 1
        #: largest node and edge counts of the graphs (all counts are >= 0 here)
        self.top_n, self.top_e = (span - 1) // self.width, self.width - 1
        share = share_keys(pairs // self.width, pairs % self.width, self.cn, self.ce)
        uniq, inv = np.unique(share, return_inverse=True)  # ascending
        if uniq.shape[0] > 2**16:
            return
        table = np.zeros(span, np.uint16)
        rank = (uniq.shape[0] - 1 - inv.reshape(-1)).astype(np.uint16)
        table[pairs] = rank
        self.table = table
        #: number of ranks (0 .. n_ranks - 1)
        self.n_ranks = int(uniq.shape[0])
        # one pair per rank (no two pairs of equal share): a rank tells the sizes, so graphs of
        # one rank are interchangeable in a batch's totals
        self.rank_nodes: NDArray[np.int64] | None = None
        self.rank_edges: NDArray[np.int64] | None = None
        if uniq.shape[0] == pairs.shape[0]:
            self.rank_nodes = np.zeros(uniq.shape[0], np.int64)
            self.rank_edges = np.zeros(uniq.shape[0], np.int64)
            self.rank_nodes[rank] = pairs // self.width
            self.rank_edges[rank] = pairs % self.width

    def _pair(
        self, ln: NDArray[np.integer[Any]], le: NDArray[np.integer[Any]]
    ) -> NDArray[np.int64]:
        return ln.astype(np.int64) * self.width + le

    def keys(self, ln: NDArray[np.integer[Any]], le: NDArray[np.integer[Any]]) -> np.ndarray:
        if self.table is not None:
            return self.table[self._pair(ln, le)]
        return -sortable(share_keys(ln, le, self.cn, self.ce))


def _deal_block(
    nodes: NDArray[np.integer[Any]],
    edges: NDArray[np.integer[Any]],
    pos: int,
    ends: np.ndarray,
    r: int,
    cap_n: int,
    cap_e: int,
    cap_g: int,
    ranker: _ShareRanks,
    perm: np.ndarray | None = None,
) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    """The steps ``pos..ends[0], ends[0]..ends[1], ...`` dealt as `_one_step` deals them before
    any repair, all at once: one stable sort by (step, share descending). Writes the positions
    in batch order, step after step, to ``perm[pos:ends[-1]]`` (unless ``perm`` is ``None``).
    Returns ``(int64 [steps, 3, r] totals; whether each step's batches fit the budget as
    dealt)``."""
    k = ends.shape[0]
    starts = np.concatenate([[pos], ends[:-1]])
    lens = ends - starts
    rel = starts - pos  # each step's first position within the block
    ln = nodes[pos : int(ends[-1])]
    le = edges[pos : int(ends[-1])]
    seg = np.repeat(np.arange(k, dtype=np.uint16 if k <= 2**16 else np.int64), lens)
    keys = ranker.keys(ln, le)
    ranked = keys.dtype == np.uint16  # uint16 share ranks (else exact keys)
    # by step, then share (largest first), stable; t: position in step of each block position
    srt, t, sorted_ranks = _sort_block(seg, keys, lens, rel, ranker, perm is not None)
    del keys
    if t is None:
        t = np.arange(ln.shape[0], dtype=np.int32) - np.repeat(rel.astype(np.int32), lens)
    # row and snake batch (over the `r` batches) of each rank in a step, looked up
    longest = int(lens.max())
    tt = np.arange(longest, dtype=np.int32)
    row_of = tt // r
    col = tt - row_of * r
    batch = np.where(row_of & 1, r - 1 - col, col)[t]
    key = seg.astype(np.int32) * r + batch  # (seg[srt] == seg: the sort keeps steps in place)
    bn, be = _block_totals(
        ln, le, key, srt, sorted_ranks, ranker if ranked else None, -(-longest // r), k * r
    )
    # graphs per batch: `full` rows each; the partial last row fills batches 0..rem-1 (even
    # row) or r-rem..r-1 (odd row) of the snake
    full, rem = (lens // r)[:, None], (lens % r)[:, None]
    b = np.arange(r)[None, :]
    odd = full % 2 == 1
    bg = (full + np.where(odd, b >= r - rem, b < rem)).reshape(-1)
    fits = ((bn <= cap_n) & (be <= cap_e) & (bg <= cap_g)).reshape(k, r).all(axis=1)
    tot = np.stack([bg.reshape(k, r), bn.reshape(k, r), be.reshape(k, r)], axis=1)
    if perm is None:
        return tot, fits
    # batch-major order within a step: batch b starts after the graphs of batches < b
    extra = np.where(odd, np.maximum(0, b - (r - rem)), np.minimum(b, rem))
    first = (rel[:, None] + b * full + extra).reshape(-1)  # block position of each batch
    assert srt is not None  # (`_sort_block` returns the order where it is needed)
    perm[pos : int(ends[-1])][first[key] + row_of[t]] = srt + pos
    return tot, fits


def _sort_block(
    seg: NDArray[Any],
    keys: NDArray[Any],
    lens: NDArray[np.int64],
    rel: NDArray[np.int64],
    ranker: _ShareRanks,
    need_order: bool,
) -> tuple[
    NDArray[np.int32] | NDArray[np.intp] | None, NDArray[np.int32] | None, NDArray[Any] | None
]:
    """The block's positions stably sorted by (step ``seg``, share key): ``(srt, t,
    sorted_ranks)`` with ``srt`` the block positions in that order (``None`` where neither the
    order nor the weights need them), ``t`` each block position's place in its step (``None``:
    not computed) and ``sorted_ranks`` the share rank of each sorted position where a rank is
    one ``(n, e)`` pair (else ``None``). One sort of uint32 items where the fields fit
    `_ITEM_BITS`, else of int64 items, else a lexsort."""
    k, size = lens.shape[0], seg.shape[0]
    ranked = keys.dtype == np.uint16
    rank_bits = max(1, (ranker.n_ranks - 1).bit_length()) if ranked else 0
    pos_bits = max(1, (int(lens.max()) - 1).bit_length())
    if ranked and max(1, (k - 1).bit_length()) + rank_bits + pos_bits <= _ITEM_BITS:
        return _sort_u32_items(seg, keys, lens, rel, ranker, rank_bits, pos_bits, need_order)
    if ranked and k < 2**15 and size < 2**31:
        # one sort of distinct int64 items: bits 48.. the step, 32..47 the rank, 0..31 the
        # block position; faster than a lexsort
        items = seg.astype(np.int64) << 48
        items |= keys.astype(np.int64) << 32
        items |= np.arange(size, dtype=np.int64)
        items.sort()
        return items.astype(np.int32), None, None  # the low 32 bits: the positions
    return np.lexsort((keys, seg)), None, None


def _sort_u32_items(
    seg: NDArray[Any],
    keys: NDArray[Any],
    lens: NDArray[np.int64],
    rel: NDArray[np.int64],
    ranker: _ShareRanks,
    rank_bits: int,
    pos_bits: int,
    need_order: bool,
) -> tuple[NDArray[np.int32] | None, NDArray[np.int32], NDArray[Any] | None]:
    """`_sort_block` by one sort of distinct uint32 items, the stable order twice as fast as
    int64 items. An item's fields, high to low: the step, the share rank (``rank_bits``), the
    position in the step (``pos_bits``)."""
    size = seg.shape[0]
    t = np.arange(size, dtype=np.int32) - np.repeat(rel.astype(np.int32), lens)
    items = seg.astype(np.uint32) << (rank_bits + pos_bits)
    items |= keys.astype(np.uint32) << pos_bits
    items |= t.astype(np.uint32)
    items.sort()
    sorted_ranks = None
    if ranker.rank_nodes is not None:
        sorted_ranks = (items >> pos_bits) & ((1 << rank_bits) - 1)
    srt = None  # needed for the order, or for the weights when a rank is not one pair
    if need_order or sorted_ranks is None:
        # block position: the step's first position (arange - t) plus position in step
        srt = (items & ((1 << pos_bits) - 1)).astype(np.int32)
        srt += np.arange(size, dtype=np.int32)
        srt -= t
    return srt, t, sorted_ranks


def _block_totals(
    ln: NDArray[np.integer[Any]],
    le: NDArray[np.integer[Any]],
    key: NDArray[np.int32],
    srt: NDArray[np.int32] | NDArray[np.intp] | None,
    sorted_ranks: NDArray[Any] | None,
    ranker: _ShareRanks | None,
    rows: int,
    n_batches: int,
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Real node and edge totals (int64) of the ``n_batches`` batches of a dealt block
    (``key``: each sorted position's batch), from one weighted count ``n * 2**shift + e``
    where every total is exact in it (below `_EXACT_FLOAT`), else from two counts. ``rows``:
    most graphs a batch holds; ``ranker``: the share ranks where the keys were ranks (their
    bounds are the table's: no scan of the block)."""
    if ranker is not None:
        top_n, top_e, nonneg = ranker.top_n, ranker.top_e, True
    else:
        top_n, top_e = int(ln.max()), int(le.max())
        nonneg = min(int(ln.min()), int(le.min())) >= 0
    shift = max(1, top_e * rows).bit_length()
    if nonneg and (top_n * rows + 1) << shift < _EXACT_FLOAT:
        if sorted_ranks is not None:  # the weights of the ranks, looked up in a small table
            rank_n, rank_e = _rank_sizes(ranker)
            w = rank_n * float(1 << shift)
            w += rank_e
            w = w[sorted_ranks]
        else:
            assert srt is not None  # (sorted positions are computed where ranks are not)
            w = ln * float(1 << shift)  # in dataset order (contiguous), then one gather
            w += le
            w = w[srt]
        both = np.bincount(key, weights=w, minlength=n_batches)
        del w
        bn = (both // (1 << shift)).astype(np.int64)
        return bn, (both - bn * float(1 << shift)).astype(np.int64)
    sn: NDArray[np.integer[Any]]
    se: NDArray[np.integer[Any]]
    if srt is None:
        rank_n, rank_e = _rank_sizes(ranker)
        sn, se = rank_n[sorted_ranks], rank_e[sorted_ranks]
    else:
        sn, se = ln[srt], le[srt]
    bn = np.bincount(key, weights=sn, minlength=n_batches).astype(np.int64)  # < 2**53
    return bn, np.bincount(key, weights=se, minlength=n_batches).astype(np.int64)


def _rank_sizes(ranker: _ShareRanks | None) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The node and edge counts of each share rank, where a rank is one ``(n, e)`` pair (the
    case where `_sort_u32_items` returns sorted ranks)."""
    assert ranker is not None and ranker.rank_nodes is not None and ranker.rank_edges is not None
    return ranker.rank_nodes, ranker.rank_edges
