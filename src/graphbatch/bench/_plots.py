"""Figures of a bench run (matplotlib, Agg): one PNG per figure type of the paper.

`plot_all` draws each figure with one function (``_timing``, ``_running_average``, ``_bars``,
``_test_rmse``, ``_heatmaps``) and writes it through `_Figures`."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from .._io import atomic_write
from ..analysis import bench_label as label
from ..analysis import summarize_bench

__all__ = ["plot_all"]

#: Bar charts of the summary: (summary key, y label, file name).
_BARS = (
    ("compiles", "compilations per run", "compiles.png"),
    ("compile_s", "compile time per run (s)", "compile_seconds.png"),
    ("peak_mem_mb", "peak memory (MiB)", "memory.png"),
    ("graphs_per_s", "real graphs / s", "throughput.png"),
)


class _Figures:
    """Writes figures as PNGs under ``out`` (atomically) and remembers ``{name: path}``."""

    def __init__(self, plt: Any, out: Path) -> None:
        self.plt, self.out = plt, out
        self.paths: dict[str, Path] = {}

    def save(self, fig: Any, name: str) -> None:
        fig.tight_layout()
        self.paths[name] = atomic_write(
            self.out / name, lambda fh: fig.savefig(fh, format="png", dpi=110)
        )
        self.plt.close(fig)


def plot_all(
    records: list[dict[str, Any]], tests: list[dict[str, Any]], out: Path
) -> dict[str, Path]:
    """Timing vs batch size (Figs. 5/7-10), running average of the combined time (Fig. 4),
    compilations, peak memory, test RMSE vs step (Fig. 14), Mann-Whitney / t-test heatmaps
    (Figs. 16-21). Returns ``{file name: path}``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = _Figures(plt, out)
    rows = summarize_bench(records)
    for r in rows:
        r["peak_mem_mb"] = r["peak_mem_bytes"] / 2**20
    models = sorted({r["model"] for r in rows})
    _timing(figures, rows, models)
    _running_average(figures, records, models)
    _bars(figures, rows)
    _test_rmse(figures, records, models)
    for t in tests:
        _heatmaps(figures, t)
    return figures.paths


def _timing(figures: _Figures, rows: list[dict[str, Any]], models: list[str]) -> None:
    """Timing vs batch size: batching, update, combined (median per step, median of repeats),
    one column per model."""
    fig, axes = figures.plt.subplots(3, len(models), figsize=(5 * len(models), 9), squeeze=False)
    for j, m in enumerate(models):
        by = defaultdict(list)
        for r in rows:
            if r["model"] == m:
                by[r["strategy"]].append(r)
        for i, (key, name) in enumerate(
            (
                ("batching_ms_median", "batching"),
                ("update_ms_median", "update"),
                ("step_ms_median", "combined"),
            )
        ):
            ax = axes[i, j]
            for s, rs in sorted(by.items()):
                rs = sorted(rs, key=lambda r: r["batch_size"])
                ax.plot([r["batch_size"] for r in rs], [r[key] for r in rs], "o-", label=s)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("batch size")
            ax.set_ylabel(f"median {name} time per step (ms)")
            ax.set_title(f"{m}: {name}")
        axes[0, j].legend(fontsize=7)
    figures.save(fig, "timing.png")


def _running_average(figures: _Figures, records: list[dict[str, Any]], models: list[str]) -> None:
    """Running average of the combined step time (ms) vs step, repeat 0."""
    fig, axes = figures.plt.subplots(1, len(models), figsize=(6 * len(models), 4), squeeze=False)
    for j, m in enumerate(models):
        ax = axes[0, j]
        for r in records:
            if r["model"] == m and r["repeat"] == 0:
                x = np.asarray(r["step_ms"])
                ax.plot(
                    np.arange(1, x.size + 1),
                    np.cumsum(x) / np.arange(1, x.size + 1),
                    label=f"{label(r)} b={r['batch_size']}",
                )
        ax.set_xlabel("training step")
        ax.set_ylabel("running average combined time (ms)")
        ax.set_yscale("log")
        ax.set_title(f"{m}: running average (repeat 0)")
        ax.legend(fontsize=6)
    figures.save(fig, "running_average.png")


