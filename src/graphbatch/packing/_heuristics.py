"""Monotone heuristics that reduce a (nodes, edges) pair to one packing priority.

Applied to fractions of the limits (``nodes / node_limit``, ``edges / edge_limit``), so ``sum``,
``max`` and ``min`` weigh both components alike; ``product`` is scale-free either way. All are
monotone (``a >= b`` and ``c >= d`` imply ``h(a, c) >= h(b, d)``) and zero on an empty remainder.
``min`` is the minimum (a published version of this table defines it as ``max``).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

__all__ = ["HEURISTICS", "heuristic_function"]

HEURISTICS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "product": lambda a, b: a * b,
    "sum": lambda a, b: a + b,
    "max": np.maximum,
    "min": np.minimum,
    "node": lambda a, b: a + 0.0 * b,
    "edge": lambda a, b: b + 0.0 * a,
}


def heuristic_function(name: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The heuristic called ``name`` (one of ``HEURISTICS``); else ``ValueError`` quoting it."""
    try:
        return HEURISTICS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown heuristic {name!r}; choose one of {', '.join(HEURISTICS)}"
        ) from None
