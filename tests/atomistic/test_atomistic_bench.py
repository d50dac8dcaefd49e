"""MACE as a model of ``graphbatch bench`` (``--models mace``): the record contract, the three
modes (padded compiled once, ``mace-eager``, ``mace-compile`` with ``dynamic=None``), Dynamo's
compilation counts and the summary's ratios. Dynamo's ``eager`` backend keeps the run short;
the inductor compile is measured in benchmarks/RESULTS.md."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("mace.modules")  # mace-torch, importable (it needs matplotlib)
pytest.importorskip("torch_geometric")

from graphbatch.bench import BenchConfig, plan_runs, run_bench  # noqa: E402
from graphbatch.bench._mace import mace_targets  # noqa: E402
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
    "steady_graphs_per_s",
)
TINY = [
    "--batch-sizes",
    "6",
    "--steps",
    "4",
    "--subset",
    "40",
    "--compile-backend",
    "eager",
    "--threads",
    "1",
    "--quiet",
    "--no-plots",
]


SMALL = {
    "mace": {
        "hidden_irreps": "8x0e + 8x1o",
        "MLP_irreps": "8x0e",
        "max_ell": 1,
        "num_bessel": 4,
        "num_interactions": 1,
    }
}


def test_cli_mace_bench_writes_the_contract(tmp_path, capsys):
    """The CLI path of ``--models mace`` (eager runs only: the compiled ones are counted below
    on a smaller MACE)."""
    out = tmp_path / "mace"
    assert (
        main(
            [
                "bench",
                "--models",
                "mace",
                "--strategies",
                "dynamic,mace-eager",
                "--compile",
                "off",
                *TINY,
                "--out",
                str(out),
            ]
        )
        == 0
    )
    records = json.loads((out / "results.json").read_text())
    assert [(r["strategy"], r["compiled"]) for r in records] == [
        ("dynamic", False),
        ("mace-eager", False),
    ]
    for r in records:
        for k in REQUIRED:
            assert k in r, k
        assert r["model"] == "mace" and r["model_impl"] == "mace-torch" and r["r_max"] == 5.0
        assert r["batch_size"] == 6 and len(r["step_ms"]) == 4 and r["compiles"] == 0
        assert math.isfinite(r["test_rmse"]) and r["graphs_per_s"] > 0
    padded, eager = records
    assert padded["distinct_shapes"] == 1 and max(padded["real_graphs_steps"]) <= 5
    assert eager["real_graphs_steps"] == [6, 6, 6, 6]
    summary = json.loads((out / "summary.json").read_text())
    (t,) = summary["mace_targets"]
    assert set(t["speedup"]) == {"dynamic vs mace-eager"}
    assert t["speedup"]["dynamic vs mace-eager"]["steady_steps"] == 4
    assert "dynamic vs mace-eager: median same-step ratio" in capsys.readouterr().out


@pytest.mark.slow
def test_mace_bench_compile_counts_padded_once_unpadded_goes_dynamic():
    """Padded + ``dynamic=False``: one static graph for the run. MACE's batches +
    ``dynamic=None``: a static graph for the first shape, then a dynamic-shape one (Dynamo's
    automatic dynamic shapes). Dynamo's ``eager`` backend; counts are Dynamo's own."""
    cfg = BenchConfig(
        models=("mace",),
        strategies=("dynamic", "mace-compile"),
        batch_sizes=(6,),
        steps=4,
        repeats=1,
        subset=40,
        cutoff=5.0,
        eval_every=4,
        compile="on",
        compile_backend="eager",
        model_options=SMALL,
        threads=1,
    )
    padded, unpadded = run_bench(cfg, progress=False)
    assert (padded["strategy"], unpadded["strategy"]) == ("dynamic", "mace-compile")
    assert padded["compiled"] and unpadded["compiled"]
    assert padded["distinct_shapes"] == 1 and padded["compiles"] == 1
    assert padded["graph_dynamic"] == [False] and padded["compile_steps"] == [0]
    assert unpadded["compiles"] == len(unpadded["graph_dynamic"]) >= 2
    assert unpadded["graph_dynamic"][:2] == [False, True]
    assert unpadded["compile_steps"][:2] == [0, 1]
    assert math.isfinite(padded["test_rmse"]) and math.isfinite(unpadded["test_rmse"])


def test_mace_runs_plan_and_bad_configurations(tmp_path):
    cfg = BenchConfig(
        models=("mace",),
        strategies=("dynamic", "mace-eager", "mace-compile"),
        batch_sizes=(32,),
        repeats=1,
    ).validate()
    assert [(r.strategy, r.compiled) for r in plan_runs(cfg)] == [
        ("dynamic", False),
        ("dynamic", True),
        ("mace-eager", False),
        ("mace-compile", True),
    ]
    on = BenchConfig(
        models=("mace",), strategies=("pack-lpf",), compile="on", repeats=1, batch_sizes=(32,)
    )
    assert [r.compiled for r in plan_runs(on)] == [True]
    with pytest.raises(ValueError, match="runs alone"):
        BenchConfig(models=("schnet", "mace")).validate()
    with pytest.raises(ValueError, match="PyG baseline"):
        BenchConfig(models=("mace",), strategies=("dynamic", "pyg-eager")).validate()
    with pytest.raises(ValueError, match="unknown strategy"):
        BenchConfig(models=("schnet",), strategies=("mace-eager",)).validate()
    with pytest.raises(ValueError, match="store"):  # --data store needs an atomistic store
        BenchConfig(models=("mace",), strategies=("dynamic",), data="store").validate()
    assert main(["bench", "--models", "mace", "--full", "--out", str(tmp_path)]) == 2
    assert main(["bench", "--models", "mace,schnet", "--out", str(tmp_path)]) == 2
    assert not (tmp_path / "results.json").exists()


def test_compiled_and_eager_mace_start_from_the_same_weights():
    from graphbatch.bench._mace import MaceData, small_mace

    data = MaceData([], [], None, 1.0, "eV", 0, avg_num_neighbors=9.0, r_max=5.0)
    opts = {"hidden_irreps": "8x0e + 8x1o", "MLP_irreps": "8x0e", "max_ell": 1}
    a = dict(small_mace(data, compiled=True, seed=3, **opts).named_parameters())
    b = dict(small_mace(data, compiled=False, seed=3, **opts).named_parameters())
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_mace_targets_hand_checked():
    """Same-step ratios of time per real graph over steps where neither run compiled; graphs/s
    ratios with and without compile time."""

    def rec(strategy, compiled, step_ms, graphs, compile_steps, gps, steady):
        return {
            "model": "mace",
            "strategy": strategy,
            "compiled": compiled,
            "batch_size": 4,
            "repeat": 0,
            "compiles": len(compile_steps),
            "compile_s": 1.0,
            "step_ms": step_ms,
            "real_graphs_steps": graphs,
            "compile_steps": compile_steps,
            "graphs_per_s": gps,
            "steady_graphs_per_s": steady,
            "dynamic_graphs": 0,
        }

    recs = [
        rec("dynamic", True, [900.0, 10.0, 10.0, 20.0], [3, 3, 3, 3], [0], 2.0, 300.0),
        rec("mace-eager", False, [40.0, 40.0, 20.0, 80.0], [4, 4, 4, 4], [], 100.0, 100.0),
        rec("mace-compile", True, [500.0, 600.0, 10.0, 40.0], [4, 4, 4, 4], [0, 1], 6.0, 200.0),
    ]
    (t,) = mace_targets(recs)
    v = t["speedup"]["dynamic+compile vs mace-eager"]
    # steps 1-3: (40/4)/(10/3) = 3, (20/4)/(10/3) = 1.5, (80/4)/(20/3) = 3 -> median 3
    assert v["steady_steps"] == 3 and v["median_step_ratio"] == pytest.approx(3.0)
    assert v["graphs_per_s_ratio_compile_included"] == pytest.approx(0.02)
    assert v["graphs_per_s_ratio_compile_excluded"] == pytest.approx(3.0)
    w = t["speedup"]["dynamic+compile vs mace-compile"]
    # steps 2-3: (10/4)/(10/3) = 0.75, (40/4)/(20/3) = 1.5 -> median 1.125
    assert w["steady_steps"] == 2 and w["median_step_ratio"] == pytest.approx(1.125)
    assert t["compiles"] == {"dynamic+compile": 1, "mace-eager": 0, "mace-compile": 2}
    assert np.isfinite(list(v.values())).all()
