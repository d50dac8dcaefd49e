"""HDF5 graph store: round trip, sizes from metadata, LRU cache, atomic writes, damaged files."""

from __future__ import annotations

import itertools
import json
import os
import pickle
import signal
import subprocess
import sys
import zlib
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
    StoreFormatWarning,
    synthetic_graphs,
    synthetic_sizes,
    write_store,
)

from .._stores import edit_header, read_header, write_v2  # noqa: E402


def _graphs(n=120, seed=0) -> GraphArrays:
    sizes = synthetic_sizes(n, "heavy", rng=seed, mean_nodes=10)
    g = synthetic_graphs(sizes, rng=seed + 1, node_dim=3, n_targets=2)
    rng = np.random.default_rng(seed + 2)
    E = int(sizes.n_edge.sum())
    return GraphArrays(
        n_node=g.n_node,
        n_edge=g.n_edge,
        edge_index=g.edge_index,
        node={**g.node, "z": rng.integers(1, 10, int(sizes.n_node.sum())).astype(np.uint8)},
        edge={"edge_dist": rng.random(E).astype(np.float32), "flag": rng.random(E) < 0.5},
        graph={**g.graph, "index": np.arange(n, dtype=np.int64)},
    )


def _write(path, graphs, pieces=3, **kw):
    cut = np.linspace(0, len(graphs), pieces + 1).astype(int)
    chunks = [graphs.take(np.arange(a, b)) for a, b in itertools.pairwise(cut) if b > a]
    return write_store(
        path, chunks, name="test", meta={"note": "ünïcode ok"}, failed_index=[7, 11], **kw
    )


@pytest.fixture()
def stored(tmp_path):
    graphs = _graphs()
    path = _write(tmp_path / "g.h5", graphs)
    return path, graphs


@pytest.mark.parametrize("in_memory", [False, True])
def test_round_trip_equality(tmp_path, in_memory):
    graphs = _graphs(seed=5)
    path = _write(tmp_path / "g.h5", graphs)
    with GraphStore(path, in_memory=in_memory, verify=True) as store:
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
    with h5py.File(path, "r") as f:  # contiguous, unfiltered, latest format
        assert f["node/x"].chunks is None and f["node/x"].compression is None
    assert path.read_bytes()[8] >= 2  # superblock v2+: checksummed metadata


def test_sizes_come_from_metadata(stored):
    path, graphs = stored
    with GraphStore(path) as store:
        sizes = store.graph_sizes()
        assert store.cache_info()["misses"] == 0  # no graph was read
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
    assert store[0] is a and store.cache_info() == {"hits": 1, "misses": 1, "size": 1, "maxsize": 2}
    with pytest.raises(ValueError):
        a["z"][0] = 3  # cached arrays are read-only
    store[1], store[2]  # evicts graph 0 (least recent)
    assert store[0] is not a
    assert store.cache_info()["misses"] == 4
    assert store[-1]["index"].tolist() == [len(store) - 1]
    with pytest.raises(IndexError):
        store[len(store)]
    with pytest.raises(TypeError):
        store[1.5]
    clone = pickle.loads(pickle.dumps(store))  # what DataLoader workers receive
    assert clone.cache_info()["size"] == 0
    np.testing.assert_array_equal(clone[3]["edge_index"], store[3]["edge_index"])


def test_write_is_atomic(tmp_path, stored):
    path, graphs = stored
    before = path.read_bytes()
    with pytest.raises(RuntimeError), GraphStoreWriter(path, name="x") as w:
        w.append(graphs.take([0, 1]))
        raise RuntimeError("interrupted")
    assert path.read_bytes() == before  # old file untouched
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left
    with (
        pytest.raises(ValueError, match="no graphs"),
        GraphStoreWriter(tmp_path / "empty.h5", name="x"),
    ):
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


