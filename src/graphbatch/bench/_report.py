"""Summaries of bench records: learning-effect tests, the issue's targets, files on disk.

The record keys and the summary over repeats belong to `graphbatch.analysis` (`BENCH_KEYS`,
`bench_label`, `summarize_bench`); this module derives the CLI table, the targets and the
learning tests from them.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from .._io import atomic_write_text
from ..analysis import LIST_KEYS, bench_label, break_even, summarize_bench
from ._stats import pairwise_mannwhitney, pairwise_ttest

__all__ = [
    "LIST_KEYS",
    "break_even_lines",
    "label",
    "learning_tests",
    "summarize",
    "targets",
    "write_results",
]

#: Baselines a compiled run's break-even is counted against, first present wins.
_EAGER_BASELINES = ("pyg-eager", "mace-eager")

#: The grouping label of a record (``+compile`` for compiled padded runs).
label = bench_label

#: Columns of the CLI/summary.json table: ``(table key, summarize_bench key, scale)``.
_TABLE = (
    ("compile_s", "compile_s", 1.0),
    ("batching_ms", "batching_ms_median", 1.0),
    ("update_ms", "update_ms_median", 1.0),
    ("step_ms_median", "step_ms_median", 1.0),
    ("step_ms_mean", "step_ms_mean", 1.0),
    ("graphs_per_s", "graphs_per_s", 1.0),
    ("steady_graphs_per_s", "steady_graphs_per_s", 1.0),
    ("update_us_per_graph", "update_us_per_graph", 1.0),
    ("update_us_per_graph_median", "update_us_per_graph_median", 1.0),
    ("peak_mem_mb", "peak_mem_bytes", 1.0 / 2**20),
    ("test_rmse", "test_rmse", 1.0),
)


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The table the CLI prints: `summarize_bench`'s medians over repeats per (model, batch
    size, label), with short column names, fastest first within a (model, batch size)."""
    rows = []
    for r in summarize_bench(records):
        row = {
            "model": r["model"],
            "batch_size": r["batch_size"],
            "strategy": r["strategy"],
            "repeats": r["repeats"],
            "compiles": int(r["compiles"]) if math.isfinite(r["compiles"]) else None,
        }
        row.update({key: r[src] * scale for key, src, scale in _TABLE})
        rows.append(row)
    rows.sort(key=lambda r: (r["model"], r["batch_size"], -r["graphs_per_s"]))
    return rows


def learning_tests(records: list[dict[str, Any]], alpha: float = 0.05) -> list[dict[str, Any]]:
    """Per (model, batch size): pairwise Mann-Whitney U (Bonferroni) and Student's t on the
    final test RMSE across repeats, between strategies with >= 2 repeats."""
    groups: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        groups[(r["model"], r["batch_size"])][label(r)].append(r["test_rmse"])
    out = []
    for (m, b), samples in sorted(groups.items()):
        samples = {k: v for k, v in samples.items() if len(v) >= 2}
        if len(samples) < 2:
            continue
        mw = pairwise_mannwhitney(samples, alpha=alpha)
        tt = pairwise_ttest(samples, alpha=alpha)
        out.append(
            {
                "model": m,
                "batch_size": b,
                "names": list(mw.names),
                "mannwhitney": {
                    "U": mw.statistic.tolist(),
                    "p": mw.pvalue.tolist(),
                    "p_bonferroni": mw.pvalue_adjusted.tolist(),
                    "pairs": mw.records(),
                },
                "ttest": {
                    "t": tt.statistic.tolist(),
                    "p": tt.pvalue.tolist(),
                    "pairs": tt.records(),
                },
                "num_comparisons": mw.num_comparisons,
                "repeats": {k: len(v) for k, v in samples.items()},
            }
        )
    return out


def _per_repeat_cost(records, model, batch_size, names) -> dict[str, list[float]]:
    """Padding cost of each repeat alone (its run over the same repeat's ``unpadded`` run): the
    spread across repeats is the noise level of the median ratio."""
    runs = {
        (label(r), r["repeat"]): r
        for r in records
        if r["model"] == model and r["batch_size"] == batch_size
    }
    out: dict[str, list[float]] = {}
    for k in names:
        out[k] = [
            runs[(k, rep)]["update_us_per_graph_median"]
            / runs[("unpadded", rep)]["update_us_per_graph_median"]
            for (lab, rep) in sorted(runs)
            if lab == k and ("unpadded", rep) in runs
        ]
    return out


def _step_stats(records, model, batch_size) -> dict[str, tuple[float, float]]:
    """Per label: (median real graphs per step, median planned steps) over its repeats."""
    by: defaultdict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in records:
        mine = r["model"] == model and r["batch_size"] == batch_size
        if mine and r.get("steps") and r.get("real_graphs") is not None:
            by[label(r)].append((r["real_graphs"] / r["steps"], float(r["steps"])))
    return {
        k: (float(np.median([g for g, _ in v])), float(np.median([n for _, n in v])))
        for k, v in by.items()
    }


