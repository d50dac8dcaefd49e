"""Sharded stores (issue 17 part 3): a build on a Dask cluster equals the single-file build of the
same records (sizes, graphs, and every loader batch bit for bit); damage, replacement, missing
shards and edited manifests are refused with one line naming the file; a failed or killed build
leaves no manifest that opens; a killed worker's partition is retried."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("h5py")
distributed = pytest.importorskip("distributed")

import graphbatch as gb  # noqa: E402
from graphbatch.cli import main  # noqa: E402
from graphbatch.datasets import (  # noqa: E402
    GraphStore,
    ShardBuildError,
    ShardedGraphStore,
    StoreFormatError,
    _cluster,
    build_sharded_store,
    build_store,
    open_store,
)
from graphbatch.datasets._build import (  # noqa: E402
    BuildOptions,
    load_records,
    slice_records,
    write_partition,
)

from .._padded import assert_same_padded  # noqa: E402

QM9_N = 420


@pytest.fixture(scope="module")
def cluster():
    """A local Dask cluster of 2 thread workers in this process (fast to start)."""
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0"
    ) as c:
        yield c.scheduler_address


@pytest.fixture(scope="module")
def qm9(tmp_path_factory, cluster):
    """(single-file store path, manifest path): QM9 radius graphs of the same records."""
    d = tmp_path_factory.mktemp("qm9")
    single = build_store("qm9", d / "single.h5", limit=QM9_N).path
    report = build_sharded_store("qm9", d / "set.json", shards=3, limit=QM9_N, address=cluster)
    assert report.n_graph == QM9_N and len(report.shards) == 3
    return single, report.path


def _copy_set(manifest: Path, to: Path) -> Path:
    """Copy a manifest and its shards into another folder (tests damage the copy)."""
    to.mkdir(parents=True, exist_ok=True)
    for p in [*ShardedGraphStore(manifest).shard_paths, manifest]:
        shutil.copy(p, to / p.name)
    return to / manifest.name


def test_sharded_store_equals_single_file_build(qm9):
    single, manifest = qm9
    a, b = GraphStore(single), open_store(manifest)
    assert isinstance(b, ShardedGraphStore) and not isinstance(b, GraphStore)
    assert b.n_shards == 3 and b.shard_starts.tolist() == [0, 140, 280, 420]
    assert len(b) == len(a) == QM9_N and b.fields == a.fields and b.name == "qm9"
    sa, sb = a.graph_sizes(), b.graph_sizes()
    for key in ("n_node", "n_edge", "n_bytes"):
        assert np.array_equal(getattr(sa, key), getattr(sb, key)), key
    assert not any(s is not None for s in b._shards)  # sizes came from the manifest only
    for i in range(len(a)):
        ga, gb_ = a.read_graph(i), b[i]
        assert ga.keys() == gb_.keys()
        for k in ga:
            assert ga[k].dtype == gb_[k].dtype and np.array_equal(ga[k], gb_[k]), (i, k)
    for start, stop in ((0, QM9_N), (100, 300), (139, 141), (5, 5)):
        x, y = a.arrays(start, stop), b.arrays(start, stop)
        assert np.array_equal(x.edge_index, y.edge_index) and np.array_equal(x.n_node, y.n_node)
        for level in ("node", "edge", "graph"):
            for k, v in getattr(x, level).items():
                assert np.array_equal(v, getattr(y, level)[k]), (start, stop, k)
    assert np.array_equal(a.graph_field("y"), b.graph_field("y"))
    assert np.array_equal(a.failed_index, b.failed_index)
    assert np.array_equal(a.node_offsets, b.node_offsets)
    assert repr(b).startswith("ShardedGraphStore(") and "shards=3" in repr(b)
    assert not hasattr(b, "packed")  # no single set of arrays: batches come from read_batch
    b.verify()


def _assert_same_store(a, b):
    assert len(a) == len(b) and a.fields == b.fields
    assert np.array_equal(a.n_node, b.n_node) and np.array_equal(a.n_edge, b.n_edge)
    x, y = a.arrays(), b.arrays()
    assert np.array_equal(x.edge_index, y.edge_index)
    for level in ("node", "edge", "graph"):
        for k, v in getattr(x, level).items():
            assert v.dtype == getattr(y, level)[k].dtype
            assert np.array_equal(v, getattr(y, level)[k]), k
    assert np.array_equal(a.failed_index, b.failed_index)


def test_moses_ids_and_failures_are_global_record_indices(tmp_path, cluster):
    """Invalid SMILES in several partitions: failed_index and the graph ids equal the
    single-file build's (partition offsets added)."""
    pytest.importorskip("rdkit")
    smiles = [
        "CCO",
        "c1ccccc1",
        "not-a-smiles",
        "CC(=O)O",
        "N#N",
        "C1CC",
        "CCN(CC)CC",
        "O=C=O",
        "xyz",
        "CC",
        "CCCC",
        "c1ccncc1",
        "C(",
        "OCCO",
        "CS(=O)C",
        "F",
    ]
    csv = tmp_path / "m.csv"
    csv.write_text("SMILES,SPLIT\n" + "".join(f"{s},train\n" for s in smiles))
    single = GraphStore(build_store("moses", tmp_path / "one.h5", source=csv, workers=1).path)
    rep = build_sharded_store(
        "moses", tmp_path / "set" / "m.json", shards=5, source=csv, address=cluster
    )
    sharded = open_store(rep.path)
    assert single.failed_index.tolist() == [2, 5, 8, 12]
    assert [i for i, _ in rep.failures] == [2, 5, 8, 12]
    assert sharded.graph_field("index").tolist() == [i for i in range(16) if i not in (2, 5, 8, 12)]
    _assert_same_store(single, sharded)


