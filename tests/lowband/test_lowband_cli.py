"""``graphbatch bandwidth``: output equals the library's numbers; clear errors on bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from graphbatch.cli import main
from graphbatch.lowband import (
    EdgeGraphs,
    apply_reordering,
    band_coverage,
    bandwidth_summary,
    bandwidths,
    reduce_bandwidth,
)

from .._lowband_graphs import random_collection


def test_bandwidth_json_matches_library(tmp_path, capsys):
    g = random_collection(4, 30, max_nodes=60, max_band=10)
    g.save(tmp_path / "g.npz")
    rc = main(
        [
            "bandwidth",
            str(tmp_path / "g.npz"),
            "--json",
            "--bounds",
            "4",
            "8",
            "16",
            "--block-sizes",
            "8",
            "16",
            "--num-blocks",
            "8",
            "--out",
            str(tmp_path / "r.npz"),
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    r = reduce_bandwidth(g)
    want = bandwidth_summary(g.n_node, r.before, r.after, (4, 8, 16)).as_dict()
    assert out["share_below"] == {str(k): v for k, v in want["share_below"].items()}
    assert out["max_bandwidth_after"] == want["max_bandwidth_after"]
    assert out["edges"] == g.num_edges
    # the written file holds the reordered graphs
    h = EdgeGraphs.load(tmp_path / "r.npz")
    assert np.array_equal(bandwidths(h), r.after)
    cov = band_coverage(apply_reordering(g, r), [8, 16], 8)
    assert out["coverage"] == json.loads(json.dumps(cov))


def test_bandwidth_table_and_errors(tmp_path, capsys):
    g = random_collection(5, 10)
    g.save(tmp_path / "g.npz")
    assert main(["bandwidth", str(tmp_path / "g.npz")]) == 0
    text = capsys.readouterr().out
    assert "share bw < B (RCM)" in text and "N/B from" in text
    g.sizes().save(tmp_path / "sizes.npz")
    assert main(["bandwidth", str(tmp_path / "sizes.npz")]) == 2
    assert "size table has no edges" in capsys.readouterr().err
    assert main(["bandwidth", str(tmp_path / "missing.npz")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "x.csv").write_text("1,2\n")
    assert main(["bandwidth", str(tmp_path / "x.csv")]) == 2
    assert "cannot read graphs" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:  # refused by argparse, before any work
        main(["bandwidth", str(tmp_path / "g.npz"), "--block-sizes", "0"])
    assert exit_info.value.code == 2
    assert "expected an integer >= 1, got '0'" in capsys.readouterr().err


@pytest.mark.requires("h5py")
def test_code_graphs_and_store_through_datasets(tmp_path, capsys):
    """Directory / .py / .h5 inputs go through graphbatch.datasets (skipped where it is absent)."""
    datasets = pytest.importorskip("graphbatch.datasets")
    from graphbatch.lowband._sources import graphs_from_python, graphs_from_store

    src = tmp_path / "pkg"
    src.mkdir()
    (src / "a.py").write_text(
        "def f(x):\n    y = x + 1\n    return y\n\ndef g(a, b):\n    return f(a) * b\n"
    )
    (src / "b.py").write_text("def h():\n    return [i for i in range(3)]\n")
    g = graphs_from_python(src)
    assert len(g) == 3 and g.num_edge_types == 4
    # the same arrays as the datasets builder, edge for edge
    chunks = list(datasets.code_graphs(src, reverse_edges=True))
    ei = np.concatenate([c.edge_index for c in chunks], axis=1)
    assert np.array_equal(g.senders, ei[0]) and np.array_equal(g.receivers, ei[1])
    assert np.array_equal(
        g.node_data["node_type"], np.concatenate([c.node["node_type"] for c in chunks])
    )
    assert len(graphs_from_python(src / "a.py")) == 2
    datasets.write_store(tmp_path / "code.h5", iter(chunks), name="code")
    h = graphs_from_store(tmp_path / "code.h5")
    assert np.array_equal(h.senders, g.senders) and np.array_equal(h.edge_type, g.edge_type)
    for arg in (str(src), str(tmp_path / "code.h5")):
        assert main(["bandwidth", arg, "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        r = reduce_bandwidth(g)
        assert out["num_graphs"] == 3 and out["max_bandwidth_after"] == int(r.after.max())


@pytest.mark.requires("h5py")
def test_reordered_store_keeps_fields_with_their_nodes(tmp_path, capsys):
    datasets = pytest.importorskip("graphbatch.datasets")
    from graphbatch.lowband import bandwidths
    from graphbatch.lowband._sources import SOURCE_NODE_FIELD, graphs_from_store

    rng = np.random.default_rng(0)
    g = random_collection(8, 12, max_nodes=40, max_band=6)
    arrays = datasets.GraphArrays(
        n_node=g.n_node,
        n_edge=g.n_edge,
        edge_index=np.stack([g.senders, g.receivers]),
        node={"x": g.node_data["x"].astype(np.float32), "uid": np.arange(g.num_nodes)},
        edge={
            "edge_type": g.edge_type.astype(np.uint8),
            "w": rng.normal(size=g.num_edges).astype(np.float32),
        },
        graph={"y": rng.normal(size=len(g)).astype(np.float32)},
    )
    datasets.write_store(tmp_path / "in.h5", [arrays], name="t")
    assert (
        main(["bandwidth", str(tmp_path / "in.h5"), "--out", str(tmp_path / "out.h5"), "--json"])
        == 0
    )
    capsys.readouterr()
    with datasets.GraphStore(tmp_path / "out.h5") as st:
        new = st.arrays()
    r = reduce_bandwidth(g)
    assert np.array_equal(bandwidths(graphs_from_store(tmp_path / "out.h5")), r.after)
    assert np.array_equal(new.node[SOURCE_NODE_FIELD], r.perm)
    base = np.repeat(g.node_offsets[:-1], g.n_node)
    uid = new.node["uid"]
    assert np.array_equal(uid, r.perm + base)  # node fields moved with their node
    assert np.array_equal(new.node["x"], arrays.node["x"][uid])
    # edge e still joins the same two original nodes, and keeps its own fields
    ebase = np.repeat(g.node_offsets[:-1], g.n_edge)
    assert np.array_equal(uid[new.edge_index[0] + ebase], g.senders + ebase)
    assert np.array_equal(uid[new.edge_index[1] + ebase], g.receivers + ebase)
    assert np.array_equal(new.edge["w"], arrays.edge["w"])
    assert np.array_equal(new.graph["y"], arrays.graph["y"])
    assert (
        main(
            ["bandwidth", str(tmp_path / "in.h5"), "--limit", "3", "--out", str(tmp_path / "o2.h5")]
        )
        == 2
    )
