"""Supergraphs of ``K·S`` nodes for block size ``S``, and the paper's edge rule.

Reordered graphs are placed contiguously (sparse batching, Section 2) into supergraphs of
``num_blocks · block_size`` node slots, using a packing planner with node limit ``K·S``. Node
``i`` of a supergraph lies in block ``i // S``. An edge ``j -> i`` is *kept* when the blocks of
``i`` and ``j`` differ by at most one, which is exactly the paper's rule: ``|i-j| < S`` is always
kept, ``S <= |i-j| < 2S`` is kept when it falls in a U/L block, ``|i-j| >= 2S`` is dropped.
Because graphs occupy disjoint contiguous ranges, a supergraph of graphs whose bandwidth is at
most ``S-1`` also has bandwidth at most ``S-1``, and then no edge is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .._api import plan as make_plan
from .._budget import Budget
from .._errors import InputError, InputTypeError
from .._plan import BatchPlan
from .._validate import as_nonnegative_int, as_positive_int
from ..planners import get_strategy, strategy_names
from ._bandwidth import bandwidths
from ._graphs import EdgeGraphs, _ranges

__all__ = [
    "BLOCK_C",
    "BLOCK_L",
    "BLOCK_U",
    "DROPPED",
    "PREFERRED_STRATEGIES",
    "Supergraph",
    "SupergraphBatches",
    "build_supergraphs",
    "classify_edges",
    "default_strategy",
]

#: Packing strategies for supergraphs, best first; the first one registered is the default.
PREFERRED_STRATEGIES = ("pack-lpf-1d", "dynamic")


def default_strategy() -> str:
    """The first of `PREFERRED_STRATEGIES` that is registered (1-D longest-pack-first packing
    when available, else the greedy ``dynamic`` fill)."""
    names = set(strategy_names())
    return next(n for n in PREFERRED_STRATEGIES if n in names)


#: Edge classes of `classify_edges`: diagonal block, upper block (sender in the next block),
#: lower block (sender in the previous block), dropped (blocks two or more apart).
BLOCK_C, BLOCK_U, BLOCK_L, DROPPED = 0, 1, 2, -1


def classify_edges(senders: ArrayLike, receivers: ArrayLike, block_size: int) -> np.ndarray:
    """Block class of each edge ``senders[e] -> receivers[e]`` (supergraph positions).

    ``BLOCK_C`` when both ends share a block, ``BLOCK_U`` when the sender is in the block after
    the receiver's (entry of ``U``: strictly lower triangular when ``|i-j| < S``), ``BLOCK_L``
    when it is in the block before, ``DROPPED`` otherwise. int8 ``[E]``.
    """
    s = as_positive_int(block_size, "block_size")
    diff = np.asarray(senders, np.int64) // s - np.asarray(receivers, np.int64) // s
    out = np.full(diff.shape, DROPPED, dtype=np.int8)
    out[diff == 0] = BLOCK_C
    out[diff == 1] = BLOCK_U
    out[diff == -1] = BLOCK_L
    return out


@dataclass(frozen=True)
class Supergraph:
    """One supergraph: ``num_blocks`` blocks of ``block_size`` node slots.

    ``graph_index[g]`` (dataset index) occupies slots ``node_offset[g] .. node_offset[g] +
    n_node[g] - 1``; slots from ``num_real_nodes`` on are padding. ``node_index[p]`` is the row
    of slot ``p`` in the source `EdgeGraphs` node arrays (-1 for padding). ``senders``,
    ``receivers``, ``edge_type`` and ``edge_class`` describe the kept edges in slot positions;
    ``edge_index`` maps each kept edge back to its row in the source edge arrays.
    ``num_dropped`` counts edges of these graphs that the band cannot hold.
    """

    block_size: int
    num_blocks: int
    num_edge_types: int
    graph_index: np.ndarray
    node_offset: np.ndarray
    n_node: np.ndarray
    node_index: np.ndarray
    senders: np.ndarray
    receivers: np.ndarray
    edge_type: np.ndarray
    edge_class: np.ndarray
    edge_index: np.ndarray
    num_dropped: int

    @property
    def num_nodes(self) -> int:
        """Node slots, ``K·S`` (padding included)."""
        return self.block_size * self.num_blocks

    @property
    def num_real_nodes(self) -> int:
        return int(self.n_node.sum())

    @property
    def num_kept(self) -> int:
        return int(self.senders.shape[0])

    def bandwidth(self) -> int:
        """Bandwidth of the kept edges in slot order."""
        if self.senders.size == 0:
            return 0
        return int(np.abs(self.senders - self.receivers).max())

    def gather_nodes(self, values: np.ndarray, fill: Any = 0) -> np.ndarray:
        """Node array of the source graphs laid out on the ``K·S`` slots (padding = ``fill``)."""
        values = np.asarray(values)
        out = np.full((self.num_nodes, *values.shape[1:]), fill, dtype=values.dtype)
        real = self.node_index >= 0
        out[real] = values[self.node_index[real]]
        return out


@dataclass(frozen=True)
class SupergraphBatches:
    """All supergraphs of one epoch plus the accounting of what was left out.

    ``filtered`` lists graphs left out because their bandwidth is ``>= block_size`` (with
    ``filter_bandwidth=True``), ``oversize`` those with more than ``K·S`` nodes. Edge counts are
    over the packed graphs only.
    """

    supergraphs: list[Supergraph]
    plan: BatchPlan | None
    filtered: np.ndarray
    oversize: np.ndarray
    num_edges: int
    num_kept: int
    num_dropped: int
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.supergraphs)

    @property
    def dropped_share(self) -> float:
        """Dropped edges / edges of the packed graphs (0 when there are none)."""
        return self.num_dropped / self.num_edges if self.num_edges else 0.0

    def stats(self) -> dict:
        packed = sum(int(sg.graph_index.shape[0]) for sg in self.supergraphs)
        slots = sum(sg.num_nodes for sg in self.supergraphs)
        real = sum(sg.num_real_nodes for sg in self.supergraphs)
        return {
            "supergraphs": len(self),
            "graphs_packed": packed,
            "graphs_filtered": int(self.filtered.shape[0]),
            "graphs_oversize": int(self.oversize.shape[0]),
            "edges": self.num_edges,
            "edges_kept": self.num_kept,
            "edges_dropped": self.num_dropped,
            "dropped_share": self.dropped_share,
            "node_slot_efficiency": real / slots if slots else 0.0,
            "graphs_per_supergraph": packed / len(self) if len(self) else 0.0,
            **self.meta,
        }


def build_supergraphs(
    graphs: EdgeGraphs,
    block_size: int,
    num_blocks: int,
    *,
    strategy: str | None = None,
    filter_bandwidth: bool = False,
    on_oversize: str = "skip",
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
    **options: Any,
) -> SupergraphBatches:
    """Pack (already reordered) graphs into supergraphs of ``num_blocks · block_size`` slots.

    The packing is planned by ``graphbatch.plan(sizes, strategy, budget=...)`` with node limit
    ``K·S`` (no edge limit: dense blocks do not store edges); ``strategy`` must be budget-based
    and defaults to `default_strategy()` (``"pack-lpf-1d"`` where registered, else
    ``"dynamic"``). With
    ``filter_bandwidth`` graphs whose bandwidth is ``>= S`` are left out instead of losing edges.
    ``on_oversize`` is ``"skip"`` (default, listed in ``oversize``) or ``"error"`` for graphs with
    more than ``K·S`` nodes.
    """
    s = as_positive_int(block_size, "block_size")
    k = as_positive_int(num_blocks, "num_blocks")
    as_nonnegative_int(seed, "seed")
    if on_oversize not in ("skip", "error"):
        raise InputError(
            f"on_oversize must be 'skip' or 'error' for supergraphs, got "
            f"{on_oversize!r} (a graph cannot get a larger dense block)"
        )
    if not isinstance(graphs, EdgeGraphs):
        raise InputTypeError(f"graphs must be EdgeGraphs, got {type(graphs).__name__}")
    if strategy is None:
        strategy = default_strategy()
    strat = get_strategy(strategy)
    if not strat.uses_budget:
        raise InputError(
            f"strategy {strategy!r} does not plan under a node budget; use a "
            "budget-based one such as 'dynamic'"
        )
    capacity = k * s
    candidates = np.arange(len(graphs), dtype=np.int64)
    filtered = np.zeros(0, np.int64)
    if filter_bandwidth:
        wide = bandwidths(graphs) >= s
        filtered = candidates[wide]
        candidates = candidates[~wide]
    too_big = graphs.n_node[candidates] > capacity
    oversize = candidates[too_big]
    if oversize.size and on_oversize == "error":
        g = int(oversize[0])
        raise InputError(
            f"graph {g} has {graphs.n_node[g]} nodes, more than the "
            f"{k} x {s} = {capacity} slots of a supergraph"
        )
    candidates = candidates[~too_big]
    if candidates.size == 0:
        return SupergraphBatches(
            [],
            None,
            filtered,
            oversize,
            0,
            0,
            0,
            meta={"block_size": s, "num_blocks": k, "strategy": strategy},
        )
    sub = graphs.sizes().subset(candidates)
    budget = Budget(capacity + 1, max(int(sub.n_edge.sum()), 1), int(candidates.size) + 1)
    bplan = make_plan(
        sub,
        strategy,
        budget=budget,
        seed=seed,
        epoch=epoch,
        shuffle=shuffle,
        on_oversize="error",
        **options,
    )
    supers = []
    kept_total = dropped_total = 0
    for b in range(len(bplan)):
        members = candidates[bplan.batch(b)]
        sg = _assemble(graphs, members, s, k)
        supers.append(sg)
        kept_total += sg.num_kept
        dropped_total += sg.num_dropped
    edges = int(graphs.n_edge[candidates].sum())
    return SupergraphBatches(
        supers,
        bplan,
        filtered,
        oversize,
        edges,
        kept_total,
        dropped_total,
        meta={"block_size": s, "num_blocks": k, "strategy": strategy},
    )


def _assemble(graphs: EdgeGraphs, members: np.ndarray, s: int, k: int) -> Supergraph:
    n_node = graphs.n_node[members]
    n_edge = graphs.n_edge[members]
    node_offset = np.zeros(members.shape[0], np.int64)
    np.cumsum(n_node[:-1], out=node_offset[1:])
    real = int(n_node.sum())
    if real > s * k:  # the planner's contract; checked because a wrong layout is silent
        raise InputError(f"planned supergraph holds {real} nodes, more than {s * k} slots")
    node_index = np.full(s * k, -1, np.int64)
    node_index[:real] = _ranges(graphs.node_offsets[members], n_node)
    e_rows = _ranges(graphs.edge_offsets[members], n_edge)
    shift = np.repeat(node_offset, n_edge)
    snd = graphs.senders[e_rows] + shift
    rcv = graphs.receivers[e_rows] + shift
    cls = classify_edges(snd, rcv, s)
    keep = cls != DROPPED
    return Supergraph(
        block_size=s,
        num_blocks=k,
        num_edge_types=graphs.num_edge_types,
        graph_index=members.copy(),
        node_offset=node_offset,
        n_node=n_node.copy(),
        node_index=node_index,
        senders=snd[keep],
        receivers=rcv[keep],
        edge_type=graphs.edge_type[e_rows][keep],
        edge_class=cls[keep],
        edge_index=e_rows[keep],
        num_dropped=int((~keep).sum()),
    )
