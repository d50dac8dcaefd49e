"""Validation of `tune`'s choice: train configurations step by step, set predicted beside
measured, and refuse to vouch for a measurement the machine disturbed.

`measure_configs` trains configurations interleaved; `validate` adds the predictions, the load
gauge (`load_drift`, load-adjusted error) and the trust check: a measurement is not trusted
when

* its median step time is outside ``[1/TRUST_RATIO, TRUST_RATIO]`` times the prediction
  (predicted 1,178 graphs/s and measured 42 is a 28x gap: the machine, not the model);
* the load gauge -- a probe timed beside the steps -- ran outside ``[1/TRUST_DRIFT,
  TRUST_DRIFT]`` times its speed while probing (the machine's load changed);
* the spread of its steps' measured/predicted ratios, or of the gauge's times, exceeds
  ``TRUST_SPREAD`` (90th over 10th percentile: the steps were disturbed unevenly).

An untrusted configuration is measured again, up to ``retries`` times; the first trusted
measurement is kept, and if none is, the last is reported with ``trusted: False`` and the
reasons (``trust_reasons``), which the CLI prints as a warning instead of a valid result.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._backend import Backend
from ._model import StepCostModel
from ._profile import PlanProfile
from ._search import Prediction

__all__ = [
    "TRUST_DRIFT",
    "TRUST_RATIO",
    "TRUST_SPREAD",
    "assess",
    "measure_configs",
    "validate",
    "worst_step",
]

#: Measured over predicted median step time beyond this factor (either way): not trusted.
TRUST_RATIO = 2.0
#: The load gauge during validation over while probing beyond this factor: not trusted.
TRUST_DRIFT = 1.5
#: 90th over 10th percentile of the steps' measured/predicted ratios (or the gauge's times)
#: above this: not trusted.
TRUST_SPREAD = 1.5

Progress = Callable[[str], None] | None


def _say(progress: Progress, msg: str) -> None:
    if progress is not None:
        progress(msg)


def measure_configs(
    backend: Backend,
    configs: Sequence[tuple[str, dict[str, Any], str]],
    steps: int,
    *,
    world_size: int = 1,
    peak_steps: Sequence[int | None] | None = None,
    reference: tuple[int, str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Train each configuration ``(label, request, mode)`` for ``steps`` steps of its plan's
    epoch 0 (rank 0) on ``backend``, interleaved (step k of every configuration before step
    k + 1 of any, so load changes hit all alike; the order rotates by one configuration each
    step); then measure the peak memory at plan step
    ``peak_steps[i]`` (``None``: not measured).

    A step that meets a shape for the first time in the run is timed twice: its first call
    (``first_call_ms_all``: compilation or per-shape setup included) and the same batch once
    more, its steady time. Per configuration: ``step_ms_all`` (steady times), ``shapes_all``
    (plan shapes), ``graphs_all`` (real graphs per step), ``new_shapes`` and ``new_shape_ms``
    (median of first call minus steady over them), ``meas_step_ms`` (median steady time),
    ``meas_graphs_per_s`` (real graphs, every rank's, over the summed steady times), and
    ``meas_peak_bytes`` (measured after every run's loader is released).
    ``reference=(probe key, mode)``: that probe is timed once per round
    as well (the ``reference_ms`` of every row: a gauge of the machine's load while these
    steps ran, to compare with the probe's own timings)."""
    runs = [backend.open_run(req, mode, world_size) for _, req, mode in configs]
    recs: list[list[tuple[float, tuple, int, float]]] = [[] for _ in configs]
    seen: list[set] = [set() for _ in configs]
    ref_ms: list[float] = []
    try:
        for k in range(steps):
            _say(progress, f"measuring step {k + 1}/{steps} of {len(runs)} configurations")
            for j in range(len(runs)):
                # the order rotates step by step, so no configuration always runs first or
                # after the same other one (two runs of one plan measured 6% apart without)
                i = (k + j) % len(runs)
                run, rec, met = runs[i], recs[i], seen[i]
                first, shape, graphs = run.step()
                steady = first
                if shape not in met:  # a new shape: its steady time from the batch once more
                    met.add(shape)
                    steady = float(run.repeat())
                rec.append((steady, shape, graphs, first))
            if reference is not None:
                ref_ms.append(float(backend.time_probe(*reference)))
        for run in runs:  # release the loaders (and the batches they hold) before the peaks
            run.close()
        gc.collect()
        out = []
        for i, ((label, req, mode), run, rec) in enumerate(zip(configs, runs, recs, strict=True)):
            new = [(f - s_) for s_, _, _, f in rec if f != s_]
            graphs = sum(g for _, _, g, _ in rec) * world_size
            at = None if peak_steps is None else peak_steps[i]
            if at is not None:
                _say(progress, f"peak memory of {label} at plan step {at}")
            peak = None if at is None else run.peak_bytes(int(at))
            out.append(
                {
                    "config": label,
                    "mode": mode,
                    "request": req,
                    "steps": len(rec),
                    "new_shapes": len(seen[i]),
                    "compiles": len(seen[i]),
                    "new_shape_ms": round(float(np.median(new)), 3) if new else 0.0,
                    "meas_step_ms": round(float(np.median([m for m, _, _, _ in rec])), 4),
                    "meas_graphs_per_s": round(graphs / (sum(m for m, _, _, _ in rec) / 1e3), 2),
                    "meas_peak_bytes": peak,
                    "meas_peak_mib": None if peak is None else round(peak / 2**20, 1),
                    "step_ms_all": [round(m, 4) for m, _, _, _ in rec],
                    "first_call_ms_all": [round(f, 4) for _, _, _, f in rec],
                    "shapes_all": [list(s) for _, s, _, _ in rec],
                    "graphs_all": [int(g) for _, _, g, _ in rec],
                    "reference_ms": [round(x, 4) for x in ref_ms],
                    "_steps": [(m, sh, g) for m, sh, g, _ in rec],
                }
            )
        return out
    finally:
        for run in runs:
            run.close()


