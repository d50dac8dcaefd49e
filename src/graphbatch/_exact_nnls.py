"""Non-negative least squares with one answer on every machine (docs/plan-format.md, "Same
plan on every machine").

`nnls(A, b)` returns ``x >= 0`` minimising ``||A x - b||`` for an integer matrix ``A`` (``m x
n``) and an integer vector ``b``, as exact rationals: the same rationals whatever SIMD kernels
NumPy dispatches, however many threads run, whatever BLAS, platform or NumPy version. It is
the Lawson-Hanson active-set method (the algorithm of ``scipy.optimize.nnls``), in two phases:

1. **The path, in float64 with a fixed operation order.** Lawson-Hanson on the Gram matrix
   ``G = A^T A`` (its entries, and ``A^T b``, computed exactly as integers) with a Cholesky
   factor updated column by column (a rank-one update when a column leaves). Every float
   operation is one IEEE-754 ``+ - * / sqrt`` (correctly rounded: one result on every
   machine), each a NumPy ufunc call or a Python float operation of its own (so no fused
   multiply-add can change a rounding, as compiled kernels may on ARM64), applied in an
   order fixed by the code; sums run left to right (slot by slot, or ``np.cumsum``: an
   accumulation adds one element to the previous partial sum, with none of ``np.sum``'s
   pairwise blocking, as NumPy's documentation notes) or are correctly rounded
   (``math.fsum``); no ``np.sum``/``np.dot``/``matmul`` of floats, no BLAS or LAPACK, no
   transcendental function; the entering column is the first of the largest dual values
   (``np.argmax``/``np.argmin`` return the first occurrence). The floats, the comparisons
   with the fixed tolerances below, and so the passive set this phase ends with, are the
   same on every machine.
2. **The answer, exact.** From that passive set Lawson-Hanson continues in rational
   arithmetic: the least-squares solution on the passive set is solved exactly (sparse
   elimination over `fractions.Fraction`: `graphbatch._sparse_exact`), columns whose value is
   not positive leave as in the float phase, and the dual ``A^T (b - A x)`` is checked
   exactly; a column with a positive dual value enters (the first of the largest). It ends
   when the Karush-Kuhn-Tucker conditions hold exactly: ``x >= 0``, dual ``<= 0``, and dual
   ``= 0`` wherever ``x > 0``.
   Usually the float phase has found the optimal passive set and one exact solve confirms it.

When the optimum is unique (``A`` of full column rank) the answer is it; else it is the
optimum Lawson-Hanson reaches from ``x = 0``, a pure function of ``(A, b)``. Cost: the float
phase is ``O(k)`` vector operations per step (``k`` passive columns), the exact phase one
sparse rational solve per step; meant for the sparse, small-integer systems graphbatch builds
(pattern counts of a histogram, two-column cost fits), not for large dense ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ._errors import InputError, InputTypeError
from ._exact import int_dot
from ._sparse_exact import solve_sparse

__all__ = ["NNLSSolution", "nnls"]

#: An exact number of the rational phase.
_Num = int | Fraction

#: A column enters the float phase only if its dual value exceeds this fraction of the
#: largest ``|A^T b|`` (rounding noise of a zero residual stays far below it); the exact
#: phase admits any positive dual value.
_DUAL_TOL = 1e-12
#: ... and only if the part of it outside the passive columns' span carries more than this
#: fraction of its squared norm (else it counts as dependent in floats).
_DEPENDENT = 1e-10


@dataclass(frozen=True)
class NNLSSolution:
    """``x`` (exact rationals, ``>= 0``) minimising ``||A x - b||``; ``converged`` is False
    only where the iteration limit stopped the exact phase (``x`` is then feasible, not
    optimal)."""

    x: tuple[Fraction, ...]
    converged: bool

    def floor(self) -> list[int]:
        """``floor(x)`` of every entry, exactly."""
        return [v.numerator // v.denominator for v in self.x]

    def to_float(self) -> np.ndarray:
        """``x`` as float64, each entry correctly rounded (``float(Fraction)``)."""
        return np.array([float(v) for v in self.x], dtype=np.float64)


def nnls(A: np.ndarray, b: np.ndarray, *, maxiter: int | None = None) -> NNLSSolution:
    """Solve ``min ||A x - b||`` subject to ``x >= 0`` exactly (module doc).

    ``A``: 2-D integer array ``m x n``; ``b``: integer vector of length ``m`` (``|values| <
    2**53``). ``maxiter``: steps of each phase (default ``3 * n + 30``).
    """
    A, b = _checked(A, b)
    n = A.shape[1]
    limit = 3 * n + 30 if maxiter is None else int(maxiter)
    problem = _Problem(A, b)
    if n == 0:
        return NNLSSolution((), True)
    order, x = _float_path(problem, limit)
    return _exact_finish(problem, order, x, limit)


def _checked(A: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    A = np.asarray(A)
    b = np.asarray(b)
    for name, a, nd in (("A", A, 2), ("b", b, 1)):
        if a.dtype.kind not in "iub":
            raise InputTypeError(f"nnls: {name} must be an integer array, got dtype {a.dtype}")
        if a.ndim != nd:
            raise InputError(f"nnls: {name} must be {nd}-D, got shape {a.shape}")
    if b.shape[0] != A.shape[0]:
        raise InputError(f"nnls: A has {A.shape[0]} rows but b has {b.shape[0]} entries")
    A = A.astype(np.int64, copy=False)  # read only: no copy needed
    b = b.astype(np.int64, copy=False)
    top = max([0] + [max(int(a.max()), -int(a.min())) for a in (A, b) if a.size])
    if top >= 2**53:
        raise InputError(f"nnls: value {top} is over the limit 2**53")
    return A, b


class _Problem:
    """``A`` and ``b`` as both phases read them. Tall problems (``m >= 4 n``: few columns,
    e.g. a two-column cost fit over many batches) work from the exact Gram matrix
    ``A^T A`` and ``A^T b`` alone (normal equations); the others from the sparse matrix
    (sparse columns; zero-padded slots for the float residual and dual; the augmented system
    ``[I A_P; A_P^T 0]`` for the exact least squares). Exact either way: the layout decides
    the work, not the answer."""

    def __init__(self, A: np.ndarray, b: np.ndarray):
        self.A, self.b = A, b
        m, n = A.shape
        self.m, self.n = m, n
        self.tall = m >= 4 * n
        if self.tall:
            self.atb = [int_dot(A[:, j], b) for j in range(n)]
            self.gram = [[int_dot(A[:, j], A[:, q]) for q in range(n)] for j in range(n)]
            self.norm2 = [self.gram[j][j] for j in range(n)]
            self.gram_f = np.array(self.gram, dtype=np.float64).reshape(n, n)
            return
        rows, cols = np.nonzero(A)  # row-major: rows ascending, columns ascending within
        vals = A[rows, cols]
        by_col = np.argsort(cols, kind="stable")  # column-major, rows ascending within
        self.col_ptr = np.searchsorted(cols[by_col], np.arange(n + 1)).astype(np.int64)
        self.col_rows = rows[by_col]
        self.col_vals = vals[by_col]
        self.row_slots = _slots(rows, cols, vals, m)
        self.col_slots = _slots(cols[by_col], rows[by_col], vals[by_col], n)
        self.bf = b.astype(np.float64)
        self.atb = [self._col_dot(j, b) for j in range(n)]
        self.norm2 = [self._col_dot(j, None) for j in range(n)]

    def column(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows and values of column ``j``'s nonzeros (wide problems)."""
        s0, s1 = int(self.col_ptr[j]), int(self.col_ptr[j + 1])
        return self.col_rows[s0:s1], self.col_vals[s0:s1]

    def _col_dot(self, j: int, v: np.ndarray | None) -> int:
        rows, vals = self.column(j)
        return int_dot(vals, vals if v is None else v[rows])

    def gram_column(self, t: int, cols: list[int]) -> list[int]:
        """Exact ``G[cols, t] = A[:, cols]^T A[:, t]``."""
        if self.tall:
            return [self.gram[q][t] for q in cols]
        if not cols:
            return []
        rows_t, vals_t = self.column(t)
        sub = self.A[np.ix_(rows_t, np.asarray(cols, np.int64))]
        top = int(np.abs(vals_t).max(initial=0)) * int(np.abs(sub).max(initial=0)) * len(rows_t)
        if top < 2**62:  # int64 products and sums cannot overflow (integer sums: any order)
            return [int(v) for v in (sub.T @ vals_t).tolist()]
        return [int_dot(sub[:, i], vals_t) for i in range(sub.shape[1])]

    def dual_float(self, x: np.ndarray, atb: np.ndarray) -> np.ndarray:
        """``A^T (b - A x)`` in floats, every sum sequential: ``A^T b - G x`` for tall
        problems, else through the residual."""
        if self.tall:
            return atb - _sequential_sums(self.gram_f * x[:, None])
        idx, val = self.row_slots
        r = self.bf - _sequential_sums(val * x[idx])
        idx, val = self.col_slots
        return _sequential_sums(val * r[idx])


