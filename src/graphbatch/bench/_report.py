"""Summaries of bench records: learning-effect tests, the issue's targets, files on disk."""

from __future__ import annotations

import csv
import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from ._stats import pairwise_mannwhitney, pairwise_ttest

__all__ = ["label", "learning_tests", "summarize", "targets", "write_results"]

#: Record keys that hold per-step or per-evaluation lists (kept in JSON, left out of the CSV).
LIST_KEYS = ("eval_steps", "test_mae_curve", "test_rmse_curve", "step_ms", "compile_steps",
             "update_ms_steps", "real_graphs_steps")


def label(rec: dict[str, Any]) -> str:
    """Strategy name with ``+compile`` for compiled padded torch runs (baselines and JAX runs,
    which are all jitted, keep their name)."""
    s = rec["strategy"]
    if rec.get("compiled") and s not in ("pyg-compile",) and rec.get("framework") != "jax":
        return f"{s}+compile"
    return s


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Medians over repeats per (model, batch size, label): the table the CLI prints."""
    groups: dict[tuple, list] = defaultdict(list)
    for r in records:
        groups[(r["model"], r["batch_size"], label(r))].append(r)
    rows = []
    for (m, b, lab), rs in groups.items():
        med = lambda k: float(np.median([x[k] for x in rs]))  # noqa: E731
        rows.append({
            "model": m, "batch_size": b, "strategy": lab, "repeats": len(rs),
            "compiles": int(np.median([x["compiles"] for x in rs])),
            "compile_s": med("compile_s"),
            "batching_ms": med("batching_ms_median"),
            "update_ms": med("update_ms_median"),
            "step_ms_median": med("step_ms_median"),
            "step_ms_mean": med("step_ms_mean"),
            "graphs_per_s": med("graphs_per_s"),
            "steady_graphs_per_s": med("steady_graphs_per_s"),
            "update_us_per_graph": med("update_us_per_graph"),
            "update_us_per_graph_median": med("update_us_per_graph_median"),
            "peak_mem_mb": med("peak_mem_bytes") / 2**20,
            "test_rmse": med("test_rmse"),
        })
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
        out.append({
            "model": m, "batch_size": b, "names": list(mw.names),
            "mannwhitney": {"U": mw.statistic.tolist(), "p": mw.pvalue.tolist(),
                            "p_bonferroni": mw.pvalue_adjusted.tolist(),
                            "pairs": mw.records()},
            "ttest": {"t": tt.statistic.tolist(), "p": tt.pvalue.tolist(), "pairs": tt.records()},
            "num_comparisons": mw.num_comparisons,
            "repeats": {k: len(v) for k, v in samples.items()},
        })
    return out


def _per_repeat_cost(records, model, batch_size, names) -> dict[str, list[float]]:
    """Padding cost of each repeat alone (its run over the same repeat's ``unpadded`` run): the
    spread across repeats is the noise level of the median ratio."""
    runs = {(label(r), r["repeat"]): r for r in records
            if r["model"] == model and r["batch_size"] == batch_size}
    out: dict[str, list[float]] = {}
    for k in names:
        out[k] = [runs[(k, rep)]["update_us_per_graph_median"]
                  / runs[("unpadded", rep)]["update_us_per_graph_median"]
                  for (lab, rep) in sorted(runs) if lab == k and ("unpadded", rep) in runs]
    return out


def targets(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's targets, measured: compilations, padding cost, end-to-end speedup.

    Per (model, batch size): padding cost = a strategy's eager update time per real graph (median
    over steps of update ms / real graphs) over the unpadded eager run's (1.0 = no waste; the
    mean-based ratio is given too); end to end = the best graphbatch ``pack-lpf`` run
    (eager or compiled) over ``pyg-eager`` in real graphs/s (medians over repeats).
    """
    rows = summarize(records)
    by = defaultdict(dict)
    for r in rows:
        by[(r["model"], r["batch_size"])][r["strategy"]] = r
    out = []
    for (m, b), d in sorted(by.items()):
        t: dict[str, Any] = {"model": m, "batch_size": b}
        t["compiles"] = {k: v["compiles"] for k, v in d.items()}
        t["compile_s"] = {k: round(v["compile_s"], 3) for k, v in d.items()}
        if "unpadded" in d:
            eager = {k: v for k, v in d.items()
                     if not k.endswith("+compile") and k not in ("pyg-eager", "pyg-compile")}
            base = d["unpadded"]["update_us_per_graph_median"]
            t["padding_cost"] = {k: v["update_us_per_graph_median"] / base
                                 for k, v in eager.items()}
            base = d["unpadded"]["update_us_per_graph"]
            t["padding_cost_mean"] = {k: v["update_us_per_graph"] / base
                                      for k, v in eager.items()}
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
                    "steady_speedup": {k: v["steady_graphs_per_s"]
                                       / d["pyg-eager"]["steady_graphs_per_s"]
                                       for k, v in cands.items()},
                }
        out.append(t)
    return out


def write_results(out_dir: str | os.PathLike, records: list[dict[str, Any]],
                  config: dict[str, Any], *, plots: bool = True,
                  extra: dict[str, Any] | None = None) -> dict[str, Path]:
    """Write ``results.json`` (the records), ``results.csv`` (scalar fields), ``summary.json``
    (config, summary table, targets, learning tests, plus ``extra`` entries) and, with
    matplotlib, ``*.png``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"results.json": out / "results.json", "results.csv": out / "results.csv",
             "summary.json": out / "summary.json"}
    _atomic_text(paths["results.json"], json.dumps(records, indent=1))
    cols = [k for k in records[0] if k not in LIST_KEYS] if records else []
    tmp = paths["results.csv"].with_suffix(".csv.tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(records)
    os.replace(tmp, paths["results.csv"])
    summary = {"config": config, "summary": summarize(records), "targets": targets(records),
               "learning_tests": learning_tests(records), **(extra or {})}
    _atomic_text(paths["summary.json"], json.dumps(summary, indent=1))
    if plots:
        from ._plots import plot_all

        paths.update(plot_all(records, summary["learning_tests"], out))
    return paths


def _atomic_text(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
