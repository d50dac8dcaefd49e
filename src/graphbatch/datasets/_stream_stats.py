"""Streaming accumulators for `graphbatch.datasets.atoms_statistics`: least squares over row
blocks (TSQR) and mean/variance (Chan's merge), so a store is read in chunks, never whole.

`StreamingLeastSquares` solves ``min ||A x - b||`` for the rows of ``A`` (per-structure element
counts) and ``b`` (energies) given block by block: it keeps the upper-triangular ``R`` of the QR
factorisation of ``[A | b]`` seen so far (``(Z + 1) x (Z + 1)``), and each block is factorised
together with it, so ``||A x - b||^2 = ||R_A x - r_b||^2 + const`` at every step. The final
problem is handed to ``np.linalg.lstsq`` with the cut-off it would use on the whole ``A``
(``eps * max(G, Z)``), so rank-deficient sets (every structure of one stoichiometry, e.g. water
boxes) get the same minimum-norm solution as ``lstsq(A, b)``. This is MACE's
``compute_average_E0s`` without the ``G x Z`` matrix; the normal equations ``A^T A`` would
square the condition number and could not tell rank deficiency apart from rounding.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Moments", "StreamingLeastSquares", "widen_columns"]

_EPS = float(np.finfo(np.float64).eps)


def widen_columns(r: np.ndarray, old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """``r`` (columns: elements ``old`` then the right-hand side) with zero columns inserted
    for the elements of ``new`` (sorted, a superset of ``old``) that ``old`` lacks: valid
    because no row seen so far has an atom of those elements."""
    out = np.zeros((r.shape[0], new.shape[0] + 1))
    out[:, np.searchsorted(new, old)] = r[:, :-1]
    out[:, -1] = r[:, -1]
    return out


class StreamingLeastSquares:
    """``min ||A x - b||`` over blocks of rows whose columns follow a growing, sorted element
    list (`widen`). ``rows``: how many rows were added."""

    def __init__(self) -> None:
        self.zs = np.zeros(0, dtype=np.int64)
        self._r = np.zeros((0, 1))
        self.rows = 0

    def widen(self, zs: np.ndarray) -> None:
        """Use the columns ``zs`` (sorted, a superset of the current ones) from now on."""
        if zs.shape[0] != self.zs.shape[0]:
            self._r = widen_columns(self._r, self.zs, zs)
            self.zs = zs

    def add(self, a: np.ndarray, b: np.ndarray) -> None:
        """Rows ``a`` (``[k, len(zs)]``) with right-hand sides ``b`` (``[k]``)."""
        if a.shape[0] == 0:
            return
        block = np.concatenate([self._r, np.column_stack([a, b])])
        self._r = np.asarray(np.linalg.qr(block, mode="r"))
        self.rows += a.shape[0]

    def solve(self, columns: np.ndarray) -> np.ndarray:
        """The solution restricted to ``columns`` (a sorted subset of ``zs``: the others are
        all-zero columns, dropped as MACE's table of the head's own elements drops them), as
        ``np.linalg.lstsq`` gives it for the whole ``A`` (cut-off ``eps * max(G, Z)``)."""
        keep = np.searchsorted(self.zs, columns)
        r_a, r_b = self._r[:, keep], self._r[:, -1]
        rcond = _EPS * max(self.rows, columns.shape[0])
        return np.linalg.lstsq(r_a, r_b, rcond=rcond)[0]


class Moments:
    """Count, mean and sum of squared deviations of values given in blocks (Chan et al.'s
    pairwise merge: no cancellation, whatever the blocks)."""

    def __init__(self) -> None:
        self.n = 0
        self.mean = 0.0
        self.m2 = 0.0

    def add(self, x: np.ndarray) -> None:
        k = int(x.shape[0])
        if k == 0:
            return
        mean_b = float(x.mean())
        m2_b = float(np.square(x - mean_b).sum())
        n = self.n + k
        delta = mean_b - self.mean
        self.m2 += m2_b + delta * delta * self.n * k / n
        self.mean += delta * k / n
        self.n = n

    def mace_std(self) -> float:
        """MACE's ``scatter_std`` (unbiased, ``+ 1e-6`` in the denominator) and
        ``_check_non_zero`` (a zero standard deviation becomes 1)."""
        std = float(np.sqrt(self.m2 / (max(self.n - 1, 1) + 1e-6)))
        return 1.0 if std == 0 else std
