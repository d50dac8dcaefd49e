"""`gt.DeviceFeed` on CPU: the loader's batches unchanged (the same objects, or -- store-fed with
workers, viewed in the workers' slots -- equal field by field), for PyG batches, dicts, MACE
store-view dicts and a QM9 store; held batches are never overwritten, whatever is kept (a batch,
a tensor, a view, an autograd record); ``state_dict``/``set_epoch`` as with the loader; clear
errors."""

from __future__ import annotations

import gc
import importlib.util
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")
pytest.importorskip("h5py")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import graphbatch.torch as gt  # noqa: E402
from graphbatch import InputError, InputTypeError  # noqa: E402
from graphbatch.datasets import GraphStore  # noqa: E402
from graphbatch.torch import _slots  # noqa: E402

from ..datasets.test_store_batch import _graphs, _write, assert_same_batch  # noqa: E402

KW = dict(strategy="pack-lpf", batch_size=6, seed=4)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return GraphStore(_write(tmp_path_factory.mktemp("feed") / "g.h5", _graphs(90)))


def _same(a, b) -> None:
    if isinstance(b, dict):
        assert list(a) == list(b)
        for k in b:
            if isinstance(b[k], torch.Tensor):
                assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
            else:
                assert a[k] == b[k], k
    else:
        assert_same_batch(a, b)


def _in_ring(batch, ring) -> bool:
    """Whether every tensor of ``batch`` lies in ``ring``'s shared memory (no copy made)."""
    lo = ring.memory.data_ptr()
    hi = lo + ring.memory.numel()
    values = batch.values() if isinstance(batch, dict) else [v for _, v in batch]
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    return bool(tensors) and all(lo <= t.data_ptr() < hi for t in tensors)


def test_cpu_feed_yields_the_loaders_own_objects(store):
    """Without workers (and for any iterable) the feed hands out the very objects."""
    batches = list(gt.loader(store, **KW))
    feed = gt.DeviceFeed(batches, "cpu")
    assert len(feed) == len(batches)
    for _ in range(2):
        got = list(feed)
        assert len(got) == len(batches) and all(a is b for a, b in zip(got, batches, strict=True))
    ld = gt.loader(store, **KW)
    seen = []
    fed = []
    for b in gt.device_feed(_Spy(ld, seen), "cpu", depth=3):
        fed.append(b)
    assert len(fed) == len(seen) == len(ld) and all(a is b for a, b in zip(fed, seen, strict=True))


class _Spy:
    """An iterable recording what it yields."""

    def __init__(self, source, seen):
        self.source, self.seen = source, seen

    def __iter__(self):
        for b in self.source:
            self.seen.append(b)
            yield b


@pytest.mark.parametrize("depth", [1, 2, 4])
def test_an_error_of_the_loader_is_raised_where_it_occurred(depth):
    """The batches read before a failing one are handed out first; then the error."""

    def source():
        yield from ("a", "b", "c")
        raise InputError("batch 3 is damaged")

    it = iter(gt.DeviceFeed(source(), "cpu", depth=depth))
    assert [next(it) for _ in range(3)] == ["a", "b", "c"]
    with pytest.raises(InputError, match="batch 3 is damaged"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)


@pytest.mark.parametrize(
    "workers,persistent,as_dict,depth",
    [(1, False, False, 2), (2, True, False, 1), (2, False, True, 3), (1, True, True, 2)],
)
def test_store_fed_feed_views_the_slots_and_equals_the_loader(
    store, workers, persistent, as_dict, depth
):
    """Store-fed with workers: batches are views of the workers' shared-memory slots (not a
    copy) and equal the 0-worker loader's, field by field, over two epochs."""
    ref = gt.loader(store, **KW, collation=gt.Collation(as_dict=as_dict))
    ld = gt.loader(
        store,
        **KW,
        collation=gt.Collation(as_dict=as_dict),
        dataloader_kwargs={"num_workers": workers, "persistent_workers": persistent},
    )
    feed = gt.DeviceFeed(ld, "cpu", depth=depth)
    for _epoch in range(2):
        want = list(ref)
        n = 0
        it = iter(feed)
        for b, w in zip(it, want, strict=True):
            _same(b, w)
            assert _in_ring(b, it._receiver.ring)
            n += 1
        assert n == len(want) == len(feed)


