"""The dealings of `balanced_pack`: the graphs, sorted by decreasing size, dealt to ``P`` packs
as a grid ``[P, C]`` of sorted-bin indices (``-1`` = empty). Snake order (`SnakeDealer`), the
two-resource dealing for heavy tails (`SlotsDealer`) and the large graphs packed first with
the small ones dealt around them (`PreloadedDealer`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from .._exact import decimal, ratio_order
from . import _memory

__all__ = [
    "Dealer",
    "PreloadedDealer",
    "SlotsDealer",
    "SnakeDealer",
    "bin_dtype",
    "deal_snake",
    "row_chunks",
]


def bin_dtype(num_bins: int) -> type[np.signedinteger[Any]]:
    """The narrowest of int16/int32/int64 holding bin indices ``0..num_bins - 1`` and ``-1``."""
    return np.int16 if num_bins <= 2**15 else (np.int32 if num_bins <= 2**31 else np.int64)


def row_chunks(rows: int, width: int) -> Iterator[tuple[int, int]]:
    """``(p0, p1)`` ranges of rows holding about `DEAL_ROWS` entries of ``width`` columns each."""
    step = max(1, _memory.DEAL_ROWS // max(int(width), 1))
    for p0 in range(0, rows, step):
        yield p0, min(rows, p0 + step)


def deal_snake(end: NDArray[np.int64], P: int) -> np.ndarray:
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


@dataclass(frozen=True)
class SnakeDealer:
    """Sorted graphs dealt in snake order (`deal_snake`); ``end``: cumulative counts of the sorted
    bins."""

    end: np.ndarray

    def deal(self, P: int) -> np.ndarray:
        return deal_snake(self.end, P)


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


class Dealer(Protocol):
    """A way to deal the sorted graphs to ``P`` packs: ``deal(P)`` returns a grid ``[P', C]``
    of sorted-bin indices (``-1`` = empty), ``P' >= P``."""

    def deal(self, P: int) -> np.ndarray: ...
