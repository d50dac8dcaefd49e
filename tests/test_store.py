"""HDF5 graph store: round trip, sizes from metadata, LRU cache, atomic writes, damaged files."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")

from graphbatch import GraphSizes  # noqa: E402
from graphbatch.cli import main  # noqa: E402
from graphbatch.cli._common import load_sizes  # noqa: E402
from graphbatch.datasets import (  # noqa: E402
    GraphArrays,
    GraphStore,
    GraphStoreWriter,
    StoreFormatError,
    synthetic_graphs,
    synthetic_sizes,
    write_store,
)


def _graphs(n=120, seed=0) -> GraphArrays:
    sizes = synthetic_sizes(n, "heavy", rng=seed, mean_nodes=10)
    g = synthetic_graphs(sizes, rng=seed + 1, node_dim=3, n_targets=2)
    rng = np.random.default_rng(seed + 2)
    E = int(sizes.n_edge.sum())
    return GraphArrays(
        n_node=g.n_node, n_edge=g.n_edge, edge_index=g.edge_index,
        node={**g.node, "z": rng.integers(1, 10, int(sizes.n_node.sum())).astype(np.uint8)},
        edge={"edge_dist": rng.random(E).astype(np.float32),
              "flag": rng.random(E) < 0.5},
        graph={**g.graph, "index": np.arange(n, dtype=np.int64)},
    )


def _write(path, graphs, pieces=3, **kw):
    cut = np.linspace(0, len(graphs), pieces + 1).astype(int)
    chunks = [graphs.take(np.arange(a, b)) for a, b in zip(cut[:-1], cut[1:]) if b > a]
    return write_store(path, chunks, name="test", meta={"note": "ünïcode ok"},
                       failed_index=[7, 11], **kw)


@pytest.fixture()
def stored(tmp_path):
    graphs = _graphs()
    path = _write(tmp_path / "g.h5", graphs)
    return path, graphs


@pytest.mark.parametrize("compression", ["gzip", "lzf", None])
def test_round_trip_equality(tmp_path, compression):
    graphs = _graphs(seed=5)
    path = _write(tmp_path / "g.h5", graphs, compression=compression)
    with GraphStore(path) as store:
        assert len(store) == len(graphs) and store.name == "test"
        assert store.meta == {"note": "ünïcode ok"}
        assert store.failed_index.tolist() == [7, 11]
        for i in range(len(graphs)):
            got, want = store[i], graphs.graph_dict(i)
            assert set(got) == set(want)
            for k in want:
                assert got[k].dtype == want[k].dtype
                np.testing.assert_array_equal(got[k], want[k])
        back = store.arrays(10, 50)
        ref = graphs.take(np.arange(10, 50))
        np.testing.assert_array_equal(back.edge_index, ref.edge_index)
        for level in ("node", "edge", "graph"):
            for k, v in getattr(ref, level).items():
                np.testing.assert_array_equal(getattr(back, level)[k], v)
        np.testing.assert_array_equal(store.graph_field("y"), graphs.graph["y"])
        store.verify()


def test_sizes_come_from_metadata(stored):
    path, graphs = stored
    with GraphStore(path) as store:
        sizes = store.graph_sizes()
        assert store.cache_info()["misses"] == 0       # no graph was read
    np.testing.assert_array_equal(sizes.n_node, graphs.n_node)
    np.testing.assert_array_equal(sizes.n_edge, graphs.n_edge)
    # bytes once materialised in torch: x float32[3], pos float32[3], z int64 per node;
    # edge_index 2*int64, edge_dist float32, flag bool per edge; y float32[2], index int64
    want = graphs.n_node * (12 + 12 + 8) + graphs.n_edge * (16 + 4 + 1) + (8 + 8)
    np.testing.assert_array_equal(sizes.n_bytes, want)
    assert load_sizes(str(path)) == sizes


def test_lru_cache(stored):
    path, _ = stored
    store = GraphStore(path, cache_size=2)
    a = store[0]
    assert store[0] is a and store.cache_info() == {"hits": 1, "misses": 1, "size": 1,
                                                    "maxsize": 2}
    with pytest.raises(ValueError):
        a["z"][0] = 3                                    # cached arrays are read-only
    store[1], store[2]                                   # evicts graph 0 (least recent)
    assert store[0] is not a
    assert store.cache_info()["misses"] == 4
    assert store[-1]["index"].tolist() == [len(store) - 1]
    with pytest.raises(IndexError):
        store[len(store)]
    with pytest.raises(TypeError):
        store[1.5]
    clone = pickle.loads(pickle.dumps(store))            # what DataLoader workers receive
    assert clone.cache_info()["size"] == 0
    np.testing.assert_array_equal(clone[3]["edge_index"], store[3]["edge_index"])


def test_write_is_atomic(tmp_path, stored):
    path, graphs = stored
    before = path.read_bytes()
    with pytest.raises(RuntimeError):
        with GraphStoreWriter(path, name="x") as w:
            w.append(graphs.take([0, 1]))
            raise RuntimeError("interrupted")
    assert path.read_bytes() == before                    # old file untouched
    assert [p.name for p in path.parent.iterdir()] == [path.name]   # no temp file left
    with pytest.raises(ValueError, match="no graphs"):
        with GraphStoreWriter(tmp_path / "empty.h5", name="x"):
            pass
    assert not (tmp_path / "empty.h5").exists()
    other = GraphArrays(n_node=[2], n_edge=[0], edge_index=np.zeros((2, 0), np.int32))
    with pytest.raises(ValueError, match="differ"):
        write_store(tmp_path / "mixed.h5", [graphs.take([0]), other], name="x")


def test_truncated_and_garbage_files(tmp_path, stored):
    path, _ = stored
    data = path.read_bytes()
    trunc = tmp_path / "trunc.h5"
    trunc.write_bytes(data[: len(data) // 2])
    with pytest.raises(StoreFormatError, match="trunc"):
        GraphStore(trunc)
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"not an HDF5 file at all" * 10)
    with pytest.raises(StoreFormatError):
        GraphStore(junk)
    with pytest.raises(FileNotFoundError):
        GraphStore(tmp_path / "missing.h5")


def test_corrupted_chunk_is_detected(tmp_path, stored):
    path, _ = stored
    with h5py.File(path, "r") as f:
        info = f["node/x"].id.get_chunk_info(0)
    raw = bytearray(path.read_bytes())
    for b in range(info.byte_offset + 8, info.byte_offset + 24):
        raw[b] ^= 0xFF
    bad = tmp_path / "bad.h5"
    bad.write_bytes(bytes(raw))
    store = GraphStore(bad)                   # metadata intact: opens
    with pytest.raises(StoreFormatError, match="node/x"):
        store.read_graph(0)
    with pytest.raises(StoreFormatError):
        store.verify()


def test_other_format_or_version(tmp_path, stored):
    path, _ = stored
    for attr, value, match in (("format_version", 99, "version 99"),
                               ("format", "something-else", "not a graphbatch graph store")):
        copy = tmp_path / f"{attr}.h5"
        copy.write_bytes(path.read_bytes())
        with h5py.File(copy, "r+") as f:
            f.attrs[attr] = value
        with pytest.raises(StoreFormatError, match=match):
            GraphStore(copy)
    copy = tmp_path / "inconsistent.h5"
    copy.write_bytes(path.read_bytes())
    with h5py.File(copy, "r+") as f:
        f["sizes/n_edge"][0] += 1
    with pytest.raises(StoreFormatError, match="offsets disagree"):
        GraphStore(copy)


def test_numpy_access_works_without_torch(stored):
    path, _ = stored
    code = ("import sys; sys.modules['torch'] = None\n"
            "from graphbatch.datasets import GraphStore\n"
            f"s = GraphStore({str(path)!r}); print(len(s[0]['edge_index'][0]), len(s))")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent / "src")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[1] == "120"


def test_torch_dataset_of_pyg_data(stored):
    torch = pytest.importorskip("torch")
    pytest.importorskip("torch_geometric")
    path, graphs = stored
    ds = GraphStore(path).to_torch()
    assert len(ds) == len(graphs)
    assert ds.graph_sizes() == GraphSizes(graphs.n_node, graphs.n_edge, ds.graph_sizes().n_bytes)
    d = ds[5]
    want = graphs.graph_dict(5)
    assert d.num_nodes == graphs.n_node[5]
    assert d.edge_index.dtype == torch.long and d.edge_index.shape == (2, graphs.n_edge[5])
    assert d.z.dtype == torch.long and d.pos.dtype == torch.float32 and d.flag.dtype == torch.bool
    assert d.y.shape == (1, 2) and d.y.dtype == torch.float32
    np.testing.assert_array_equal(d.edge_index.numpy(), want["edge_index"])
    np.testing.assert_array_equal(d.edge_dist.numpy(), want["edge_dist"])


def test_cli_build_and_sizes(tmp_path, capsys):
    pytest.importorskip("graphbatch.datasets._qm9")
    out = tmp_path / "qm9.h5"
    try:
        rc = main(["data", "build", "qm9", "--limit", "30", "--graph", "knn", "--k", "4",
                   "--no-progress", "--out", str(out)])
    except FileNotFoundError as exc:  # pragma: no cover - qm9pack missing
        pytest.skip(str(exc))
    assert rc == 0 and "wrote" in capsys.readouterr().out
    with GraphStore(out) as store:
        assert len(store) == 30 and store.meta["k"] == 4
        np.testing.assert_array_equal(store.n_edge, store.n_node * np.minimum(4, store.n_node - 1))
        assert [t["name"] for t in store.meta["targets"]][10] == "U0"
        sizes = store.graph_sizes()
    assert main(["data", "sizes", str(out), "--out", str(tmp_path / "s.npz")]) == 0
    assert GraphSizes.load(tmp_path / "s.npz") == sizes
    (tmp_path / "bad.h5").write_bytes(b"garbage")
    assert main(["data", "sizes", str(tmp_path / "bad.h5"), "--out", str(tmp_path / "t.npz")]) == 2
    assert "cannot open" in capsys.readouterr().err
