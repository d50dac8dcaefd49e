"""Planner work that depends on the sizes and the options only, kept across one schedule's
epochs.

Packing strategies (``pack-lpf``, ``pack-spf``, ``buckets``) pack the (nodes, edges) histogram
into packs that depend on the sizes and the options, not on the epoch: each epoch only deals the
graphs of every size bin to their slots and shuffles the order. ``kk``'s batches are the same
every epoch (only their order changes); ``dynamic``'s tight shape comes from a seed-only pass.
The loaders' schedule (`graphbatch._schedule.EpochSchedule`) plans every epoch of the same sizes
with the same options; within ``with planning_memo(memo):`` a planner keeps such work in
``memo`` (`memo_for`) and takes it from there in later epochs, so an epoch costs its dealing
only. Plans are the same with or without a memo (tests/planners/test_plan_memo.py); a memo
serves only requests for the very sizes object it was made for (never a chunk's or another
table's).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

import numpy as np

from .._sizes import GraphSizes
from ._registry import PlanRequest

__all__ = [
    "MAX_ENTRIES",
    "PlanMemo",
    "memo_for",
    "once_per_schedule",
    "planning_memo",
    "request_key",
]

T = TypeVar("T")

#: Results a memo keeps (the oldest goes first): a schedule plans one configuration, or a few
#: (a world size besides 1), so a handful suffices and memory stays bounded.
MAX_ENTRIES = 4


class PlanMemo:
    """Results of planner work over ``sizes`` (each about as large as the sizes' arrays), by
    key: what the work depends on besides the sizes (strategy, options, budget, ranks)."""

    def __init__(self, sizes: GraphSizes) -> None:
        self.sizes = sizes
        self._items: dict[Hashable, Any] = {}
        self.hits = 0

    def get(self, key: Hashable, make: Callable[[], T]) -> T:
        """The result kept under ``key``, else ``make()``'s (kept)."""
        if key in self._items:
            self.hits += 1
            return self._items[key]
        value = make()
        if len(self._items) >= MAX_ENTRIES:
            del self._items[next(iter(self._items))]
        self._items[key] = value
        return value

    def __len__(self) -> int:
        return len(self._items)


_CURRENT: ContextVar[PlanMemo | None] = ContextVar("graphbatch_plan_memo", default=None)


@contextmanager
def planning_memo(memo: PlanMemo | None) -> Iterator[None]:
    """Within the block, planners of requests over ``memo.sizes`` keep and reuse their
    epoch-independent work in ``memo`` (``None``: no memo)."""
    token = _CURRENT.set(memo)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def request_key(req: PlanRequest) -> tuple[Hashable, ...]:
    """What a request's epoch-independent work may depend on besides the sizes and what its
    planner names in its key (budget, heuristic, ...): strategy, ranks, oversize policy, batch
    size, seed and every option. The epoch is left out, by design."""
    return (
        req.strategy,
        req.world_size,
        req.on_oversize,
        req.batch_size,
        req.budget.as_tuple() if req.budget is not None else None,
        req.seed,
        repr(sorted(req.options.items())),
    )


def once_per_schedule(
    req: PlanRequest,
    key: tuple[Hashable, ...],
    make: Callable[[], T],
    arrays: Callable[[T], Iterable[np.ndarray | None]] = lambda value: (),
) -> T:
    """``make()``, epoch-independent work of ``req``'s planner: made once and kept when a
    schedule's `planning_memo` serves ``req`` (under ``key`` -- what the planner's work depends
    on besides `request_key` -- with the ``arrays(value)`` made read-only, so that no epoch can
    change what later epochs take); made afresh otherwise."""
    memo = memo_for(req)
    if memo is None:
        return make()

    def make_kept() -> T:
        value = make()
        for arr in arrays(value):
            if arr is not None:
                arr.flags.writeable = False
        return value

    return memo.get((*key, *request_key(req)), make_kept)


def memo_for(req: PlanRequest) -> PlanMemo | None:
    """The memo of the enclosing `planning_memo` when it was made for ``req``'s sizes."""
    memo = _CURRENT.get()
    return memo if memo is not None and memo.sizes is req.sizes else None
