"""`graphbatch bench --store`: training batches from the store batch path."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")
pytest.importorskip("h5py")

from graphbatch.bench import BenchConfig  # noqa: E402
from graphbatch.bench._config import RunSpec  # noqa: E402
from graphbatch.bench._data import load_store_data  # noqa: E402
from graphbatch.bench._torch_batches import _store_batches  # noqa: E402
from graphbatch.cli import main  # noqa: E402


@pytest.fixture(scope="module")
def qm9_store(tmp_path_factory):
    pytest.importorskip("graphbatch.datasets._qm9")
    out = tmp_path_factory.mktemp("bs") / "qm9.h5"
    try:
        assert (
            main(["data", "build", "qm9", "--limit", "60", "--no-progress", "--out", str(out)]) == 0
        )
    except FileNotFoundError as exc:  # pragma: no cover - qm9pack missing
        pytest.skip(str(exc))
    return out


def test_store_batches_carry_the_bench_target(qm9_store):
    data = load_store_data(str(qm9_store), seed=1)
    cfg = BenchConfig(data="store", store=str(qm9_store), subset=None).validate()
    it = _store_batches(RunSpec("schnet", "dynamic", 8, 0, False), cfg, data)
    seen = []
    for _ in range(12):
        b = next(it)
        gi = b.graph_index[b.graph_mask]
        assert torch.equal(b.y.view(-1)[b.graph_mask], data.target[gi])
        assert (b.y.view(-1)[~b.graph_mask] == 0).all()
        seen.extend(gi.tolist())
    assert set(seen) <= set(data.train_index.tolist())  # never a test graph
    assert len(data.test) + len(data.train_index) == 60


def test_bench_cli_trains_from_the_store(qm9_store, tmp_path, capsys):
    out = tmp_path / "b"
    assert (
        main(
            [
                "bench",
                "--store",
                str(qm9_store),
                "--strategies",
                "dynamic,pyg-eager",
                "--batch-sizes",
                "8",
                "--steps",
                "3",
                "--repeats",
                "1",
                "--eval-every",
                "3",
                "--compile",
                "off",
                "--threads",
                "1",
                "--no-plots",
                "--quiet",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "read from the store" in text and "batching_ms" in text
    records = json.loads((out / "results.json").read_text())
    assert {r["strategy"] for r in records} == {"dynamic", "pyg-eager"}
    assert all(np.isfinite(r["test_rmse"]) for r in records)
    assert main(["bench", "--data", "store", "--out", str(tmp_path / "c")]) == 2


def test_store_batches_from_workers_through_the_device_feed(qm9_store):
    """``--num-workers`` on the store path: workers read and pad (the slot path), the feed hands
    the batches out (on CPU unchanged), each with the bench target of its graphs."""
    from graphbatch.bench._torch_batches import run_batches as _run_batches

    data = load_store_data(str(qm9_store), seed=1)
    for feed in ("device", "loader"):
        cfg = BenchConfig(
            data="store", store=str(qm9_store), subset=None, num_workers=1, feed=feed
        ).validate()
        spec = RunSpec("schnet", "dynamic", 8, 0, False)
        it = _run_batches(spec, cfg, data, torch.device("cpu"), True, feed)
        seen = []
        for _ in range(10):  # more than one epoch of the 54 training graphs
            b = next(it)
            gi = b.graph_index[b.graph_mask]
            assert torch.equal(b.y.view(-1)[b.graph_mask], data.target[gi])
            assert (b.y.view(-1)[~b.graph_mask] == 0).all()
            seen.extend(gi.tolist())
        it.close()
        assert set(seen) == set(data.train_index.tolist())  # every training graph, no test one