def test_smiles_table_shards_keep_targets(tmp_path, cluster):
    """A user's SMILES table with targets: the sharded build equals the single-file one, the
    targets follow their molecules across partitions."""
    pytest.importorskip("rdkit")
    rows = ["CCO,1.5", "c1ccccc1,2.5", "xx,3.5", "CC(=O)O,4.5", "N,5.5", "C1CC1,6.5"]
    csv = tmp_path / "t.csv"
    csv.write_text("smiles,t\n" + "\n".join(rows) + "\n")
    single = GraphStore(
        build_store("smiles", tmp_path / "one.h5", source=csv, targets=["t"], workers=1).path
    )
    rep = build_sharded_store(
        "smiles", tmp_path / "set" / "s.json", shards=3, source=csv, targets=["t"], address=cluster
    )
    sharded = open_store(rep.path)
    assert [i for i, _ in rep.failures] == [2]
    assert sharded.graph_field("y")[:, 0].tolist() == [1.5, 2.5, 4.5, 5.5, 6.5]
    _assert_same_store(single, sharded)


def test_code_file_indices_are_global(tmp_path, cluster):
    import graphbatch.datasets as pkg

    folder = Path(pkg.__file__).parent
    single = GraphStore(build_store("code", tmp_path / "one.h5", source=folder).path)
    rep = build_sharded_store(
        "code", tmp_path / "set" / "c.json", shards=4, source=folder, address=cluster
    )
    sharded = open_store(rep.path)
    assert sharded.graph_field("file_index").max() > 4
    _assert_same_store(single, sharded)


def test_partitions_without_graphs_have_no_shard(tmp_path, cluster):
    """Code files without functions (and SMILES that all fail) make partitions with no graph:
    no shard file for them, their failures kept in the manifest, the set still equal."""
    src = tmp_path / "src"
    src.mkdir()
    for name, text in (
        ("a.py", "def f(x):\n    return x + 1\n"),
        ("b.py", "X = 1\n"),
        ("c.py", "def (:\n"),
        ("d.py", "Y = 2\n"),
        ("e.py", "def g():\n    pass\n\ndef h(a, b):\n    return a * b\n"),
    ):
        (src / name).write_text(text)
    single = GraphStore(build_store("code", tmp_path / "one.h5", source=src).path)
    rep = build_sharded_store(
        "code", tmp_path / "set" / "c.json", shards=5, source=src, address=cluster
    )
    sharded = open_store(rep.path, verify=True)
    assert sharded.n_shards == 2 and len(rep.shards) == 2
    assert sorted(p.name for p in rep.path.parent.iterdir()) == sorted(
        [rep.path.name] + [p.name for p in rep.shards]
    )
    assert single.failed_index.tolist() == sharded.failed_index.tolist() == [2]
    _assert_same_store(single, sharded)


def test_plan_reads_the_manifest_sizes(qm9, tmp_path, capsys):
    from graphbatch.analysis._sources import load_sizes

    single, manifest = qm9
    a, b = load_sizes(single), load_sizes(manifest)
    assert np.array_equal(a.n_node, b.n_node) and np.array_equal(a.n_bytes, b.n_bytes)
    outs = []
    for src in (single, manifest):
        out = tmp_path / f"{src.stem}.npz"
        assert (
            main(
                [
                    "plan",
                    str(src),
                    "--strategy",
                    "pack-lpf",
                    "--batch-size",
                    "32",
                    "--out",
                    str(out),
                ]
            )
            == 0
        )
        outs.append(gb.BatchPlan.load(out))
    assert np.array_equal(outs[0].order, outs[1].order)


