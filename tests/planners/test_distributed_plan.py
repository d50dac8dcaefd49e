"""Distributed plans (issue 4): world_size ranks per step for every registered strategy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphbatch as gb
from graphbatch.cli import main
from graphbatch.planners._distributed import distribute_plan


def make_sizes(n, seed=0, with_bytes=False):
    rng = np.random.default_rng(seed)
    nodes = rng.integers(1, 40, n)
    edges = nodes * rng.integers(0, 4, n)
    nbytes = (nodes * 100 + edges * 10) if with_bytes else None
    return gb.GraphSizes(nodes, edges, nbytes)


def check_distributed(plan, sizes, world_size):
    """Every rule of a distributed plan, checked with plain loops."""
    plan.validate(sizes)
    n_steps = plan.num_steps
    assert len(plan) == n_steps * world_size
    seen = []
    cells = {}
    for b in range(len(plan)):
        s, r = int(plan.step[b]), int(plan.rank[b])
        assert (s, r) not in cells
        cells[(s, r)] = b
        seen += plan.batch(b).tolist()
    # exactly once across all ranks (skipped graphs are the only ones missing)
    assert sorted(seen + plan.skipped.tolist()) == list(range(len(sizes)))
    assert len(cells) == n_steps * world_size
    for s in range(n_steps):
        shapes = {plan.shape(cells[(s, r)]) for r in range(world_size)}
        assert len(shapes) == 1, f"step {s} mixes shapes {shapes}"
    per_rank = [plan.rank_batches(r) for r in range(world_size)]
    assert all(len(x) == n_steps for x in per_rank)
    for r, idx in enumerate(per_rank):
        assert [int(plan.step[b]) for b in idx] == list(range(n_steps))
        assert all(int(plan.rank[b]) == r for b in idx)
    empties = sum(1 for b in range(len(plan)) if len(plan.batch(b)) == 0)
    assert empties < world_size or plan.graphs_per_batch.sum() == 0
    return empties


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 150),
    strategy=st.sampled_from(gb.strategy_names()),
    world=st.integers(1, 9),
    bs=st.integers(2, 12),
    seed=st.integers(0, 3),
    shuffle=st.booleans(),
)
def test_every_strategy_distributes(n, strategy, world, bs, seed, shuffle):
    sizes = make_sizes(n, seed)
    bs = min(bs, n + 1)
    kw = {"on_oversize": "own_batch"} if gb.get_strategy(strategy).uses_budget else {}
    single = gb.plan(sizes, strategy, batch_size=bs, seed=seed, shuffle=shuffle, **kw)
    plan = gb.plan(
        sizes, strategy, batch_size=bs, seed=seed, shuffle=shuffle, world_size=world, **kw
    )
    if world == 1:
        assert plan.rank is None and plan.step is None
        assert np.array_equal(plan.order, single.order)
        return
    empties = check_distributed(plan, sizes, world)
    # never more steps than the single-device plan needs (dynamic fills steps of its own,
    # under its own seed-only shape: at most the steps of its greedy fill under that shape)
    if strategy != "dynamic":
        assert plan.num_steps <= -(-len(single) // world)
    # issue 18: no padding-only batch when the graphs can fill a multiple of R batches
    planned = len(sizes) - len(plan.skipped)
    assert empties == max(0, plan.num_steps * world - planned)
    s = plan.stats()
    assert s.world_size == world and s.num_steps == plan.num_steps
    assert s.padding_only_batches == empties
    assert s.padding_only_share == pytest.approx(empties / len(plan))


def test_step_imbalance_matches_reference():
    sizes = make_sizes(3000, seed=5)
    plan = gb.plan(sizes, "static-64", batch_size=17, world_size=4, seed=1)
    s = plan.stats()
    ratios_n, ratios_e = [], []
    for step in range(plan.num_steps):
        idx = [b for b in range(len(plan)) if plan.step[b] == step]
        nodes = [int(plan.real_nodes[b]) for b in idx]
        edges = [int(plan.real_edges[b]) for b in idx]
        for vals, out in ((nodes, ratios_n), (edges, ratios_e)):
            mean = sum(vals) / len(vals)
            out.append(max(vals) / mean if mean else 1.0)
    assert s.step_node_imbalance_mean == pytest.approx(sum(ratios_n) / len(ratios_n))
    assert s.step_node_imbalance_max == pytest.approx(max(ratios_n))
    assert s.step_edge_imbalance_mean == pytest.approx(sum(ratios_e) / len(ratios_e))
    assert s.step_edge_imbalance_max == pytest.approx(max(ratios_e))


def test_load_sorting_balances_steps_better_than_plan_order():
    sizes = make_sizes(20_000, seed=6)
    single = gb.plan(sizes, "dynamic", batch_size=32, seed=2)
    ours = gb.plan(sizes, "dynamic", batch_size=32, seed=2, world_size=8).stats()
    # naive: consecutive batches of the single plan form a step
    nb = len(single) - len(single) % 8
    grid = single.real_nodes[:nb].reshape(-1, 8).astype(float)
    naive = float((grid.max(axis=1) / grid.mean(axis=1)).mean())
    assert ours.step_node_imbalance_mean < naive
    assert ours.step_node_imbalance_mean < 1.05


def test_equal_shapes_group_together_for_static_64():
    sizes = make_sizes(5000, seed=7)
    single = gb.plan(sizes, "static-64", batch_size=9)
    dist = gb.plan(sizes, "static-64", batch_size=9, world_size=4)
    # each step pads to its max shape; grouping by shape keeps the padded total close
    assert dist.pad_nodes.sum() <= 1.1 * single.pad_nodes.sum()


def test_deterministic_and_epoch_dependent():
    sizes = make_sizes(2000, seed=8)
    a = gb.plan(sizes, "iqr", batch_size=16, world_size=3, seed=4, epoch=1)
    b = gb.plan(sizes, "iqr", batch_size=16, world_size=3, seed=4, epoch=1)
    c = gb.plan(sizes, "iqr", batch_size=16, world_size=3, seed=4, epoch=2)
    for key in ("order", "offsets", "rank", "step", "pad_nodes"):
        assert np.array_equal(getattr(a, key), getattr(b, key))
    assert not np.array_equal(a.order, c.order)


def test_save_load_roundtrip(tmp_path):
    sizes = make_sizes(300, seed=9, with_bytes=True)
    plan = gb.plan(sizes, "kk", batch_size=8, world_size=5)
    path = plan.save(tmp_path / "p.npz")
    with np.load(path) as data:
        assert data["rank"].dtype == np.int64 and data["step"].dtype == np.int64
    back = gb.BatchPlan.load(path)
    back.validate(sizes)
    assert np.array_equal(back.rank, plan.rank) and np.array_equal(back.step, plan.step)
    assert back.world_size == 5 and back.num_steps == plan.num_steps
    assert np.array_equal(back.rank_batches(2), plan.rank_batches(2))


def test_validate_rejects_broken_distributed_plans():
    sizes = make_sizes(200, seed=10)
    plan = gb.plan(sizes, "dynamic", batch_size=8, world_size=2)
    arrays = plan.to_arrays()
    pad_nodes = arrays["pad_nodes"].copy()
    pad_nodes[1] += 64  # rank 1 of step 0 now differs from rank 0
    broken = gb.BatchPlan(
        arrays["order"],
        arrays["offsets"],
        pad_nodes,
        arrays["pad_edges"],
        arrays["pad_graphs"],
        arrays["skipped"],
        real_nodes=plan.real_nodes,
        real_edges=plan.real_edges,
        rank=plan.rank,
        step=plan.step,
        meta=plan.meta,
    )
    with pytest.raises(ValueError, match="mixes padded shapes"):
        broken.validate()
    swapped = gb.BatchPlan(
        arrays["order"],
        arrays["offsets"],
        arrays["pad_nodes"],
        arrays["pad_edges"],
        arrays["pad_graphs"],
        arrays["skipped"],
        real_nodes=plan.real_nodes,
        real_edges=plan.real_edges,
        rank=plan.rank[::-1],
        step=plan.step,
        meta=plan.meta,
    )
    with pytest.raises(ValueError, match="step-major"):
        swapped.validate()


def test_single_device_rank_access():
    sizes = make_sizes(100)
    plan = gb.plan(sizes, "random", batch_size=8)
    assert plan.num_steps == len(plan)
    assert np.array_equal(plan.rank_batches(0), np.arange(len(plan)))
    with pytest.raises(ValueError, match="out of range"):
        plan.rank_batches(1)
    dist = gb.plan(sizes, "random", batch_size=8, world_size=3)
    with pytest.raises(ValueError, match="out of range"):
        dist.rank_batches(3)
    with pytest.raises(TypeError, match="rank must be an integer"):
        dist.rank_batches("0")
    with pytest.raises(ValueError, match="already distributed"):
        distribute_plan(dist, 2)


@pytest.mark.parametrize(
    "bad, error", [(0, ValueError), (-2, ValueError), (1.5, TypeError), ("2", TypeError)]
)
def test_bad_world_size(bad, error):
    sizes = make_sizes(50)
    with pytest.raises(error, match="world_size"):
        gb.plan(sizes, "dynamic", batch_size=8, world_size=bad)


def test_more_ranks_than_batches():
    sizes = make_sizes(10)
    # 2 batches of 5 at batch size 6, 4 ranks: 4 batches of 2-3 graphs (issue 18: was 2 + 2
    # padding-only batches)
    plan = gb.plan(sizes, "random", batch_size=6, world_size=4)
    assert plan.num_steps == 1 and len(plan) == 4
    check_distributed(plan, sizes, 4)
    assert plan.stats().padding_only_batches == 0
    assert sorted(plan.graphs_per_batch.tolist()) == [2, 2, 3, 3]
    # fewer graphs than ranks: padding-only batches cannot be avoided
    few = gb.plan(make_sizes(3), "random", batch_size=3, world_size=4)
    check_distributed(few, make_sizes(3), 4)
    assert few.stats().padding_only_batches == 1 and few.graphs_per_batch.max() == 1


@pytest.mark.parametrize("strategy", ["dynamic", "pack-lpf", "kk", "buckets"])
def test_split_fills_steps_without_padding_only_batches(strategy):
    sizes = make_sizes(300, seed=4)
    for world in (3, 7, 16):
        plan = gb.plan(sizes, strategy, batch_size=20, world_size=world, seed=1)
        check_distributed(plan, sizes, world)
        assert plan.stats().padding_only_batches == 0
        assert len(plan) % world == 0


def test_cli_world_size(tmp_path, capsys):
    sizes = make_sizes(400, seed=11)
    sizes.save(tmp_path / "s.npz")
    rc = main(
        [
            "plan",
            str(tmp_path / "s.npz"),
            "--strategy",
            "stratified",
            "--batch-size",
            "9",
            "--world-size",
            "4",
            "--pad",
            "max",
            "--out",
            str(tmp_path / "p.npz"),
            "--json",
        ]
    )
    assert rc == 0
    assert '"world_size": 4' in capsys.readouterr().out
    plan = gb.BatchPlan.load(tmp_path / "p.npz")
    check_distributed(plan, sizes, 4)
    assert plan.meta["pad"] == "max" and plan.shapes().shape[0] == 1
    rc = main(
        [
            "plan",
            str(tmp_path / "s.npz"),
            "--strategy",
            "dynamic",
            "--batch-size",
            "9",
            "--world-size",
            "0",
            "--out",
            str(tmp_path / "q.npz"),
        ]
    )
    assert rc == 2
    assert "world_size must be >= 1" in capsys.readouterr().err
    rc = main(
        [
            "plan",
            str(tmp_path / "s.npz"),
            "--strategy",
            "dynamic",
            "--batch-size",
            "9",
            "--pad",
            "max",
            "--out",
            str(tmp_path / "q.npz"),
        ]
    )
    assert rc == 2
    assert "takes no --pad" in capsys.readouterr().err
