"""The device check (benchmarks/gpu) on CPU with ``--tiny``: every part runs through the
public bench API and writes its JSON and markdown; a failing part is recorded, the others go
on; the time budget skips what is left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")
pytest.importorskip("h5py")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The tiny data of prepare.sh, built the way it builds them (QM9 store, EMT store)."""
    pytest.importorskip("graphbatch.datasets._qm9")
    pytest.importorskip("ase")
    from benchmarks.gpu.make_emt import make
    from graphbatch.cli import main

    folder = tmp_path_factory.mktemp("gpucheck")
    try:
        rc = main(
            [
                "data",
                "build",
                "qm9",
                "--limit",
                "120",
                "--no-progress",
                "--out",
                str(folder / "qm9.h5"),
            ]
        )
    except FileNotFoundError as exc:  # pragma: no cover - qm9pack missing
        pytest.skip(str(exc))
    assert rc == 0
    from ase.io import write

    write(folder / "emt.extxyz", make(60, 0), format="extxyz")
    args = ["data", "build", "extxyz", str(folder / "emt.extxyz"), "--cutoff", "4.0"]
    args += ["--energy-key", "energy", "--forces-key", "forces", "--no-progress"]
    assert main([*args, "--out", str(folder / "emt.h5")]) == 0
    return folder


def _run(data: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    cmd = [sys.executable, "-m", "benchmarks.gpu.check", "--tiny", "--data", str(data)]
    return subprocess.run(
        [*cmd, "--out", str(out), *extra],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


@pytest.mark.slow
def test_every_part_runs_on_cpu_and_writes_json_and_markdown(data, tmp_path):
    pytest.importorskip("mace.modules")
    pytest.importorskip("jraph")
    out = tmp_path / "out"
    proc = _run(data, out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    files = sorted(p.name for p in out.iterdir())
    assert files == ["check.json", "check.log", "check.md", "cuda_tests.log"]  # <= 8 files
    doc = json.loads((out / "check.json").read_text())
    parts = doc["parts"]
    assert list(parts) == ["cuda_tests", "schnet", "warm", "mace", "memory", "workers", "jax"]
    assert {k: v["status"] for k, v in parts.items()} == dict.fromkeys(parts, "ok")
    assert doc["environment"]["cuda_available"] is False
    runs = [r["run"] for r in parts["schnet"]["rows"]]
    assert runs == [
        "pyg-eager (eager, feed loader)",
        "dynamic (compiled, feed loader)",
        "pack-lpf (compiled, feed loader)",
        "dynamic (captured, feed device)",
        "pack-lpf (captured, feed device)",
    ]
    recs = parts["schnet"]["records"]
    assert [r["step_mode"] for r in recs] == ["loop"] * 3 + ["captured"] * 2
    assert all("step_ms" in r and "test_mae_curve" not in r for r in recs)  # steps kept
    assert all(r["profile"]["steps"] == 2 and r["profile"]["top"] for r in recs)
    assert all(r["profiled host ops"] > 0 for r in parts["schnet"]["rows"])
    warm = parts["warm"]["rows"]  # two fresh processes on one compile cache, vs pyg-eager
    assert [r["run"].split()[0] for r in warm] == ["cold", "warm"]
    assert all(r["steps"] == 3 and r["x pyg-eager incl. compile"] > 0 for r in warm)
    assert [r["run"] for r in parts["mace"]["rows"]][-1] == "pack-lpf (captured, feed device)"
    mem = parts["memory"]["rows"]
    assert {(r["table"].split()[0], r["strategy"]) for r in mem} == {
        (t, s) for t in ("QM9", "EMT") for s in ("random", "kk", "stratified", "dynamic")
    }
    assert all(r["peak MB"] > 0 for r in mem)
    assert [r["workers"] for r in parts["workers"]["rows"]] == [0, 1]
    assert {r["run"] for r in parts["jax"]["rows"]} == {"dynamic", "pack-lpf", "jraph-dynamic"}
    md = (out / "check.md").read_text()
    for name in parts:
        assert f"## {name}: ok" in md
    assert "| pack-lpf (captured, feed device) |" in md


def test_a_failing_part_is_recorded_and_the_budget_skips_the_rest(tmp_path):
    out = tmp_path / "out"
    missing = tmp_path / "no-data"  # no stores: the schnet part fails, the check goes on
    proc = _run(missing, out, "--parts", "schnet,workers", "--budget-s", "1000")
    assert proc.returncode == 0, proc.stderr[-2000:]
    parts = json.loads((out / "check.json").read_text())["parts"]
    assert parts["schnet"]["status"] == parts["workers"]["status"] == "failed"
    assert "qm9.h5" in parts["schnet"]["error"]
    proc = _run(missing, tmp_path / "o2", "--parts", "schnet", "--budget-s", "10")
    parts = json.loads((tmp_path / "o2" / "check.json").read_text())["parts"]
    assert parts["schnet"]["status"] == "skipped"
    assert "time budget" in (tmp_path / "o2" / "check.md").read_text()
    assert _run(missing, tmp_path / "o3", "--parts", "nope").returncode == 2