def _slots(
    group: np.ndarray, member: np.ndarray, vals: np.ndarray, ngroups: int
) -> tuple[np.ndarray, np.ndarray]:
    """``[W, ngroups]`` member indices and float values of entries grouped by ``group``
    (sorted ascending): slot ``s`` holds each group's ``s``-th entry, zero-padded."""
    counts = np.bincount(group, minlength=ngroups) if group.size else np.zeros(ngroups, np.int64)
    width = int(counts.max(initial=0))
    starts = np.zeros(ngroups, np.int64)
    if ngroups > 1:
        starts[1:] = np.cumsum(counts)[:-1]
    pos = np.arange(group.shape[0], dtype=np.int64) - starts[group]
    idx = np.zeros((width, ngroups), np.int64)
    val = np.zeros((width, ngroups), np.float64)
    idx[pos, group] = member
    val[pos, group] = vals
    return idx, val


def _sequential_sums(M: np.ndarray) -> np.ndarray:
    """Column sums of a float ``[W, groups]`` matrix, added in slot order (a padding zero
    adds nothing): one slot at a time where there are few, else ``np.cumsum`` (each partial
    sum the previous one plus one element, not ``np.sum``'s pairwise blocks): the same order,
    the same bits on every machine."""
    if M.shape[0] <= 256:
        acc = np.zeros(M.shape[1], np.float64)
        for row in M:
            acc += row
        return acc
    return np.cumsum(M, axis=0)[-1]


