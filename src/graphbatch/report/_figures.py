"""Matplotlib figures of the report. Each function takes data and returns a `Figure`.

Figures are built with `matplotlib.figure.Figure` (no pyplot, no global state) so they render
headless and can be garbage-collected without a GUI backend.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.cm import ScalarMappable
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure

from .._errors import InputError
from .._sizes import GraphSizes
from ..analysis import Comparison, DatasetSummary

__all__ = [
    "count_bins",
    "fig_bench_compile",
    "fig_bench_memory",
    "fig_bench_timing",
    "fig_graphs_per_batch",
    "fig_limits_heatmap",
    "fig_size_hist2d",
    "fig_size_histograms",
    "fig_strategy_comparison",
    "fig_tune_fit",
    "strategy_colors",
]

_MIB = 1024.0 * 1024.0
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_LINES = ("-", "--", "-.", ":")


def count_bins(values: np.ndarray, max_bins: int = 100) -> tuple[np.ndarray, bool]:
    """Histogram bin edges for counts: one bin per integer when the range is small, logarithmic
    bins for long tails (max > 50 x median), else ``max_bins`` linear bins. Returns
    ``(edges, log_scale)``; log bins start at 1 (zeros are not shown on a log axis)."""
    x = np.asarray(values)
    lo, hi = int(x.min()), int(x.max())
    med = float(np.median(x))
    if hi - lo + 1 <= max_bins:
        return np.arange(lo - 0.5, hi + 1.5), False
    if hi > 50 * max(med, 1.0):
        return np.logspace(0.0, math.log10(hi + 1), max_bins + 1), True
    return np.linspace(lo, hi + 1, max_bins + 1), False


def strategy_colors(labels: Sequence[str]) -> dict[str, Any]:
    """One distinct colour per label, stable for a given label order (tab10, then tab20)."""
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(labels) <= 10 else "tab20"]
    return {lab: cmap(i % cmap.N) for i, lab in enumerate(labels)}


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


# ------------------------------------------------------------------ dataset
def fig_size_histograms(sizes: GraphSizes, summary: DatasetSummary) -> Figure:
    """Two panels: graphs per node count and per edge count, with mean and max marked."""
    fig = Figure(figsize=(11, 3.8), layout="constrained")
    axes = fig.subplots(1, 2)
    for ax, values, col, color in (
        (axes[0], sizes.n_node, summary.nodes, "tab:blue"),
        (axes[1], sizes.n_edge, summary.edges, "tab:orange"),
    ):
        edges, log = count_bins(values)
        shown = values[values >= 1] if log else values
        ax.hist(shown, bins=edges, color=color, alpha=0.85, label="graphs")
        ax.axvline(col.mean, color="black", ls="--", lw=1.2, label=f"mean {col.mean:.1f}")
        ax.axvline(col.max, color="tab:red", ls=":", lw=1.5, label=f"max {col.max:,}")
        kurt = "n/a" if math.isnan(col.excess_kurtosis) else f"{col.excess_kurtosis:.2f}"
        title = f"{col.name} per graph (excess kurtosis {kurt})"
        if log:
            ax.set_xscale("log")
            ax.set_yscale("log")
            zeros = int((values < 1).sum())
            title += "\nlog axes: long tail" + (
                f"; {zeros:,} graphs with 0 not shown" if zeros else ""
            )
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(f"{col.name} per graph")
        ax.set_ylabel("number of graphs")
        ax.legend(fontsize=8)
    fig.suptitle(f"Size distribution of {summary.num_graphs:,} graphs", fontsize=11)
    return fig


def fig_size_hist2d(sizes: GraphSizes) -> Figure:
    """The 2-D (nodes, edges) histogram: graph counts per cell on a log colour scale."""
    fig = Figure(figsize=(7.5, 5.5), layout="constrained")
    ax = fig.subplots()
    xb, xlog = count_bins(sizes.n_node, 80)
    yb, ylog = count_bins(sizes.n_edge, 80)
    h, _, _ = np.histogram2d(sizes.n_node, sizes.n_edge, bins=(xb, yb))
    h = np.ma.masked_equal(h, 0)
    mesh = ax.pcolormesh(xb, yb, h.T, cmap="viridis", norm=LogNorm(vmin=1, vmax=max(h.max(), 2)))
    fig.colorbar(mesh, ax=ax, label="number of graphs (log scale)")
    if xlog:
        ax.set_xscale("log")
    if ylog:
        ax.set_yscale("log")
    distinct = len(sizes.histogram())
    ax.set_title(f"Graphs per (nodes, edges) cell: {distinct:,} distinct pairs", fontsize=10)
    ax.set_xlabel("nodes per graph")
    ax.set_ylabel("edges per graph")
    return fig


def fig_limits_heatmap(records: Sequence[dict[str, Any]]) -> Figure:
    """Harmonic mean of node and edge packing efficiency over (node, edge) limits, optimum marked.

    ``records`` come best first (as `graphbatch.packing.search_limits` returns them); cells with
    several graph limits show their best value. Values below 50% are drawn as 50% (as the paper's
    Figure 5 does) when present.
    """
    if not records:
        raise InputError("no limit records to plot")
    xs = np.array([int(r["max_nodes"]) for r in records])
    ys = np.array([int(r["max_edges"]) for r in records])
    hm = np.array([float(r["harmonic_mean"]) for r in records])
    ux, uy = np.unique(xs), np.unique(ys)
    fig = Figure(figsize=(8, 5.8), layout="constrained")
    ax = fig.subplots()
    vmin = 0.5 if hm.min() < 0.5 else float(hm.min())
    norm = Normalize(vmin=100 * vmin, vmax=100 * max(float(hm.max()), vmin + 1e-9))
    label = "harmonic mean of node and edge efficiency (%)"
    if hm.min() < 0.5:
        label += "\nvalues below 50% shown as 50%"
    if ux.size * uy.size <= 4 * len(records) and ux.size > 1 and uy.size > 1:
        grid = np.full((uy.size, ux.size), np.nan)
        xi, yi = np.searchsorted(ux, xs), np.searchsorted(uy, ys)
        for i, j, v in zip(yi, xi, hm, strict=True):
            if not v <= grid[i, j]:  # keep the best over graph limits (NaN compares False)
                grid[i, j] = v
        mesh: ScalarMappable = ax.pcolormesh(
            _centers_to_edges(ux),
            _centers_to_edges(uy),
            np.ma.masked_invalid(100 * np.maximum(grid, vmin)),
            cmap="magma",
            norm=norm,
        )
    else:  # scattered search points (derivative-free search)
        mesh = ax.scatter(xs, ys, c=100 * np.maximum(hm, vmin), cmap="magma", norm=norm, s=30)
    fig.colorbar(mesh, ax=ax, label=label)
    best = records[0]
    ax.plot(
        [best["max_nodes"]],
        [best["max_edges"]],
        marker="*",
        ms=18,
        color="cyan",
        mec="black",
        ls="none",
        label=(
            f"optimum: {best['max_nodes']} nodes, {best['max_edges']} edges, "
            f"{best['max_graphs']} graphs\n(node {_pct(best['node_eff'])}, edge "
            f"{_pct(best['edge_eff'])}, harmonic mean {_pct(best['harmonic_mean'])})"
        ),
    )
    ax.legend(loc="upper left", fontsize=8, framealpha=0.9)
    ax.set_xlabel("node limit per pack (max nodes)")
    ax.set_ylabel("edge limit per pack (max edges)")
    ax.set_title(
        f"Packing efficiency vs limits ({len(records):,} limit pairs evaluated)", fontsize=10
    )
    return fig


def _centers_to_edges(c: np.ndarray) -> np.ndarray:
    c = c.astype(np.float64)
    if c.size == 1:
        return np.array([c[0] - 0.5, c[0] + 0.5])
    mid = (c[1:] + c[:-1]) / 2
    return np.concatenate([[c[0] - (mid[0] - c[0])], mid, [c[-1] + (c[-1] - mid[-1])]])


# --------------------------------------------------------------- strategies
def fig_strategy_comparison(comparison: Comparison) -> Figure:
    """Four panels, one bar per strategy: node/edge efficiency, batches over the lower bound,
    distinct padded shapes (compilations), and max over mean batch cost."""
    ok = [r for r in comparison.results if r.ok]
    if not ok:
        raise InputError("no successful strategy runs to plot")
    labels = [r.label for r in ok]
    y = np.arange(len(ok))
    fig = Figure(figsize=(14, max(3.2, 1.4 + 0.42 * len(ok))), layout="constrained")
    axes = fig.subplots(1, 4, sharey=True)
    stats = [r.stats for r in ok if r.stats is not None]  # every successful run has its stats
    node = [100 * s.node_efficiency for s in stats]
    edge = [100 * s.edge_efficiency for s in stats]
    axes[0].barh(y - 0.2, node, height=0.4, color="tab:blue", label="nodes")
    axes[0].barh(y + 0.2, edge, height=0.4, color="tab:orange", label="edges")
    axes[0].set_xlim(0, 150)  # room right of the bars for the legend
    axes[0].set_xticks(np.arange(0, 101, 20))
    axes[0].set_title("padding efficiency\n(higher is better)", fontsize=10)
    axes[0].set_xlabel("real / padded (%)")
    axes[0].legend(fontsize=8, loc="center right")
    over = [s.batches_over_bound for s in stats]
    axes[1].barh(y, over, color="tab:green")
    axes[1].axvline(1.0, color="black", lw=1, ls="--", label="lower bound")
    axes[1].set_xlim(0.95, max(over) * 1.05 + 0.01)
    axes[1].set_title("batches over the lower bound\n(lower is better)", fontsize=10)
    axes[1].set_xlabel("batches / lower bound")
    axes[1].legend(fontsize=8, loc="lower right")
    shapes = [s.distinct_shapes for s in stats]
    axes[2].barh(y, shapes, color="tab:purple")
    axes[2].set_xscale("log")
    axes[2].set_xlim(0.8, max(shapes) * 3)
    axes[2].set_title("distinct padded shapes\n(= compilations; lower is better)", fontsize=10)
    axes[2].set_xlabel("shapes (log scale)")
    for yi, s in zip(y, shapes, strict=True):
        axes[2].text(s * 1.08, yi, f"{s:,}", va="center", fontsize=8)
    cost = [s.cost_max_over_mean for s in stats]
    axes[3].barh(y, cost, color="tab:red")
    axes[3].axvline(1.0, color="black", lw=1, ls="--", label="perfect balance")
    axes[3].set_xlim(0.95, np.nanmax(cost) * 1.05 + 0.01)
    axes[3].set_title("max / mean batch cost\n(lower is better)", fontsize=10)
    axes[3].set_xlabel(f"max / mean of per-batch {comparison.cost_unit}")
    axes[3].legend(fontsize=8, loc="lower right")
    axes[0].set_yticks(y, labels)
    axes[0].invert_yaxis()
    for ax in axes:
        ax.grid(axis="x", alpha=0.3)
    b = comparison.budget
    fig.suptitle(
        f"Strategies at batch size {comparison.batch_size} (shared budget: {b.n_node} "
        f"nodes / {b.n_edge} edges / {b.n_graph} graphs"
        + (f", world size {comparison.world_size}" if comparison.world_size > 1 else "")
        + ")",
        fontsize=11,
    )
    return fig


def fig_graphs_per_batch(comparison: Comparison, ncols: int = 4) -> Figure:
    """Small multiples: histogram of real graphs per batch for each strategy (static-vs-dynamic
    paper, Figure 3 right)."""
    ok = [r for r in comparison.results if r.ok and r.graphs_per_batch is not None]
    if not ok:
        raise InputError("no successful strategy runs to plot")
    colors = strategy_colors([r.label for r in comparison.results])
    nrows = -(-len(ok) // ncols)
    fig = Figure(figsize=(3.4 * ncols, 2.6 * nrows + 0.6), layout="constrained")
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
    for ax, r in zip(axes, ok, strict=False):  # the grid may have spare panels
        g = r.graphs_per_batch
        assert g is not None  # runs without it are filtered out above
        lo, hi = int(g.min()), int(g.max())
        if hi - lo <= 200:
            pad = max(0, (8 - (hi - lo)) // 2)
            edges = np.arange(lo - pad - 0.5, hi + pad + 1.5)
        else:
            edges = np.linspace(lo, hi + 1, 101)
        ax.hist(g, bins=edges, color=colors[r.label])
        ax.axvline(g.mean(), color="black", ls="--", lw=1, label=f"mean {g.mean():.1f}")
        ax.set_title(r.label, fontsize=10)
        ax.set_xlabel("real graphs per batch")
        ax.set_yscale("log")
        ax.set_ylabel("batches (log scale)")
        ax.legend(fontsize=8, loc="upper left")
    for ax in axes[len(ok) :]:
        ax.set_visible(False)
    fig.suptitle(
        f"Graphs per batch before padding (batch size {comparison.batch_size}, "
        f"one slot is the padding graph)",
        fontsize=11,
    )
    return fig


# --------------------------------------------------------------- benchmarks
def _bench_panels(
    rows: Sequence[dict[str, Any]],
    metrics: Sequence[tuple[str, str]],
    title: str,
    ylog: Sequence[str] = (),
    scale: dict[str, float] | None = None,
) -> Figure:
    models = sorted({r["model"] for r in rows})
    strategies = sorted({r["strategy"] for r in rows})
    colors = strategy_colors(strategies)
    fig = Figure(figsize=(4.6 * len(models) + 1.5, 3.3 * len(metrics) + 0.5), layout="constrained")
    axes = fig.subplots(len(metrics), len(models), squeeze=False)
    scale = scale or {}
    for j, model in enumerate(models):
        for i, (key, ylabel) in enumerate(metrics):
            ax = axes[i, j]
            f = scale.get(key, 1.0)
            for k, s in enumerate(strategies):
                pts = sorted(
                    (r for r in rows if r["model"] == model and r["strategy"] == s),
                    key=lambda r: r["batch_size"],
                )
                pts = [p for p in pts if math.isfinite(p[key])]
                if not pts:
                    continue
                x = np.array([p["batch_size"] for p in pts])
                v = np.array([p[key] for p in pts]) * f
                err = (
                    np.array(
                        [
                            [p[key] - p[key + "_min"] for p in pts],
                            [p[key + "_max"] - p[key] for p in pts],
                        ]
                    )
                    * f
                )
                ax.errorbar(
                    x,
                    v,
                    yerr=err,
                    marker=_MARKERS[k % len(_MARKERS)],
                    ms=5,
                    capsize=3,
                    ls=_LINES[k % len(_LINES)],
                    color=colors[s],
                    label=s,
                )
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted({r["batch_size"] for r in rows}))
            ax.get_xaxis().set_major_formatter("{x:.0f}")
            if key in ylog:
                ax.set_yscale("log")
            ax.set_xlabel("batch size (graphs)")
            ax.set_ylabel(ylabel)
            ax.set_title(model, fontsize=10)
            ax.grid(alpha=0.3)
    handles, labels = [], []
    for ax in axes.ravel():
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    if handles:
        fig.legend(handles, labels, loc="outside right upper", fontsize=8, title="strategy")
    fig.suptitle(title + " (median over repeats, bars: min–max)", fontsize=11)
    return fig


def fig_bench_timing(rows: Sequence[dict[str, Any]]) -> Figure:
    """Median step, update and batching time (ms) and throughput (graphs/s) vs batch size."""
    return _bench_panels(
        rows,
        [
            ("step_ms_median", "median step time (ms)"),
            ("update_ms_median", "median update time (ms)"),
            ("batching_ms_median", "median batching time (ms)"),
            ("graphs_per_s", "throughput (graphs/s)"),
        ],
        "Training-step timing",
    )


def fig_bench_compile(rows: Sequence[dict[str, Any]]) -> Figure:
    """Compilations (log) and total compilation time (s) vs batch size."""
    return _bench_panels(
        rows,
        [("compiles", "compilations (log)"), ("compile_s", "compilation time (s)")],
        "Compilation",
        ylog=("compiles",),
    )


def fig_bench_memory(rows: Sequence[dict[str, Any]]) -> Figure:
    """Peak memory (MiB) vs batch size."""
    return _bench_panels(
        rows,
        [("peak_mem_bytes", "peak memory (MiB)")],
        "Peak memory",
        scale={"peak_mem_bytes": 1.0 / _MIB},
    )


def fig_tune_fit(models: dict[str, Any]) -> Figure:
    """The fitted step-cost models against their probes (`graphbatch.tune`): per mode, the
    measured step time of every probe (median, with the range of its timed steps) and the fit's
    prediction at the probe's shape, against the padded edges; the held-out (leave-one-out)
    relative errors; and, where measured, peak memory likewise."""
    with_memory = any(m.memory is not None for m in models.values())
    ncols = 3 if with_memory else 2
    fig = Figure(figsize=(4.6 * ncols, 3.8), layout="constrained")
    axes = fig.subplots(1, ncols)
    for k, (mode, m) in enumerate(models.items()):
        marker, color = _MARKERS[k % len(_MARKERS)], f"C{k}"
        probes = list(m.probes)
        if not probes:
            continue
        edges = np.array([p.shape[1] for p in probes], np.float64)
        meas = np.array([p.median_ms for p in probes])
        lo = np.array([min(p.step_ms) if p.step_ms else np.nan for p in probes])
        hi = np.array([max(p.step_ms) if p.step_ms else np.nan for p in probes])
        pred = np.array([m.step_ms(p.shape) for p in probes])
        order = np.argsort(edges, kind="stable")
        ax = axes[0]
        ax.errorbar(
            edges,
            meas,
            yerr=[meas - lo, hi - meas],
            fmt=marker,
            color=color,
            ms=5,
            capsize=2,
            label=f"{mode}: measured",
        )
        ax.plot(
            edges[order],
            pred[order],
            _LINES[k % len(_LINES)],
            color=color,
            lw=1,
            label=f"{mode}: fitted",
        )
        loo = np.asarray(m.time.loo_rel_errors, np.float64)
        if loo.size == len(probes):
            axes[1].scatter(
                edges,
                100 * loo,
                marker=marker,
                color=color,
                label=f"{mode} (median |err| {100 * np.median(np.abs(loo)):.1f}%)",
            )
        if with_memory and m.memory is not None and all(p.peak_bytes for p in probes):
            peaks = np.array([p.peak_bytes for p in probes], np.float64) / _MIB
            mpred = np.array([m.peak_bytes(p.shape) for p in probes], np.float64) / _MIB
            axes[2].scatter(edges, peaks, marker=marker, color=color, label=f"{mode}: measured")
            axes[2].plot(
                edges[order],
                mpred[order],
                _LINES[k % len(_LINES)],
                color=color,
                lw=1,
                label=f"{mode}: fitted + margin",
            )
    axes[0].set(xlabel="padded edges", ylabel="step time (ms)", title="step time vs probes")
    axes[1].axhline(0, color="0.5", lw=0.8)
    axes[1].set(
        xlabel="padded edges", ylabel="held-out error (%)", title="leave-one-out prediction error"
    )
    if with_memory:
        axes[2].set(xlabel="padded edges", ylabel="peak memory (MiB)", title="peak memory")
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    return fig
