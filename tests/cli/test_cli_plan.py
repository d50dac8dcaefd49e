"""`graphbatch plan`: the plan file contract, JSON output, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import graphbatch as gb
from graphbatch.cli import main


@pytest.fixture
def sizes_file(tmp_path, molecule_sizes):
    return str(molecule_sizes.save(tmp_path / "sizes.npz"))


@pytest.mark.parametrize("strategy", ["static-constant", "static-64", "static-pow2", "dynamic"])
def test_plan_writes_contract(tmp_path, sizes_file, molecule_sizes, strategy, capsys):
    out = tmp_path / "plan.npz"
    rc = main(
        [
            "plan",
            sizes_file,
            "--strategy",
            strategy,
            "--batch-size",
            "32",
            "--out",
            str(out),
            "--json",
        ]
    )
    assert rc == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["strategy"] == strategy and stats["num_graphs"] == len(molecule_sizes)
    with np.load(out, allow_pickle=False) as f:
        order, offsets = f["order"], f["offsets"]
        pn, pe, pg, skipped = f["pad_nodes"], f["pad_edges"], f["pad_graphs"], f["skipped"]
    assert np.array_equal(np.sort(np.concatenate([order, skipped])), np.arange(len(molecule_sizes)))
    for b in range(len(offsets) - 1):
        idx = order[offsets[b] : offsets[b + 1]]
        assert molecule_sizes.n_node[idx].sum() <= pn[b] - 1
        assert molecule_sizes.n_edge[idx].sum() <= pe[b]
        assert len(idx) <= pg[b] - 1


def test_plan_budget_flags_and_table(tmp_path, sizes_file, capsys):
    out = tmp_path / "p.npz"
    rc = main(
        [
            "plan",
            sizes_file,
            "--strategy",
            "dynamic",
            "--max-nodes",
            "700",
            "--max-edges",
            "12000",
            "--max-graphs",
            "40",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "node_efficiency" in text
    p = gb.BatchPlan.load(out)
    assert p.shapes().tolist() == [[700, 12000, 40]]
    rc = main(
        [
            "plan",
            sizes_file,
            "--strategy",
            "dynamic",
            "--batch-size",
            "16",
            "--max-nodes",
            "900",
            "--out",
            str(out),
            "--json",
        ]
    )
    assert rc == 0 and gb.BatchPlan.load(out).shapes()[0, 0] == 900


@pytest.mark.parametrize(
    "args,message",
    [
        (["--strategy", "nope", "--batch-size", "8"], "unknown strategy"),
        (["--strategy", "dynamic", "--max-nodes", "10"], "--max-edges, --max-graphs"),
        (
            [
                "--strategy",
                "dynamic",
                "--max-nodes",
                "10",
                "--max-edges",
                "10",
                "--max-graphs",
                "2",
            ],
            "does not fit",
        ),
        (["--strategy", "static-64", "--batch-size", "1"], "batch_size = 1"),
        (["--strategy", "static-pow2", "--batch-size", "8", "--sample-size", "5"], "takes no"),
    ],
)
def test_plan_errors_one_line(tmp_path, sizes_file, args, message, capsys):
    rc = main(["plan", sizes_file, *args, "--out", str(tmp_path / "x.npz")])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and err.count("\n") == 1
    assert not (tmp_path / "x.npz").exists()


def test_missing_file_error(tmp_path, capsys):
    rc = main(
        [
            "plan",
            str(tmp_path / "none.npz"),
            "--strategy",
            "dynamic",
            "--batch-size",
            "8",
            "--out",
            str(tmp_path / "x.npz"),
        ]
    )
    assert rc == 2 and "does not exist" in capsys.readouterr().err


def test_console_entry_point_runs(tmp_path, sizes_file):
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "graphbatch.cli",
            "plan",
            sizes_file,
            "--strategy",
            "static-pow2",
            "--batch-size",
            "8",
            "--out",
            str(tmp_path / "p.npz"),
            "--json",
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["strategy"] == "static-pow2"


def test_core_import_has_no_framework():
    code = (
        "import sys, graphbatch, graphbatch.planners, graphbatch.cli; "
        "bad = [m for m in ('torch', 'jax', 'torch_geometric', 'jraph') if m in sys.modules]; "
        "print(','.join(bad)); sys.exit(1 if bad else 0)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, f"core imported {res.stdout.strip()}"
