"""Memory-balancing strategies (issue 4): rules checked against plain reference computations."""

from __future__ import annotations

import itertools
import math
import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphbatch as gb
import graphbatch.packing._memory as memory_mod
import graphbatch.packing._partition as partition_mod
from graphbatch.packing._partition import (
    balanced_ldm,
    columns_to_batches,
    refine_by_swaps,
)
from graphbatch.packing._round_matrix import round_matrix

BALANCING = ("random", "balance", "zscore", "iqr", "kk", "stratified")


def lognormal_sizes(n, seed=0, with_bytes=True):
    rng = np.random.default_rng(seed)
    mb = np.clip(rng.lognormal(np.log(192.5), 0.687, n), 11.7, 2833.0)
    nodes = np.maximum(1, np.round(mb / 10)).astype(np.int64)
    edges = (nodes * rng.integers(1, 4, n)).astype(np.int64)
    return gb.GraphSizes(nodes, edges, np.round(mb * 1000).astype(np.int64) if with_bytes else None)


def batch_sets(plan):
    return [tuple(sorted(b.tolist())) for b in plan.batches()]


def ref_round_up(x, m):
    x = max(x, 1)
    return ((x + m - 1) // m) * m


def ref_pow2(x):
    p = 1
    while p < max(x, 1):
        p *= 2
    return p


def ref_percentile(values, q):
    """numpy's default 'linear' percentile written out: position (n - 1) * q / 100."""
    v = sorted(values)
    pos = (len(v) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


sizes_st = st.integers(1, 120).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(1, 60), min_size=n, max_size=n),
        st.lists(st.integers(0, 4), min_size=n, max_size=n),
        st.lists(st.integers(0, 10_000), min_size=n, max_size=n),
        st.booleans(),
    )
)


