"""The HTML report and the demo, checked in the page source and as headless Chromium renders it."""

from __future__ import annotations

import base64
import json
import re
import shutil
import struct
import subprocess

import numpy as np
import pytest

pytest.importorskip("matplotlib")

import graphbatch as gb
from graphbatch.analysis import BENCH_KEYS, LimitSearch, search_limits_if_available
from graphbatch.cli import main
from graphbatch.report import _figures as F
from graphbatch.report._build import REPORT_FIGURES
from graphbatch.report._html import HtmlPage

BENCH_FIGURES = ("fig-bench-timing", "fig-bench-compile", "fig-bench-memory")
TUNE_FIGURES = ("fig-tune-fit",)  # only with a tune result (tests/tuning/test_tune.py)
IMG_RE = re.compile(
    r'<figure class="gb-figure" id="([^"]+)"><img[^>]*'
    r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"'
)


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk (checks the signature)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def sizes_table(n=800, seed=5):
    rng = np.random.default_rng(seed)
    nodes = rng.integers(3, 30, n)
    edges = nodes * rng.integers(1, 6, n)
    return gb.GraphSizes(nodes, edges)


def bench_records():
    rng = np.random.default_rng(0)
    recs = []
    for model in ("schnet", "mpeu"):
        for strategy in ("dynamic", "static-64", "static-pow2"):
            for bs in (16, 32, 64):
                for rep in range(2):
                    recs.append(
                        {
                            "model": model,
                            "strategy": strategy,
                            "batch_size": bs,
                            "repeat": rep,
                            "compiles": {"dynamic": 1, "static-64": 40, "static-pow2": 4}[strategy],
                            "compile_s": float(rng.uniform(1, 3)),
                            "step_ms_mean": 0.3 * bs + float(rng.uniform()),
                            "step_ms_median": 0.25 * bs + float(rng.uniform()),
                            "update_ms_median": 0.2 * bs,
                            "batching_ms_median": 0.5,
                            "graphs_per_s": float(rng.uniform(900, 1100)),
                            "peak_mem_bytes": bs * 2**21,
                            "test_rmse": float(rng.uniform(0.1, 0.2)),
                        }
                    )
    return recs


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """One report with bench results, built through the CLI; returns (path, html)."""
    d = tmp_path_factory.mktemp("report")
    sizes_path = d / "sizes.npz"
    sizes_table().save(sizes_path)
    bench = d / "bench.json"
    bench.write_text(json.dumps(bench_records()))
    out = d / "report.html"
    rc = main(
        [
            "report",
            str(sizes_path),
            "--bench",
            str(bench),
            "--batch-size",
            "16",
            "--out",
            str(out),
            "--quiet",
            "--dpi",
            "60",
        ]
    )
    assert rc == 0
    return out, out.read_text(encoding="utf-8")


def test_report_figures_embedded(report):
    _, html = report
    figures = dict(IMG_RE.findall(html))
    limits = search_limits_if_available(sizes_table(), max_graphs=16)
    expected = [
        f
        for f in REPORT_FIGURES
        if (f != "fig-limits" or limits.available) and f not in TUNE_FIGURES
    ]
    assert sorted(figures) == sorted(expected)
    for fig_id, b64 in figures.items():
        w, h = png_size(base64.b64decode(b64))
        assert w >= 200 and h >= 150, (fig_id, w, h)
    if not limits.available:  # said plainly, not faked
        assert re.search(r'<figure class="unavailable" id="fig-limits">.*unavailable', html)
        assert limits.reason in html
    # the tables are there, one row per registered strategy
    compare = html[html.index('id="table-compare"') :]
    compare = compare[: compare.index("</table>")]
    # one row per comparison run: every registered strategy, buckets once per listed K
    from graphbatch.analysis._compare import comparison_variants

    assert compare.count("<tr>") == 1 + len(comparison_variants())
    for name in gb.strategy_names():
        assert f">{name}<" in compare or f">{name} K=" in compare
    assert 'id="table-dataset"' in html and 'id="table-bench"' in html


def test_report_is_self_contained(report):
    _, html = report
    assert not re.search(r'(src|href)\s*=\s*["\']?(https?:|//)', html)
    assert "@import" not in html and "url(" not in html


def gb_report(sizes, **kw):
    from graphbatch.report import build_report

    return build_report(sizes, **kw)


def test_report_with_given_limits_and_no_bench():
    recs = [
        {
            "max_nodes": 40,
            "max_edges": 90,
            "max_graphs": 8,
            "node_eff": 0.9,
            "edge_eff": 0.8,
            "harmonic_mean": 2 / (1 / 0.9 + 1 / 0.8),
        },
        {
            "max_nodes": 30,
            "max_edges": 80,
            "max_graphs": 8,
            "node_eff": 0.5,
            "edge_eff": 0.6,
            "harmonic_mean": 2 / (1 / 0.5 + 1 / 0.6),
        },
    ]
    html = gb_report(sizes_table(200), batch_size=8, limits=LimitSearch(recs), dpi=50)
    ids = dict(IMG_RE.findall(html))
    assert sorted(ids) == sorted(f for f in REPORT_FIGURES if f not in BENCH_FIGURES + TUNE_FIGURES)
    assert 'id="table-limits"' in html and 'id="table-bench"' not in html


