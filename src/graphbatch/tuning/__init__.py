"""``graphbatch.tune``: pick the strategy, budget and shapes from step costs measured on the
user's model and machine.

The NumPy parts -- candidate configurations (`candidate_requests`), plan profiles, the probe
design, the fitted `StepCostModel`, the exact search (`rank`) and the `TuneResult` file -- import
no framework. The measuring backends (`TorchBackend`, `JaxBackend`) import theirs when used;
`SimulatedBackend` measures nothing (costs are given functions of the shape), for tests.
"""

import importlib
from typing import Any

from ._backend import Backend, ProbeSpec, RequestRun, SimulatedBackend
from ._candidates import (
    BALANCING_STRATEGIES,
    DEFAULT_STRATEGIES,
    Candidate,
    ProfiledCandidate,
    batch_size_grid,
    candidate_requests,
    profile_candidates,
    shape_cloud,
)
from ._design import design_probes, targeted_probes
from ._factory import TuneStep, builtin_models, resolve_factory
from ._model import (
    FEATURE_SETS,
    CompileCost,
    LinearCost,
    ProbeMeasurement,
    StepCostModel,
    fit_linear,
    fit_step_model,
)
from ._profile import PlanProfile, plan_arrays_digest, profile_plan, step_shapes
from ._result import REQUEST_KEYS, TUNE_FORMAT, TuneResult, load_request
from ._search import Prediction, predict, rank
from ._tune import MAX_PROBES, measure_configs, parse_memory, tune, worst_step

__all__ = [
    "BALANCING_STRATEGIES",
    "DEFAULT_STRATEGIES",
    "FEATURE_SETS",
    "MAX_PROBES",
    "REQUEST_KEYS",
    "TUNE_FORMAT",
    "Backend",
    "Candidate",
    "CompileCost",
    "JaxBackend",
    "LinearCost",
    "PlanProfile",
    "Prediction",
    "ProbeMeasurement",
    "ProbeSpec",
    "ProfiledCandidate",
    "RequestRun",
    "SimulatedBackend",
    "StepCostModel",
    "TorchBackend",
    "TuneResult",
    "TuneStep",
    "batch_size_grid",
    "builtin_models",
    "candidate_requests",
    "design_probes",
    "fit_linear",
    "fit_step_model",
    "load_request",
    "measure_configs",
    "parse_memory",
    "predict",
    "profile_candidates",
    "plan_arrays_digest",
    "profile_plan",
    "rank",
    "resolve_factory",
    "shape_cloud",
    "step_shapes",
    "targeted_probes",
    "tune",
    "worst_step",
]

_LAZY = {"TorchBackend": "._torch_backend", "JaxBackend": "._jax_backend"}


def __getattr__(name: str) -> Any:
    """`TorchBackend` and `JaxBackend`, imported on first use (they import their framework)."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