def worst_step(profile: PlanProfile, model: StepCostModel) -> int:
    """Plan step (epoch 0) of ``profile``'s worst batch under ``model``: the shape of largest
    predicted peak memory (largest ``nodes + edges`` without a memory model), first one wins."""
    shapes0 = profile.shapes.tolist()
    if model.memory is not None:
        key = [model.peak_bytes(s) for s in shapes0]
    else:
        key = [s[0] + s[1] for s in shapes0]
    worst = max(range(len(shapes0)), key=lambda i: (key[i], -i))
    return int(profile.first_step[worst])


def _spread(values: Sequence[float]) -> float:
    """90th over 10th percentile of positive ``values`` (1.0 for fewer than two)."""
    a = np.asarray([v for v in values if v > 0], dtype=np.float64)
    if a.shape[0] < 2:
        return 1.0
    lo, hi = np.quantile(a, [0.1, 0.9])
    return float(hi / lo)


def assess(row: dict[str, Any]) -> list[str]:
    """Why the validation ``row`` (a `validate` row) cannot be trusted: one line per bound it
    breaks (see the module docstring); empty when it can."""
    reasons = []
    ratio = row["meas_step_ms"] / row["pred_step_ms"] if row["pred_step_ms"] > 0 else 1.0
    if not 1.0 / TRUST_RATIO <= ratio <= TRUST_RATIO:
        reasons.append(
            f"measured step {row['meas_step_ms']:,.2f} ms is {ratio:.2f}x the predicted "
            f"{row['pred_step_ms']:,.2f} ms (bound {TRUST_RATIO:g}x)"
        )
    drift = row.get("load_drift")
    if drift is not None and not 1.0 / TRUST_DRIFT <= drift <= TRUST_DRIFT:
        reasons.append(
            f"the load gauge ran {drift:.2f}x its time while probing (bound {TRUST_DRIFT:g}x): "
            "the machine's load changed"
        )
    if row["step_spread"] > TRUST_SPREAD:
        reasons.append(
            f"steps spread {row['step_spread']:.2f}x (90th/10th percentile of measured/"
            f"predicted, bound {TRUST_SPREAD:g}x)"
        )
    if row["gauge_spread"] > TRUST_SPREAD:
        reasons.append(
            f"the load gauge spread {row['gauge_spread']:.2f}x between rounds "
            f"(bound {TRUST_SPREAD:g}x)"
        )
    return reasons


