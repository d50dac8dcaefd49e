"""The step-cost model: step time, peak memory and compile time as functions of the padded shape.

Time and memory are fitted as ``c0 + c1 * n_node + c2 * n_edge + c3 * n_graph`` (or a subset of
the three sizes: the one whose leave-one-out error is least -- median for time, worst case for
memory --, "what the data supports") by
non-negative least squares on relative errors (each probe's row divided by its measurement), so
a 10% error counts the same at every size. The coefficients are then quantised once to integers
-- picoseconds for time, milli-bytes for memory -- and every prediction is integer arithmetic,
so the search that ranks configurations on them is exact and machine-independent.

Fit error is reported on held-out probes: leave-one-out (each probe predicted by the model
fitted to the others), as relative errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .._errors import InputError

__all__ = [
    "FEATURE_SETS",
    "LinearCost",
    "CompileCost",
    "StepCostModel",
    "fit_linear",
    "fit_step_model",
    "ProbeMeasurement",
]

#: Size features the fit may use (with an intercept), largest first.
FEATURE_SETS: tuple[tuple[str, ...], ...] = (
    ("n_node", "n_edge", "n_graph"),
    ("n_node", "n_edge"),
    ("n_edge", "n_graph"),
    ("n_node", "n_graph"),
    ("n_edge",),
    ("n_node",),
)
_COLUMN = {"n_node": 0, "n_edge": 1, "n_graph": 2}
#: Fixed-point units: time in picoseconds per unit of a feature, memory in milli-bytes.
TIME_UNITS_PER_MS = 10**9
MEMORY_UNITS_PER_BYTE = 1000


@dataclass(frozen=True)
class ProbeMeasurement:
    """One probe in one mode: its plan shape ``(n_node, n_edge, n_graph)``, the timed steady
    steps (ms), the first call's time (ms: compilation plus one step), the peak memory (bytes,
    ``None`` where not measured), and where its batch came from."""

    shape: tuple[int, int, int]
    mode: str
    step_ms: tuple[float, ...]
    first_ms: float
    peak_bytes: int | None = None
    source: str = ""
    phase: str = "design"

    @property
    def median_ms(self) -> float:
        return float(np.median(self.step_ms)) if self.step_ms else float("nan")

    @property
    def compile_ms(self) -> float:
        """First call minus a steady step: the compilation of this shape (>= 0)."""
        return max(0.0, self.first_ms - self.median_ms)

    def as_dict(self) -> dict[str, Any]:
        return {
            "shape": list(self.shape),
            "mode": self.mode,
            "step_ms": list(self.step_ms),
            "median_ms": self.median_ms,
            "first_ms": self.first_ms,
            "compile_ms": self.compile_ms,
            "peak_bytes": self.peak_bytes,
            "source": self.source,
            "phase": self.phase,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ProbeMeasurement:
        s = d["shape"]
        return cls(
            (int(s[0]), int(s[1]), int(s[2])),
            str(d["mode"]),
            tuple(float(x) for x in d["step_ms"]),
            float(d["first_ms"]),
            None if d.get("peak_bytes") is None else int(d["peak_bytes"]),
            str(d.get("source", "")),
            str(d.get("phase", "design")),
        )


@dataclass(frozen=True)
class LinearCost:
    """``intercept + sum(coef[f] * shape[f])`` in integer units (``units`` per measured unit:
    ms for time, bytes for memory), features ``features`` (names of `FEATURE_SETS`).

    ``loo_rel_errors``: each probe's leave-one-out relative error ``(pred - meas) / meas``;
    ``fit_rel_errors``: the in-sample ones."""

    features: tuple[str, ...]
    intercept: int
    coef: tuple[int, ...]
    units: int
    loo_rel_errors: tuple[float, ...] = ()
    fit_rel_errors: tuple[float, ...] = ()

    def predict_units(self, shape: Sequence[int]) -> int:
        """The prediction in integer units (exact Python-int arithmetic)."""
        total = int(self.intercept)
        for f, c in zip(self.features, self.coef, strict=True):
            total += int(c) * int(shape[_COLUMN[f]])
        return total

    def predict(self, shape: Sequence[int]) -> float:
        """The prediction in measured units (ms or bytes), for display."""
        return self.predict_units(shape) / self.units

    @property
    def loo_max(self) -> float:
        return max((abs(x) for x in self.loo_rel_errors), default=float("nan"))

    @property
    def loo_median(self) -> float:
        if not self.loo_rel_errors:
            return float("nan")
        return float(np.median(np.abs(self.loo_rel_errors)))

    def as_dict(self) -> dict[str, Any]:
        return {
            "features": list(self.features),
            "intercept": int(self.intercept),
            "coef": [int(c) for c in self.coef],
            "units": int(self.units),
            "loo_rel_errors": list(self.loo_rel_errors),
            "fit_rel_errors": list(self.fit_rel_errors),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LinearCost:
        return cls(
            tuple(d["features"]),
            int(d["intercept"]),
            tuple(int(c) for c in d["coef"]),
            int(d["units"]),
            tuple(float(x) for x in d.get("loo_rel_errors", ())),
            tuple(float(x) for x in d.get("fit_rel_errors", ())),
        )

    def describe(self, unit: str) -> str:
        terms = [f"{self.intercept / self.units:.4g}"]
        terms += [
            f"{c / self.units:.4g}*{f}" for f, c in zip(self.features, self.coef, strict=True)
        ]
        return f"{unit} = " + " + ".join(terms)


def _design(shapes: np.ndarray, features: Sequence[str]) -> np.ndarray:
    cols = [np.ones(shapes.shape[0])] + [shapes[:, _COLUMN[f]].astype(np.float64) for f in features]
    return np.stack(cols, axis=1)


def _nnls_relative(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative coefficients minimising the sum of squared relative errors."""
    from scipy.optimize import nnls

    w = 1.0 / np.maximum(np.abs(y), 1e-300)
    a = x * w[:, None]
    scale = np.maximum(np.abs(a).max(axis=0), 1e-300)  # column scaling for conditioning
    coef, _ = nnls(a / scale, y * w)
    return coef / scale


