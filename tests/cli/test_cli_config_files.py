"""``graphbatch plan --config FILE`` (and a tune result read by ``report --tune``) on files that
are not a request: a FIFO blocked forever, ``/dev/zero`` was read until memory ran out. Now each
is a one-line error naming the file and what it is, or the limit; processes run with a timeout,
so a regression fails instead of hanging."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import graphbatch as gb
from graphbatch.tuning import TuneResult, load_request

_CLI = [sys.executable, "-m", "graphbatch.cli"]
_ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}


@pytest.fixture
def sizes_file(tmp_path, molecule_sizes) -> Path:
    return molecule_sizes.save(tmp_path / "sizes.npz")


def _plan(sizes: Path, config: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*_CLI, "plan", str(sizes), "--config", config, "--out", "p.npz"],
        cwd=cwd,
        env=_ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _one_line(r: subprocess.CompletedProcess) -> str:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_as_config_is_refused_at_once(tmp_path, sizes_file):
    fifo = tmp_path / "req.json"
    os.mkfifo(fifo)
    line = _one_line(_plan(sizes_file, str(fifo), tmp_path))
    assert "req.json" in line and "is a FIFO, not a regular file" in line, line
    assert not (tmp_path / "p.npz").exists()


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_dev_zero_as_config_is_refused_at_once(tmp_path, sizes_file):
    line = _one_line(_plan(sizes_file, "/dev/zero", tmp_path))
    assert "/dev/zero" in line and "character device" in line, line


def test_an_oversized_or_deep_config_is_refused_naming_the_limit(tmp_path, sizes_file):
    big = tmp_path / "big.json"
    with open(big, "wb") as f:  # sparse: 1 GiB of zero bytes claimed, none written
        f.truncate(1 << 30)
    line = _one_line(_plan(sizes_file, str(big), tmp_path))
    assert "big.json" in line and "larger than the limit" in line, line
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    line = _one_line(_plan(sizes_file, str(deep), tmp_path))
    assert "deep.json" in line and "nested" in line and "limit" in line, line


def test_a_request_file_still_plans_and_a_tune_result_still_loads(tmp_path, sizes_file):
    req = tmp_path / "req.json"
    req.write_text(json.dumps({"strategy": "dynamic", "batch_size": 16, "seed": 3}))
    assert load_request(req) == {"strategy": "dynamic", "batch_size": 16, "seed": 3}
    r = _plan(sizes_file, str(req), tmp_path)
    assert r.returncode == 0, r.stderr
    expect = gb.plan(gb.GraphSizes.load(sizes_file), "dynamic", batch_size=16, seed=3)
    assert gb.BatchPlan.load(tmp_path / "p.npz").order.tolist() == expect.order.tolist()
    with pytest.raises(gb.InputError, match="is a directory"):
        TuneResult.load(tmp_path)
    if hasattr(os, "mkfifo"):  # in a process of its own: a regression blocks forever
        os.mkfifo(tmp_path / "result.json")
        code = (
            "from graphbatch.tuning import TuneResult\n"
            "try:\n    TuneResult.load('result.json')\n"
            "except Exception as exc:\n    print(type(exc).__name__, exc)\n"
        )
        r = subprocess.run(
            [sys.executable, "-c", code],
            cwd=tmp_path,
            env=_ENV,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.stdout.startswith("InputError") and "is a FIFO" in r.stdout, r
