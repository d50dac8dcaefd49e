"""graphbatch.analysis and the analyze/compare CLI: values checked against plain reference code."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphbatch as gb
from graphbatch.analysis import (
    BENCH_KEYS,
    Variant,
    compare_strategies,
    comparison_variants,
    describe,
    load_bench,
    search_limits_if_available,
    summarize_bench,
)
from graphbatch.cli import main
from graphbatch.planners import _registry


# ----------------------------------------------------------------- references
def ref_quantile(values, q):
    """Linear interpolation between order statistics (numpy's default), by hand."""
    xs = sorted(values)
    h = (len(xs) - 1) * q
    lo = math.floor(h)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])


def ref_column(values):
    n = len(values)
    mean = sum(values) / n
    m2 = sum((v - mean) ** 2 for v in values) / n
    m3 = sum((v - mean) ** 3 for v in values) / n
    m4 = sum((v - mean) ** 4 for v in values) / n
    vmax = max(values)
    eff = sum(values) / (n * vmax) if vmax else 1.0
    return {
        "total": sum(values),
        "max": vmax,
        "min": min(values),
        "mean": mean,
        "std": math.sqrt(m2),
        "eff": eff,
        "speedup": 1.0 / eff,
        "kurt": m4 / m2**2 - 3.0 if m2 > 0 else float("nan"),
        "skew": m3 / m2**1.5 if m2 > 0 else float("nan"),
    }


def check_column(col, values):
    ref = ref_column(values)
    assert col.total == ref["total"]
    assert col.max == ref["max"] and col.min == ref["min"]
    assert col.mean == pytest.approx(ref["mean"])
    assert col.std == pytest.approx(ref["std"])
    assert col.padding_efficiency == pytest.approx(ref["eff"])
    assert col.potential_speedup == pytest.approx(ref["speedup"])
    if math.isnan(ref["kurt"]):
        assert math.isnan(col.excess_kurtosis) and math.isnan(col.skewness)
    else:
        assert col.excess_kurtosis == pytest.approx(ref["kurt"], rel=1e-9, abs=1e-9)
        assert col.skewness == pytest.approx(ref["skew"], rel=1e-9, abs=1e-9)
    for q, v in col.quantiles.items():
        assert v == pytest.approx(ref_quantile(values, q))


# ------------------------------------------------------------------ describe
def test_describe_hand_table():
    sizes = gb.GraphSizes([1, 2, 3, 10, 2], [0, 2, 4, 20, 2])
    s = describe(sizes)
    assert s.num_graphs == 5
    assert s.distinct_pairs == 4  # (2, 2) occurs twice
    assert s.nodes.max == 10 and s.edges.max == 20
    assert s.nodes.padding_efficiency == pytest.approx(18 / 50)
    assert s.edges.padding_efficiency == pytest.approx(28 / 100)
    assert s.nodes.potential_speedup == pytest.approx(50 / 18)
    assert s.nodes.quantiles[0.5] == 2.0
    assert s.bytes is None


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 60), st.integers(0, 300)), min_size=1, max_size=60),
    st.booleans(),
)
def test_describe_matches_reference(pairs, with_bytes):
    nodes = [p[0] for p in pairs]
    edges = [p[1] for p in pairs]
    nbytes = [7 * v + 3 * e for v, e in pairs] if with_bytes else None
    s = describe(gb.GraphSizes(nodes, edges, nbytes))
    assert s.num_graphs == len(pairs)
    assert s.distinct_pairs == len(set(pairs))
    check_column(s.nodes, nodes)
    check_column(s.edges, edges)
    if with_bytes:
        check_column(s.bytes, nbytes)
    else:
        assert s.bytes is None


def test_describe_constant_and_empty_edges():
    s = describe(gb.GraphSizes([3, 3, 3], [0, 0, 0]))
    assert math.isnan(s.nodes.excess_kurtosis)
    assert s.edges.padding_efficiency == 1.0 and s.edges.potential_speedup == 1.0
    d = s.as_dict()
    assert d["nodes"]["excess_kurtosis"] is None  # NaN is not JSON
    json.dumps(d, allow_nan=False)