def _fsum(v: np.ndarray) -> float:
    """The correctly rounded sum of a float vector (``math.fsum``: one result everywhere)."""
    return math.fsum(v.tolist())


# ------------------------------------------------------------------------ float phase
class _Cholesky:
    """Upper factor ``U`` (``G_PP = U^T U``) of the passive columns' Gram matrix, in the order
    they entered, ``y = U^-T A_P^T b`` and the least-squares solution ``z = U^-1 y``."""

    def __init__(self, cap: int):
        self.U = np.zeros((cap, cap), np.float64)
        self.y = np.zeros(cap, np.float64)
        self.z = np.zeros(cap, np.float64)
        self.k = 0

    def forward(self, g: np.ndarray) -> np.ndarray:
        """``U^-T g`` (column by column; exact zeros are skipped: they add nothing)."""
        U, k = self.U, g.shape[0]
        v = g.copy()
        for j in range(k):
            if v[j] != 0.0:
                v[j] = v[j] / U[j, j]
                v[j + 1 : k] -= v[j] * U[j, j + 1 : k]
        return v

    def backward(self, y: np.ndarray) -> np.ndarray:
        """``U^-1 y`` (column by column from the last; exact zeros skipped)."""
        U, k = self.U, y.shape[0]
        v = y.copy()
        out = np.zeros(k, np.float64)
        for j in range(k - 1, -1, -1):
            if v[j] != 0.0:
                out[j] = v[j] / U[j, j]
                v[:j] -= out[j] * U[:j, j]
        return out

    def append(self, g: np.ndarray, gtt: float, ct: float) -> bool:
        """Add a column (``g``: its Gram entries with the passive ones, ``gtt`` its squared
        norm, ``ct`` its ``A^T b``) and update ``z``; False (nothing changed) if it is
        dependent in floats. Only the columns connected to it through shared rows change:
        ``z[:k] -= z_k U^-1 u`` with ``u`` its new column of ``U`` (zero elsewhere)."""
        k = self.k
        u = self.forward(g)
        d2 = gtt - _fsum(u * u)
        if not d2 > _DEPENDENT * gtt:
            return False
        d = math.sqrt(d2)
        self.U[:k, k] = u
        self.U[k, k] = d
        self.y[k] = (ct - _fsum(u * self.y[:k])) / d
        zk = self.y[k] / d
        self.z[:k] -= zk * self.backward(u)
        self.z[k] = zk
        self.k = k + 1
        return True

    def remove(self, p: int, c: np.ndarray) -> None:
        """Drop the column at position ``p``: delete its row and column, restore the
        triangle below by a rank-one update (plane rotations), recompute ``y`` from ``c``
        (the remaining columns' ``A^T b``) and ``z``."""
        k = self.k
        U = self.U
        v = U[p, p + 1 : k].copy()
        U[p : k - 1, :k] = U[p + 1 : k, :k]  # rows up
        U[:k, p : k - 1] = U[:k, p + 1 : k]  # columns left
        U[k - 1, :k] = 0.0
        U[:k, k - 1] = 0.0
        k -= 1
        for i, j in enumerate(range(p, k)):  # v[i] belongs to row j
            vi = v[i]
            if vi == 0.0:
                continue  # nothing to rotate
            ujj = U[j, j]
            r = math.sqrt(ujj * ujj + vi * vi)
            cs, sn = r / ujj, vi / ujj
            U[j, j] = r
            row = (U[j, j + 1 : k] + sn * v[i + 1 :]) / cs
            v[i + 1 :] = cs * v[i + 1 :] - sn * row
            U[j, j + 1 : k] = row
        self.k = k
        self.y[:k] = self.forward(c)
        self.y[k:] = 0.0
        self.z[:k] = self.backward(self.y[:k])
        self.z[k:] = 0.0


