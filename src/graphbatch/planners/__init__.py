"""Planning strategies. Importing this package registers every built-in strategy."""

from ._assemble import OversizeSplit, batch_totals, finish_plan, split_oversize
from ._dynamic import (
    budget_lower_bound,
    greedy_fill,
    greedy_offsets,
    greedy_offsets_reference,
    plan_dynamic,
)
from ._registry import PlanRequest, Strategy, get_strategy, register, strategy_names
from ._static import plan_static_constant, plan_static_multiple, plan_static_pow2, static_offsets

__all__ = [
    "OversizeSplit",
    "PlanRequest",
    "Strategy",
    "batch_totals",
    "budget_lower_bound",
    "finish_plan",
    "get_strategy",
    "greedy_fill",
    "greedy_offsets",
    "greedy_offsets_reference",
    "plan_dynamic",
    "plan_static_constant",
    "plan_static_multiple",
    "plan_static_pow2",
    "register",
    "split_oversize",
    "static_offsets",
    "strategy_names",
]