@settings(max_examples=40, deadline=None)
@given(
    data=sizes_st,
    strategy=st.sampled_from(BALANCING),
    bs=st.integers(2, 12),
    pad=st.sampled_from(("static-64", "pow2", "max")),
    seed=st.integers(0, 3),
)
def test_every_strategy_keeps_the_rules(data, strategy, bs, pad, seed):
    nodes, mult, nbytes, use_bytes = data
    n = len(nodes)
    bs = min(bs, n + 1)
    sizes = gb.GraphSizes(
        nodes, [a * b for a, b in zip(nodes, mult, strict=False)], nbytes if use_bytes else None
    )
    plan = gb.plan(sizes, strategy, batch_size=bs, seed=seed, pad=pad)
    plan.validate(sizes)  # every graph exactly once, content within padded shapes
    k = bs - 1
    nb = -(-n // k)
    assert len(plan) == nb
    gpb = plan.graphs_per_batch.tolist()
    assert max(gpb) <= k and max(gpb) - min(gpb) <= 1 and sum(gpb) == n
    assert (plan.pad_graphs == bs).all()
    for b in range(nb):
        rn, re = int(plan.real_nodes[b]), int(plan.real_edges[b])
        if pad == "static-64":
            assert plan.shape(b)[:2] == (ref_round_up(rn + 1, 64), ref_round_up(re, 64))
        elif pad == "pow2":
            assert plan.shape(b)[:2] == (ref_pow2(rn + 1), ref_pow2(re))
        else:
            assert plan.shape(b)[:2] == (max(plan.real_nodes) + 1, max(plan.real_edges))
    if use_bytes:
        ref = [sum(nbytes[i] for i in batch) for batch in plan.batches()]
        assert plan.real_cost.tolist() == ref


@pytest.mark.parametrize("strategy", BALANCING)
def test_deterministic_for_seed_and_epoch(strategy):
    sizes = lognormal_sizes(2000, seed=1)
    a = gb.plan(sizes, strategy, batch_size=32, seed=5, epoch=2)
    b = gb.plan(sizes, strategy, batch_size=32, seed=5, epoch=2)
    for key in ("order", "offsets", "pad_nodes", "pad_edges", "pad_graphs"):
        assert np.array_equal(getattr(a, key), getattr(b, key))
    c = gb.plan(sizes, strategy, batch_size=32, seed=5, epoch=3)
    assert not np.array_equal(a.order, c.order)  # at least the batch order changes


@pytest.mark.parametrize("strategy", ("random", "zscore", "iqr", "stratified"))
def test_batch_contents_change_across_epochs(strategy):
    sizes = lognormal_sizes(3000, seed=2)
    e0 = set(batch_sets(gb.plan(sizes, strategy, batch_size=16, epoch=0)))
    e1 = set(batch_sets(gb.plan(sizes, strategy, batch_size=16, epoch=1)))
    assert len(e0 & e1) < 0.05 * len(e0)


def test_kk_fixes_batch_contents_across_epochs():
    sizes = lognormal_sizes(3000, seed=2)
    e0 = sorted(batch_sets(gb.plan(sizes, "kk", batch_size=16, epoch=0)))
    e1 = sorted(batch_sets(gb.plan(sizes, "kk", batch_size=16, epoch=1)))
    assert e0 == e1


# ---------------------------------------------------------------- outliers
@settings(max_examples=40, deadline=None)
@given(
    costs=st.lists(st.integers(1, 1000), min_size=4, max_size=80),
    mult=st.sampled_from((0.0, 0.5, 1.5, 3.0)),
    bs=st.integers(2, 6),
    seed=st.integers(0, 5),
)
def test_iqr_no_batch_holds_two_outliers_while_batches_suffice(costs, mult, bs, seed):
    n = len(costs)
    bs = min(bs, n + 1)
    sizes = gb.GraphSizes(np.ones(n, dtype=int), np.zeros(n, dtype=int), costs)
    plan = gb.plan(sizes, "iqr", batch_size=bs, seed=seed, multiplier=mult)
    q1, q3 = ref_percentile(costs, 25), ref_percentile(costs, 75)
    fence = q3 + mult * (q3 - q1)
    outlier = {i for i, c in enumerate(costs) if c > fence}
    assert plan.meta["outliers"] == len(outlier)
    per_batch = [sum(int(i) in outlier for i in batch) for batch in plan.batches()]
    if len(outlier) <= len(plan):
        assert max(per_batch) <= 1
    else:
        assert max(per_batch) - min(per_batch) <= 1


@settings(max_examples=30, deadline=None)
@given(
    costs=st.lists(st.integers(1, 1000), min_size=4, max_size=80),
    threshold=st.sampled_from((0.0, 1.0, 2.0, 3.0)),
    bs=st.integers(2, 6),
)
def test_zscore_outliers_spread_one_per_batch(costs, threshold, bs):
    n = len(costs)
    bs = min(bs, n + 1)
    sizes = gb.GraphSizes(np.ones(n, dtype=int), np.zeros(n, dtype=int), costs)
    plan = gb.plan(sizes, "zscore", batch_size=bs, threshold=threshold)
    mu, sd = statistics.fmean(costs), statistics.pstdev(costs)
    outlier = {i for i, c in enumerate(costs) if sd > 0 and (c - mu) / sd > threshold}
    assert plan.meta["outliers"] == len(outlier)
    per_batch = [sum(int(i) in outlier for i in batch) for batch in plan.batches()]
    assert max(per_batch) - min(per_batch) <= 1


def test_balance_fraction_one_is_bucket_partitioning():
    rng = np.random.default_rng(3)
    costs = rng.permutation(np.arange(1, 61)) * 7  # distinct costs
    sizes = gb.GraphSizes(np.ones(60, dtype=int), np.zeros(60, dtype=int), costs)
    plan = gb.plan(sizes, "balance", batch_size=7, fraction=1.0)  # 6 per batch -> 10 batches
    ranked = sorted(range(60), key=lambda i: -costs[i])
    bucket = {g: pos // 10 for pos, g in enumerate(ranked)}
    for batch in plan.batches():
        assert sorted(bucket[int(g)] for g in batch) == list(range(6))


def test_outlier_strategies_beat_random_on_skewed_data():
    sizes = lognormal_sizes(20_000, seed=4)
    ratio = {
        s: gb.plan(sizes, s, batch_size=64).stats().cost_max_over_mean
        for s in ("random", "iqr", "kk", "stratified")
    }
    assert ratio["kk"] <= ratio["stratified"] <= ratio["iqr"] < ratio["random"]
    assert ratio["kk"] < 1.01


# ----------------------------------------------------------------------- kk
def brute_force_min_max(costs, num_batches, per_batch):
    """Smallest possible heaviest batch over all partitions into equal-size batches."""
    best = math.inf
    idx = list(range(len(costs)))

    def rec(remaining, current_max):
        nonlocal best
        if current_max >= best:
            return
        if not remaining:
            best = current_max
            return
        first, rest = remaining[0], remaining[1:]
        for combo in itertools.combinations(rest, per_batch - 1):
            group = (first, *combo)
            left = [i for i in rest if i not in combo]
            rec(left, max(current_max, sum(costs[i] for i in group)))

    rec(idx, 0)
    return best


@pytest.mark.parametrize("seed", range(12))
def test_kk_is_optimal_for_two_graphs_per_batch(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.choice([4, 6, 8, 10]))
    costs = rng.integers(1, 100, n)
    sizes = gb.GraphSizes(np.ones(n, dtype=int), np.zeros(n, dtype=int), costs)
    plan = gb.plan(sizes, "kk", batch_size=3)  # 2 real graphs per batch
    assert int(plan.real_cost.max()) == brute_force_min_max(costs.tolist(), n // 2, 2)


def test_kk_close_to_brute_force_on_tiny_cases():
    ratios = []
    for seed in range(25):
        rng = np.random.default_rng(100 + seed)
        per = int(rng.choice([3, 4]))
        n = per * 3
        costs = rng.integers(1, 1000, n).tolist()
        sizes = gb.GraphSizes(np.ones(n, dtype=int), np.zeros(n, dtype=int), costs)
        plan = gb.plan(sizes, "kk", batch_size=per + 1)
        opt = brute_force_min_max(costs, 3, per)
        got = int(plan.real_cost.max())
        assert got >= opt
        # provable bound: the final spread never exceeds the largest round spread
        ranked = sorted(costs, reverse=True)
        spread = max(max(ranked[i : i + 3]) - min(ranked[i : i + 3]) for i in range(0, n, 3))
        assert got <= opt + spread
        ratios.append(got / opt)
    assert statistics.fmean(ratios) < 1.02


@settings(max_examples=40, deadline=None)
@given(
    costs=st.lists(st.integers(0, 10_000), min_size=1, max_size=200),
    b=st.integers(1, 20),
    passes=st.integers(0, 4),
)
def test_ldm_and_swaps_keep_cardinalities_and_shrink_spread(costs, b, passes):
    c = np.asarray(costs, dtype=np.float64)
    n = c.shape[0]
    b = min(b, n)
    value, ident = round_matrix(c, b)
    rounds = value.shape[0]
    round_spread = max(float(row.max() - row.min()) for row in value)
    v1, i1 = balanced_ldm(value, ident)
    v1_copy, i1_copy = v1.copy(), i1.copy()
    v2, i2, _ = refine_by_swaps(v1, i1, passes)
    assert np.array_equal(v1, v1_copy) and np.array_equal(i1, i1_copy)  # inputs untouched
    for v, i in ((v1, i1), (v2, i2)):
        assert sorted(i[i >= 0].tolist()) == list(range(n))
        assert np.array_equal(v, np.where(i >= 0, c[np.maximum(i, 0)], 0.0))
        real_per_batch = (i >= 0).sum(axis=0)
        assert real_per_batch.max() <= rounds and real_per_batch.max() - real_per_batch.min() <= 1
    l1, l2 = v1.sum(axis=0), v2.sum(axis=0)
    assert l1.max() - l1.min() <= round_spread + 1e-9
    assert l2.max() <= l1.max() + 1e-9 and l2.min() >= l1.min() - 1e-9
    batch_of = columns_to_batches(i2, n)
    assert np.allclose(np.bincount(batch_of, weights=c, minlength=b), l2)


def test_kk_handles_300k_graphs_in_bounded_memory():
    import tracemalloc

    sizes = lognormal_sizes(300_000, seed=7)
    tracemalloc.start()
    try:
        plan = gb.plan(sizes, "kk", batch_size=64)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 512 * 2**20  # O(N) memory; the textbook k-tuple method needs N*B floats (~11 GB)
    s = plan.stats()
    assert s.cost_max_over_mean < 1.01


# --------------------------------------------------------------- stratified
def test_stratified_without_passes_takes_one_graph_per_stratum():
    sizes = lognormal_sizes(999, seed=8)  # 999 = 37 batches x 27 graphs
    plan = gb.plan(sizes, "stratified", batch_size=28, passes=0)
    nb = len(plan)
    assert nb == 37
    ranked = sorted(range(999), key=lambda i: (-int(sizes.n_bytes[i]), i))
    stratum = {g: pos // nb for pos, g in enumerate(ranked)}
    for batch in plan.batches():
        assert sorted(stratum[int(g)] for g in batch) == list(range(27))


def test_stratified_swaps_only_lower_the_maximum():
    sizes = lognormal_sizes(5000, seed=9)
    raw = gb.plan(sizes, "stratified", batch_size=32, passes=0, epoch=3)
    fixed = gb.plan(sizes, "stratified", batch_size=32, epoch=3)
    assert fixed.real_cost.max() <= raw.real_cost.max()
    assert fixed.meta["swaps"] > 0
    assert sorted(map(sorted, batch_sets(fixed))) != sorted(map(sorted, batch_sets(raw)))


# ---------------------------------------------------------------- cost model
def test_cost_model_bytes_then_linear():
    sizes = gb.GraphSizes([3, 5, 7, 9], [2, 4, 6, 8], [100, 50, 25, 10])
    p = gb.plan(sizes, "kk", batch_size=3)
    assert p.meta["cost_model"] == {"source": "n_bytes"}
    # explicit coefficients select the linear model over n_bytes
    q = gb.plan(sizes, "kk", batch_size=3, cost_nodes=2, cost_edges=0.5)
    assert q.meta["cost_model"] == {"source": "linear", "per_node": 2.0, "per_edge": 0.5}
    s = q.stats()
    ref = [2 * sum(sizes.n_node[b]) + 0.5 * sum(sizes.n_edge[b]) for b in q.batches()]
    assert s.cost_max == max(ref) and s.cost_mean == pytest.approx(statistics.fmean(ref))
    assert s.padded_cost_max == max(2 * q.pad_nodes + 0.5 * q.pad_edges)


def test_memory_stats_match_reference():
    sizes = lognormal_sizes(500, seed=10)
    plan = gb.plan(sizes, "random", batch_size=9)
    s = plan.stats()
    costs = [int(sum(sizes.n_bytes[b])) for b in plan.batches()]
    assert s.cost_source == "n_bytes"
    assert s.cost_max == max(costs)
    assert s.cost_mean == pytest.approx(statistics.fmean(costs))
    assert s.cost_p99 == pytest.approx(ref_percentile(costs, 99))
    assert s.cost_max_over_mean == pytest.approx(max(costs) / statistics.fmean(costs))
    # NNLS bytes-per-node/edge fit from batch totals, applied to padded shapes
    assert s.cost_per_node >= 0 and s.cost_per_edge >= 0
    padded = [
        s.cost_per_node * n + s.cost_per_edge * e
        for n, e in zip(plan.pad_nodes, plan.pad_edges, strict=False)
    ]
    assert s.padded_cost_max == pytest.approx(max(padded))
    # existing fields unchanged
    assert s.num_batches == len(plan) and s.max_pad_nodes == int(plan.pad_nodes.max())


def test_memory_stats_for_other_strategies():
    sizes = lognormal_sizes(800, seed=11, with_bytes=False)
    s = gb.plan(sizes, "dynamic", batch_size=16).stats()
    assert s.cost_source == "linear" and (s.cost_per_node, s.cost_per_edge) == (1.0, 1.0)
    assert s.cost_max >= s.cost_p99 >= s.cost_mean > 0
    assert s.padded_cost_max == s.max_pad_nodes + s.max_pad_edges


# ----------------------------------------------------------------- bad input
@pytest.mark.parametrize("strategy", BALANCING)
def test_batch_size_larger_than_dataset(strategy):
    sizes = gb.GraphSizes([1, 2, 3], [0, 1, 2])
    with pytest.raises(ValueError, match="only 3 graph"):
        gb.plan(sizes, strategy, batch_size=10)
    assert len(gb.plan(sizes, strategy, batch_size=4)) == 1  # 3 real + 1 padding graph


@pytest.mark.parametrize(
    "options, error, match",
    [
        ({"cost_nodes": -1}, ValueError, "negative"),
        ({"cost_edges": -0.5}, ValueError, "negative"),
        ({"cost_nodes": 0, "cost_edges": 0}, ValueError, "both 0"),
        ({"cost_nodes": float("nan")}, ValueError, "finite"),
        ({"cost_nodes": "a"}, TypeError, "real number"),
        ({"pad": "huge"}, ValueError, "pad must be one of"),
        ({"multiple": 0}, ValueError, "multiple"),
    ],
)
def test_bad_options(options, error, match):
    sizes = gb.GraphSizes([1, 2, 3, 4], [0, 1, 2, 3])
    with pytest.raises(error, match=match):
        gb.plan(sizes, "kk", batch_size=3, **options)


def test_strategy_specific_bad_options():
    sizes = gb.GraphSizes([1, 2, 3, 4], [0, 1, 2, 3])
    with pytest.raises(ValueError, match="fraction"):
        gb.plan(sizes, "balance", batch_size=3, fraction=0)
    with pytest.raises(ValueError, match="fraction"):
        gb.plan(sizes, "balance", batch_size=3, fraction=1.5)
    with pytest.raises(ValueError, match="multiplier"):
        gb.plan(sizes, "iqr", batch_size=3, multiplier=-1)
    with pytest.raises(ValueError, match="tolerance"):
        gb.plan(sizes, "stratified", batch_size=3, tolerance=-0.1)
    with pytest.raises(ValueError, match="passes"):
        gb.plan(sizes, "kk", batch_size=3, passes=-1)
    with pytest.raises(TypeError, match="takes no option"):
        gb.plan(sizes, "zscore", batch_size=3, fraction=0.5)
    with pytest.raises(ValueError, match="not a node/edge budget"):
        gb.plan(sizes, "random", budget=(64, 64, 4))
    with pytest.raises(ValueError, match="needs batch_size"):
        gb.plan(sizes, "random")


def test_registered_with_descriptions():
    names = gb.strategy_names()
    for s in BALANCING:
        assert s in names and gb.strategies()[s]


@settings(max_examples=60, deadline=None)
@given(
    r=st.integers(1, 9),
    b=st.integers(1, 40),
    seed=st.integers(0, 2**16),
    chunk=st.integers(1, 50),
    dummy_frac=st.floats(0, 1),
    every=st.booleans(),
    dtype=st.sampled_from([np.int64, np.int16]),
)
def test_columns_in_order_equals_the_transposed_mask(r, b, seed, chunk, dummy_frac, every, dtype):
    # every column in order (read column chunk by column chunk) or a permutation of them
    # (through the batch-major copy): the same entries as the whole-matrix mask
    rng = np.random.default_rng(seed)
    ident = rng.permutation(r * b).astype(np.int32).reshape(r, b)
    ident[rng.random((r, b)) < dummy_frac] = -1
    cols = np.arange(b) if every else rng.permutation(b)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(memory_mod, "PARTITION_CHUNK", chunk)
        order, counts = partition_mod.columns_in_order(ident, None if every else cols, dtype=dtype)
    rows = ident.T[cols]
    keep = rows >= 0
    assert order.dtype == dtype and counts.dtype == np.int64
    assert np.array_equal(order, rows[keep]) and np.array_equal(counts, keep.sum(axis=1))
