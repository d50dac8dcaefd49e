"""Graph cost for memory balancing: ``n_bytes`` when the size table has it, else ``a·n + b·e``.

Costs are integers: ``n_bytes`` as stored, the linear model quantised once to int64 fixed point
(`graphbatch._exact.quantise_linear`), so every comparison of costs and of their sums is
exact (the same plan on every machine)."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from .._errors import InputError, InputTypeError
from .._exact import FixedPoint, quantise_linear
from .._sizes import GraphSizes

__all__ = ["CostModel", "cost_model_from_options", "DEFAULT_COST_NODES", "DEFAULT_COST_EDGES"]

#: Default linear model when the size table has no ``n_bytes``: cost = nodes + edges.
DEFAULT_COST_NODES = 1.0
DEFAULT_COST_EDGES = 1.0


def _coefficient(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputTypeError(f"{name} must be a real number, got {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise InputError(f"{name} must be finite, got {value!r}")
    if v < 0:
        raise InputError(f"{name} = {value!r} is negative; cost coefficients must be >= 0")
    return v


@dataclass(frozen=True)
class CostModel:
    """How a graph's memory cost is computed.

    ``source == "n_bytes"``: the size table's per-graph bytes. ``source == "linear"``:
    ``per_node * n_node + per_edge * n_edge`` (coefficients >= 0, not both zero).
    """

    source: str
    per_node: float = DEFAULT_COST_NODES
    per_edge: float = DEFAULT_COST_EDGES

    def __post_init__(self) -> None:
        if self.source not in ("n_bytes", "linear"):
            raise InputError(f"cost source must be 'n_bytes' or 'linear', got {self.source!r}")
        a = _coefficient(self.per_node, "cost_nodes")
        b = _coefficient(self.per_edge, "cost_edges")
        if self.source == "linear" and a == 0 and b == 0:
            raise InputError("cost_nodes and cost_edges are both 0: every graph would cost nothing")
        object.__setattr__(self, "per_node", a)
        object.__setattr__(self, "per_edge", b)

    def fixed_point(self, sizes: GraphSizes) -> FixedPoint:
        """The linear model quantised for this table (`quantise_linear`: coefficients read as
        the decimals they print as, scaled by ``2**shift`` and rounded, the table's total
        cost at most 2**53; integral coefficients stay as they are)."""
        if self.source != "linear":
            raise InputError("fixed_point() is the linear model's; n_bytes costs are integers")
        return quantise_linear(
            self.per_node,
            self.per_edge,
            int(sizes.n_node.sum(dtype=np.int64)),
            int(sizes.n_edge.sum(dtype=np.int64)),
            what=f"cost model cost_nodes={self.per_node!r}, cost_edges={self.per_edge!r}",
        )

    def costs(self, sizes: GraphSizes) -> tuple[np.ndarray, int]:
        """Per-graph int64 costs and their unit: ``(costs, shift)``, a cost of ``c`` standing
        for ``c * 2**-shift`` bytes (``n_bytes``, shift 0) or units of the linear model."""
        if self.source == "n_bytes":
            if sizes.n_bytes is None:
                raise InputError("cost source 'n_bytes' needs a size table with n_bytes")
            return sizes.n_bytes.astype(np.int64), 0
        fixed = self.fixed_point(sizes)
        return fixed.costs(sizes.n_node, sizes.n_edge), fixed.shift

    def as_meta(self) -> dict:
        """JSON-able description stored in ``plan.meta["cost_model"]``."""
        if self.source == "n_bytes":
            return {"source": "n_bytes"}
        return {"source": "linear", "per_node": self.per_node, "per_edge": self.per_edge}


def cost_model_from_options(sizes: GraphSizes, options: dict) -> CostModel:
    """``n_bytes`` when present and no coefficient is given; else the linear model.

    Options ``cost_nodes`` / ``cost_edges`` (defaults 1, 1) select and parametrise the linear
    model; giving either one makes the linear model win over ``n_bytes``. Negative or non-finite
    coefficients raise ``ValueError``.
    """
    a = options.get("cost_nodes")
    b = options.get("cost_edges")
    if a is None and b is None and sizes.n_bytes is not None:
        return CostModel("n_bytes")
    return CostModel(
        "linear",
        DEFAULT_COST_NODES if a is None else a,
        DEFAULT_COST_EDGES if b is None else b,
    )
