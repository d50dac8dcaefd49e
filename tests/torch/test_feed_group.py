"""`gt.DeviceFeed`'s groups: on the slot path a DataLoader task makes ``group`` consecutive
planned batches and sends their messages as one; the feed yields the same batches in the same
order as the 0-worker loader, counts each batch consumed when it is handed out (resume is exact),
raises a worker's error after the batches before it, and shrinks groups to fit a ring that
persistent workers keep from another pass."""

from __future__ import annotations

import multiprocessing

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")
pytest.importorskip("h5py")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import graphbatch.torch as gt  # noqa: E402
from graphbatch import InputError  # noqa: E402
from graphbatch.datasets import GraphStore  # noqa: E402
from graphbatch.torch import _slots, _store_batch  # noqa: E402
from graphbatch.torch._sampler import PlannedBatch, PlannedGroup  # noqa: E402

from ..datasets.test_store_batch import _graphs, _write, assert_same_batch  # noqa: E402

KW = dict(strategy="pack-lpf", batch_size=6, seed=4)
FORK = "fork" in multiprocessing.get_all_start_methods()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return GraphStore(_write(tmp_path_factory.mktemp("feedgroup") / "g.h5", _graphs(90)))


def _digest(batch) -> tuple:
    return tuple(
        (k, v.dtype, tuple(v.shape), v.numpy().tobytes()) for k, v in sorted(batch.items())
    )


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    group=st.integers(1, 5),
    workers=st.integers(1, 2),
    prefetch=st.integers(1, 3),
    depth=st.integers(1, 3),
    persistent=st.booleans(),
)
def test_grouped_batches_equal_the_loaders_in_order_and_count_exactly(
    store, group, workers, prefetch, depth, persistent
):
    """Any group size, worker count, prefetch factor and depth: two epochs of batches equal
    (digest by digest, in order) the 0-worker loader's, and ``state_dict`` counts every
    batch handed out, never one read ahead in a group."""
    ref = gt.loader(store, **KW)
    ld = gt.loader(
        store,
        **KW,
        dataloader_kwargs={
            "num_workers": workers,
            "prefetch_factor": prefetch,
            "persistent_workers": persistent,
        },
    )
    feed = gt.DeviceFeed(ld, "cpu", depth=depth, group=group)
    for epoch in range(2):
        want = [_digest(b) for b in ref]
        got = []
        for i, b in enumerate(feed, start=1):
            got.append(_digest(b))
            assert ld.state_dict()["offset"] == i  # counted when handed out
        assert got == want
        assert ld.epoch == epoch + 1


def test_a_grouped_pass_sends_one_message_per_group(store):
    """With ``raw_pass(group=3)`` and 2 workers each DataLoader task carries up to 3 batches,
    in order, the first ones fewer: 1 for each worker, then 2 (the first batch of a pass comes
    after one batch's work)."""
    ld = gt.loader(store, **KW, dataloader_kwargs={"num_workers": 2})
    collater = ld.collate_fn
    with collater.raw_pass(group=3) as box:
        it, pass_id = ld._begin_pass()
    assert box.group == 3 and box.receiver is not None
    sizes = [len(m) for m in it]
    n = len(ld)
    assert sizes[:4] == [1, 1, 2, 2] and set(sizes[4:-1]) == {3} and sum(sizes) == n
    ld.plan_sampler.cursor.finished(pass_id)


def _ramped_sizes_reference(size: int, ramp: int, n: int) -> list[int]:
    """The group sizes of ``n`` batches, spelled out: ``ramp`` groups each of 1, 2, 4, ...
    while below ``size``, then ``size``; the last group holds what is left."""
    want: list[int] = []
    k = 1 if ramp else size
    while k < size:
        want += [k] * ramp
        k *= 2
    out, left = [], n
    for w in want + [size] * n:
        if left <= 0:
            break
        out.append(min(w, left))
        left -= out[-1]
    return out


@settings(max_examples=60, deadline=None)
@given(size=st.integers(1, 9), ramp=st.integers(0, 4), n=st.integers(0, 60))
def test_ramped_groups_keep_every_batch_in_order(size, ramp, n):
    """`_groups` with a ramp: the batches, flattened, are the input in order; the sizes are
    the reference's (1 per worker, doubling, up to ``size``)."""
    from graphbatch.torch._sampler import _groups

    batches = [PlannedBatch([i], shape=(1, 0, 1)) for i in range(n)]
    groups = list(_groups(iter(batches), size, ramp))
    assert [b for g in groups for b in g] == batches
    assert [len(g) for g in groups] == _ramped_sizes_reference(size, ramp, n)


def test_the_sampler_groups_only_its_own_counted_passes(store):
    ld = gt.loader(store, **KW)
    sampler = ld.plan_sampler
    plain = list(sampler)
    with sampler.grouped(4):
        groups = list(sampler)
        other = gt.loader(store, **KW).plan_sampler
        assert all(isinstance(b, PlannedBatch) for b in other)  # another sampler: not grouped
    assert all(isinstance(g, PlannedGroup) and 1 <= len(g) <= 4 for g in groups)
    flat = [b for g in groups for b in g]
    assert [(list(b), b.shape) for b in flat] == [(list(b), b.shape) for b in plain]
    assert all(isinstance(b, PlannedBatch) for b in sampler)  # outside the block: batches
    with pytest.raises(InputError, match="group size"), sampler.grouped(0):
        pass
    with pytest.raises(InputError, match="group ramp"), sampler.grouped(2, ramp=-1):
        pass