def _bars(figures: _Figures, rows: list[dict[str, Any]]) -> None:
    """One bar chart per `_BARS` entry: compilations, compile seconds, peak memory,
    throughput, a bar per summary row."""
    for key, ylabel, name in _BARS:
        fig, ax = figures.plt.subplots(figsize=(max(6, 0.6 * len(rows)), 4))
        names = [f"{r['model']} b={r['batch_size']}\n{r['strategy']}" for r in rows]
        ax.bar(range(len(rows)), [r[key] for r in rows])
        ax.set_xticks(range(len(rows)), names, rotation=90, fontsize=6)
        ax.set_ylabel(ylabel)
        figures.save(fig, name)


def _test_rmse(figures: _Figures, records: list[dict[str, Any]], models: list[str]) -> None:
    """Test RMSE vs step, mean over repeats, one curve per (strategy, batch size)."""
    fig, axes = figures.plt.subplots(1, len(models), figsize=(6 * len(models), 4), squeeze=False)
    for j, m in enumerate(models):
        ax = axes[0, j]
        curves = defaultdict(list)
        for r in records:
            if r["model"] == m:
                curves[(label(r), r["batch_size"])].append((r["eval_steps"], r["test_rmse_curve"]))
        for (s, b), cs in sorted(curves.items()):
            steps = cs[0][0]
            ys = np.mean([c[1] for c in cs if len(c[1]) == len(steps)], axis=0)
            ax.plot(steps, ys, "o-", label=f"{s} b={b}")
        ax.set_xlabel("training step")
        ax.set_ylabel(f"test RMSE ({records[0]['unit'] if records else ''})")
        ax.set_title(f"{m}: mean test RMSE over repeats")
        ax.legend(fontsize=6)
    figures.save(fig, "test_rmse.png")


def _heatmaps(figures: _Figures, t: dict[str, Any]) -> None:
    """The pairwise tests of one (model, batch size) as heatmaps: Mann-Whitney U and its
    Bonferroni p, Student's t and its p."""
    for key, title, fname in (
        ("mannwhitney", "Mann-Whitney U", "mwu"),
        ("ttest", "Student's t", "ttest"),
    ):
        mats = (
            ((t[key]["U"], "U statistic"), (t[key]["p_bonferroni"], "p (Bonferroni)"))
            if key == "mannwhitney"
            else ((t[key]["t"], "t statistic"), (t[key]["p"], "p"))
        )
        fig, axes = figures.plt.subplots(1, 2, figsize=(11, 4.5))
        for ax, (mat, what) in zip(axes, mats, strict=True):
            _heatmap(fig, ax, np.array(mat, dtype=float), t["names"], f"{title}: {what}")
        fig.suptitle(f"{t['model']}, batch size {t['batch_size']}, final test RMSE")
        figures.save(fig, f"{fname}_{t['model']}_b{t['batch_size']}.png")


def _heatmap(fig: Any, ax: Any, a: np.ndarray, names: list[str], title: str) -> None:
    """One matrix ``a`` over ``names`` x ``names``, each finite cell labelled; p values
    (a title with ``: p``) on a fixed 0..1 scale."""
    is_p = title.split(": ", 1)[1].startswith("p")
    im = ax.imshow(
        a,
        cmap="viridis_r" if is_p else "viridis",
        vmin=0.0 if is_p else None,
        vmax=1.0 if is_p else None,
    )
    n = len(names)
    ax.set_xticks(range(n), names, rotation=45, ha="right", fontsize=7)
    ax.set_yticks(range(n), names, fontsize=7)
    for i in range(n):
        for k in range(n):
            if np.isfinite(a[i, k]):
                ax.text(k, i, f"{a[i, k]:.3g}", ha="center", va="center", fontsize=6, color="w")
    ax.set_title(title)
    fig.colorbar(im, ax=ax)
