"""The ``pack-lpf`` candidate kernels (`graphbatch.packing._candidates`): what a balanced or
spread packing must be, checked on random histograms against plain per-graph sums."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import graphbatch as gb
from graphbatch.packing.kernels import balanced_packs, pack_totals, spread_packs


def _histogram(seed: int, n: int, bins: int):
    rng = np.random.default_rng(seed)
    bin_nodes = rng.integers(1, 30, bins)
    bin_edges = rng.integers(0, 60, bins)
    graph_bin = rng.integers(0, bins, n).astype(np.int32)
    return graph_bin, bin_nodes, bin_edges


def _check_packs(slot_bin, offsets, graph_bin, bin_nodes, bin_edges, caps):
    # every graph exactly once: the slots hold each bin as often as the graphs do
    assert np.array_equal(
        np.bincount(slot_bin, minlength=bin_nodes.shape[0]),
        np.bincount(graph_bin, minlength=bin_nodes.shape[0]),
    )
    tn, te, tg = pack_totals(slot_bin, offsets, bin_nodes, bin_edges)
    want_n = [int(bin_nodes[slot_bin[a:b]].sum()) for a, b in itertools.pairwise(offsets)]
    want_e = [int(bin_edges[slot_bin[a:b]].sum()) for a, b in itertools.pairwise(offsets)]
    assert tn.tolist() == want_n and te.tolist() == want_e
    assert tg.tolist() == np.diff(offsets).tolist()
    cap_n, cap_e, cap_g = caps
    assert (tn <= cap_n).all() and (te <= cap_e).all() and (tg <= cap_g).all()
    return tn, te, tg


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    n=st.integers(1, 400),
    bins=st.integers(1, 12),
    packs=st.integers(1, 40),
    room=st.sampled_from([1.0, 1.3, 3.0]),
)
def test_balanced_packs_are_equal_count_fitting_packs_of_every_graph(seed, n, bins, packs, room):
    graph_bin, bn, be = _histogram(seed, n, bins)
    packs = min(packs, n)
    g = -(-n // packs)
    # a budget about `room` times the mean pack (at least the largest graph)
    cap_n = max(int(bn.max()), int(room * bn[graph_bin].sum() / packs) + 1)
    cap_e = max(int(be.max()), int(room * be[graph_bin].sum() / packs) + 1)
    budget = gb.Budget(cap_n + 1, cap_e, g + 1)
    (got,) = balanced_packs(graph_bin, bn, be, packs, budget)
    if got is None:  # no balanced candidate fits: allowed, never a wrong one
        return
    slot_bin, offsets = got
    assert offsets.shape[0] - 1 == packs
    _, _, tg = _check_packs(
        slot_bin,
        offsets,
        graph_bin,
        bn,
        be,
        (budget.node_capacity, budget.edge_capacity, budget.graph_capacity),
    )
    assert int(tg.max()) - int(tg.min()) <= 1  # graph counts differ by at most one


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    n=st.integers(2, 300),
    bins=st.integers(1, 10),
    packs=st.integers(1, 20),
    extra=st.integers(1, 8),
)
def test_spread_packs_keep_every_graph_and_make_lighter_packs(seed, n, bins, packs, extra):
    graph_bin, bn, be = _histogram(seed, n, bins)
    packs = min(packs, n)
    # the packing given: consecutive graphs, `packs` packs of near-equal counts
    offsets = np.linspace(0, n, packs + 1).astype(np.int64)
    if (np.diff(offsets) == 0).any():
        return
    slot_bin = graph_bin.copy()
    tn, te, _ = pack_totals(slot_bin, offsets, bn, be)
    budget = gb.Budget(int(tn.max()) + 1, int(te.max()), int(np.diff(offsets).max()) + 1)
    got = spread_packs(slot_bin, offsets, packs + extra, bn, be, budget)
    if got is None:  # too few graphs, or no repair: allowed
        return
    new_sb, new_off = got
    assert new_off.shape[0] - 1 == packs + extra
    _check_packs(
        new_sb,
        new_off,
        graph_bin,
        bn,
        be,
        (budget.node_capacity, budget.edge_capacity, budget.graph_capacity),
    )
