"""The one epoch schedule both loaders drive (`graphbatch._schedule`), framework-free: every
graph once per epoch across ranks, resume from any position, fingerprints, the cursor's rules,
and states written before the schedule existed."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphbatch as gb
from graphbatch._chunkplan import plan_epoch
from graphbatch._consistency import PlanVerifier, sizes_digest
from graphbatch._schedule import EpochCursor, EpochSchedule, select_graphs, step_table

from ..strategies import size_tables

STRATEGIES = ("dynamic", "static-pow2", "buckets", "pack-lpf")


@st.composite
def requests(draw):
    """(schedule arguments, dataset size): a size table of a split of a larger dataset (or of
    every graph), a strategy, a batch size, a seed and a shuffle mode."""
    sizes = draw(size_tables(min_graphs=1, max_graphs=80, max_nodes=20, max_edges=60))
    extra = draw(st.integers(0, 20))
    n_total = len(sizes) + extra
    split = draw(st.booleans())
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    indices = rng.permutation(n_total)[: len(sizes)] if split else None
    shuffle = draw(st.sampled_from([True, False, "chunks"]))
    kw = dict(
        strategy=draw(st.sampled_from(STRATEGIES)),
        batch_size=draw(st.integers(2, 12)),
        seed=draw(st.integers(0, 1000)),
        shuffle=shuffle,
        indices=indices,
        extra_padding_nodes=draw(st.integers(0, 1)),
    )
    if shuffle == "chunks":
        kw.update(chunk_graphs=draw(st.integers(1, 16)), window_chunks=draw(st.integers(1, 4)))
    return sizes, kw, n_total


def _schedule(sizes, kw):
    kw = dict(kw)
    return EpochSchedule(sizes, kw.pop("strategy"), **kw)


def _pass(schedule, world, rank, limit=None):
    """One pass as an adapter runs it: begin, report each batch consumed, end when exhausted.
    With ``limit``, the consumer stops after ``limit`` batches without seeing the end (as
    Lightning stops at ``len``): the pass is not ended. The dataset indices of each batch."""
    cursor = schedule.cursor
    this = cursor.begin()
    p = schedule.plan(this.epoch, world)
    out = []
    for b in schedule.steps(this.epoch, world)[this.start :, rank].tolist():
        if limit is not None and len(out) == limit:
            break
        cursor.consumed(this.id)
        out.append(schedule.graphs(p, b).tolist())
    if limit is None:
        cursor.finished(this.id)
    return out


# ------------------------------------------------------------------------- every graph once
@settings(max_examples=60, deadline=None)
@given(req=requests(), world=st.integers(1, 4), epoch=st.integers(0, 5))
def test_every_graph_exactly_once_per_epoch_across_ranks(req, world, epoch):
    sizes, kw, n_total = req
    schedule = _schedule(sizes, kw)
    table = schedule.steps(epoch, world)
    assert table.shape[1] == world
    plan = schedule.plan(epoch, world)
    assert sorted(table.reshape(-1).tolist()) == list(range(len(plan)))  # each batch once
    shares = [schedule.rank_graphs(epoch, world, r) for r in range(world)]
    every = np.concatenate(shares)
    want = np.arange(len(sizes)) if kw["indices"] is None else np.sort(kw["indices"])
    assert np.array_equal(np.sort(every), want)  # once each, dataset indices
    assert every.max() < n_total
    for row in table.tolist():  # the batches of one step share one padded shape
        assert len({schedule.padded_shape(plan, b) for b in row}) == 1
    b = int(table[0, 0])
    assert schedule.padded_shape(plan, b)[0] == plan.shape(b)[0] + kw["extra_padding_nodes"]
    if world == 1:  # the plan is graphbatch.plan's (or the chunk-aware plan) of (seed, epoch)
        kw2 = {k: v for k, v in kw.items() if k not in ("indices", "extra_padding_nodes")}
        ref = plan_epoch(sizes, kw2.pop("strategy"), epoch=epoch, **kw2)
        assert np.array_equal(ref.order, plan.order) and np.array_equal(ref.offsets, plan.offsets)


# ------------------------------------------------------------------------------------ resume
@settings(max_examples=40, deadline=None)
@given(req=requests(), world=st.integers(1, 3), data=st.data())
def test_resume_from_any_position_gives_the_remaining_batches(req, world, data):
    sizes, kw, _ = req
    rank = data.draw(st.integers(0, world - 1))
    epoch = data.draw(st.integers(0, 3))
    ref = _schedule(sizes, kw)
    ref.cursor.set_epoch(epoch)
    whole = _pass(ref, world, rank)
    following = _pass(ref, world, rank)  # epoch + 1
    offset = data.draw(st.integers(0, len(whole)))

    run = _schedule(sizes, kw)
    run.cursor.set_epoch(epoch)
    assert _pass(run, world, rank, limit=offset) == whole[:offset]
    state = json.loads(json.dumps(run.state_dict(world)))  # JSON-safe
    assert (state["epoch"], state["offset"]) == (epoch, offset)

    again = _schedule(sizes, kw)
    again.load_state_dict(state, world_size=world, owner="test")
    again.cursor.set_epoch(epoch if offset < len(whole) else epoch + 1)  # no-op: resume stands
    rest = _pass(again, world, rank)
    if offset < len(whole):
        assert rest == whole[offset:]
        rest = _pass(again, world, rank)
    assert rest == following  # then the next epoch, whole
    assert again.cursor.epoch == epoch + 2 and again.cursor.offset == 0


def test_resume_refuses_an_offset_past_the_epoch_and_non_states():
    s = EpochSchedule(gb.GraphSizes([3] * 20, [2] * 20), "dynamic", batch_size=4)
    n = s.num_steps(0)
    state = s.state_dict(1)
    with pytest.raises(gb.InputError, match=f"past the {n} batches of epoch 0"):
        s.load_state_dict({**state, "offset": n + 1}, world_size=1, owner="X")
    for bad in (None, [], "x", {"offset": 1}):
        with pytest.raises(gb.InputError, match="not a X state"):
            s.load_state_dict(bad, world_size=1, owner="X")
    with pytest.raises(gb.InputError, match="saved with num_replicas = 1, this X has 2"):
        s.load_state_dict(state, world_size=2, owner="X")


# ------------------------------------------------------------------------------ fingerprints
SIZES = gb.GraphSizes(np.arange(40) % 7 + 2, (np.arange(40) % 5) * 3)
BASE = dict(strategy="pack-lpf", budget=(40, 120, 8), seed=2, shuffle=True)


def _fp(sizes=SIZES, world=1, **change):
    kw = {**BASE, **change}
    return EpochSchedule(sizes, kw.pop("strategy"), **kw).fingerprint(world)


def test_the_same_request_has_the_same_fingerprint():
    equal = gb.GraphSizes(SIZES.n_node.copy(), SIZES.n_edge.astype(np.int32))
    assert _fp() == _fp(sizes=equal)
    assert _fp() == _fp(budget=gb.Budget(40, 120, 8)) == _fp(budget=[40, 120, 8])
    assert _fp(seed=2) == _fp(seed=np.int64(2))
    assert json.loads(json.dumps(_fp())) == _fp()


@pytest.mark.parametrize(
    "change",
    [
        dict(seed=3),
        dict(budget=(41, 120, 8)),
        dict(strategy="buckets"),
        dict(shuffle=False),
        dict(on_oversize="skip"),
        dict(shuffle="chunks", chunk_graphs=8),
        dict(extra_padding_nodes=1),
        dict(indices=np.arange(40) + 1),
        dict(world=2),
        dict(sizes=gb.GraphSizes(SIZES.n_node[::-1], SIZES.n_edge[::-1])),
        dict(sizes=gb.GraphSizes(SIZES.n_node, SIZES.n_edge, SIZES.n_node * 10)),
    ],
    ids=lambda c: next(iter(c)),
)
def test_a_different_request_has_a_different_fingerprint(change):
    assert _fp(**change) != _fp()
    state = EpochSchedule(SIZES, "pack-lpf", budget=(40, 120, 8), seed=2).state_dict(1)
    kw = {**BASE, **change}
    world = kw.pop("world", 1)
    other = EpochSchedule(kw.pop("sizes", SIZES), kw.pop("strategy"), **kw)
    with pytest.raises(gb.InputError, match=r"saved with .* another plan request|has no"):
        other.load_state_dict(state, world_size=world, owner="X")


def test_the_size_table_is_hashed_in_one_place():
    s = EpochSchedule(SIZES, "dynamic", batch_size=4)
    fp = s.fingerprint(1)["sizes_sha256"]
    assert fp == sizes_digest(SIZES)
    assert PlanVerifier(SIZES).digests(s.plan(0))["size table"] == fp
    h = hashlib.sha256()  # the format states on disk hold: labelled little-endian int64 arrays
    for name in ("n_node", "n_edge", "n_bytes"):
        h.update(name.encode())
        arr = getattr(SIZES, name)
        if arr is not None:
            h.update(np.asarray(arr, dtype="<i8").tobytes())
    assert fp == h.hexdigest()


# ------------------------------------------------------------ states of earlier versions
# Written by graphbatch before the schedule (commit 265a9f7): a torch PlanBatchSampler's and a
# JAX loader's state over this size table, after two batches of epoch 0.
_RNG = np.random.default_rng(7)
OLD_SIZES = gb.GraphSizes(_RNG.integers(3, 20, 60), _RNG.integers(0, 40, 60))
OLD_TORCH = {
    "epoch": 0,
    "offset": 2,
    "seed": 3,
    "strategy": "dynamic",
    "num_replicas": 1,
    "num_graphs": 60,
    "fingerprint": {
        "strategy": "dynamic",
        "batch_size": 6,
        "budget": None,
        "on_oversize": "error",
        "seed": 3,
        "shuffle": True,
        "num_graphs": 60,
        "sizes_sha256": "d445c6382c428ccd188c2129a941127422cd8363ac37879965fb40456f10d422",
        "extra_padding_nodes": 0,
        "num_replicas": 1,
    },
}
OLD_JAX = {
    "epoch": 0,
    "offset": 2,
    "fingerprint": "e440a01fada75703",
    "world_size": 1,
    "num_graphs": 60,
}


@pytest.mark.parametrize("state", [OLD_TORCH, OLD_JAX], ids=["torch", "jax"])
def test_states_written_before_the_schedule_still_load(state):
    s = EpochSchedule(OLD_SIZES, "dynamic", batch_size=6, seed=3)
    s.load_state_dict(state, world_size=1, owner="X", recorded={"world_size": 1})
    assert (s.cursor.epoch, s.cursor.offset) == (0, 2)
    if state is OLD_TORCH:
        assert s.state_dict(1) == OLD_TORCH  # the same state, field for field
    other = EpochSchedule(OLD_SIZES, "dynamic", batch_size=6, seed=4)
    with pytest.raises(gb.InputError, match="saved"):
        other.load_state_dict(state, world_size=1, owner="X")
    split = EpochSchedule(OLD_SIZES, "dynamic", batch_size=6, seed=3, indices=np.arange(60))
    with pytest.raises(gb.InputError, match=r"saved|has no 'indices_sha256'"):
        split.load_state_dict(state, world_size=1, owner="X")


# ---------------------------------------------------------------------------- the cursor
def test_set_epoch_keeps_a_loaded_resume_point_and_restarts_a_started_epoch():
    c = EpochCursor()
    c.resume_at(2, 5)
    c.set_epoch(2)  # the loop's set_epoch(epoch) after load_state_dict: a no-op
    this = c.begin()
    assert (this.epoch, this.start) == (2, 5)
    c.consumed(this.id)
    c.set_epoch(2)  # something of the pass was consumed: replay epoch 2 from its start
    assert (c.epoch, c.offset, c.armed) == (2, 0, True)
    c.consumed(this.id)  # the overtaken pass no longer counts
    c.finished(this.id)
    assert (c.epoch, c.offset) == (2, 0)


def test_a_pass_stopped_early_is_followed_by_the_next_epoch_ended_or_not():
    c = EpochCursor()
    this = c.begin()
    c.consumed(this.id)
    assert c.begin().epoch == 1  # not ended (a torch DataLoader iterator): at the next pass
    d = EpochCursor()
    this = d.begin()
    d.consumed(this.id)
    d.finished(this.id)  # ended when its iterator closed (the JAX loader)
    assert (d.epoch, d.offset) == (1, 0)
    e = EpochCursor()
    e.begin()  # nothing consumed: does not count
    assert e.begin().epoch == 0


# ----------------------------------------------------------------------- ranks and splits
def test_step_table_refuses_a_plan_of_another_world():
    p = gb.plan(SIZES, "dynamic", batch_size=4, world_size=2)
    assert step_table(p, 2).shape == (len(p) // 2, 2)
    with pytest.raises(gb.InputError, match="plan is for world size 2, not 3"):
        step_table(p, 3)


def test_select_graphs_subsets_a_whole_table_or_reads_the_split_only():
    read = []

    def reader(idx):
        read.append(None if idx is None else idx.tolist())
        return SIZES if idx is None else SIZES.subset(idx)

    assert select_graphs(40, None, None, reader) == (SIZES, None)
    sizes, idx = select_graphs(40, None, [5, 1], reader)
    assert read[-1] == [5, 1] and sizes == SIZES.subset([5, 1]) and idx.tolist() == [5, 1]
    sizes, _ = select_graphs(40, SIZES, [5, 1], reader)
    assert sizes == SIZES.subset([5, 1]) and len(read) == 2
    with pytest.raises(gb.InputError, match="sizes has 40 entries for a source of 41 graphs"):
        select_graphs(41, SIZES, None, reader, what="source")
    with pytest.raises(gb.InputError, match="indices holds 40, out of range for 40 graphs"):
        select_graphs(40, SIZES, [40], reader)
    with pytest.raises(gb.InputError, match="indices has 2 entries for the 40 graphs"):
        EpochSchedule(SIZES, "dynamic", batch_size=4, indices=[0, 1])
