"""Every registered strategy on one budget: the numbers people choose a strategy by.

`compare_strategies` plans one epoch with each strategy (and listed variants such as buckets with
K = 2 and 4) for the same size table, batch size and seed, and returns one row per run. The set of
runs is built from the strategy registry, so a newly registered strategy appears automatically.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._api import plan as _plan
from .._budget import Budget, estimate_budget
from .._errors import USER_ERRORS, InputError, InputTypeError
from .._plan import BatchPlan, PlanStats
from .._random import seed_rng
from .._sizes import GraphSizes
from .._validate import MAX_SHAPE, MAX_WORLD_SIZE, as_positive_int
from ..planners import get_strategy, strategy_names

__all__ = [
    "COMPARE_COLUMNS",
    "DEFAULT_VARIANTS",
    "Comparison",
    "StrategyResult",
    "Variant",
    "compare_columns",
    "compare_strategies",
    "comparison_variants",
]


#: ``(row key, short header)`` of the comparison table, in display order.
COMPARE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("label", "strategy"),
    ("node_efficiency", "node eff"),
    ("edge_efficiency", "edge eff"),
    ("num_batches", "batches"),
    ("lower_bound", "lower bound"),
    ("batches_over_bound", "batches/bound"),
    ("distinct_shapes", "shapes"),
    ("graphs_per_batch_mean", "graphs/batch"),
    ("graphs_per_batch_min", "min g/b"),
    ("graphs_per_batch_max", "max g/b"),
    ("cost_max", "max batch cost"),
    ("cost_max_over_mean", "max/mean cost"),
    ("plan_seconds", "plan s"),
)

#: Extra columns for distributed comparisons (world size > 1).
DISTRIBUTED_COLUMNS: tuple[tuple[str, str], ...] = (
    ("num_steps", "steps"),
    ("step_node_imbalance_max", "max step node imb."),
    ("padding_only_batches", "pad-only batches"),
)


def compare_columns(world_size: int = 1) -> tuple[tuple[str, str], ...]:
    """Columns of the comparison table; distributed ones are added for ``world_size > 1``."""
    if world_size > 1:
        return COMPARE_COLUMNS[:-1] + DISTRIBUTED_COLUMNS + COMPARE_COLUMNS[-1:]
    return COMPARE_COLUMNS


@dataclass(frozen=True)
class Variant:
    """One run of a comparison: a display ``label``, the ``strategy`` name and its ``options``."""

    label: str
    strategy: str
    options: dict[str, Any] = field(default_factory=dict)


#: Runs listed explicitly, in display order; only those whose strategy is registered are used.
#: Registered strategies missing here are appended with default options (label = name).
DEFAULT_VARIANTS: tuple[Variant, ...] = (
    Variant("static-constant", "static-constant"),
    Variant("static-64", "static-64"),
    Variant("static-pow2", "static-pow2"),
    Variant("dynamic", "dynamic"),
    Variant("pack-lpf", "pack-lpf"),
    Variant("pack-spf", "pack-spf"),
    Variant("buckets K=2", "buckets", {"num_shapes": 2}),
    Variant("buckets K=4", "buckets", {"num_shapes": 4}),
)


def comparison_variants(
    variants: Sequence[Variant] = DEFAULT_VARIANTS, names: Sequence[str] | None = None
) -> list[Variant]:
    """The runs of a comparison: listed ``variants`` whose strategy is registered, then every other
    registered strategy (``names``, default `strategy_names()`) once with default options."""
    registered = list(strategy_names() if names is None else names)
    known = set(registered)
    out = [v for v in variants if v.strategy in known]
    covered = {v.strategy for v in out}
    out.extend(Variant(name, name) for name in registered if name not in covered)
    labels = [v.label for v in out]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise InputError(f"comparison labels must be unique, got duplicates {dup}")
    return out


@dataclass
class StrategyResult:
    """Outcome of one run: the plan's stats, or the error it raised.

    Batch cost figures are the plan's own (`BatchPlan.stats`: ``cost_max``, ``cost_mean``,
    ``cost_max_over_mean`` over batches holding graphs; ``cost_source`` says whether cost is the
    graphs' ``n_bytes`` or the linear model nodes + edges). ``plan_seconds`` is the wall time of
    `graphbatch.plan`. ``error`` holds the message when the strategy failed on this input.
    """

    variant: Variant
    stats: PlanStats | None = None
    plan_seconds: float | None = None
    graphs_per_batch: np.ndarray | None = None
    plan: BatchPlan | None = None
    error: str | None = None

    @property
    def label(self) -> str:
        return self.variant.label

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def cost_unit(self) -> str:
        """``"bytes"`` when batch cost comes from ``n_bytes``, else the linear model's name."""
        if self.stats is None:
            return ""
        if self.stats.cost_source == "n_bytes":
            return "bytes"
        a, b = self.stats.cost_per_node, self.stats.cost_per_edge
        return "nodes+edges" if (a, b) == (1.0, 1.0) else f"{a:g}*nodes+{b:g}*edges"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready row: label, strategy, options, all `PlanStats` fields, time, error."""
        out: dict[str, Any] = {
            "label": self.variant.label,
            "strategy": self.variant.strategy,
            "options": dict(self.variant.options),
        }
        if self.stats is not None:
            out.update(self.stats.as_dict())
            out["strategy"] = self.variant.strategy
        out["cost_unit"] = self.cost_unit
        out["plan_seconds"] = self.plan_seconds
        out["error"] = self.error
        return out


@dataclass
class Comparison:
    """All runs of one comparison, with the shared inputs (``budget`` is the one shared budget
    handed to every strategy that takes a node/edge budget)."""

    batch_size: int
    world_size: int
    seed: int
    on_oversize: str
    budget: Budget
    results: list[StrategyResult]
    #: The limit search (`graphbatch.packing.search_limits`, graph cap = batch size) when asked.
    limits: Any = None

    def rows(self) -> list[dict[str, Any]]:
        return [r.as_dict() for r in self.results]

    @property
    def cost_unit(self) -> str:
        """Batch-cost unit(s) of the successful runs, e.g. ``"nodes+edges"`` or ``"bytes"``."""
        units = sorted({r.cost_unit for r in self.results if r.ok})
        return " / ".join(units) if units else "-"

    def columns(self) -> tuple[tuple[str, str], ...]:
        """``(row key, header)`` of the comparison table for this world size."""
        return compare_columns(self.world_size)

    def as_dict(self) -> dict[str, Any]:
        out = {
            "batch_size": self.batch_size,
            "world_size": self.world_size,
            "seed": self.seed,
            "on_oversize": self.on_oversize,
            "budget": list(self.budget.as_tuple()),
            "results": self.rows(),
        }
        if self.limits is not None:
            out["limits"] = self.limits.as_dict()
        return out


def compare_strategies(
    sizes: GraphSizes,
    batch_size: int,
    *,
    world_size: int = 1,
    seed: int = 0,
    on_oversize: str = "own_batch",
    variants: Sequence[Variant] | None = None,
    keep_plans: bool = False,
    progress: Callable[[int, int, Variant], None] | None = None,
    search_limits: bool = False,
) -> Comparison:
    """Plan one epoch with every run of `comparison_variants` on one budget.

    The budget is Algorithm 1's estimate for ``batch_size`` (seeded by ``seed``), computed once and
    given to every strategy that takes a budget; static strategies get ``batch_size``. Oversize
    graphs follow ``on_oversize`` (default ``"own_batch"`` so every strategy yields a plan). A run
    whose strategy refuses the input (``graphbatch._errors.USER_ERRORS``) is kept with its
    ``error`` message; other exceptions (bugs) propagate.
    ``progress(i, n, variant)`` is called before run ``i`` of ``n``.
    """
    if not isinstance(sizes, GraphSizes):
        raise InputTypeError(f"sizes must be a GraphSizes, got {type(sizes).__name__}")
    batch_size = as_positive_int(batch_size, "batch_size", MAX_SHAPE)
    world_size = as_positive_int(world_size, "world_size", MAX_WORLD_SIZE)
    budget = estimate_budget(sizes, batch_size, rng=seed_rng(seed))
    runs = comparison_variants(DEFAULT_VARIANTS if variants is None else variants)
    results: list[StrategyResult] = []
    for i, variant in enumerate(runs):
        if progress is not None:
            progress(i, len(runs), variant)
        strat = get_strategy(variant.strategy)
        options = dict(variant.options)
        if "tight_shape" in strat.options:  # the shared budget is the estimate: shapes as
            options.setdefault("tight_shape", True)  # `plan --batch-size` pads them
        try:
            p = _plan(
                sizes,
                variant.strategy,
                batch_size=batch_size,
                budget=budget if strat.uses_budget else None,
                seed=seed,
                on_oversize=on_oversize,
                world_size=world_size,
                **options,
            )
        except USER_ERRORS as exc:  # the strategy refused this input; bugs propagate
            results.append(StrategyResult(variant, error=str(exc)))
            continue
        results.append(
            StrategyResult(
                variant,
                stats=p.stats(),
                plan_seconds=float(p.meta.get("plan_seconds", float("nan"))),
                graphs_per_batch=p.graphs_per_batch.copy(),
                plan=p if keep_plans else None,
            )
        )
    limits = None
    if search_limits:  # the same search as `graphbatch limits` and the report
        from ._limits import search_limits_if_available

        limits = search_limits_if_available(sizes, max_graphs=batch_size)
    return Comparison(
        batch_size=batch_size,
        world_size=world_size,
        seed=seed,
        on_oversize=on_oversize,
        budget=budget,
        results=results,
        limits=limits,
    )
