"""`graphbatch bench` end to end on a tiny QM9 subset: valid JSON, compile counts, contract."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")
pytest.importorskip("graphbatch.torch")
pytest.importorskip("graphbatch.datasets")

import graphbatch  # noqa: E402
from graphbatch.bench import BenchConfig, plan_runs, run_bench  # noqa: E402
from graphbatch.bench._config import PACKING_GRAPH_CAP, bench_budget  # noqa: E402
from graphbatch.cli import main  # noqa: E402

REQUIRED = (
    "model",
    "strategy",
    "batch_size",
    "repeat",
    "compiles",
    "compile_s",
    "step_ms_mean",
    "step_ms_median",
    "update_ms_median",
    "batching_ms_median",
    "graphs_per_s",
    "peak_mem_bytes",
    "test_rmse",
)
TINY = {"schnet": {"hidden": 8, "filters": 8, "num_interactions": 1, "num_gaussians": 6}}


def test_cli_tiny_run_writes_the_contract(tmp_path):
    out = tmp_path / "bench"
    rc = main(
        [
            "bench",
            "--models",
            "schnet",
            "--strategies",
            "dynamic,static-64,unpadded,pyg-eager",
            "--batch-sizes",
            "6",
            "--steps",
            "3",
            "--repeats",
            "2",
            "--subset",
            "60",
            "--eval-every",
            "2",
            "--threads",
            "1",
            "--quiet",
            "--no-plots",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    records = json.loads((out / "results.json").read_text())
    assert isinstance(records, list) and len(records) == 4 * 2
    seen = {(r["strategy"], r["repeat"]) for r in records}
    assert seen == {
        (s, r) for s in ("dynamic", "static-64", "unpadded", "pyg-eager") for r in (0, 1)
    }
    for r in records:
        for k in REQUIRED:
            assert k in r, k
        assert r["model"] == "schnet" and r["batch_size"] == 6
        assert r["compiles"] == 0 and r["compile_s"] == 0.0  # eager on CPU (auto)
        assert r["graphs_per_s"] > 0 and r["peak_mem_bytes"] > 0
        assert math.isfinite(r["test_rmse"]) and r["test_rmse"] > 0
        assert len(r["step_ms"]) == 3 and r["eval_steps"] == [2, 3]
        assert r["step_ms_median"] == pytest.approx(np.median(r["step_ms"]), rel=1e-3)
        # padded batches never hold more than batch_size - 1 real graphs per step
        assert r["real_graphs"] <= 3 * (6 if r["strategy"] in ("unpadded", "pyg-eager") else 5)
    assert records[0]["model_impl"] == "graphbatch"
    assert {r["model_impl"] for r in records if r["strategy"] == "pyg-eager"} == {"pyg"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["learning_tests"][0]["num_comparisons"] == 6  # 4 strategies, 2 repeats each
    assert (out / "results.csv").read_text().splitlines()[0].startswith("model,strategy")


def test_compile_count_equals_plan_distinct_shapes(data):
    """static-64 compiles once per distinct padded shape of the batches it ran; dynamic once.

    Dynamo's ``eager`` backend: the count is Dynamo's (Inductor would add minutes here)."""
    steps, bs = 6, 6
    cfg = BenchConfig(
        models=("schnet",),
        strategies=("static-64", "dynamic"),
        batch_sizes=(bs,),
        steps=steps,
        repeats=1,
        compile="on",
        compile_backend="eager",
        eval_every=steps,
        model_options=TINY,
        subset=80,
    )
    recs = {r["strategy"]: r for r in run_bench(cfg, progress=False, data=data)}
    p = graphbatch.plan(data.train_sizes, "static-64", batch_size=bs, seed=cfg.seed, epoch=0)
    expect = np.unique(np.stack([p.pad_nodes, p.pad_edges, p.pad_graphs], 1)[:steps], axis=0)
    assert recs["static-64"]["distinct_shapes"] == expect.shape[0]
    assert recs["static-64"]["compiles"] == expect.shape[0] > 1
    assert recs["dynamic"]["compiles"] == recs["dynamic"]["distinct_shapes"] == 1


def test_auto_compile_plan_and_bad_arguments(tmp_path):
    cpu = BenchConfig(
        strategies=("pack-lpf", "dynamic", "pyg-compile", "pyg-eager"), batch_sizes=(32,), repeats=1
    )
    modes = [(r.strategy, r.compiled) for r in plan_runs(cpu)]
    assert modes == [
        ("pack-lpf", False),
        ("pack-lpf", True),
        ("dynamic", False),
        ("pyg-compile", True),
        ("pyg-eager", False),
    ]
    with pytest.raises(ValueError, match="unknown model"):
        BenchConfig(models=("gcn",)).validate()
    with pytest.raises(ValueError, match="unknown strategy"):
        BenchConfig(strategies=("nope",)).validate()
    with pytest.raises(ValueError, match="batch sizes"):
        BenchConfig(strategies=("dynamic",), batch_sizes=(1,)).validate()
    assert main(["bench", "--strategies", "nope", "--out", str(tmp_path)]) == 2


def test_one_budget_for_every_repeat_and_graph_cap(data):
    """Budget-using strategies get Algorithm 1's budget from ``cfg.seed`` in every repeat (one
    compiled shape across repeats); ``graph_cap`` multiplies only the graph slots."""
    bs = 6
    cfg = BenchConfig(
        models=("schnet",),
        strategies=("dynamic", "static-64"),
        batch_sizes=(bs,),
        steps=2,
        repeats=2,
        compile="off",
        eval_every=2,
        model_options=TINY,
        subset=80,
        graph_cap=2.5,
    )
    recs = run_bench(cfg, progress=False, data=data)
    est = graphbatch.estimate_budget(data.train_sizes, bs, rng=np.random.default_rng(cfg.seed))
    dyn = [r for r in recs if r["strategy"] == "dynamic"]
    assert [r["repeat"] for r in dyn] == [0, 1]
    for r in dyn:
        assert r["budget"] == [est.n_node, est.n_edge, 15]  # round(2.5 * 6)
        assert max(r["real_graphs_steps"]) <= 14
    assert [r["budget"] for r in recs if r["strategy"] == "static-64"] == [None, None]
    # by default packing strategies get PACKING_GRAPH_CAP x the graph slots, dynamic Algorithm 1's
    auto = BenchConfig()
    assert auto.graph_cap_for("dynamic") == 1.0
    assert auto.graph_cap_for("pack-lpf") == auto.graph_cap_for("buckets") == PACKING_GRAPH_CAP
    assert bench_budget(auto, data.train_sizes, bs, "pack-lpf").n_graph == round(
        PACKING_GRAPH_CAP * bs
    )
    assert bench_budget(auto, data.train_sizes, bs, "dynamic").n_graph == est.n_graph
    assert BenchConfig(graph_cap=3.0).graph_cap_for("dynamic") == 3.0
    with pytest.raises(ValueError, match="graph_cap"):
        BenchConfig(graph_cap=0.5).validate()
    with pytest.raises(ValueError, match="sharing_strategy"):
        BenchConfig(sharing_strategy="shm").validate()
    from graphbatch.bench import effective_sharing_strategy

    assert effective_sharing_strategy(BenchConfig()) is None  # no workers: torch's own
    assert effective_sharing_strategy(BenchConfig(num_workers=2)) == "file_system"
    assert (
        effective_sharing_strategy(BenchConfig(num_workers=2, sharing_strategy="file_descriptor"))
        == "file_descriptor"
    )


def test_padding_cost_per_repeat_hand_checked():
    from graphbatch.bench import targets

    def rec(strategy, repeat, us, compiled=False):
        return {
            "model": "schnet",
            "batch_size": 8,
            "strategy": strategy,
            "repeat": repeat,
            "compiled": compiled,
            "compiles": 0,
            "compile_s": 0.0,
            "batching_ms_median": 1.0,
            "update_ms_median": 1.0,
            "step_ms_median": 1.0,
            "step_ms_mean": 1.0,
            "graphs_per_s": 1.0,
            "steady_graphs_per_s": 1.0,
            "update_us_per_graph": us,
            "update_us_per_graph_median": us,
            "peak_mem_bytes": 1,
            "test_rmse": 1.0,
        }

    recs = [
        rec("unpadded", 0, 100.0),
        rec("unpadded", 1, 200.0),
        rec("unpadded", 2, 100.0),
        rec("pack-lpf", 0, 102.0),
        rec("pack-lpf", 1, 190.0),
        rec("pack-lpf", 2, 110.0),
        rec("pack-lpf", 0, 50.0, compiled=True),
    ]
    (t,) = targets(recs)
    assert t["padding_cost_repeats"]["pack-lpf"] == pytest.approx([1.02, 0.95, 1.10])
    assert "pack-lpf+compile" not in t["padding_cost_repeats"]
    assert t["padding_cost"]["pack-lpf"] == pytest.approx(110.0 / 100.0)  # medians over repeats


def test_prefetch_thread_trains_on_the_same_batches(data):
    """``prefetch`` only moves batch making into a thread: the same batches in the same order, so
    the same losses, weights and test errors as without it."""
    base = dict(
        models=("schnet",),
        strategies=("pack-lpf", "pyg-eager"),
        batch_sizes=(6,),
        steps=4,
        repeats=1,
        compile="off",
        eval_every=4,
        model_options=TINY,
        subset=80,
    )
    plain = run_bench(BenchConfig(**base), progress=False, data=data)
    fetched = run_bench(BenchConfig(**base, prefetch=2), progress=False, data=data)
    for a, b in zip(plain, fetched, strict=True):
        assert (a["strategy"], b["prefetch"], a["prefetch"]) == (b["strategy"], 2, 0)
        assert a["real_graphs_steps"] == b["real_graphs_steps"]
        assert a["test_rmse"] == pytest.approx(b["test_rmse"], rel=1e-6)
    with pytest.raises(ValueError, match="prefetch"):
        BenchConfig(prefetch=-1).validate()


def test_full_grid_is_the_papers_and_runs_end_to_end(tmp_path):
    """``--full``: 3 models x 4 batch sizes x every strategy x 10 repeats, compiled; a smoke run
    of all its strategies (Dynamo's eager backend, tiny subset, 2 steps) writes the contract."""
    import argparse

    from graphbatch.bench import BASELINES, PADDED_STRATEGIES
    from graphbatch.cli._bench_cmd import add_parser, config_from_args

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    full = config_from_args(parser.parse_args(["bench", "--full", "--out", str(tmp_path)]))
    assert full.models == ("schnet", "mpeu", "painn") and full.batch_sizes == (16, 32, 64, 128)
    assert set(full.strategies) == set(PADDED_STRATEGIES) | set(BASELINES)
    assert full.repeats == 10 and full.compile == "on" and full.subset is None
    runs = plan_runs(full)
    assert len(runs) == 3 * 4 * 10 * len(full.strategies)
    assert all(r.compiled for r in runs if r.strategy in (*PADDED_STRATEGIES, "pyg-compile"))

    out = tmp_path / "smoke"
    rc = main(
        [
            "bench",
            "--full",
            "--models",
            "schnet",
            "--batch-sizes",
            "6",
            "--steps",
            "2",
            "--repeats",
            "1",
            "--subset",
            "60",
            "--compile-backend",
            "eager",
            "--quiet",
            "--no-plots",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    records = json.loads((out / "results.json").read_text())
    assert {r["strategy"] for r in records} == set(full.strategies)
    for r in records:
        assert all(k in r for k in REQUIRED)
        assert math.isfinite(r["test_rmse"])
        if r["strategy"] in PADDED_STRATEGIES:
            assert r["compiled"] and r["compiles"] == r["distinct_shapes"] >= 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a CPU-only machine")
def test_cuda_requested_without_a_gpu_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(ValueError, match="no CUDA device"):
        run_bench(BenchConfig(device="cuda", steps=1, repeats=1), progress=False)
    rc = main(["bench", "--device", "cuda", "--steps", "1", "--quiet", "--out", str(tmp_path)])
    assert rc == 2 and "no CUDA device" in capsys.readouterr().err
    assert not (tmp_path / "results.json").exists()
