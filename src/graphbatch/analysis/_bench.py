"""Benchmark result files: read, validate and summarise over repeats (no plotting here).

A results file is a JSON list of records, one per (model, strategy, batch_size, repeat) run, with
the keys in `BENCH_KEYS` (extra keys are kept). Times are milliseconds (``*_ms_*``) or seconds
(``compile_s``), memory in bytes, throughput in graphs per second.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from .._errors import InputError

__all__ = ["BENCH_KEYS", "BENCH_METRICS", "load_bench", "summarize_bench", "validate_bench"]

BENCH_KEYS = (
    "model", "strategy", "batch_size", "repeat", "compiles", "compile_s", "step_ms_mean",
    "step_ms_median", "update_ms_median", "batching_ms_median", "graphs_per_s", "peak_mem_bytes",
    "test_rmse",
)
#: Numeric keys summarised over repeats (``None`` values count as missing).
BENCH_METRICS = BENCH_KEYS[4:]


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
        for k in BENCH_METRICS:
            v = rec[k]
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise InputError(f"{source}: record {i} has non-numeric {k} = {v!r}")
        out.append(dict(rec))
    return out


def load_bench(paths: Iterable[str | os.PathLike]) -> list[dict[str, Any]]:
    """Records of all ``paths`` concatenated; unreadable or malformed files raise with their path."""
    records: list[dict[str, Any]] = []
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"benchmark results {str(path)!r} do not exist")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"cannot read benchmark results {str(path)!r}: {exc}") from exc
        records.extend(validate_bench(data, repr(str(path))))
    return records


def summarize_bench(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (model, strategy, batch_size): ``repeats`` and, for each metric of
    `BENCH_METRICS`, its median, min and max over repeats (``<metric>``, ``<metric>_min``,
    ``<metric>_max``; NaN when no repeat has a value). Rows sorted by model, batch size, strategy."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for rec in records:
        key = (str(rec["model"]), str(rec["strategy"]), int(rec["batch_size"]))
        groups.setdefault(key, []).append(rec)
    rows = []
    for (model, strategy, bs), recs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][2],
                                                                               kv[0][1])):
        row: dict[str, Any] = {"model": model, "strategy": strategy, "batch_size": bs,
                               "repeats": len(recs)}
        for k in BENCH_METRICS:
            vals = np.array([float(r[k]) for r in recs if r[k] is not None
                             and math.isfinite(float(r[k]))], dtype=np.float64)
            if vals.size:
                row[k], row[k + "_min"], row[k + "_max"] = (
                    float(np.median(vals)), float(vals.min()), float(vals.max()))
            else:
                row[k] = row[k + "_min"] = row[k + "_max"] = float("nan")
        rows.append(row)
    return rows
