"""Tuple packing strategies through graphbatch.plan: rules per epoch, bounds, determinism,
errors, CLI."""

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import graphbatch as gb
from graphbatch.cli import main

PACK = ["pack-lpf", "pack-spf", "pack-lpf-1d", "pack-nnls", "buckets"]
QM9 = Path(__file__).resolve().parents[2] / "src" / "graphbatch" / "data" / "qm9_radius6_sizes.npz"


def _sizes(seed=0, n=700):
    rng = np.random.default_rng(seed)
    nodes = rng.integers(3, 30, n)
    edges = (nodes * rng.uniform(2, 12, n)).astype(np.int64)
    return gb.GraphSizes(nodes, edges)


def _bound(sizes, idx, budget):
    """max of the three capacity ceilings, in plain integer arithmetic."""
    nodes = int(sizes.n_node[idx].sum())
    edges = int(sizes.n_edge[idx].sum())
    return max(
        -(-nodes // (budget[0] - 1)), -(-edges // budget[1]), -(-len(idx) // (budget[2] - 1))
    )


def test_strategies_registered():
    names = gb.strategy_names()
    for s in PACK:
        assert s in names
    assert "num_shapes" in gb.get_strategy("buckets").options


@pytest.mark.parametrize("strategy", PACK)
@pytest.mark.parametrize("batch_size", [8, 32])
def test_every_graph_once_per_epoch_and_limits(strategy, batch_size):
    sizes = _sizes(batch_size)
    shapes = set()
    for epoch in range(3):
        p = gb.plan(sizes, strategy, batch_size=batch_size, seed=5, epoch=epoch)
        p.validate(sizes)  # each graph exactly once, real content within every padded shape
        b = p.meta["budget"]
        assert (p.graphs_per_batch <= b[2] - 1).all()
        if strategy != "buckets":
            # estimated budget: one tight shape, within the budget, the same every epoch
            (shape,) = p.shapes().tolist()
            assert shape == p.meta["padded_shape"]
            assert all(x <= y for x, y in zip(shape, b, strict=False))
            assert shape == [
                int(p.real_nodes.max()) + 1,
                int(p.real_edges.max()),
                int(p.graphs_per_batch.max()) + 1,
            ]
            shapes.add(tuple(shape))
            assert p.meta["lower_bound"] == _bound(sizes, np.arange(len(sizes)), b)
        else:
            assert p.stats().distinct_shapes <= 4
    assert len(shapes) <= 1  # compile once


@pytest.mark.parametrize("strategy", ["pack-lpf", "pack-spf"])
def test_explicit_budget_and_graph_cap(strategy):
    sizes = _sizes(3)
    budget = (200, 1500, 50)
    p = gb.plan(sizes, strategy, budget=budget, max_graphs_per_pack=6)
    p.validate(sizes)
    assert p.shapes().tolist() == [[200, 1500, 7]]
    assert p.graphs_per_batch.max() <= 6
    assert p.meta["lower_bound"] == _bound(sizes, np.arange(len(sizes)), (200, 1500, 7))


def test_lpf_1d_without_edge_limit_pads_edges_to_worst_pack():
    sizes = _sizes(4)
    p = gb.plan(sizes, "pack-lpf-1d", batch_size=16, edge_limit=False)
    p.validate(sizes)
    assert p.shapes().shape[0] == 1
    assert (p.real_edges <= p.pad_edges).all()


def test_same_seed_epoch_same_plan_and_packs_change_with_epoch():
    sizes = _sizes(1)
    a = gb.plan(sizes, "pack-lpf", batch_size=16, seed=3, epoch=2)
    b = gb.plan(sizes, "pack-lpf", batch_size=16, seed=3, epoch=2)
    c = gb.plan(sizes, "pack-lpf", batch_size=16, seed=3, epoch=3)
    assert np.array_equal(a.order, b.order) and np.array_equal(a.offsets, b.offsets)
    assert not np.array_equal(a.order, c.order)

    # the packs' size patterns stay; which graphs fill them changes
    def pat(p):
        return sorted(
            tuple(sorted(zip(sizes.n_node[x], sizes.n_edge[x], strict=False))) for x in p.batches()
        )

    assert pat(a) == pat(c)
    sets = lambda p: {frozenset(x.tolist()) for x in p.batches()}  # noqa: E731
    assert sets(a) != sets(c)


def test_fixed_packs_keep_graph_sets_and_shuffle_order():
    sizes = _sizes(2)
    plans = [
        gb.plan(sizes, "pack-lpf", batch_size=16, seed=1, epoch=e, fixed_packs=True)
        for e in range(3)
    ]
    sets = [{frozenset(x.tolist()) for x in p.batches()} for p in plans]
    assert sets[0] == sets[1] == sets[2]
    assert not np.array_equal(plans[0].order, plans[1].order)


def test_no_shuffle_is_deterministic_across_epochs():
    sizes = _sizes(2)
    a = gb.plan(sizes, "pack-spf", batch_size=16, epoch=0, shuffle=False)
    b = gb.plan(sizes, "pack-spf", batch_size=16, epoch=9, shuffle=False)
    assert np.array_equal(a.order, b.order)


def test_oversize_policies():
    sizes = gb.GraphSizes([5, 6, 400, 7, 3], [10, 12, 900, 14, 6])
    budget = (64, 128, 4)
    with pytest.raises(ValueError, match="graph 2 \\(400 nodes, 900 edges\\) does not fit"):
        gb.plan(sizes, "pack-lpf", budget=budget)
    p = gb.plan(sizes, "pack-lpf", budget=budget, on_oversize="skip")
    p.validate(sizes)
    assert p.skipped.tolist() == [2]
    p = gb.plan(sizes, "pack-lpf", budget=budget, on_oversize="own_batch")
    p.validate(sizes)
    assert p.num_graphs == 5
    # buckets give the large graph a larger shape instead
    p = gb.plan(sizes, "buckets", budget=budget, num_shapes=2)
    p.validate(sizes)
    assert p.num_graphs == 5 and p.stats().distinct_shapes <= 2
    assert p.pad_nodes.max() >= 401 and p.pad_edges.max() >= 900
    # the large graph's shape has graph slots to spare for small graphs (issue 18): one batch
    assert len(p) == 1 and p.pad_graphs[0] >= 6


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        (dict(heuristic="avg"), ValueError, "unknown heuristic 'avg'"),
        (dict(max_graphs_per_pack=0), ValueError, "max_graphs_per_pack must be >= 1, got 0"),
        (dict(max_graphs_per_pack=-3), ValueError, "got -3"),
        (dict(method="magic"), ValueError, "method must be one of"),
        (dict(fixed_packs="yes"), TypeError, "fixed_packs must be True or False"),
        (dict(num_shapes=1), TypeError, "takes no option"),
    ],
)
def test_bad_options(kwargs, err, match):
    with pytest.raises(err, match=match):
        gb.plan(_sizes(), "pack-lpf", batch_size=16, **kwargs)


