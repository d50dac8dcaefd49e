"""Static and dynamic planners: invariants (property-based), exact values, oversize policies."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import graphbatch as gb
from graphbatch.planners import greedy_offsets

from .._packing_util import greedy_offsets_reference
from ..strategies import size_tables

FOUNDATION = ("static-constant", "static-64", "static-pow2", "dynamic")


def check_exactly_once(plan: gb.BatchPlan, n: int) -> None:
    allidx = np.concatenate([plan.order, plan.skipped])
    assert np.array_equal(np.sort(allidx), np.arange(n))


def check_within_shape(plan: gb.BatchPlan, sizes: gb.GraphSizes) -> None:
    for b, idx in enumerate(plan.batches()):
        nodes, edges = int(sizes.n_node[idx].sum()), int(sizes.n_edge[idx].sum())
        assert nodes == plan.real_nodes[b] and edges == plan.real_edges[b]
        assert nodes <= plan.pad_nodes[b] - 1  # one padding node reserved
        assert edges <= plan.pad_edges[b]
        assert len(idx) <= plan.pad_graphs[b] - 1  # one padding graph reserved


@given(
    sizes=size_tables(),
    strategy=st.sampled_from(FOUNDATION),
    batch_size=st.integers(2, 40),
    epoch=st.integers(0, 5),
)
def test_every_graph_once_and_within_shape(sizes, strategy, batch_size, epoch):
    plan = gb.plan(sizes, strategy, batch_size=batch_size, epoch=epoch, on_oversize="own_batch")
    check_exactly_once(plan, len(sizes))
    check_within_shape(plan, sizes)
    plan.validate(sizes)
    assert plan.stats().num_batches >= plan.stats().lower_bound


@given(sizes=size_tables(), strategy=st.sampled_from(FOUNDATION), batch_size=st.integers(2, 40))
def test_deterministic_and_epoch_dependent(sizes, strategy, batch_size):
    a = gb.plan(sizes, strategy, batch_size=batch_size, seed=3, epoch=1, on_oversize="skip")
    b = gb.plan(sizes, strategy, batch_size=batch_size, seed=3, epoch=1, on_oversize="skip")
    for key, arr in a.to_arrays().items():
        if key != "meta":
            assert np.array_equal(arr, b.to_arrays()[key]), key


def test_epochs_change_order(molecule_sizes):
    a = gb.plan(molecule_sizes, "dynamic", batch_size=32, epoch=0)
    b = gb.plan(molecule_sizes, "dynamic", batch_size=32, epoch=1)
    assert not np.array_equal(a.order, b.order)
    assert a.shapes().tolist() == b.shapes().tolist()  # budget fixed per seed: one compilation
    c = gb.plan(molecule_sizes, "dynamic", batch_size=32, shuffle=False)
    assert np.array_equal(c.order, np.arange(len(molecule_sizes)))


@given(sizes=size_tables(min_graphs=1, max_graphs=200), batch_size=st.integers(2, 40))
def test_fixed_shape_strategies_emit_one_shape(sizes, batch_size):
    for strategy in ("static-constant", "dynamic"):
        plan = gb.plan(sizes, strategy, batch_size=batch_size, on_oversize="skip")
        assert plan.stats().distinct_shapes <= 1


@given(
    sizes=size_tables(max_graphs=400),
    n_node=st.integers(2, 200),
    n_edge=st.integers(0, 800),
    n_graph=st.integers(2, 40),
)
def test_greedy_matches_reference_loop(sizes, n_node, n_edge, n_graph):
    budget = gb.Budget(n_node, n_edge, n_graph)
    fits = (sizes.n_node <= budget.node_capacity) & (sizes.n_edge <= budget.edge_capacity)
    nodes, edges = sizes.n_node[fits], sizes.n_edge[fits]
    assert np.array_equal(
        greedy_offsets(nodes, edges, budget), greedy_offsets_reference(nodes, edges, budget)
    )


def test_static_exact_values():
    sizes = gb.GraphSizes([10, 20, 30, 40, 5], [100, 0, 63, 1, 64])
    p64 = gb.plan(sizes, "static-64", batch_size=3, shuffle=False)
    assert p64.offsets.tolist() == [0, 2, 4, 5]
    # batch totals: (30,100), (70,64), (5,64); one node reserved -> 31 -> 64, 71 -> 128, 6 -> 64
    assert p64.pad_nodes.tolist() == [64, 128, 64]
    assert p64.pad_edges.tolist() == [128, 64, 64]
    assert p64.pad_graphs.tolist() == [3, 3, 3]
    p2 = gb.plan(sizes, "static-pow2", batch_size=3, shuffle=False)
    assert p2.pad_nodes.tolist() == [32, 128, 8]
    assert p2.pad_edges.tolist() == [128, 64, 64]
    pc = gb.plan(sizes, "static-constant", batch_size=3, shuffle=False)
    # largest graph 40 nodes x 3 = 120 -> 128; 100 edges x 3 = 300 -> 320
    assert set(pc.pad_nodes.tolist()) == {128} and set(pc.pad_edges.tolist()) == {320}
    assert pc.stats().lower_bound == 3


def test_dynamic_exact_greedy():
    sizes = gb.GraphSizes([3, 3, 3, 1, 5], [2, 2, 2, 0, 9])
    p = gb.plan(sizes, "dynamic", budget=(8, 10, 3), shuffle=False)
    # capacity 7 nodes / 10 edges / 2 graphs: [0,1] (6 n), [2,3] (4 n), [4]
    assert p.offsets.tolist() == [0, 2, 4, 5]
    assert p.stats().lower_bound == max(-(-15 // 7), -(-15 // 10), -(-5 // 2))
    assert p.stats().distinct_shapes == 1


def test_dynamic_budget_from_batch_size_is_algorithm1(molecule_sizes):
    p = gb.plan(molecule_sizes, "dynamic", batch_size=32, sample_size=None)
    mean_v = molecule_sizes.n_node.mean()
    mean_e = molecule_sizes.n_edge.mean()
    assert p.meta["budget"] == [
        gb.round_up(int(np.ceil(mean_v * 32)), 64),
        gb.round_up(int(np.ceil(mean_e * 32)), 64),
        32,
    ]


def test_oversize_policies():
    sizes = gb.GraphSizes([5, 100, 5, 5, 70], [4, 10, 4, 4, 200])
    budget = (64, 64, 4)
    with pytest.raises(ValueError, match=r"graph 1 \(100 nodes, 10 edges\) does not fit"):
        gb.plan(sizes, "dynamic", budget=budget, shuffle=False)
    skip = gb.plan(sizes, "dynamic", budget=budget, on_oversize="skip", shuffle=False)
    assert skip.skipped.tolist() == [1, 4] and skip.stats().skipped == 2
    assert sorted(skip.order.tolist()) == [0, 2, 3]
    own = gb.plan(sizes, "dynamic", budget=budget, on_oversize="own_batch", shuffle=False)
    check_exactly_once(own, 5)
    check_within_shape(own, sizes)
    singles = [b for b in own.batches() if b.tolist() in ([1], [4])]
    assert len(singles) == 2
    assert own.stats().distinct_shapes == 3  # the budget + two enlarged shapes
    assert own.order.tolist()[0] == 0 and own.batch(1).tolist() == [1]  # placed where it came up


def test_bad_input_errors(molecule_sizes):
    with pytest.raises(ValueError, match="unknown strategy 'nope'"):
        gb.plan(molecule_sizes, "nope", batch_size=8)
    with pytest.raises(TypeError, match="takes no option"):
        gb.plan(molecule_sizes, "dynamic", batch_size=8, bogus=1)
    with pytest.raises(ValueError, match="batch_size = 1"):
        gb.plan(molecule_sizes, "static-64", batch_size=1)
    with pytest.raises(ValueError, match="needs batch_size"):
        gb.plan(molecule_sizes, "static-64")
    with pytest.raises(ValueError, match="give batch_size, not a node/edge budget"):
        gb.plan(molecule_sizes, "static-64", budget=(64, 64, 4))
    with pytest.raises(ValueError, match="n_graph = 1"):
        gb.plan(molecule_sizes, "dynamic", budget=(640, 640, 1))
    with pytest.raises(ValueError, match="on_oversize"):
        gb.plan(molecule_sizes, "dynamic", batch_size=8, on_oversize="drop")
    with pytest.raises(TypeError, match="GraphSizes"):
        gb.plan([1, 2, 3], "dynamic", batch_size=8)
    with pytest.raises(ValueError, match="seed must be >= 0"):
        gb.plan(molecule_sizes, "dynamic", batch_size=8, seed=-1)


def test_plan_file_round_trip(tmp_path, molecule_sizes):
    p = gb.plan(molecule_sizes, "dynamic", batch_size=16, on_oversize="skip")
    path = p.save(tmp_path / "plan.npz")
    with np.load(path, allow_pickle=False) as f:
        for key in ("order", "offsets", "pad_nodes", "pad_edges", "pad_graphs", "skipped"):
            assert f[key].dtype == np.int64
    q = gb.BatchPlan.load(path)
    assert np.array_equal(q.order, p.order) and np.array_equal(q.offsets, p.offsets)
    assert q.stats() == p.stats()
    q.validate(molecule_sizes)


def test_validate_catches_violations(molecule_sizes):
    p = gb.plan(molecule_sizes, "dynamic", batch_size=16)
    arrays = p.to_arrays()
    bad_order = arrays["order"].copy()
    bad_order[0] = bad_order[1]
    bad = gb.BatchPlan(
        bad_order,
        p.offsets,
        p.pad_nodes,
        p.pad_edges,
        p.pad_graphs,
        real_nodes=p.real_nodes,
        real_edges=p.real_edges,
    )
    with pytest.raises(ValueError, match="exactly once"):
        bad.validate(molecule_sizes)
    small = gb.BatchPlan(
        p.order,
        p.offsets,
        p.real_nodes,
        p.pad_edges,
        p.pad_graphs,
        real_nodes=p.real_nodes,
        real_edges=p.real_edges,
    )
    with pytest.raises(ValueError, match="over its padded shape"):
        small.validate()


def test_stats_values():
    sizes = gb.GraphSizes([3, 3, 3, 1], [2, 2, 2, 0])
    p = gb.plan(sizes, "dynamic", budget=(8, 10, 3), shuffle=False)
    s = p.stats()
    assert s.num_batches == 2 and s.node_efficiency == pytest.approx(10 / 16)
    assert s.edge_efficiency == pytest.approx(6 / 20)
    assert s.graph_efficiency == pytest.approx(4 / 6)
    assert (s.graphs_per_batch_min, s.graphs_per_batch_max) == (2, 2)