def test_corrupted_data_is_detected(tmp_path, stored):
    path, _ = stored
    with GraphStore(path) as s:
        offset = s._arrays()["node/x"].offset
    raw = bytearray(path.read_bytes())
    for b in range(offset + 8, offset + 24):
        raw[b] ^= 0xFF
    bad = tmp_path / "bad.h5"
    bad.write_bytes(bytes(raw))
    store = GraphStore(bad)  # metadata intact: opens
    with pytest.raises(StoreFormatError, match="node/x"):
        store.verify()
    with pytest.raises(StoreFormatError, match="node/x"):
        GraphStore(bad, verify=True)
    assert main(["data", "verify", str(bad)]) == 2
    assert main(["data", "verify", str(path)]) == 0


def _nested(depth: int) -> list:
    out: list = []
    for _ in range(depth - 1):
        out = [out]
    return out


def test_other_format_or_version(tmp_path, stored):
    """A format-3 header is checked (prefix CRC, header CRC), and a header with consistent
    checksums but impossible content -- a writer that got it wrong -- is refused too."""
    path, _ = stored
    cases = [
        (lambda b: b.update(format_version=99), "version 99"),
        (lambda b: b.update(format="something-else"), "something-else"),
        (lambda b: b.update(fields=[1, 2]), "fields is not a JSON object"),
        (lambda b: b.update(meta=3), "meta"),
        (lambda b: b.update(n_graph=2**63 - 1), "not a count"),
        (lambda b: b.update(edge_index_dtype="<f8"), "not an integer type"),
        (lambda b: b["arrays"]["node/x"].update(dtype="<f8"), "the counts require"),
        (lambda b: b["arrays"]["node/x"].update(offset=b["arrays"]["node/z"]["offset"]), "overlap"),
        (lambda b: b["arrays"]["edge_index"].update(offset=10**12), "outside"),
        (lambda b: b["chunks"].update(arrays=["edge_index"]), "chunk table columns"),
        (
            lambda b: b.update(meta={"deep": _nested(100)}),
            "nested 102 levels deep, over the limit of 64",
        ),
    ]
    for k, (change, match) in enumerate(cases):
        copy = tmp_path / f"case{k}.h5"
        copy.write_bytes(path.read_bytes())
        edit_header(copy, change, fix_crc=False)
        with pytest.raises(StoreFormatError, match="does not match its checksum"):
            GraphStore(copy)  # caught by the header checksum
        edit_header(copy, lambda b: None)  # the same header, checksum recomputed
        with pytest.raises(StoreFormatError, match=match):
            GraphStore(copy)
    copy = tmp_path / "prefix.h5"
    raw = bytearray(path.read_bytes())
    raw[20] ^= 1  # the header offset, in the prefix
    copy.write_bytes(bytes(raw))
    with pytest.raises(StoreFormatError, match="prefix does not match its checksum"):
        GraphStore(copy)
    copy = tmp_path / "inconsistent.h5"
    copy.write_bytes(path.read_bytes())
    off = read_header(copy)["arrays"]["sizes/n_edge"]["offset"]
    raw = bytearray(copy.read_bytes())
    raw[off] ^= 1
    copy.write_bytes(bytes(raw))
    with pytest.raises(StoreFormatError, match="checksum of sizes/n_edge"):
        GraphStore(copy)
    with GraphStore(path) as st:  # a consistent checksum of wrong sizes
        n_edge = np.array(st.n_edge)
    n_edge[0] ^= 1
    edit_header(copy, lambda b: b["arrays"]["sizes/n_edge"].update(crc32=zlib.crc32(n_edge)))
    with pytest.raises(StoreFormatError, match="offsets disagree"):
        GraphStore(copy)


def test_format_2_stores_still_open_and_say_they_lack_chunk_checksums(tmp_path):
    """Stores written before format 3 open (header read by h5py in a child process), warn
    that damaged arrays are caught only by verify(), and `data convert` upgrades them."""
    graphs = _graphs(n=30, seed=5)
    old = write_v2(tmp_path / "v2.h5", graphs, name="old", meta={"a": 1}, failed_index=[4])
    with pytest.warns(StoreFormatWarning, match="no per-chunk checksums.*data convert"):
        store = GraphStore(old, verify=True)
    assert store.format_version == 2 and store.name == "old" and store.meta == {"a": 1}
    for i in (0, 7, 29):
        for k, v in graphs.graph_dict(i).items():
            np.testing.assert_array_equal(store[i][k], v)
    with h5py.File(old, "r+") as f:  # a damaged format-2 header attribute
        f.attrs["name"] = "edited"
    with pytest.raises(StoreFormatError, match="do not match their checksum"):
        GraphStore(old)