def test_unavailable_figure_says_why():
    page = HtmlPage("t")
    page.unavailable("fig-limits", "Efficiency vs packing limits", "no search here")
    html = page.render()
    assert 'class="unavailable" id="fig-limits"' in html and "no search here" in html
    assert 'data-figures="0"' in html


def test_limits_heatmap_marks_optimum():
    # a small grid with a known best cell, evaluated by hand (harmonic mean of two efficiencies)
    recs = []
    for v in (20, 30, 40):
        for e in (50, 60, 70):
            ne, ee = 1 - abs(v - 30) / 100, 1 - abs(e - 60) / 100
            recs.append(
                {
                    "max_nodes": v,
                    "max_edges": e,
                    "max_graphs": 8,
                    "node_eff": ne,
                    "edge_eff": ee,
                    "harmonic_mean": 2 / (1 / ne + 1 / ee),
                }
            )
    recs.sort(key=lambda r: -r["harmonic_mean"])
    fig = F.fig_limits_heatmap(recs)
    ax = fig.axes[0]
    star = [ln for ln in ax.get_lines() if ln.get_marker() == "*"]
    assert len(star) == 1
    assert (star[0].get_xdata()[0], star[0].get_ydata()[0]) == (30, 60)
    assert "30 nodes, 60 edges" in star[0].get_label()
    page = HtmlPage("t")
    page.figure("fig-limits", fig, "limits")
    assert 'id="fig-limits"' in page.render()
    with pytest.raises(ValueError, match="no limit records"):
        F.fig_limits_heatmap([])


def test_count_bins():
    edges, log = F.count_bins(np.array([3, 4, 9]))
    assert not log and np.array_equal(edges, np.arange(2.5, 10.5))
    heavy = np.array([50] * 100 + [190_000])
    edges, log = F.count_bins(heavy)
    assert log and edges[0] == 1 and edges[-1] >= 190_000


def test_report_cli_errors(tmp_path, capsys):
    sizes_path = tmp_path / "s.npz"
    sizes_table(50).save(sizes_path)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{k: 1 for k in BENCH_KEYS if k != "peak_mem_bytes"}]))
    assert (
        main(["report", str(sizes_path), "--bench", str(bad), "--out", str(tmp_path / "r.html")])
        == 2
    )
    assert "peak_mem_bytes" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()
    with pytest.raises(SystemExit):
        main(["report", str(sizes_path)])  # --out is required
    assert "--out" in capsys.readouterr().err


def test_demo_prints_table_and_path(tmp_path, capsys):
    from graphbatch.demo import main as demo_main

    sizes_path = tmp_path / "s.npz"
    sizes_table(300).save(sizes_path)
    out = tmp_path / "demo.html"
    assert (
        demo_main(
            ["--sizes", str(sizes_path), "--batch-size", "8", "--out", str(out), "--dpi", "50"]
        )
        == 0
    )
    cap = capsys.readouterr()
    assert f"report: {out.resolve()}" in cap.out
    for name in gb.strategy_names():
        assert name in cap.out
    assert "[demo" in cap.err and "planning" in cap.err  # progress shown
    assert out.stat().st_size > 10_000


def test_synthetic_default_is_labelled():
    from graphbatch.demo import default_sizes, synthetic_qm9_like

    sizes, source = default_sizes()
    if "SYNTHETIC" in source:
        assert sizes == synthetic_qm9_like()
    else:
        assert "QM9" in source
    small = synthetic_qm9_like(1000, seed=1)
    assert small == synthetic_qm9_like(1000, seed=1) and len(small) == 1000
    assert small.n_node.min() >= 3 and small.n_node.max() <= 29


# ------------------------------------------------------------------ chromium
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
)


def chromium(tmp_path, *args):
    profile = tmp_path / "chromium-profile"
    cmd = [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install chromium)")
def test_chromium_renders_every_figure(report, tmp_path):
    path, html = report
    n_figures = len(IMG_RE.findall(html))
    res = chromium(tmp_path, "--dump-dom", path.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    dom = res.stdout
    # the page's load handler marks each decoded image with its natural size
    assert f'data-figures-rendered="{n_figures}"' in dom, dom[:500]
    rendered = re.findall(r'data-rendered="(\d+)x(\d+)"', dom)
    assert len(rendered) == n_figures
    assert all(int(w) > 0 and int(h) > 0 for w, h in rendered)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install chromium)")
def test_chromium_screenshot_not_blank(report, tmp_path):
    import matplotlib.image as mpimg

    path, _ = report
    shot = tmp_path / "shot.png"
    res = chromium(tmp_path, "--window-size=1280,2400", f"--screenshot={shot}", path.as_uri())
    assert res.returncode == 0 and shot.is_file(), res.stderr[-2000:]
    assert png_size(shot.read_bytes()) == (1280, 2400)
    img = mpimg.imread(shot)[..., :3]
    # the top holds the title, the dataset table and the histograms: many distinct colours
    assert img.std() > 0.05
    rows_with_ink = (img.min(axis=(1, 2)) < 0.5).sum()
    assert rows_with_ink > 400
