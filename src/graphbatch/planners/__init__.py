"""Planning strategies. Importing this package registers every built-in strategy."""

from ..packing.kernels import (
    batch_totals,
    budget_lower_bound,
    greedy_fill,
    greedy_offsets,
)
from ._assemble import OversizeSplit, finish_plan, split_oversize
from ._balancing import (
    PAD_MODES,
    plan_balance,
    plan_iqr,
    plan_kk,
    plan_random,
    plan_stratified,
    plan_zscore,
)
from ._buckets import plan_buckets
from ._cost import CostModel, cost_model_from_options
from ._distributed import distribute_plan, plan_for_ranks
from ._dynamic import plan_dynamic
from ._memo import PlanMemo, planning_memo
from ._packing import (
    plan_pack_lpf,
    plan_pack_lpf_1d,
    plan_pack_nnls,
    plan_pack_spf,
)
from ._registry import (
    OVERSIZE_POLICIES,
    PlanRequest,
    Strategy,
    get_strategy,
    register,
    strategy_names,
)
from ._static import plan_static_constant, plan_static_multiple, plan_static_pow2, static_offsets

__all__ = [
    "OVERSIZE_POLICIES",
    "PAD_MODES",
    "CostModel",
    "cost_model_from_options",
    "distribute_plan",
    "plan_balance",
    "plan_iqr",
    "plan_kk",
    "plan_random",
    "plan_stratified",
    "plan_zscore",
    "OversizeSplit",
    "PlanMemo",
    "PlanRequest",
    "Strategy",
    "batch_totals",
    "budget_lower_bound",
    "finish_plan",
    "get_strategy",
    "greedy_fill",
    "greedy_offsets",
    "plan_buckets",
    "plan_dynamic",
    "plan_for_ranks",
    "plan_pack_lpf",
    "plan_pack_lpf_1d",
    "plan_pack_nnls",
    "plan_pack_spf",
    "plan_static_constant",
    "plan_static_multiple",
    "plan_static_pow2",
    "planning_memo",
    "register",
    "split_oversize",
    "static_offsets",
    "strategy_names",
]
