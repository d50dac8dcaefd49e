"""Exact arithmetic for planning decisions: a plan is a pure function of the size table and the
request (docs/plan-format.md, "Same plan on every machine").

Every decision a planner makes (which pack a graph joins, which batches swap, which shapes win)
compares integers or exact rationals, never float results whose rounding or summation order
depends on SIMD width, thread count, BLAS or platform. This module holds the pieces shared by
the planners and packers:

* `decimal`: the exact rational a float option stands for (the shortest decimal that prints
  as it: ``0.1`` is ``1/10``);
* `FixedPoint` / `quantise_linear`: a linear cost ``a * nodes + b * edges`` with real
  coefficients quantised once to int64 fixed point (every graph's cost and every sum of costs
  an exact integer below `FIXED_POINT_LIMIT`);
* `share_keys`: exact integer keys ordering ``x / cap_x + y / cap_y`` (and its min and max);
* `top_indices`: the ``k`` largest of integer keys, ties by index (what ``argpartition``
  leaves to the SIMD kernel);
* `ratio_order`: the stable order of exact ratios ``num / den``.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike

from ._errors import InputError
from ._validate import MAX_TOTAL

__all__ = [
    "FIXED_POINT_LIMIT",
    "FixedPoint",
    "decimal",
    "quantise_linear",
    "share_keys",
    "top_indices",
    "ratio_order",
    "fits_int64",
    "square_sum",
    "int_dot",
    "floor_frac",
    "sortable",
    "abs_diff",
]

#: Largest total of quantised costs over a size table (the same bound as a size column's sum):
#: every cost and every sum of costs is an exact integer in int64 and in float64.
FIXED_POINT_LIMIT = MAX_TOTAL
#: Magnitudes below this are safe in int64 arithmetic with headroom for one more add.
_INT64_SAFE = 2**62


def decimal(value: object) -> Fraction:
    """The exact rational a real option stands for: an integer as itself, a float as the
    shortest decimal that prints as it (``repr``: ``0.1`` -> ``1/10``, ``0.99`` -> ``99/100``;
    the same on every platform). Non-finite values raise `InputError`."""
    if isinstance(value, Fraction):
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise InputError(f"expected a real number, got {value!r}")
    if isinstance(value, (int, np.integer)):
        return Fraction(int(value))
    v = float(value)
    if not math.isfinite(v):
        raise InputError(f"expected a finite number, got {value!r}")
    return Fraction(repr(v))


@dataclass(frozen=True)
class FixedPoint:
    """A linear cost quantised to integers: ``per_node * nodes + per_edge * edges`` units of
    ``2**-shift`` of the model's own unit (``shift`` may be negative: coarser units)."""

    per_node: int
    per_edge: int
    shift: int

    def costs(
        self, nodes: np.ndarray, edges: np.ndarray, out: np.ndarray | None = None
    ) -> np.ndarray:
        """Per-graph int64 costs, chunk by chunk (no int64 copies of the whole columns)."""
        n = nodes.shape[0]
        out = np.empty(n, np.int64) if out is None else out
        a, b = np.int64(self.per_node), np.int64(self.per_edge)
        step = 1 << 20
        for s0 in range(0, n, step):
            c = nodes[s0 : s0 + step].astype(np.int64)
            c *= a
            c += edges[s0 : s0 + step].astype(np.int64) * b
            out[s0 : s0 + step] = c
        return out

    def cost(self, nodes: int, edges: int) -> int:
        """The quantised cost of ``nodes`` and ``edges`` (Python int)."""
        return self.per_node * int(nodes) + self.per_edge * int(edges)


def _dyadic_shift(x: Fraction) -> float:
    """Smallest ``f >= 0`` with ``x * 2**f`` a whole number (``inf`` when there is none)."""
    d = x.denominator
    if d & (d - 1):
        return math.inf
    return float(d.bit_length() - 1)


