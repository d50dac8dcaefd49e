"""graphbatch: fixed-shape, memory-balanced batching of many small graphs.

The core is pure NumPy: sizes in, a `BatchPlan` out. Framework adapters live in
``graphbatch.torch`` and ``graphbatch.jax`` (optional extras) and are not imported here.
"""

from ._api import plan
from ._budget import Budget, estimate_budget, next_pow2, round_up
from ._errors import (
    AtomsInputError,
    BuildCancelled,
    CaptureError,
    GraphbatchError,
    InputError,
    InputTypeError,
    PlanMismatchError,
    ShardBuildError,
    StoreFormatError,
    UnknownNameError,
)
from ._plan import PLAN_FORMAT_VERSION, BatchPlan, PlanStats
from ._sizes import GraphSizes, SizeHistogram
from ._version import __version__
from .planners import get_strategy, strategy_names
from .tuning import TuneResult, tune


def strategies() -> dict[str, str]:
    """Registered strategy names with their one-line descriptions."""
    return {name: get_strategy(name).description for name in strategy_names()}


__all__ = [
    "PLAN_FORMAT_VERSION",
    "AtomsInputError",
    "BatchPlan",
    "Budget",
    "BuildCancelled",
    "CaptureError",
    "GraphSizes",
    "GraphbatchError",
    "InputError",
    "InputTypeError",
    "PlanMismatchError",
    "PlanStats",
    "ShardBuildError",
    "SizeHistogram",
    "StoreFormatError",
    "TuneResult",
    "UnknownNameError",
    "__version__",
    "estimate_budget",
    "get_strategy",
    "next_pow2",
    "plan",
    "round_up",
    "strategies",
    "strategy_names",
    "tune",
]
