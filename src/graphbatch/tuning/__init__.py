"""``graphbatch.tune``: pick the strategy, budget and shapes from step costs measured on the
user's model and machine.

The NumPy parts -- candidate configurations, plan profiles, the probe design, the fitted
`StepCostModel`, the exact search and the `TuneResult` file -- import no framework. The
measuring backends (`TorchBackend`, `JaxBackend`) import theirs when used;
`SimulatedBackend` measures nothing (costs are given functions of the shape), for tests.
"""

import importlib
from typing import Any

from ._backend import Backend, ProbeSpec, RequestRun, SimulatedBackend
from ._factory import TuneStep, resolve_factory
from ._model import ProbeMeasurement, StepCostModel
from ._profile import plan_arrays_digest
from ._result import TuneResult, load_request
from ._search import Prediction
from ._tune import MAX_PROBES, tune

__all__ = [
    "MAX_PROBES",
    "Backend",
    "JaxBackend",
    "Prediction",
    "ProbeMeasurement",
    "ProbeSpec",
    "RequestRun",
    "SimulatedBackend",
    "StepCostModel",
    "TorchBackend",
    "TuneResult",
    "TuneStep",
    "load_request",
    "plan_arrays_digest",
    "resolve_factory",
    "tune",
]

_LAZY = {"TorchBackend": "._torch_backend", "JaxBackend": "._jax_backend"}


def __getattr__(name: str) -> Any:
    """`TorchBackend` and `JaxBackend`, imported on first use (they import their framework)."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