@pytest.mark.parametrize("workers,group", [(2, 1), (1, 2)])
def test_held_batches_are_never_overwritten(store, workers, group):
    """Keeping every batch (``list(feed)``) leases every slot: the workers send the rest in
    blocks of their own, and all batches still equal the loader's at the end."""
    ref = list(gt.loader(store, **KW))
    ld = gt.loader(store, **KW, dataloader_kwargs={"num_workers": workers, "prefetch_factor": 1})
    it = iter(gt.DeviceFeed(ld, "cpu", group=group))
    ring = it._receiver.ring
    kept = list(it)
    assert len(kept) == len(ref) > ring.slots
    assert not all(_in_ring(b, ring) for b in kept)  # some came in blocks of their own
    for b, w in zip(kept, ref, strict=True):
        assert_same_batch(b, w)


@settings(max_examples=6, deadline=None)
@given(
    keep=st.lists(
        st.sampled_from(["batch", "tensor", "view", "autograd", "nothing", "nothing"]),
        min_size=4,
        max_size=12,
    ),
    workers=st.integers(1, 2),
)
def test_whatever_is_kept_keeps_its_values(store, keep, workers):
    """Whatever part of a batch the consumer keeps -- the batch, one tensor, a view of one,
    an autograd graph that saved one -- still holds that batch's values after the epoch,
    while the slots of dropped batches are reused."""
    ref = list(gt.loader(store, **KW))
    ld = gt.loader(store, **KW, dataloader_kwargs={"num_workers": workers, "prefetch_factor": 1})
    held = []
    for k, b in enumerate(gt.DeviceFeed(ld, "cpu")):
        how = keep[k % len(keep)]
        if how == "batch":
            held.append((k, "batch", b))
        elif how == "tensor":
            held.append((k, "pos", b.pos))
        elif how == "view":
            held.append((k, "edge_index0", b.edge_index[0]))
        elif how == "autograd":
            w = torch.ones(b.pos.shape[1], requires_grad=True)
            held.append((k, "graph", (b.pos * w).sum()))  # saves b.pos for backward
        del b
    gc.collect()
    for k, what, value in held:
        if what == "batch":
            assert_same_batch(value, ref[k])
        elif what == "pos":
            assert torch.equal(value, ref[k].pos)
        elif what == "edge_index0":
            assert torch.equal(value, ref[k].edge_index[0])
        else:
            value.backward()  # the saved tensor is intact: autograd checks its version
            assert torch.isclose(value.detach(), ref[k].pos.sum(), rtol=1e-5)


def test_a_steps_requires_grad_does_not_leak_into_later_batches(store):
    ld = gt.loader(store, **KW, dataloader_kwargs={"num_workers": 1, "persistent_workers": True})
    feed = gt.DeviceFeed(ld, "cpu")
    for _ in range(3):
        for b in feed:
            assert not b.pos.requires_grad and b.pos.grad is None
            b.pos.requires_grad_(True)
            b.pos.sum().backward()  # a force model's step


def test_state_dict_counts_handed_out_batches_and_set_epoch_is_honoured(store):
    ref = list(gt.loader(store, **KW))
    ld = gt.loader(store, **KW, dataloader_kwargs={"num_workers": 1})
    feed = gt.DeviceFeed(ld, "cpu", depth=3)
    it = iter(feed)
    for _ in range(4):
        next(it)
    assert ld.state_dict()["offset"] == 4  # read ahead, counted when handed out
    it.close()
    again = gt.loader(store, **KW, dataloader_kwargs={"num_workers": 1})
    again.load_state_dict(ld.state_dict())
    rest = list(gt.DeviceFeed(again, "cpu"))
    assert len(rest) == len(ref) - 4
    for b, w in zip(rest, ref[4:], strict=True):
        assert_same_batch(b, w)
    # set_epoch between iter() and the first batch: that epoch runs, from its first batch
    epoch2 = list(gt.loader(store, **KW).plan_sampler.plan_for_epoch(2).batches())
    ld.set_epoch(0)
    it = iter(feed)
    ld.set_epoch(2)
    first = next(it)
    assert first.graph_index[first.graph_mask].tolist() == list(epoch2[0])
    it.close()


