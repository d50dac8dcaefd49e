"""Tight bucket shapes by integer cost (`graphbatch.packing.choose_tight_shapes`) against brute
force, the
per-dimension bound, and ``buckets`` with ``tight_shape=True`` / ``shape_cost``."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import graphbatch as gb
from graphbatch.packing import (
    choose_tight_shapes,
    pack_needs,
    shape_padding_bound,
)

needs_st = st.lists(
    st.tuples(st.integers(1, 60), st.integers(0, 90), st.integers(2, 9)), min_size=1, max_size=6
)


def cost_of(shape, c):
    return c[0] + c[1] * shape[0] + c[2] * shape[1] + c[3] * shape[2]


def brute_force(needs, k, c, shape_cost, contiguous_orders=None):
    """Least cost over every assignment of the distinct needs to at most k groups (each group
    padded to its componentwise max); with ``contiguous_orders``, only contiguous groups of
    those orders (what the DP searches)."""
    u = sorted(set(needs))
    w = {x: needs.count(x) for x in u}
    best = None
    if contiguous_orders is None:
        for assign in itertools.product(range(k), repeat=len(u)):
            groups = {}
            for x, g in zip(u, assign, strict=False):
                groups.setdefault(g, []).append(x)
            tot = sum(
                sum(w[x] for x in xs) * cost_of(tuple(map(max, zip(*xs, strict=False))), c)
                + shape_cost
                for xs in groups.values()
            )
            best = tot if best is None else min(best, tot)
        return best
    for order in contiguous_orders:
        seq = sorted(u, key=order)
        for cuts in range(0, min(k, len(seq))):
            for pos in itertools.combinations(range(1, len(seq)), cuts):
                bounds = (0, *pos, len(seq))
                tot = 0
                for a, b in itertools.pairwise(bounds):
                    xs = seq[a:b]
                    tot += (
                        sum(w[x] for x in xs) * cost_of(tuple(map(max, zip(*xs, strict=False))), c)
                        + shape_cost
                    )
                best = tot if best is None else min(best, tot)
    return best


@given(
    needs=needs_st,
    k=st.integers(1, 3),
    c=st.tuples(*[st.integers(0, 5)] * 4),
    shape_cost=st.integers(0, 200),
)
def test_tight_shapes_are_the_best_contiguous_segmentation_and_hold_every_pack(
    needs, k, c, shape_cost
):
    arr = np.array(needs, np.int64)
    base = (16, 24)
    shapes, group, total = choose_tight_shapes(arr, k, base=base, cost=c, shape_cost=shape_cost)
    assert shapes.shape[0] <= k
    assert (shapes[group] >= arr).all()  # every pack held by its shape
    for g in range(shapes.shape[0]):  # each shape is tight: the max of its packs
        assert (shapes[g] == arr[group == g].max(axis=0)).all()
    # the cost reported is the cost of this assignment
    used = shapes.shape[0]
    assert total == sum(cost_of(shapes[g], c) for g in group.tolist()) + used * shape_cost
    orders = (
        lambda x: (max(x[0] * base[1], x[1] * base[0]), x),
        lambda x: x,
        lambda x: (x[1], x[0], x[2]),
    )
    assert total == brute_force(needs, k, c, shape_cost, orders)
    assert total >= brute_force(needs, k, c, shape_cost)  # never below the true optimum


@given(needs=needs_st, k=st.integers(1, 3))
def test_bound_is_exact_per_dimension_and_below_any_k_shapes(needs, k):
    arr = np.array(needs, np.int64)
    bn, be = shape_padding_bound(arr, k)
    for dim, bound in ((0, bn), (1, be)):
        vals = arr[:, dim].tolist()
        best = None  # brute force in one dimension: any grouping into k sizes
        for assign in itertools.product(range(k), repeat=len(vals)):
            tot = 0
            for g in range(k):
                members = [v for v, a in zip(vals, assign, strict=False) if a == g]
                tot += len(members) * max(members, default=0)
            best = tot if best is None else min(best, tot)
        assert bound == best
    shapes, group, _ = choose_tight_shapes(arr, k, base=(10, 10))
    assert int(shapes[group, 0].sum()) >= bn and int(shapes[group, 1].sum()) >= be


def test_pack_needs_reserve_padding_and_round():
    assert pack_needs([10, 64], [0, 65], [3, 1], 64).tolist() == [[64, 0, 4], [128, 128, 2]]
    with pytest.raises(ValueError):
        pack_needs([1], [1], [1], 0)


def test_costs_are_checked():
    arr = np.array([[10, 10, 2]])
    for bad in ((1, 2, 3), (1, -1, 0, 0), (1.5, 0, 0, 0)):
        with pytest.raises((ValueError, TypeError)):
            choose_tight_shapes(arr, 1, base=(1, 1), cost=bad)
    with pytest.raises(ValueError, match="2\\*\\*61"):
        choose_tight_shapes(
            np.array([[2**40, 2**40, 2]] * 3), 1, base=(1, 1), cost=(0, 2**30, 0, 0)
        )


def heavy_sizes(n=4000, seed=5):
    rng = np.random.default_rng(seed)
    nodes = np.minimum(rng.lognormal(3.5, 1.1, n).astype(np.int64) + 2, 60_000)
    nodes[:3] = [40_000, 15_000, 9_000]
    edges = (nodes * rng.uniform(1.2, 1.6, n)).astype(np.int64)
    return gb.GraphSizes(nodes, edges)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_buckets_tight_shapes_never_pad_more_slots_than_the_family(k):
    sizes = heavy_sizes()
    fam = gb.plan(sizes, "buckets", batch_size=64, num_shapes=k)
    tight = gb.plan(sizes, "buckets", batch_size=64, num_shapes=k, tight_shape=True)
    tight.validate(sizes)
    b = fam.meta.get("budget")
    assert tight.stats().distinct_shapes <= k
    n0, e0 = gb.estimate_budget(
        sizes, 64, rng=np.random.default_rng(np.random.SeedSequence(0, spawn_key=(0,)))
    ).as_tuple()[:2]

    def slots(p):  # the family's objective: padded slots relative to the budget
        return int((p.pad_nodes * e0 + p.pad_edges * n0).sum())

    assert slots(tight) <= slots(fam), b
    for i in range(len(tight)):  # every batch in a shape that holds it
        assert tight.pad_nodes[i] >= tight.real_nodes[i] + 1
        assert tight.pad_edges[i] >= tight.real_edges[i]
        assert tight.pad_graphs[i] >= tight.offsets[i + 1] - tight.offsets[i] + 1
    bound = tight.meta["shape_bound"]
    st_ = tight.stats()
    assert st_.node_efficiency <= bound["node_efficiency_max"] + 1e-12
    assert st_.edge_efficiency <= bound["edge_efficiency_max"] + 1e-12


def test_buckets_shape_cost_trades_padding_for_compiles():
    sizes = heavy_sizes()
    cheap = gb.plan(sizes, "buckets", batch_size=64, num_shapes=6, shape_cost=[0, 1, 1, 0, 0])
    dear = gb.plan(sizes, "buckets", batch_size=64, num_shapes=6, shape_cost=[0, 1, 1, 0, 10**12])
    assert dear.stats().distinct_shapes == 1 < cheap.stats().distinct_shapes
    again = gb.plan(sizes, "buckets", batch_size=64, num_shapes=6, shape_cost=[0, 1, 1, 0, 0])
    assert np.array_equal(again.pad_nodes, cheap.pad_nodes)
    assert np.array_equal(again.order, cheap.order)
    for bad in ([1, 2], [0, 1, 1, 0, -1], "12345", [0, 1.5, 1, 0, 0]):
        with pytest.raises((ValueError, TypeError), match="shape_cost"):
            gb.plan(sizes, "buckets", batch_size=64, shape_cost=bad)