@pytest.mark.parametrize("k", [0, 17, -1])
def test_num_shapes_out_of_range(k):
    with pytest.raises(ValueError, match=f"num_shapes must be in 1..16, got {k}"):
        gb.plan(_sizes(), "buckets", batch_size=16, num_shapes=k)


def test_budget_smaller_than_smallest_graph_and_bad_budgets():
    sizes = _sizes()
    with pytest.raises(ValueError, match="does not fit the budget"):
        gb.plan(sizes, "pack-lpf", budget=(3, 5, 8))
    with pytest.raises(ValueError, match=r"Budget\.n_node must be >= 1, got 0"):
        gb.plan(sizes, "pack-lpf", budget=(0, 5, 8))
    with pytest.raises(ValueError, match=r"Budget\.n_edge must be >= 0, got -4"):
        gb.plan(sizes, "pack-spf", budget=(64, -4, 8))
    with pytest.raises(ValueError, match="needs a budget"):
        gb.plan(sizes, "pack-lpf")


@pytest.mark.skipif(not QM9.is_file(), reason="shipped QM9 table missing")
@pytest.mark.parametrize("batch_size", [32, 128])
def test_qm9_at_dynamic_budget_within_half_percent_of_bound(batch_size):
    sizes = gb.GraphSizes.load(QM9)
    p = gb.plan(sizes, "pack-lpf", batch_size=batch_size)
    p.validate(sizes)
    d = gb.plan(sizes, "dynamic", batch_size=batch_size)
    assert p.meta["budget"] == d.meta["budget"]
    assert p.meta["lower_bound"] == d.meta["lower_bound"]
    assert len(p) <= 1.005 * p.meta["lower_bound"]
    assert len(p) <= len(d)