def test_a_pass_read_to_its_end_moves_the_loader_to_the_next_epoch(store):
    ld = gt.loader(store, **KW, dataloader_kwargs={"num_workers": 1})
    feed = gt.DeviceFeed(ld, "cpu")
    assert ld.epoch == 0
    n = sum(1 for _ in feed)
    assert n == len(ld) and ld.epoch == 1


def test_bad_arguments_raise_clear_errors(store):
    ld = gt.loader(store, **KW)
    with pytest.raises(InputError, match="feed depth"):
        gt.DeviceFeed(ld, "cpu", depth=0)
    with pytest.raises(InputTypeError, match="iterable"):
        gt.DeviceFeed(3, "cpu")
    with pytest.raises(InputTypeError, match="device"):
        gt.DeviceFeed(ld, "no-such-device")
    with pytest.raises(InputError, match="'cpu' or 'cuda'"):
        gt.DeviceFeed(ld, "meta")
    with pytest.raises(InputTypeError, match="no len"):
        len(gt.DeviceFeed(iter([1, 2]), "cpu"))
    with pytest.raises(InputTypeError, match="FeedBackend"):
        gt.DeviceFeed(ld, "cpu", backend=object())
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match="needs CUDA"):
            gt.DeviceFeed(ld, "cuda")
        assert gt.DeviceFeed(ld).device == torch.device("cpu")  # the default without CUDA