def test_read_batch_across_shards_is_bit_identical(qm9):
    single, manifest = qm9
    a, b = GraphStore(single), open_store(manifest)
    rng = np.random.default_rng(0)
    for idx in (
        rng.permutation(QM9_N)[:30],
        np.array([419, 0, 140, 139, 280]),
        np.array([7]),
        np.zeros(0, np.int64),
    ):
        shape = (int(a.n_node[idx].sum()) + 9, int(a.n_edge[idx].sum()) + 5, len(idx) + 3)
        options = (
            {},
            {"layout": "jraph"},
            {"cutoff": 2.0},
            {"layout": "jraph", "cutoff": 3.0},
            {
                "dtypes": {"z": np.int64, "y": np.float32},
                "index_dtype": np.int32,
                "pad": {"y": -1.0},
            },
        )
        for kw in options:
            assert_same_padded(a.read_batch(idx, shape, **kw), b.read_batch(idx, shape, **kw))
    with pytest.raises(IndexError, match="out of range"):
        b.read_batch([0, QM9_N], (4000, 40000, 4))
    with pytest.raises(ValueError, match=r"dataset indices \[419, 0\]"):
        b.read_batch([419, 0], (10, 10, 4))


_STRATEGIES = [
    ("static-64", {}),
    ("dynamic", {}),
    ("pack-lpf", {}),
    ("dynamic", {"num_replicas": 2, "rank": 1}),
    ("pack-lpf", {"num_replicas": 3, "rank": 2}),
]


@pytest.mark.parametrize("strategy,kw", _STRATEGIES)
def test_torch_loader_batches_equal_single_file(qm9, strategy, kw):
    pytest.importorskip("torch_geometric")
    import torch

    import graphbatch.torch as gt
    from graphbatch.torch._store_collate import StoreCollater

    single, manifest = qm9
    la = gt.loader(GraphStore(single), strategy=strategy, batch_size=16, seed=3, **kw)
    lb = gt.loader(open_store(manifest), strategy=strategy, batch_size=16, seed=3, **kw)
    assert isinstance(lb.collater, StoreCollater)
    xs, ys = list(la), list(lb)
    assert len(xs) == len(ys) > 0
    for x, y in zip(xs, ys, strict=True):
        assert sorted(x.keys()) == sorted(y.keys()) and type(x) is type(y)
        for k in x.keys():  # noqa: SIM118 (a PyG Batch iterates over (key, value) pairs)
            assert x[k].dtype == y[k].dtype and torch.equal(x[k], y[k]), k
        for k in x._slice_dict:
            assert torch.equal(x._slice_dict[k], y._slice_dict[k]), k


def test_pickled_copy_reopens_shards_and_checks_them(qm9, tmp_path):
    """What a spawned DataLoader worker gets: a copy without open shards, re-opened and checked
    against the manifest entries the parent opened."""
    import pickle

    manifest = _copy_set(qm9[1], tmp_path / "s")
    store = open_store(manifest)
    want = store.read_batch([5, 300, 150], (200, 4000, 5))
    clone = pickle.loads(pickle.dumps(store))
    assert all(s is None for s in clone._shards)
    assert_same_padded(clone.read_batch([5, 300, 150], (200, 4000, 5)), want)
    victim = store.shard_paths[2]
    opts = BuildOptions("qm9", limit=QM9_N)
    records, meta = load_records(opts)
    write_partition(victim, opts, slice_records(records, 280, 420), meta, start=280)
    clone = pickle.loads(pickle.dumps(store))
    with pytest.raises(StoreFormatError, match="replaced shard"):
        clone.read_graph(419)


def test_jax_batches_equal_single_file(qm9):
    pytest.importorskip("jraph")
    import jax

    from graphbatch.jax._source import StoreGraphs, make_padded

    single, manifest = qm9
    sa, sb = StoreGraphs(GraphStore(single)), StoreGraphs(open_store(manifest))
    plan = gb.plan(sb.graph_sizes(), "pack-lpf", batch_size=16, seed=2)
    for b, idx in enumerate(plan.batches()):
        x = make_padded(sa, idx, plan.shape(b), template=None, cutoff=2.5)
        y = make_padded(sb, idx, plan.shape(b), template=None, cutoff=2.5)
        for u, v in zip(jax.tree_util.tree_leaves(x), jax.tree_util.tree_leaves(y), strict=True):
            assert np.asarray(u).dtype == np.asarray(v).dtype
            assert np.array_equal(np.asarray(u), np.asarray(v))


