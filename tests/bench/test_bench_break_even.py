"""`graphbatch bench`'s break-even step counts: compiled runs against the eager baseline,
compile time counted against the steps planned (records made by hand, nothing trained)."""

from __future__ import annotations

import json

import pytest

from graphbatch.analysis import break_even
from graphbatch.bench import break_even_lines, targets, write_results


def record(strategy, *, compiled, compile_s, steady_gps, graphs_per_step, steps=500, repeat=0):
    return {
        "model": "schnet",
        "strategy": strategy,
        "batch_size": 128,
        "repeat": repeat,
        "compiled": compiled,
        "compiles": 1 if compiled else 0,
        "compile_s": compile_s,
        "step_ms_mean": 1.0,
        "step_ms_median": 1.0,
        "update_ms_median": 1.0,
        "batching_ms_median": 0.1,
        "graphs_per_s": steady_gps,
        "steady_graphs_per_s": steady_gps,
        "peak_mem_bytes": 1,
        "test_rmse": 1.0,
        "steps": steps,
        "real_graphs": graphs_per_step * steps,
    }


def test_compiled_runs_get_their_break_even_against_pyg_eager(tmp_path):
    recs = [
        record("pyg-eager", compiled=False, compile_s=0.0, steady_gps=6911, graphs_per_step=128),
        # the GPU row: 15.6 s compiling, then 10,432 graphs/s at ~121 graphs a step
        record("pack-lpf", compiled=True, compile_s=15.6, steady_gps=10432, graphs_per_step=121),
        record("dynamic", compiled=True, compile_s=6.7, steady_gps=5000, graphs_per_step=127),
        record("dynamic", compiled=False, compile_s=0.0, steady_gps=6000, graphs_per_step=127),
    ]
    (t,) = targets(recs)
    be = t["break_even"]
    assert set(be) == {"pack-lpf+compile", "dynamic+compile"}  # eager runs have none
    lpf = be["pack-lpf+compile"]
    want = break_even(15.6, 10432, 121, 0.0, 6911, planned_steps=500)
    assert lpf == {"baseline": "pyg-eager", **want}
    # 15.6 s / (1/6911 - 1/10432 s per graph) / 121 graphs a step
    assert lpf["steps"] == 2640 and lpf["pays_off"] is False
    assert lpf["speedup_planned"] < 1  # 500 steps do not pay for the compilation
    assert be["dynamic+compile"]["steps"] is None  # slower steady: never catches up
    lines = break_even_lines([t])
    assert any(
        "pack-lpf+compile" in ln
        and "overtakes after 2,640 steps" in ln
        and "does NOT pay off" in ln
        for ln in lines
    )
    assert any("dynamic+compile" in ln and "never overtakes" in ln for ln in lines)
    # summary.json gets the new key; the existing ones stay
    write_results(tmp_path, recs, {"steps": 500}, plots=False)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["targets"][0]["break_even"]["pack-lpf+compile"]["steps"] == 2640
    for key in ("model", "batch_size", "compiles", "compile_s", "end_to_end"):
        assert key in summary["targets"][0]


def test_medians_over_repeats_and_no_baseline():
    recs = [
        record(
            "pyg-eager", compiled=False, compile_s=0.0, steady_gps=100, graphs_per_step=10, repeat=r
        )
        for r in range(3)
    ] + [
        record("pack-lpf", compiled=True, compile_s=c, steady_gps=200, graphs_per_step=9, repeat=r)
        for r, c in enumerate((1.0, 2.0, 30.0))
    ]
    (t,) = targets(recs)
    be = t["break_even"]["pack-lpf+compile"]
    assert be["compile_s"] == pytest.approx(2.0)  # the median repeat
    # 2 s / (1/100 - 1/200) s per graph = 400 graphs = 45 steps of 9 graphs (44.4 rounded up)
    assert be["steps"] == 45 and be["pays_off"] is True
    (t,) = targets([r for r in recs if r["strategy"] != "pyg-eager"])
    assert "break_even" not in t


def test_the_bench_cli_prints_the_break_even_of_a_compiled_run(tmp_path, capsys):
    pytest.importorskip("torch_geometric")
    pytest.importorskip("graphbatch.datasets")
    from graphbatch.cli import main

    out = tmp_path / "bench"
    args = [
        "bench",
        "--models",
        "schnet",
        "--strategies",
        "pack-lpf,pyg-eager",
        "--batch-sizes",
        "6",
        "--steps",
        "3",
        "--repeats",
        "1",
        "--subset",
        "60",
        "--eval-every",
        "3",
        "--compile",
        "on",
        "--compile-backend",
        "eager",
        "--threads",
        "1",
        "--quiet",
        "--no-plots",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    be = summary["targets"][0]["break_even"]["pack-lpf+compile"]
    assert be["baseline"] == "pyg-eager" and be["planned_steps"] == 3
    line = next(ln for ln in printed.splitlines() if "pack-lpf+compile (compile" in ln)
    assert "vs pyg-eager" in line and ("overtakes after" in line or "never overtakes" in line)
