"""Balanced dealing: fill a fixed number of packs evenly, then repair. For limits that hold many
graphs, where best fit by decreasing size leaves the last packs short of graphs or of one
component.

Graphs sorted by decreasing size ``s = wn * nodes/node_limit + we * edges/edge_limit`` (quantised
to int64 once, `_dealing_key`: loads are exact integer sums) are dealt
to ``P`` packs one row of ``P`` graphs at a time; within a row the largest graph goes to the
pack with the smallest load (``s`` summed), the next largest to the next, and so on (longest
processing time first, applied row by row, so each pack gets one graph of every size rank and
the load spread stays about one of the last, smallest graphs). The weights ``wn, we`` favour the
component whose total is closer to its capacity. Packs over a limit give back graphs (the
smallest one that cures the excess, else the largest) which are then packed best-fit into the
room left in all packs, opening new packs only when needed. ``P`` starts at the lower bound and
a few slightly larger values are tried; the fewest packs win.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._errors import InputError
from .._exact import decimal, quantise_linear, ratio_order, share_keys, top_indices
from . import _memory
from ._greedy import batches_lower_bound
from ._histogram import pack_histogram
from ._patterns import PackPatterns

__all__ = ["balanced_pack", "BalancedPacking", "DEFAULT_TRIES"]

#: Extra packs tried above the lower bound, as fractions of it.
DEFAULT_TRIES = (0.0, 0.0005, 0.001, 0.003, 0.008)


@dataclass(frozen=True)
class BalancedPacking:
    """Packs as slots: pack ``p`` holds graphs of bins ``slot_bin[offsets[p]:offsets[p+1]]``.

    ``dealt_packs`` is the ``P`` the dealing used; the rest were opened by the repair.
    """

    slot_bin: np.ndarray
    offsets: np.ndarray
    dealt_packs: int

    @property
    def num_packs(self) -> int:
        return int(self.offsets.shape[0] - 1)


def _dealing_key(
    n: NDArray[np.int64],
    e: NDArray[np.int64],
    count: NDArray[np.int64],
    node_limit: int,
    edge_limit: int,
) -> tuple[np.ndarray, int]:
    """Each bin's size as the dealing weighs it, ``wn * n / node_limit + we * e / edge_limit``
    with weights ``w`` the components' totals over their capacities (only their ratio
    matters), quantised once to int64 (`quantise_linear`: integer keys whose sum over the
    table stays below 2**53). Returns the keys and the key of a full pack (its capacity)."""
    cn, ce = max(int(node_limit), 1), max(int(edge_limit), 1)
    tn = sum(int(a) * int(c) for a, c in zip(n.tolist(), count.tolist(), strict=False))
    te = sum(int(a) * int(c) for a, c in zip(e.tolist(), count.tolist(), strict=False))
    fp = quantise_linear(
        Fraction(tn, cn * cn), Fraction(te, ce * ce), tn, te, what="balanced dealing"
    )
    return fp.costs(n, e), fp.cost(cn, ce)


def bin_dtype(num_bins: int) -> type[np.signedinteger[Any]]:
    """The narrowest of int16/int32/int64 holding bin indices ``0..num_bins - 1`` and ``-1``."""
    return np.int16 if num_bins <= 2**15 else (np.int32 if num_bins <= 2**31 else np.int64)


def _row_chunks(rows: int, width: int) -> Iterator[tuple[int, int]]:
    """``(p0, p1)`` ranges of rows holding about `DEAL_ROWS` entries of ``width`` columns each."""
    step = max(1, _memory.DEAL_ROWS // max(int(width), 1))
    for p0 in range(0, rows, step):
        yield p0, min(rows, p0 + step)


def _deal(end: NDArray[np.int64], P: int) -> np.ndarray:
    """Snake dealing of the sorted graphs to P packs: grid [P, R] of sorted-bin indices (-1 =
    empty). Row r (graphs r*P .. r*P+P-1) goes to packs 0..P-1 for even r, P-1..0 for odd r.

    Memory-lean: the grid is a transposed view of an ``[R, P]`` array of the narrowest bin
    dtype (`bin_dtype`), written with no per-graph int64 temporary."""
    N = int(end[-1])
    R = -(-N // P)
    dt = bin_dtype(end.shape[0])
    flat = np.full(R * P, -1, dt)
    flat[:N] = np.repeat(np.arange(end.shape[0], dtype=dt), np.diff(end, prepend=0))
    rounds = flat.reshape(R, P)  # round r: sorted graphs r*P .. r*P+P-1
    step = max(1, _memory.DEAL_ROWS // max(P, 1)) * 2
    for r0 in range(1, R, step):  # odd rounds are dealt from the last pack to the first
        odd = rounds[r0 : r0 + step : 2]
        odd[:] = odd[:, ::-1].copy()
    return rounds.T


def _deal_preloaded(
    small_pos: np.ndarray, pre_slot: np.ndarray, pre_off: np.ndarray, P: int, key: np.ndarray
) -> NDArray[np.int64]:
    """Large graphs first (their own packs, best fit), then the small ones dealt row by row to
    the least loaded packs (longest processing time first per row). Grid [P, C] of sorted-bin
    indices (-1 = empty)."""
    B = pre_off.shape[0] - 1
    sizes = np.diff(pre_off)
    c0 = int(sizes.max()) if B else 0
    grid0 = np.full((P, c0), -1, np.int64)
    if B:
        col = np.arange(pre_slot.shape[0]) - np.repeat(pre_off[:-1], sizes)
        grid0[np.repeat(np.arange(B), sizes), col] = pre_slot
    load = np.zeros(P, np.int64)
    np.add.at(load, np.repeat(np.arange(B), sizes), key[pre_slot])
    m = small_pos.shape[0]
    R = -(-m // P)
    grid1 = np.full((P, R), -1, np.int64)
    for r in range(R):
        b = small_pos[r * P : (r + 1) * P]
        packs = np.argsort(load, kind="stable")[: b.shape[0]]
        grid1[packs, r] = b
        load[packs] += key[b]
    return np.concatenate([grid0, grid1], axis=1)


def _deal_slots(
    big_pos: np.ndarray,
    small_pos: np.ndarray,
    P: int,
    key: np.ndarray,
    cap_key: int,
    graph_limit: int,
    chunks: int = 4,
    near: float = 0.75,
) -> NDArray[np.int64]:
    """Two-resource dealing for heavy tails: large graphs first, spread over the ``P`` packs
    (each to the least loaded pack), then the small ones, largest first, each to a pack with
    the most room (``cap_key`` minus load, in units of ``key``) per free graph slot: packs that
    hold a large graph get the smallest graphs, and every pack fills its graph slots and its
    room together. Vectorised in rounds: a round gives one graph each to up to ``P / chunks``
    of the roomiest packs, only those within ``near`` of the roomiest one's room per slot.
    Graphs left when no pack has a free slot go to the least loaded packs (the repair spills
    them). Keys and loads are integers; rooms per slot are compared as exact ratios
    (`ratio_order`). Grid [P, C] of sorted-bin indices (-1 = empty)."""
    near_f = decimal(near)
    load = np.zeros(P, np.int64)
    used = np.zeros(P, np.int64)
    out_pack: list[np.ndarray] = []
    out_item: list[np.ndarray] = []

    def put(packs: np.ndarray, b: np.ndarray) -> None:
        out_pack.append(packs)
        out_item.append(b)
        load[packs] += key[b]
        used[packs] += 1

    for r in range(0, big_pos.shape[0], P):
        b = big_pos[r : r + P]
        put(np.argsort(load, kind="stable")[: b.shape[0]], b)
    m = small_pos.shape[0]
    i = 0
    while i < m:
        active = np.flatnonzero(used < graph_limit)
        if active.size == 0:
            break
        room = cap_key - load[active]  # over the free slots: the room per slot
        free = graph_limit - used[active]
        take = max(1, active.shape[0] // chunks)
        top = ratio_order(room, free, descending=True)[:take]
        # one graph per pack and round, so only packs close to the roomiest take part
        top = top[: max(1, _leading_at_least(room[top], free[top], near_f))]
        b = small_pos[i : i + top.shape[0]]
        put(active[top[: b.shape[0]]], b)
        i += b.shape[0]
    while i < m:  # no free slot left
        b = small_pos[i : i + P]
        put(np.argsort(load, kind="stable")[: b.shape[0]], b)
        i += b.shape[0]
    packs = np.concatenate(out_pack) if out_pack else np.zeros(0, np.int64)
    items = np.concatenate(out_item) if out_item else np.zeros(0, np.int64)
    o = np.argsort(packs, kind="stable")
    packs, items = packs[o], items[o]
    col = np.arange(packs.shape[0]) - np.searchsorted(packs, packs, "left")
    grid = np.full((P, int(used.max(initial=0))), -1, np.int64)
    grid[packs, col] = items
    return grid


def _leading_at_least(num: np.ndarray, den: np.ndarray, frac: Fraction) -> int:
    """How many leading ratios ``num[i] / den[i]`` (in descending order) are at least ``frac``
    times the first: a binary search with exact integer comparisons."""
    p, q = frac.numerator, frac.denominator
    n0, d0 = int(num[0]), int(den[0])
    lo, hi = 0, num.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if q * int(num[mid]) * d0 >= p * n0 * int(den[mid]):
            lo = mid + 1
        else:
            hi = mid
    return lo


def _loads(
    sn: np.ndarray, se: np.ndarray, grid: np.ndarray
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """Per-pack (row) real nodes, edges and graphs of ``grid`` (int64), chunk by chunk."""
    P = grid.shape[0]
    ln, le, lk = np.empty(P, np.int64), np.empty(P, np.int64), np.empty(P, np.int64)
    for p0, p1 in _row_chunks(P, grid.shape[1]):
        sub = grid[p0:p1]
        present = sub >= 0
        safe = np.where(present, sub, 0)
        ln[p0:p1] = np.where(present, sn[safe], 0).sum(axis=1)
        le[p0:p1] = np.where(present, se[safe], 0).sum(axis=1)
        lk[p0:p1] = present.sum(axis=1)
    return ln, le, lk


def _spread(R: int, K: int) -> np.ndarray:
    """``K`` column indices evenly spread over ``0..R-1`` (both ends included), rounded down:
    ``np.linspace(0, R - 1, K).astype(int)`` in integers."""
    if K == 1:
        return np.zeros(1, np.int64)
    return np.arange(K, dtype=np.int64) * (R - 1) // (K - 1)


def _swap_repair(
    sn: np.ndarray,
    se: np.ndarray,
    grid: np.ndarray,
    limits: tuple[int, int, int],
    rounds: int = 3,
    budget: int = 2_000_000,
    max_cols: int = 8,
) -> np.ndarray:
    """Exchange one graph between each over-limit pack and a pack with room, where one exchange
    brings the first within the limits and keeps the second within them. Each round looks at
    ``max_cols`` of the size ranks of both packs. In place."""
    cn, ce, _ = limits
    ln, le, _ = _loads(sn, se, grid)
    R = grid.shape[1]
    K = min(R, max_cols)
    for rnd in range(rounds):
        # a spread of K columns (graph size ranks), shifted each round
        cols = (_spread(R, K) + rnd) % R
        over = np.flatnonzero((ln > cn) | (le > ce))
        if over.size == 0:
            break
        # room of each pack, the smaller share of its capacities (exact keys); over-full packs
        # never partner
        slack = share_keys(cn - ln, ce - le, cn, ce, "min")
        key = -slack
        key[over] = key.max() + 1  # last
        partners = np.argsort(key, kind="stable")[: over.size]
        ok = (slack[partners] > 0) & ~np.isin(partners, over)
        over, partners = over[ok], partners[ok]
        if over.size == 0:
            break
        chunk = max(1, budget // (K * K))
        swapped = 0
        for s0 in range(0, over.size, chunk):
            a, b = over[s0 : s0 + chunk], partners[s0 : s0 + chunk]
            ga, gb = grid[a][:, cols], grid[b][:, cols]
            pa, pb = ga >= 0, gb >= 0
            an = np.where(pa, sn[np.maximum(ga, 0)], 0)
            ae = np.where(pa, se[np.maximum(ga, 0)], 0)
            bn = np.where(pb, sn[np.maximum(gb, 0)], 0)
            be = np.where(pb, se[np.maximum(gb, 0)], 0)
            dn = an[:, :, None] - bn[:, None, :]
            de = ae[:, :, None] - be[:, None, :]
            valid = (
                pa[:, :, None]
                & pb[:, None, :]
                & ((ln[a] - cn)[:, None, None] <= dn)
                & ((le[a] - ce)[:, None, None] <= de)
                & (dn <= (cn - ln[b])[:, None, None])
                & (de <= (ce - le[b])[:, None, None])
            )
            cost = share_keys(dn, de, cn, ce)  # the exchange's net move, relative to the limits
            flat = cost.reshape(cost.shape[0], -1)
            ok_flat = valid.reshape(valid.shape[0], -1)
            # the smallest valid move: invalid entries above every valid one
            top_cost = flat.max(initial=0) if flat.size else 0
            k = np.argmin(np.where(ok_flat, flat, top_cost + 1), axis=1)
            hit = ok_flat[np.arange(k.shape[0]), k]
            if not hit.any():
                continue
            i, ia, ib = np.flatnonzero(hit), k[hit] // K, k[hit] % K
            xa, xb = ga[i, ia], gb[i, ib]
            grid[a[i], cols[ia]] = xb
            grid[b[i], cols[ib]] = xa
            d_n, d_e = sn[xa] - sn[xb], se[xa] - se[xb]
            ln[a[i]] -= d_n
            le[a[i]] -= d_e
            ln[b[i]] += d_n
            le[b[i]] += d_e
            swapped += i.size
        if swapped == 0:
            break
    return grid


def _spill(
    sn: np.ndarray, se: np.ndarray, grid: np.ndarray, limits: tuple[int, int, int]
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Give back graphs from packs over a limit. Returns (removed bins, grid, loads); ``grid``
    is changed in place. The packs over a limit are handled in chunks of rows (each pack's
    give-backs depend on that pack only)."""
    cn, ce, cg = limits
    ln, le, lk = _loads(sn, se, grid)
    bad_all = np.flatnonzero((ln > cn) | (le > ce) | (lk > cg))
    removed: list[np.ndarray] = []
    R = grid.shape[1]
    for b0, b1 in _row_chunks(bad_all.shape[0], R):
        bad = bad_all[b0:b1]
        sub = grid[bad]
        pres = sub >= 0
        sb = np.where(pres, sub, 0)
        vn = np.where(pres, sn[sb], 0)
        ve = np.where(pres, se[sb], 0)
        rows = np.arange(bad.shape[0])
        for _ in range(R + 1):
            xn = ln[bad] - cn
            xe = le[bad] - ce
            over = (xn > 0) | (xe > 0) | (lk[bad] > cg)
            if not over.any():
                break
            cure = pres & (vn >= xn[:, None]) & (ve >= xe[:, None])
            has = cure.any(axis=1)
            # smallest curing graph: rows go from large to small, take the last curing column
            last = R - 1 - np.argmax(cure[:, ::-1], axis=1)
            first = np.argmax(pres, axis=1)
            col = np.where(has, last, first)
            sel = over
            rr, cc = rows[sel], col[sel]
            removed.append(sub[rr, cc])
            ln[bad[rr]] -= vn[rr, cc]
            le[bad[rr]] -= ve[rr, cc]
            lk[bad[rr]] -= 1
            pres[rr, cc] = False
            sub[rr, cc] = -1
        grid[bad] = sub
    out = np.concatenate(removed) if removed else np.zeros(0, np.int64)
    return out, grid, (ln, le, lk)


