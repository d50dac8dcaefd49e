"""Regression tests of issue 14 (hardening): overflow in size tables, plan files trusted on load,
outputs over inputs and file modes, clean CLI errors, one bench summary, layering."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import graphbatch as gb
from graphbatch.analysis import compare_strategies, summarize_bench
from graphbatch.cli import main

from .._imports import imports_of

SRC = Path(gb.__file__).resolve().parent
#: The documented limits (docs/plan-format.md), stated here independently of the code.
MAX_COUNT, MAX_SHAPE, MAX_TOTAL = 2**36, 2**40, 2**53


def test_limits_are_the_documented_ones():
    from graphbatch._validate import MAX_COUNT as count
    from graphbatch._validate import MAX_SHAPE as shape
    from graphbatch._validate import MAX_TOTAL as total

    assert (count, shape, total) == (MAX_COUNT, MAX_SHAPE, MAX_TOTAL)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "graphbatch.cli", *args], capture_output=True, text=True, timeout=300
    )


def one_line_error(res: subprocess.CompletedProcess, *needles: str) -> None:
    assert res.returncode == 2, res.stderr + res.stdout
    assert "Traceback" not in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    for n in needles:
        assert n in res.stderr, res.stderr


# ---------------------------------------------------------------- item 3: integer overflow
def test_uint64_max_is_refused_not_wrapped(tmp_path):
    big = np.array([3, 2**64 - 1], dtype=np.uint64)
    with pytest.raises(ValueError, match="18446744073709551615 exceeds the limit"):
        gb.GraphSizes(big, np.array([1, 1], dtype=np.uint64))
    with pytest.raises(ValueError, match="exceeds the limit"):
        gb.GraphSizes(np.array([1.0, 2.0**70]), [0, 0])
    path = tmp_path / "u.npz"
    np.savez(path, n_node=big, n_edge=np.array([1, 1], dtype=np.uint64))
    res = cli(
        "plan",
        str(path),
        "--strategy",
        "static-64",
        "--batch-size",
        "4",
        "--out",
        str(tmp_path / "p.npz"),
    )
    one_line_error(res, "n_node[1] = 18446744073709551615", str(MAX_COUNT))
    assert not (tmp_path / "p.npz").exists()
    one_line_error(cli("limits", str(path)), "exceeds the limit")  # used to hang


def test_per_graph_and_total_limits():
    gb.GraphSizes([MAX_COUNT], [MAX_COUNT])  # the limit itself is accepted
    with pytest.raises(ValueError, match=r"n_node\[0\] = 68719476737 exceeds"):
        gb.GraphSizes([MAX_COUNT + 1], [0])
    n = MAX_TOTAL // MAX_COUNT + 1  # each graph at the limit, the column total just over
    with pytest.raises(ValueError, match=r"n_edge sums to .* over the limit"):
        gb.GraphSizes(np.full(n, 1), np.full(n, MAX_COUNT))
    with pytest.raises(ValueError, match="n_bytes sums"):
        gb.GraphSizes(np.full(n, 1), np.zeros(n), np.full(n, MAX_COUNT))


@pytest.mark.parametrize("strategy", ["static-64", "dynamic", "kk"])
def test_huge_graphs_never_fit_small_shapes(strategy):
    """Four graphs of 2**62 nodes 'fit' 64 padded nodes when sums overflow: now refused, and
    graphs at the per-graph limit give valid plans whose shapes hold them."""
    with pytest.raises(ValueError, match="exceeds the limit"):
        gb.GraphSizes(np.full(4, 2**62), np.zeros(4))
    sizes = gb.GraphSizes(np.full(4, MAX_COUNT), np.full(4, MAX_COUNT))
    p = gb.plan(sizes, strategy, batch_size=3, on_oversize="own_batch")
    p.validate(sizes)
    assert (p.pad_nodes >= p.real_nodes + 1).all() and (p.real_nodes > 0).all()
    assert int(p.real_nodes.sum()) == 4 * MAX_COUNT  # exact: no wrap-around


def test_histogram_of_large_values_has_no_key_overflow():
    nodes = np.array([MAX_COUNT, 1, MAX_COUNT, 5, 0])
    edges = np.array([MAX_COUNT, MAX_COUNT, 7, 5, 0])
    h = gb.GraphSizes(nodes, edges).histogram(return_inverse=True)
    expect = sorted(set(zip(nodes.tolist(), edges.tolist(), strict=True)))
    assert list(zip(h.n_node.tolist(), h.n_edge.tolist(), strict=True)) == expect
    assert np.array_equal(h.n_node[h.inverse], nodes) and np.array_equal(h.n_edge[h.inverse], edges)
    assert h.count.sum() == 5


def test_budget_and_batch_size_limits(tmp_path):
    with pytest.raises(ValueError, match=r"Budget.n_node = .* exceeds"):
        gb.Budget(MAX_SHAPE + 1, 10, 4)
    sizes = gb.GraphSizes([MAX_COUNT] * 3, [0] * 3)
    with pytest.raises(ValueError, match="over the padded-shape limit"):
        gb.plan(sizes, "dynamic", batch_size=2**10)
    with pytest.raises(ValueError, match="static-constant pads"):
        gb.plan(sizes, "static-constant", batch_size=2**18)
    path = tmp_path / "s.npz"
    gb.GraphSizes([3, 4, 5], [2, 2, 2]).save(path)
    huge = "99999999999999999999"
    one_line_error(
        cli(
            "plan",
            str(path),
            "--strategy",
            "static-64",
            "--batch-size",
            huge,
            "--out",
            str(tmp_path / "p.npz"),
        ),
        "batch_size",
        "exceeds the limit",
    )
    one_line_error(cli("compare", str(path), "--batch-size", huge), "exceeds the limit")
    one_line_error(
        cli(
            "plan",
            str(path),
            "--strategy",
            "dynamic",
            "--batch-size",
            "4",
            "--world-size",
            str(2**40),
            "--out",
            str(tmp_path / "p.npz"),
        ),
        "world_size = 1099511627776 exceeds the limit 1048576 (2**20)",
    )
    one_line_error(
        cli(
            "plan",
            str(path),
            "--strategy",
            "dynamic",
            "--max-nodes",
            huge,
            "--max-edges",
            "8",
            "--max-graphs",
            "4",
            "--out",
            str(tmp_path / "p.npz"),
        ),
        "Budget.n_node",
    )


def test_stats_of_huge_padded_totals_do_not_overflow():
    n = 2**13
    p = gb.BatchPlan(
        np.arange(n),
        np.arange(n + 1),
        np.full(n, MAX_SHAPE),
        np.full(n, MAX_SHAPE),
        np.full(n, 2),
        real_nodes=np.full(n, 3),
        real_edges=np.zeros(n),
    )
    s = p.stats()  # padded totals are summed in float64 (no int64 wrap for huge plans)
    assert s.node_efficiency == pytest.approx(3 / MAX_SHAPE)
    assert s.edge_efficiency == 0.0


# ------------------------------------------------------------- item 6: plan files on load
def _plan_arrays():
    sizes = gb.GraphSizes([3, 4, 5, 6, 2, 1], [2, 3, 4, 5, 1, 0])
    p = gb.plan(sizes, "dynamic", batch_size=3, seed=1)
    return sizes, p, {k: v for k, v in p.to_arrays().items()}


def _save(path, arrays):
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize(
    "case, match",
    [
        ("dup", "duplicated"),
        ("neg", "outside"),
        ("range", "outside"),
        ("float", "integers"),
        ("str", "integers"),
        ("2d", "1-D|first dimension"),
        ("offsets", "offsets"),
        ("rank", "step-major"),
        ("rank_only", "both rank and step"),
        ("meta_list", "JSON object"),
        ("meta_ws", "world_size"),
        ("meta_cost", "cost_model"),
        ("uint", "int64 range"),
        ("totals", "over its padded shape"),
        ("neg_real", "below 0"),
        ("pad_min", "below 1"),
    ],
)
def test_load_refuses_damaged_plans(tmp_path, case, match):
    _, p, a = _plan_arrays()
    meta = json.loads(str(a["meta"]))
    if case == "dup":
        a["order"] = a["order"].copy()
        a["order"][1] = a["order"][0]
    elif case == "neg":
        a["order"] = a["order"].copy()
        a["order"][0] = -1
    elif case == "range":
        a["order"] = a["order"].copy()
        a["order"][0] = 99
    elif case == "float":
        a["order"] = a["order"].astype(np.float64)
    elif case == "str":
        a["order"] = a["order"].astype(str)
    elif case == "2d":
        a["order"] = a["order"].reshape(1, -1)
    elif case == "offsets":
        a["offsets"] = a["offsets"][::-1].copy()
    elif case == "rank":
        a["rank"] = np.ones(len(p), dtype=np.int64)
        a["step"] = np.arange(len(p), dtype=np.int64)
    elif case == "rank_only":
        a["rank"] = np.zeros(len(p), dtype=np.int64)
    elif case == "meta_list":
        a["meta"] = np.array(json.dumps([1, 2]))
    elif case == "meta_ws":
        a["meta"] = np.array(json.dumps(dict(meta, world_size="two")))
    elif case == "meta_cost":
        a["meta"] = np.array(json.dumps(dict(meta, cost_model="bytes")))
    elif case == "uint":
        a["order"] = a["order"].astype(np.uint64)
        a["order"][0] = np.uint64(2**64 - 1)
    elif case == "totals":
        a["real_nodes"] = a["pad_nodes"].copy()
    elif case == "pad_min":  # pad_nodes - 1 would wrap to int64 max and 'fit' anything
        a["pad_nodes"] = np.full_like(a["pad_nodes"], np.iinfo(np.int64).min)
    elif case == "neg_real":
        a["real_edges"] = a["real_edges"].copy()
        a["real_edges"][0] = -5
    path = _save(tmp_path / "bad.npz", a)
    with pytest.raises(ValueError, match=match):
        gb.BatchPlan.load(path)


def test_load_accepts_valid_plans_of_every_kind(tmp_path):
    sizes = gb.GraphSizes(np.arange(1, 40), np.arange(1, 40) * 2, np.arange(1, 40) * 10)
    for kw in (
        {"strategy": "dynamic"},
        {"strategy": "kk"},
        {"strategy": "dynamic", "world_size": 3},
        {"strategy": "dynamic", "on_oversize": "skip", "budget": (20, 60, 5)},
    ):
        kw = dict(kw)
        strategy = kw.pop("strategy")
        if "budget" not in kw:
            kw["batch_size"] = 5
        p = gb.plan(sizes, strategy, **kw)
        q = gb.BatchPlan.load(p.save(tmp_path / "p.npz"))
        q.validate(sizes)
        assert np.array_equal(q.order, p.order)


def test_validate_without_sizes_catches_duplicates_and_minus_one():
    _, p, a = _plan_arrays()
    for bad_value in ("dup", -1):
        order = a["order"].copy()
        order[0] = order[1] if bad_value == "dup" else -1
        bad = gb.BatchPlan(
            order,
            p.offsets,
            p.pad_nodes,
            p.pad_edges,
            p.pad_graphs,
            real_nodes=p.real_nodes,
            real_edges=p.real_edges,
        )
        with pytest.raises(ValueError, match="exactly once"):
            bad.validate()


def test_cli_reads_bad_meta_as_one_line_error(tmp_path):
    _, _, a = _plan_arrays()
    a["meta"] = np.array(json.dumps("just a string"))
    path = _save(tmp_path / "plan.npz", a)
    code = (
        "import sys, graphbatch as gb\n"
        "from graphbatch._errors import USER_ERRORS\n"
        "try:\n    gb.BatchPlan.load(sys.argv[1]).stats()\n"
        "except USER_ERRORS as e:\n    print('clean', e)\n"
    )
    res = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.startswith("clean"), res.stderr


# ------------------------------------------------------- item 7: outputs and file modes
def test_plan_refuses_to_overwrite_its_input(tmp_path):
    path = tmp_path / "s.npz"
    gb.GraphSizes([3, 4, 5], [2, 2, 2]).save(path)
    before = path.read_bytes()
    one_line_error(
        cli("plan", str(path), "--strategy", "dynamic", "--batch-size", "3", "--out", str(path)),
        "is the input file",
    )
    alias = tmp_path / "sub" / ".." / "s.npz"
    (tmp_path / "sub").mkdir()
    one_line_error(
        cli("plan", str(path), "--strategy", "dynamic", "--batch-size", "3", "--out", str(alias)),
        "is the input file",
    )
    link = tmp_path / "link.npz"
    os.link(path, link)
    one_line_error(
        cli("plan", str(path), "--strategy", "dynamic", "--batch-size", "3", "--out", str(link)),
        "is the input file",
    )
    assert path.read_bytes() == before


def test_report_demo_bandwidth_refuse_their_inputs(tmp_path):
    sizes = tmp_path / "s.npz"
    gb.GraphSizes([3, 4, 5], [2, 2, 2]).save(sizes)
    bench = tmp_path / "b.json"
    bench.write_text("[]")
    before = (sizes.read_bytes(), bench.read_bytes())
    one_line_error(cli("report", str(sizes), "--out", str(sizes)), "is the input file")
    one_line_error(
        cli("report", str(sizes), "--bench", str(bench), "--out", str(bench)), "is the input file"
    )
    one_line_error(cli("demo", "--sizes", str(sizes), "--out", str(sizes)), "is the input file")
    one_line_error(cli("bandwidth", str(sizes), "--out", str(sizes)), "is the input file")
    assert (sizes.read_bytes(), bench.read_bytes()) == before


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_files_are_written_with_the_umask(tmp_path, umask):
    from graphbatch._io import atomic_write_text

    old = os.umask(umask)
    try:
        sizes = gb.GraphSizes([3, 4], [1, 2])
        a = sizes.save(tmp_path / "s.npz")
        b = gb.plan(sizes, "dynamic", batch_size=3).save(tmp_path / "p.npz")
        c = atomic_write_text(tmp_path / "r.html", "x")
    finally:
        os.umask(old)
    for path in (a, b, c):
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask, path


def test_atomic_write_failure_leaves_target_and_no_temp(tmp_path):
    from graphbatch._io import atomic_savez, atomic_write, atomic_write_text

    target = atomic_write_text(tmp_path / "t.txt", "old")

    def boom(fh):
        fh.write(b"partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write(target, boom)
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.txt"]
    with pytest.raises(ValueError, match=r".npz"):
        atomic_savez(tmp_path / "x.txt", {})


def test_one_atomic_writer():
    """Every write-then-rename goes through graphbatch._io (the store modules excepted: their
    engineer is rewriting them)."""
    exempt = {SRC / "_io.py", SRC / "datasets" / "_store_write.py", SRC / "datasets" / "_build.py"}
    for path in SRC.rglob("*.py"):
        if path in exempt:
            continue
        text = path.read_text()
        for needle in ("os.replace(", "os.rename(", "mkstemp(", '.tmp"'):
            assert needle not in text, f"{path.relative_to(SRC)} has its own {needle}"


# ------------------------------------------------------------------- clean errors
def test_cli_main_reports_library_errors_and_keeps_bug_tracebacks(monkeypatch, capsys):
    from graphbatch.cli import _analyze_cmd

    def raises(exc):
        def run(args):
            raise exc

        return run

    monkeypatch.setattr(_analyze_cmd, "run", raises(gb.InputError("bad value 7")))
    assert main(["analyze", "x.npz"]) == 2
    assert "error: bad value 7" in capsys.readouterr().err
    for bug in (KeyError("k"), AttributeError("a"), ZeroDivisionError("z"), TypeError("t")):
        monkeypatch.setattr(_analyze_cmd, "run", raises(bug))
        with pytest.raises(type(bug)):
            main(["analyze", "x.npz"])


def test_wrongly_typed_strategy_options_are_one_line_errors(tmp_path):
    path = tmp_path / "s.npz"
    gb.GraphSizes([3, 4, 5], [2, 2, 2]).save(path)
    for option in ("fixed_packs=3", "edge_limit=7", "num_shapes=1.5", "nope=1"):
        strategy = {"edge_limit=7": "pack-lpf-1d", "num_shapes=1.5": "buckets"}.get(
            option, "pack-lpf"
        )
        one_line_error(
            cli(
                "plan",
                str(path),
                "--strategy",
                strategy,
                "--batch-size",
                "4",
                "--option",
                option,
                "--out",
                str(tmp_path / "p.npz"),
            ),
            option.split("=")[0],
        )


def test_unknown_names_are_value_errors_not_key_errors():
    with pytest.raises(gb.UnknownNameError, match="unknown strategy 'nope'") as info:
        gb.get_strategy("nope")
    assert isinstance(info.value, ValueError) and not isinstance(info.value, KeyError)
    with pytest.raises(ValueError, match="unknown strategy"):
        gb.get_strategy(["not", "hashable"])


def test_nonsense_counts_are_refused(tmp_path):
    sizes = tmp_path / "s.npz"
    gb.GraphSizes([3, 4, 5], [2, 2, 2]).save(sizes)
    for flag in ("--num-blocks", "--bounds", "--block-sizes"):
        res = cli("bandwidth", str(sizes), flag, "0")
        assert res.returncode == 2 and "expected an integer >= 1" in res.stderr
        assert "Traceback" not in res.stderr


@pytest.mark.requires("matplotlib")
def test_report_resolution_is_bounded():
    from graphbatch.report._html import HtmlPage

    with pytest.raises(ValueError, match="dpi = 100000000 exceeds the limit 1200"):
        HtmlPage("t", dpi=10**8)
    assert HtmlPage("t", dpi=1200).dpi == 1200


@pytest.mark.requires("matplotlib")
def test_all_zero_and_capped_tables_report_cleanly(tmp_path):
    zero = tmp_path / "zero.npz"
    gb.GraphSizes(np.zeros(10), np.zeros(10)).save(zero)
    res = cli("report", str(zero), "--out", str(tmp_path / "r.html"), "--quiet")
    assert res.returncode == 0, res.stderr
    assert "every graph has 0 nodes" in (tmp_path / "r.html").read_text()
    capped = tmp_path / "cap.npz"
    gb.GraphSizes(np.full(5, MAX_COUNT), np.full(5, MAX_COUNT)).save(capped)
    res = cli("analyze", str(capped), "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["nodes"]["total"] == 5 * MAX_COUNT and out["nodes"]["padding_efficiency"] == 1.0
    res = cli("compare", str(capped), "--batch-size", "3", "--json")
    assert res.returncode in (0, 1) and "Traceback" not in res.stderr, res.stderr
    one_line_error(
        cli("report", str(capped), "--out", str(tmp_path / "r2.html"), "--quiet"),
        "padded-shape limit",
    )


def test_compare_lets_bugs_propagate(monkeypatch):
    from graphbatch.analysis import _compare

    for bug in (KeyError("bug"), TypeError("unsupported operand")):

        def broken(*a, _bug=bug, **k):
            raise _bug

        monkeypatch.setattr(_compare, "_plan", broken)
        with pytest.raises(type(bug)):
            compare_strategies(gb.GraphSizes([3, 4], [1, 1]), 3)


# ------------------------------------------------------------------------- structure
def _record(strategy, compiled, graphs_per_s, repeat=0):
    return {
        "model": "schnet",
        "strategy": strategy,
        "batch_size": 32,
        "repeat": repeat,
        "compiled": compiled,
        "compiles": 1,
        "compile_s": 0.5,
        "step_ms_mean": 10.0,
        "step_ms_median": 9.0,
        "update_ms_median": 5.0,
        "batching_ms_median": 1.0,
        "graphs_per_s": graphs_per_s,
        "peak_mem_bytes": 2**20,
        "test_rmse": 1.0,
        "steady_graphs_per_s": graphs_per_s,
        "update_us_per_graph": 3.0,
        "update_us_per_graph_median": 3.0,
    }


@pytest.mark.requires("matplotlib")
def test_one_bench_summary_keeps_eager_and_compiled_apart():
    from graphbatch.analysis import bench_label
    from graphbatch.bench import summarize
    from graphbatch.report import build_report

    recs = [
        _record("pack-lpf", False, 100.0),
        _record("pack-lpf", True, 300.0),
        _record("pack-lpf", True, 500.0, repeat=1),
        _record("pyg-compile", True, 50.0),
    ]
    rows = {r["strategy"]: r for r in summarize_bench(recs)}
    assert set(rows) == {"pack-lpf", "pack-lpf+compile", "pyg-compile"}
    assert rows["pack-lpf"]["graphs_per_s"] == 100.0
    assert rows["pack-lpf+compile"]["graphs_per_s"] == 400.0  # median of 300 and 500
    cli_rows = {r["strategy"]: r for r in summarize(recs)}
    assert cli_rows["pack-lpf+compile"]["graphs_per_s"] == 400.0
    assert cli_rows["pack-lpf"]["peak_mem_mb"] == 1.0
    assert [bench_label(r) for r in recs] == [
        "pack-lpf",
        "pack-lpf+compile",
        "pack-lpf+compile",
        "pyg-compile",
    ]
    html = build_report(gb.GraphSizes([3, 4, 5, 6], [2, 3, 4, 5]), batch_size=3, bench=recs)
    assert "pack-lpf+compile" in html


def test_no_upward_or_cyclicimports_of():
    assert not any("cli" in m for m in imports_of(SRC / "demo.py"))
    assert "._report" not in imports_of(SRC / "bench" / "_plots.py")
    res = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, graphbatch.demo; "
            "print(any(m.startswith('graphbatch.cli') for m in sys.modules))",
        ],
        capture_output=True,
        text=True,
    )
    assert res.stdout.strip() == "False", res.stderr


@pytest.mark.requires("torch")
def test_bench_budget_uses_the_plan_generator():
    from graphbatch.bench import DEFAULT
    from graphbatch.bench._config import bench_budget

    rng = np.random.default_rng(5)
    # wide sizes: a different 1000-graph sample moves the mean by more than the rounding
    sizes = gb.GraphSizes(rng.integers(1, 5000, 3000), rng.integers(0, 20000, 3000))
    for seed in (0, 3):
        cfg = dataclasses.replace(DEFAULT, seed=seed)
        b = bench_budget(cfg, sizes, 16, "dynamic")
        planned = gb.plan(sizes, "dynamic", batch_size=16, seed=seed).meta["budget"]
        assert [b.n_node, b.n_edge] == planned[:2]


@pytest.mark.requires("torch", "torch_geometric")
def test_unknown_field_and_model_names_are_value_errors():
    # issue 14: unknown user-supplied names raise ValueError (UnknownNameError), not KeyError
    import torch
    from torch_geometric.data import Data

    import graphbatch.torch as gt

    g = [Data(x=torch.ones(3, 2), edge_index=torch.zeros(2, 0, dtype=torch.long))]
    schema = gt.infer_schema(g)
    for call in (lambda: schema.with_pad(nope=1), lambda: gt.infer_schema(g, pad={"nope": 1})):
        with pytest.raises(gb.UnknownNameError, match="nope"):
            call()
