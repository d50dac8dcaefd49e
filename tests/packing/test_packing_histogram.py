"""Histogram packers (LPF/SPF, balanced dealing, NNLS) and per-epoch assignment, against brute
force and plain rule checks."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from graphbatch.packing import (
    HEURISTICS,
    assign_graphs,
    balanced_pack,
    heuristic_function,
    heuristic_keys,
    lower_bound,
    pack_bins,
    pack_histogram,
    pack_nnls,
)

from .._packing_util import brute_force_min_packs, expand


def _arrays(hist):
    keys = sorted(hist)
    return (
        np.array([k[0] for k in keys]),
        np.array([k[1] for k in keys]),
        np.array([hist[k] for k in keys]),
    )


def _check_slots(slot_bin, offsets, n, e, count, cn, ce, cg):
    assert np.array_equal(np.bincount(slot_bin, minlength=n.shape[0]), count)
    sizes = np.diff(offsets)
    assert (sizes >= 1).all() and (sizes <= cg).all()
    tn = np.add.reduceat(n[slot_bin], offsets[:-1])
    te = np.add.reduceat(e[slot_bin], offsets[:-1])
    assert (tn <= cn).all() and (te <= ce).all()


def test_min_is_minimum_and_heuristics_monotone():
    assert heuristic_function("min")(np.float64(0.2), np.float64(0.7)) == pytest.approx(0.2)
    assert heuristic_function("max")(np.float64(0.2), np.float64(0.7)) == pytest.approx(0.7)
    g = np.linspace(0, 1, 6)
    a, b = np.meshgrid(g, g, indexing="ij")
    for name, h in HEURISTICS.items():
        v = h(a, b)
        assert (np.diff(v, axis=0) >= -1e-12).all() and (np.diff(v, axis=1) >= -1e-12).all(), name
        assert h(np.float64(0), np.float64(0)) == 0, name


@given(
    name=st.sampled_from(sorted(HEURISTICS)),
    data=st.data(),
    caps=st.tuples(
        st.sampled_from([1, 7, 64, 575, 1152, 2**20, 2**40]),
        st.sampled_from([0, 1, 12, 640, 1152, 2**33, 2**40]),
    ),
)
def test_heuristic_keys_order_like_the_exact_fractions(name, data, caps):
    # the packers' integer keys against the heuristic on exact rationals (ties included),
    # int64 and Python-int keys alike
    cx, cy = caps
    xs = data.draw(st.lists(st.integers(0, cx), min_size=2, max_size=12))
    ys = data.draw(st.lists(st.integers(0, max(cy, 0)), min_size=len(xs), max_size=len(xs)))
    h = HEURISTICS[name]
    exact = [
        h(Fraction(x, max(cx, 1)), Fraction(y, max(cy, 1))) for x, y in zip(xs, ys, strict=False)
    ]
    keys = heuristic_keys(name, np.array(xs), np.array(ys), cx, cy).tolist()
    for i in range(len(xs)):
        assert heuristic_keys(name, xs[i], ys[i], cx, cy) == keys[i]
        for j in range(len(xs)):
            assert (keys[i] < keys[j]) == (exact[i] < exact[j])
            assert (keys[i] == keys[j]) == (exact[i] == exact[j])


def test_unknown_heuristic_is_rejected():
    with pytest.raises(ValueError, match="unknown heuristic 'mean'"):
        heuristic_function("mean")


# hand-made histograms: (histogram, node cap, edge cap, graph cap)
HAND_MADE = [
    ({(2, 2): 10}, 10, 10, 5),  # copies of one size must share packs
    ({(6, 10): 3, (4, 6): 3}, 10, 16, 4),  # perfect complements
    ({(7, 3): 2, (3, 7): 2}, 10, 10, 2),  # mixed ratios pair up
    ({(9, 1): 1, (1, 9): 1, (5, 5): 2}, 10, 10, 4),
    ({(3, 3): 7}, 9, 100, 2),  # the graph cap binds
]


@pytest.mark.parametrize("case", HAND_MADE)
@pytest.mark.parametrize("heuristic", sorted(HEURISTICS))
def test_lpf_each_heuristic_reaches_brute_force_optimum(case, heuristic):
    hist, cn, ce, cg = case
    n, e, c = _arrays(hist)
    opt = brute_force_min_packs(expand(hist), cn, ce, cg)
    pats = pack_histogram(
        n, e, c, node_limit=cn, edge_limit=ce, graph_limit=cg, heuristic=heuristic, fit="best"
    )
    sb, off = pats.slots()
    _check_slots(sb, off, n, e, c, cn, ce, cg)
    assert pats.num_packs == opt


def test_lpf_known_gap_greedy_copies():
    """Best fit puts two (5, 5) per pack first; the optimum mixes (5,5)+(3,2)+(2,3). LPF is a
    heuristic: 4 packs where 3 suffice (brute force)."""
    hist = {(5, 5): 4, (3, 2): 2, (2, 3): 2}
    n, e, c = _arrays(hist)
    assert brute_force_min_packs(expand(hist), 10, 10, 3) == 3
    pats = pack_histogram(n, e, c, node_limit=10, edge_limit=10, graph_limit=3)
    assert pats.num_packs == 4


@pytest.mark.parametrize("fit", ["best", "first"])
@pytest.mark.parametrize("heuristic", sorted(HEURISTICS))
def test_random_tiny_histograms_valid_and_not_below_optimum(fit, heuristic):
    rng = np.random.default_rng(7)
    for _ in range(12):
        k = int(rng.integers(1, 5))
        hist = {}
        for _ in range(k):
            key = (int(rng.integers(1, 6)), int(rng.integers(0, 8)))
            hist[key] = hist.get(key, 0) + int(rng.integers(1, 4))
        if sum(hist.values()) > 10:
            continue
        cn, ce, cg = 8, 12, int(rng.integers(1, 5))
        n, e, c = _arrays(hist)
        pats = pack_histogram(
            n, e, c, node_limit=cn, edge_limit=ce, graph_limit=cg, heuristic=heuristic, fit=fit
        )
        sb, off = pats.slots()
        _check_slots(sb, off, n, e, c, cn, ce, cg)
        opt = brute_force_min_packs(expand(hist), cn, ce, cg)
        assert opt <= pats.num_packs <= 2 * opt + 1


def test_lower_bound_is_max_of_three_ceilings():
    n, e, c = np.array([3, 5]), np.array([10, 1]), np.array([4, 2])
    # nodes 22, edges 42, graphs 6
    assert lower_bound(n, e, c, 10, 100, 100) == 3
    assert lower_bound(n, e, c, 100, 20, 100) == 3
    assert lower_bound(n, e, c, 100, 100, 4) == 2


def test_graph_that_does_not_fit_is_an_error():
    with pytest.raises(ValueError, match="exceed the limits of 4 nodes"):
        pack_histogram([5], [1], [1], node_limit=4, edge_limit=10, graph_limit=3)
    with pytest.raises(ValueError, match="node limit must be >= 0, got -1"):
        pack_histogram([1], [1], [1], node_limit=-1, edge_limit=10, graph_limit=3)
    with pytest.raises(ValueError, match="exceed the limits of 0 nodes"):
        pack_histogram([1], [1], [1], node_limit=0, edge_limit=10, graph_limit=3)
    with pytest.raises(ValueError, match="graph limit"):
        pack_histogram([1], [1], [1], node_limit=4, edge_limit=10, graph_limit=-1)
    with pytest.raises(ValueError, match="fit must be one of"):
        pack_histogram([1], [1], [1], node_limit=4, edge_limit=10, graph_limit=3, fit="worst")


@pytest.mark.parametrize("cg", [7, 31, 200])
def test_balanced_dealing_rules_and_bound(cg):
    rng = np.random.default_rng(cg)
    nodes = rng.integers(3, 30, 5000)
    edges = nodes * rng.integers(2, 6, 5000)
    key = nodes * 1000 + edges
    u, _, c = np.unique(key, return_inverse=True, return_counts=True)
    n, e = u // 1000, u % 1000
    cn, ce = int(nodes.mean() * 32), int(edges.mean() * 32)
    res = balanced_pack(n, e, c, node_limit=cn, edge_limit=ce, graph_limit=cg)
    _check_slots(res.slot_bin, res.offsets, n, e, c, cn, ce, cg)
    assert res.num_packs >= lower_bound(n, e, c, cn, ce, cg)


def test_pack_bins_auto_never_worse_than_histogram():
    rng = np.random.default_rng(3)
    n = rng.integers(1, 20, 60)
    e = rng.integers(0, 60, 60)
    c = rng.integers(1, 50, 60)
    for lim in [(40, 120, 1000), (300, 900, 31), (600, 2000, 127)]:
        kw = dict(node_limit=lim[0], edge_limit=lim[1], graph_limit=lim[2])
        auto = pack_bins(n, e, c, **kw)
        hist = pack_bins(n, e, c, method="histogram", **kw)
        _check_slots(auto.slot_bin, auto.offsets, n, e, c, *lim)
        assert auto.num_packs <= hist.num_packs
        assert auto.num_packs >= auto.lower_bound


def test_nnls_baseline_covers_every_graph():
    n, e, c = np.array([2, 3, 5, 7]), np.array([3, 4, 8, 9]), np.array([9, 5, 4, 2])
    pats = pack_nnls(n, e, c, node_limit=10, edge_limit=14, graph_limit=4)
    sb, off = pats.slots()
    _check_slots(sb, off, n, e, c, 10, 14, 4)


def test_assignment_places_each_graph_once_in_a_slot_of_its_bin():
    slot_bin = np.array([0, 1, 1, 2, 0, 2, 2])
    offsets = np.array([0, 3, 5, 7])
    graph_bin = np.array([2, 0, 1, 2, 0, 1, 2])
    graph_ids = np.array([10, 11, 12, 13, 14, 15, 16])
    for rngs in [(None, None), (np.random.default_rng(1), np.random.default_rng(2))]:
        order, offs = assign_graphs(
            slot_bin, offsets, graph_bin, graph_ids, assign_rng=rngs[0], order_rng=rngs[1]
        )
        assert sorted(order.tolist()) == graph_ids.tolist()
        bin_of = dict(zip(graph_ids.tolist(), graph_bin.tolist(), strict=False))
        got = sorted(
            sorted(bin_of[g] for g in order[offs[b] : offs[b + 1]].tolist()) for b in range(3)
        )
        assert got == sorted(
            sorted(slot_bin[offsets[b] : offsets[b + 1]].tolist()) for b in range(3)
        )
    with pytest.raises(ValueError, match="slots per size bin"):
        assign_graphs(
            slot_bin,
            offsets,
            np.array([0, 0, 0, 0, 0, 0, 0]),
            graph_ids,
            assign_rng=None,
            order_rng=None,
        )


def test_pack_bins_heavy_tail_tries_greedy_and_keeps_fewest():
    rng = np.random.default_rng(11)
    nodes = np.rint(20 * np.exp(1.3 * rng.standard_normal(3000))).astype(np.int64) + 1
    nodes = np.minimum(nodes, 600)
    key = nodes * 10_000 + 2 * nodes
    u, c = np.unique(key, return_counts=True)
    n, e = u // 10_000, u % 10_000
    res = pack_bins(n, e, c, node_limit=700, edge_limit=1400, graph_limit=60)
    _check_slots(res.slot_bin, res.offsets, n, e, c, 700, 1400, 60)
    assert "greedy" in res.tried and res.num_packs == min(res.tried.values())


def test_heavy_tail_fills_graph_slots_and_node_room_together():
    # 40 large graphs (60 nodes) and 560 small ones, 10 graphs / 100 nodes per pack: the graph
    # cap forces >= 60 packs, and 60 exist only when every large graph shares its pack with nine
    # 4-node graphs (96 nodes) and the 9-node graphs fill the other 20 packs ten each (90 nodes)
    n = np.array([4, 9, 60])
    c = np.array([360, 200, 40])
    lim = dict(node_limit=100, edge_limit=100, graph_limit=10)
    assert lower_bound(n, n, c, 100, 100, 10) == 60
    for res in (balanced_pack(n, n, c, **lim), pack_bins(n, n, c, **lim)):
        _check_slots(res.slot_bin, res.offsets, n, n, c, 100, 100, 10)
        assert res.num_packs == 60


@pytest.mark.parametrize("seed", [0, 1])
def test_heavy_tail_dealing_rules(seed):
    rng = np.random.default_rng(seed)
    nodes = np.rint(20 * np.exp(1.1 * rng.standard_normal(4000))).clip(2, 1900).astype(np.int64)
    edges = 2 * nodes + rng.integers(0, 5, 4000)
    u, c = np.unique(nodes * 10_000 + edges, return_counts=True)
    n, e = u // 10_000, u % 10_000
    res = balanced_pack(n, e, c, node_limit=2000, edge_limit=4200, graph_limit=40)
    _check_slots(res.slot_bin, res.offsets, n, e, c, 2000, 4200, 40)
    assert res.num_packs >= lower_bound(n, e, c, 2000, 4200, 40)


def test_assignment_with_few_large_bins_shuffles_within_each_bin():
    # 3 bins of 200 graphs (the per-bin shuffle path), graph ids implicit (None = 0..m-1)
    graph_bin = np.repeat([2, 0, 1], 200)
    rng = np.random.default_rng(0)
    slot_bin = rng.permutation(graph_bin)
    offsets = np.arange(0, 601, 20)
    seen_slots = set()
    for seed in range(4):
        order, offs = assign_graphs(
            slot_bin,
            offsets,
            graph_bin,
            None,
            assign_rng=np.random.default_rng(seed),
            order_rng=None,
        )
        assert np.array_equal(offs, offsets)
        assert sorted(order.tolist()) == list(range(600))
        assert np.array_equal(graph_bin[order], slot_bin)  # every slot holds a graph of its bin
        seen_slots.add(int(np.flatnonzero(order == 0)[0]))
    assert len(seen_slots) > 1  # graph 0 moves between its bin's slots across draws
    plan = assign_graphs(
        slot_bin,
        offsets,
        graph_bin,
        None,
        assign_rng=np.random.default_rng(1),
        order_rng=np.random.default_rng(2),
        return_pack_order=True,
    )
    order, offs, pack_order = plan
    for b in range(30):  # batch b holds the bins of input pack pack_order[b]
        p = pack_order[b]
        assert sorted(graph_bin[order[offs[b] : offs[b + 1]]].tolist()) == sorted(
            slot_bin[offsets[p] : offsets[p + 1]].tolist()
        )
