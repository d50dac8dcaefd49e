"""Low-bandwidth message passing (Kochkov et al.-style "GNN on dense hardware" recipe).

NumPy/SciPy part: RCM bandwidth reduction as one-time preprocessing, Figure-1 dataset statistics,
and supergraphs of ``K·S`` slots with the paper's edge rule. The PyTorch part (dense band
propagation, scatter reference, GGNN) lives in ``graphbatch.lowband.nn`` and is imported only
from there.
"""

from ._bandwidth import (
    Reordering,
    apply_reordering,
    bandwidths,
    graph_bandwidth,
    rcm_permutation,
    reduce_bandwidth,
)
from ._coverage import band_coverage
from ._graphs import EdgeGraphs
from ._sources import graphs_from_python, graphs_from_store, reorder_store
from ._stats import DEFAULT_BOUNDS, BandwidthSummary, bandwidth_summary, node_bandwidth_ratio
from ._supergraph import (
    BLOCK_C,
    BLOCK_L,
    BLOCK_U,
    DROPPED,
    PREFERRED_STRATEGIES,
    Supergraph,
    SupergraphBatches,
    build_supergraphs,
    classify_edges,
    default_strategy,
)

__all__ = [
    "BLOCK_C",
    "BLOCK_L",
    "BLOCK_U",
    "DEFAULT_BOUNDS",
    "DROPPED",
    "PREFERRED_STRATEGIES",
    "BandwidthSummary",
    "EdgeGraphs",
    "Reordering",
    "Supergraph",
    "SupergraphBatches",
    "apply_reordering",
    "band_coverage",
    "bandwidth_summary",
    "bandwidths",
    "build_supergraphs",
    "classify_edges",
    "default_strategy",
    "graph_bandwidth",
    "graphs_from_python",
    "graphs_from_store",
    "node_bandwidth_ratio",
    "rcm_permutation",
    "reduce_bandwidth",
    "reorder_store",
]