def test_resume_from_a_grouped_feed_is_exact(store):
    """Stopped inside a group (5 of a group of 4's second group), the saved state resumes at
    batch 5, in a loader with other group sizes."""
    ref = list(gt.loader(store, **KW))
    ld = gt.loader(store, **KW, dataloader_kwargs={"num_workers": 2})
    it = iter(gt.DeviceFeed(ld, "cpu", depth=2, group=4))
    for _ in range(5):
        next(it)
    it.close()
    state = ld.state_dict()
    assert state["offset"] == 5
    again = gt.loader(store, **KW, dataloader_kwargs={"num_workers": 1})
    again.load_state_dict(state)
    rest = list(gt.DeviceFeed(again, "cpu", group=3))
    assert len(rest) == len(ref) - 5
    for b, w in zip(rest, ref[5:], strict=True):
        assert_same_batch(b, w)


def test_persistent_workers_keep_their_ring_and_groups_fit_it(store):
    """Workers started by a plain pass keep a ring too small for groups: the feed's pass then
    runs one batch per task; a ring made by a grouped pass serves plain passes too. (Every
    pass runs epoch 0.)"""
    ref = [_digest(b) for b in gt.loader(store, **KW)]
    dl = {"num_workers": 2, "persistent_workers": True}

    def epoch0(batches):
        ld.set_epoch(0)
        return [_digest(b) for b in batches()]

    def raw_messages():
        ld.set_epoch(0)
        with ld.collate_fn.raw_pass(extra_slots=3, group=4) as box:
            it, pass_id = ld._begin_pass()
        messages = list(it)
        ld.plan_sampler.cursor.finished(pass_id)
        return box.group, messages

    ld = gt.loader(store, **KW, dataloader_kwargs=dl)
    assert epoch0(lambda: ld) == ref  # a plain pass starts the workers
    group, messages = raw_messages()
    assert group == 1 and not any(isinstance(m, tuple) for m in messages)
    del messages
    assert epoch0(lambda: gt.DeviceFeed(ld, "cpu", group=4)) == ref

    ld = gt.loader(store, **KW, dataloader_kwargs=dl)
    assert epoch0(lambda: gt.DeviceFeed(ld, "cpu", group=4)) == ref  # a ring for groups
    assert epoch0(lambda: ld) == ref
    group, messages = raw_messages()
    assert group == 4 and sum(len(m) for m in messages) == len(ref)


def test_without_workers_nothing_is_grouped(store):
    ld = gt.loader(store, **KW)
    with ld.collate_fn.raw_pass(group=4) as box:
        it, pass_id = ld._begin_pass()
    assert box.group == 1 and box.receiver is None
    assert all(not isinstance(b, tuple) for b in it)
    ld.plan_sampler.cursor.finished(pass_id)


@pytest.mark.skipif(not FORK, reason="the failing kernel reaches the workers by fork")
@pytest.mark.parametrize("group,depth", [(4, 1), (4, 3), (3, 2)])
def test_a_workers_error_inside_a_group_comes_after_the_batches_before_it(
    store, monkeypatch, group, depth
):
    """Batch 5 (the second of a group of 4) fails in the worker: batches 0-4 are handed
    out, then the worker's error is raised, then the pass is over."""
    ref = list(gt.loader(store, **KW))
    bad = int(ref[5].graph_index[0])
    kernel = _store_batch.StoreBatcher._kernel

    def failing(self, index, shape, allocate=None):
        if bad in np.asarray(index).tolist():
            raise InputError(f"graph {bad} is damaged")
        return kernel(self, index, shape, allocate)

    monkeypatch.setattr(_store_batch.StoreBatcher, "_kernel", failing)
    ld = gt.loader(
        store,
        **KW,
        dataloader_kwargs={"num_workers": 2, "multiprocessing_context": "fork"},
    )
    it = iter(gt.DeviceFeed(ld, "cpu", depth=depth, group=group))
    for w in ref[:5]:
        assert_same_batch(next(it), w)
    with pytest.raises(InputError, match=f"graph {bad} is damaged"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)
    it.close()


@pytest.mark.parametrize("room", [0, 1, 2])
def test_groups_shrink_to_keep_the_ring_under_its_memory_cap(store, monkeypatch, room):
    """A ring for groups stays under `StoreCollater.GROUP_RING_BYTES`: with room for ``room``
    more groups' worth of slots than one batch per task needs, the pass gets groups of
    ``room + 1`` (not the 6 asked for), and the same batches."""
    ref = [_digest(b) for b in gt.loader(store, **KW)]
    ld = gt.loader(store, **KW, dataloader_kwargs={"num_workers": 2, "prefetch_factor": 2})
    collater = ld.collate_fn
    ahead, extra = 3, 3  # prefetch_factor + 1; the feed's extra slots (depth 2)
    per_worker = ahead * (room + 1) + 1 + extra
    slot = collater.slot_bytes(ld) + _slots.HEADER_BYTES
    monkeypatch.setattr(type(collater), "GROUP_RING_BYTES", 2 * per_worker * slot + slot - 1)
    with collater.raw_pass(extra_slots=extra, group=6) as box:
        it, pass_id = ld._begin_pass()
    messages = list(it)
    ld.plan_sampler.cursor.finished(pass_id)
    assert box.group == room + 1
    assert box.receiver is not None and box.receiver.ring.per_worker == per_worker
    sizes = [len(m) if isinstance(m, tuple) else 0 for m in messages]  # 0: a lone message
    assert max(sizes) == (room + 1 if room else 0) and sum(sizes) in (0, len(ref))
    del messages
    ld.set_epoch(0)
    assert [_digest(b) for b in gt.DeviceFeed(ld, "cpu", group=6)] == ref
