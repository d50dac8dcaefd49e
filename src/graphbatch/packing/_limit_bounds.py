"""Bounds and exact points of the limit search (`search_limits`): its arguments checked
(`check_search_args`), the padded limits searched (`limit_bounds`, at most `MAX_LIMIT`), the
sample a point is estimated on (`sample_counts`) and the refinement's geometric and evenly
spaced points in exact integer arithmetic (`geometric_points`, `even_points`)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from .._errors import InputError, InputTypeError
from .._exact import fits_int64
from .._sizes import GraphSizes, SizeHistogram

__all__ = [
    "MAX_LIMIT",
    "check_range",
    "check_search_args",
    "even_points",
    "geometric_points",
    "iroot",
    "limit_bounds",
    "sample_counts",
]

#: Largest limit the search considers (keeps every product and sum inside int64).
MAX_LIMIT = 2**40


def sample_counts(count: np.ndarray, m: int) -> np.ndarray:
    """Counts scaled to ``m`` graphs in total (largest remainders, ties by bin), exact."""
    total = int(count.sum())
    if total <= m:
        return count
    x = count.astype(np.int64)
    if not fits_int64(int(x.max()) * m):
        x = x.astype(object)
    x = x * m  # count * m / total: floor and remainder over the common denominator
    f = (x // total).astype(np.int64)
    rem = x - f * total
    rest = m - int(f.sum())
    if rest > 0:
        f[np.argsort(-rem.astype(np.int64), kind="stable")[:rest]] += 1
    return f


def iroot(x: int, k: int) -> int:
    """``floor(x ** (1 / k))`` of a non-negative integer, by integer Newton steps."""
    if x < 2:
        return x
    r = 1 << -(-x.bit_length() // k)  # >= the root
    while True:
        s = ((k - 1) * r + x // r ** (k - 1)) // k
        if s >= r:
            return r
        r = s


def geometric_points(a: int, b: int, num: int) -> list[int]:
    """``np.rint(np.geomspace(a, b, num))`` exactly: the integer nearest to
    ``a ** (1 - t) * b ** t`` for ``t = i / (num - 1)`` (halves cannot occur)."""
    if num == 1:
        return [a]
    g = num - 1
    out = []
    for i in range(num):
        m = a ** (g - i) * b**i  # the point is m ** (1 / g)
        r = iroot(m, g)
        out.append(r + 1 if 2**g * m > (2 * r + 1) ** g else r)
    return out


def even_points(a: int, b: int, num: int) -> list[int]:
    """``np.rint(np.linspace(a, b, num))`` exactly (halves to even)."""
    if num == 1:
        return [a]
    return [round(a + Fraction((b - a) * i, num - 1)) for i in range(num)]


def check_range(value: Any, name: str) -> tuple[int, int]:
    try:
        lo, hi = (int(v) for v in value)
    except (TypeError, ValueError):
        raise InputTypeError(
            f"{name} must be a pair (low, high) of integers, got {value!r}"
        ) from None
    if lo < 0 or hi < lo:
        raise InputError(f"{name} must satisfy 0 <= low <= high, got {value!r}")
    if hi > MAX_LIMIT:
        raise InputError(f"{name} high end {hi} exceeds the largest limit searched, {MAX_LIMIT}")
    return lo, hi


def check_search_args(
    sizes: GraphSizes,
    grid: int,
    exact_points: int,
    sample_graphs: int,
    tolerance: float,
    max_graphs: int | None,
) -> int | None:
    """`search_limits`'s arguments checked; returns ``max_graphs`` as an int or ``None``."""
    if not isinstance(sizes, GraphSizes):
        raise InputTypeError(f"sizes must be a GraphSizes, got {type(sizes).__name__}")
    if isinstance(grid, bool) or not isinstance(grid, (int, np.integer)) or grid < 1:
        raise InputError(f"grid must be an integer >= 1 points per interval, got {grid!r}")
    if (
        isinstance(exact_points, bool)
        or not isinstance(exact_points, (int, np.integer))
        or exact_points < 1
    ):
        raise InputError(f"exact_points must be an integer >= 1, got {exact_points!r}")
    if (
        isinstance(sample_graphs, bool)
        or not isinstance(sample_graphs, (int, np.integer))
        or sample_graphs < 1
    ):
        raise InputError(f"sample_graphs must be an integer >= 1, got {sample_graphs!r}")
    if not (isinstance(tolerance, (int, float, np.floating)) and 0 <= tolerance < 1):
        raise InputError(f"tolerance must be a number in [0, 1), got {tolerance!r}")
    if max_graphs is not None:
        if (
            isinstance(max_graphs, bool)
            or not isinstance(max_graphs, (int, np.integer))
            or max_graphs < 2
        ):
            raise InputError(
                f"max_graphs must be an integer >= 2 (one graph is padding), got {max_graphs!r}"
            )
        max_graphs = int(max_graphs)
    if len(sizes) == 0:
        raise InputError("the size table holds no graphs; nothing to pack")
    return max_graphs


def limit_bounds(
    hist: SizeHistogram,
    node_range: tuple[int, int] | None,
    edge_range: tuple[int, int] | None,
) -> tuple[int, int, int, int]:
    """``(n_lo, n_hi, e_lo, e_hi)``: the padded limits searched, from the smallest that holds
    the largest graph (or the user's range) up to the range's end or `MAX_LIMIT`."""
    need_n = max(int(hist.n_node.max()) + 1, 2)  # one padding node, at least one real node
    need_e = int(hist.n_edge.max())
    if need_n > MAX_LIMIT or need_e > MAX_LIMIT:
        raise InputError(
            f"the largest graph ({need_n - 1} nodes, {need_e} edges) exceeds the "
            f"largest limit searched, {MAX_LIMIT}"
        )
    user_n = check_range(node_range, "node_range") if node_range is not None else None
    user_e = check_range(edge_range, "edge_range") if edge_range is not None else None
    n_lo = max(need_n, user_n[0]) if user_n else need_n
    n_hi = user_n[1] if user_n else MAX_LIMIT
    e_lo = max(need_e, user_e[0]) if user_e else need_e
    e_hi = user_e[1] if user_e else MAX_LIMIT
    if n_hi < need_n or e_hi < need_e:
        raise InputError(
            f"limits up to {n_hi} nodes / {e_hi} edges cannot hold the largest graph "
            f"({need_n - 1} nodes + 1 padding node, {need_e} edges)"
        )
    return n_lo, n_hi, e_lo, e_hi
