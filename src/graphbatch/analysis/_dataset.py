"""Dataset size statistics: the tuple-packing paper's Table 1 plus quantiles and tail shape.

Pure NumPy/SciPy, no printing: `describe` returns a `DatasetSummary` that the CLI and the report
format.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .._errors import InputError, InputTypeError
from .._sizes import GraphSizes

__all__ = ["ColumnSummary", "DatasetSummary", "DEFAULT_QUANTILES", "describe", "describe_column"]

#: Quantiles reported by default (fractions of the graphs at or below the value).
DEFAULT_QUANTILES: tuple[float, ...] = (0.0, 0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99, 1.0)


def _quantile_key(q: float) -> str:
    """``0.5 -> "p50"``, ``0.999 -> "p99.9"``."""
    text = f"{q * 100:.4f}".rstrip("0").rstrip(".")
    return "p" + text


@dataclass(frozen=True)
class ColumnSummary:
    """Statistics of one per-graph count (nodes, edges or bytes) over ``N`` graphs.

    ``padding_efficiency`` = total / (N * max): the share of useful slots when every graph is padded
    to the largest one (Table 1 of the tuple-packing paper), 1.0 when every value is 0.
    ``potential_speedup`` = 1 / padding_efficiency. ``excess_kurtosis`` is Fisher's (normal = 0,
    ``scipy.stats.kurtosis`` with ``bias=True``), NaN when all values are equal. ``quantiles``
    maps a fraction ``q`` to the linear-interpolated quantile (``numpy.quantile``).
    """

    name: str
    total: int
    min: int
    max: int
    mean: float
    std: float
    quantiles: dict[float, float]
    skewness: float
    excess_kurtosis: float
    padding_efficiency: float
    potential_speedup: float

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict: quantiles keyed ``p50`` etc., NaN written as ``None``."""
        out: dict[str, Any] = {}
        for key in (
            "total",
            "min",
            "max",
            "mean",
            "std",
            "skewness",
            "excess_kurtosis",
            "padding_efficiency",
            "potential_speedup",
        ):
            out[key] = _finite_or_none(getattr(self, key))
        out["quantiles"] = {_quantile_key(q): float(v) for q, v in self.quantiles.items()}
        return out


@dataclass(frozen=True)
class DatasetSummary:
    """Size statistics of a dataset: graph count, distinct (nodes, edges) pairs, per-column stats.

    ``distinct_pairs`` is the paper's "node-edge length count": how many different
    (nodes, edges) combinations occur. ``bytes`` is present when the size table has ``n_bytes``.
    """

    num_graphs: int
    distinct_pairs: int
    nodes: ColumnSummary
    edges: ColumnSummary
    bytes: ColumnSummary | None = None

    def columns(self) -> list[ColumnSummary]:
        return [c for c in (self.nodes, self.edges, self.bytes) if c is not None]

    def table_rows(self) -> list[dict[str, Any]]:
        """Table 1 of the tuple-packing paper, one dict per metric with a value per column
        (keys ``metric``, ``nodes``, ``edges`` and ``bytes`` when present)."""
        cols = self.columns()

        def row(metric: str, get: Callable[..., Any]) -> dict[str, Any]:
            return {"metric": metric, **{c.name: get(c) for c in cols}}

        return [
            {"metric": "graphs", **{c.name: self.num_graphs for c in cols}},
            row("max per graph", lambda c: c.max),
            {
                "metric": "distinct (nodes, edges) pairs",
                **{c.name: self.distinct_pairs for c in cols},
            },
            row("padding efficiency (pad to max)", lambda c: c.padding_efficiency),
            row("potential speedup (1 / efficiency)", lambda c: c.potential_speedup),
            row("mean per graph", lambda c: c.mean),
            row("std per graph", lambda c: c.std),
            row("min per graph", lambda c: c.min),
            *[
                row(f"quantile {_quantile_key(q)}", lambda c, q=q: c.quantiles[q])
                for q in self.nodes.quantiles
            ],
            row("skewness", lambda c: c.skewness),
            row("excess kurtosis", lambda c: c.excess_kurtosis),
        ]

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "num_graphs": self.num_graphs,
            "distinct_pairs": self.distinct_pairs,
        }
        for col in self.columns():
            out[col.name] = col.as_dict()
        return out


def _finite_or_none(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def describe_column(
    values: ArrayLike, name: str, quantiles: Sequence[float] = DEFAULT_QUANTILES
) -> ColumnSummary:
    """`ColumnSummary` of one 1-D array of non-negative counts (at least one value)."""
    from scipy import stats as sstats

    x = np.asarray(values, dtype=np.int64)
    if x.ndim != 1 or x.shape[0] == 0:
        raise InputError(f"{name}: need a non-empty 1-D array, got shape {x.shape}")
    qs = tuple(float(q) for q in quantiles)
    for q in qs:
        if not 0.0 <= q <= 1.0:
            raise InputError(f"quantile {q!r} is outside [0, 1]")
    n = int(x.shape[0])
    total = int(x.sum())
    vmax = int(x.max())
    xf = x.astype(np.float64)
    std = float(xf.std())
    if std > 0.0:
        kurt = float(sstats.kurtosis(xf, fisher=True, bias=True))
        skew = float(sstats.skew(xf, bias=True))
    else:  # constant data: the moment ratios are 0/0
        kurt = skew = float("nan")
    eff = total / (n * vmax) if vmax > 0 else 1.0
    qv = np.quantile(xf, qs) if qs else np.zeros(0)
    return ColumnSummary(
        name=name,
        total=total,
        min=int(x.min()),
        max=vmax,
        mean=float(xf.mean()),
        std=std,
        quantiles={q: float(v) for q, v in zip(qs, np.atleast_1d(qv), strict=True)},
        skewness=skew,
        excess_kurtosis=kurt,
        padding_efficiency=float(eff),
        potential_speedup=float(1.0 / eff),
    )


def describe(sizes: GraphSizes, quantiles: Sequence[float] = DEFAULT_QUANTILES) -> DatasetSummary:
    """Table 1 of the tuple-packing paper for ``sizes``, plus quantiles, mean, std and kurtosis."""
    if not isinstance(sizes, GraphSizes):
        raise InputTypeError(f"sizes must be a GraphSizes, got {type(sizes).__name__}")
    hist = sizes.histogram()
    return DatasetSummary(
        num_graphs=len(sizes),
        distinct_pairs=len(hist),
        nodes=describe_column(sizes.n_node, "nodes", quantiles),
        edges=describe_column(sizes.n_edge, "edges", quantiles),
        bytes=None if sizes.n_bytes is None else describe_column(sizes.n_bytes, "bytes", quantiles),
    )