def _compare(
    p: Prediction,
    m: dict[str, Any],
    model: StepCostModel,
    prof: PlanProfile,
    step_at: int,
    world_size: int,
    probe_ms: float | None,
) -> dict[str, Any]:
    """The measurement ``m`` of ``p`` with its predictions, load gauge and spreads."""
    steady = m.pop("_steps")
    pred_steps = [model.step_ms(s) for _, s, _ in steady]
    pred = float(np.median(pred_steps))
    graphs = sum(g for _, _, g in steady) * world_size
    pred_gps = graphs / (sum(pred_steps) / 1e3)
    worst = prof.shapes[int(np.flatnonzero(prof.first_step == step_at)[0])].tolist()
    pred_peak = model.peak_bytes(worst)
    meas = m["meas_step_ms"]
    row = {
        **m,
        "pred_step_ms": round(pred, 3),
        "step_err_pct": round(100.0 * (pred - meas) / meas, 2),
        "pred_graphs_per_s": round(pred_gps, 1),
        "pred_graphs_per_s_epochs": round(p.graphs_per_s, 1),
        "worst_shape": [int(x) for x in worst],
        "pred_peak_bytes": pred_peak,
        "pred_peak_mib": None if pred_peak is None else round(pred_peak / 2**20, 1),
        "step_spread": round(
            _spread([t / q for (t, _, _), q in zip(steady, pred_steps, strict=True)]), 3
        ),
        "gauge_spread": round(_spread(m["reference_ms"]), 3),
    }
    if probe_ms is not None:
        during = float(np.median(row["reference_ms"])) if row["reference_ms"] else probe_ms
        row["load_drift"] = round(during / probe_ms, 3)
        if row["reference_ms"]:
            # each step scaled by the gauge of its round: the machine's load change taken
            # out (a diagnostic beside the raw error, not a replacement for it)
            scaled = [
                t * probe_ms / r
                for t, r in zip(row["step_ms_all"], row["reference_ms"], strict=True)
            ]
            med = float(np.median(scaled))
            row["load_adjusted_step_ms"] = round(med, 3)
            row["load_adjusted_err_pct"] = round(100.0 * (row["pred_step_ms"] - med) / med, 2)
    return row


def _summary(row: dict[str, Any]) -> dict[str, Any]:
    """What an earlier, untrusted attempt leaves in the final row's ``earlier_attempts``."""
    keys = ("meas_step_ms", "meas_graphs_per_s", "load_drift", "step_spread", "gauge_spread")
    return {**{k: row.get(k) for k in keys}, "trust_reasons": row["trust_reasons"]}


def validate(
    backend: Backend,
    preds: Sequence[Prediction],
    profiles: dict[str, PlanProfile],
    models: dict[str, StepCostModel],
    steps: int,
    world_size: int,
    progress: Progress,
    *,
    reference: tuple[int, str] | None = None,
    probe_ms: float | None = None,
    retries: int = 2,
) -> list[dict[str, Any]]:
    """`measure_configs` of ``preds`` with the predictions beside the measurements: step time
    (median over the same steady steps), real graphs/s over them, peak at the worst batch;
    ``reference``: a probe timed beside them (the load gauge), ``probe_ms`` its median while
    probing. Each row gets ``trusted``, ``trust_reasons`` (`assess`), ``attempts`` and
    ``earlier_attempts``; untrusted configurations are measured again up to ``retries``
    times."""
    at = {p.label: worst_step(profiles[p.label], models[p.mode]) for p in preds}
    rows: dict[int, dict[str, Any]] = {}
    earlier: dict[int, list[dict[str, Any]]] = {i: [] for i in range(len(preds))}
    pending = list(range(len(preds)))
    for attempt in range(1, retries + 2):
        if attempt > 1:
            _say(
                progress,
                f"measuring {len(pending)} untrusted configuration(s) again "
                f"(attempt {attempt} of {retries + 1})",
            )
        chosen = [preds[i] for i in pending]
        measured = measure_configs(
            backend,
            [(p.label, p.request, p.mode) for p in chosen],
            steps,
            world_size=world_size,
            peak_steps=[at[p.label] for p in chosen],
            reference=reference,
            progress=progress,
        )
        still = []
        for i, p, m in zip(pending, chosen, measured, strict=True):
            row = _compare(
                p, m, models[p.mode], profiles[p.label], at[p.label], world_size, probe_ms
            )
            row["trust_reasons"] = assess(row)
            row["trusted"] = not row["trust_reasons"]
            row["attempts"] = attempt
            if i in rows:
                earlier[i].append(_summary(rows[i]))
            rows[i] = row
            if not row["trusted"]:
                still.append(i)
        pending = still
        if not pending:
            break
    for i, row in rows.items():
        row["earlier_attempts"] = earlier[i]
    return [rows[i] for i in range(len(preds))]