def test_damaged_store_cli_gives_one_line_errors(tmp_path, stored, capsys):
    """Issue 14: `data sizes` on a damaged store raised AttributeError (a traceback)."""
    path, _ = stored
    copy = tmp_path / "fields.h5"
    copy.write_bytes(path.read_bytes())
    edit_header(copy, lambda b: b.update(fields=[1, 2]), fix_crc=False)
    capsys.readouterr()
    assert main(["data", "sizes", str(copy), "--out", str(tmp_path / "s.npz")]) == 2
    err = capsys.readouterr().err
    assert "damaged file" in err and "Traceback" not in err and len(err.splitlines()) == 1
    edit_header(copy, lambda b: None)
    assert main(["data", "sizes", str(copy), "--out", str(tmp_path / "s.npz")]) == 2
    err = capsys.readouterr().err
    assert "not a readable graph store" in err and "Traceback" not in err
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "s.npz").exists()


def _layout(path):
    from graphbatch.datasets._store_map import read_header

    return list(read_header(Path(path)).layout.values())


def _content(store):
    p = store.packed()
    out = {
        "edge_index": np.array(p.edge_index),
        "n_node": np.array(p.n_node),
        "n_edge": np.array(p.n_edge),
        "failed": np.array(store.failed_index),
    }
    for level in ("node", "edge", "graph"):
        out.update({f"{level}/{k}": np.array(v) for k, v in getattr(p, level).items()})
    return (store.name, store.meta, store.fields, store.uuid), out


def test_single_byte_flips_anywhere_are_detected(tmp_path):
    """Issue 14 item 2: every single-byte flip of the file -- HDF5 metadata (superblock,
    object headers, attributes) and data -- raises StoreFormatError on open or in verify(),
    or leaves everything a reader sees unchanged (bytes nobody reads); never garbage, never
    another exception, never a hang."""
    graphs = _graphs(n=4, seed=9)
    path = write_store(
        tmp_path / "small.h5", [graphs], name="flip", meta={"k": [1, 2]}, failed_index=[3]
    )
    raw = path.read_bytes()
    with GraphStore(path) as s:
        ref_meta, ref = _content(s)
    data = np.zeros(len(raw), dtype=bool)
    for off, shape, dt in _layout(path):
        if off is not None:
            data[off : off + int(np.prod(shape)) * dt.itemsize] = True
    arr = np.frombuffer(raw, dtype=np.uint8)
    meta_set = np.flatnonzero(~data & (arr != 0))  # every byte of HDF5 structure/attrs
    assert meta_set.shape[0] > 1000
    masks = (0x01, 0xFF, 0x10, 0x80)  # a full scan is in benchmarks/RESULTS.md
    picks = (
        meta_set[::5].tolist()
        + np.flatnonzero(~data & (arr == 0))[::97].tolist()
        + np.flatnonzero(data)[::53].tolist()
    )
    flips = [(int(p), masks[k % 4]) for k, p in enumerate(picks)]
    bad = tmp_path / "flipped.h5"
    outcomes = {"open": 0, "verify": 0, "unchanged": 0}
    for pos, mask in flips:
        if True:
            flipped = bytearray(raw)
            flipped[pos] ^= mask
            bad.write_bytes(bytes(flipped))
            try:
                store = GraphStore(bad)
            except StoreFormatError:
                outcomes["open"] += 1
                continue
            try:
                store.verify()
            except StoreFormatError:
                outcomes["verify"] += 1
                continue
            meta, got = _content(store)
            assert meta == ref_meta, f"byte {pos} ^ {mask:#x} changed the metadata silently"
            for k in ref:
                assert np.array_equal(got[k], ref[k]), f"byte {pos} ^ {mask:#x} changed {k}"
            outcomes["unchanged"] += 1
    assert outcomes["open"] > 0 and outcomes["verify"] > 0


