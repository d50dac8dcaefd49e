"""Monotone heuristics that reduce a (nodes, edges) pair to one packing priority.

Applied to fractions of the limits (``nodes / node_limit``, ``edges / edge_limit``), so ``sum``,
``max`` and ``min`` weigh both components alike; ``product`` is scale-free either way. All are
monotone (``a >= b`` and ``c >= d`` imply ``h(a, c) >= h(b, d)``) and zero on an empty remainder.
``min`` is the minimum (a published version of this table defines it as ``max``).

The packers compare heuristic values exactly: `heuristic_keys` gives integers in the order of
the heuristic on the exact fractions (`HEURISTICS` are the definitions, for reference).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, overload

import numpy as np

from .._errors import UnknownNameError

__all__ = ["HEURISTICS", "heuristic_function", "heuristic_keys"]

HEURISTICS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "product": lambda a, b: a * b,
    "sum": lambda a, b: a + b,
    "max": np.maximum,
    "min": np.minimum,
    "node": lambda a, b: a + 0 * b,
    "edge": lambda a, b: b + 0 * a,
}


#: Exact integer forms: ``key(x, y, cx, cy)`` orders like ``h(x / cx, y / cy)`` on the exact
#: fractions: ``cx * cy * h(x / cx, y / cy)`` (``product``: ``x * y``, that times a constant).
def _max(a: Any, b: Any) -> Any:  # ints or arrays alike
    return np.maximum(a, b) if isinstance(a, np.ndarray) else max(a, b)


def _min(a: Any, b: Any) -> Any:
    return np.minimum(a, b) if isinstance(a, np.ndarray) else min(a, b)


_KEYS: dict[str, Callable[[Any, Any, int, int], Any]] = {
    "product": lambda x, y, cx, cy: x * y,
    "sum": lambda x, y, cx, cy: x * cy + y * cx,
    "max": lambda x, y, cx, cy: _max(x * cy, y * cx),
    "min": lambda x, y, cx, cy: _min(x * cy, y * cx),
    "node": lambda x, y, cx, cy: x + 0 * y,
    "edge": lambda x, y, cx, cy: y + 0 * x,
}


def heuristic_function(name: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The heuristic called ``name`` (one of ``HEURISTICS``); else `UnknownNameError` (a
    ``ValueError``) quoting it."""
    try:
        return HEURISTICS[name]
    except (KeyError, TypeError):
        raise UnknownNameError(
            f"unknown heuristic {name!r}; choose one of {', '.join(HEURISTICS)}"
        ) from None


@overload
def heuristic_keys(name: str, x: int, y: int, x_limit: int, y_limit: int) -> int: ...


@overload
def heuristic_keys(
    name: str, x: np.ndarray, y: np.ndarray, x_limit: int, y_limit: int
) -> np.ndarray: ...


@overload
def heuristic_keys(
    name: str, x: int | np.ndarray, y: int | np.ndarray, x_limit: int, y_limit: int
) -> int | np.ndarray: ...


def heuristic_keys(
    name: str, x: int | np.ndarray, y: int | np.ndarray, x_limit: int, y_limit: int
) -> int | np.ndarray:
    """Integer keys of the heuristic ``name`` at ``(x / x_limit, y / y_limit)``, in the order of
    its exact values (``x``, ``y``: integer arrays or ints with ``|x| <= x_limit`` and ``|y| <=
    y_limit`` up to a constant factor; limits below 1 count as 1). int64 where the magnitudes
    allow, else Python ints (object arrays): no rounding decides a comparison."""
    heuristic_function(name)  # (an unknown name: UnknownNameError)
    key = _KEYS[name]
    cx, cy = max(int(x_limit), 1), max(int(y_limit), 1)
    if np.ndim(x) == 0 and np.ndim(y) == 0:  # Python ints: exact at any size
        return int(key(int(x), int(y), cx, cy))
    ax = np.asarray(x, np.int64)
    ay = np.asarray(y, np.int64)
    mx = int(np.abs(ax).max(initial=0))
    my = int(np.abs(ay).max(initial=0))
    if max(mx * my, mx * cy + my * cx) >= 2**62:
        ax, ay = ax.astype(object), ay.astype(object)
    return key(ax, ay, cx, cy)
