"""`pack_bins`: one entry point over the histogram packers, choosing by how many graphs a pack
holds."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from .._budget import Budget
from .._errors import UnknownNameError
from ._balanced import balanced_pack
from ._greedy import batches_lower_bound, greedy_offsets
from ._histogram import pack_histogram

__all__ = ["PackResult", "pack_bins", "METHODS", "lower_bound"]

METHODS = ("auto", "histogram", "balanced")

#: ``auto`` tries balanced dealing when the lower bound leaves at least this many graphs per pack.
BALANCE_MIN_GRAPHS = 4


@dataclass(frozen=True)
class PackResult:
    """Packs as slots: pack ``p`` holds graphs of bins ``slot_bin[offsets[p]:offsets[p+1]]``.

    ``method`` is the packer whose packs these are; ``tried`` maps each packer run to its number
    of packs; ``lower_bound`` is the max of the three capacity ceilings.
    """

    slot_bin: np.ndarray
    offsets: np.ndarray
    method: str
    tried: dict[str, int]
    lower_bound: int

    @property
    def num_packs(self) -> int:
        return int(self.offsets.shape[0] - 1)


def lower_bound(
    n: ArrayLike, e: ArrayLike, count: ArrayLike, node_limit: int, edge_limit: int, graph_limit: int
) -> int:
    """Fewest packs any packing of the histogram needs (`batches_lower_bound` of its totals)."""
    counts = np.asarray(count).tolist()
    tot_n = sum(int(a) * c for a, c in zip(np.asarray(n).tolist(), counts, strict=False))
    tot_e = sum(int(a) * c for a, c in zip(np.asarray(e).tolist(), counts, strict=False))
    return batches_lower_bound(tot_n, tot_e, sum(counts), node_limit, edge_limit, graph_limit)


def pack_bins(
    n: ArrayLike,
    e: ArrayLike,
    count: ArrayLike,
    *,
    node_limit: int,
    edge_limit: int,
    graph_limit: int,
    heuristic: str = "product",
    fit: str = "best",
    method: str = "auto",
) -> PackResult:
    """Pack the histogram bins ``(n, e, count)`` under real-content limits per pack.

    ``method="histogram"``: tuple histogram packing (``fit="best"``: longest-pack-first,
    ``"first"``: shortest-pack-first) with ``heuristic``. ``"balanced"``: balanced dealing with
    repair. ``"auto"`` (default): histogram packing, and balanced dealing as well when the lower
    bound leaves ``>= 4`` graphs per pack, and when some graph exceeds a tenth of a limit a greedy
    fill in a fixed random order; the fewest packs win (histogram, then balanced, on a tie).
    """
    if method not in METHODS:
        raise UnknownNameError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    n = np.asarray(n, dtype=np.int64)
    e = np.asarray(e, dtype=np.int64)
    count = np.asarray(count, dtype=np.int64)
    limits = (int(node_limit), int(edge_limit), int(graph_limit))
    lb = lower_bound(n, e, count, *limits)
    tried: dict[str, int] = {}
    candidates: list[tuple[int, int, str, np.ndarray, np.ndarray]] = []
    num = int(count.sum())
    use_bal = method == "balanced" or (
        method == "auto" and lb and num >= BALANCE_MIN_GRAPHS * lb
    )  # integers
    if use_bal:
        bal = balanced_pack(
            n,
            e,
            count,
            node_limit=limits[0],
            edge_limit=limits[1],
            graph_limit=limits[2],
            heuristic=heuristic,
        )
        tried["balanced"] = bal.num_packs
        candidates.append((bal.num_packs, 1, "balanced", bal.slot_bin, bal.offsets))
    # balanced dealing within 0.2% of the bound is not beaten by enough to pay for a second run
    skip_hist = method == "balanced" or (
        method == "auto" and use_bal and tried["balanced"] <= lb + max(1, lb // 500)
    )
    # graphs over a tenth of a limit (heavy tails): also a sequential greedy fill of the graphs in
    # a fixed random order (the `dynamic` rule), which mixes large and small graphs well
    big = bool(((n * 10 > node_limit) | (e * 10 > edge_limit))[count > 0].any())
    if method == "auto" and big and not (use_bal and tried["balanced"] <= lb):
        items = np.random.default_rng(0).permutation(np.repeat(np.arange(n.shape[0]), count))
        off = greedy_offsets(
            n[items], e[items], Budget(int(node_limit) + 1, int(edge_limit), int(graph_limit) + 1)
        )
        tried["greedy"] = int(off.shape[0] - 1)
        candidates.append((tried["greedy"], 2, "greedy", items, off))
    if not skip_hist:
        pats = pack_histogram(
            n,
            e,
            count,
            node_limit=limits[0],
            edge_limit=limits[1],
            graph_limit=limits[2],
            heuristic=heuristic,
            fit=fit,
        )
        tried["histogram"] = pats.num_packs
        slot_bin, offsets = pats.slots()
        candidates.append((pats.num_packs, 0, "histogram", slot_bin, offsets))
    _, _, name, slot_bin, offsets = min(candidates, key=lambda c: (c[0], c[1]))
    return PackResult(slot_bin, offsets, name, tried, lb)