def _float_path(pb: _Problem, limit: int) -> tuple[list[int], np.ndarray]:
    """Lawson-Hanson in floats with a fixed operation order: the passive columns (in the order
    they entered) and their values (all ``> 0``)."""
    n = pb.n
    cap = min(pb.m, n)
    ch = _Cholesky(cap)
    order: list[int] = []
    x = np.zeros(n, np.float64)
    passive = np.zeros(n, bool)
    blocked = np.zeros(n, bool)  # refused since x last changed (dependent, or z_t <= 0)
    atb = np.array([float(v) for v in pb.atb], np.float64)
    norm2 = [float(v) for v in pb.norm2]
    tol = _DUAL_TOL * float(np.abs(atb).max(initial=0.0))
    for _ in range(limit):
        w = pb.dual_float(x, atb)
        cand = np.where(passive | blocked, -np.inf, w)
        t = int(np.argmax(cand))  # the first of the largest
        if not cand[t] > tol:
            break
        if ch.k == cap:
            blocked[t] = True
            continue
        g = np.array([float(v) for v in pb.gram_column(t, order)], np.float64)
        if not ch.append(g, norm2[t], float(atb[t])):
            blocked[t] = True
            continue
        order.append(t)
        z = ch.z[: ch.k].copy()
        if not z[-1] > 0.0:  # rounding: the entering column would not move
            ch.remove(len(order) - 1, atb[order[:-1]])
            order.pop()
            blocked[t] = True
            continue
        passive[t] = True
        xs = x[order]
        while True:
            neg = np.flatnonzero(z <= 0.0)
            if neg.shape[0] == 0:
                break
            ratio = xs[neg] / (xs[neg] - z[neg])
            first = int(np.argmin(ratio))  # the first of the smallest
            alpha = ratio[first]
            xs = xs + alpha * (z - xs)
            xs[neg[first]] = 0.0
            for p in np.flatnonzero(xs <= 0.0)[::-1].tolist():  # last first: positions hold
                q = order.pop(p)
                passive[q] = False
                x[q] = 0.0
                xs = np.delete(xs, p)
                ch.remove(p, atb[order])
            z = ch.z[: ch.k].copy()
        x[order] = z
        blocked[:] = False
    return order, x


