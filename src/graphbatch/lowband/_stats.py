"""Dataset bandwidth statistics in the form of the paper's Figure 1.

Left: node counts and bandwidths before/after reduction; middle: share of graphs whose reduced
bandwidth is below each bound B; right: the distribution of N / B, where N / B >= 3 marks graphs
for which the band method's ~3NB cost beats full densification's N^2.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .._errors import InputError
from .._validate import as_count_array

__all__ = ["BandwidthSummary", "DEFAULT_BOUNDS", "bandwidth_summary", "node_bandwidth_ratio"]

#: Bandwidth bounds of the paper's Figure 1 (middle).
DEFAULT_BOUNDS = (128, 256, 512, 1024)
#: Bin edges of the N / B histogram (the paper's Figure 1, right, spans 1..10).
RATIO_EDGES = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 10.0, float("inf"))


def node_bandwidth_ratio(n_node: ArrayLike, bandwidth: ArrayLike) -> np.ndarray:
    """``N / B`` per graph, with ``B`` floored at 1 (a graph without off-diagonal edges has B=0)."""
    n = np.asarray(n_node, dtype=np.float64)
    b = np.maximum(np.asarray(bandwidth, dtype=np.float64), 1.0)
    return n / b


@dataclass(frozen=True)
class BandwidthSummary:
    """Figure-1 statistics of a dataset. Shares are fractions of all graphs in ``[0, 1]``."""

    num_graphs: int
    num_nodes: int
    max_nodes: int
    max_bandwidth_before: int
    max_bandwidth_after: int
    mean_bandwidth_before: float
    mean_bandwidth_after: float
    median_bandwidth_after: float
    share_rcm_narrower: float
    #: bound -> share of graphs with reduced bandwidth < bound
    share_below: dict[int, float]
    #: bound -> share of graphs with original bandwidth < bound
    share_below_before: dict[int, float]
    #: bound -> share of graphs with fewer nodes than bound
    share_nodes_below: dict[int, float]
    #: quantiles (0.1, 0.25, 0.5, 0.75, 0.9) of N / B after reduction
    ratio_quantiles: dict[str, float]
    #: share of graphs with N / B >= 3 (the band method's theoretical crossover)
    share_ratio_at_least_3: float
    ratio_bin_edges: list[float]
    ratio_counts: list[int]

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ratio_bin_edges"] = [e if np.isfinite(e) else "inf" for e in self.ratio_bin_edges]
        return d


def bandwidth_summary(
    n_node: ArrayLike, before: ArrayLike, after: ArrayLike, bounds: Sequence[int] = DEFAULT_BOUNDS
) -> BandwidthSummary:
    """Figure-1 statistics from per-graph node counts and bandwidths before/after reduction."""
    n = as_count_array(n_node, "n_node")
    b0 = as_count_array(before, "before")
    b1 = as_count_array(after, "after")
    if not (n.shape == b0.shape == b1.shape):
        raise InputError(
            f"n_node, before, after must have equal lengths, got {n.shape[0]}, "
            f"{b0.shape[0]}, {b1.shape[0]}"
        )
    if n.shape[0] == 0:
        raise InputError("no graphs: statistics need at least one graph")
    bounds = [int(x) for x in as_count_array(list(bounds), "bounds")]
    ratio = node_bandwidth_ratio(n, b1)
    counts, _ = np.histogram(ratio, bins=np.asarray(RATIO_EDGES))
    qs = (0.1, 0.25, 0.5, 0.75, 0.9)
    return BandwidthSummary(
        num_graphs=int(n.shape[0]),
        num_nodes=int(n.sum()),
        max_nodes=int(n.max()),
        max_bandwidth_before=int(b0.max()),
        max_bandwidth_after=int(b1.max()),
        mean_bandwidth_before=float(b0.mean()),
        mean_bandwidth_after=float(b1.mean()),
        median_bandwidth_after=float(np.median(b1)),
        share_rcm_narrower=float((b1 < b0).mean()),
        share_below={t: float((b1 < t).mean()) for t in bounds},
        share_below_before={t: float((b0 < t).mean()) for t in bounds},
        share_nodes_below={t: float((n < t).mean()) for t in bounds},
        ratio_quantiles={f"q{int(q * 100)}": float(np.quantile(ratio, q)) for q in qs},
        share_ratio_at_least_3=float((ratio >= 3.0).mean()),
        ratio_bin_edges=list(RATIO_EDGES),
        ratio_counts=[int(c) for c in counts],
    )
