"""The strategy registry: name -> planner function, with the options each accepts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._budget import Budget, estimate_budget
from .._errors import InputError, UnknownNameError
from .._plan import BatchPlan
from .._random import epoch_rng, seed_rng
from .._sizes import GraphSizes

__all__ = ["PlanRequest", "Strategy", "register", "get_strategy", "strategy_names"]

#: The values of ``on_oversize``: what happens to a graph that does not fit the budget alone
#: (raise, leave it out, or give it a batch of its own).
OVERSIZE_POLICIES = ("error", "skip", "own_batch")


@dataclass(frozen=True)
class PlanRequest:
    """Everything a planner receives: sizes, budget inputs, seeds, oversize policy, options."""

    sizes: GraphSizes
    strategy: str
    batch_size: int | None
    budget: Budget | None
    seed: int
    epoch: int
    shuffle: bool
    on_oversize: str
    options: dict[str, Any] = field(default_factory=dict)
    #: Ranks the plan will be dealt to (`planners._distributed`); strategies may choose a
    #: number of batches that is a multiple of it.
    world_size: int = 1

    def batch_count_for_ranks(self, batches: int, graphs: int) -> int:
        """``batches`` rounded up to a multiple of ``world_size`` (no padding-only batch),
        unless that needs more batches than there are ``graphs``."""
        r = self.world_size
        up = -(-int(batches) // r) * r
        return up if up <= graphs else int(batches)

    def epoch_rng(self) -> np.random.Generator:
        """Generator for this epoch's random choices (from ``(seed, epoch)``)."""
        return epoch_rng(self.seed, self.epoch)

    def seed_rng(self) -> np.random.Generator:
        """Generator for run-wide choices (from ``seed`` only): budgets, shapes."""
        return seed_rng(self.seed)

    def order(self, rng: np.random.Generator | None = None) -> np.ndarray:
        """Graph indices in this epoch's order: a permutation, or ``arange`` without shuffle."""
        n = len(self.sizes)
        if not self.shuffle:
            return np.arange(n, dtype=np.int64)
        return (rng or self.epoch_rng()).permutation(n).astype(np.int64, copy=False)

    def option(self, name: str, default: Any) -> Any:
        return self.options.get(name, default)

    def require_batch_size(self) -> int:
        if self.batch_size is None:
            raise InputError(f"strategy {self.strategy!r} needs batch_size")
        return self.batch_size

    def fixed_batch_size(self, why: str) -> int:
        """``batch_size`` (>= 2) for strategies that take a fixed number of graphs per batch.

        ``why`` completes "strategy X ..." in the error raised when a node/edge budget is given.
        """
        if self.budget is not None:
            raise InputError(
                f"strategy {self.strategy!r} {why}; give batch_size, not a node/edge budget"
            )
        bs = self.require_batch_size()
        if bs < 2:
            raise InputError(
                f"batch_size = {bs} leaves no room for the padding graph; it must be >= 2"
            )
        return bs

    def resolve_budget(self) -> Budget:
        """The explicit budget, else Algorithm 1's estimate from ``batch_size`` (fixed per seed).

        Options ``sample_size`` (graphs sampled, default 1000, ``None`` = all) and ``multiple``
        (rounding, default 64) tune the estimate.
        """
        if self.budget is not None:
            return self.budget
        if self.batch_size is None:
            raise InputError(
                f"strategy {self.strategy!r} needs a budget (max nodes/edges/graphs) "
                "or a batch_size to estimate one from"
            )
        return estimate_budget(
            self.sizes,
            self.batch_size,
            rng=self.seed_rng(),
            sample_size=self.option("sample_size", 1000),
            multiple=self.option("multiple", 64),
        )


@dataclass(frozen=True)
class Strategy:
    """A registered planning strategy."""

    name: str
    func: Callable[[PlanRequest], BatchPlan]
    options: tuple[str, ...]
    description: str
    fixed_shape: bool
    uses_budget: bool


_REGISTRY: dict[str, Strategy] = {}


def register(
    name: str,
    *,
    description: str,
    options: tuple[str, ...] = (),
    fixed_shape: bool = False,
    uses_budget: bool = True,
) -> Callable[[Callable[[PlanRequest], BatchPlan]], Callable[[PlanRequest], BatchPlan]]:
    """Decorator registering ``func(request) -> BatchPlan`` under ``name``.

    ``fixed_shape``: the strategy emits one padded shape (barring ``own_batch`` graphs).
    ``uses_budget``: it accepts a node/edge/graph budget (else only ``batch_size``).
    """

    def deco(func: Callable[[PlanRequest], BatchPlan]) -> Callable[[PlanRequest], BatchPlan]:
        if name in _REGISTRY:
            raise InputError(f"strategy {name!r} registered twice")
        _REGISTRY[name] = Strategy(
            name, func, tuple(options), description, fixed_shape, uses_budget
        )
        return func

    return deco


def get_strategy(name: str) -> Strategy:
    """The strategy called ``name``; unknown names raise `UnknownNameError` (a ``ValueError``)
    listing the known ones."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise UnknownNameError(
            f"unknown strategy {name!r}; known strategies: {', '.join(strategy_names())}"
        ) from None


def strategy_names() -> list[str]:
    """Registered strategy names, in registration order."""
    return list(_REGISTRY)
