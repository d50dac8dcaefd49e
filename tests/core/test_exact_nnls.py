"""The exact NNLS solver (`graphbatch._exact_nnls`, issue 26) that `pack-nnls` and
`BatchPlan.stats` use: exactly optimal (Karush-Kuhn-Tucker conditions checked in rationals),
the same optimum as a plain exact reference and as SciPy's nnls. That its answer does not
depend on the machine is checked by tests/planners/test_plan_machine_independence.py (pack-nnls
plans and stats cost fits under several SIMD and thread settings)."""

from __future__ import annotations

from fractions import Fraction
from itertools import combinations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphbatch as gb
from graphbatch._exact_nnls import _Cholesky, _exact_finish, _Problem, _sequential_sums, nnls


def _residual(A, b, x) -> list[Fraction]:
    return [
        Fraction(int(bi)) - sum(int(a) * xj for a, xj in zip(row, x, strict=True))
        for row, bi in zip(A.tolist(), b.tolist(), strict=True)
    ]


def _assert_kkt(A, b, x):
    """x >= 0, dual A^T (b - A x) <= 0, and = 0 wherever x > 0: exactly."""
    r = _residual(A, b, x)
    dual = [sum(int(A[i, j]) * r[i] for i in range(A.shape[0])) for j in range(A.shape[1])]
    assert all(v >= 0 for v in x)
    assert all(d <= 0 for d in dual), dual
    assert all(d == 0 for d, v in zip(dual, x, strict=True) if v > 0), (dual, x)


def _solve_exact(M: list[list[Fraction]], rhs: list[Fraction]) -> list[Fraction] | None:
    """Dense Gauss-Jordan over rationals; None if singular."""
    k = len(M)
    M = [[*row, v] for row, v in zip(M, rhs, strict=True)]
    for c in range(k):
        p = next((r for r in range(c, k) if M[r][c] != 0), None)
        if p is None:
            return None
        M[c], M[p] = M[p], M[c]
        for r in range(k):
            if r != c and M[r][c] != 0:
                f = M[r][c] / M[c][c]
                M[r] = [a - f * b for a, b in zip(M[r], M[c], strict=True)]
    return [M[r][k] / M[r][r] for r in range(k)]


def _reference(A, b) -> list[Fraction]:
    """The plain specification: among supports of independent columns, the least-squares
    solution that is positive and meets the KKT conditions (one exists; ``A x`` is the same
    for every optimum). Brute force over all supports: tiny problems only."""
    m, n = A.shape
    for size in range(n, -1, -1):
        for S in combinations(range(n), size):
            G = [[Fraction(int(A[:, p] @ A[:, q])) for q in S] for p in S]
            z = _solve_exact(G, [Fraction(int(A[:, p] @ b)) for p in S]) if S else []
            if z is None or any(v <= 0 for v in z):
                continue
            x = [Fraction(0)] * n
            for p, v in zip(S, z, strict=True):
                x[p] = v
            r = _residual(A, b, x)
            if all(sum(int(A[i, j]) * r[i] for i in range(m)) <= 0 for j in range(n)):
                return x
    raise AssertionError("no optimum found")  # pragma: no cover


def _random_problem(rng, max_m=8, max_n=6):
    m, n = (int(v) for v in rng.integers(1, [max_m + 1, max_n + 1]))
    A = rng.integers(-3, 7, (m, n)) * (rng.random((m, n)) < 0.7)
    if n > 1 and rng.random() < 0.3:  # a repeated column: optimum not unique
        A[:, n - 1] = A[:, 0]
    return A.astype(np.int64), rng.integers(-6, 25, m).astype(np.int64)


def test_nnls_is_the_exact_optimum_of_random_small_problems():
    rng = np.random.default_rng(26)
    for _ in range(250):
        A, b = _random_problem(rng)
        sol = nnls(A, b)
        assert sol.converged
        _assert_kkt(A, b, sol.x)
        ref = _reference(A, b)
        # the optimal A x is unique, and so is x where A has full column rank
        assert _residual(A, b, sol.x) == _residual(A, b, ref)
        if np.linalg.matrix_rank(A) == A.shape[1]:
            assert list(sol.x) == ref


