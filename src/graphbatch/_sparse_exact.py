"""Exact solution of a square sparse linear system over the rationals (`solve_sparse`):
Gaussian elimination on ``{column: value}`` rows of integers and `fractions.Fraction`, with
pivots chosen for sparsity. The exact phase of `graphbatch._exact_nnls` solves its least-squares
systems with it; in exact arithmetic the pivot order changes only the work, never the answer."""

from __future__ import annotations

import heapq
from fractions import Fraction

__all__ = ["Exact", "solve_sparse"]

#: An exact number: an integer or a rational.
Exact = int | Fraction


def solve_sparse(rows: list[dict[int, Exact]], rhs: list[Exact]) -> list[Fraction] | None:
    """Solve a square sparse system exactly (Gaussian elimination over rationals; pivots
    chosen for sparsity: singletons first, else a small Markowitz search; in exact arithmetic
    the choice changes only the work, never the answer). ``rows[i]``: column -> integer or
    Fraction. None if the matrix is singular."""
    size = len(rows)
    R: dict[int, dict[int, Exact]] = {i: dict(r) for i, r in enumerate(rows)}
    rhs_ = {i: Fraction(v) for i, v in enumerate(rhs)}
    C: dict[int, set[int]] = {j: set() for j in range(size)}
    for i, r in R.items():
        for j in r:
            C[j].add(i)
    if any(not r for r in R.values()) or any(not s for s in C.values()):
        return None
    col_single = [j for j in range(size) if len(C[j]) == 1]
    row_single = [i for i in range(size) if len(R[i]) == 1]
    steps: list[tuple[int, dict[int, Exact], Fraction]] = []
    while R:
        pivot: tuple[int, int] | None = None
        while col_single and pivot is None:
            j = col_single.pop()
            if j in C and len(C[j]) == 1:
                pivot = (next(iter(C[j])), j)
        while row_single and pivot is None:
            i = row_single.pop()
            if i in R and len(R[i]) == 1:
                pivot = (i, next(iter(R[i])))
        if pivot is None:  # the least fill among the shortest rows' entries
            best = -1
            for i in heapq.nsmallest(4, R, key=lambda i: (len(R[i]), i)):
                for j in sorted(R[i]):
                    cost = (len(R[i]) - 1) * (len(C[j]) - 1)
                    if best < 0 or cost < best:
                        best, pivot = cost, (i, j)
        assert pivot is not None  # every remaining row has an entry (checked as rows empty)
        pi, pj = pivot
        prow = R.pop(pi)
        prhs = rhs_.pop(pi)
        for j in prow:
            C[j].discard(pi)
        pval = prow[pj]
        for i in sorted(C.pop(pj)):
            r = R[i]
            f = Fraction(r.pop(pj)) / pval
            for j, v in prow.items():
                if j == pj:
                    continue
                nv = r.get(j, 0) - f * v
                if nv:
                    if j not in r:
                        C[j].add(i)
                    r[j] = nv
                elif j in r:
                    del r[j]
                    C[j].discard(i)
            rhs_[i] -= f * prhs
            if not r:
                return None
            if len(r) == 1:
                row_single.append(i)
        for j in prow:
            if j != pj:
                if not C[j]:
                    return None
                if len(C[j]) == 1:
                    col_single.append(j)
        steps.append((pj, prow, prhs))
    x: dict[int, Fraction] = {}
    for pj, prow, prhs in reversed(steps):
        s = prhs
        for j, v in prow.items():
            if j != pj:
                s -= v * x[j]
        x[pj] = s / prow[pj]
    return [x[j] for j in range(size)]