def test_numpy_access_works_without_torch(stored):
    path, _ = stored
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from graphbatch.datasets import GraphStore\n"
        f"s = GraphStore({str(path)!r}); print(len(s[0]['edge_index'][0]), len(s))"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[1] == "120"


def test_torch_dataset_of_pyg_data(stored):
    torch = pytest.importorskip("torch")
    pytest.importorskip("torch_geometric")
    from graphbatch.torch import GraphStoreDataset

    path, graphs = stored
    ds = GraphStoreDataset(GraphStore(path))
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


def test_the_torch_view_lives_in_the_torch_adapter(stored):
    """The store has no torch method (datasets never imports the torch adapter); the view is
    ``graphbatch.torch.GraphStoreDataset(store)``, which refuses anything but a store."""
    pytest.importorskip("torch_geometric")
    from graphbatch import InputTypeError
    from graphbatch.torch import GraphStoreDataset

    path, graphs = stored
    assert not hasattr(GraphStore(path), "to_torch")
    for wrong in (str(path), [graphs.graph_dict(0)], GraphStoreDataset(GraphStore(path))):
        with pytest.raises(InputTypeError, match="needs a graph store"):
            GraphStoreDataset(wrong)


def test_adapters_recognise_stores_without_importing_the_datasets_package(stored):
    """The torch and JAX adapters tell a store from a dataset by the core's `GraphSource`:
    checking a non-store imports no ``graphbatch.datasets`` module; a store is recognised."""
    pytest.importorskip("torch_geometric")
    pytest.importorskip("jraph")
    code = (
        "import sys\n"
        "from graphbatch.torch._store_batch import is_graph_store\n"
        "from graphbatch.jax._source import as_graph_source\n"
        "assert not is_graph_store([1]) and as_graph_source([1]) == [1]\n"
        "print(sorted(m for m in sys.modules if m.startswith('graphbatch.datasets')))\n"
        "from graphbatch.datasets import open_store\n"
        f"store = open_store({str(stored[0])!r})\n"
        "print(is_graph_store(store), type(as_graph_source(store)).__name__)\n"
    )
    src = str(Path(__file__).resolve().parents[2] / "src")
    r = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": src},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines() == ["[]", "True StoreGraphs"]


def test_cli_build_and_sizes(tmp_path, capsys):
    pytest.importorskip("graphbatch.datasets._qm9")
    out = tmp_path / "qm9.h5"
    try:
        rc = main(
            [
                "data",
                "build",
                "qm9",
                "--limit",
                "30",
                "--graph",
                "knn",
                "--k",
                "4",
                "--no-progress",
                "--out",
                str(out),
            ]
        )
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
    assert "not a graphbatch graph store" in capsys.readouterr().err


def _write_v1(path, graphs: GraphArrays) -> Path:
    """A version-1 store as graphbatch wrote it before (chunked, gzip, Fletcher-32)."""
    filters = {"compression": "gzip", "shuffle": True, "fletcher32": True}
    with h5py.File(path, "w") as f:

        def put(where, arr):
            arr = np.asarray(arr)
            f.create_dataset(
                where,
                data=arr,
                chunks=tuple(max(1, min(s, 64)) for s in arr.shape) if arr.size else None,
                **(filters if arr.size else {}),
            )

        put("sizes/n_node", graphs.n_node)
        put("sizes/n_edge", graphs.n_edge)
        put("offsets/node", graphs.node_offsets)
        put("offsets/edge", graphs.edge_offsets)
        put("edge_index", graphs.edge_index)
        put("failed_index", np.array([5], np.int64))
        fields = {}
        for level in ("node", "edge", "graph"):
            for k, v in getattr(graphs, level).items():
                put(f"{level}/{k}", v)
                fields[k] = {"level": level, "dtype": v.dtype.str, "shape": list(v.shape[1:])}
        f.attrs.update(
            format="graphbatch-graph-store",
            format_version=1,
            name="old",
            n_graph=len(graphs),
            fields=json.dumps(fields),
            meta=json.dumps({"a": 1}),
        )
    return Path(path)