def _break_even(records, model, batch_size, d) -> dict[str, dict[str, Any]]:
    """Every compiled run of the group ``d`` (label -> summary row) against the eager
    baseline: `graphbatch.analysis.break_even` of their medians over repeats, over the steps
    the runs planned."""
    base = next((b for b in _EAGER_BASELINES if b in d), None)
    if base is None:
        return {}
    stats = _step_stats(records, model, batch_size)
    out = {}
    for k, row in d.items():
        compiled = k.endswith("+compile") or k in ("pyg-compile", "mace-compile")
        if not compiled or k not in stats:
            continue
        per_step, steps = stats[k]
        b = d[base]
        out[k] = {
            "baseline": base,
            **break_even(
                float(row["compile_s"]),
                float(row["steady_graphs_per_s"]),
                per_step,
                float(b["compile_s"]),
                float(b["steady_graphs_per_s"]),
                planned_steps=int(steps),
            ),
        }
    return out


def break_even_lines(target_rows: list[dict[str, Any]]) -> list[str]:
    """One line per compiled run of `targets`' ``break_even``: after how many steps it
    overtakes the eager baseline, compilation counted, against the steps planned."""
    lines = []
    for t in target_rows:
        for k, be in t.get("break_even", {}).items():
            head = (
                f"{t['model']} b={t['batch_size']}: {k} (compile {be['compile_s']:.1f} s) vs "
                f"{be['baseline']}"
            )
            if be["steps"] is None:
                lines.append(f"{head}: never overtakes ({be.get('reason', '')})")
                continue
            verdict = "pays off" if be["pays_off"] else "does NOT pay off"
            lines.append(
                f"{head}: overtakes after {be['steps']:,} steps; {be['planned_steps']:,} "
                f"planned: {verdict} ({be['speedup_planned']:.2f}x over them)"
            )
    return lines


def targets(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's targets, measured: compilations, padding cost, end-to-end speedup.

    Per (model, batch size): padding cost = a strategy's eager update time per real graph (median
    over steps of update ms / real graphs) over the unpadded eager run's (1.0 = no waste; the
    mean-based ratio is given too); end to end = the best graphbatch ``pack-lpf`` run
    (eager or compiled) over ``pyg-eager`` in real graphs/s (medians over repeats);
    ``break_even``: per compiled run, the steps after which it overtakes ``pyg-eager`` (or
    ``mace-eager``) with its compile time counted, beside the steps planned (`_break_even`).
    """
    rows = summarize(records)
    by: defaultdict[tuple[str, int], dict[str, dict[str, Any]]] = defaultdict(dict)
    for r in rows:
        by[(r["model"], r["batch_size"])][r["strategy"]] = r
    out = []
    for (m, b), d in sorted(by.items()):
        t: dict[str, Any] = {"model": m, "batch_size": b}
        t["compiles"] = {k: v["compiles"] for k, v in d.items()}
        t["compile_s"] = {k: round(v["compile_s"], 3) for k, v in d.items()}
        if "unpadded" in d:
            eager = {
                k: v
                for k, v in d.items()
                if not k.endswith("+compile") and k not in ("pyg-eager", "pyg-compile")
            }
            base = d["unpadded"]["update_us_per_graph_median"]
            t["padding_cost"] = {
                k: v["update_us_per_graph_median"] / base for k, v in eager.items()
            }
            base = d["unpadded"]["update_us_per_graph"]
            t["padding_cost_mean"] = {k: v["update_us_per_graph"] / base for k, v in eager.items()}
            t["padding_cost_repeats"] = _per_repeat_cost(records, m, b, eager)
        if "pyg-eager" in d:
            cands = {k: v for k, v in d.items() if k in ("pack-lpf", "pack-lpf+compile")}
            if cands:
                best = max(cands, key=lambda k: cands[k]["graphs_per_s"])
                t["end_to_end"] = {
                    "best": best,
                    "graphs_per_s": cands[best]["graphs_per_s"],
                    "pyg_eager_graphs_per_s": d["pyg-eager"]["graphs_per_s"],
                    "speedup": cands[best]["graphs_per_s"] / d["pyg-eager"]["graphs_per_s"],
                    "steady_speedup": {
                        k: v["steady_graphs_per_s"] / d["pyg-eager"]["steady_graphs_per_s"]
                        for k, v in cands.items()
                    },
                }
        be = _break_even(records, m, b, d)
        if be:
            t["break_even"] = be
        out.append(t)
    return out


def write_results(
    out_dir: str | os.PathLike,
    records: list[dict[str, Any]],
    config: dict[str, Any],
    *,
    plots: bool = True,
    extra: dict[str, Any] | None = None,
) -> dict[str, Path]:
    """Write ``results.json`` (the records), ``results.csv`` (their fields but the per-step
    lists and the ``profile`` dict), ``summary.json`` (config, summary table, targets, learning
    tests, plus ``extra`` entries) and, with matplotlib, ``*.png``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "results.json": out / "results.json",
        "results.csv": out / "results.csv",
        "summary.json": out / "summary.json",
    }
    atomic_write_text(paths["results.json"], json.dumps(records, indent=1))
    first = records[0] if records else {}
    cols = [k for k in first if k not in LIST_KEYS and not isinstance(first[k], dict)]
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore")
    w.writeheader()
    w.writerows(records)
    atomic_write_text(paths["results.csv"], buf.getvalue())
    summary = {
        "config": config,
        "summary": summarize(records),
        "targets": targets(records),
        "learning_tests": learning_tests(records),
        **(extra or {}),
    }
    atomic_write_text(paths["summary.json"], json.dumps(summary, indent=1))
    if plots:
        from ._plots import plot_all

        paths.update(plot_all(records, summary["learning_tests"], out))
    return paths
