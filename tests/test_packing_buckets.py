"""Bucket shapes: optimal choice (brute force) and smallest-fitting assignment in plans."""

import itertools

import numpy as np
import pytest

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
        with pytest.raises(ValueError, match="number of shapes must be in 1..16"):
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
        fits = ((listed[:, 0] - 1 >= p.real_nodes[b]) & (listed[:, 1] >= p.real_edges[b])
                & (listed[:, 2] - 1 >= p.graphs_per_batch[b]))
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
    assert all(b <= a + 1e-9 for a, b in zip(costs, costs[1:])), costs
