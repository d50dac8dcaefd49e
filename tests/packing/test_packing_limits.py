"""Limit search (issue 18): the optimum of the packing pack-lpf produces, interior, exact."""

import json
import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import graphbatch as gb
from graphbatch.cli import main
from graphbatch.packing import LimitRecords, evaluate_limits, search_limits


def _plan_effs(sizes, rec):
    g = rec["max_graphs"] if rec["max_graphs"] is not None else len(sizes) + 1
    st = gb.plan(sizes, "pack-lpf", budget=(rec["max_nodes"], rec["max_edges"], g)).stats()
    return st.node_efficiency, st.edge_efficiency, st.num_batches


@pytest.mark.parametrize("a, b, g", [(5, 7, 9), (3, 10, 5), (4, 4, 17)])
def test_known_optimum_is_found_and_interior(a, b, g):
    # every graph a nodes / b edges, at most g - 1 per pack: the unique best limits hold
    # exactly g - 1 graphs, (g - 1) a + 1 nodes (one padding node) and (g - 1) b edges
    sizes = gb.GraphSizes([a] * 800, [b] * 800)
    recs = search_limits(sizes, max_graphs=g, tolerance=0.0)
    best = recs[0]
    assert (best["max_nodes"], best["max_edges"]) == ((g - 1) * a + 1, (g - 1) * b)
    assert best["exact"] and recs.interior
    assert best["edge_eff"] == pytest.approx(1.0)
    assert best["node_eff"] == pytest.approx((g - 1) * a / ((g - 1) * a + 1))
    lo, hi = recs.node_range
    assert lo < best["max_nodes"] < hi


def test_tolerance_picks_the_smallest_nearly_best():
    # 3/10 graphs, cap 4 real: 4 per pack (13/40) beats 3 per pack by far more than 0.2 pp
    sizes = gb.GraphSizes([3] * 400, [10] * 400)
    recs = search_limits(sizes, max_graphs=5)
    assert (recs[0]["max_nodes"], recs[0]["max_edges"]) == (13, 40)
    top = max(r["harmonic_mean"] for r in recs if r["exact"])
    optimal = [r for r in recs if r["exact"] and r["harmonic_mean"] >= top - recs.tolerance]
    assert recs[0] == min(optimal, key=lambda r: (r["max_nodes"], r["max_edges"]))


def _table(n=6000, seed=0):
    rng = np.random.default_rng(seed)
    nodes = rng.integers(4, 40, n)
    edges = (nodes * rng.uniform(1.5, 3.0, n)).astype(np.int64)
    return gb.GraphSizes(nodes, edges)


@pytest.mark.parametrize("sample", [2000, 100_000])
def test_first_record_equals_direct_pack_lpf(sample):
    sizes = _table()
    recs = search_limits(sizes, sample_graphs=sample)
    assert isinstance(recs, LimitRecords) and recs.interior
    best = recs[0]
    assert best["exact"] and best["max_graphs"] is None
    ne, ee, nb = _plan_effs(sizes, best)
    assert (ne, ee, nb) == (
        pytest.approx(best["node_eff"]),
        pytest.approx(best["edge_eff"]),
        best["num_packs"],
    )
    # exact records equal evaluate_limits; records come in the documented order
    hist = sizes.histogram()
    for r in [r for r in recs if r["exact"]][:3]:
        again = evaluate_limits(hist, r["max_nodes"], r["max_edges"], None)
        assert again["num_packs"] == r["num_packs"]
    exact = [r["exact"] for r in recs]
    assert exact == sorted(exact, reverse=True)  # exact records first
    est = [r["harmonic_mean"] for r in recs if not r["exact"]]
    assert est == sorted(est, reverse=True)
    if sample < len(sizes):
        assert recs.estimated_points > 0


def test_ranges_are_respected_and_edge_reported():
    sizes = _table(2000, 1)
    recs = search_limits(sizes, node_range=(41, 60), edge_range=(100, 400))
    assert all(41 <= r["max_nodes"] <= 60 and 100 <= r["max_edges"] <= 400 for r in recs)
    # uniform 5/7 graphs: 5 per pack (26 nodes) is the best a range up to 26 allows
    sizes = gb.GraphSizes([5] * 300, [7] * 300)
    recs = search_limits(sizes, node_range=(6, 26), tolerance=0.0)
    assert recs[0]["max_nodes"] == 26 and not recs.interior
    assert "ON THE EDGE" in recs.summary()


@pytest.mark.parametrize(
    "n_node, n_edge",
    [
        ([0, 0, 0], [0, 0, 0]),  # all-zero table (issue 14: ZeroDivisionError)
        ([3, 4, 5], [0, 0, 0]),  # no edges
        ([2**36, 5], [3, 2**36]),  # graphs at the per-graph limit (issue 14: overflow / hang)
    ],
)
def test_degenerate_tables_finish_quickly(n_node, n_edge):
    sizes = gb.GraphSizes(n_node, n_edge)
    t0 = time.perf_counter()
    recs = search_limits(sizes)
    assert time.perf_counter() - t0 < 60  # a hang guard, not a speed target
    best = recs[0]
    assert best["max_nodes"] >= max(n_node) + 1 and best["max_edges"] >= max(n_edge)
    assert 0.0 <= best["harmonic_mean"] <= 1.0