@dataclass(frozen=True)
class SnakeDealer:
    """Sorted graphs dealt in snake order (`_deal`); ``end``: cumulative counts of the sorted
    bins."""

    end: np.ndarray

    def deal(self, P: int) -> np.ndarray:
        return _deal(self.end, P)


@dataclass(frozen=True)
class SlotsDealer:
    """Two-resource dealing for heavy tails (`_deal_slots`): large graphs ``big_pos`` spread
    first, then the small ones ``small_pos`` by room per free graph slot; ``key`` is each sorted
    bin's load, ``cap_key`` a pack's capacity in that unit."""

    big_pos: np.ndarray
    small_pos: np.ndarray
    key: np.ndarray
    cap_key: int
    graph_limit: int

    def deal(self, P: int) -> np.ndarray:
        return _deal_slots(
            self.big_pos, self.small_pos, P, self.key, self.cap_key, self.graph_limit
        )


@dataclass(frozen=True)
class PreloadedDealer:
    """Large graphs packed best-fit first (packs ``pre_slot``/``pre_off``), the small ones
    ``small_pos`` dealt around them (`_deal_preloaded`); uses at least the preloaded packs."""

    small_pos: np.ndarray
    pre_slot: np.ndarray
    pre_off: np.ndarray
    key: np.ndarray

    def deal(self, P: int) -> np.ndarray:
        P = max(P, self.pre_off.shape[0] - 1)
        return _deal_preloaded(self.small_pos, self.pre_slot, self.pre_off, P, self.key)


