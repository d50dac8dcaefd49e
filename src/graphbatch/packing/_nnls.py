"""Non-negative least-squares packing (Kosec et al., as a baseline; IPU paper 5.5.2).

Candidate pack patterns are those of longest- and shortest-pack-first histogram packing plus,
for every bin, a pack of as many copies of it as fit. Non-negative least squares finds repeat
counts ``x >= 0`` with ``A x ~ count`` (``A[i, t]`` = graphs of bin ``i`` in pattern ``t``):
Lawson-Hanson, as ``scipy.optimize.nnls``, but solved exactly (`graphbatch._exact_nnls`), so
the counts, and the plan, are the same on every machine. Counts are rounded down (exactly),
capped so no bin is used more often than it occurs, and the graphs left over are packed
longest-pack-first.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._errors import InputError
from .._exact_nnls import nnls
from ._histogram import pack_histogram
from ._patterns import PackPatterns

__all__ = ["pack_nnls", "MAX_NNLS_ENTRIES"]

#: Largest bins x patterns matrix the baseline builds (dense).
MAX_NNLS_ENTRIES = 40_000_000


def _single_bin_patterns(
    n: NDArray[np.int64],
    e: NDArray[np.int64],
    count: NDArray[np.int64],
    node_limit: int,
    edge_limit: int,
    graph_limit: int,
) -> list[tuple[tuple[int], tuple[int]]]:
    big = np.iinfo(np.int64).max // 4
    per = np.minimum(
        np.where(n > 0, node_limit // np.maximum(n, 1), big),
        np.where(e > 0, edge_limit // np.maximum(e, 1), big),
    )
    per = np.minimum(per, graph_limit)
    per = np.minimum(per, np.maximum(count, 1))
    idx = np.arange(n.shape[0])
    return [((int(i),), (int(p),)) for i, p in zip(idx, per, strict=False)]


def pack_nnls(
    n: ArrayLike,
    e: ArrayLike,
    count: ArrayLike,
    *,
    node_limit: int,
    edge_limit: int,
    graph_limit: int,
    heuristic: str = "product",
) -> PackPatterns:
    """Pack a (nodes, edges) -> count histogram with the NNLS baseline (see module doc)."""
    n = np.asarray(n, dtype=np.int64)
    e = np.asarray(e, dtype=np.int64)
    count = np.asarray(count, dtype=np.int64)
    limits = (node_limit, edge_limit, graph_limit)
    cands: dict[tuple[tuple[int, int], ...], None] = {}
    for fit in ("best", "first"):
        p = pack_histogram(
            n,
            e,
            count,
            node_limit=node_limit,
            edge_limit=edge_limit,
            graph_limit=graph_limit,
            heuristic=heuristic,
            fit=fit,
        )
        for t in range(p.num_patterns):
            sl = slice(p.offsets[t], p.offsets[t + 1])
            agg: dict[int, int] = {}
            for b, c in zip(p.bins[sl].tolist(), p.copies[sl].tolist(), strict=False):
                agg[b] = agg.get(b, 0) + c
            key = tuple(sorted(agg.items()))
            cands[key] = None
    for one_bin, one_copies in _single_bin_patterns(n, e, count, *limits):
        cands[tuple(zip(one_bin, one_copies, strict=False))] = None
    patterns = list(cands)
    nb, npat = n.shape[0], len(patterns)
    if nb * npat > MAX_NNLS_ENTRIES:
        raise InputError(
            f"NNLS packing would build a {nb} x {npat} matrix (> {MAX_NNLS_ENTRIES:,} entries); "
            "use pack-lpf for histograms this large"
        )
    A = np.zeros((nb, npat), dtype=np.int64)
    for t, pat in enumerate(patterns):
        for b, c in pat:
            A[b, t] = c
    xi = nnls(A, count).floor()  # exact repeat counts, rounded down exactly
    left = count.copy()
    used_bins: list[int] = []
    used_copies: list[int] = []
    used_off = [0]
    used_count: list[int] = []
    for t in [t for t, v in enumerate(xi) if v > 0]:
        pat_bins = np.array([b for b, _ in patterns[t]], np.int64)
        cps = np.array([c for _, c in patterns[t]], np.int64)
        reps = int(min(xi[t], (left[pat_bins] // cps).min()))
        if reps <= 0:
            continue
        left[pat_bins] -= reps * cps
        used_bins.extend(pat_bins.tolist())
        used_copies.extend(cps.tolist())
        used_off.append(len(used_bins))
        used_count.append(reps)
    rest = pack_histogram(
        n,
        e,
        left,
        node_limit=node_limit,
        edge_limit=edge_limit,
        graph_limit=graph_limit,
        heuristic=heuristic,
        fit="best",
    )
    bins = np.concatenate([np.asarray(used_bins, np.int64), rest.bins])
    copies = np.concatenate([np.asarray(used_copies, np.int64), rest.copies])
    offsets = np.concatenate([np.asarray(used_off, np.int64), used_off[-1] + rest.offsets[1:]])
    cnt = np.concatenate([np.asarray(used_count, np.int64), rest.count])
    return PackPatterns.build(bins, copies, offsets, cnt, n, e)
