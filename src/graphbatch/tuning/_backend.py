"""Where `tune` measures: a backend runs training steps on probe batches and on the batches of
a configuration's plan, and reports time (ms), compilation and peak memory.

`Backend` is the interface; `graphbatch.tuning.TorchBackend` and `JaxBackend` measure a real
model; `SimulatedBackend` runs no model at all: its step time, compile time and memory are
functions of the padded shape that the caller gives (with optional seeded noise), which is
what the tests use to check the fit and the search without timing anything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._api import plan as make_plan
from .._sizes import GraphSizes
from ._profile import step_shapes

__all__ = ["Backend", "ProbeSpec", "RequestRun", "SimulatedBackend"]


@dataclass(frozen=True)
class ProbeSpec:
    """A probe: the batch at step ``step`` of epoch ``epoch`` of the plan of ``request``
    (world size ``world_size``), whose padded plan shape is ``shape``."""

    key: int
    shape: tuple[int, int, int]
    request: dict[str, Any]
    epoch: int
    step: int
    world_size: int = 1
    label: str = ""


class RequestRun:
    """One configuration being trained step by step (validation): `step` runs the next step of
    the plan's epoch 0 (rank 0) and returns ``(ms, plan shape, real graphs)``; `repeat` trains
    the same batch again and returns its time; `peak_bytes`
    measures one step at plan step ``index`` (``None`` when the backend has no memory measure)."""

    def step(self) -> tuple[float, tuple[int, int, int], int]:  # pragma: no cover - interface
        raise NotImplementedError

    def repeat(self) -> float:  # pragma: no cover - interface
        """Time (ms) of the last step's batch trained once more (its steady time, when the
        step met its shape for the first time)."""
        raise NotImplementedError

    def peak_bytes(self, index: int) -> int | None:  # pragma: no cover - interface
        raise NotImplementedError

    def close(self) -> None:
        pass


class Backend:
    """Interface of a measuring backend.

    ``modes``: the step variants it measures (``"compiled"``, ``"eager"``, ``"jit"``).
    `add_probe` prepares a probe's batch and runs its first step in every mode, returning the
    first calls' times (ms, compilation included); `time_probe` times one further step;
    `probe_memory` measures one step's peak memory (bytes, or ``None``); `open_run` starts a
    `RequestRun`; `graph_sizes` gives the sizes of the graphs it batches. ``info()``: what
    to record about the machine and libraries."""

    framework = "none"
    device = "cpu"
    modes: tuple[str, ...] = ()
    memory_kind = "none"

    def graph_sizes(self) -> GraphSizes:  # pragma: no cover - interface
        """Sizes of the graphs the backend's loader iterates (what tune plans over)."""
        raise NotImplementedError

    def add_probe(self, spec: ProbeSpec) -> dict[str, float]:  # pragma: no cover - interface
        raise NotImplementedError

    def time_probe(self, key: int, mode: str) -> float:  # pragma: no cover - interface
        raise NotImplementedError

    def probe_memory(self, key: int, mode: str) -> int | None:  # pragma: no cover
        raise NotImplementedError

    def open_run(
        self, request: dict[str, Any], mode: str, world_size: int = 1
    ) -> RequestRun:  # pragma: no cover - interface
        raise NotImplementedError

    def info(self) -> dict[str, Any]:
        return {"framework": self.framework, "device": self.device, "memory_kind": self.memory_kind}

    def close(self) -> None:
        pass


# --------------------------------------------------------------------------- simulated
ShapeFn = Callable[[int, int, int, str], float]


@dataclass
class SimulatedBackend(Backend):
    """A backend whose costs are given functions of the padded plan shape and the mode:
    ``step_ms(n_node, n_edge, n_graph, mode)``, ``compile_ms(n_node, n_edge, n_graph, mode)``
    (0 for ``"eager"`` by convention of the caller), ``memory_bytes(n_node, n_edge, n_graph,
    mode)`` (or ``None``: no memory measure). ``noise``: relative standard deviation of a
    seeded multiplicative noise on step times (``seed``). ``disturb(call)``: a factor on the
    time of the ``call``-th timed step (from 1), e.g. a machine that other jobs slow down
    (``None``: undisturbed). Plans come from ``sizes``."""

    sizes: GraphSizes
    step_ms: ShapeFn
    compile_ms: ShapeFn = field(default=lambda n, e, g, m: 0.0)
    memory_bytes: Callable[[int, int, int, str], int] | None = None
    modes: tuple[str, ...] = ("compiled",)
    noise: float = 0.0
    seed: int = 0
    framework: str = "simulated"
    disturb: Callable[[int], float] | None = None

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        self.probes: dict[int, ProbeSpec] = {}
        self.compiled: dict[str, set] = {m: set() for m in self.modes}
        self.calls = 0

    def graph_sizes(self) -> GraphSizes:
        return self.sizes

    @property
    def memory_kind(self) -> str:  # type: ignore[override]
        return "simulated" if self.memory_bytes is not None else "none"

    def _time(self, shape: tuple[int, int, int], mode: str) -> float:
        self.calls += 1
        t = float(self.step_ms(*shape, mode))
        if self.noise:
            t *= float(np.exp(self.rng.normal(0.0, self.noise)))
        if self.disturb is not None:
            t *= float(self.disturb(self.calls))
        return t

    def _first(self, shape: tuple[int, int, int], mode: str) -> float:
        t = self._time(shape, mode)
        if mode != "eager" and tuple(shape) not in self.compiled[mode]:
            self.compiled[mode].add(tuple(shape))
            t += float(self.compile_ms(*shape, mode))
        return t

    def add_probe(self, spec: ProbeSpec) -> dict[str, float]:
        self.probes[spec.key] = spec
        return {m: self._first(spec.shape, m) for m in self.modes}

    def time_probe(self, key: int, mode: str) -> float:
        return self._time(self.probes[key].shape, mode)

    def probe_memory(self, key: int, mode: str) -> int | None:
        if self.memory_bytes is None:
            return None
        return int(self.memory_bytes(*self.probes[key].shape, mode))

    def open_run(self, request: dict[str, Any], mode: str, world_size: int = 1) -> RequestRun:
        return _SimulatedRun(self, request, mode, world_size)


class _SimulatedRun(RequestRun):
    def __init__(
        self, backend: SimulatedBackend, request: dict[str, Any], mode: str, world_size: int
    ) -> None:
        self.backend, self.mode = backend, mode
        plan = make_plan(backend.sizes, world_size=world_size, **request)
        self.shapes = [(int(n), int(e), int(g)) for n, e, g in step_shapes(plan).tolist()]
        idx = plan.rank_batches(0)
        self.graphs = np.diff(plan.offsets)[idx].tolist()
        self.k = 0

    def step(self) -> tuple[float, tuple[int, int, int], int]:
        i = self.k % len(self.shapes)
        self.k += 1
        self.last = shape = self.shapes[i]
        return self.backend._first(shape, self.mode), shape, int(self.graphs[i])

    def repeat(self) -> float:
        return self.backend._time(self.last, self.mode)

    def peak_bytes(self, index: int) -> int | None:
        if self.backend.memory_bytes is None:
            return None
        return int(self.backend.memory_bytes(*self.shapes[index], self.mode))