def test_old_store_names_convert_and_converts(tmp_path, capsys):
    graphs = _graphs(n=50, seed=4)
    old = _write_v1(tmp_path / "old.h5", graphs)
    with pytest.raises(StoreFormatError, match="graphbatch data convert"):
        GraphStore(old)
    assert main(["data", "sizes", str(old), "--out", str(tmp_path / "s.npz")]) == 2
    assert "graphbatch data convert" in capsys.readouterr().err
    assert main(["data", "convert", str(old), "--out", str(old)]) == 2  # never in place
    assert main(["data", "convert", str(old), "--out", str(tmp_path / "new.h5")]) == 0
    with GraphStore(tmp_path / "new.h5", verify=True) as s:
        assert s.name == "old" and s.meta == {"a": 1} and s.failed_index.tolist() == [5]
        for i in range(len(graphs)):
            got, want = s[i], graphs.graph_dict(i)
            for k in want:
                assert got[k].dtype == want[k].dtype
                np.testing.assert_array_equal(got[k], want[k])


def _dead_pid() -> int:
    p = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(p.stdout)


def test_temporaries_of_killed_builds_are_removed(tmp_path, stored):
    """Issue 14: a killed `data build` left `.tmp` files behind for good."""
    path, graphs = stored
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    code = (
        "import os, sys, numpy as np\n"
        "from graphbatch.datasets import GraphStoreWriter, synthetic_graphs, synthetic_sizes\n"
        "g = synthetic_graphs(synthetic_sizes(30, rng=0), rng=1)\n"
        f"w = GraphStoreWriter({str(path)!r}, name='x')\n"
        "w.append(g)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True)
    assert out.returncode == -signal.SIGKILL
    left = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(left) == 1 and left[0].is_dir()  # the killed build's spill folder
    old_style = tmp_path / f".{path.name}.abc12_yz.tmp"  # an earlier version's temp file
    old_style.write_bytes(b"x")
    os.utime(old_style, (0, 0))
    dead = tmp_path / f".{path.name}.{_dead_pid()}.xyz12345.tmp"
    dead.write_bytes(b"y")
    alive = tmp_path / f".{path.name}.1.live1234.tmp"  # pid 1 is alive: not touched
    alive.write_bytes(b"z")
    other = tmp_path / f".{path.name}.bak.{_dead_pid()}.abcdefgh.tmp"  # another target's
    other.write_bytes(b"o")
    os.utime(other, (0, 0))
    write_store(path, [graphs], name="again")
    keep = sorted([path.name, alive.name, other.name])
    assert sorted(p.name for p in tmp_path.iterdir()) == keep
    # a failed build cleans up too
    with pytest.raises(RuntimeError), GraphStoreWriter(path, name="x") as w:
        w.append(graphs)
        raise RuntimeError("boom")
    assert sorted(p.name for p in tmp_path.iterdir()) == keep


def test_worker_copies_map_the_file(stored):
    """A pickled store (a spawned DataLoader worker) re-opens memory-mapped, never with a
    private copy of the arrays, even when the original read them into RAM."""
    path, graphs = stored
    mem = GraphStore(path, in_memory=True)
    assert not isinstance(mem._arrays()["node/x"], np.memmap)
    clone = pickle.loads(pickle.dumps(mem))
    assert not clone.in_memory and isinstance(clone._arrays()["node/x"], np.memmap)
    np.testing.assert_array_equal(clone[3]["x"], graphs.graph_dict(3)["x"])


def test_sigterm_during_data_build_leaves_no_temporaries(tmp_path):
    pytest.importorskip("graphbatch.datasets._qm9")
    import time

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    out = tmp_path / "q.h5"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "graphbatch.cli",
            "data",
            "build",
            "qm9",
            "--limit",
            "20000",
            "--no-progress",
            "--out",
            str(out),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.time() + 60
    while time.time() < deadline and not any(p.name.endswith(".tmp") for p in tmp_path.iterdir()):
        if proc.poll() is not None:
            pytest.skip("the build ended before a temporary appeared")
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 0:  # pragma: no cover - finished before the signal arrived
        pytest.skip("the build finished before SIGTERM")
    assert list(tmp_path.iterdir()) == []  # no store, no temporary
    err = err.decode()
    assert proc.returncode == 143 and err.count("\n") == 1 and "terminated (SIGTERM)" in err