def test_describe_rejects_non_sizes():
    with pytest.raises(TypeError, match="GraphSizes"):
        describe([1, 2, 3])
    with pytest.raises(ValueError, match="quantile"):
        describe(gb.GraphSizes([1, 2], [0, 1]), quantiles=(0.5, 1.5))


def test_table_rows_follow_summary():
    s = describe(gb.GraphSizes([1, 2, 4], [0, 1, 6]))
    rows = {r["metric"]: r for r in s.table_rows()}
    assert rows["graphs"]["nodes"] == 3
    assert rows["max per graph"]["edges"] == 6
    assert rows["distinct (nodes, edges) pairs"]["nodes"] == 3
    assert rows["padding efficiency (pad to max)"]["nodes"] == pytest.approx(7 / 12)
    assert rows["potential speedup (1 / efficiency)"]["edges"] == pytest.approx(18 / 7)


# ------------------------------------------------------------------- compare
def small_sizes(n=600, seed=1, with_bytes=False):
    rng = np.random.default_rng(seed)
    nodes = rng.integers(3, 30, n)
    edges = (nodes * rng.integers(1, 5, n)).astype(np.int64)
    nbytes = 40 * nodes + 12 * edges if with_bytes else None
    return gb.GraphSizes(nodes, edges, nbytes)


def test_comparison_variants_from_registry():
    names = ["static-64", "buckets", "dynamic", "zz-new"]
    runs = comparison_variants(names=names)
    labels = [v.label for v in runs]
    # listed variants first in table order (only registered ones), then the rest by registration
    assert labels == ["static-64", "dynamic", "buckets K=2", "buckets K=4", "zz-new"]
    assert runs[2].options == {"num_shapes": 2} and runs[3].options == {"num_shapes": 4}
    assert {v.strategy for v in runs} == set(names)
    with pytest.raises(ValueError, match="duplicates"):
        comparison_variants(
            [Variant("a", "dynamic"), Variant("a", "static-64")], names=["dynamic", "static-64"]
        )


def _one_per_batch(req):
    """A trivially valid strategy registered only inside one test: one graph per batch."""
    from graphbatch.planners import finish_plan

    order = req.order()
    n = order.shape[0]
    nodes = req.sizes.n_node[order]
    edges = req.sizes.n_edge[order]
    return finish_plan(
        req,
        order=order,
        offsets=np.arange(n + 1),
        pad_nodes=nodes + 1,
        pad_edges=np.maximum(edges, 0),
        pad_graphs=np.full(n, 2),
        lower_bound=n,
    )


def test_compare_includes_every_registered_strategy(monkeypatch):
    extra = _registry.Strategy("test-one-per-batch", _one_per_batch, (), "test only", False, False)
    monkeypatch.setitem(_registry._REGISTRY, extra.name, extra)
    sizes = small_sizes()
    cmp = compare_strategies(sizes, 16, keep_plans=True)
    assert {r.variant.strategy for r in cmp.results} == set(gb.strategy_names())
    assert "test-one-per-batch" in [r.label for r in cmp.results]
    for r in cmp.results:
        assert r.ok, (r.label, r.error)
        r.plan.validate(sizes)
        # stats are those of the plan itself
        assert r.stats == r.plan.stats()
        # max batch cost by a plain loop over batches (nodes + edges without n_bytes)
        costs = [int(sizes.n_node[b].sum() + sizes.n_edge[b].sum()) for b in r.plan.batches()]
        assert r.stats.cost_max == max(costs)
        assert r.stats.cost_mean == pytest.approx(sum(costs) / len(costs))
        assert r.as_dict()["cost_max_over_mean"] == pytest.approx(
            max(costs) * len(costs) / sum(costs)
        )
        assert r.cost_unit == "nodes+edges"
        assert r.plan_seconds >= 0
        # every strategy that takes a budget got the one shared budget
        if gb.get_strategy(r.variant.strategy).uses_budget:
            assert tuple(r.plan.meta["budget"]) == cmp.budget.as_tuple()
    one = next(r for r in cmp.results if r.label == "test-one-per-batch")
    assert one.stats.num_batches == len(sizes)
    assert np.array_equal(one.graphs_per_batch, np.ones(len(sizes)))