def test_cli_plan_flags_and_limits(tmp_path, capsys):
    sizes = _sizes(6, 300)
    table = tmp_path / "sizes.npz"
    sizes.save(table)
    out = tmp_path / "plan.npz"
    assert (
        main(
            [
                "plan",
                str(table),
                "--strategy",
                "buckets",
                "--batch-size",
                "16",
                "--num-shapes",
                "3",
                "--heuristic",
                "sum",
                "--out",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    stats = json.loads(capsys.readouterr().out)
    assert stats["distinct_shapes"] <= 3
    gb.BatchPlan.load(out).validate(sizes)
    assert (
        main(
            [
                "plan",
                str(table),
                "--strategy",
                "pack-lpf",
                "--batch-size",
                "16",
                "--max-graphs-per-pack",
                "4",
                "--fixed-packs",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert gb.BatchPlan.load(out).graphs_per_batch.max() <= 4
    assert (
        main(
            [
                "plan",
                str(table),
                "--strategy",
                "dynamic",
                "--batch-size",
                "16",
                "--heuristic",
                "sum",
                "--out",
                str(out),
            ]
        )
        == 2
    )
    assert "takes no --heuristic" in capsys.readouterr().err
    assert (
        main(
            [
                "limits",
                str(table),
                "--node-range",
                "40:60",
                "--edge-range",
                "300:400",
                "--grid",
                "3",
                "--method",
                "auto",
                "--json",
            ]
        )
        == 0
    )
    recs = json.loads(capsys.readouterr().out)
    assert all(40 <= r["max_nodes"] <= 60 and 300 <= r["max_edges"] <= 400 for r in recs)
    assert set(recs[0]) >= {
        "max_nodes",
        "max_edges",
        "max_graphs",
        "node_eff",
        "edge_eff",
        "harmonic_mean",
    }
    # json[0] packs to what it says
    best = recs[0]
    st = gb.plan(
        sizes, "pack-lpf", budget=(best["max_nodes"], best["max_edges"], len(sizes) + 1)
    ).stats()
    assert (st.node_efficiency, st.edge_efficiency) == pytest.approx(
        (best["node_eff"], best["edge_eff"])
    )
    with pytest.raises(SystemExit) as exc:  # issue 14: --top -1 was accepted
        main(["limits", str(table), "--top", "-1"])
    assert exc.value.code == 2
    assert "--top" in capsys.readouterr().err
    assert (
        main(
            [
                "limits",
                str(table),
                "--node-range",
                "40:60",
                "--edge-range",
                "300:400",
                "--grid",
                "3",
            ]
        )
        == 0
    )
    assert "harmonic_mean" in capsys.readouterr().out
    assert main(["limits", str(table), "--node-range", "2:4"]) == 2
    assert "cannot hold the largest graph" in capsys.readouterr().err


@settings(max_examples=25, deadline=None)
@given(
    pairs=st.lists(st.tuples(st.integers(1, 12), st.integers(0, 40)), min_size=1, max_size=80),
    strategy=st.sampled_from(PACK),
    cap=st.integers(2, 9),
    seed=st.integers(0, 3),
)
def test_property_every_graph_once_and_within_shape(pairs, strategy, cap, seed):
    nodes = [p[0] for p in pairs]
    edges = [p[1] for p in pairs]
    sizes = gb.GraphSizes(nodes, edges)
    budget = (max(nodes) * 3 + 1, max(max(edges) * 3, 1), cap)
    p = gb.plan(sizes, strategy, budget=budget, seed=seed, epoch=seed + 1)
    p.validate(sizes)
    if strategy != "buckets":
        assert len(p) >= p.meta["lower_bound"] == _bound(sizes, np.arange(len(sizes)), budget)


FIXED_BUDGET_STRATEGIES = ["dynamic", "pack-lpf", "pack-spf", "pack-lpf-1d", "pack-nnls"]


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 120),
    bs=st.integers(2, 20),
    seed=st.integers(0, 5),
    strategy=st.sampled_from(FIXED_BUDGET_STRATEGIES),
    data=st.data(),
)
def test_tight_shapes_hold_every_batch_of_every_epoch(n, bs, seed, strategy, data):
    # issue 18: with an estimated budget the shape is tight, never above the budget, holds every
    # batch, and is the same every epoch (one compilation)
    rng = np.random.default_rng(seed)
    nodes = rng.integers(0, 25, n)
    edges = np.where(nodes > 0, rng.integers(0, 60, n), 0)
    sizes = gb.GraphSizes(nodes, edges)
    shapes = set()
    for epoch in data.draw(st.lists(st.integers(0, 50), min_size=2, max_size=3, unique=True)):
        p = gb.plan(sizes, strategy, batch_size=bs, seed=seed, epoch=epoch, on_oversize="skip")
        p.validate(sizes)
        budget = p.meta["budget"]
        (shape,) = p.shapes().tolist() or [p.meta.get("padded_shape", budget)]
        assert all(x <= y for x, y in zip(shape, budget, strict=False))
        assert (p.real_nodes + 1 <= shape[0]).all() and (p.real_edges <= shape[1]).all()
        assert (p.graphs_per_batch + 1 <= shape[2]).all()
        shapes.add(tuple(shape))
    assert len(shapes) == 1


@pytest.mark.parametrize("strategy", FIXED_BUDGET_STRATEGIES)
def test_user_budget_stays_as_given(strategy):
    sizes = _sizes(2)
    budget = (640, 5120, 40)
    p = gb.plan(sizes, strategy, budget=budget)
    assert p.shapes().tolist() == [list(budget)] and "padded_shape" not in p.meta
    t = gb.plan(sizes, strategy, budget=budget, tight_shape=True)
    t.validate(sizes)
    assert t.meta["budget"] == list(budget)
    (shape,) = t.shapes().tolist()
    assert shape == t.meta["padded_shape"] and all(
        x <= y for x, y in zip(shape, budget, strict=False)
    )


@pytest.mark.parametrize("batch_size", [32, 128])
def test_pack_lpf_at_least_as_tight_as_kk_on_qm9(batch_size):
    sizes = gb.GraphSizes.load(QM9)
    lpf = gb.plan(sizes, "pack-lpf", batch_size=batch_size).stats()
    kk = gb.plan(sizes, "kk", batch_size=batch_size, pad="max").stats()
    assert lpf.node_efficiency >= kk.node_efficiency
    assert lpf.edge_efficiency >= kk.edge_efficiency
    # issue 18, second round: at the bound (bs 128 emitted 1034 for a bound of 1033: the
    # balanced candidate at the bound overflowed the edge limit by a few edges in 47 packs)
    assert lpf.num_batches == lpf.lower_bound


def test_pack_lpf_world_size_keeps_the_packing_tightness():
    # issue 18, second round: with world_size the pack count is rounded up to a multiple of the
    # ranks; the packing spread over the extra packs competes with kk's balanced packs (it was
    # kk's alone: 98.64% node efficiency here at 8 ranks against 99.32% at one rank)
    rng = np.random.default_rng(1)
    nodes = np.clip(np.rint(rng.normal(14.1, 3.3, 60000)), 2, 20).astype(np.int64)
    edges = np.minimum(2 * (nodes - 1 + rng.poisson(1.4, 60000)), 54)
    sizes = gb.GraphSizes(nodes, edges)
    one = gb.plan(sizes, "pack-lpf", batch_size=128).stats()
    p = gb.plan(sizes, "pack-lpf", batch_size=128, world_size=8)
    p.validate(sizes)
    eight = p.stats()
    assert eight.num_batches % 8 == 0 and eight.padding_only_batches == 0
    assert eight.node_efficiency >= one.node_efficiency - 0.002
    assert eight.edge_efficiency >= one.edge_efficiency - 0.002


@settings(max_examples=20, deadline=None)
@given(
    n=st.integers(1, 400),
    bs=st.integers(3, 40),
    world=st.integers(2, 9),
    seed=st.integers(0, 5),
    strategy=st.sampled_from(["pack-lpf", "pack-spf"]),
)
def test_property_ranks_with_tight_shapes(n, bs, world, seed, strategy):
    # issue 18: with world_size and an estimated budget (spread / balanced / repaired packs) every
    # graph is in one batch, batches come in whole steps, and one tight shape holds them all
    rng = np.random.default_rng(seed)
    nodes = rng.integers(1, 30, n)
    edges = rng.integers(0, 90, n)
    sizes = gb.GraphSizes(nodes, edges)
    shapes = set()
    for epoch in (0, 3):
        try:
            p = gb.plan(sizes, strategy, batch_size=bs, world_size=world, seed=seed, epoch=epoch)
        except gb.InputError as e:
            # a graph larger than the budget estimated from a small batch_size (Algorithm 1
            # scales the mean graph): refused by name, as the default on_oversize="error" says
            big = int(str(e).split("graph ")[1].split(" ")[0])
            assert f"graph {big} ({nodes[big]} nodes, {edges[big]} edges) does not fit" in str(e)
            assume(False)
        p.validate(sizes)
        assert len(p) % world == 0
        if n >= len(p):
            assert p.stats().padding_only_batches == 0
        (shape,) = p.shapes().tolist()
        assert all(x <= y for x, y in zip(shape, p.meta["budget"], strict=False))
        assert (p.real_nodes + 1 <= shape[0]).all() and (p.real_edges <= shape[1]).all()
        shapes.add(tuple(shape))
    assert len(shapes) == 1