# ---------------------------------------------------------------------------- damage
def test_edited_or_truncated_manifest_is_refused(qm9, tmp_path):
    manifest = _copy_set(qm9[1], tmp_path / "s")
    body = json.loads(manifest.read_text())
    body["shards"][1]["n_graph"] += 1
    manifest.write_text(json.dumps(body))
    with pytest.raises(StoreFormatError, match=r"set\.json.*edited or damaged manifest"):
        open_store(manifest)
    manifest.write_text(_copy_set(qm9[1], tmp_path / "t").read_text()[:500])
    with pytest.raises(StoreFormatError, match="not a complete sharded store manifest"):
        open_store(manifest)


def test_replaced_missing_and_damaged_shards_are_named(qm9, tmp_path, capsys):
    manifest = _copy_set(qm9[1], tmp_path / "s")
    store = open_store(manifest)
    victim = store.shard_paths[1]
    # replaced by a re-build of the same records: same size, another store id
    opts = BuildOptions("qm9", limit=QM9_N)
    records, _ = load_records(opts)
    meta = store.shard(1).meta  # the same header but for its id: same size
    store.close()
    write_partition(victim, opts, slice_records(records, 140, 280), meta, start=140)
    again = open_store(manifest)  # opening reads no shard
    again.read_graph(0)  # shard 0 is intact
    with pytest.raises(StoreFormatError, match=rf"{victim.name}.*replaced shard"):
        again.read_batch([0, 150], (200, 4000, 4))
    assert main(["data", "verify", str(manifest)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and victim.name in err and "replaced" in err
    # damaged data: one flipped byte in shard 2's node positions
    manifest = _copy_set(qm9[1], tmp_path / "d")
    shard = open_store(manifest).shard(2)
    offset = shard._arrays()["node/pos"].offset + 40
    path = shard.path
    shard.close()
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0x10
    path.write_bytes(bytes(raw))
    with pytest.raises(StoreFormatError, match=rf"{path.name}.*checksum of node/pos"):
        open_store(manifest).verify()
    assert main(["data", "verify", str(manifest)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and path.name in err
    # missing or truncated shard: refused on open, naming it
    path.unlink()
    with pytest.raises(StoreFormatError, match=rf"{path.name}.* is missing"):
        open_store(manifest)
    path.write_bytes(bytes(raw[:1000]))
    with pytest.raises(StoreFormatError, match=rf"{path.name}.*replaced or damaged"):
        open_store(manifest)
    # intact copy verifies, through the CLI too
    assert main(["data", "verify", str(qm9[1])]) == 0
    assert "intact" in capsys.readouterr().out


def test_forged_manifest_with_a_consistent_checksum_still_checks_shards(qm9, tmp_path):
    from graphbatch.datasets._manifest import _body_crc

    manifest = _copy_set(qm9[1], tmp_path / "s")
    body = json.loads(manifest.read_text())
    body.pop("manifest_crc")
    body["shards"][0]["uuid"] = "0" * 32
    body["manifest_crc"] = _body_crc(body)
    manifest.write_text(json.dumps(body))
    store = open_store(manifest)
    with pytest.raises(StoreFormatError, match="replaced shard"):
        store.read_graph(3)


# ---------------------------------------------------------------------------- failed builds
def test_failed_shard_leaves_no_new_manifest_and_no_shards(qm9, tmp_path, cluster, monkeypatch):
    manifest = _copy_set(qm9[1], tmp_path / "s")
    before = sorted(p.name for p in manifest.parent.iterdir())
    real = _cluster.write_partition
    calls = []

    def flaky(out, opts, records, meta, *, start=0, **kw):
        calls.append(start)
        if start > 0:
            raise OSError(f"disk full while writing {Path(out).name}")
        return real(out, opts, records, meta, start=start, **kw)

    monkeypatch.setattr(_cluster, "write_partition", flaky)
    with pytest.raises(
        ShardBuildError,
        match=r"shard [12] .*failed after the engine's retries: "
        r"OSError: disk full.*no manifest was written",
    ):
        build_sharded_store("qm9", manifest, shards=3, limit=QM9_N, address=cluster, retries=1)
    assert calls.count(140) == 2 or calls.count(280) == 2  # tried, then retried once
    # the earlier complete set is untouched and still opens; the failed build left nothing
    assert sorted(p.name for p in manifest.parent.iterdir()) == before
    open_store(manifest).verify()
    fresh = tmp_path / "new" / "x.json"
    with pytest.raises(ShardBuildError):
        build_sharded_store("qm9", fresh, shards=3, limit=QM9_N, address=cluster, retries=0)
    assert not fresh.exists() and list(fresh.parent.iterdir()) == []
    with pytest.raises(FileNotFoundError, match=r"x.json"):
        GraphStore(fresh)


def test_rebuild_replaces_the_set_and_removes_old_shards(qm9, tmp_path, cluster):
    manifest = _copy_set(qm9[1], tmp_path / "s")
    old = open_store(manifest).shard_paths
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead = int(gone.stdout)  # a writer killed earlier
    stale = manifest.parent / f".set-0123abcd-00001-of-00003.h5.{dead}.x1y2z3w4.tmp"
    stale.mkdir()
    (stale / "0.bin").write_bytes(b"partial")
    build_sharded_store("qm9", manifest, shards=2, limit=100, address=cluster)
    assert not stale.exists()
    new = open_store(manifest, verify=True)
    assert len(new) == 100 and new.n_shards == 2
    assert not any(p.exists() for p in old)
    assert sorted(p.name for p in manifest.parent.iterdir()) == sorted(
        [manifest.name] + [p.name for p in new.shard_paths]
    )


def test_cli_errors_are_one_line(tmp_path, capsys):
    cases = [
        (["--shards", "2", "--out", str(tmp_path / "x.h5")], "must end in .json"),
        (["--shards", "0", "--out", str(tmp_path / "x.json")], "--shards must be >= 1"),
        (["--engine", "dask", "--out", str(tmp_path / "x.h5")], "--engine needs --shards"),
        (
            ["--address", "tcp://127.0.0.1:1", "--out", str(tmp_path / "x.h5")],
            "--address needs --shards",
        ),
        (
            [
                "--shards",
                "2",
                "--address",
                "tcp://127.0.0.1:1",
                "--workers",
                "2",
                "--out",
                str(tmp_path / "x.json"),
            ],
            "has its own workers",
        ),
        (
            ["--shards", "9", "--limit", "4", "--out", str(tmp_path / "x.json")],
            "more than the 4 source records",
        ),
    ]
    for extra, message in cases:
        assert main(["data", "build", "qm9", "--no-progress", *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
    assert (
        main(
            [
                "data",
                "build",
                "code",
                "--limit",
                "3",
                "--shards",
                "2",
                "--out",
                str(tmp_path / "c.json"),
            ]
        )
        == 2
    )
    assert "partitions files" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SystemExit):
        main(["data", "build", "qm9", "--shards", "2", "--engine", "spark", "--out", "x.json"])
    assert "invalid choice: 'spark'" in capsys.readouterr().err
    (tmp_path / "m.json").write_text('{"format": "graphbatch-sharded-store", "format_version": 9}')
    assert main(["data", "verify", str(tmp_path / "m.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "m.json" in err and "version 9" in err


def test_source_error_closes_the_cluster_started_meanwhile(tmp_path):
    """The local cluster starts in a background thread while the driver reads the source: a
    source that fails to read still ends with the cluster's processes and thread gone."""
    import multiprocessing

    before = set(multiprocessing.active_children())
    with pytest.raises(FileNotFoundError, match=r"missing.csv"):
        build_sharded_store(
            "moses", tmp_path / "m.json", shards=2, workers=1, source=tmp_path / "missing.csv"
        )
    assert set(multiprocessing.active_children()) <= before
    assert not any(t.name.startswith("graphbatch-cluster-start") for t in threading.enumerate())
    assert list(tmp_path.iterdir()) == []


def test_report_phases_cover_the_driver_wall(tmp_path, cluster):
    report = build_sharded_store("moses", tmp_path / "m.json", shards=2, limit=40, address=cluster)
    assert list(report.phases) == [
        "checks",
        "read source",
        "partition",
        "cluster start (wait)",
        "submit",
        "tasks",
        "previous",
        "manifest",
        "cluster close",
    ]
    assert all(v >= 0 for v in report.phases.values())
    assert sum(report.phases.values()) == pytest.approx(report.seconds, abs=1e-3)
    engine = report.phases["submit"] + report.phases["tasks"]
    assert engine == pytest.approx(report.engine_seconds, abs=0.01)


def _sharded_cli(out: Path, limit: int, shards: int, workers: int = 2):
    return [
        sys.executable,
        "-m",
        "graphbatch.cli",
        "data",
        "build",
        "moses",
        "--limit",
        str(limit),
        "--shards",
        str(shards),
        "--workers",
        str(workers),
        "--no-progress",
        "--out",
        str(out),
    ]


@pytest.mark.slow
def test_killed_driver_leaves_no_openable_manifest(tmp_path):
    """SIGKILL the whole build (driver and its local cluster) once shards are being written."""
    out = tmp_path / "m.json"
    proc = subprocess.Popen(
        _sharded_cli(out, 3000, 3),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None:
            if any(p.name.startswith(".m-") for p in tmp_path.iterdir()):
                break
            time.sleep(0.01)
        assert proc.poll() is None, "the build ended before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert not out.exists()
    with pytest.raises(FileNotFoundError, match=r"m.json"):
        open_store(out)


@pytest.mark.parametrize("group", [False, True], ids=["driver", "process-group"])
def test_sigterm_calls_the_sharded_build_off_in_one_line(tmp_path, group):
    """SIGTERM during `data build --shards` printed an intermittent "RuntimeError: IOLoop is
    closed" traceback (a worker's Dask client, opened to read the abort Event, was left unclosed
    when the worker was stopped mid-task) and could leave a finished shard behind. Now: one
    line, exit status 143, no manifest, no shard, no temporary of a live process."""
    out = tmp_path / "m.json"
    proc = subprocess.Popen(
        _sharded_cli(out, 3000, 3),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None:
            if any(p.name.startswith(".m-") for p in tmp_path.iterdir()):
                break  # a worker is writing a shard
            time.sleep(0.01)
        assert proc.poll() is None, "the build ended before it could be terminated"
        if group:
            os.killpg(proc.pid, signal.SIGTERM)
        else:
            proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert err.count("\n") == 1 and err.startswith("graphbatch data: terminated (SIGTERM)"), err
    assert not out.exists() and not list(tmp_path.glob("*.h5"))
    from graphbatch.datasets._store_write import _pid_alive

    for p in tmp_path.iterdir():  # recognisably stale, if anything
        pid = re.fullmatch(r"\.m-[0-9a-f]{8}-\d{5}-of-\d{5}\.h5\.(\d+)\.\w{8}\.tmp", p.name)
        assert pid is not None and not _pid_alive(int(pid.group(1))), p.name


@pytest.mark.slow
def test_killed_worker_partition_is_retried_and_the_build_equals_single_file(tmp_path):
    """A local cluster of 2 worker processes; SIGKILL the worker writing a shard mid-task."""
    n = 2400
    single = GraphStore(build_store("moses", tmp_path / "single.h5", limit=n, workers=1).path)
    out = tmp_path / "set" / "m.json"
    out.parent.mkdir()
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        pids = set(client.run(os.getpid).values())
        box: dict = {}

        def run():
            try:
                box["report"] = build_sharded_store(
                    "moses", out, shards=3, limit=n, address=cluster.scheduler_address
                )
            except BaseException as exc:
                box["error"] = exc

        thread = threading.Thread(target=run)
        thread.start()
        killed = None
        pattern = re.compile(r"\.m-\w{8}-\d{5}-of-00003\.h5\.(\d+)\.\w{8}\.tmp")
        deadline = time.time() + 240
        while killed is None and thread.is_alive() and time.time() < deadline:
            for p in out.parent.iterdir():
                m = pattern.fullmatch(p.name)
                if m and int(m.group(1)) in pids:
                    os.kill(int(m.group(1)), signal.SIGKILL)
                    killed = (int(m.group(1)), p, p.exists())
                    break
            time.sleep(0.002)
        thread.join(300)
    assert "error" not in box, box.get("error")
    assert killed is not None and killed[2], "no worker was killed while writing its shard"
    report = box["report"]
    assert not killed[1].exists()  # the retry removed the dead temporary
    assert sorted(p.name for p in out.parent.iterdir()) == sorted(
        [out.name] + [p.name for p in report.shards]
    )
    sharded = open_store(out, verify=True)
    assert np.array_equal(sharded.n_node, single.n_node)
    assert np.array_equal(sharded.n_edge, single.n_edge)
    for i in range(len(single)):
        x, y = single.read_graph(i), sharded.read_graph(i)
        assert all(np.array_equal(x[k], y[k]) for k in x), i