def quantise_linear(
    a: object,
    b: object,
    total_nodes: int,
    total_edges: int,
    *,
    limit: int = FIXED_POINT_LIMIT,
    what: str = "cost model",
) -> FixedPoint:
    """``a * nodes + b * edges`` (``a, b >= 0`` reals, read by `decimal`) as a `FixedPoint`.

    The shift is the smallest ``f >= 0`` at which both coefficients are whole numbers (so
    integral coefficients stay as they are, and ``0.5`` needs one bit), but at most the
    largest ``f`` at which the table's total cost (``total_nodes``, ``total_edges``: the
    column sums, each taken as at least 1) stays within ``limit``; each coefficient is
    ``round(c * 2**f)``, ties to even. Only the ratio of the coefficients matters to the
    planners, so large coefficients are scaled down (a negative shift) rather than refused.
    Raises `InputError` when both quantised coefficients are 0 where the exact ones are not
    (only with a ``limit`` far below the default)."""
    a, b = decimal(a), decimal(b)
    if a < 0 or b < 0:
        raise InputError(f"{what}: coefficients must be >= 0, got {float(a)!r}, {float(b)!r}")
    # totals of at least 1: one node or edge alone never costs more than the limit either
    tn, te = max(int(total_nodes), 1), max(int(total_edges), 1)
    exact = max(_dyadic_shift(a), _dyadic_shift(b))
    total = a * tn + b * te  # the exact total in the model's unit
    if total == 0:
        f = 0
    else:
        # largest f with round(a 2^f) tn + round(b 2^f) te <= limit: start from the exact
        # total's scale, then step down while the rounded total is over the limit
        f = math.floor(math.log2(limit)) - math.ceil(math.log2(total)) + 1
        while _quantised_total(a, b, tn, te, f) <= limit:
            f += 1
        while _quantised_total(a, b, tn, te, f) > limit:
            f -= 1
        if exact < f:
            f = int(exact)
    qa, qb = _scaled(a, f), _scaled(b, f)
    if qa == 0 and qb == 0 and (a > 0 or b > 0):
        raise InputError(
            f"{what}: coefficients {float(a)!r}, {float(b)!r} quantise to 0 "
            f"within the limit {limit} on this table"
        )
    if qa * tn + qb * te > limit:  # by construction never; the one-line error if it were
        raise InputError(
            f"{what}: total cost {qa * tn + qb * te} (units of 2**-{f}) is over the limit {limit}"
        )
    return FixedPoint(qa, qb, f)


def _scaled(x: Fraction, f: int) -> int:
    return round(x * 2**f) if f >= 0 else round(x / 2**-f)


def _quantised_total(a: Fraction, b: Fraction, tn: int, te: int, f: int) -> int:
    return _scaled(a, f) * tn + _scaled(b, f) * te


def fits_int64(*bounds: int) -> bool:
    """Whether every bound (a largest magnitude, Python int) is safe in int64 arithmetic."""
    return all(int(v) < _INT64_SAFE for v in bounds)


def share_keys(x: ArrayLike, y: ArrayLike, cap_x: int, cap_y: int, how: str = "sum") -> np.ndarray:
    """Exact integer keys with the order of ``x / cap_x + y / cap_y`` (``how="sum"``), of
    ``min(x / cap_x, y / cap_y)`` (``"min"``) or of their max (``"max"``): the shares times
    ``cap_x * cap_y`` (capacities below 1 count as 1). int64 where the magnitudes allow, else
    an object array of Python ints (exact, slower)."""
    cx, cy = max(int(cap_x), 1), max(int(cap_y), 1)
    x, y = np.asarray(x), np.asarray(y)
    mx = int(np.abs(x).max(initial=0)) if x.size else 0
    my = int(np.abs(y).max(initial=0)) if y.size else 0
    if fits_int64(mx * cy + my * cx):
        kx = x.astype(np.int64) * np.int64(cy)
        ky = y.astype(np.int64) * np.int64(cx)
    else:
        kx = x.astype(np.int64).astype(object) * cy
        ky = y.astype(np.int64).astype(object) * cx
    if how == "sum":
        return kx + ky
    if how == "min":
        return np.minimum(kx, ky)
    if how == "max":
        return np.maximum(kx, ky)
    raise InputError(f"how must be 'sum', 'min' or 'max', got {how!r}")