def test_histogram_of_huge_pairs_is_exact():
    # issue 14: the combined key n * (max_e + 1) + e overflowed int64 and merged pairs
    sizes = gb.GraphSizes([2**36, 5, 5], [3, 2**36, 2**36])
    h = sizes.histogram(return_inverse=True)
    assert h.n_node.tolist() == [5, 2**36] and h.n_edge.tolist() == [2**36, 3]
    assert h.count.tolist() == [2, 1] and h.inverse.tolist() == [1, 0, 0]


def test_histogram_dense_and_sorted_paths_agree():
    rng = np.random.default_rng(3)
    n = rng.integers(1, 50, 3000)
    e = rng.integers(0, 90, 3000)
    small = gb.GraphSizes(n, e).histogram(return_inverse=True)
    big = gb.GraphSizes(n * 10**6, e * 10**6).histogram(return_inverse=True)  # sorted path
    assert np.array_equal(small.n_node * 10**6, big.n_node)
    assert np.array_equal(small.n_edge * 10**6, big.n_edge)
    assert np.array_equal(small.count, big.count) and np.array_equal(small.inverse, big.inverse)


def test_too_large_graph_is_a_clean_error():
    # refused by the size table's per-graph limit (2**36) before the search's own 2**40 ceiling
    with pytest.raises(ValueError, match=r"exceeds the limit .*2\*\*36"):
        search_limits(gb.GraphSizes([2**50], [1]))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(node_range=(5, 3)), "node_range must satisfy"),
        (dict(edge_range=(9, 3)), "edge_range must satisfy"),
        (dict(node_range=(2, 3)), "cannot hold the largest graph"),
        (dict(max_graphs=1), "max_graphs must be an integer >= 2"),
        (dict(grid=0), "grid must be an integer >= 1"),
        (dict(exact_points=0), "exact_points must be an integer >= 1"),
        (dict(tolerance=1.5), "tolerance must be a number in"),
        (dict(sample_graphs=0), "sample_graphs must be an integer >= 1"),
    ],
)
def test_bad_input(kwargs, match):
    sizes = gb.GraphSizes([3, 4], [5, 6])
    with pytest.raises(ValueError, match=match):
        search_limits(sizes, **kwargs)
    with pytest.raises(TypeError, match="GraphSizes"):
        search_limits([3, 4])


def test_cli_json_contract(tmp_path, capsys):
    sizes = _table(3000, 2)
    path = tmp_path / "s.npz"
    sizes.save(path)
    assert main(["limits", str(path), "--json"]) == 0
    recs = json.loads(capsys.readouterr().out)
    assert isinstance(recs, list) and recs
    for key in ("max_nodes", "max_edges", "max_graphs", "node_eff", "edge_eff", "harmonic_mean"):
        assert key in recs[0]
    ne, ee, _ = _plan_effs(sizes, recs[0])
    assert (ne, ee) == (pytest.approx(recs[0]["node_eff"]), pytest.approx(recs[0]["edge_eff"]))
    assert main(["limits", str(path), "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("optimum ") and "interior" in out


def test_report_and_compare_use_the_same_search(tmp_path, capsys):
    # issue 18 item 5: one search; its optimum, range and exact efficiency are shown
    from graphbatch.analysis import compare_strategies, search_limits_if_available

    sizes = _table(400, 4)
    direct = search_limits(sizes, max_graphs=16)
    res = search_limits_if_available(sizes, max_graphs=16)
    assert res.records[0] == direct[0] and res.summary == direct.summary()
    assert res.interior == direct.interior and res.node_range == direct.node_range
    cmp = compare_strategies(sizes, 16, search_limits=True)
    assert cmp.as_dict()["limits"]["optimum"] == direct[0]
    path = tmp_path / "s.npz"
    sizes.save(path)
    main(["compare", str(path), "--batch-size", "16", "--limits"])
    out = capsys.readouterr().out
    assert f"pack limits: {direct.summary()}" in out


@given(a=st.integers(1, 10**6), span=st.integers(0, 10**6), num=st.integers(1, 12))
def test_search_points_are_numpys_spacings_in_integers(a, span, num):
    from graphbatch.packing._limit_bounds import even_points, geometric_points

    b = a + span
    # numpy's float points agree wherever they are not within rounding of a half
    geo = np.geomspace(a, b, num)
    lin = np.linspace(a, b, num)
    for got, ref in ((geometric_points(a, b, num), geo), (even_points(a, b, num), lin)):
        assert len(got) == num and got[0] == a and (num == 1 or got[-1] == b)
        for g, r in zip(got, ref.tolist(), strict=False):
            if abs(r - np.floor(r) - 0.5) > 1e-6:
                assert g == int(np.rint(r))


def test_records_report_the_exact_efficiencies_rounded():
    from fractions import Fraction

    sizes = gb.GraphSizes(np.arange(1, 200) % 17 + 1, np.arange(1, 200) % 23)
    recs = search_limits(sizes, sample_graphs=50, exact_points=2)
    tn, te = int(sizes.n_node.sum()), int(sizes.n_edge.sum())
    for r in recs:
        if not r["exact"]:
            continue
        ne = Fraction(tn, r["num_packs"] * r["max_nodes"])
        ee = Fraction(te, r["num_packs"] * r["max_edges"])
        assert r["node_eff"] == float(ne) and r["edge_eff"] == float(ee)
        assert r["harmonic_mean"] == float(2 * ne * ee / (ne + ee))
