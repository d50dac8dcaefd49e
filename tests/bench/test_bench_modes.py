"""``graphbatch bench --step/--feed``: the captured step (`TrainStep`) and the device feed
(`DeviceFeed`) as bench modes, on CPU: same training as the bench's own loop, the new record
keys, the CUDA defaults (resolved without a GPU) and the refused combinations."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")

from graphbatch.bench import BenchConfig, run_bench  # noqa: E402
from graphbatch.bench._modes import feed_mode, step_mode  # noqa: E402
from graphbatch.cli import main  # noqa: E402

TINY = {"schnet": {"hidden": 8, "filters": 8, "num_interactions": 1, "num_gaussians": 6}}
NEW_KEYS = (
    "step_mode",
    "feed",
    "captured_graphs",
    "compiled_shapes",
    "recompiles",
    "peak_mem_allocated_bytes",
)


def _cfg(**kw) -> BenchConfig:
    base = BenchConfig(
        strategies=("dynamic", "static-64"),
        batch_sizes=(6,),
        steps=4,
        repeats=1,
        subset=80,
        eval_every=2,
        threads=1,
        compile="off",
        model_options=TINY,
    )
    return dataclasses.replace(base, **kw).validate()


def test_captured_step_and_device_feed_train_as_the_loop(data):
    loop = run_bench(_cfg(step="loop", feed="loader"), progress=False, data=data)
    mine = run_bench(_cfg(step="captured", feed="device"), progress=False, data=data)
    for a, b in zip(loop, mine, strict=True):
        assert (a["step_mode"], a["feed"]) == ("loop", "loader")
        assert (b["step_mode"], b["feed"]) == ("captured", "device")
        assert a["strategy"] == b["strategy"]
        assert a["real_graphs_steps"] == b["real_graphs_steps"]  # the same batches
        np.testing.assert_allclose(b["test_mae_curve"], a["test_mae_curve"], rtol=1e-5)
        assert b["captured_graphs"] == 0  # CPU: the eager backend captures nothing
        assert b["peak_mem_allocated_bytes"] is None


def test_cpu_defaults_are_unchanged_and_cuda_defaults_capture_and_feed():
    cpu = BenchConfig().validate()
    assert (step_mode(cpu, True), feed_mode(cpu, True)) == ("loop", "loader")
    cuda = BenchConfig(device="cuda")  # resolved without a GPU: no validate needed
    assert (step_mode(cuda, True), feed_mode(cuda, True)) == ("captured", "device")
    assert (step_mode(cuda, False), feed_mode(cuda, False)) == ("loop", "loader")  # baselines
    graphs = dataclasses.replace(cuda, compile_mode="reduce-overhead")
    assert step_mode(graphs, True) == "loop"  # the old mode, CUDA graphs by torch.compile
    thread = dataclasses.replace(cuda, prefetch=2)
    assert feed_mode(thread, True) == "prefetch"
    assert feed_mode(dataclasses.replace(cpu, feed="device"), True) == "device"


def test_bad_mode_combinations_are_refused(tmp_path):
    with pytest.raises(ValueError, match="--feed device with --prefetch 2"):
        BenchConfig(feed="device", prefetch=2).validate()
    with pytest.raises(ValueError, match="reduce-overhead"):
        BenchConfig(step="captured", compile_mode="reduce-overhead").validate()
    with pytest.raises(ValueError, match="step must be one of"):
        BenchConfig(step="graph").validate()
    out = str(tmp_path / "o")
    assert main(["bench", "--feed", "device", "--prefetch", "1", "--out", out]) == 2
    assert main(["bench", "--framework", "jax", "--step", "captured", "--out", out]) == 2
    assert not (tmp_path / "o" / "results.json").exists()


def test_cli_counts_recompilations_of_static_shapes(tmp_path, capsys):
    out = tmp_path / "b"
    args = ["bench", "--strategies", "static-64,dynamic", "--batch-sizes", "6", "--steps", "3"]
    args += ["--repeats", "1", "--subset", "60", "--threads", "1", "--compile", "on"]
    args += ["--compile-backend", "eager", "--step", "captured", "--feed", "device"]
    assert main([*args, "--no-plots", "--quiet", "--out", str(out)]) == 0
    assert "steady_graphs_per_s" in capsys.readouterr().out
    doc = json.loads((out / "results.json").read_text())
    recs = {r["strategy"]: r for r in (doc["records"] if isinstance(doc, dict) else doc)}
    for r in recs.values():
        assert all(k in r for k in NEW_KEYS)
        assert r["compiled_shapes"] == r["distinct_shapes"] == r["compiles"]
        assert r["recompiles"] == r["compiled_shapes"] - 1
    assert recs["dynamic"]["recompiles"] == 0


def test_mace_takes_prefetch_and_the_captured_step(tmp_path):
    pytest.importorskip("mace.modules")
    small = {"hidden_irreps": "8x0e + 8x1o", "MLP_irreps": "8x0e", "max_ell": 1}
    cfg = BenchConfig(
        models=("mace",),
        strategies=("dynamic",),
        batch_sizes=(6,),
        steps=3,
        repeats=1,
        subset=40,
        eval_every=3,
        cutoff=5.0,
        threads=1,
        compile="off",
        model_options={"mace": {**small, "num_bessel": 4, "num_interactions": 1}},
    )
    loop = run_bench(dataclasses.replace(cfg, step="loop", prefetch=1), progress=False)
    mine = run_bench(dataclasses.replace(cfg, step="captured", feed="device"), progress=False)
    assert (loop[0]["feed"], mine[0]["feed"]) == ("prefetch", "device")
    assert mine[0]["step_mode"] == "captured"
    np.testing.assert_allclose(mine[0]["train_loss"], loop[0]["train_loss"], rtol=1e-5)