# ------------------------------------------------------------------ slot leases, directly
def test_a_leased_slot_is_skipped_by_its_worker_and_checked_on_release():
    ring = _slots.SlotRing(1, 2, 256)
    slot, ticket, _ = ring.claim(0, 100)
    msg = _slots.SlotBatch(ring.token, slot, ticket, 100, (4, 4, 2), 1)
    ring.lease(msg)
    assert ring.leased(slot)
    nxt = ring.claim(0, 100)
    assert nxt is not None and nxt[0] != slot
    assert ring.claim(0, 100) is None  # the leased slot's turn: skipped
    ring.release(slot, ticket)
    assert not ring.leased(slot)
    again = ring.claim(0, 100)
    assert again is not None and again[0] == nxt[0] and again[1] > nxt[1]
    ring.lease(_slots.SlotBatch(ring.token, again[0], again[1], 100, (4, 4, 2), 1))
    ring._header()[again[0] * ring.stride // 8] = 999  # rewritten behind the lease's back
    with pytest.raises(RuntimeError, match=r"while batch .* was leased"):
        ring.release(again[0], again[1])
    with pytest.raises(RuntimeError, match="no longer holds"):
        ring.lease(_slots.SlotBatch(ring.token, again[0], again[1], 100, (4, 4, 2), 1))


# ------------------------------------------------------------------ packed dicts
@settings(max_examples=30, deadline=None)
@given(
    entries=st.lists(
        st.tuples(
            st.sampled_from([torch.float32, torch.float64, torch.int64, torch.bool, torch.uint8]),
            st.lists(st.integers(0, 4), max_size=3),
        ),
        max_size=6,
    ),
    extra=st.one_of(st.none(), st.integers(), st.lists(st.text(max_size=3), max_size=2)),
)
def test_packed_dicts_round_trip(entries, extra):
    """A view's batch dict packed into one buffer comes back with the same keys in the same
    order, dtypes, shapes, values and non-tensor values; every tensor 64-byte aligned."""
    from graphbatch.torch._packed import pack_dict, pack_layout, unpack_dict

    gen = torch.Generator().manual_seed(len(entries))
    batch = {}
    for k, (dtype, shape) in enumerate(entries):
        batch[f"t{k}"] = (torch.rand(shape, generator=gen) * 100).to(dtype)
        if k == 1:
            batch["extra"] = extra
    layout, nbytes = pack_layout(batch)
    base = torch.zeros(max(nbytes, 1), dtype=torch.uint8)
    pack_dict(batch, layout, base)
    back = unpack_dict(base, layout)
    assert list(back) == list(batch)
    for key, value in batch.items():
        if isinstance(value, torch.Tensor):
            assert back[key].dtype == value.dtype and torch.equal(back[key], value), key
            assert (back[key].data_ptr() - base.data_ptr()) % 64 == 0
        else:
            assert back[key] == value


# ------------------------------------------------------------------ MACE and QM9 stores
def test_mace_store_batches_through_the_feed(tmp_path):
    """MACE's preset over an atomistic store with workers: the transform runs in the workers,
    the dict travels packed in the slot, and the feed's dicts equal the loader's without
    workers (keys in order, dtypes, values)."""
    pytest.importorskip("vesin")
    pytest.importorskip("ase")
    import ase.io

    import graphbatch.atomistic as ga
    from graphbatch.datasets import build_atoms_store, emt_structures

    xyz = tmp_path / "s.xyz"
    ase.io.write(xyz, list(emt_structures(20, seed=3, max_atoms=16)), format="extxyz")
    build_atoms_store(xyz, tmp_path / "s.h5", cutoff=3.5)
    store = GraphStore(tmp_path / "s.h5")
    preset = ga.mace(r_max=3.5, z_table=[13, 28, 29, 46, 47, 78, 79])
    kw = dict(strategy="dynamic", batch_size=4, seed=1, preset=preset)
    ref = list(gt.loader(store, **kw))
    ld = gt.loader(store, **kw, dataloader_kwargs={"num_workers": 2})
    it = iter(gt.DeviceFeed(ld, "cpu"))
    got = 0
    for b, w in zip(it, ref, strict=True):
        _same(b, w)
        assert _in_ring(b, it._receiver.ring)  # packed in the slot: no copy, no transform
        got += 1
    assert got == len(ref) > 2


@pytest.fixture(scope="module")
def qm9(tmp_path_factory):
    """A QM9 store of the first 64 molecules, built with the CLI as users build it."""
    if importlib.util.find_spec("qm9pack") is None:
        pytest.skip("qm9pack not installed (pip install --no-deps qm9pack==1.0.3)")
    path = tmp_path_factory.mktemp("qm9") / "qm9.h5"
    cmd = [sys.executable, "-m", "graphbatch.cli", "data", "build", "qm9", "--limit", "64"]
    subprocess.run(
        [*cmd, "--no-progress", "--out", str(path)], check=True, capture_output=True, timeout=120
    )
    return GraphStore(path)


def test_qm9_store_through_the_feed(qm9):
    kw = dict(strategy="dynamic", batch_size=16, seed=0)
    ref = list(gt.loader(qm9, **kw))
    feed = gt.DeviceFeed(gt.loader(qm9, **kw, dataloader_kwargs={"num_workers": 2}), "cpu")
    got = list(feed)
    assert len(got) == len(ref) == len(feed)
    for b, w in zip(got, ref, strict=True):
        assert_same_batch(b, w)
    assert np.array_equal(
        np.sort(torch.cat([b.graph_index[b.graph_mask] for b in got]).numpy()), np.arange(64)
    )


# ------------------------------------------------------------------ device buffers, directly
_ENTRIES = (
    ("a", 0, 64, (4, 4), torch.float32),
    ("b", 64, 96, (4,), torch.int64),
    ("c", 128, 132, (4,), torch.bool),
)


def _keep(how: str, batch: dict):
    """What a consumer keeps of ``batch``."""
    a = batch["a"]
    return {
        "batch": lambda: batch,
        "tensor": lambda: batch["b"],
        "view": lambda: a[1],
        "alias": lambda: a.detach(),
        "numpy": lambda: batch["b"].numpy(),
        "list": lambda: [batch["c"]],
        "autograd": lambda: (a.requires_grad_(True) * torch.ones(4, 4)).sum(),
        "nothing": lambda: None,
    }[how]()


@settings(max_examples=40, deadline=None)
@given(
    how=st.lists(
        st.sampled_from(
            ["batch", "tensor", "view", "alias", "numpy", "list", "autograd", "nothing"]
        ),
        min_size=1,
        max_size=4,
    ),
    prototype=st.booleans(),
)
def test_a_device_buffer_is_free_exactly_when_nothing_refers_to_it(how, prototype):
    """Batch after batch from one buffer, each time keeping something of it (or nothing):
    the buffer is free exactly when nothing kept refers to its memory, and a view a step made
    a leaf comes back plain."""
    from graphbatch.torch._feed_backend import DeviceBuffer

    buf = DeviceBuffer(torch.zeros(256, dtype=torch.uint8))
    assert buf.free()
    for k in how:
        assert buf.free()
        batch = buf.batch("L", _ENTRIES, dict, prototype)
        assert not batch["a"].requires_grad
        kept = _keep(k, batch)
        assert not buf.free()  # the batch itself
        del batch
        assert buf.free() == (k == "nothing"), k
        del kept
        assert buf.free()