def top_indices(keys: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest ``keys`` (integers), largest first, ties by index: the
    first ``k`` of ``np.argsort(-keys, kind="stable")``, in O(n) plus a sort of ``k``. (An
    ``argpartition`` leaves which of equal keys it returns, and their order, to the SIMD
    kernel NumPy dispatches.)"""
    n = keys.shape[0]
    k = min(int(k), n)
    if k <= 0:
        return np.zeros(0, np.int64)
    if k == n or keys.dtype == object:
        return np.argsort(_negated(keys), kind="stable")[:k]
    kth = np.partition(keys, n - k)[n - k]  # the k-th largest value (a value: no tie order)
    above = np.flatnonzero(keys > kth)
    at = np.flatnonzero(keys == kth)[: k - above.shape[0]]
    pick = np.concatenate([above, at])  # ascending within each part
    pick.sort(kind="stable")
    return pick[np.argsort(_negated(keys[pick]), kind="stable")]


def _negated(keys: np.ndarray) -> np.ndarray:
    if keys.dtype.kind == "u":
        return -(keys.astype(np.int64))
    return -keys


def ratio_order(num: np.ndarray, den: np.ndarray, *, descending: bool = False) -> np.ndarray:
    """The stable order (ties by index) of the exact ratios ``num / den`` (integers, ``den >
    0``), ascending or descending. One float sort where every ``|num|`` and ``den`` is below
    2**53 (a correctly rounded quotient of exact operands is monotone in the ratio, so only
    runs of equal floats can hide a different exact order); such runs are put in exact order
    through reduced fractions. Else (larger values) a sort on Python fractions."""
    num = np.asarray(num)
    den = np.asarray(den)
    n = num.shape[0]
    if n == 0:
        return np.zeros(0, np.int64)
    big = (
        num.dtype == object
        or den.dtype == object
        or not (int(np.abs(num).max()) <= 2**53 and int(den.max()) <= 2**53)
    )
    if big:
        fr = [Fraction(int(p), int(q)) for p, q in zip(num.tolist(), den.tolist(), strict=True)]
        return np.asarray(
            sorted(range(n), key=(lambda i: -fr[i]) if descending else (lambda i: fr[i])), np.int64
        )
    num = num.astype(np.int64)
    den = den.astype(np.int64)
    f = num.astype(np.float64) / den
    order = np.argsort(-f if descending else f, kind="stable")
    fs = f[order]
    same = fs[1:] == fs[:-1]
    if not same.any():
        return order
    # reduced fractions tell exact equality; runs of equal floats holding unequal ratios
    # (different values within one rounding) are re-sorted exactly, stable by index
    g = np.gcd(num, den)
    rn, rd = (num // g)[order], (den // g)[order]
    differ = same & ((rn[1:] != rn[:-1]) | (rd[1:] != rd[:-1]))
    if not differ.any():
        return order
    starts = np.flatnonzero(np.concatenate([[True], ~same]))
    ends = np.concatenate([starts[1:], [n]])
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        if e - s > 1 and differ[s : e - 1].any():
            idx = np.sort(order[s:e])  # stable: by index within equal ratios
            fr = [Fraction(int(num[i]), int(den[i])) for i in idx.tolist()]
            keys = [-f for f in fr] if descending else fr
            pos = sorted(range(e - s), key=keys.__getitem__)
            order[s:e] = idx[pos]
    return order


def floor_frac(x: Fraction) -> int:
    """``floor(x)`` of a rational, exactly."""
    return x.numerator // x.denominator


def square_sum(values: np.ndarray) -> int:
    """The exact sum of squares of integer ``values`` (``|v| < 2**54``), as a Python int."""
    return int_dot(values, values, name="square_sum")


def int_dot(u: np.ndarray, v: np.ndarray, *, name: str = "int_dot") -> int:
    """The exact dot product of integer vectors (``|values| < 2**54``), as a Python int:
    chunk by chunk in int64, split into signed 18-bit limbs where the products could
    overflow, so no int64 product or sum overflows (integer sums are exact in any order)."""
    u = np.asarray(u)
    v = np.asarray(v)
    step = 1 << 20  # products of limbs < 2**36: a chunk's sums stay below 2**56
    bounds = [int(np.abs(a.astype(np.int64)).max(initial=0)) if a.size else 0 for a in (u, v)]
    if max(bounds) >= 2**54:
        raise InputError(f"{name}: value {max(bounds)} is over the limit 2**54")
    if bounds[0] * bounds[1] < 2**36:  # a chunk's products and their sum fit as they are
        return sum(
            int(np.dot(u[s0 : s0 + step].astype(np.int64), v[s0 : s0 + step].astype(np.int64)))
            for s0 in range(0, u.shape[0], step)
        )
    total = 0
    for s0 in range(0, u.shape[0], step):
        la = _limbs(u[s0 : s0 + step].astype(np.int64))
        lb = la if v is u else _limbs(v[s0 : s0 + step].astype(np.int64))
        for i in range(3):
            for j in range(3):
                total += int(np.dot(la[i], lb[j])) << (18 * (i + j))
    return total


def _limbs(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Signed 18-bit limbs of integers below 2**54: ``a = sum(limb[i] << 18 * i)``."""
    mask = (1 << 18) - 1
    sign = np.where(a < 0, np.int64(-1), np.int64(1))
    m = np.abs(a)
    return (sign * (m & mask), sign * ((m >> 18) & mask), sign * (m >> 36))


def sortable(keys: np.ndarray) -> np.ndarray:
    """Integer keys as int64 in the same order (Python-int keys become their dense ranks)."""
    if keys.dtype != object:
        return keys
    _, rank = np.unique(keys, return_inverse=True)
    return rank.reshape(keys.shape).astype(np.int64)


def abs_diff(x: np.ndarray, scale: int, y: int) -> np.ndarray:
    """``|x * scale - y|`` exactly for integer ``x`` (int64 where it fits, else Python ints)."""
    x = np.asarray(x)
    top = int(np.abs(x).max(initial=0)) * abs(int(scale)) + abs(int(y))
    if not fits_int64(top):
        x = x.astype(np.int64).astype(object)
        return np.abs(x * int(scale) - int(y))
    return np.abs(x.astype(np.int64) * np.int64(scale) - np.int64(y))