# ------------------------------------------------------------------------ exact phase
def _least_squares(pb: _Problem, order: list[int]) -> list[Fraction] | None:
    """The exact least-squares solution on the columns ``order``; None if they are
    dependent."""
    k = len(order)
    if k == 0:
        return []
    if pb.tall:  # normal equations G_PP z = A_P^T b
        G = pb.gram
        normal: list[dict[int, _Num]] = [
            {a: G[q][p] for a, p in enumerate(order) if G[q][p]} for q in order
        ]
        return solve_sparse(normal, [pb.atb[q] for q in order])
    # augmented system: r + A_P z = b on the rows A_P touches, A_P^T r = 0
    touched = sorted({i for q in order for i in pb.column(q)[0].tolist()})
    at = {i: a for a, i in enumerate(touched)}
    nr = len(touched)
    rows: list[dict[int, _Num]] = [{a: 1} for a in range(nr)]
    rhs: list[_Num] = [*(int(pb.b[i]) for i in touched), *([0] * k)]
    for c, q in enumerate(order):
        eq: dict[int, _Num] = {}
        for i, v in zip(*(a.tolist() for a in pb.column(q)), strict=True):
            rows[at[i]][nr + c] = v
            eq[at[i]] = v
        rows.append(eq)
    sol = solve_sparse(rows, rhs)
    return None if sol is None else sol[nr:]


def _dual_exact(pb: _Problem, x: dict[int, Fraction]) -> tuple[list[int], int]:
    """``A^T (b - A x)`` exactly, as integers over a common positive denominator ``D``:
    ``(D * dual, D)``."""
    D = math.lcm(*(v.denominator for v in x.values())) if x else 1
    X = {q: v.numerator * (D // v.denominator) for q, v in x.items()}
    if pb.tall:
        G = pb.gram
        return [D * pb.atb[j] - sum(G[j][q] * X[q] for q in X) for j in range(pb.n)], D
    r = [D * int(v) for v in pb.b.tolist()]
    for q, xq in X.items():
        for i, v in zip(*(a.tolist() for a in pb.column(q)), strict=True):
            r[i] -= v * xq
    dual = []
    for j in range(pb.n):
        rows, vals = pb.column(j)
        dual.append(sum(v * r[i] for i, v in zip(rows.tolist(), vals.tolist(), strict=True)))
    return dual, D


def _exact_finish(pb: _Problem, order: list[int], xf: np.ndarray, limit: int) -> NNLSSolution:
    """Lawson-Hanson in rationals from the float phase's passive set, to exact optimality."""
    order = list(order)
    x = {q: Fraction(float(xf[q])) for q in order}  # exactly the floats: all > 0
    converged = False
    for _ in range(limit):
        z = _least_squares(pb, order)
        if z is None:  # dependent in exact arithmetic (accepted in floats): last one leaves
            x.pop(order.pop())
            continue
        neg = [a for a, v in enumerate(z) if v <= 0]
        if neg:  # step towards z until the first passive value reaches 0; those leave
            alpha = min(x[order[a]] / (x[order[a]] - z[a]) for a in neg)
            x = {q: x[q] + alpha * (z[a] - x[q]) for a, q in enumerate(order)}
            order = [q for q in order if x[q] > 0]
            x = {q: x[q] for q in order}
            continue
        x = dict(zip(order, z, strict=True))
        dual, _ = _dual_exact(pb, x)
        best, t = 0, -1
        for j, d in enumerate(dual):  # the first of the largest positive dual values
            if d > best and j not in x:
                best, t = d, j
        if t < 0:
            converged = True
            break
        order.append(t)
        x[t] = Fraction(0)
    values: list[Fraction] = [Fraction(0)] * pb.n
    for q, xq in x.items():
        values[q] = xq
    return NNLSSolution(tuple(values), converged)
