"""A schedule's epoch-independent work (the packs of ``pack-*`` and ``buckets``, ``kk``'s
batches, the tight shape of ``dynamic``) is done once (`graphbatch.planners.planning_memo`):
every epoch's plan from an `EpochSchedule` -- in any order of epochs and world sizes -- is the
plan `graphbatch.plan` makes afresh, digest for digest (arrays and metadata but timings); the
memo serves only its own sizes, keeps at most `MAX_ENTRIES` results and read-only arrays."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphbatch as gb
from graphbatch._consistency import plan_digest
from graphbatch._schedule import EpochSchedule
from graphbatch.planners import PlanMemo, planning_memo
from graphbatch.planners._memo import MAX_ENTRIES, memo_for
from graphbatch.planners._registry import PlanRequest


def _sizes(draw_nodes: list[int], spread: int) -> gb.GraphSizes:
    nodes = np.asarray(draw_nodes, dtype=np.int64)
    return gb.GraphSizes(nodes, nodes * spread // 2)


CONFIGS = [
    ("pack-lpf", {}),
    ("pack-spf", {}),
    ("pack-lpf", {"tight_shape": False}),
    ("pack-lpf", {"fixed_packs": True}),
    ("pack-lpf", {"heuristic": "sum", "max_graphs_per_pack": 6}),
    ("pack-lpf", {"on_oversize": "skip", "budget": (24, 60, 5)}),
    ("pack-spf", {"on_oversize": "own_batch", "budget": (24, 60, 5)}),
    ("pack-lpf", {"shuffle": False}),
    ("dynamic", {}),
    ("dynamic", {"tight_shape": False}),
    ("dynamic", {"on_oversize": "own_batch", "budget": (24, 60, 5)}),
    ("kk", {}),
    ("kk", {"passes": 0, "pad": "pow2"}),
    ("kk", {"cost_nodes": 1, "cost_edges": 3}),
    ("buckets", {"num_shapes": 3}),
    ("buckets", {"num_shapes": 2, "tight_shape": True}),
    ("buckets", {"num_shapes": 2, "shape_cost": [0, 1, 1, 1, 5], "budget": (24, 60, 5)}),
    ("buckets", {"on_oversize": "own_batch", "oversize_shapes": "own", "budget": (24, 60, 5)}),
    ("buckets", {"on_oversize": "skip", "budget": (24, 60, 5)}),
]


@settings(max_examples=40, deadline=None)
@given(
    nodes=st.lists(st.integers(1, 30), min_size=3, max_size=120),
    spread=st.integers(0, 6),
    config=st.sampled_from(CONFIGS),
    seed=st.integers(0, 3),
    calls=st.lists(
        st.tuples(st.integers(0, 3), st.sampled_from([1, 2, 3])), min_size=2, max_size=7
    ),
)
def test_every_epoch_equals_a_fresh_plan(nodes, spread, config, seed, calls):
    strategy, options = config
    sizes = _sizes(nodes, spread)
    opts = dict(options)
    if "budget" not in opts:
        opts["batch_size"] = 8
    schedule = EpochSchedule(sizes, strategy, seed=seed, **opts)
    for epoch, world in calls:
        try:
            fresh = gb.plan(sizes, strategy, seed=seed, epoch=epoch, world_size=world, **opts)
        except gb.GraphbatchError as exc:  # the schedule refuses the same request alike
            with pytest.raises(type(exc)):
                schedule.plan(epoch, world)
            continue
        assert plan_digest(schedule.plan(epoch, world)) == plan_digest(fresh)


def test_the_packs_are_made_once_per_configuration():
    sizes = _sizes(list(range(1, 200)) * 3, 3)
    schedule = EpochSchedule(sizes, "pack-lpf", batch_size=16, seed=1)
    for epoch in range(4):
        schedule.plan(epoch)
    memo = schedule._memo
    assert len(memo) == 1 and memo.hits == 3  # one packing, reused by epochs 1-3
    schedule.plan(0, world_size=2)
    assert len(memo) == 2  # another world size: its own packs


def test_the_memo_serves_only_its_sizes_and_stays_bounded():
    sizes = _sizes([3, 4, 5, 6], 2)
    other = _sizes([3, 4, 5, 6], 2)  # equal, but another table: not served
    memo = PlanMemo(sizes)
    req = PlanRequest(sizes, "pack-lpf", 4, None, 0, 0, True, "error")
    assert memo_for(req) is None  # outside a planning_memo block
    with planning_memo(memo):
        assert memo_for(req) is memo
        assert memo_for(PlanRequest(other, "pack-lpf", 4, None, 0, 0, True, "error")) is None
    for k in range(MAX_ENTRIES + 3):
        assert memo.get(k, lambda k=k: [k]) == [k]
    assert len(memo) == MAX_ENTRIES
    assert memo.get(MAX_ENTRIES + 2, lambda: "new") == [MAX_ENTRIES + 2]  # kept: the newest


def test_kept_packs_are_read_only():
    sizes = _sizes(list(range(1, 60)), 3)
    schedule = EpochSchedule(sizes, "pack-lpf", batch_size=8)
    schedule.plan(0)
    (packs,) = schedule._memo._items.values()
    assert not packs.slot_bin.flags.writeable and not packs.pack_offsets.flags.writeable
