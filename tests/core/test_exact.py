"""Exact arithmetic of planning decisions (issue 26): the fixed-point cost model against exact
rational arithmetic, its overflow handling, and the exact helpers against plain Python."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphbatch as gb
from graphbatch._exact import (
    FIXED_POINT_LIMIT,
    decimal,
    quantise_linear,
    ratio_order,
    share_keys,
    square_sum,
    top_indices,
)
from graphbatch.planners._balancing import outliers_iqr, outliers_zscore

coefficient = st.one_of(
    st.integers(0, 1000),
    st.sampled_from([0.1, 0.3, 0.5, 1.7, 2.5, 1e-7, 123.456, 1e12, 0.0625]),
    st.floats(0, 1e6, allow_nan=False, allow_infinity=False),
)
counts = st.lists(st.tuples(st.integers(0, 400), st.integers(0, 3000)), min_size=2, max_size=40)


def test_decimal_reads_floats_as_the_decimals_they_print_as():
    assert decimal(0.1) == Fraction(1, 10)
    assert decimal(0.99) == Fraction(99, 100)
    assert decimal(3) == 3 and decimal(np.int64(7)) == 7 and decimal(1e-7) == Fraction(1, 10**7)
    for bad in (float("nan"), float("inf"), "1", True):
        with pytest.raises(gb.InputError):
            decimal(bad)


def test_integral_and_dyadic_coefficients_are_kept_exactly():
    assert quantise_linear(1, 1, 10**6, 10**7) == quantise_linear(1.0, 1.0, 5, 5)
    fp = quantise_linear(1, 1, 10**6, 10**7)
    assert (fp.per_node, fp.per_edge, fp.shift) == (1, 1, 0)
    fp = quantise_linear(0.5, 2, 10**6, 10**7)
    assert (fp.per_node, fp.per_edge, fp.shift) == (1, 4, 1)
    fp = quantise_linear(0.3, 1.7, 10**6, 10**7)  # not dyadic: as fine as the limit allows
    assert fp.per_node * 10**6 + fp.per_edge * 10**7 <= FIXED_POINT_LIMIT
    assert 2 * (fp.per_node * 10**6 + fp.per_edge * 10**7) > FIXED_POINT_LIMIT // 2


@settings(max_examples=200, deadline=None)
@given(a=coefficient, b=coefficient, table=counts, data=st.data())
def test_quantised_costs_decide_like_exact_rationals(a, b, table, data):
    """Comparisons of sums of quantised costs agree with the exact rational costs whenever
    the exact sums differ by more than the rounding (always, for dyadic coefficients)."""
    if decimal(a) == 0 and decimal(b) == 0:
        return
    n = np.array([t[0] for t in table], np.int64)
    e = np.array([t[1] for t in table], np.int64)
    fp = quantise_linear(a, b, int(n.sum()), int(e.sum()))
    q = fp.costs(n, e)
    assert q.dtype == np.int64 and int(q.sum()) <= FIXED_POINT_LIMIT
    exact = [decimal(a) * int(x) + decimal(b) * int(y) for x, y in zip(n, e, strict=True)]
    unit = Fraction(2) ** -fp.shift
    # rounding of each coefficient: at most half a unit per node and per edge
    err_a = abs(fp.per_node * unit - decimal(a))
    err_b = abs(fp.per_edge * unit - decimal(b))
    assert err_a <= unit / 2 and err_b <= unit / 2
    for _ in range(10):
        sa = data.draw(st.lists(st.integers(0, len(table) - 1), max_size=8))
        sb = data.draw(st.lists(st.integers(0, len(table) - 1), max_size=8))
        qa, qb = sum(int(q[i]) for i in sa), sum(int(q[i]) for i in sb)
        xa, xb = sum(exact[i] for i in sa), sum(exact[i] for i in sb)
        bound = sum(err_a * int(n[i]) + err_b * int(e[i]) for i in sa + sb)
        if abs(xa - xb) > bound:
            assert (qa < qb) == (xa < xb) and (qa > qb) == (xa > xb)
        if err_a == 0 and err_b == 0:  # exact: every comparison, ties included
            assert (qa < qb, qa == qb) == (xa < xb, xa == xb)


@given(big=st.sampled_from([1e20, 1e30, 1e300, 2**70]), table=counts)
def test_huge_coefficients_scale_down_instead_of_overflowing(big, table):
    n = np.array([t[0] for t in table], np.int64)
    e = np.array([t[1] for t in table], np.int64)
    fp = quantise_linear(big, big, int(n.sum()), int(e.sum()))
    assert fp.shift < 0 and fp.per_node == fp.per_edge > 0  # only the ratio matters
    assert int(fp.costs(n, e).sum()) <= FIXED_POINT_LIMIT


def test_overflow_and_degenerate_models_are_one_line_errors():
    with pytest.raises(gb.InputError, match=r"quantise to 0 within the limit 5"):
        quantise_linear(1e-9, 0, 10**6, 10**6, limit=5)
    with pytest.raises(gb.InputError, match=r"coefficients must be >= 0"):
        quantise_linear(-1, 1, 10, 10)
    with pytest.raises(gb.InputError, match=r"over the limit 2\*\*54"):
        square_sum(np.array([2**54], np.int64))
    # an all-zero table costs nothing whatever the model
    fp = quantise_linear(0.3, 0.7, 0, 0)
    assert fp.costs(np.zeros(3, np.int64), np.zeros(3, np.int64)).tolist() == [0, 0, 0]


def test_plans_depend_on_the_cost_ratio_only(molecule_sizes):
    base = gb.plan(molecule_sizes, "kk", batch_size=33)
    for a in (1e300, 0.5, 2**40):  # equal coefficients: the default model, scaled
        other = gb.plan(molecule_sizes, "kk", batch_size=33, cost_nodes=a, cost_edges=a)
        assert np.array_equal(other.order, base.order)
        assert np.array_equal(other.offsets, base.offsets)
    half = gb.plan(molecule_sizes, "stratified", batch_size=33, cost_nodes=0.5, cost_edges=1)
    twice = gb.plan(molecule_sizes, "stratified", batch_size=33, cost_nodes=1, cost_edges=2)
    assert np.array_equal(half.order, twice.order)


@settings(max_examples=100, deadline=None)
@given(
    x=st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=30),
    data=st.data(),
    cx=st.sampled_from([1, 3, 640, 2**40]),
    cy=st.sampled_from([0, 7, 1152, 2**40]),
    how=st.sampled_from(["sum", "min", "max"]),
)
def test_share_keys_order_like_the_fractions(x, data, cx, cy, how):
    y = data.draw(st.lists(st.integers(-(2**40), 2**40), min_size=len(x), max_size=len(x)))
    keys = share_keys(np.array(x), np.array(y), cx, cy, how).tolist()
    op = {"sum": lambda u, v: u + v, "min": min, "max": max}[how]
    exact = [
        op(Fraction(a, max(cx, 1)), Fraction(b, max(cy, 1))) for a, b in zip(x, y, strict=True)
    ]
    for i in range(len(x)):
        for j in range(len(x)):
            assert (keys[i] < keys[j]) == (exact[i] < exact[j])


@settings(max_examples=100, deadline=None)
@given(keys=st.lists(st.integers(0, 6), min_size=0, max_size=60), k=st.integers(0, 70))
def test_top_indices_are_the_stable_descending_argsort(keys, k):
    a = np.array(keys, np.int64)
    want = np.argsort(-a, kind="stable")[:k]
    assert np.array_equal(top_indices(a, k), want)


@settings(max_examples=100, deadline=None)
@given(
    pairs=st.lists(
        st.tuples(st.integers(-(2**53), 2**53), st.integers(1, 2**20)), min_size=0, max_size=40
    ),
    near=st.booleans(),
    descending=st.booleans(),
)
def test_ratio_order_is_the_exact_stable_order(pairs, near, descending):
    if near:  # ratios within one float rounding of each other
        pairs = [(2**52 + i, 2**20 - (i % 3)) for i in range(len(pairs))] + pairs
    num = np.array([p[0] for p in pairs], np.int64)
    den = np.array([p[1] for p in pairs], np.int64)
    fr = [Fraction(int(a), int(b)) for a, b in pairs]
    want = sorted(range(len(pairs)), key=(lambda i: -fr[i]) if descending else (lambda i: fr[i]))
    assert ratio_order(num, den, descending=descending).tolist() == want


@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.integers(-(2**53), 2**53), max_size=50))
def test_square_sum_is_exact(values):
    assert square_sum(np.array(values, np.int64)) == sum(v * v for v in values)


def _zscore_reference(costs, threshold):
    c = [Fraction(int(v)) for v in costs]
    n = len(c)
    mean = sum(c) / n
    var = sum((v - mean) ** 2 for v in c) / n
    if var == 0:
        return []
    t = decimal(threshold)

    def above(v):  # (v - mean) / sqrt(var) > t, without a square root
        d = v - mean
        if t >= 0:
            return d > 0 and d * d > t * t * var
        return d >= 0 or d * d < t * t * var

    return [i for i, v in enumerate(c) if above(v)]


@settings(max_examples=150, deadline=None)
@given(
    costs=st.lists(st.integers(0, 10**12), min_size=1, max_size=60),
    threshold=st.sampled_from([0, 0.5, 1, 1.5, 3.0, -0.5, -2.0]),
)
def test_zscore_outliers_are_exact(costs, threshold):
    got = outliers_zscore(np.array(costs, np.int64), threshold).tolist()
    assert got == _zscore_reference(costs, threshold)


@settings(max_examples=150, deadline=None)
@given(
    costs=st.lists(st.integers(0, 10**6), min_size=1, max_size=60),
    multiplier=st.sampled_from([0, 0.25, 1.5, 3.0]),
)
def test_iqr_fence_is_numpys_percentile_rule_in_exact_arithmetic(costs, multiplier):
    c = np.array(costs, np.int64)
    idx, fence = outliers_iqr(c, multiplier)
    q1, q3 = np.percentile(c.astype(np.float64), [25, 75])  # small values: exact here
    assert float(fence) == pytest.approx(q3 + multiplier * (q3 - q1), rel=1e-12, abs=1e-9)
    assert idx.tolist() == [i for i, v in enumerate(costs) if v > fence]


def test_budget_estimate_is_the_exact_ceiling():
    # mean 7/3 nodes x 27 = 63 exactly; in float64 (7/3) * 27 = 63.00000000000001 -> 64
    sizes = gb.GraphSizes([2, 2, 3], [1, 1, 1])
    b = gb.estimate_budget(sizes, 27, rng=np.random.default_rng(0), multiple=1)
    assert (b.n_node, b.n_edge, b.n_graph) == (63, 27, 27)


def test_split_to_multiple_compares_nodes_per_part_exactly():
    from graphbatch.planners._distributed import _first_largest_ratio

    # (2**53 - 4) / 3 and (2**53 - 3) / 3 round to one float; the second is larger
    num = np.array([5, 2**53 - 4, 2**53 - 3, 7], np.int64)
    den = np.array([1, 3, 3, 2], np.int64)
    assert num[1] / den[1] == num[2] / den[2]
    assert _first_largest_ratio(num, den) == 2
    assert _first_largest_ratio(np.array([3, 6, 2]), np.array([1, 2, 1])) == 0