def _quantise(coef: np.ndarray, units: int) -> tuple[int, tuple[int, ...]]:
    q = [int(round(float(c) * units)) for c in coef]
    return q[0], tuple(q[1:])


def fit_linear(
    shapes: ArrayLike,
    values: ArrayLike,
    *,
    units: int,
    feature_sets: Sequence[Sequence[str]] = FEATURE_SETS,
    criterion: str = "median",
) -> LinearCost:
    """Fit ``values`` (ms or bytes, > 0) over ``shapes`` (``[n, 3]`` plan shapes) with each of
    ``feature_sets`` (plus an intercept) and keep the one with the least leave-one-out
    relative error -- ``criterion="median"`` of the absolute leave-one-out errors (time: one
    probe far off, a timing spike or a tiny shape, does not decide) or ``"max"`` (memory, a
    hard limit: the worst held-out error) (ties, compared at 1e-9: fewer features).
    Coefficients >= 0."""
    if criterion not in ("median", "max"):
        raise InputError(f"criterion must be median or max, got {criterion!r}")
    shapes = np.asarray(shapes, dtype=np.int64).reshape(-1, 3)
    y = np.asarray(values, dtype=np.float64).reshape(-1)
    if shapes.shape[0] != y.shape[0]:
        raise InputError(f"{shapes.shape[0]} shapes for {y.shape[0]} values")
    if y.shape[0] == 0:
        raise InputError("no probe measurements to fit")
    if not np.all(np.isfinite(y)) or (y <= 0).any():
        raise InputError(f"probe measurements must be finite and > 0, got {y.tolist()}")
    best: (
        tuple[float, int, tuple[str, ...], np.ndarray, tuple[float, ...], tuple[float, ...]] | None
    ) = None
    for feats in feature_sets:
        feats = tuple(feats)
        x = _design(shapes, feats)
        n = y.shape[0]
        if n > x.shape[1]:
            loo: list[float] = []
            for i in range(n):
                keep = np.arange(n) != i
                c = _nnls_relative(x[keep], y[keep])
                loo.append(float((x[i] @ c - y[i]) / y[i]))
            agg = np.median if criterion == "median" else np.max
            score = round(float(agg(np.abs(loo))), 9)
        else:  # too few probes to hold any out: judged on the fit itself
            loo = []
            score = float("inf")
        coef = _nnls_relative(x, y)
        fit = tuple(float((x[i] @ coef - y[i]) / y[i]) for i in range(n))
        cand = (score, len(feats), feats, coef, tuple(loo), fit)
        if best is None or (cand[0], cand[1]) < (best[0], best[1]):
            best = cand
    if best is None:
        raise InputError("no feature sets to fit")
    _, _, feats, coef, loo_errors, fit = best
    intercept, q = _quantise(coef, units)
    return LinearCost(feats, intercept, q, units, loo_errors, fit)


