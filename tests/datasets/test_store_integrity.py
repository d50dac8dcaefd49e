"""Issue 26, part 5: damaged, forged or hostile store files -- never a hang, never silent wrong
data, never a traceback: a one-line error naming the file, or the right result."""

from __future__ import annotations

import base64
import itertools
import json
import os
import subprocess
import sys
import time
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")

import graphbatch  # noqa: E402
from graphbatch import InputError  # noqa: E402
from graphbatch.cli import main  # noqa: E402
from graphbatch.datasets import (  # noqa: E402
    GraphArrays,
    GraphStore,
    StoreFormatError,
    convert_store,
    open_store,
    synthetic_graphs,
    synthetic_sizes,
    write_store,
)

from .._stores import graph_arrays_dict, read_header, write_v1, write_v2  # noqa: E402

TESTS = Path(__file__).resolve().parents[1]
_SRC = str(Path(graphbatch.__file__).resolve().parents[1])
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(  # the graphbatch this process uses
        p for p in (_SRC, os.environ.get("PYTHONPATH")) if p
    ),
}


def _graphs(n=40, seed=0) -> GraphArrays:
    sizes = synthetic_sizes(n, "heavy", rng=seed, mean_nodes=10)
    g = synthetic_graphs(sizes, rng=seed + 1, node_dim=3, n_targets=2)
    rng = np.random.default_rng(seed + 2)
    return GraphArrays(
        n_node=g.n_node,
        n_edge=g.n_edge,
        edge_index=g.edge_index,
        node={**g.node, "z": rng.integers(1, 10, int(g.n_node.sum())).astype(np.uint8)},
        edge={"d": rng.random(int(g.n_edge.sum())).astype(np.float32)},
        graph={**g.graph, "index": np.arange(n, dtype=np.int64)},
    )


