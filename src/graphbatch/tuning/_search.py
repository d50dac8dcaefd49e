"""Predicting an epoch of every candidate with the step-cost model, and ranking them.

For a candidate's plan (its `PlanProfile`) and a mode's `StepCostModel`:

* steady time per epoch ``T`` = sum over its step shapes of (steps of that shape) x (predicted
  step time), integer picoseconds;
* compile time ``C`` = the mode's first-call cost of every distinct shape of epoch 0 (the
  compilation; for an eager step the per-shape setup it measured), plus the shapes later
  epochs meet for the first time (recompilations; measured by planning epochs
  ``1 .. min(epochs, 4) - 1``, the last of those epochs' count extrapolated to the remaining
  epochs);
* real graphs/s = ``epochs * G / (epochs * T + C)``: the compile cost amortised over
  ``epochs``;
* peak memory: the largest predicted peak over every shape the candidate meets (the worst
  batch, not the mean); with a memory limit, a candidate whose worst batch is predicted above
  it is infeasible.

`break_even` sets the best compiled prediction against the best eager one: after how many
steps the compiled run, its compilations counted, overtakes the eager run.

The ranking compares total times per real graph as exact integer fractions (ties: fewer
shapes, then the candidate order), so it is a pure function of the plans and the fitted
integer model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..analysis import break_even as _break_even
from ._candidates import ProfiledCandidate
from ._model import TIME_UNITS_PER_MS, StepCostModel
from ._profile import PlanProfile

__all__ = ["Prediction", "break_even", "predict", "rank"]


@dataclass(frozen=True)
class Prediction:
    """The predicted epoch of one candidate in one mode (see the module docstring)."""

    label: str
    request: dict[str, Any]
    mode: str
    index: int  # the candidate's position (tie-break)
    epochs: int
    steps: int
    world_size: int
    real_graphs: int
    epoch_ps: int
    compile_ms: int
    shapes: int
    recompiles: int
    peak_bytes: int | None
    node_efficiency: float
    edge_efficiency: float
    graphs_per_batch: float
    feasible: bool = True
    reason: str = ""
    plan_digest: str = ""

    @property
    def total_ps(self) -> int:
        """Predicted time of ``epochs`` epochs, compilation included (picoseconds)."""
        return self.epochs * self.epoch_ps + self.compile_ms * TIME_UNITS_PER_MS

    @property
    def graphs_per_s(self) -> float:
        """Real graphs per second, compilation amortised over ``epochs``."""
        t = self.total_ps
        return self.epochs * self.real_graphs * 1e12 / t if t else float("inf")

    @property
    def steady_graphs_per_s(self) -> float:
        """Real graphs per second without compilation."""
        return self.real_graphs * 1e12 / self.epoch_ps if self.epoch_ps else float("inf")

    @property
    def step_ms(self) -> float:
        """Mean predicted step time (ms)."""
        return self.epoch_ps / TIME_UNITS_PER_MS / self.steps if self.steps else 0.0

    @property
    def padding_pct(self) -> tuple[float, float]:
        return (100.0 * (1 - self.node_efficiency), 100.0 * (1 - self.edge_efficiency))

    def sort_key(self) -> tuple:
        """Feasible first, then total time per real graph (an exact fraction, compared by
        cross-multiplication in `rank`), fewer shapes, candidate order."""
        return (not self.feasible, self.shapes, self.index, self.mode)

    def row(self) -> dict[str, Any]:
        """One row of the ranked table."""
        pn, pe = self.padding_pct
        return {
            "config": self.label,
            "mode": self.mode,
            "graphs_per_s": round(self.graphs_per_s, 1),
            "steady_graphs_per_s": round(self.steady_graphs_per_s, 1),
            "step_ms": round(self.step_ms, 3),
            "graphs_per_batch": round(self.graphs_per_batch, 1),
            "pad_nodes_pct": round(pn, 2),
            "pad_edges_pct": round(pe, 2),
            "shapes": self.shapes,
            "compiles": self.shapes + self.recompiles,
            "compile_s": round(self.compile_ms / 1000, 2),
            "peak_mib": None if self.peak_bytes is None else round(self.peak_bytes / 2**20, 1),
            "feasible": self.feasible,
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "request": self.request,
            "mode": self.mode,
            "index": self.index,
            "epochs": self.epochs,
            "steps": self.steps,
            "world_size": self.world_size,
            "real_graphs": self.real_graphs,
            "epoch_ps": self.epoch_ps,
            "compile_ms": self.compile_ms,
            "shapes": self.shapes,
            "recompiles": self.recompiles,
            "peak_bytes": self.peak_bytes,
            "node_efficiency": self.node_efficiency,
            "edge_efficiency": self.edge_efficiency,
            "graphs_per_batch": self.graphs_per_batch,
            "feasible": self.feasible,
            "reason": self.reason,
            "plan_digest": self.plan_digest,
            "graphs_per_s": self.graphs_per_s,
            "steady_graphs_per_s": self.steady_graphs_per_s,
            "step_ms": self.step_ms,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Prediction:
        keys = (
            "label",
            "request",
            "mode",
            "index",
            "epochs",
            "steps",
            "world_size",
            "real_graphs",
            "epoch_ps",
            "compile_ms",
            "shapes",
            "recompiles",
            "peak_bytes",
            "node_efficiency",
            "edge_efficiency",
            "graphs_per_batch",
            "feasible",
            "reason",
        )
        return cls(**{k: d[k] for k in keys}, plan_digest=str(d.get("plan_digest", "")))


def _recompiles(profile: PlanProfile, epochs: int) -> int:
    """New shapes after epoch 0 over ``epochs`` epochs: those planned, plus the last planned
    epoch's count for every epoch not planned."""
    planned = int(sum(profile.later_new))
    rest = max(0, int(epochs) - profile.epochs_planned)
    rate = int(profile.later_new[-1]) if profile.later_new else 0
    return planned + rest * rate


