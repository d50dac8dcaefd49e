"""`graphbatch bench --framework jax`: the torch bench's record schema plus framework, compile
counts from the jitted step's own cache, learning tests, valid JSON."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")
pytest.importorskip("optax")

from graphbatch.bench import BenchConfig
from graphbatch.bench._jax_runner import (
    jax_targets,
    load_jax_bench_data,
    run_jax_bench,
)
from graphbatch.bench._report import LIST_KEYS, learning_tests
from graphbatch.cli import main

REQUIRED = (
    "framework",
    "model",
    "strategy",
    "batch_size",
    "repeat",
    "compiled",
    "budget",
    "compiles",
    "compile_s",
    "distinct_shapes",
    "step_ms_mean",
    "step_ms_median",
    "update_ms_median",
    "batching_ms_median",
    "graphs_per_s",
    "steady_graphs_per_s",
    "update_us_per_graph_median",
    "node_efficiency",
    "edge_efficiency",
    "peak_mem_bytes",
    "test_rmse",
    "input_wait_fraction",
    *LIST_KEYS,
)
TINY = {"schnet": {"hidden": 8, "filters": 8, "num_interactions": 1, "num_gaussians": 6}}
STRATEGIES = ("pack-lpf", "jraph-dynamic", "jraph-pad64", "unpadded")


@pytest.fixture(scope="module")
def records():
    data = load_jax_bench_data("qm9", subset=60, seed=0)
    cfg = BenchConfig(
        framework="jax",
        strategies=STRATEGIES,
        batch_sizes=(4,),
        steps=2,
        repeats=2,
        subset=60,
        eval_every=1,
        model_options=TINY,
        prefetch=2,
    )
    return run_jax_bench(cfg, progress=False, data=data)


def test_records_follow_the_bench_schema(records):
    assert len(records) == len(STRATEGIES) * 2
    assert {(r["strategy"], r["repeat"]) for r in records} == {
        (s, k) for s in STRATEGIES for k in (0, 1)
    }
    for r in records:
        for k in REQUIRED:
            assert k in r, k
        assert r["framework"] == "jax" and r["model"] == "schnet" and r["batch_size"] == 4
        assert math.isfinite(r["test_rmse"]) and r["test_rmse"] > 0
        assert len(r["step_ms"]) == 2 and r["eval_steps"] == [1, 2]
        assert r["step_ms_median"] == pytest.approx(np.median(r["step_ms"]), rel=1e-3)
        assert r["graphs_per_s"] > 0 and r["compile_s"] > 0
        # padded batches hold at most batch_size - 1 real graphs (pack-lpf: its graph slots)
        cap = {"unpadded": 4, "pack-lpf": r["budget"][2] - 1 if r["budget"] else 3}
        assert max(r["real_graphs_steps"]) <= cap.get(r["strategy"], 3)
    json.loads(json.dumps(records))  # plain JSON values only


def test_input_wait_is_recorded_per_step(records):
    for r in records:
        wait = np.asarray(r["input_wait_ms_steps"])
        assert wait.shape == (r["steps"],) and (wait >= 0).all()
        # the step time is the input wait plus the update time, step by step
        np.testing.assert_allclose(wait + np.asarray(r["update_ms_steps"]), r["step_ms"], atol=1e-3)
        steady = [k for k in range(r["steps"]) if k not in r["compile_steps"]]
        if not steady or r["strategy"] == "unpadded":  # unpadded: timed after a warm-up call
            steady = list(range(r["steps"]))
        frac = np.asarray(r["step_ms"])[steady]
        assert r["input_wait_fraction"] == pytest.approx(
            wait[steady].sum() / frac.sum(), rel=1e-3, abs=1e-6
        )
        assert 0 <= r["input_wait_fraction_median"] <= 1
        # graphbatch's loader runs with the configured prefetch; the baselines in the loop
        assert r["prefetch"] == (
            0 if r["strategy"] in ("jraph-dynamic", "jraph-pad64", "unpadded") else 2
        )


def test_default_jax_bench_uses_the_loaders_default_prefetch():
    import inspect

    from graphbatch.bench import JAX_DEFAULT, JAX_FULL
    from graphbatch.jax import loader

    default = inspect.signature(loader).parameters["prefetch"].default
    assert default > 0
    assert JAX_DEFAULT.prefetch == JAX_FULL.prefetch == default


def test_compilations_come_from_the_jitted_steps_cache(records):
    for r in records:
        if r["strategy"] in ("pack-lpf", "jraph-dynamic"):
            assert r["compiles"] == 1 and r["distinct_shapes"] == 1
            assert r["compile_steps"] == [0]
        else:  # pad-64, unpadded: one compilation per distinct shape met, exactly
            assert r["compiles"] == r["distinct_shapes"] >= 1
        assert len(r["compile_steps"]) <= r["compiles"]


def test_learning_tests_and_targets(records):
    tests = learning_tests(records)
    assert tests and tests[0]["num_comparisons"] == len(STRATEGIES) * (len(STRATEGIES) - 1) // 2
    assert set(tests[0]["names"]) == set(STRATEGIES)  # JAX runs keep their strategy name
    t = jax_targets(records)[0]
    assert t["compiles"]["pack-lpf"] == 1
    assert set(t["padding_cost"]) == {"pack-lpf"}
    assert t["pack_lpf_over_jraph_dynamic"] > 0 and t["pack_lpf_over_jraph_pad64"] > 0


def test_cli_framework_jax_writes_results(tmp_path, monkeypatch):
    import dataclasses

    import graphbatch.bench as bench

    # the CLI's own path with a small SchNet (the default one compiles for ~10 s per run)
    monkeypatch.setattr(
        bench, "JAX_DEFAULT", dataclasses.replace(bench.JAX_DEFAULT, model_options=TINY)
    )
    out = tmp_path / "b"
    rc = main(
        [
            "bench",
            "--framework",
            "jax",
            "--strategies",
            "pack-lpf,jraph-dynamic",
            "--batch-sizes",
            "4",
            "--steps",
            "2",
            "--repeats",
            "1",
            "--subset",
            "40",
            "--quiet",
            "--no-plots",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    recs = json.loads((out / "results.json").read_text())
    assert [r["framework"] for r in recs] == ["jax", "jax"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["framework"] == "jax"
    assert summary["jax_targets"][0]["compiles"] == {"pack-lpf": 1, "jraph-dynamic": 1}
    assert (
        main(["bench", "--framework", "jax", "--strategies", "pyg-eager", "--out", str(out)]) == 2
    )  # a torch baseline: a one-line error


def test_jax_bench_path_imports_no_torch():
    import subprocess
    import sys

    code = (
        "import sys, graphbatch.bench._jax_runner, graphbatch.jax.models, graphbatch.jax; "
        "from graphbatch.bench import JAX_DEFAULT; JAX_DEFAULT.validate(); "
        "sys.exit(1 if 'torch' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