def test_compare_budget_is_algorithm1_estimate():
    sizes = small_sizes()
    cmp = compare_strategies(sizes, 8, seed=3)
    from graphbatch._random import seed_rng

    assert cmp.budget == gb.estimate_budget(sizes, 8, rng=seed_rng(3))
    dyn = next(r for r in cmp.results if r.label == "dynamic")
    assert dyn.stats.num_batches == gb.plan(sizes, "dynamic", batch_size=8, seed=3).num_batches


def test_compare_cost_uses_bytes():
    sizes = small_sizes(with_bytes=True)
    cmp = compare_strategies(sizes, 16, keep_plans=True)
    r = cmp.results[0]
    assert r.cost_unit == "bytes"
    assert r.stats.cost_max == max(int(sizes.n_bytes[b].sum()) for b in r.plan.batches())


def test_compare_bad_input():
    sizes = small_sizes(50)
    with pytest.raises(ValueError, match="batch_size"):
        compare_strategies(sizes, 0)
    with pytest.raises(TypeError, match="GraphSizes"):
        compare_strategies(np.arange(4), 8)
    with pytest.raises(ValueError, match="world_size"):
        compare_strategies(sizes, 8, world_size=0)


def test_compare_world_size():
    sizes = small_sizes(200)
    cmp = compare_strategies(sizes, 8, world_size=2, keep_plans=True)
    assert cmp.world_size == 2
    assert {"num_steps", "step_node_imbalance_max"} <= {k for k, _ in cmp.columns()}
    for r in cmp.results:
        assert r.ok, (r.label, r.error)
        assert r.stats.world_size == 2 and r.plan.world_size == 2
        r.plan.validate(sizes)


def test_failed_strategy_is_reported(monkeypatch):
    def broken(req):
        raise ValueError("deliberately broken for the test")

    extra = _registry.Strategy("test-broken", broken, (), "test only", False, False)
    monkeypatch.setitem(_registry._REGISTRY, extra.name, extra)
    cmp = compare_strategies(small_sizes(100), 8)
    bad = [r for r in cmp.results if not r.ok]
    assert [r.label for r in bad] == ["test-broken"]
    assert "deliberately broken" in bad[0].error
    assert cmp.rows()[-1]["error"] == bad[0].error


def test_limit_search_guard():
    res = search_limits_if_available(small_sizes(100), max_graphs=16)
    try:
        from graphbatch.packing import search_limits  # noqa: F401
    except ImportError:
        assert not res.available and "graphbatch.packing" in res.reason
    else:
        assert res.available and res.records
        best = max(r["harmonic_mean"] for r in res.records)
        assert res.records[0]["harmonic_mean"] == best


# --------------------------------------------------------------------- bench
def bench_records():
    recs = []
    for strategy in ("dynamic", "static-64"):
        for bs in (16, 32):
            for rep in range(3):
                recs.append(
                    {k: None for k in BENCH_KEYS}
                    | {
                        "model": "schnet",
                        "strategy": strategy,
                        "batch_size": bs,
                        "repeat": rep,
                        "compiles": 1 if strategy == "dynamic" else 10 + rep,
                        "compile_s": 1.0 + rep,
                        "step_ms_mean": 2.0 * bs + rep,
                        "step_ms_median": 1.5 * bs + rep * rep,
                        "update_ms_median": bs,
                        "batching_ms_median": 0.1,
                        "graphs_per_s": 1000.0 / (rep + 1),
                        "peak_mem_bytes": bs * 2**20,
                    }
                )
    return recs


