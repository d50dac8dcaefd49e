"""A store file truncated while open -- by another process, a full disk's cleanup, a copy
over it -- used to kill the reading process with SIGBUS (a read of a memory-mapped page past
the end of the file). Every read now checks the file's size first and raises
`StoreFormatError` naming the file: single-file stores, sharded stores, the torch loader in
the process and in a DataLoader worker. Each case runs in a child process: a regression is a
signal there, reported here as a failure."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("h5py")

_ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}

_SETUP = """
import os, sys
import numpy as np
from graphbatch.datasets import (
    GraphStore, StoreFormatError, open_store, synthetic_graphs, synthetic_sizes, write_store
)

def make(path, n=3000, seed=0):
    sizes = synthetic_sizes(n, "heavy", rng=seed, mean_nodes=9)
    g = synthetic_graphs(sizes, rng=seed + 1, node_dim=8, n_targets=2)
    return write_store(path, [g.take(np.arange(a, min(a + 500, n))) for a in range(0, n, 500)],
                       name="t")

def cut(path):
    os.truncate(path, os.path.getsize(path) // 2)

def expect(what, call):
    try:
        call()
    except StoreFormatError as exc:
        assert "truncated" in str(exc) and os.path.basename(PATH) in str(exc), str(exc)
        assert len(str(exc).splitlines()) == 1, str(exc)
        print(what, "StoreFormatError")
    else:
        print(what, "no error")

def cut_mid_epoch(ld, cause=None):
    # iterate the loader ld over PATH, cutting the file after its second batch
    seen = 0
    try:
        for batch in ld:
            seen += 1
            if seen == 2:
                cut(PATH)
    except StoreFormatError as exc:
        assert "truncated" in str(exc) and os.path.basename(PATH) in str(exc), str(exc)
        if cause is not None:  # the error torch raised when the worker died
            assert cause in str(exc.__cause__), repr(exc.__cause__)
        print("loader StoreFormatError")
    else:
        print("loader no error", seen)
"""


def _run(body: str, tmp_path: Path) -> list[str]:
    code = _SETUP + textwrap.dedent(body)
    r = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=_ENV,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode != -signal.SIGBUS, "killed by SIGBUS"
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip().splitlines()


@pytest.mark.parametrize("check_chunks", [True, False])
def test_reads_of_a_store_truncated_while_open_raise_naming_it(tmp_path, check_chunks):
    out = _run(
        f"""
        PATH = make("s.h5")
        s = GraphStore(PATH, check_chunks={check_chunks})
        last = len(s) - 1
        kept = s.get(last)  # read (and cached) before the cut
        s.read_batch([0, 1], (200, 2000, 3))
        cut(PATH)
        assert float(np.asarray(kept["x"]).sum()) == float(np.asarray(kept["x"]).sum())
        expect("read_graph", lambda: s.read_graph(last))
        expect("get", lambda: s.get(last - 1))
        expect("read_batch", lambda: s.read_batch([last - 2, last], (400, 4000, 3)))
        expect("arrays", lambda: s.arrays(last - 5, last))
        expect("graph_field", lambda: s.graph_field("y"))
        expect("packed", lambda: s.packed())
        expect("verify", lambda: s.verify())
        expect("iter", lambda: list(s))
        """,
        tmp_path,
    )
    assert out == [
        f"{what} StoreFormatError"
        for what in (
            "read_graph",
            "get",
            "read_batch",
            "arrays",
            "graph_field",
            "packed",
            "verify",
            "iter",
        )
    ]


def test_a_truncated_shard_of_a_sharded_store_raises_naming_it(tmp_path):
    out = _run(
        """
        from graphbatch.datasets._manifest import write_manifest_of_shards
        shards = [make(f"s{k}.h5", n=1500, seed=k) for k in range(2)]
        write_manifest_of_shards("m.json", shards, name="t", meta={}, build={})
        s = open_store("m.json")
        n0 = len(GraphStore("s0.h5"))
        s.read_batch([0, n0 + 1], (400, 4000, 3))  # both shards open
        PATH = Path("s1.h5").resolve()
        cut("s1.h5")
        expect("read_batch", lambda: s.read_batch([0, len(s) - 1], (400, 4000, 3)))
        expect("read_graph", lambda: s.read_graph(len(s) - 1))
        s.read_batch([0, 1], (400, 4000, 3))  # the whole shard still reads
        """.replace("PATH = Path", "from pathlib import Path\n        PATH = Path"),
        tmp_path,
    )
    assert out == ["read_batch StoreFormatError", "read_graph StoreFormatError"]


@pytest.mark.parametrize("workers", [0, 1])
def test_a_loader_over_a_store_truncated_mid_epoch_raises_naming_it(tmp_path, workers):
    pytest.importorskip("torch_geometric")
    out = _run(
        f"""
        import graphbatch.torch as gt
        PATH = make("s.h5")
        store = GraphStore(PATH)
        ld = gt.loader(store, strategy="static-64", batch_size=32, seed=0, shuffle=False,
                       dataloader_kwargs={{"num_workers": {workers}}})
        cut_mid_epoch(ld)
        """,
        tmp_path,
    )
    assert out == ["loader StoreFormatError"]


def test_a_worker_killed_by_sigbus_mid_read_is_explained_as_the_truncation(tmp_path):
    """The race no check inside a worker closes: the file is cut between a worker's size check
    and its read of a mapped page, and SIGBUS kills the worker. Here the workers' check is
    switched off so that every read after the cut is that race; the loader must still raise
    the store's `StoreFormatError`, not torch's "worker exited unexpectedly"."""
    pytest.importorskip("torch_geometric")
    out = _run(
        """
        import graphbatch.torch as gt
        from graphbatch.datasets import _store_map

        def unchecked_reads(worker_id):
            _store_map.MappedFile.check = lambda self: None

        PATH = make("s.h5")
        store = GraphStore(PATH)
        ld = gt.loader(store, strategy="static-64", batch_size=32, seed=0, shuffle=False,
                       dataloader_kwargs={"num_workers": 1, "worker_init_fn": unchecked_reads})
        cut_mid_epoch(ld, cause="DataLoader worker")
        """,
        tmp_path,
    )
    assert out == ["loader StoreFormatError"]