class _Dealer(Protocol):
    def deal(self, P: int) -> np.ndarray: ...


#: The spilled graphs' repair in `_try`: ``(patterns, base, room)`` of `pack_histogram` over
#: the room left in the dealt packs ``room``.
_Repair = tuple[PackPatterns, NDArray[np.int64], NDArray[np.intp]]


def _try(
    sn: NDArray[np.int64],
    se: NDArray[np.int64],
    P: int,
    limits: tuple[int, int, int],
    heuristic: str,
    dealer: _Dealer,
    max_room: int = 2048,
) -> tuple[int, tuple[np.ndarray, _Repair | None]]:
    cn, ce, cg = limits
    grid = dealer.deal(P)
    P = grid.shape[0]
    grid = _swap_repair(sn, se, grid, limits)
    removed, grid, (ln, le, lk) = _spill(sn, se, grid, limits)
    if removed.size == 0:
        return P, (grid, None)
    spill_count = np.bincount(removed, minlength=sn.shape[0])
    rem_n, rem_e, rem_k = cn - ln, ce - le, cg - lk
    room = np.flatnonzero((rem_k > 0) & (rem_n >= sn[removed].min()) & (rem_e >= se[removed].min()))
    if room.size > max_room:  # offer the packs with the most room (keeps the search short)
        slack = share_keys(rem_n[room], rem_e[room], cn, ce, "min")
        room = np.sort(room[top_indices(slack, max_room)])
    pats, base = pack_histogram(
        sn,
        se,
        spill_count,
        node_limit=cn,
        edge_limit=ce,
        graph_limit=cg,
        heuristic=heuristic,
        fit="best",
        initial=(rem_n[room], rem_e[room], rem_k[room]),
        return_base=True,
    )
    new = int(pats.count[base < 0].sum())
    return P + new, (grid, (pats, base, room))