@dataclass(frozen=True)
class CompileCost:
    """Compilation time of a new shape: ``first_ms`` for the process's first compilation (cold)
    and ``per_shape_ms`` (the median over the other probes) for every further shape; integer
    ms. ``samples_ms``: the measured compile times, first probe first."""

    first_ms: int
    per_shape_ms: int
    samples_ms: tuple[float, ...] = ()

    def total_ms(self, shapes: int) -> int:
        """Compiling ``shapes`` distinct shapes in a fresh process."""
        return 0 if shapes <= 0 else self.first_ms + (shapes - 1) * self.per_shape_ms

    def as_dict(self) -> dict[str, Any]:
        return {
            "first_ms": self.first_ms,
            "per_shape_ms": self.per_shape_ms,
            "samples_ms": list(self.samples_ms),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CompileCost:
        return cls(
            int(d["first_ms"]),
            int(d["per_shape_ms"]),
            tuple(float(x) for x in d.get("samples_ms", ())),
        )


def fit_compile(measurements: Sequence[ProbeMeasurement]) -> CompileCost:
    """`CompileCost` from the probes' first calls (in the order they were made): what a step
    costs more the first time it meets a shape -- the compilation of a compiled step, and for an
    eager step the per-shape setup it does too (kernel primitives created for new sizes, the
    allocator growing); the first probe's includes the process's one-time start-up."""
    if not measurements:
        return CompileCost(0, 0, ())
    samples = tuple(m.compile_ms for m in measurements)
    first = int(round(samples[0]))
    rest = samples[1:] or samples
    return CompileCost(first, int(round(float(np.median(rest)))), samples)


@dataclass(frozen=True)
class StepCostModel:
    """The fitted cost of one training step of one mode (``"compiled"``, ``"eager"`` or
    ``"jit"``): ``time`` (ms), ``memory`` (bytes, ``None`` when not measured) with
    ``memory_margin`` (per mille: the largest share by which a probe's measured peak exceeded
    its prediction, held out (leave-one-out) or not; every memory prediction is scaled up by
    it, so a memory limit holds where the model's held-out error does), and ``compile``.
    ``probes``: the measurements fitted."""

    mode: str
    time: LinearCost
    compile: CompileCost
    memory: LinearCost | None = None
    memory_margin: int = 0
    probes: tuple[ProbeMeasurement, ...] = field(default=())

    @property
    def compiles(self) -> bool:
        """Whether the step compiles per shape (``compiled``, ``jit``); an eager step's
        first-call cost of a new shape (`compile`) is still measured and counted."""
        return self.mode != "eager"

    def step_ps(self, shape: Sequence[int]) -> int:
        """Predicted step time of ``shape`` in picoseconds (integer, >= 0)."""
        return max(0, self.time.predict_units(shape))

    def step_ms(self, shape: Sequence[int]) -> float:
        return self.step_ps(shape) / TIME_UNITS_PER_MS

    def peak_bytes(self, shape: Sequence[int]) -> int | None:
        """Predicted peak memory of a step of ``shape`` (bytes, rounded up, margin included)."""
        if self.memory is None:
            return None
        u = max(0, self.memory.predict_units(shape)) * (1000 + int(self.memory_margin))
        return -(-u // (1000 * self.memory.units))

    def shape_cost(self, epochs: int) -> list[int]:
        """The time model as ``buckets``' integer ``shape_cost`` option: picoseconds per step
        ``[c0, c_node, c_edge, c_graph]`` and, per shape, the compile time spread over
        ``epochs`` (the per-epoch cost a shape adds)."""
        coef = dict(zip(self.time.features, self.time.coef, strict=True))
        per_shape = (self.compile.per_shape_ms * TIME_UNITS_PER_MS) // max(int(epochs), 1)
        return (
            [max(0, int(self.time.intercept))]
            + [max(0, int(coef.get(f, 0))) for f in ("n_node", "n_edge", "n_graph")]
            + [int(per_shape)]
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "time": self.time.as_dict(),
            "compile": self.compile.as_dict(),
            "memory": None if self.memory is None else self.memory.as_dict(),
            "memory_margin": int(self.memory_margin),
            "probes": [p.as_dict() for p in self.probes],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StepCostModel:
        return cls(
            str(d["mode"]),
            LinearCost.from_dict(d["time"]),
            CompileCost.from_dict(d["compile"]),
            None if d.get("memory") is None else LinearCost.from_dict(d["memory"]),
            int(d.get("memory_margin", 0)),
            tuple(ProbeMeasurement.from_dict(p) for p in d.get("probes", ())),
        )


def _memory_margin(memory: LinearCost, shapes: np.ndarray, peaks: Sequence[int]) -> int:
    """Per mille by which measured peaks exceed their predictions: in-sample (exact integers)
    and held out (each probe against the fit without it), rounded up."""
    worst = 0
    for s, p in zip(shapes.tolist(), peaks, strict=True):
        pred = memory.predict_units(s)
        if pred <= 0:
            return 1000 * 1000  # a non-positive fit under a real peak: no bound worth giving
        # ceil(1000 * (p * units - pred) / pred)
        worst = max(worst, -(-1000 * (int(p) * memory.units - pred) // pred))
    for e in memory.loo_rel_errors:  # e = (held-out prediction - peak) / peak
        if e < 0:
            worst = max(worst, int(np.ceil(1000.0 * (-e) / max(1.0 + e, 1e-9))))
    return max(0, worst)


def fit_step_model(mode: str, measurements: Sequence[ProbeMeasurement]) -> StepCostModel:
    """The `StepCostModel` of ``mode`` from its probe measurements (time: the median of each
    probe's steady steps; memory where every probe has it)."""
    ms = [m for m in measurements if m.mode == mode]
    if not ms:
        raise InputError(f"no probe measurements of mode {mode!r}")
    shapes = np.array([m.shape for m in ms], np.int64)
    time = fit_linear(shapes, [m.median_ms for m in ms], units=TIME_UNITS_PER_MS)
    memory, margin = None, 0
    if all(m.peak_bytes is not None and m.peak_bytes > 0 for m in ms):
        peaks = [int(m.peak_bytes) for m in ms]  # type: ignore[arg-type]
        memory = fit_linear(shapes, peaks, units=MEMORY_UNITS_PER_BYTE, criterion="max")
        margin = _memory_margin(memory, shapes, peaks)
    return StepCostModel(mode, time, fit_compile(ms), memory, margin, tuple(ms))
