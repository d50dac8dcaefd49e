"""Tuple packing on (nodes, edges) histograms: longest-/shortest-pack-first histogram packing,
balanced dealing, NNLS, K-shape buckets, per-epoch graph assignment and the limit search.

Pure NumPy/SciPy; the planning strategies built on it are ``pack-lpf``, ``pack-spf``,
``pack-lpf-1d``, ``pack-nnls`` and ``buckets`` (``graphbatch.plan``).
"""

from ._assign import assign_graphs
from ._balanced import BalancedPacking, balanced_pack
from ._bucket_shapes import choose_tight_shapes, pack_needs, shape_padding_bound
from ._buckets import MAX_SHAPES, choose_scales, graphs_for_scale, pack_scales, shape_for_scale
from ._heuristics import HEURISTICS, heuristic_function, heuristic_keys
from ._histogram import FITS, pack_histogram
from ._limit_records import LimitRecords, evaluate_limits
from ._limits import search_limits
from ._nnls import pack_nnls
from ._pack import METHODS, PackResult, lower_bound, pack_bins
from ._patterns import PackPatterns, patterns_from_slots

__all__ = [
    "FITS",
    "HEURISTICS",
    "LimitRecords",
    "MAX_SHAPES",
    "METHODS",
    "BalancedPacking",
    "PackPatterns",
    "PackResult",
    "assign_graphs",
    "balanced_pack",
    "choose_scales",
    "choose_tight_shapes",
    "evaluate_limits",
    "graphs_for_scale",
    "heuristic_function",
    "heuristic_keys",
    "lower_bound",
    "pack_bins",
    "pack_histogram",
    "pack_needs",
    "pack_nnls",
    "pack_scales",
    "patterns_from_slots",
    "search_limits",
    "shape_for_scale",
    "shape_padding_bound",
]