def predict(
    pc: ProfiledCandidate,
    model: StepCostModel,
    index: int,
    *,
    epochs: int,
    memory_limit: int | None = None,
) -> Prediction:
    """The `Prediction` of candidate ``pc`` under ``model`` (see the module docstring)."""
    prof = pc.profile
    epoch_ps = 0
    for shape, n in zip(prof.shapes.tolist(), prof.steps.tolist(), strict=True):
        epoch_ps += int(n) * model.step_ps(shape)
    recompiles = _recompiles(prof, epochs)
    shapes = prof.distinct_shapes
    compile_ms = model.compile.total_ms(shapes + recompiles)
    peaks = [model.peak_bytes(s) for s in prof.all_shapes().tolist()]
    known = [p for p in peaks if p is not None]
    peak = None if len(known) < len(peaks) else max(known, default=0)
    feasible, reason = True, ""
    if memory_limit is not None:
        if peak is None:
            feasible, reason = False, "peak memory not measured"
        elif peak > memory_limit:
            feasible = False
            reason = f"worst batch {peak / 2**20:.1f} MiB > limit {memory_limit / 2**20:.1f} MiB"
    return Prediction(
        label=pc.candidate.label,
        request=dict(pc.candidate.request),
        mode=model.mode,
        index=int(index),
        epochs=int(epochs),
        steps=prof.num_steps,
        world_size=prof.world_size,
        real_graphs=prof.real_graphs,
        epoch_ps=epoch_ps,
        compile_ms=compile_ms,
        shapes=shapes,
        recompiles=recompiles,
        peak_bytes=peak,
        node_efficiency=prof.node_efficiency,
        edge_efficiency=prof.edge_efficiency,
        graphs_per_batch=prof.graphs_per_batch,
        feasible=feasible,
        reason=reason,
        plan_digest=prof.digest,
    )


def rank(
    profiled: Sequence[ProfiledCandidate],
    models: Sequence[StepCostModel],
    *,
    epochs: int,
    memory_limit: int | None = None,
) -> list[Prediction]:
    """Every candidate under every mode's model, best first: feasible before infeasible, then
    the least total time per real graph (exact: ``total_a * graphs_b < total_b * graphs_a``),
    then fewer shapes, then candidate order."""
    import functools

    preds = [
        predict(pc, m, i, epochs=epochs, memory_limit=memory_limit)
        for i, pc in enumerate(profiled)
        for m in models
    ]

    def cmp(a: Prediction, b: Prediction) -> int:
        if a.feasible != b.feasible:
            return -1 if a.feasible else 1
        lhs = a.total_ps * max(b.real_graphs, 1)
        rhs = b.total_ps * max(a.real_graphs, 1)
        if lhs != rhs:
            return -1 if lhs < rhs else 1
        ka, kb = a.sort_key(), b.sort_key()
        return -1 if ka < kb else (1 if ka > kb else 0)

    return sorted(preds, key=functools.cmp_to_key(cmp))


def break_even(ranking: Sequence[Prediction]) -> dict[str, Any] | None:
    """The best feasible ``compiled`` prediction of ``ranking`` against its best feasible
    ``eager`` one (`graphbatch.analysis.break_even`): the steps of the compiled
    configuration after which it overtakes the eager one, compile times (the first-call
    costs of every shape met) counted, beside the steps planned (``epochs`` x steps per
    epoch). ``None`` when the ranking lacks either mode (``compile`` on or off, JAX)."""
    compiled = next((p for p in ranking if p.feasible and p.mode == "compiled"), None)
    eager = next((p for p in ranking if p.feasible and p.mode == "eager"), None)
    if compiled is None or eager is None or not compiled.steps:
        return None
    out = _break_even(
        compiled.compile_ms / 1000,
        compiled.steady_graphs_per_s,
        compiled.real_graphs / compiled.steps,
        eager.compile_ms / 1000,
        eager.steady_graphs_per_s,
        planned_steps=compiled.epochs * compiled.steps,
    )
    return {
        "compiled": compiled.label,
        "eager": eager.label,
        "chosen_mode": ranking[0].mode,
        "epochs": compiled.epochs,
        **out,
    }
