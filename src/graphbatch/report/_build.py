"""Assemble the report: dataset statistics, limit search, strategy comparison, benchmarks."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._io import atomic_write_text
from .._sizes import GraphSizes
from .._version import __version__
from ..analysis import (
    Comparison,
    LimitSearch,
    compare_strategies,
    describe,
    search_limits_if_available,
    summarize_bench,
    validate_bench,
)
from . import _figures as F
from ._html import HtmlPage

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["build_report", "write_report", "REPORT_FIGURES"]

#: Figure ids of a report, in page order (bench figures only when results are given, the tune
#: figure only with a tune result).
REPORT_FIGURES = (
    "fig-size-hist",
    "fig-size-hist2d",
    "fig-limits",
    "fig-compare",
    "fig-graphs-per-batch",
    "fig-bench-timing",
    "fig-bench-compile",
    "fig-bench-memory",
    "fig-tune-fit",
)

_BENCH_COLUMNS = (
    ("model", "model"),
    ("strategy", "strategy"),
    ("batch_size", "batch size"),
    ("repeats", "repeats"),
    ("step_ms_median", "step ms (median)"),
    ("step_ms_mean", "step ms (mean)"),
    ("update_ms_median", "update ms"),
    ("batching_ms_median", "batching ms"),
    ("graphs_per_s", "graphs/s"),
    ("compiles", "compiles"),
    ("compile_s", "compile s"),
    ("peak_mem_mib", "peak MiB"),
    ("test_rmse", "test RMSE"),
)


_LIMIT_COLUMNS = (
    ("max_nodes", "max nodes"),
    ("max_edges", "max edges"),
    ("max_graphs", "max graphs"),
    ("node_eff", "node eff"),
    ("edge_eff", "edge eff"),
    ("harmonic_mean", "harmonic mean"),
)


def _close(fig: Figure) -> None:
    fig.clear()


def build_report(
    sizes: GraphSizes,
    *,
    source: str = "size table",
    batch_size: int = 32,
    world_size: int = 1,
    seed: int = 0,
    comparison: Comparison | None = None,
    bench: Sequence[dict[str, Any]] | None = None,
    limits: LimitSearch | None = None,
    progress: Callable[[str], None] | None = None,
    dpi: int = 100,
    tune: Any = None,
) -> str:
    """The HTML report for ``sizes`` as a string (self-contained, figures as base64 PNG).

    ``comparison`` (from `compare_strategies`) is computed for ``batch_size``/``world_size`` when
    not given; ``limits`` from ``graphbatch.packing.search_limits`` when present (else the figure
    says it is unavailable); ``bench`` are benchmark records (see `graphbatch.analysis.BENCH_KEYS`).
    ``progress(message)`` is called before each stage; ``dpi`` sets the figures' resolution.
    ``tune``: a `graphbatch.tuning.TuneResult` (its ranking, validation and the fitted cost
    model against its probes get a section).
    """
    say = progress or (lambda msg: None)
    page = HtmlPage(f"graphbatch report — {source}", dpi=dpi)
    page.paragraph(
        f"graphbatch {__version__}; {len(sizes):,} graphs from {source}; "
        f"strategy comparison at batch size {batch_size}"
        + (f", world size {world_size}" if world_size > 1 else "")
        + f", seed {seed}.",
        cls="meta",
    )
    _dataset_section(page, sizes, say)
    if comparison is None:
        say("comparing strategies")
        comparison = compare_strategies(sizes, batch_size, world_size=world_size, seed=seed)
    _limits_section(page, sizes, limits, comparison.budget.n_graph, say)
    say("strategy figures")
    _strategy_section(page, comparison)
    if bench:
        say("benchmark figures")
        _bench_section(page, bench)
    if tune is not None:
        say("tune figures")
        _tune_section(page, tune)
    return page.render()


def _dataset_section(page: HtmlPage, sizes: GraphSizes, say: Callable[[str], None]) -> None:
    """Dataset sizes: the statistics table (`graphbatch.analysis.describe`) and the 1-D and
    2-D histograms of nodes and edges per graph."""
    say("dataset statistics")
    summary = describe(sizes)
    page.heading("Dataset sizes")
    page.paragraph(
        "Table 1 of the tuple-packing paper for this dataset: padding efficiency is the share of "
        "useful node/edge slots when every graph is padded to the largest one; its inverse is the "
        "speedup available from removing that padding. Excess kurtosis above 1 signals a long "
        "tail, where padding to the maximum (static-constant batching) is most wasteful."
    )
    cols = [("metric", "metric")] + [(c.name, c.name) for c in summary.columns()]
    page.table(summary.table_rows(), cols, table_id="table-dataset")
    say("size histograms")
    fig = F.fig_size_histograms(sizes, summary)
    page.figure("fig-size-hist", fig, "Histograms of nodes and edges per graph.")
    _close(fig)
    fig = F.fig_size_hist2d(sizes)
    page.figure("fig-size-hist2d", fig, "2-D histogram of (nodes, edges) per graph.")
    _close(fig)


def _limits_section(
    page: HtmlPage,
    sizes: GraphSizes,
    limits: LimitSearch | None,
    max_graphs: int,
    say: Callable[[str], None],
) -> None:
    """Packing limits: the efficiency heatmap over node/edge limits and the best ten, from
    ``limits`` or a search at ``max_graphs`` graphs per pack (unavailable without the search's
    dependency, or when every graph has 0 nodes: the figure says why)."""
    page.heading("Packing limits")
    caption = (
        "Harmonic mean of node and edge packing efficiency for different node/edge limits "
        "(tuple-packing paper, Figure 5), optimum marked."
    )
    if limits is None and not int(sizes.n_node.max()):
        limits = LimitSearch(
            records=None, reason="every graph has 0 nodes: there are no limits to search"
        )
    if limits is None:
        say("searching packing limits")
        limits = search_limits_if_available(sizes, max_graphs=max_graphs)
    if limits.records is None:  # not limits.available, spelled out for the type checker
        page.unavailable("fig-limits", "Efficiency vs packing limits", limits.reason or "")
        return
    fig = F.fig_limits_heatmap(limits.records)
    page.figure("fig-limits", fig, caption)
    _close(fig)
    if limits.summary:  # the search's optimum, range and the exact packing's efficiency
        page.paragraph(f"Limit search (graphbatch limits): {limits.summary}.")
    page.table(limits.records[:10], _LIMIT_COLUMNS, table_id="table-limits")


def _strategy_section(page: HtmlPage, comparison: Comparison) -> None:
    """Strategy comparison: the figure and table of every strategy's plan (failures named),
    then real graphs per batch."""
    budget = comparison.budget
    page.heading("Strategy comparison")
    page.paragraph(
        f"Every registered strategy planned one epoch at batch size {comparison.batch_size}; "
        f"strategies that take a node/edge budget share one: {budget}. Oversize graphs: "
        f"{comparison.on_oversize}. Batch cost is the sum of the graphs' "
        f"{comparison.cost_unit} "
        "per batch; distinct shapes are the compilations a static-shape compiler performs."
    )
    any_ok = any(r.ok for r in comparison.results)
    if any_ok:
        fig = F.fig_strategy_comparison(comparison)
        page.figure(
            "fig-compare",
            fig,
            "Efficiency, batches over the lower bound, distinct "
            "shapes and batch-cost balance per strategy.",
        )
        _close(fig)
    else:
        page.unavailable("fig-compare", "Strategy comparison", "every strategy failed")
    page.table(comparison.rows(), comparison.columns(), table_id="table-compare")
    for r in comparison.results:
        if not r.ok:
            page.paragraph(f"{r.label}: {r.error}", cls="error")
    page.heading("Graphs per batch")
    if any_ok:
        fig = F.fig_graphs_per_batch(comparison)
        page.figure(
            "fig-graphs-per-batch",
            fig,
            "Real graphs per batch for each strategy (static-vs-dynamic paper, Figure 3 right).",
        )
        _close(fig)
    else:
        page.unavailable("fig-graphs-per-batch", "Graphs per batch", "every strategy failed")


def _bench_section(page: HtmlPage, bench: Sequence[dict[str, Any]]) -> None:
    """Benchmarks: timing, compilation and memory figures and the table of the ``bench``
    records grouped by (model, strategy, batch size), medians over repeats."""
    rows = summarize_bench(validate_bench(list(bench)))
    for row in rows:
        for suffix in ("", "_min", "_max"):
            row["peak_mem_mib" + suffix] = row["peak_mem_bytes" + suffix] / 2**20
    page.heading("Benchmarks")
    page.paragraph(
        f"{len(bench):,} benchmark runs in {len(rows):,} (model, strategy, batch "
        "size) groups; medians over repeats."
    )
    for fig_id, func, cap in (
        (
            "fig-bench-timing",
            F.fig_bench_timing,
            "Step, update and batching time and throughput vs batch size.",
        ),
        ("fig-bench-compile", F.fig_bench_compile, "Compilations and compilation time."),
        ("fig-bench-memory", F.fig_bench_memory, "Peak memory."),
    ):
        fig = func(rows)
        page.figure(fig_id, fig, cap)
        _close(fig)
    page.table(rows, _BENCH_COLUMNS, table_id="table-bench")


_TUNE_COLUMNS = (
    ("rank", "rank"),
    ("config", "configuration"),
    ("mode", "mode"),
    ("graphs_per_s", "graphs/s (predicted)"),
    ("steady_graphs_per_s", "steady graphs/s"),
    ("step_ms", "step ms"),
    ("graphs_per_batch", "graphs/batch"),
    ("pad_nodes_pct", "node padding %"),
    ("pad_edges_pct", "edge padding %"),
    ("shapes", "shapes"),
    ("compiles", "compiles"),
    ("compile_s", "compile s"),
    ("peak_mib", "peak MiB (predicted)"),
    ("feasible", "fits memory"),
)
_VALIDATION_COLUMNS = (
    ("config", "configuration"),
    ("mode", "mode"),
    ("steps", "steps"),
    ("pred_step_ms", "step ms predicted"),
    ("meas_step_ms", "step ms measured"),
    ("step_err_pct", "error %"),
    ("pred_graphs_per_s", "graphs/s predicted"),
    ("meas_graphs_per_s", "graphs/s measured"),
    ("pred_peak_mib", "peak MiB predicted"),
    ("meas_peak_mib", "peak MiB measured"),
    ("compiles", "compiles"),
)


def _tune_section(page: HtmlPage, tune: Any) -> None:
    """The tune result: settings, the fitted models against their probes, ranking, validation."""
    import json

    s = tune.settings
    page.heading("Tuning (graphbatch tune)")
    page.paragraph(
        f"Model {s.get('model')} ({s.get('framework')}, {s.get('device')}), nominal batch size "
        f"{s.get('batch_size')} (±{100 * float(s.get('batch_tolerance', 0)):.0f}%), "
        f"{s.get('epochs')} epochs for the compile cost, {s.get('probes')} probe shapes, "
        f"{s.get('distinct_candidates')} distinct configurations; memory measure: "
        f"{s.get('memory_kind')}; load average {s.get('load_start')} -> {s.get('load_end')}. "
        f"Chosen ({tune.mode}): {json.dumps(tune.request, sort_keys=True)}."
    )
    for mode, m in tune.models.items():
        text = f"{mode}: step {m.time.describe('ms')}"
        what = "compile" if m.compiles else "first call of a new shape"
        text += (
            f"; {what} {m.compile.first_ms / 1000:.1f} s for the first shape, "
            f"{m.compile.per_shape_ms / 1000:.2f} s per further shape"
        )
        if m.memory is not None:
            text += f"; peak {m.memory.describe('bytes')}, x(1 + {m.memory_margin}/1000)"
        page.paragraph(text)
    fig = F.fig_tune_fit(tune.models)
    page.figure(
        "fig-tune-fit",
        fig,
        "The fitted step-cost model against its probes: measured "
        "step time (median and range of the timed steps) and the fit, the held-out "
        "(leave-one-out) error of each probe, and peak memory.",
    )
    _close(fig)
    page.table(tune.table(30), _TUNE_COLUMNS, table_id="table-tune")
    if tune.validation:
        page.paragraph(
            "Validation: the top configurations trained for a fixed number of steps "
            "(interleaved); step time over the steps that met no new shape."
        )
        page.table(tune.validation_table(), _VALIDATION_COLUMNS, table_id="table-tune-validation")


def write_report(path: str | os.PathLike, text: str) -> Path:
    """Write the report (UTF-8) atomically: temp file + rename in the same folder."""
    return atomic_write_text(path, text)
