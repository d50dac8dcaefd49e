"""How much of a dataset a block size ``S`` covers: graphs whose band fits, edges kept."""

from __future__ import annotations

from collections.abc import Sequence

from .._validate import as_positive_int
from ._bandwidth import bandwidths
from ._graphs import EdgeGraphs
from ._supergraph import build_supergraphs

__all__ = ["band_coverage"]


def band_coverage(
    graphs: EdgeGraphs,
    block_sizes: Sequence[int],
    num_blocks: int,
    *,
    strategy: str | None = None,
    seed: int = 0,
) -> list[dict]:
    """Per block size ``S``: share of graphs with bandwidth ``< S`` (lossless), and, packing all
    graphs that fit into supergraphs of ``num_blocks · S`` slots, the share of their edges kept
    by the paper's rule. Graphs are taken in their current node order (reorder first)."""
    k = as_positive_int(num_blocks, "num_blocks")
    bw = bandwidths(graphs)
    rows = []
    for s in block_sizes:
        s = as_positive_int(s, "block_size")
        res = build_supergraphs(graphs, s, k, strategy=strategy, seed=seed)
        packed = len(graphs) - res.oversize.shape[0]
        rows.append(
            {
                "block_size": s,
                "num_blocks": k,
                "graphs_bw_below_S": float((bw < s).mean()),
                "graphs_oversize": int(res.oversize.shape[0]),
                "graphs_packed": packed,
                "supergraphs": len(res),
                "edges_kept_share": 1.0 - res.dropped_share,
                "edges_dropped": res.num_dropped,
                "node_slot_efficiency": res.stats()["node_slot_efficiency"],
                "graphs_lossless_share": float(((bw < s) & (graphs.n_node <= s * k)).mean())
                if len(graphs)
                else 0.0,
            }
        )
    return rows
