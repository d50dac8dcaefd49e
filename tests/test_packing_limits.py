"""Limit search against exhaustive evaluation and brute-force packing on small grids."""

import itertools

import numpy as np
import pytest

import graphbatch as gb
from graphbatch.packing import search_limits

from ._packing_util import brute_force_min_packs


def _records_by_point(records):
    return {(r["max_nodes"], r["max_edges"]): r for r in records}


def test_small_grid_equals_brute_force():
    # graphs where best fit is optimal at every limit of the grid (checked against brute force)
    nodes = [4, 4, 3, 3, 2, 2, 1, 5]
    edges = [6, 5, 4, 4, 3, 2, 1, 7]
    sizes = gb.GraphSizes(nodes, edges)
    items = list(zip(nodes, edges))
    recs = search_limits(sizes, node_range=(6, 11), edge_range=(7, 12), grid=6)
    got = _records_by_point(recs)
    assert set(got) == set(itertools.product(range(6, 12), range(7, 13)))
    total_n, total_e = sum(nodes), sum(edges)
    best_hm = 0.0
    for (mn, me), r in got.items():
        opt = brute_force_min_packs(items, mn - 1, me, len(items))
        assert r["num_packs"] >= opt
        assert r["node_eff"] == pytest.approx(total_n / (r["num_packs"] * mn))
        assert r["edge_eff"] == pytest.approx(total_e / (r["num_packs"] * me))
        ne, ee = total_n / (opt * mn), total_e / (opt * me)
        best_hm = max(best_hm, 2 * ne * ee / (ne + ee))
    # the best record is the brute-force best over the grid
    assert recs[0]["harmonic_mean"] == pytest.approx(best_hm)
    hms = [r["harmonic_mean"] for r in recs]
    assert hms == sorted(hms, reverse=True)


def test_graph_cap_and_record_keys():
    sizes = gb.GraphSizes([2] * 12, [2] * 12)
    recs = search_limits(sizes, max_graphs=4, node_range=(13, 13), edge_range=(24, 24))
    (r,) = recs
    # 3 real graphs per pack -> 4 packs; 24 nodes in 4 * 13 padded, 24 edges in 4 * 24
    assert r == {"max_nodes": 13, "max_edges": 24, "max_graphs": 4, "node_eff": 24 / 52,
                 "edge_eff": 24 / 96, "harmonic_mean": pytest.approx(2 * (24 / 52) * (24 / 96)
                                                                     / (24 / 52 + 24 / 96)),
                 "num_packs": 4}


def test_defaults_and_refine():
    rng = np.random.default_rng(0)
    n = rng.integers(2, 9, 200)
    sizes = gb.GraphSizes(n, 2 * n)
    recs = search_limits(sizes, grid=4)
    assert recs and all(r["max_nodes"] >= n.max() + 1 for r in recs)
    fine = search_limits(sizes, grid=4, refine=True)
    assert len(fine) > len(recs)
    assert fine[0]["harmonic_mean"] >= recs[0]["harmonic_mean"]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(node_range=(0, 5)), "node_range must satisfy"),
        (dict(edge_range=(9, 3)), "edge_range must satisfy"),
        (dict(node_range=(2, 3)), "cannot hold the largest graph"),
        (dict(max_graphs=1), "max_graphs must be an integer >= 2"),
        (dict(grid=0), "grid must be >= 1"),
    ],
)
def test_bad_input(kwargs, match):
    sizes = gb.GraphSizes([3, 4], [5, 6])
    with pytest.raises(ValueError, match=match):
        search_limits(sizes, **kwargs)
    with pytest.raises(TypeError, match="GraphSizes"):
        search_limits([3, 4])


def test_record_matches_plan_at_those_limits():
    rng = np.random.default_rng(5)
    n = rng.integers(3, 20, 400)
    sizes = gb.GraphSizes(n, n * rng.integers(2, 5, 400))
    for method in ("histogram", "auto"):
        recs = search_limits(sizes, max_graphs=40, node_range=(100, 300), edge_range=(300, 900),
                             grid=3, method=method)
        for r in recs[:3]:
            p = gb.plan(sizes, "pack-lpf", budget=(r["max_nodes"], r["max_edges"], 40),
                        method=method)
            st = p.stats()
            assert st.num_batches == r["num_packs"]
            assert st.node_efficiency == pytest.approx(r["node_eff"])
            assert st.edge_efficiency == pytest.approx(r["edge_eff"])
