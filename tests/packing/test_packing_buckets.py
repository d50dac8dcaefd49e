"""Bucket shapes: optimal choice (brute force) and smallest-fitting assignment in plans."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphbatch as gb
from graphbatch.packing import choose_scales, shape_for_scale


def _cost(scales, base):
    nn, ne = shape_for_scale(np.asarray(scales), base, 64)
    return nn / base.n_node + ne / base.n_edge


@pytest.mark.parametrize("seed", range(40))
def test_choice_is_optimal_by_brute_force(seed):
    rng = np.random.default_rng(seed)
    base = gb.Budget(640, 9664, 32)
    scales = rng.choice(rng.uniform(0.1, 6, 6), size=int(rng.integers(1, 12)))
    k = int(rng.integers(1, 5))
    chosen, cost = choose_scales(scales, k, base, 64)
    v = np.unique(scales)
    assert len(chosen) <= k and chosen.max() == v.max()
    best = np.inf
    for r in range(1, min(k, len(v)) + 1):
        for sub in itertools.combinations(range(len(v) - 1), r - 1):
            s = v[sorted([*sub, len(v) - 1])]
            best = min(best, sum(_cost(s[np.searchsorted(s, x)], base) for x in scales))
    mine = sum(_cost(chosen[np.searchsorted(chosen, x)], base) for x in scales)
    assert mine == pytest.approx(best) and cost == pytest.approx(best)


def test_out_of_range():
    base = gb.Budget(64, 64, 4)
    for k in (0, 17):
        with pytest.raises(ValueError, match=r"number of shapes must be in 1\.\.16"):
            choose_scales([1.0], k, base, 64)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_plan_uses_at_most_k_shapes_each_batch_smallest_fitting(k):
    rng = np.random.default_rng(k)
    n = np.rint(20 * np.exp(rng.standard_normal(3000))).astype(np.int64) + 1
    sizes = gb.GraphSizes(n, 2 * (n - 1))
    p = gb.plan(sizes, "buckets", batch_size=32, num_shapes=k, seed=2, epoch=1)
    p.validate(sizes)
    shapes = p.shapes()
    assert 1 <= shapes.shape[0] <= k
    listed = np.array(p.meta["shapes"])
    for b in range(len(p)):
        fits = (
            (listed[:, 0] - 1 >= p.real_nodes[b])
            & (listed[:, 1] >= p.real_edges[b])
            & (listed[:, 2] - 1 >= p.graphs_per_batch[b])
        )
        smallest = listed[np.flatnonzero(fits)[0]]
        assert p.shape(b) == tuple(smallest)
    assert n.max() + 1 <= shapes[:, 0].max()  # the largest graph has a bucket


@pytest.mark.parametrize("policy", ["skip", "own_batch"])
def test_more_shapes_never_cost_more_padding(policy):
    # heavy tail: 2% of the graphs larger than the budget; padded slots (nodes / base nodes +
    # edges / base edges, summed over batches) must not grow with K
    rng = np.random.default_rng(5)
    n = np.rint(20 * np.exp(1.1 * rng.standard_normal(3000))).clip(2, None).astype(np.int64)
    big = rng.random(3000) < 0.02
    n[big] = rng.integers(700, 5000, int(big.sum()))
    sizes = gb.GraphSizes(n, 2 * n + rng.integers(0, 4, 3000))
    budget = gb.Budget(1024, 2240, 32)
    costs = []
    for k in (1, 2, 3, 4, 6):
        plan = gb.plan(sizes, "buckets", budget=budget, num_shapes=k, on_oversize=policy)
        plan.validate(sizes)
        assert plan.stats().distinct_shapes <= k
        costs.append(plan.pad_nodes.sum() / 1024 + plan.pad_edges.sum() / 2240)
    assert all(b <= a + 1e-9 for a, b in itertools.pairwise(costs)), costs


def test_zero_edge_budget_never_writes_zero_edge_shapes_for_edges():
    # issue 14: budget edges 0 gave shapes of 0 edges to batches holding edges (exit 0)
    sizes = gb.GraphSizes([5, 6, 7, 8, 3], [3, 0, 4, 2, 0])
    p = gb.plan(sizes, "buckets", budget=(20, 0, 4), num_shapes=2)
    p.validate(sizes)  # real content within every padded shape
    assert (p.real_edges <= p.pad_edges).all() and p.num_graphs == 5
    assert p.meta["lower_bound"] <= len(p)


@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_lower_bound_never_exceeds_batches(k):
    # issue 14: the bound of the budget-sized graphs exceeded the batch count when small graphs
    # filled the room of large shapes
    rng = np.random.default_rng(k)
    n = np.rint(20 * np.exp(rng.standard_normal(2000))).astype(np.int64) + 1
    n[:15] = rng.integers(400, 3000, 15)
    sizes = gb.GraphSizes(n, 2 * (n - 1))
    p = gb.plan(sizes, "buckets", batch_size=32, num_shapes=k)
    p.validate(sizes)
    assert p.meta["lower_bound"] <= len(p)
    # 15-node graphs ride in the room of the 200-node graph's shape: fewer batches than the
    # budget-sized bound of the four small graphs alone (4)
    small = gb.GraphSizes([200, 15, 15, 15, 15], [10, 1, 1, 1, 1])
    p = gb.plan(small, "buckets", budget=(20, 64, 10), num_shapes=k)
    p.validate(small)
    assert p.meta["lower_bound"] <= len(p) < 4


def test_skip_with_every_graph_oversize():
    # issue 14: raised "attempt to get argmax of an empty sequence"
    sizes = gb.GraphSizes([50, 60], [10, 20])
    p = gb.plan(sizes, "buckets", budget=(20, 100, 4), on_oversize="skip")
    assert len(p) == 0 and p.skipped.tolist() == [0, 1]


def test_heavy_tail_large_shapes_get_graph_slots():
    # issue 18: a large graph's shape holds more graph slots, so its room fills with small ones
    rng = np.random.default_rng(5)
    n = rng.integers(5, 40, 3000)
    n[:6] = [900, 1500, 2500, 4000, 6000, 9000]
    sizes = gb.GraphSizes(n, 2 * n)
    for k in (2, 4):
        p = gb.plan(sizes, "buckets", batch_size=32, num_shapes=k)
        p.validate(sizes)
        st = p.stats()
        assert st.distinct_shapes <= k
        assert p.pad_graphs.max() > 32
        assert min(st.node_efficiency, st.edge_efficiency) > 0.9


def test_skewed_budget_shapes_do_not_overflow():
    # found by the edge fuzz: a scale set by the nodes of a (1, 2**40, 2) budget overflowed int64
    # in the edge dimension and wrote a 64-edge shape for a graph of 1.85e10 edges
    sizes = gb.GraphSizes([68719476587], [18539601800])
    plan = gb.plan(sizes, "buckets", budget=(1, 2**40, 2), on_oversize="own_batch")
    plan.validate(sizes)
    assert plan.shape(0)[1] >= 18539601800


@pytest.mark.parametrize("seed", range(30))
def test_choice_is_exactly_optimal_in_rationals(seed):
    # exact costs: the DP's cost equals the brute-force minimum as a fraction, and the chosen
    # scales reach it (no tolerance: ties between choices are broken the same way every time)
    from fractions import Fraction

    from graphbatch.packing import pack_scales

    rng = np.random.default_rng(100 + seed)
    base = gb.Budget(int(rng.integers(65, 700)), int(rng.integers(64, 9000)), 32)
    tn = rng.integers(0, 3 * base.n_node, int(rng.integers(1, 14)))
    te = rng.integers(0, 3 * base.n_edge, tn.shape[0])
    k = int(rng.integers(1, 5))
    ps = pack_scales(tn, te, base, 64)
    chosen, cost = choose_scales(ps, k, base, 64)
    assert isinstance(cost, Fraction) and chosen[-1] == ps.values[-1]

    def price(s):
        nn, ne = shape_for_scale(s, base, 64)
        return Fraction(nn, base.n_node) + Fraction(ne, base.n_edge)

    per_pack = [v for v, c in zip(ps.values, ps.counts.tolist(), strict=False) for _ in range(c)]
    v = list(ps.values)
    best = None
    for r in range(1, min(k, len(v)) + 1):
        for sub in itertools.combinations(range(len(v) - 1), r - 1):
            s = [v[i] for i in sorted([*sub, len(v) - 1])]
            total = sum(price(next(x for x in s if x >= p)) for p in per_pack)
            best = total if best is None else min(best, total)
    assert cost == best
    assert sum(price(next(x for x in chosen if x >= p)) for p in per_pack) == best


def _heavy_sizes(seed: int, n: int = 3000, giants: tuple[int, ...] = (9000, 5000, 2600, 2600)):
    rng = np.random.default_rng(seed)
    nodes = np.round(30 * np.exp(0.8 * rng.standard_normal(n))).astype(np.int64).clip(1, 800)
    nodes[: len(giants)] = giants
    return gb.GraphSizes(nodes, (nodes * 3) // 2)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**16), k=st.integers(1, 6), shuffle=st.booleans(), epoch=st.integers(0, 3)
)
def test_own_oversize_shapes_outside_k(seed, k, shuffle, epoch):
    """``oversize_shapes="own"``: every graph once; each graph above the budget alone in a batch
    of its own enlarged shape; the other batches use at most K shapes, none of them larger
    than needed for budget-sized packs; deterministic per seed and epoch."""
    sizes = _heavy_sizes(seed)
    kw = dict(batch_size=32, seed=seed, epoch=epoch, shuffle=shuffle, num_shapes=k)
    p = gb.plan(sizes, "buckets", on_oversize="own_batch", oversize_shapes="own", **kw)
    assert np.array_equal(np.sort(p.order), np.arange(len(sizes)))
    budget = gb.Budget(*p.meta["budget"])
    big = set(
        np.flatnonzero(
            (sizes.n_node > budget.node_capacity) | (sizes.n_edge > budget.edge_capacity)
        ).tolist()
    )
    assert len(big) == p.meta["own_batches"] >= 1
    shared = set()
    for b in range(p.num_batches):
        graphs = p.order[p.offsets[b] : p.offsets[b + 1]]
        shape = (int(p.pad_nodes[b]), int(p.pad_edges[b]), int(p.pad_graphs[b]))
        assert sizes.n_node[graphs].sum() < shape[0] and sizes.n_edge[graphs].sum() <= shape[1]
        if big & set(graphs.tolist()):
            assert len(graphs) == 1  # alone, in a shape of its own
        else:
            shared.add(shape)
    assert len(shared) <= k
    assert [list(s) for s in sorted(shared)] == sorted(
        s for s in p.meta["shapes"] if tuple(s) in shared
    )
    again = gb.plan(sizes, "buckets", on_oversize="own_batch", oversize_shapes="own", **kw)
    assert np.array_equal(again.order, p.order) and np.array_equal(again.pad_nodes, p.pad_nodes)


def test_own_oversize_shapes_default_is_shared_and_needs_own_batch():
    sizes = _heavy_sizes(1)
    kw = dict(batch_size=32, seed=1, on_oversize="own_batch", num_shapes=4)
    default = gb.plan(sizes, "buckets", **kw)
    shared = gb.plan(sizes, "buckets", oversize_shapes="shared", **kw)
    assert np.array_equal(default.order, shared.order)
    assert np.array_equal(default.pad_nodes, shared.pad_nodes)
    assert default.stats().distinct_shapes <= 4
    with pytest.raises(gb.InputError, match="needs on_oversize='own_batch', got 'error'"):
        gb.plan(sizes, "buckets", batch_size=32, oversize_shapes="own")
    with pytest.raises(gb.InputError, match="oversize_shapes must be 'shared' or 'own'"):
        gb.plan(sizes, "buckets", batch_size=32, on_oversize="own_batch", oversize_shapes=True)


def test_own_oversize_shapes_raise_the_heavy_tail_efficiency():
    """A few giants take one of the K shared shapes away from the many small graphs; with
    shapes of their own, the K shapes fit the small graphs and the efficiency rises."""
    sizes = _heavy_sizes(3, n=20000, giants=(60000, 30000, 12000, 9000, 5000, 5000))
    kw = dict(batch_size=128, seed=0, on_oversize="own_batch", num_shapes=2)
    shared = gb.plan(sizes, "buckets", **kw).stats()
    own = gb.plan(sizes, "buckets", oversize_shapes="own", **kw).stats()
    assert own.node_efficiency > shared.node_efficiency
    assert own.edge_efficiency > shared.edge_efficiency
