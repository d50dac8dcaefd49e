"""The store batch path equals the per-graph path (`gt.collate` over ``GraphStoreDataset(store)``)
bit for bit, for every strategy family; workers, resume and a replaced store on the batch path."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")
pytest.importorskip("h5py")

import graphbatch as gb  # noqa: E402
import graphbatch.torch as gt  # noqa: E402
from graphbatch._padbatch import pad_batch  # noqa: E402
from graphbatch.datasets import (  # noqa: E402
    GraphArrays,
    GraphStore,
    StoreFormatError,
    open_store,
    synthetic_graphs,
    synthetic_sizes,
    write_store,
)
from graphbatch.torch._store_collate import StoreCollater  # noqa: E402


def _graphs(n=150, seed=0) -> GraphArrays:
    sizes = synthetic_sizes(n, "heavy", rng=seed, mean_nodes=9)
    g = synthetic_graphs(sizes, rng=seed + 1, node_dim=3, n_targets=2)
    rng = np.random.default_rng(seed + 2)
    E = int(sizes.n_edge.sum())
    return GraphArrays(
        n_node=g.n_node,
        n_edge=g.n_edge,
        edge_index=g.edge_index.astype(np.int32),
        node={**g.node, "z": rng.integers(1, 10, int(sizes.n_node.sum())).astype(np.uint8)},
        edge={
            "edge_dist": rng.random(E).astype(np.float32),
            "flag": rng.random(E) < 0.5,
            "bond": rng.integers(0, 4, (E, 3)).astype(np.uint8),
        },
        graph={
            **g.graph,
            "index": np.arange(1000, 1000 + n, dtype=np.int64),
            "w": rng.random(n).astype(np.float64),
        },
    )


def _write(path, graphs):
    chunks = [
        graphs.take(np.arange(a, min(a + 40, len(graphs)))) for a in range(0, len(graphs), 40)
    ]
    return write_store(path, chunks, name="t")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = _write(tmp_path_factory.mktemp("sb") / "g.h5", _graphs())
    return GraphStore(path)


def assert_same_batch(a, b):
    """Every field, dtype, structure tensor and PyG bookkeeping dict equal."""
    assert type(a) is type(b)
    assert sorted(a.keys()) == sorted(b.keys())
    for k in a.keys():  # noqa: SIM118  # a PyG Batch iterates (key, value) pairs
        va, vb = a[k], b[k]
        assert va.dtype == vb.dtype and va.shape == vb.shape, k
        assert torch.equal(va, vb), k
    assert a.num_graphs == b.num_graphs and a._num_graphs == b._num_graphs
    assert a._slice_dict.keys() == b._slice_dict.keys()
    for k in a._slice_dict:
        assert torch.equal(a._slice_dict[k], b._slice_dict[k]), k
        ia, ib = a._inc_dict[k], b._inc_dict[k]
        assert (ia is None) == (ib is None), k
        if ia is not None:
            assert torch.equal(ia, ib), k


def _per_graph(store, idx, shape, **kw):
    ds = gt.GraphStoreDataset(store)
    return gt.collate(
        [ds[int(i)] for i in idx], shape, graph_index=list(idx), schema=gt.store_schema(store), **kw
    )


@pytest.mark.parametrize(
    "strategy,kw",
    [
        ("static-64", {}),
        ("static-pow2", {}),
        ("dynamic", {}),
        ("pack-lpf", {}),
        ("buckets", {}),
        ("kk", {}),
        ("random", {}),
        ("zscore", {}),
        ("dynamic", {"world_size": 3}),
        ("pack-lpf", {"world_size": 2}),
        ("kk", {"world_size": 2}),
    ],
)
def test_batch_path_equals_per_graph_path(store, strategy, kw):
    plan = gb.plan(store.graph_sizes(), strategy, batch_size=9, seed=5, **kw)
    empty = 0
    for b, idx in enumerate(plan.batches()):
        shape = plan.shape(b)
        empty += len(idx) == 0
        for cutoff in (None, 1.5):
            got = gt.store_batch(store, idx, shape, cutoff=cutoff)
            want = _per_graph(store, idx, shape, cutoff=cutoff)
            assert_same_batch(got, want)
        d = gt.store_batch(store, idx, shape, as_dict=True)
        ds = gt.GraphStoreDataset(store)
        want_d = gt.collate_dict(
            [ds[int(i)] for i in idx], shape, graph_index=list(idx), schema=gt.store_schema(store)
        )
        assert d.keys() == want_d.keys()
        for k in d:
            if isinstance(d[k], torch.Tensor):
                assert d[k].dtype == want_d[k].dtype and torch.equal(d[k], want_d[k]), k
            else:
                assert d[k] == want_d[k]
    if "world_size" in kw:
        assert plan.rank is not None


def test_layout_rules_and_ids_are_not_offset(store):
    idx = [4, 0, 17]
    b = gt.store_batch(store, idx, (400, 3000, 6))
    n_real = int(store.n_node[idx].sum())
    assert int(b.batch.max()) + 1 == 6  # padding owned by the last slot
    assert (b.batch[n_real:] == 5).all()
    assert b.graph_index.tolist() == [4, 0, 17, -1, -1, -1]
    # graph-level ids keep their values (plain PyG Data would add node offsets to "index")
    assert b.index[:3].tolist() == [1004, 1000, 1017]
    assert torch.equal(b.y[:3], torch.from_numpy(store.graph_field("y")[idx]))
    pad = pad_batch(store.packed(), idx, (400, 3000, 6), layout="jraph")
    assert pad.node_counts[3] == 400 - n_real and pad.node_counts[5] == 0  # jraph: slot G
    assert pad.fields["z"].dtype == np.uint8  # stored dtypes unless asked


def test_schema_matches_inference(store):
    ds = gt.GraphStoreDataset(store)
    inferred = gt.infer_schema([ds[i] for i in range(0, len(ds), 7)])
    assert dict(inferred) == dict(gt.store_schema(store))


def _collect(loader):
    return [b for b in loader]


def test_loader_on_store_equals_loader_on_dataset(store):
    for kw in ({}, {"num_replicas": 2, "rank": 1}):
        a = gt.loader(store, strategy="pack-lpf", batch_size=10, seed=2, **kw)
        b = gt.loader(gt.GraphStoreDataset(store), strategy="pack-lpf", batch_size=10, seed=2, **kw)
        assert isinstance(a.collater, StoreCollater)
        for _ in range(2):  # two epochs
            n = len(a)
            ga, gb_ = _collect(a), _collect(b)
            assert len(ga) == len(gb_) == n > 0
            for x, y in zip(ga, gb_, strict=False):
                assert_same_batch(x, y)


def test_workers_and_resume_on_batch_path(store):
    ref = _collect(gt.loader(store, strategy="dynamic", batch_size=8, seed=1))
    two = gt.loader(
        store, strategy="dynamic", batch_size=8, seed=1, dataloader_kwargs={"num_workers": 2}
    )
    for x, y in zip(_collect(two), ref, strict=False):
        assert_same_batch(x, y)
    first = gt.loader(
        store, strategy="dynamic", batch_size=8, seed=1, dataloader_kwargs={"num_workers": 1}
    )
    it = iter(first)
    for _ in range(5):
        next(it)
    _assert_resumes(store, first.state_dict(), ref, 5)


def _assert_resumes(store, state, ref, taken: int) -> None:
    """A new worker loader given ``state`` yields exactly the batches of ``ref`` after the
    first ``taken``."""
    again = gt.loader(
        store, strategy="dynamic", batch_size=8, seed=1, dataloader_kwargs={"num_workers": 1}
    )
    again.load_state_dict(state)
    rest = _collect(again)
    assert len(rest) == len(ref) - taken
    for x, y in zip(rest, ref[taken:], strict=False):
        assert_same_batch(x, y)


def test_prefetch_thread_over_worker_slots_equals_one_process_and_resumes(store):
    """`gt.prefetch` over a loader whose workers hand batches through the slot ring: the
    thread receives each slot before asking for the next batch, the content equals 0
    workers, and ``state_dict`` counts the batches the consumer took."""
    ref = _collect(gt.loader(store, strategy="dynamic", batch_size=8, seed=1))
    ld = gt.loader(
        store,
        strategy="dynamic",
        batch_size=8,
        seed=1,
        dataloader_kwargs={"num_workers": 2, "prefetch_factor": 1},
    )
    got = list(gt.prefetch(ld, depth=3))
    assert len(got) == len(ref)
    for x, y in zip(got, ref, strict=False):
        assert_same_batch(x, y)
    first = gt.loader(
        store, strategy="dynamic", batch_size=8, seed=1, dataloader_kwargs={"num_workers": 1}
    )
    it = gt.prefetch(first, depth=2)
    for _ in range(4):
        next(it)
    state = first.state_dict()
    it.close()
    _assert_resumes(store, state, ref, 4)


def test_replaced_store_is_never_read_with_old_offsets(tmp_path):
    """Issue 14 item 1: rebuild the file between epochs (workers are re-forked each epoch)."""
    path = _write(tmp_path / "s.h5", _graphs(seed=1))
    store = GraphStore(path)
    keep = GraphStore(path, in_memory=True)  # reference content of the old file
    ld = gt.loader(
        store,
        strategy="static-64",
        batch_size=6,
        seed=0,
        shuffle=False,
        dataloader_kwargs={"num_workers": 1},
    )
    _collect(ld)
    _write(path, _graphs(seed=2))  # same path, other graphs
    for batch in _collect(ld):  # workers keep the opened file
        idx = batch.graph_index[batch.graph_mask].numpy()
        want = gt.store_batch(
            keep, idx, (batch.num_nodes, batch.edge_index.shape[1], batch.num_graphs)
        )
        assert_same_batch(batch, want)
    clone = pickle.loads(pickle.dumps(store))  # a spawned worker re-opens by path
    with pytest.raises(StoreFormatError, match="replaced"):
        clone.read_graph(0)
    with pytest.raises(StoreFormatError, match="replaced"):
        len(clone)


def test_damaged_edge_index_raises_on_read(tmp_path):
    g = _graphs(n=20, seed=3)
    path = _write(tmp_path / "e.h5", g)
    with GraphStore(path) as s:
        offset = s._arrays()["edge_index"].offset
    raw = bytearray(path.read_bytes())
    raw[offset : offset + 4] = np.int32(5000).tobytes()  # first source -> node 5000
    path.write_bytes(bytes(raw))
    s = GraphStore(path)  # the chunk check names it first
    with pytest.raises(StoreFormatError, match="edge_index, check chunk 0"):
        s.read_batch([1, 0], (500, 2000, 4))
    s = GraphStore(path, check_chunks=False)  # without: the range check
    with pytest.raises(StoreFormatError, match="edge_index"):
        s.read_graph(0)
    with pytest.raises(StoreFormatError, match="outside"):
        s.read_batch([1, 0], (500, 2000, 4))
    with pytest.raises(StoreFormatError, match="checksum of edge_index"):
        s.verify()


def test_prefetch_thread_and_pin_memory_on_batch_path(store):
    ref = _collect(gt.loader(store, strategy="buckets", batch_size=7, seed=3))
    with gt.prefetch(gt.loader(store, strategy="buckets", batch_size=7, seed=3), 3) as fetched:
        got = list(fetched)
    assert len(got) == len(ref)
    for x, y in zip(got, ref, strict=False):
        assert_same_batch(x, y)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no accelerator here: pinning is a no-op
        pinned = _collect(
            gt.loader(
                store,
                strategy="buckets",
                batch_size=7,
                seed=3,
                dataloader_kwargs={"pin_memory": True},
            )
        )
    for x, y in zip(pinned, ref, strict=False):
        assert_same_batch(x, y)


def test_preset_with_a_store_is_refused(store):
    # the store batch path uses the store's own schema: a preset without a store reader would
    # be silently ignored; ga.mace reads atomistic stores only
    # (tests/atomistic/test_atomistic_store.py)
    ga = pytest.importorskip("graphbatch.atomistic")
    with pytest.raises(TypeError, match="reads datasets of graph objects, not a GraphStore"):
        gt.loader(store, strategy="dynamic", batch_size=4, preset=gt.Preset("mine"))
    with pytest.raises(ValueError, match=r"no field\(s\) \['positions', 'atomic_numbers'"):
        gt.loader(store, strategy="dynamic", batch_size=4, preset=ga.mace(r_max=5.0))


# ------------------------------------------------------- kernel gathers (issue 15, second round)
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import graphbatch._padbatch as pb  # noqa: E402


def _unaligned(arr: np.ndarray) -> np.ndarray:
    """A read-only copy of ``arr`` starting at an odd address (as a memory map after a uint8
    array is): NumPy reports it unaligned for any itemsize > 1."""
    raw = np.zeros(arr.nbytes + 1, dtype=np.uint8)
    raw[1:] = np.frombuffer(np.ascontiguousarray(arr).tobytes(), dtype=np.uint8)
    out = np.frombuffer(raw.data, dtype=arr.dtype, count=arr.size, offset=1).reshape(arr.shape)
    out.flags.writeable = False
    return out


@settings(max_examples=30, deadline=None)
@given(
    n_node=st.lists(st.integers(0, 9), min_size=1, max_size=12),
    edges_per_node=st.integers(0, 3),
    data=st.data(),
    run_rows=st.sampled_from([1, 4, 10**9]),
    unaligned=st.booleans(),
    touch=st.booleans(),
)
def test_kernel_gathers_equal_per_graph_slices(
    n_node, edges_per_node, data, run_rows, unaligned, touch
):
    rng = np.random.default_rng(len(n_node) * 31 + edges_per_node)
    nn = np.array(n_node, dtype=np.int64)
    ne = np.array([k * edges_per_node if k else 0 for k in n_node], dtype=np.int64)
    N, E, G = int(nn.sum()), int(ne.sum()), len(n_node)
    ei = np.concatenate(
        [rng.integers(0, max(k, 1), (2, m)) for k, m in zip(nn, ne, strict=False)]
        + [np.zeros((2, 0), dtype=np.int64)],
        axis=1,
    ).astype(np.int32)
    arrays = {
        "node": {
            "z": rng.integers(0, 255, N).astype(np.uint8),
            "pos": rng.normal(size=(N, 3)).astype(np.float32),
        },
        "edge": {
            "d": rng.random(E).astype(np.float64),
            "b": rng.integers(0, 4, (E, 2)).astype(np.int16),
        },
        "graph": {
            "y": rng.normal(size=(G, 2)).astype(np.float32),
            "i": np.arange(G, dtype=np.int64),
        },
    }
    wrap = _unaligned if unaligned else (lambda a: a)
    src = pb.PackedGraphs(
        n_node=nn,
        n_edge=ne,
        node_offsets=np.r_[0, np.cumsum(nn)],
        edge_offsets=np.r_[0, np.cumsum(ne)],
        edge_index=wrap(ei),
        **{lv: {k: wrap(v) for k, v in d.items()} for lv, d in arrays.items()},
    )
    if unaligned and N:
        assert not src.node["pos"].flags.aligned
    idx = np.array(data.draw(st.lists(st.integers(0, G - 1), max_size=6)), dtype=np.int64)
    shape = (int(nn[idx].sum()) + 3, int(ne[idx].sum()) + 2, len(idx) + 2)
    old = pb.RUN_ROWS, pb.TOUCH_BYTES
    pb.RUN_ROWS = run_rows
    pb.TOUCH_BYTES = 0 if touch else old[1]  # touch every array before gathering
    try:
        casts = {"z": np.int64, "d": np.float32} if run_rows == 4 else {}
        got = pb.pad_batch(src, idx, shape, dtypes=casts, pad={"i": -7})
    finally:
        pb.RUN_ROWS, pb.TOUCH_BYTES = old
    no, eo = src.node_offsets, src.edge_offsets
    for level, rows in (
        ("node", [slice(no[g], no[g + 1]) for g in idx]),
        ("edge", [slice(eo[g], eo[g + 1]) for g in idx]),
        ("graph", [slice(g, g + 1) for g in idx]),
    ):
        for name, arr in arrays[level].items():
            want = np.concatenate([arr[r] for r in rows] + [arr[:0]])
            out = got.fields[name]
            assert out.dtype == np.dtype(casts.get(name, arr.dtype))
            assert np.array_equal(out[: want.shape[0]], want.astype(out.dtype)), name
            if name == "i":
                assert (out[want.shape[0] :] == -7).all()
    local = np.concatenate(
        [ei[:, eo[g] : eo[g + 1]] + got.node_ptr[k] for k, g in enumerate(idx)]
        + [np.zeros((2, 0), np.int64)],
        axis=1,
    )
    assert np.array_equal(got.fields["edge_index"][:, : local.shape[1]], local)
    # every output array is a view of the batch's one buffer, at its recorded offset
    base = got.buffer.__array_interface__["data"][0]
    for name, arr in [*got.fields.items(), ("batch", got.batch), ("graph_ptr", got.graph_ptr)]:
        assert arr.__array_interface__["data"][0] - base == got.offsets[name], name
    assert np.array_equal(got.graph_ptr, np.arange(shape[2] + 1))


def test_batches_never_share_buffers(store):
    a = store.read_batch([0, 1], (400, 3000, 4))
    b = store.read_batch([0, 1], (400, 3000, 4))
    assert not np.shares_memory(a.buffer, b.buffer)
    a.fields["pos"][:] = 99  # a consumer writing to a batch
    assert not (b.fields["pos"] == 99).all()
    with pytest.raises(TypeError, match="allocate"):
        store.read_batch([0], (400, 3000, 4), allocate=lambda n: np.empty(n - 1, np.uint8))
    seen = []
    c = store.read_batch(
        [2], (400, 3000, 4), allocate=lambda n: seen.append(n) or np.empty(n + 8, np.uint8)
    )
    assert seen and c.buffer.shape[0] == seen[0] + 8


# ------------------------------------------ worker hand-off through slots (issue 15, third round)
import torch.utils.data._utils.pin_memory as torch_pin  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from graphbatch.torch import _slots  # noqa: E402


def _tensor_ranges(b):
    """``(start, end)`` byte addresses of every tensor of a batch."""
    return (
        [
            (t.data_ptr(), t.data_ptr() + t.numel() * t.element_size())
            for t in b.values()
            if isinstance(t, torch.Tensor)
        ]
        if isinstance(b, dict)
        else [
            (b[k].data_ptr(), b[k].data_ptr() + b[k].numel() * b[k].element_size())
            for k in b.keys()  # noqa: SIM118  # a PyG Batch iterates (key, value) pairs
            if isinstance(b[k], torch.Tensor)
        ]
    )


def test_worker_batches_arrive_through_slots_not_shared_storages(store):
    ld = gt.loader(
        store, strategy="dynamic", batch_size=8, seed=1, dataloader_kwargs={"num_workers": 1}
    )
    it, receive = ld.collate_fn.start_pass(ld, lambda: DataLoader.__iter__(ld))
    raw = next(it)  # what crossed from the worker
    assert isinstance(raw, _slots.SlotBatch)
    assert len(pickle.dumps(raw)) < 200  # a few ints, no storage
    b = receive(raw)
    assert type(b).__name__ == "StoreDataBatch"
    for k in b.keys():  # noqa: SIM118  # a PyG Batch iterates (key, value) pairs
        if isinstance(b[k], torch.Tensor):
            assert not b[k].is_shared(), k  # a private copy in the main process
    lo = min(a for a, _ in _tensor_ranges(b))
    assert max(e for _, e in _tensor_ranges(b)) - lo <= raw.nbytes  # one buffer per batch
    ref = gt.store_batch(
        store,
        b.graph_index[b.graph_mask].numpy(),
        (b.num_nodes, b.edge_index.shape[1], b.num_graphs),
    )
    assert_same_batch(b, ref)
    del it


def test_batches_bigger_than_a_slot_arrive_as_one_shared_block(store, monkeypatch):
    ref = _collect(gt.loader(store, strategy="dynamic", batch_size=8, seed=1))
    ld = gt.loader(
        store, strategy="dynamic", batch_size=8, seed=1, dataloader_kwargs={"num_workers": 2}
    )
    monkeypatch.setattr(ld.collate_fn, "slot_bytes", lambda loader: 1024)  # nothing fits
    got = _collect(ld)
    assert len(got) == len(ref)
    for x, y in zip(got, ref, strict=False):
        assert_same_batch(x, y)
        assert (
            len(
                {
                    x[k].untyped_storage().data_ptr()
                    for k in x.keys()  # noqa: SIM118  # a PyG Batch iterates (key, value) pairs
                    if isinstance(x[k], torch.Tensor)
                }
            )
            == 1
        )  # one shared block
        assert x.edge_index.is_shared()


@settings(max_examples=8, deadline=None)
@given(
    workers=st.integers(1, 2),
    prefetch=st.integers(1, 3),
    in_order=st.booleans(),
    persistent=st.booleans(),
    as_dict=st.booleans(),
    delays=st.lists(st.sampled_from([0.0, 0.0, 0.002, 0.01]), min_size=1, max_size=6),
)
def test_slot_hand_off_equals_one_process_under_any_pace(
    store, workers, prefetch, in_order, persistent, as_dict, delays
):
    """Two epochs with workers equal 0 workers bit for bit, whatever the consumer's pace
    (a slow consumer lets workers run ahead to the DataLoader's limit); a slot rewritten
    before its copy would raise in `SlotRing.copy_out` or show as a different batch."""
    import time

    kw = dict(strategy="pack-lpf", batch_size=6, seed=4, collation=gt.Collation(as_dict=as_dict))
    ref = gt.loader(store, **kw)
    ld = gt.loader(
        store,
        dataloader_kwargs=dict(
            num_workers=workers,
            prefetch_factor=prefetch,
            in_order=in_order,
            persistent_workers=persistent,
        ),
        **kw,
    )
    key = (lambda b: b["graph_index"].tolist()) if as_dict else (lambda b: b.graph_index.tolist())
    for _ in range(2):
        want = {tuple(key(b)): b for b in ref}
        got = []
        for k, b in enumerate(ld):
            time.sleep(delays[k % len(delays)])
            got.append(b)
        assert len(got) == len(want)
        for b in got:
            w = want[tuple(key(b))]
            if as_dict:
                assert b.keys() == w.keys()
                for name in b:
                    if isinstance(b[name], torch.Tensor):
                        assert torch.equal(b[name], w[name]), name
            else:
                assert_same_batch(b, w)


@settings(max_examples=40, deadline=None)
@given(workers=st.integers(1, 4), per_worker=st.integers(2, 5), data=st.data())
def test_ring_slots_of_recent_batches_never_collide(workers, per_worker, data):
    """The slot rule: a worker's last ``per_worker`` batches sit in distinct slots, and no two
    workers ever share a slot; each claim writes its ticket first."""
    ring = _slots.SlotRing(workers, per_worker, 256)
    from multiprocessing.reduction import ForkingPickler  # as for a spawned worker

    clones = [pickle.loads(ForkingPickler.dumps(ring)) for _ in range(workers)]
    order = data.draw(st.lists(st.integers(0, workers - 1), max_size=40))
    recent = {w: [] for w in range(workers)}
    owner = {}
    for w in order:
        slot, ticket, buf = clones[w].claim(w, 100)
        assert buf.shape[0] >= 100 and owner.setdefault(slot, w) == w
        assert ring._ticket(slot) == ticket  # visible through the ring
        recent[w] = (recent[w] + [slot])[-per_worker:]
        assert len(set(recent[w])) == len(recent[w])
    assert ring.claim(0, 257) is None  # too big for a slot


def test_rewritten_slot_is_detected_not_returned(store):
    ld = gt.loader(store, strategy="dynamic", batch_size=8, seed=1)
    col = ld.collate_fn
    ring = _slots.SlotRing(1, 2, col.slot_bytes(ld))
    recv = _slots.SlotReceiver(ring, col.batcher.from_buffer)
    plan = ld.plan
    shape = (plan.shape(0)[0] + 1, *plan.shape(0)[1:])  # the spare padding node
    slot, ticket, buf = ring.claim(0, col.batcher.buffer_bytes(shape))
    padded = store.read_batch(
        plan.batch(0), shape, dtypes=col.batcher._dtypes, allocate=lambda n: buf
    )
    msg = _slots.SlotBatch(
        ring.token, slot, ticket, col.batcher.buffer_bytes(shape), padded.shape, padded.num_real[0]
    )
    ref = gt.store_batch(store, plan.batch(0), shape)
    assert_same_batch(recv(msg), ref)
    for _ in range(2):
        ring.claim(0, 64)  # the worker wraps around
    with pytest.raises(RuntimeError, match="no longer holds"):
        recv(msg)
    other = _slots.SlotBatch(ring.token + 1, slot, ticket, msg.nbytes, msg.shape, 1)
    with pytest.raises(RuntimeError, match="another slot ring"):
        recv(other)
    with pytest.raises(RuntimeError, match="no live slot ring"):
        _slots.SlotBatch(12345, 0, 1, 8, shape, 1).pin_memory()


def test_pin_memory_thread_copies_slots_straight_into_pinned_buffers(store, monkeypatch):
    """DataLoader's pin thread calls ``pin_memory()`` on what workers return: a `SlotBatch`
    is copied out once, into a page-locked buffer (faked here: no accelerator), every tensor
    a view of it."""
    made = []

    def fake_pinned(nbytes):
        made.append(torch.empty(nbytes, dtype=torch.uint8))
        return made[-1]

    monkeypatch.setattr(_slots, "_pinned_buffer", fake_pinned)
    ld = gt.loader(
        store, strategy="dynamic", batch_size=8, seed=1, dataloader_kwargs={"num_workers": 1}
    )
    it, receive = ld.collate_fn.start_pass(ld, lambda: DataLoader.__iter__(ld))
    raw = next(it)
    b = torch_pin.pin_memory(raw)  # what the pin thread does
    assert receive(b) is b and len(made) == 1
    lo, hi = made[0].data_ptr(), made[0].data_ptr() + made[0].numel()
    assert all(lo <= a and e <= hi for a, e in _tensor_ranges(b))
    assert_same_batch(
        b,
        gt.store_batch(
            store,
            b.graph_index[b.graph_mask].numpy(),
            (b.num_nodes, b.edge_index.shape[1], b.num_graphs),
        ),
    )
    del it


@pytest.mark.parametrize("context,workers", [("fork", 2), ("spawn", 1)])
def test_slot_hand_off_with_start_methods_init_fn_and_ranks(store, context, workers):
    """Fork inherits the ring; spawn pickles it (torch shares the storage). A spawned worker
    imports torch and PyG anew (seconds), hence one worker there."""
    kw = dict(strategy="pack-lpf", batch_size=7, seed=2, num_replicas=2, rank=1)
    ref_loader = gt.loader(store, **kw)
    refs = [_collect(ref_loader), _collect(ref_loader)]  # epochs 0 and 1
    ld = gt.loader(
        store,
        dataloader_kwargs=dict(
            num_workers=workers,
            multiprocessing_context=context,
            worker_init_fn=_init_fn,
            persistent_workers=True,
        ),
        **kw,
    )
    for ref in refs:
        got = _collect(ld)
        assert len(got) == len(ref) > 0
        for x, y in zip(got, ref, strict=False):
            assert_same_batch(x, y)


def _init_fn(worker_id):
    torch.manual_seed(1000 + worker_id)  # a user's init runs as before


def test_buffer_layout_is_the_kernels(store):
    from graphbatch._padbatch import buffer_layout

    b = gt.StoreBatcher(store)
    for shape in [(40, 300, 4), (200, 1500, 9)]:
        got = store.read_batch([3, 1], shape, dtypes=b._dtypes)
        lay = buffer_layout(store.packed(), shape, b._dtypes)
        assert lay.nbytes == got.buffer.shape[0] == b.buffer_bytes(shape)
        assert dict(lay.offsets) == dict(got.offsets)
        stand_in = buffer_layout(b._field_source(), shape, b._dtypes)
        assert stand_in.entries == lay.entries
    small, big = b.buffer_bytes((40, 300, 4)), b.buffer_bytes((41, 301, 5))
    assert small < big


def test_slot_hand_off_on_a_sharded_store(tmp_path):
    from graphbatch.datasets._manifest import write_manifest_of_shards

    g = _graphs(n=60, seed=4)
    paths = [
        write_store(tmp_path / f"s{k}.h5", [g.take(np.arange(a, b))], name="t")
        for k, (a, b) in enumerate([(0, 25), (25, 60)])
    ]
    write_manifest_of_shards(tmp_path / "m.json", paths, name="t", meta={}, build={})
    store = open_store(tmp_path / "m.json")
    kw = dict(strategy="dynamic", batch_size=5, seed=1)
    ref = _collect(gt.loader(store, **kw))
    got = _collect(gt.loader(store, dataloader_kwargs={"num_workers": 2}, **kw))
    assert len(got) == len(ref) > 0
    for x, y in zip(got, ref, strict=False):
        assert_same_batch(x, y)
