"""Benchmark records: the one owner of their keys, their validation and their summary.

A results file is a JSON list of records, one per (model, strategy, batch_size, repeat) run
(written by ``graphbatch bench`` and by any other framework's bench), with the keys of
`BENCH_KEYS` (extra keys are kept). Times are milliseconds (``*_ms_*``) or seconds
(``compile_s``), memory in bytes, throughput in graphs per second. ``compiled`` (optional, bool)
marks a compiled run of a padded strategy: runs are grouped by `label`, so eager and compiled
runs of one strategy are summarised apart.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import InputError
from .._io import parse_json, read_bounded

__all__ = [
    "BENCH_KEYS",
    "BENCH_METRICS",
    "BENCH_OPTIONAL_METRICS",
    "LIST_KEYS",
    "bench_label",
    "break_even",
    "load_bench",
    "step_timing_fields",
    "step_list_fields",
    "summarize_bench",
    "validate_bench",
]

BENCH_KEYS = (
    "model",
    "strategy",
    "batch_size",
    "repeat",
    "compiles",
    "compile_s",
    "step_ms_mean",
    "step_ms_median",
    "update_ms_median",
    "batching_ms_median",
    "graphs_per_s",
    "peak_mem_bytes",
    "test_rmse",
)
#: Numeric keys summarised over repeats (``None`` values count as missing).
BENCH_METRICS = BENCH_KEYS[4:]
#: Numeric keys summarised when present (NaN in the summary when no record has them).
BENCH_OPTIONAL_METRICS = (
    "steady_graphs_per_s",
    "update_us_per_graph",
    "update_us_per_graph_median",
)
#: Record keys that hold per-step or per-evaluation lists (kept in JSON, left out of the CSV).
LIST_KEYS = (
    "eval_steps",
    "test_mae_curve",
    "test_rmse_curve",
    "step_ms",
    "compile_steps",
    "update_ms_steps",
    "real_graphs_steps",
    "input_wait_ms_steps",
)


def step_timing_fields(
    batching_ms: np.ndarray,
    update_ms: np.ndarray,
    real_graphs: np.ndarray,
    steady: np.ndarray,
    *,
    overhead_ms: float = 0.0,
) -> dict[str, float]:
    """The timing keys of a record from per-step arrays (milliseconds; real graphs per step;
    ``steady``: bool mask of the steps without a compilation). ``graphs_per_s`` counts every
    step plus ``overhead_ms`` (e.g. untimed warm-up calls); the ``steady_*``/``update_us_*`` keys
    only the steady steps."""
    step_ms = batching_ms + update_ms
    return {
        "step_ms_mean": float(step_ms.mean()),
        "step_ms_median": float(np.median(step_ms)),
        "update_ms_mean": float(update_ms.mean()),
        "update_ms_median": float(np.median(update_ms)),
        "batching_ms_mean": float(batching_ms.mean()),
        "batching_ms_median": float(np.median(batching_ms)),
        "graphs_per_s": float(real_graphs.sum() / ((step_ms.sum() + overhead_ms) / 1e3)),
        "steady_graphs_per_s": float(real_graphs[steady].sum() / (step_ms[steady].sum() / 1e3)),
        "update_us_per_graph": float(update_ms[steady].sum() * 1e3 / real_graphs[steady].sum()),
        "update_us_per_graph_median": float(
            np.median(update_ms[steady] * 1e3 / np.maximum(real_graphs[steady], 1))
        ),
    }


def step_list_fields(
    batching_ms: np.ndarray, update_ms: np.ndarray, real_graphs: np.ndarray, compiling: np.ndarray
) -> dict[str, list]:
    """The per-step list keys of a record (``LIST_KEYS`` without the evaluation curves and
    the JAX bench's ``input_wait_ms_steps``)."""
    return {
        "step_ms": [round(float(x), 4) for x in batching_ms + update_ms],
        "update_ms_steps": [round(float(x), 4) for x in update_ms],
        "real_graphs_steps": [int(x) for x in real_graphs],
        "compile_steps": [int(i) for i in np.flatnonzero(compiling)],
    }


#: Baselines whose name already says whether they compile (no ``+compile`` suffix).
_SELF_NAMED = ("pyg-compile", "mace-compile")


def bench_label(rec: dict[str, Any]) -> str:
    """The strategy name, with ``+compile`` for compiled runs of padded torch strategies
    (baselines and JAX runs, which are all jitted, keep their name): the group a record is
    summarised in."""
    s = str(rec["strategy"])
    if rec.get("compiled") and s not in _SELF_NAMED and rec.get("framework") != "jax":
        return f"{s}+compile"
    return s


def break_even(
    compile_s: float,
    steady_graphs_per_s: float,
    graphs_per_step: float,
    base_compile_s: float,
    base_steady_graphs_per_s: float,
    planned_steps: int | None = None,
) -> dict[str, Any]:
    """When a run that pays ``compile_s`` seconds up front and then trains ``steady_graphs_per_s``
    real graphs per second (``graphs_per_step`` a step) overtakes a baseline (``base_*``):
    training ``G`` real graphs takes ``C + G / rate`` seconds for either.

    Returns ``steps``: the fewest steps of the run after which its total time, compilation
    included, is at most the baseline's for the same real graphs (0 when it never trails;
    ``None`` when it never catches up, or ``reason`` says an input is missing); ``graphs``:
    the real graphs at that point; with ``planned_steps``, ``planned_steps``, ``pays_off``
    (``steps <= planned_steps``) and ``speedup_planned`` (the baseline's total time over the
    run's for the planned steps' graphs, both compilations counted)."""
    vals = (
        compile_s,
        steady_graphs_per_s,
        graphs_per_step,
        base_compile_s,
        base_steady_graphs_per_s,
    )
    out: dict[str, Any] = {
        "compile_s": compile_s,
        "base_compile_s": base_compile_s,
        "steps": None,
        "graphs": None,
    }
    if planned_steps is not None:
        out["planned_steps"] = int(planned_steps)
    if (
        not all(isinstance(v, (int, float)) and math.isfinite(v) for v in vals)
        or min(steady_graphs_per_s, base_steady_graphs_per_s, graphs_per_step) <= 0
    ):
        out["reason"] = "a rate, graphs per step or compile time is missing or not positive"
        if planned_steps is not None:
            out["pays_off"], out["speedup_planned"] = False, None
        return out
    extra = max(0.0, compile_s) - max(0.0, base_compile_s)  # seconds the run starts behind
    gain = 1.0 / base_steady_graphs_per_s - 1.0 / steady_graphs_per_s  # seconds saved a graph
    if extra <= 0:
        out["steps"], out["graphs"] = 0, 0.0
    elif gain > 0:
        steps = math.ceil(extra / (gain * graphs_per_step) - 1e-9)
        out["steps"], out["graphs"] = int(steps), steps * graphs_per_step
    else:
        out["reason"] = "its steady rate is not above the baseline's: it never catches up"
    if planned_steps is not None:
        graphs = planned_steps * graphs_per_step
        run = max(0.0, compile_s) + graphs / steady_graphs_per_s
        base = max(0.0, base_compile_s) + graphs / base_steady_graphs_per_s
        out["pays_off"] = out["steps"] is not None and out["steps"] <= planned_steps
        out["speedup_planned"] = base / run if run > 0 else float("inf")
    return out


def validate_bench(records: Any, source: str = "benchmark results") -> list[dict[str, Any]]:
    """Check ``records`` is a list of dicts with every key of `BENCH_KEYS`; return it as a list."""
    if not isinstance(records, list):
        raise InputError(f"{source}: expected a JSON list of records, got {type(records).__name__}")
    out = []
    for i, rec in enumerate(records):
        if not isinstance(rec, dict):
            raise InputError(f"{source}: record {i} is a {type(rec).__name__}, not an object")
        missing = [k for k in BENCH_KEYS if k not in rec]
        if missing:
            raise InputError(f"{source}: record {i} lacks key(s) {', '.join(missing)}")
        for k in BENCH_METRICS + BENCH_OPTIONAL_METRICS:
            v = rec.get(k)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise InputError(f"{source}: record {i} has non-numeric {k} = {v!r}")
        b = rec["batch_size"]
        if isinstance(b, bool) or not isinstance(b, int):
            raise InputError(f"{source}: record {i} has non-integer batch_size = {b!r}")
        out.append(dict(rec))
    return out


#: Largest benchmark results file read (a full grid's results.json is a few MB).
_MAX_BENCH_BYTES = 1 << 30


def load_bench(paths: Iterable[str | os.PathLike]) -> list[dict[str, Any]]:
    """Records of all ``paths`` concatenated; unreadable or malformed files raise with their
    path."""
    records: list[dict[str, Any]] = []
    for path in paths:
        path = Path(path)
        try:
            raw = read_bounded(path, "benchmark results", _MAX_BENCH_BYTES)
        except FileNotFoundError:
            raise FileNotFoundError(f"benchmark results {str(path)!r} do not exist") from None
        data = parse_json(
            raw, f"cannot read benchmark results {str(path)!r}", max_bytes=_MAX_BENCH_BYTES
        )
        records.extend(validate_bench(data, repr(str(path))))
    return records


def summarize_bench(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (model, `bench_label`, batch_size): ``repeats``, ``compiled`` and, for each
    metric of `BENCH_METRICS` and `BENCH_OPTIONAL_METRICS`, its median, min and max over
    repeats (``<metric>``, ``<metric>_min``, ``<metric>_max``; missing, ``None`` and non-finite
    values are left out, NaN when no repeat has a value). ``strategy`` is the label. Rows sorted
    by model, batch size, label."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for rec in records:
        key = (str(rec["model"]), bench_label(rec), int(rec["batch_size"]))
        groups.setdefault(key, []).append(rec)
    rows = []
    for (model, lab, bs), recs in sorted(
        groups.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][1])
    ):
        row: dict[str, Any] = {
            "model": model,
            "strategy": lab,
            "batch_size": bs,
            "repeats": len(recs),
            "compiled": bool(recs[0].get("compiled", False)),
        }
        for k in BENCH_METRICS + BENCH_OPTIONAL_METRICS:
            vals = np.array(
                [float(r[k]) for r in recs if r.get(k) is not None and math.isfinite(float(r[k]))],
                dtype=np.float64,
            )
            if vals.size:
                row[k], row[k + "_min"], row[k + "_max"] = (
                    float(np.median(vals)),
                    float(vals.min()),
                    float(vals.max()),
                )
            else:
                row[k] = row[k + "_min"] = row[k + "_max"] = float("nan")
        rows.append(row)
    return rows