def test_nnls_agrees_with_scipy():
    from scipy.optimize import nnls as scipy_nnls

    rng = np.random.default_rng(7)
    for _ in range(200):
        A, b = _random_problem(rng, max_m=12, max_n=9)
        x = nnls(A, b).to_float()
        xs, rs = scipy_nnls(A.astype(float), b.astype(float))
        scale = 1.0 + float(np.abs(b).max())
        assert abs(float(np.linalg.norm(A @ x - b)) - rs) <= 1e-9 * scale
        if np.linalg.matrix_rank(A) == A.shape[1]:
            np.testing.assert_allclose(x, xs, atol=1e-8 * scale)


def test_nnls_on_a_pattern_system_reaches_zero_residual():
    """The shape pack-nnls builds: one "copies of one bin" column per bin plus sparse mixed
    patterns; the counts are met exactly (residual 0), with a floor that is exact."""
    rng = np.random.default_rng(3)
    bins, pats = 60, 150
    per = rng.integers(1, 12, bins)
    A = np.zeros((bins, bins + pats), np.int64)
    A[np.arange(bins), np.arange(bins)] = per
    for t in range(bins, bins + pats):
        rows = rng.choice(bins, int(rng.integers(1, 4)), replace=False)
        A[rows, t] = rng.integers(1, 8, rows.shape[0])
    b = rng.integers(1, 400, bins).astype(np.int64)
    sol = nnls(A, b)
    _assert_kkt(A, b, sol.x)
    assert all(r == 0 for r in _residual(A, b, sol.x))
    assert sol.floor() == [v.numerator // v.denominator for v in sol.x]


def test_exact_phase_reaches_the_optimum_from_any_passive_set():
    """The exact phase finishes whatever passive set the float phase hands it (dependent
    columns, negative least-squares values, missing columns): exactly optimal."""
    rng = np.random.default_rng(12)
    for _ in range(150):
        A, b = _random_problem(rng)
        n = A.shape[1]
        start = [int(q) for q in rng.permutation(n)[: int(rng.integers(0, n + 1))]]
        x0 = np.zeros(n)
        x0[start] = rng.uniform(0.1, 5.0, len(start))
        for pb in (_Problem(A, b), _tall_twin(A, b)):
            sol = _exact_finish(pb, start, x0, 200)
            assert sol.converged
            _assert_kkt(A, b, sol.x)
            assert _residual(A, b, sol.x) == _residual(A, b, _reference(A, b))


def _tall_twin(A, b) -> _Problem:
    """The same optimum through the normal equations: the rows repeated until ``m >= 4 n``."""
    reps = -(-4 * A.shape[1] // A.shape[0])
    return _Problem(np.vstack([A] * reps), np.concatenate([b] * reps))


def test_float_cholesky_updates_against_lstsq():
    """The float phase's factor: appends, a dependent column refused, removals (rank-one
    update), least-squares solutions as numpy's lstsq (the plain reference)."""
    rng = np.random.default_rng(2)
    A = rng.integers(0, 9, (30, 8)).astype(float)
    b = rng.integers(0, 50, 30).astype(float)
    A[:, 5] = A[:, 1] + A[:, 2]  # dependent on columns 1 and 2
    G, c = A.T @ A, A.T @ b
    ch = _Cholesky(8)
    order = []
    for t in (3, 1, 0, 2, 5, 6, 4):
        if ch.append(G[order, t], G[t, t], c[t]):
            order.append(t)
    assert order == [3, 1, 0, 2, 6, 4]  # 5 refused

    def check():
        U = ch.U[: ch.k, : ch.k]
        np.testing.assert_allclose(U.T @ U, G[np.ix_(order, order)], rtol=1e-10, atol=1e-8)
        want = np.linalg.lstsq(A[:, order], b, rcond=None)[0]
        np.testing.assert_allclose(ch.z[: ch.k], want, rtol=1e-9, atol=1e-9)

    check()
    for p in (1, 3, 0):
        order.pop(p)
        ch.remove(p, c[order])
        check()


def test_sequential_sums_add_left_to_right():
    """Both forms (slot by slot; np.cumsum for many slots) give the bits of a plain Python
    left-to-right sum, whatever order-sensitive values are added."""
    rng = np.random.default_rng(4)
    for width in (7, 300):
        M = rng.standard_normal((width, 5)) * 10.0 ** rng.integers(-8, 9, (width, 5))
        want = []
        for col in M.T.tolist():
            acc = 0.0
            for v in col:
                acc += v
            want.append(acc)
        assert _sequential_sums(M).tolist() == want


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 7).flatmap(
        lambda m: st.integers(1, 7).flatmap(
            lambda n: st.tuples(
                st.lists(
                    st.lists(st.integers(-20, 20), min_size=n, max_size=n), min_size=m, max_size=m
                ),
                st.lists(st.integers(-50, 50), min_size=m, max_size=m),
            )
        )
    )
)
def test_nnls_meets_the_kkt_conditions_exactly(problem):
    A, b = (np.array(v, np.int64) for v in problem)
    sol = nnls(A, b)
    assert sol.converged and len(sol.x) == A.shape[1]
    _assert_kkt(A, b, sol.x)


