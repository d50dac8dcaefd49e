"""graphbatch tune on a real torch model (eager, tiny: no timing is asserted): the CLI end to end
with --config, the factory protocol and the CPU peak-memory measure (docs/tune.md's blocks run,
and print a request, in tests/docs/test_docs.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")
pytest.importorskip("h5py")

import graphbatch as gb  # noqa: E402
from graphbatch.tuning import TuneResult, TuneStep, plan_arrays_digest  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _run(args, cwd, timeout=600, env=None):
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


@pytest.fixture(scope="module")
def qm9_dir(tmp_path_factory):
    """A folder holding qm9.h5: the first 300 QM9 molecules (radius 6 Å graphs)."""
    d = tmp_path_factory.mktemp("tune_qm9")
    _run(
        [
            sys.executable,
            "-m",
            "graphbatch.cli",
            "data",
            "build",
            "qm9",
            "--limit",
            "300",
            "--no-progress",
            "--out",
            "qm9.h5",
        ],
        cwd=d,
    )
    return d


def test_cli_tune_writes_a_request_that_plans_the_evaluated_plan(qm9_dir, monkeypatch, capsys):
    from graphbatch.cli import main

    monkeypatch.chdir(qm9_dir)
    assert (
        main(
            [
                "tune",
                "qm9.h5",
                "--model",
                "schnet",
                "--batch-size",
                "16",
                "--compile",
                "off",
                "--probes",
                "3",
                "--rounds",
                "1",
                "--validate",
                "1",
                "--validate-steps",
                "2",
                "--memory-limit",
                "4GiB",
                "--out",
                "tune.json",
                "--result",
                "tune-result.json",
                "--quiet",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "chosen (eager)" in printed and "validation" in printed
    request = json.loads((qm9_dir / "tune.json").read_text())
    result = TuneResult.load(qm9_dir / "tune-result.json")
    assert request == result.request
    assert result.validation[0]["meas_peak_bytes"] > 0
    assert result.settings["memory_kind"].startswith("cpu_tensor_bytes")
    _run(
        [
            sys.executable,
            "-m",
            "graphbatch.cli",
            "plan",
            "qm9.h5",
            "--config",
            "tune.json",
            "--out",
            "plan.npz",
        ],
        cwd=qm9_dir,
    )
    from graphbatch.datasets import GraphStore

    sizes = GraphStore(str(qm9_dir / "qm9.h5")).graph_sizes()
    digest = result.ranking[0].plan_digest
    assert plan_arrays_digest(gb.BatchPlan.load(qm9_dir / "plan.npz")) == digest
    assert plan_arrays_digest(gb.plan(sizes, **request)) == digest
    # the loaders take the request unchanged
    import graphbatch.torch as gt

    ld = gt.loader(GraphStore(str(qm9_dir / "qm9.h5")), **request)
    assert len(ld) == len(gb.plan(sizes, **request))


def test_factory_protocol_and_cpu_peak_memory(qm9_dir):
    """A factory returning a TuneStep with loader options; its step allocates a known buffer,
    which the CPU peak-memory measure must see."""
    from graphbatch.tuning import (
        SimulatedBackend,  # noqa: F401  (public next to TorchBackend)
        TorchBackend,
    )

    extra = 64 * 2**20
    calls = []

    def factory(*, device, compile, source):
        calls.append((device, compile, type(source).__name__))
        w = torch.nn.Parameter(torch.ones(8))

        def step(batch):
            buf = torch.empty(extra, dtype=torch.uint8)
            buf.fill_(1)
            return (batch.pos.sum() * w.sum() + buf[:1].float()).sum()

        import graphbatch.torch as gt

        return TuneStep(step, loader_options={"collation": gt.Collation(cutoff=6.0)})

    be = TorchBackend(str(qm9_dir / "qm9.h5"), model=factory, modes=("eager",))
    try:
        assert calls == [("cpu", False, "GraphStore")]
        b, shape = be.batch_at({"strategy": "dynamic", "batch_size": 8}, 0, 0)
        be.batches[0] = b
        peak = be.probe_memory(0, "eager")
        batch_bytes = sum(
            v.untyped_storage().nbytes()
            for v in b.to_dict().values()
            if isinstance(v, torch.Tensor)
        )
        assert peak >= extra + batch_bytes // 2
        assert peak < extra + 64 * 2**20  # not the process: tensors only
        assert shape[2] == int(b.graph_mask.shape[0])
    finally:
        be.close()


def test_factory_by_module_path(qm9_dir):
    from graphbatch.tuning import resolve_factory

    sys.path.insert(0, str(ROOT))
    try:
        f = resolve_factory("examples.tune_pyg_schnet:factory")
    finally:
        sys.path.remove(str(ROOT))
    assert callable(f)
    for bad, msg in (
        ("nope", "unknown model"),
        ("no_such_module_x:f", "cannot import"),
        ("graphbatch:no_such_factory", "has no"),
    ):
        with pytest.raises(ValueError, match=msg):
            resolve_factory(bad)
    assert np.isfinite(float(torch.ones(1)))


def test_synthetic_stand_ins_have_edges_inside_their_graphs():
    """The stand-ins for a size table's graphs (torch and JAX) keep GraphArrays' local edge
    indices: every edge inside its own graph, sizes exact."""
    from graphbatch.tuning._torch_backend import synthetic_dataset

    rng = np.random.default_rng(5)
    n = rng.integers(2, 30, 40)
    e = np.minimum(n * 3, n * (n - 1))
    sizes = gb.GraphSizes(n, e)
    for d, nn, ne in zip(synthetic_dataset(sizes, seed=1), n, e, strict=True):
        assert d.num_nodes == nn and d.edge_index.shape[1] == ne
        assert int(d.edge_index.min()) >= 0 and int(d.edge_index.max()) < nn
    jraph = pytest.importorskip("jraph")
    from graphbatch.tuning._jax_backend import synthetic_graphs_tuples

    for g, nn in zip(synthetic_graphs_tuples(sizes, seed=1), n, strict=True):
        assert isinstance(g, jraph.GraphsTuple) and int(g.n_node[0]) == nn
        assert g.senders.min() >= 0 and g.senders.max() < nn
        assert g.receivers.min() >= 0 and g.receivers.max() < nn


def _qm9_table(n_graphs: int) -> gb.GraphSizes:
    """The first ``n_graphs`` rows of QM9's own size table (radius 6 Å, shipped)."""
    from importlib import resources

    path = resources.files("graphbatch") / "data" / "qm9_radius6_sizes.npz"
    return gb.GraphSizes.load(str(path)).subset(np.arange(n_graphs))


