"""`packing.repair_overflow`: swaps between packs until every pack fits (issue 18)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphbatch.packing._repair import repair_overflow


def _totals(slot_bin, offsets, bn, be):
    """Per-pack real totals by a plain loop."""
    out = []
    for p in range(len(offsets) - 1):
        bins = slot_bin[offsets[p] : offsets[p + 1]]
        out.append((int(sum(bn[b] for b in bins)), int(sum(be[b] for b in bins))))
    return np.array(out, np.int64).reshape(-1, 2)


def test_one_swap_fixes_the_overflowing_pack():
    # bins: (5, 10), (4, 8), (1, 1); pack 0 = two (5, 10) -> 10 nodes, 20 edges (over 19);
    # pack 1 = (4, 8) + (1, 1) -> 5 nodes, 9 edges: swapping a (5, 10) for the (4, 8) fixes it
    bn, be = np.array([5, 4, 1]), np.array([10, 8, 1])
    sb, off = np.array([0, 0, 1, 2]), np.array([0, 2, 4])
    out = repair_overflow(sb, off, bn, be, node_limit=10, edge_limit=19)
    assert out is not None and (sb == [0, 0, 1, 2]).all()  # input untouched
    tot = _totals(out, off, bn, be)
    assert (tot[:, 0] <= 10).all() and (tot[:, 1] <= 19).all()
    assert sorted(out.tolist()) == [0, 0, 1, 2]


def test_totals_over_the_limits_give_none():
    bn, be = np.array([6]), np.array([1])
    assert repair_overflow(np.array([0, 0, 0]), np.array([0, 2, 3]), bn, be, 11, 10) is None


def test_already_fitting_packs_come_back_unchanged():
    bn, be = np.array([3, 2]), np.array([4, 1])
    sb, off = np.array([1, 0, 1]), np.array([0, 1, 3])
    assert repair_overflow(sb, off, bn, be, 5, 5).tolist() == sb.tolist()


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    packs=st.integers(1, 12),
    per=st.integers(1, 9),
    slack=st.floats(0.0, 0.2),
)
def test_property_counts_and_bins_kept_and_result_fits(seed, packs, per, slack):
    rng = np.random.default_rng(seed)
    nb = int(rng.integers(1, 15))
    bn = rng.integers(0, 30, nb)
    be = rng.integers(0, 80, nb)
    sizes = rng.integers(max(0, per - 1), per + 1, packs)
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    sb = rng.integers(0, nb, int(off[-1]))
    tot = _totals(sb, off, bn, be)
    # limits near the mean load: some packs over, totals (usually) fitting
    lim_n = int(np.ceil(tot[:, 0].mean() * (1 + slack)))
    lim_e = int(np.ceil(tot[:, 1].mean() * (1 + slack)))
    out = repair_overflow(sb, off, bn, be, lim_n, lim_e)
    if out is None:
        return
    assert sorted(out.tolist()) == sorted(sb.tolist())
    new = _totals(out, off, bn, be)
    assert (new[:, 0] <= lim_n).all() and (new[:, 1] <= lim_e).all()


@pytest.mark.parametrize("n_over", [1, 40])
def test_many_small_overflows_repaired(n_over):
    # 200 packs of 20 graphs with edges 95..105, limits 2000 edges: a balanced-but-not-quite
    # partition where n_over packs hold one edge too many and the others have room
    rng = np.random.default_rng(n_over)
    bn = np.arange(11, dtype=np.int64)
    be = 95 + np.arange(11, dtype=np.int64)  # bin b: b nodes, 95 + b edges
    sb = np.full((200, 20), 5, np.int64)  # every pack 20 x (5, 100) = 2000 edges
    over = rng.choice(200, n_over, replace=False)
    sb[over, 0] = 6  # one edge over
    under = rng.choice(np.setdiff1d(np.arange(200), over), n_over, replace=False)
    sb[under, 0] = 4  # totals still fit
    off = np.arange(0, 4001, 20, dtype=np.int64)
    out = repair_overflow(sb.ravel(), off, bn, be, node_limit=1000, edge_limit=2000)
    assert out is not None
    tot = _totals(out, off, bn, be)
    assert (tot[:, 1] <= 2000).all()


def _equal_count_partition_fits(nodes, edges, packs, caps):
    """Brute force: some assignment of the graphs to ``packs`` packs with graph counts differing
    by at most one fits the real-content caps (nodes, edges, graphs)."""
    import itertools

    n = len(nodes)
    for assign in itertools.product(range(packs), repeat=n):
        counts = np.bincount(assign, minlength=packs)
        if counts.max() - counts.min() > 1 or counts.max() > caps[2]:
            continue
        tn = np.bincount(assign, weights=nodes, minlength=packs)
        te = np.bincount(assign, weights=edges, minlength=packs)
        if tn.max() <= caps[0] and te.max() <= caps[1]:
            return True
    return False


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 7), packs=st.integers(1, 3))
def test_equal_counts_cannot_fit_is_a_necessary_condition(seed, n, packs):
    import graphbatch as gb
    from graphbatch.packing._candidates import equal_counts_cannot_fit

    rng = np.random.default_rng(seed)
    nodes = rng.integers(0, 12, n)
    edges = rng.integers(0, 20, n)
    budget = gb.Budget(int(rng.integers(8, 30)), int(rng.integers(10, 50)), int(rng.integers(2, 6)))
    caps = (budget.node_capacity, budget.edge_capacity, budget.graph_capacity)
    bins, _, count = np.unique(
        np.stack([nodes, edges], 1), axis=0, return_inverse=True, return_counts=True
    )
    if equal_counts_cannot_fit(bins[:, 0], bins[:, 1], count, packs, budget):
        assert not _equal_count_partition_fits(nodes, edges, packs, caps)


def test_equal_counts_cannot_fit_heavy_graph():
    import graphbatch as gb
    from graphbatch.packing._candidates import equal_counts_cannot_fit

    # 9 graphs in 3 packs of 3 (95 real nodes per pack): the 90-node graph shares its pack with
    # two others, at least 3 + 3 nodes; with a 2-node graph in the table 90 + 2 + 3 = 95 fits
    budget = gb.Budget(96, 1000, 10)
    zero = np.zeros(3, np.int64)
    assert equal_counts_cannot_fit(np.array([90, 3, 2]), zero, [1, 8, 0], 3, budget)
    assert not equal_counts_cannot_fit(np.array([90, 3, 2]), zero, [1, 7, 1], 3, budget)
    # 4 graphs per pack over a graph capacity of 3
    assert equal_counts_cannot_fit(np.array([1]), np.array([0]), [12], 3, gb.Budget(96, 0, 4))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 300), extra=st.integers(1, 6))
def test_property_spread_packs_keeps_graphs_and_fits(seed, n, extra):
    import graphbatch as gb
    from graphbatch.packing import pack_bins
    from graphbatch.packing._candidates import spread_packs

    rng = np.random.default_rng(seed)
    nodes = rng.integers(1, 20, n)
    edges = rng.integers(0, 50, n)
    bins, _, count = np.unique(
        np.stack([nodes, edges], 1), axis=0, return_inverse=True, return_counts=True
    )
    budget = gb.Budget(
        int(rng.integers(40, 200)), int(rng.integers(100, 500)), int(rng.integers(3, 20))
    )
    res = pack_bins(
        bins[:, 0],
        bins[:, 1],
        count,
        node_limit=budget.node_capacity,
        edge_limit=budget.edge_capacity,
        graph_limit=budget.graph_capacity,
    )
    out = spread_packs(
        res.slot_bin, res.offsets, res.num_packs + extra, bins[:, 0], bins[:, 1], budget
    )
    if out is None:
        return
    sb, off = out
    assert off.shape[0] - 1 == res.num_packs + extra and (np.diff(off) >= 1).all()
    assert sorted(sb.tolist()) == sorted(res.slot_bin.tolist())
    tot = _totals(sb, off, bins[:, 0], bins[:, 1])
    assert (tot[:, 0] <= budget.node_capacity).all() and (tot[:, 1] <= budget.edge_capacity).all()
    assert (np.diff(off) <= budget.graph_capacity).all()
