"""The packs and padded shape of ``pack-lpf``/``pack-spf`` (`choose_packs`): the packing
itself, balanced packs at the count the ranks and the shape call for, or the packing spread
over extra packs, compared by their padded area (slots over real totals)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from .._budget import Budget
from .._sizes import SizeHistogram
from ..packing import PackResult
from ..packing.kernels import balanced_packs, pack_totals, spread_packs
from ._registry import PlanRequest

__all__ = ["PackTotals", "bins_of", "choose_packs", "slots_area", "tight_budget"]

#: Real ``(nodes, edges, graphs)`` per pack (`pack_totals`).
PackTotals = tuple[np.ndarray, np.ndarray, np.ndarray]


def tight_budget(
    nodes: np.ndarray, edges: np.ndarray, graphs: np.ndarray, budget: Budget
) -> Budget:
    """The smallest shape holding batches of real totals ``nodes``/``edges``/``graphs``
    (one padding node and graph reserved), never above ``budget``."""
    if nodes.size == 0:
        return budget
    return Budget(
        min(int(nodes.max()) + 1, budget.n_node),
        min(int(edges.max()), budget.n_edge),
        max(2, min(int(graphs.max()) + 1, budget.n_graph)),
    )


def slots_area(
    slot_bin: np.ndarray,
    offsets: np.ndarray,
    bin_nodes: np.ndarray,
    bin_edges: np.ndarray,
    budget: Budget,
    totals: PackTotals | None = None,
) -> tuple[Budget, Fraction]:
    """(tight shape, padded slots relative to the real totals, an exact rational) of packs as
    slots; ``totals``: their `pack_totals` when known."""
    pack_nodes, pack_edges, pack_graphs = (
        pack_totals(slot_bin, offsets, bin_nodes, bin_edges) if totals is None else totals
    )
    shape = tight_budget(pack_nodes, pack_edges, pack_graphs, budget)
    sum_e = int(pack_edges.sum())
    area = Fraction(shape.n_node, max(int(pack_nodes.sum()), 1)) + (
        Fraction(shape.n_edge, sum_e) if sum_e else 0
    )
    return shape, area


def bins_of(hist: SizeHistogram) -> np.ndarray:
    """Each graph's bin of ``hist`` (made with ``return_inverse=True``)."""
    if hist.inverse is None:
        raise RuntimeError("the histogram was made without return_inverse=True")
    return hist.inverse


def choose_packs(
    req: PlanRequest,
    kept: np.ndarray | None,
    hist: SizeHistogram,
    res: PackResult,
    budget: Budget,
    tight: bool,
) -> tuple[np.ndarray, np.ndarray, str, Budget | None, PackTotals | None]:
    """The packs and padded shape of ``pack-lpf``/``pack-spf``.

    The number of packs is the packing's, rounded up to a multiple of ``req.world_size``
    (`PlanRequest.batch_count_for_ranks`), and where the shape is tight the fewest packs that
    allow it: the lower bound (rounded up likewise). At that count, balanced packs
    (`balanced_packs`) are tried besides the packing itself (with a tight shape and a count above
    the packing's, the packing spread over the extra packs, `spread_packs`); with a tight shape
    those at least as tight as ``kk``'s cost in both dimensions are preferred and the smallest
    padded area (slots over real totals, nodes plus edges) wins. Returns ``(slot_bin, offsets,
    packer, shape or None, the packs' `pack_totals` or None)``."""
    slot_bin, offsets, packer = res.slot_bin, res.offsets, res.method
    num = len(req.sizes) if kept is None else int(kept.shape[0])

    def want(p: int) -> int:
        return req.batch_count_for_ranks(p, num)

    packing_ok = res.num_packs == want(res.num_packs)
    counts = sorted({want(res.lower_bound), want(res.num_packs)})
    if not tight:
        counts = [c for c in counts if not packing_ok or c < res.num_packs]
    for count in counts:
        if res.lower_bound == 0 or (packing_ok and count > res.num_packs):
            break
        cands = balanced_packs(bins_of(hist), hist.n_node, hist.n_edge, count, budget)
        if packing_ok and count == res.num_packs:
            cands.append((slot_bin, offsets))
        elif tight and count > res.num_packs:  # ranks round the count up: spread the packing
            spread = spread_packs(slot_bin, offsets, count, hist.n_node, hist.n_edge, budget)
            if spread is not None:
                cands.append(spread)
        if all(c is None for c in cands):
            continue
        if not tight:
            last = next(c for c in cands[::-1] if c is not None)
            return last[0], last[1], packer if last[0] is slot_bin else "balanced-kk", None, None
        return _tightest(cands, slot_bin, packer, hist, budget)
    if not tight:
        return slot_bin, offsets, packer, None, None
    totals = pack_totals(slot_bin, offsets, hist.n_node, hist.n_edge)
    shape = slots_area(slot_bin, offsets, hist.n_node, hist.n_edge, budget, totals)[0]
    return slot_bin, offsets, packer, shape, totals


#: Packs as slots: ``(slot_bin, offsets)``.
_Slots = tuple[np.ndarray, np.ndarray]


def _tightest(
    cands: list[_Slots | None],
    packing_slots: np.ndarray,
    packer: str,
    hist: SizeHistogram,
    budget: Budget,
) -> tuple[np.ndarray, np.ndarray, str, Budget, PackTotals]:
    """With a tight shape, the candidate packs of `choose_packs` (``cands[0]``: ``kk``'s
    balanced packs, ``None`` where missing) at least as tight as ``kk``'s in both dimensions
    with the smallest padded area; ``packing_slots``: the packing's ``slot_bin`` (its
    candidate is named ``packer``, a spread of it ``packer-spread``). Returns ``(slot_bin,
    offsets, name, shape, pack totals)``."""
    # each candidate's pack totals once: its shape, its area, and the plan's real totals
    cand_totals = [None if c is None else pack_totals(*c, hist.n_node, hist.n_edge) for c in cands]
    ref = (
        slots_area(*cands[0], hist.n_node, hist.n_edge, budget, cand_totals[0])[0]
        if cands[0] is not None
        else None
    )
    best: tuple[Fraction, np.ndarray, np.ndarray, str, Budget, PackTotals] | None = None
    for c, totals in zip(cands, cand_totals, strict=False):
        if c is None or totals is None:
            continue
        shape, area = slots_area(*c, hist.n_node, hist.n_edge, budget, totals)
        if ref is not None and (shape.n_node > ref.n_node or shape.n_edge > ref.n_edge):
            continue  # not as tight as kk's cost in both dimensions
        if best is None or area < best[0]:
            if c is cands[0]:
                name = "balanced-kk"
            else:
                name = packer if c[0] is packing_slots else f"{packer}-spread"
            best = (area, c[0], c[1], name, shape, totals)
    assert best is not None  # (kk's candidate, or every candidate where it is missing)
    return best[1], best[2], best[3], best[4], best[5]