@pytest.mark.parametrize("odd", [False, True], ids=["qm9-table", "odd-edge-counts"])
def test_cli_tune_with_the_default_model_runs_on_a_size_table(tmp_path, capsys, odd):
    """`graphbatch tune sizes.npz` with the default --model schnet exited 2 with a "pair_edges"
    error even on QM9's own size table: the bench's SchNet pairs each edge with its reverse,
    the stand-in graphs had random directed edges (issue 37)."""
    from graphbatch.cli import main

    sizes = _qm9_table(400)
    if odd:  # not a radius graph's table: some graphs have an odd number of edges
        e = sizes.n_edge.copy()
        e[::3] = np.maximum(e[::3] - 1, 1)
        sizes = gb.GraphSizes(sizes.n_node, e)
    path = sizes.save(tmp_path / "sizes.npz")
    args = ["tune", str(path), "--compile", "off", "--probes", "2", "--rounds", "1"]
    args += ["--batch-size", "16", "--strategies", "dynamic", "--epochs", "1", "--quiet"]
    args += ["--result", str(tmp_path / "r.json")]
    capsys.readouterr()
    rc = main(args)
    err = capsys.readouterr().err
    assert rc == 0, err
    result = TuneResult.load(tmp_path / "r.json")
    assert result.settings["model"] == "schnet" and result.ranking[0].feasible


def test_stand_ins_of_a_radius_graph_table_come_in_reverse_pairs():
    """Stand-ins keep the pairing a radius graph has (what SchNet's paired filter needs):
    edges 2k and 2k+1 of every graph are reverses, no self loops; sizes exact."""
    from graphbatch.tuning._torch_backend import synthetic_dataset

    sizes = _qm9_table(300)
    data = synthetic_dataset(sizes, seed=2)
    assert data.reverse_paired
    for d, nn, ne in zip(data, sizes.n_node, sizes.n_edge, strict=True):
        ei = d.edge_index
        assert d.num_nodes == nn and ei.shape[1] == ne
        assert torch.equal(ei[:, 0::2], ei.flip(0)[:, 1::2]) and bool((ei[0] != ei[1]).all())
    odd = gb.GraphSizes(sizes.n_node[:10], np.maximum(sizes.n_edge[:10] - 1, 1))
    assert not synthetic_dataset(odd, seed=2).reverse_paired


def test_schnet_pairs_edges_only_where_the_source_pairs_them(qm9_dir):
    """The built-in SchNet factories take the bench's paired filter for radius graphs (a QM9
    store, symmetric molecules) and the plain one for directed edges."""
    from torch_geometric.data import Data

    from graphbatch.datasets import GraphStore
    from graphbatch.tuning._pairs import reverse_paired

    from .._torch_graphs import molecules

    assert reverse_paired(GraphStore(str(qm9_dir / "qm9.h5")))
    radius = molecules(30, seed=4)
    assert reverse_paired(radius)
    directed = [Data(edge_index=g.edge_index[:, g.edge_index[0] < g.edge_index[1]]) for g in radius]
    assert not reverse_paired(directed)
    assert not reverse_paired([{"x": 1}])  # no edges to look at: the plain filter
