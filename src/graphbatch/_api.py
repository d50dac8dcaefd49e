"""`graphbatch.plan`: the single entry point from a size table to a `BatchPlan`."""

from __future__ import annotations

import time
from typing import Any

from ._budget import Budget
from ._errors import InputError, InputTypeError
from ._plan import BatchPlan
from ._sizes import GraphSizes
from ._validate import MAX_SHAPE, MAX_WORLD_SIZE, as_bool, as_nonnegative_int, as_positive_int
from .planners import OVERSIZE_POLICIES, PlanRequest, get_strategy, plan_for_ranks

__all__ = ["plan"]


def plan(
    sizes: GraphSizes,
    strategy: str,
    *,
    batch_size: int | None = None,
    budget: Budget | tuple[int, int, int] | None = None,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
    on_oversize: str = "error",
    world_size: int = 1,
    **options: Any,
) -> BatchPlan:
    """Plan one epoch of batches for the graphs in ``sizes`` with the strategy ``strategy``.

    ``batch_size`` counts graphs per padded batch including one padding graph; ``budget`` is an
    explicit padded shape ``(n_node, n_edge, n_graph)`` for budget-based strategies. The same
    ``(sizes, strategy, options, seed, epoch)`` always gives the same plan; the graph order changes
    with ``epoch`` unless ``shuffle=False``. ``on_oversize`` decides what happens to a graph too
    large for the budget: ``"error"`` (default), ``"skip"`` (listed in ``plan.skipped``) or
    ``"own_batch"`` (a batch of its own with an enlarged shape). Strategy-specific ``options``
    are listed by ``graphbatch.strategies()``; unknown ones raise ``TypeError``.

    ``world_size > 1`` makes a distributed plan for any strategy: steps of ``world_size``
    batches of equal padded shape (one per rank), every rank the same number of steps, every
    graph exactly once (a rank may get a padding-only batch), real load balanced within a step;
    see `BatchPlan.rank_batches` and docs/balancing.md.
    """
    if not isinstance(sizes, GraphSizes):
        raise InputTypeError(f"sizes must be a GraphSizes, got {type(sizes).__name__}")
    if not isinstance(strategy, str):
        raise InputTypeError(f"strategy must be a name (str), got {strategy!r}")
    strat = get_strategy(strategy)
    unknown = sorted(set(options) - set(strat.options))
    if unknown:
        accepted = ", ".join(strat.options) or "none"
        raise InputTypeError(
            f"strategy {strategy!r} takes no option(s) {', '.join(unknown)} (accepts: {accepted})"
        )
    if budget is not None:
        if not strat.uses_budget:
            raise InputError(
                f"strategy {strategy!r} derives padded shapes from batch contents; "
                "give batch_size, not a node/edge budget"
            )
        budget = Budget.coerce(budget)
    if batch_size is not None:
        batch_size = as_positive_int(batch_size, "batch_size", MAX_SHAPE)
        if batch_size < 2:
            raise InputError(
                f"batch_size = {batch_size} leaves no room for the padding graph; it must be >= 2"
            )
    if on_oversize not in OVERSIZE_POLICIES:
        raise InputError(
            f"on_oversize must be one of {', '.join(OVERSIZE_POLICIES)}, got {on_oversize!r}"
        )
    request = PlanRequest(
        sizes=sizes,
        strategy=strategy,
        batch_size=batch_size,
        budget=budget,
        seed=as_nonnegative_int(seed, "seed"),
        epoch=as_nonnegative_int(epoch, "epoch"),
        shuffle=as_bool(shuffle, "shuffle"),
        on_oversize=on_oversize,
        options=dict(options),
        world_size=as_positive_int(world_size, "world_size", MAX_WORLD_SIZE),
    )
    t0 = time.perf_counter()
    result = plan_for_ranks(strat.func, request)
    result.meta["plan_seconds"] = time.perf_counter() - t0
    return result