def _script(name: str, *args, timeout: float) -> dict:
    out = subprocess.run(
        [sys.executable, str(TESTS / name), *map(str, args)],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- convert: format 1 and 2
def test_convert_refuses_or_reproduces_every_chunk_index_flip(tmp_path):
    """Single flipped bytes in a format-1 store's HDF5 chunk index (v1 B-tree nodes: keys
    with chunk coordinates, filter masks, child addresses) converted with exit 0 and wrote
    fresh checksums over wrong values (a graph's edge_index all zeros: a chunk the index no
    longer finds reads as fill values). Every flip must be refused or converted exactly."""
    graphs = _graphs(60, seed=4)
    old = write_v1(tmp_path / "old.h5", graphs)
    np.savez(tmp_path / "ref.npz", **graph_arrays_dict(graphs))
    res = _script("_flip_convert.py", old, tmp_path / "ref.npz", 89, timeout=600)
    assert res["positions"] > 60 and res["nodes"] >= 10
    assert res["wrong"] == 0 and res["other"] == 0 and res["hang"] == 0, res
    assert res["refused"] > 0 and res["exact"] > 0


def test_convert_format_1_and_2_and_check_the_result(tmp_path, capsys):
    graphs = _graphs(30, seed=5)
    for writer, tag in ((write_v1, "v1"), (write_v2, "v2")):
        src = writer(tmp_path / f"{tag}.h5", graphs, name="old", meta={"a": 1}, failed_index=[5])
        out = tmp_path / f"{tag}-new.h5"
        assert main(["data", "convert", str(src), "--out", str(out)]) == 0
        with GraphStore(out, verify=True) as s:
            assert s.format_version == 3 and s.name == "old" and s.meta == {"a": 1}
            assert s.failed_index.tolist() == [5]
            got = s.arrays()
        for k, v in graph_arrays_dict(graphs).items():
            level, _, name = k.partition("/")
            have = getattr(got, level)[name] if name else getattr(got, k)
            assert have.dtype == v.dtype and np.array_equal(have, v), (tag, k)
    # a format-2 source is checked against its own CRC-32s: damaged data is never converted
    src = tmp_path / "v2.h5"
    with h5py.File(src, "r") as f:
        offset = f["node/x"].id.get_offset()
    raw = bytearray(src.read_bytes())
    raw[offset + 5] ^= 0x04
    src.write_bytes(bytes(raw))
    capsys.readouterr()
    assert main(["data", "convert", str(src), "--out", str(tmp_path / "bad.h5")]) == 2
    err = capsys.readouterr().err
    assert "checksum of node/x" in err and err.count("\n") == 1
    assert not (tmp_path / "bad.h5").exists()
    # an up-to-date store is not converted again
    assert (
        main(["data", "convert", str(tmp_path / "v1-new.h5"), "--out", str(tmp_path / "again.h5")])
        == 2
    )
    assert "already a format-3 store" in capsys.readouterr().err


def test_convert_compares_what_it_wrote_with_what_it_read(tmp_path, monkeypatch):
    """A write that does not read back as the source (here: a writer that drops a bit) is
    refused before the new store is renamed into place; an older file at --out survives."""
    from graphbatch.datasets import _store_write

    graphs = _graphs(20, seed=6)
    src = write_v2(tmp_path / "v2.h5", graphs)
    out = tmp_path / "new.h5"
    out.write_bytes(b"an older file the user keeps")
    real = _store_write.GraphStoreWriter.append

    def lossy(self, chunk):
        node = dict(chunk.node)
        node["x"] = node["x"].copy()
        node["x"][0, 0] += 1.0
        real(
            self,
            GraphArrays(
                n_node=chunk.n_node,
                n_edge=chunk.n_edge,
                edge_index=chunk.edge_index,
                node=node,
                edge=chunk.edge,
                graph=chunk.graph,
            ),
        )

    monkeypatch.setattr(_store_write.GraphStoreWriter, "append", lossy)
    with pytest.raises(StoreFormatError, match="differ from the source"):
        convert_store(src, out)
    assert out.read_bytes() == b"an older file the user keeps"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


# ---------------------------------------------------------------- hangs
def _object_before_free_space(raw: bytearray) -> int:
    """File offset of the size field of the global heap object that the free space follows
    (HDF5 global heap collection: "GCOL", version, 3 reserved, 8-byte size; objects of
    index (2), refs (2), reserved (4), size (8), data padded to 8 bytes; index 0 is free)."""
    start = raw.find(b"GCOL")
    while start >= 0:
        end = start + int.from_bytes(raw[start + 8 : start + 16], "little")
        at, last = start + 16, None
        while at + 16 <= end:
            idx = int.from_bytes(raw[at : at + 2], "little")
            size = int.from_bytes(raw[at + 8 : at + 16], "little")
            if idx == 0:
                if last is not None and size >= 64:
                    return last + 8
                break
            last, at = at, at + 16 + (size + 7) // 8 * 8
        start = raw.find(b"GCOL", start + 4)
    raise AssertionError("no global heap object followed by free space")


def test_damaged_global_heap_of_a_format_2_store_never_hangs(tmp_path, monkeypatch, capsys):
    """A flipped object size in HDF5's global heap (where format 2 keeps its header strings)
    made h5py loop forever in an attribute read: the next object header lands on zero bytes,
    an object 0 of size 0, and the parser's cursor never advances. Format 2 headers are read
    in a child process with a time limit: a one-line error naming the file."""
    import graphbatch.datasets._h5probe as probe

    path = write_v2(tmp_path / "v2.h5", _graphs(10, seed=7), meta={"files": ["a.py"] * 50})
    raw = bytearray(path.read_bytes())
    size_at = _object_before_free_space(raw)
    size = int.from_bytes(raw[size_at : size_at + 8], "little")
    raw[size_at] = ((size + 7) // 8 * 8 + 1) & 0xFF  # one byte: 8 more once padded
    bad = tmp_path / "hang.h5"
    bad.write_bytes(bytes(raw))
    monkeypatch.setattr(probe, "PROBE_TIMEOUT_S", 4.0)
    t0 = time.monotonic()
    capsys.readouterr()
    assert main(["data", "verify", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "hang.h5" in err and "did not finish within 4 s" in err
    assert time.monotonic() - t0 < 60


def test_byte_flips_over_a_store_never_hang_or_change_what_is_read(tmp_path):
    """Every flip of the header region (the prefix, the JSON header), a sample of the HDF5
    metadata and of the data: the copy opens and every batch reads exactly as before, or a
    one-line error naming the file -- never a hang, never other data."""
    path = write_store(
        tmp_path / "s.h5",
        [_graphs(12, seed=8)],
        name="flip",
        meta={"k": [1, 2], "files": ["x.py"] * 20},
        failed_index=[3],
    )
    raw = path.read_bytes()
    head = read_header(path)
    hoff = int.from_bytes(raw[16:24], "little")
    hlen = int.from_bytes(raw[24:32], "little")
    data = np.zeros(len(raw), dtype=bool)
    for entry in head["arrays"].values():
        if entry["offset"] is not None:
            n = int(np.prod(entry["shape"])) * np.dtype(entry["dtype"]).itemsize
            data[entry["offset"] : entry["offset"] + n] = True
    data[hoff : hoff + hlen] = True
    other = np.flatnonzero(~data)
    other = other[other >= 40]
    positions = np.unique(
        np.concatenate(
            [
                np.arange(0, 40),
                np.arange(hoff, hoff + hlen, 13),
                other[::41],
                np.flatnonzero(data)[::97],
            ]
        )
    )
    assert positions.size > 200
    np.save(tmp_path / "pos.npy", positions)
    res = _script("_flip_open.py", path, tmp_path / "pos.npy", 20, timeout=600)
    assert res["hang"] == 0 and res["wrong"] == 0 and res["bad_error"] == 0, res
    assert res["refused"] > 50 and res["same"] > 0


def _run_cli(*args, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "graphbatch.cli", *map(str, args)],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_fifos_and_devices_are_refused_not_read(tmp_path):
    """A FIFO given as a store hung `data verify` (opened to sniff its first bytes)."""
    fifo = tmp_path / "store.h5"
    os.mkfifo(fifo)
    csv = tmp_path / "mols.csv"
    os.mkfifo(csv)
    for args in (
        ["data", "verify", fifo],
        ["data", "sizes", fifo, "--out", tmp_path / "s.npz"],
        ["plan", fifo, "--strategy", "dynamic", "--batch-size", "4", "--out", tmp_path / "p.npz"],
        ["data", "verify", "/dev/zero"],
        ["data", "convert", fifo, "--out", tmp_path / "c.h5"],
        ["data", "build", "moses", "--source", csv, "--out", tmp_path / "m.h5"],
    ):
        out = _run_cli(*args)
        assert out.returncode == 2, out.stderr
        assert out.stderr.count("\n") == 1 and "not a regular file" in out.stderr, out.stderr
    with pytest.raises(InputError, match="is a FIFO"):
        GraphStore(fifo)
    fifo_npz = tmp_path / "sizes.npz"
    os.mkfifo(fifo_npz)
    from graphbatch import BatchPlan, GraphSizes

    for load in (GraphSizes.load, BatchPlan.load):
        with pytest.raises(InputError, match="is a FIFO"):
            load(fifo_npz)


# ---------------------------------------------------------------- forged manifests
def _sharded(tmp_path, graphs, parts=3) -> Path:
    from graphbatch.datasets._manifest import write_manifest_of_shards

    d = tmp_path / "set"
    d.mkdir(parents=True)
    cut = np.linspace(0, len(graphs), parts + 1).astype(int)
    paths = [
        write_store(d / f"s{k}.h5", [graphs.take(np.arange(a, b))], name="t")
        for k, (a, b) in enumerate(itertools.pairwise(cut))
    ]
    write_manifest_of_shards(d / "set.json", paths, name="t", meta={}, build={})
    return d / "set.json"


def _forge(manifest: Path, change) -> None:
    from graphbatch.datasets._manifest import _body_crc

    body = json.loads(manifest.read_text())
    body.pop("manifest_crc")
    change(body)
    body["manifest_crc"] = _body_crc(body)
    manifest.write_text(json.dumps(body))


def test_forged_manifest_dtypes_and_shapes_are_refused(tmp_path, capsys):
    """A manifest whose edge_index_dtype said <f8 (CRC recomputed) passed `data verify` and
    `plan`, then the loader raised TypeError on the first batch."""
    graphs = _graphs(30, seed=9)
    cases = [
        (lambda b: b.update(edge_index_dtype="<f8"), "not an integer dtype"),
        (lambda b: b["fields"]["x"].update(dtype="<c16"), "unsupported dtype"),
        (lambda b: b["fields"]["x"].update(shape=[-3]), "bad field description"),
        (lambda b: b["fields"]["x"].update(level="edge"), "disagrees with the manifest"),
        (lambda b: b.update(edge_index_dtype="<i8"), "edge_index dtype"),  # shards hold <i4
    ]
    for k, (change, match) in enumerate(cases):
        manifest = _sharded(tmp_path / f"c{k}", graphs)
        _forge(manifest, change)
        with pytest.raises(StoreFormatError, match=match):
            open_store(manifest).verify()
        capsys.readouterr()
        assert main(["data", "verify", str(manifest)]) == 2
        assert main(
            [
                "plan",
                str(manifest),
                "--strategy",
                "dynamic",
                "--batch-size",
                "4",
                "--out",
                str(tmp_path / f"p{k}.npz"),
            ]
        ) in ((0, 2) if k >= 3 else (2,))
        err = capsys.readouterr().err
        assert "Traceback" not in err and all(
            line.startswith("graphbatch") for line in err.splitlines()
        )


def test_manifest_size_table_is_bounded_before_decompressing(tmp_path):
    """A 256 MB zlib bomb in a manifest's size table was decompressed whole before its length
    was checked; a claimed graph count is now bounded by the shard files on disk too."""
    graphs = _graphs(30, seed=10)
    manifest = _sharded(tmp_path, graphs)
    bomb = base64.b64encode(zlib.compress(bytes(256 << 20), 9)).decode()
    _forge(manifest, lambda b: b["sizes"].update(n_node=bomb))
    tracemalloc.start()
    try:
        with pytest.raises(StoreFormatError, match="more than the 30 values"):
            open_store(manifest)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, peak
    manifest = _sharded(tmp_path / "b", graphs)
    _forge(manifest, lambda b: (b["shards"][0].update(n_graph=10**9), b.update(n_graph=10**9 + 20)))
    with pytest.raises(StoreFormatError, match="cannot hold the 1,000,000,000 graphs"):
        open_store(manifest)


# ---------------------------------------------------------------- per-chunk checks
@pytest.fixture()
def small_chunks(monkeypatch):
    """Check chunks of ~4 KiB, so that a small test store has dozens of them."""
    from graphbatch.datasets import _store_write

    monkeypatch.setattr(_store_write, "CHUNK_BYTES", 4096)


def test_damaged_arrays_are_caught_on_first_read_not_served(tmp_path, small_chunks):
    """Of 645 single-byte flips in a store, 74 were caught only by verify(): the loader served
    damaged values. Each check chunk's CRC-32 is now checked the first time a read touches
    it: the error names the file, the array and the chunk."""
    pytest.importorskip("torch")
    import graphbatch.torch as gt

    graphs = _graphs(400, seed=11)
    path = write_store(tmp_path / "s.h5", [graphs], name="c")
    head = read_header(path)
    with GraphStore(path) as s:
        bounds = np.array(s._arrays()["checks/chunk_graphs"])
        assert bounds.shape[0] > 3  # several chunks
        k = 2
        g = int(bounds[k])  # the first graph of chunk 2
        row = int(s.node_offsets[g])
    entry = head["arrays"]["node/x"]
    raw = bytearray(path.read_bytes())
    raw[entry["offset"] + row * 12 + 1] ^= 0x20  # graph g's first x row (3 float32)
    bad = tmp_path / "bad.h5"
    bad.write_bytes(bytes(raw))
    store = GraphStore(bad)
    elsewhere = np.arange(0, int(bounds[1]))  # chunk 0 only: fine
    store.read_batch(elsewhere, (2000, 20000, len(elsewhere) + 1))
    with pytest.raises(
        StoreFormatError, match=rf"bad\.h5.*node/x, check chunk {k} of \d+ \(graphs {g}:"
    ):
        store.read_batch([0, g], (200, 2000, 3))
    with pytest.raises(StoreFormatError, match="node/x, check chunk"):
        store.read_graph(g)
    with pytest.raises(StoreFormatError, match="node/x, check chunk"):
        store.arrays(g - 1, g + 1)
    unchecked = GraphStore(bad, check_chunks=False)  # the opt-out serves what is on disk
    assert not np.array_equal(unchecked.read_graph(g)["x"], graphs.graph_dict(g)["x"])
    with pytest.raises(StoreFormatError, match="check chunk"):
        for _ in gt.loader(GraphStore(bad), strategy="dynamic", batch_size=16, seed=0):
            pass
    # every byte flip over the data arrays is refused by the first read, never served
    rng = np.random.default_rng(0)
    for where in ("edge_index", "node/x", "node/z", "edge/d", "graph/y"):
        e = head["arrays"][where]
        n = int(np.prod(e["shape"])) * np.dtype(e["dtype"]).itemsize
        for pos in rng.choice(n, 3, replace=False):
            raw = bytearray(path.read_bytes())
            raw[e["offset"] + int(pos)] ^= 0x01
            bad.write_bytes(bytes(raw))
            s = GraphStore(bad)
            with pytest.raises(StoreFormatError, match=f"{where}, check chunk"):
                for a in range(0, len(s), 50):
                    idx = np.arange(a, min(a + 50, len(s)))
                    s.read_batch(
                        idx, (int(s.n_node[idx].sum()) + 1, int(s.n_edge[idx].sum()), idx.size + 1)
                    )


def test_chunk_checks_are_per_process_and_skipped_after_verify(tmp_path, small_chunks):
    import pickle

    path = write_store(tmp_path / "s.h5", [_graphs(300, seed=12)], name="c")
    store = GraphStore(path)
    checker = store._checker
    assert checker.remaining == checker.n_chunks > 1
    store.read_batch([0, 1], (100, 1000, 3))
    assert checker.remaining == checker.n_chunks - 1
    clone = pickle.loads(pickle.dumps(store))  # a spawned process checks for itself
    clone.read_graph(0)
    assert clone._checker.remaining == clone._checker.n_chunks - 1
    last = len(store) - 1  # a forked one (a DataLoader worker)
    pid = os.fork()  # shares what it checks
    if pid == 0:
        store.read_graph(last)
        os._exit(0)
    os.waitpid(pid, 0)
    assert checker.done[-1] and checker.remaining == checker.n_chunks - 1
    store.read_graph(0)  # nothing to check: the view refreshes
    assert checker.remaining == checker.n_chunks - 2
    store.verify()  # read whole: nothing left to check
    assert checker.remaining == 0
    assert GraphStore(path, verify=True)._checker.remaining == 0
    assert GraphStore(path, check_chunks=False)._checker is None


def test_code_sources_skip_fifos(tmp_path):
    """A FIFO named like a source file would block `data build code` forever."""
    from graphbatch.datasets import python_files

    (tmp_path / "a.py").write_text("def f(x):\n    return x\n")
    os.mkfifo(tmp_path / "b.py")
    assert [p.name for p in python_files(tmp_path)[1]] == ["a.py"]