def test_tall_fits_use_the_normal_equations_exactly():
    """A two-column fit over many rows (what `stats()` solves): exact coefficients where the
    data are exactly linear; the same optimum as SciPy where they are not."""
    from scipy.optimize import nnls as scipy_nnls

    rng = np.random.default_rng(5)
    n = rng.integers(1, 900, 5000)
    e = rng.integers(0, 9000, 5000)
    A = np.stack([n, e], axis=1)
    assert [float(v) for v in nnls(A, 37 * n + 11 * e).x] == [37.0, 11.0]
    b = 37 * n + 11 * e + rng.integers(0, 2000, 5000)
    got = nnls(A, b).to_float()
    want, _ = scipy_nnls(A.astype(float), b.astype(float))
    np.testing.assert_allclose(got, want, rtol=1e-9)
    # a negative trend: the edge coefficient is clipped at 0, the node one fits alone
    b = 50 * n - 3 * e
    x = nnls(A, b).x
    assert x[1] == 0 and x[0] == Fraction(int(n @ b), int(n @ n))


def test_stats_fits_bytes_exactly():
    rng = np.random.default_rng(11)
    nn = rng.integers(3, 30, 3000)
    ee = rng.integers(0, 200, 3000)
    sizes = gb.GraphSizes(nn, ee, 37 * nn + 11 * ee)
    st_ = gb.plan(sizes, "kk", batch_size=17, seed=1).stats()
    assert (st_.cost_source, st_.cost_per_node, st_.cost_per_edge) == ("n_bytes", 37.0, 11.0)


def test_nnls_input_checks_and_limits():
    with pytest.raises(TypeError, match="integer"):
        nnls(np.ones((2, 2)), np.ones(2, np.int64))
    with pytest.raises(ValueError, match="rows"):
        nnls(np.ones((2, 2), np.int64), np.ones(3, np.int64))
    with pytest.raises(ValueError, match="2\\*\\*53"):
        nnls(np.array([[2**60]], np.int64), np.ones(1, np.int64))
    assert nnls(np.zeros((3, 0), np.int64), np.ones(3, np.int64)).x == ()
    assert nnls(np.zeros((0, 2), np.int64), np.zeros(0, np.int64)).x == (0, 0)
    # out of steps: x stays feasible, marked not converged
    sol = nnls(np.eye(3, dtype=np.int64), np.array([1, 2, 3]), maxiter=1)
    assert not sol.converged and all(v >= 0 for v in sol.x)
