"""`graphbatch plan --config` on hand-written request files (issue 37): keys that are not part
of a plan request, budgets without their fields, strings and booleans where the request needs
booleans and integers, JSON nested past Python's recursion limit -- one line, exit status 2, no
plan written; never a traceback, never a plan of another request."""

from __future__ import annotations

import json

import numpy as np
import pytest

import graphbatch as gb
from graphbatch.cli import main


@pytest.fixture
def sizes_file(tmp_path, molecule_sizes):
    return str(molecule_sizes.save(tmp_path / "sizes.npz"))


def _plan(capsys, sizes_file, config, out, *flags) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(["plan", sizes_file, "--config", str(config), "--out", str(out), *flags])
    return rc, capsys.readouterr().err


def _one_line(rc: int, err: str) -> str:
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


BAD = {
    "epoch": ({"epoch": 1}, ["'epoch'", "--epoch"]),
    "world_size": ({"world_size": 2}, ["'world_size'", "--world-size"]),
    "sizes": ({"sizes": "other.npz"}, ["'sizes'", "SIZES"]),
    "budget fields": (
        {"strategy": "pack-lpf", "budget": {"n_node": 1}, "batch_size": None},
        ["lacks n_edge, n_graph"],
    ),
    "shuffle string": ({"shuffle": "false"}, ["shuffle must be True or False, got 'false'"]),
    "shuffle number": ({"shuffle": 0}, ["shuffle must be True or False, got 0"]),
    "seed bool": ({"seed": True}, ["seed must be an integer, got True"]),
    "batch size bool": ({"batch_size": True}, ["batch_size must be an integer, got True"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
@pytest.mark.parametrize("wrapped", [False, True], ids=["request", "tune-result"])
def test_bad_requests_are_one_line_and_write_nothing(tmp_path, capsys, sizes_file, case, wrapped):
    change, expect = BAD[case]
    request = {"strategy": "dynamic", "batch_size": 32, "seed": 0, **change}
    request = {k: v for k, v in request.items() if v is not None}
    body = {"format": "graphbatch-tune/1", "request": request} if wrapped else request
    config = tmp_path / "req.json"
    config.write_text(json.dumps(body))
    out = tmp_path / "plan.npz"
    line = _one_line(*_plan(capsys, sizes_file, config, out))
    assert all(e in line for e in expect), line
    assert not out.exists()


def test_json_nested_past_the_recursion_limit_is_one_line(tmp_path, capsys, sizes_file):
    config = tmp_path / "deep.json"
    config.write_text("[" * 100_000 + "]" * 100_000)
    out = tmp_path / "plan.npz"
    line = _one_line(*_plan(capsys, sizes_file, config, out))
    assert "deep.json" in line and "nested" in line, line
    assert not out.exists()


def test_real_booleans_in_a_request_are_honoured(tmp_path, capsys, sizes_file, molecule_sizes):
    config = tmp_path / "req.json"
    config.write_text(json.dumps({"strategy": "dynamic", "batch_size": 32, "shuffle": False}))
    out = tmp_path / "plan.npz"
    assert _plan(capsys, sizes_file, config, out)[0] == 0
    got = gb.BatchPlan.load(out)
    want = gb.plan(molecule_sizes, "dynamic", batch_size=32, shuffle=False)
    assert np.array_equal(got.order, want.order)
    assert np.array_equal(got.order, np.sort(got.order))  # dataset order: not shuffled
    # the flags a request may not hold are still given as flags
    config.write_text(json.dumps({"strategy": "dynamic", "batch_size": 32}))
    assert _plan(capsys, sizes_file, config, out, "--epoch", "1", "--world-size", "2")[0] == 0
    want = gb.plan(molecule_sizes, "dynamic", batch_size=32, epoch=1, world_size=2)
    assert np.array_equal(gb.BatchPlan.load(out).order, want.order)


def test_an_option_nested_past_the_recursion_limit_is_one_line(tmp_path, sizes_file):
    """``--option KEY=VALUE`` parses VALUE as JSON; 100,000 brackets were a RecursionError."""
    import subprocess
    import sys

    out = tmp_path / "plan.npz"
    args = ["plan", sizes_file, "--strategy", "dynamic", "--batch-size", "8", "--out", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "graphbatch.cli", *args, "--option", "multiple=" + "[" * 100_000],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "--option" in proc.stderr and "nested" in proc.stderr
    assert not out.exists()