def balanced_pack(
    n: ArrayLike,
    e: ArrayLike,
    count: ArrayLike,
    *,
    node_limit: int,
    edge_limit: int,
    graph_limit: int,
    heuristic: str = "product",
    tries: Sequence[float] = DEFAULT_TRIES,
) -> BalancedPacking:
    """Pack a histogram by balanced dealing into ``P`` packs plus repair (see module doc).

    Limits are real-content capacities per pack; every bin must fit them alone. Returns a
    `BalancedPacking` whose ``slot_bin`` refers to the input bins.
    """
    n = np.asarray(n, dtype=np.int64)
    e = np.asarray(e, dtype=np.int64)
    count = np.asarray(count, dtype=np.int64)
    node_limit, edge_limit, graph_limit = int(node_limit), int(edge_limit), int(graph_limit)
    if node_limit < 0 or edge_limit < 0 or graph_limit < 1:
        raise InputError(
            f"limits must be positive, got {node_limit} nodes / {edge_limit} edges "
            f"/ {graph_limit} graphs"
        )
    if n.shape[0] and ((n > node_limit) | (e > edge_limit))[count > 0].any():
        raise InputError(f"a bin exceeds the limits {node_limit} nodes / {edge_limit} edges")
    key, cap_key = _dealing_key(n, e, count, node_limit, edge_limit)
    order = np.lexsort((-e, -n, -key))
    order = order[count[order] > 0]
    sn, se, sc = n[order], e[order], count[order]
    end = np.cumsum(sc)
    N = int(end[-1]) if end.size else 0
    if N == 0:
        return BalancedPacking(np.zeros(0, np.int64), np.zeros(1, np.int64), 0)
    limits = (node_limit, edge_limit, graph_limit)
    lb = batches_lower_bound(
        sum(int(a) * int(c) for a, c in zip(sn.tolist(), sc.tolist(), strict=False)),
        sum(int(a) * int(c) for a, c in zip(se.tolist(), sc.tolist(), strict=False)),
        N,
        node_limit,
        edge_limit,
        graph_limit,
    )
    # with graphs over a tenth of a limit, a second variant packs those first (best fit) and
    # deals the rest around them; the variant with fewer packs wins
    big = (sn * 10 > node_limit) | (se * 10 > edge_limit)
    dealers: list[_Dealer] = [SnakeDealer(end)]
    if big.any():
        big_count = np.where(big, sc, 0)
        pats = pack_histogram(
            sn,
            se,
            big_count,
            node_limit=node_limit,
            edge_limit=edge_limit,
            graph_limit=graph_limit,
            heuristic=heuristic,
            fit="best",
        )
        pre_slot, pre_off = pats.slots()
        key_s = key[order]
        small_pos = np.repeat(np.flatnonzero(~big), sc[~big])
        dealers = [
            SlotsDealer(
                np.repeat(np.flatnonzero(big), sc[big]), small_pos, key_s, cap_key, graph_limit
            ),
            SnakeDealer(end),
            PreloadedDealer(small_pos, pre_slot, pre_off, key_s),
        ]
    best: tuple[int, int, tuple[np.ndarray, _Repair | None]] | None = None
    # heavy tails: the two-resource dealing first; a packing at the lower bound ends the search
    for dealer in dealers:
        if best is not None and best[0] <= lb:
            break
        prev = None
        for try_f in tries:
            f = decimal(try_f)
            P = min(lb + -(-lb * f.numerator // f.denominator), N)
            if prev is not None and prev <= P:
                break
            total, detail = _try(sn, se, P, limits, heuristic, dealer)
            if prev is not None and total >= prev:
                break  # more dealt packs stopped paying off
            prev = total
            if best is None or total < best[0]:
                best = (total, P, detail)
            if total == P:
                break
    assert best is not None  # (at least one dealer and one try)
    total, P, (grid, repair) = best
    P = grid.shape[0]
    extra = None
    newp = None
    if repair is not None:
        pats, base, room = repair
        # graphs the repair put into dealt packs become extra columns of the grid
        items = np.repeat(pats.bins, pats.copies)
        item_pat = np.repeat(
            np.repeat(np.arange(pats.num_patterns), np.diff(pats.offsets)), pats.copies
        )
        keep = base[item_pat] >= 0
        add_item, add_pack = items[keep], room[base[item_pat[keep]]]
        if add_pack.size:
            o = np.argsort(add_pack, kind="stable")
            add_pack, add_item = add_pack[o], add_item[o]
            col = np.arange(add_pack.shape[0]) - np.searchsorted(add_pack, add_pack, "left")
            extra = np.full((P, int(col.max()) + 1), -1, grid.dtype)
            extra[add_pack, col] = add_item
        if (base < 0).any():
            sub = np.flatnonzero(base < 0)
            lens = np.diff(pats.offsets)
            entry = np.repeat(base < 0, lens)
            newp = PackPatterns.build(
                pats.bins[entry],
                pats.copies[entry],
                np.concatenate([[0], np.cumsum(lens[sub])]),
                pats.count[sub],
                sn,
                se,
            )
    slot_bin, offsets = _grid_slots(grid, extra, order, n.shape[0], newp)
    return BalancedPacking(slot_bin, offsets, P)


def _grid_slots(
    grid: np.ndarray,
    extra: np.ndarray | None,
    order: np.ndarray,
    num_bins: int,
    newp: PackPatterns | None,
) -> tuple[np.ndarray, NDArray[np.int64]]:
    """Slots of the dealt packs (``grid`` rows, then the ``extra`` columns of each row, empty
    entries skipped) and of the repair's new packs ``newp``, as input bins (``order`` maps the
    sorted bins to them) of the narrowest dtype (`bin_dtype`); built chunk by chunk of rows.
    Returns ``(slot_bin, int64 offsets)``."""
    P = grid.shape[0]
    width = grid.shape[1] + (0 if extra is None else extra.shape[1])
    sizes = np.empty(P, np.int64)
    for p0, p1 in _row_chunks(P, width):
        sizes[p0:p1] = (grid[p0:p1] >= 0).sum(axis=1)
        if extra is not None:
            sizes[p0:p1] += (extra[p0:p1] >= 0).sum(axis=1)
    sb2, off2 = newp.slots() if newp is not None else (np.zeros(0, np.int64), np.zeros(1, np.int64))
    offsets = np.zeros(P + off2.shape[0], np.int64)
    np.cumsum(sizes, out=offsets[1 : P + 1])
    offsets[P + 1 :] = offsets[P] + off2[1:]
    dt = bin_dtype(num_bins)
    to_bin = order.astype(dt)
    slot_bin = np.empty(int(offsets[-1]), dt)
    for p0, p1 in _row_chunks(P, width):
        rows = grid[p0:p1] if extra is None else np.concatenate([grid[p0:p1], extra[p0:p1]], axis=1)
        flat = rows.reshape(-1)
        slot_bin[offsets[p0] : offsets[p1]] = to_bin[flat[flat >= 0]]
    slot_bin[offsets[P] :] = to_bin[sb2]
    return slot_bin, offsets