def test_summarize_bench_medians():
    rows = summarize_bench(bench_records())
    assert len(rows) == 4
    r = next(r for r in rows if r["strategy"] == "static-64" and r["batch_size"] == 32)
    assert r["repeats"] == 3
    assert r["compiles"] == 11 and r["compiles_min"] == 10 and r["compiles_max"] == 12
    assert r["step_ms_median"] == 48 + 1  # median of 48, 49, 52
    assert r["graphs_per_s"] == pytest.approx(500.0)
    assert math.isnan(r["test_rmse"])  # all None


def test_load_bench_errors(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(bench_records()))
    assert len(load_bench([good, good])) == 24
    with pytest.raises(FileNotFoundError, match=r"missing\.json"):
        load_bench([tmp_path / "missing.json"])
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="cannot read benchmark results"):
        load_bench([bad])
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps([{"model": "x"}]))
    with pytest.raises(ValueError, match="lacks key"):
        load_bench([partial])
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps([bench_records()[0] | {"compile_s": "slow"}]))
    with pytest.raises(ValueError, match="compile_s"):
        load_bench([wrong])


# ----------------------------------------------------------------------- CLI
@pytest.fixture()
def table(tmp_path):
    path = tmp_path / "sizes.npz"
    gb.GraphSizes([1, 2, 3, 10, 2], [0, 2, 4, 20, 2]).save(path)
    return path


def test_cli_analyze_json(table, capsys):
    assert main(["analyze", str(table), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["num_graphs"] == 5 and out["distinct_pairs"] == 4
    assert out["nodes"]["max"] == 10 and out["edges"]["max"] == 20
    assert out["nodes"]["padding_efficiency"] == pytest.approx(18 / 50)
    assert out["edges"]["potential_speedup"] == pytest.approx(100 / 28)
    assert out["nodes"]["quantiles"]["p50"] == 2.0
    assert out["nodes"]["excess_kurtosis"] == pytest.approx(ref_column([1, 2, 3, 10, 2])["kurt"])


def test_cli_analyze_table(table, capsys):
    assert main(["analyze", str(table)]) == 0
    out = capsys.readouterr().out
    assert "padding efficiency (pad to max)" in out and "excess kurtosis" in out


def test_cli_compare(tmp_path, capsys):
    path = tmp_path / "s.npz"
    small_sizes(300).save(path)
    assert main(["compare", str(path), "--batch-size", "16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {r["strategy"] for r in out["results"]} == set(gb.strategy_names())
    assert out["batch_size"] == 16 and len(out["budget"]) == 3
    assert main(["compare", str(path), "--batch-size", "16"]) == 0
    text = capsys.readouterr().out
    for name in gb.strategy_names():
        assert name in text
    assert "shared budget" in text


def test_cli_bad_input(tmp_path, capsys):
    empty = tmp_path / "empty.npz"
    np.savez(empty, n_node=np.zeros(0, np.int64), n_edge=np.zeros(0, np.int64))
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"this is not a zip file")
    for cmd in (["analyze", str(empty)], ["compare", str(empty), "--batch-size", "8"]):
        assert main(cmd) == 2
        assert "empty dataset" in capsys.readouterr().err
    assert main(["analyze", str(garbage)]) == 2
    assert "graphbatch analyze: error:" in capsys.readouterr().err
    assert main(["analyze", str(tmp_path / "nope.npz")]) == 2
    assert "does not exist" in capsys.readouterr().err
    good = tmp_path / "good.npz"
    small_sizes(40).save(good)
    assert main(["compare", str(good), "--batch-size", "1"]) == 2
    assert "batch_size" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["analyze", str(good), "--frobnicate"])
    assert exc.value.code == 2
    assert "unrecognized arguments: --frobnicate" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["compare", str(good)])  # --batch-size is required
    assert "--batch-size" in capsys.readouterr().err


def test_cli_unreadable_file_names_it(tmp_path, capsys):
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"this is not a zip file")
    assert main(["analyze", str(garbage)]) == 2
    err = capsys.readouterr().err
    assert "garbage.npz" in err and "cannot read" in err
