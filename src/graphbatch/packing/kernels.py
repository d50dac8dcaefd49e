"""The kernel layer of planning: plain array functions (NumPy in, NumPy out) that the
strategies in :mod:`graphbatch.planners` orchestrate, for authors of strategies
(``graphbatch.planners.register``); users pack with :mod:`graphbatch.packing`'s own names.

Kernels never import ``graphbatch.planners``. Each fast kernel has a plain reference form in
the tests. Every chunk and window size lives in ``graphbatch.packing._memory``: a chunk size
bounds a temporary and never changes a result; int32 positions below 2**31 graphs, int64
plan arrays.
"""

from ._assign import assign_graphs, group_by_key
from ._candidates import balanced_packs, cost_round_matrix, equal_counts_cannot_fit, spread_packs
from ._greedy import (
    batches_lower_bound,
    budget_lower_bound,
    greedy_fill,
    greedy_offsets,
)
from ._heuristics import heuristic_function
from ._memory import gather_batches, gather_counts, index_dtype, take_into, widen_into
from ._pack import METHODS
from ._packed_sizes import PackedSizes
from ._partition import (
    balanced_ldm,
    columns_in_order,
    columns_to_batches,
    refine_by_swaps,
    refine_in_place,
    stratified_assignment,
)
from ._repair import repair_overflow
from ._round_matrix import descending_order, round_matrix
from ._steps import SizePairs, StepFill, step_fill
from ._totals import any_oversize, batch_totals, pack_totals

__all__ = [
    "METHODS",
    "PackedSizes",
    "SizePairs",
    "StepFill",
    "any_oversize",
    "assign_graphs",
    "balanced_ldm",
    "balanced_packs",
    "batch_totals",
    "batches_lower_bound",
    "budget_lower_bound",
    "columns_in_order",
    "columns_to_batches",
    "cost_round_matrix",
    "descending_order",
    "equal_counts_cannot_fit",
    "gather_batches",
    "gather_counts",
    "greedy_fill",
    "greedy_offsets",
    "group_by_key",
    "heuristic_function",
    "index_dtype",
    "pack_totals",
    "refine_by_swaps",
    "refine_in_place",
    "repair_overflow",
    "round_matrix",
    "spread_packs",
    "step_fill",
    "stratified_assignment",
    "take_into",
    "widen_into",
]
