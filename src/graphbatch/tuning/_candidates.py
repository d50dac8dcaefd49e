"""The configurations `tune` considers: plan requests over strategies and budgets.

A `Candidate` is one request ``graphbatch.plan(sizes, **request)`` accepts (strategy, batch size
or budget, strategy options, seed). `candidate_requests` spans, for a nominal batch size ``B``
and a tolerance ``t``, the batch sizes ``b`` of the grid ``B * (1 - t, 1 - t/2, 1, 1 + t/2,
1 + t)`` (integers, computed in per-mille) and per ``b``:

* ``dynamic`` at ``b`` (Algorithm 1's budget, ``b`` graph slots);
* ``pack-lpf`` at Algorithm 1's node/edge budget for ``b`` with ``2 b`` graph slots (the
  packing default of ``graphbatch bench``) and the tightest shape holding every pack;
* ``buckets`` on that budget, with ``K = 1 .. max_shapes`` shapes at ``b = B`` and ``K = 2, 4``
  at the grid's other sizes (planning a heavy-tailed table's buckets takes seconds each);
* ``static-pow2`` and ``static-64`` at ``b``;
* with ``world_size > 1`` the balancing strategies ``kk``, ``balance`` and ``stratified``
  (padded to the epoch's largest batch, ``pad="max"``, or to multiples of 64);

plus ``pack-lpf`` at the limits `graphbatch.packing.search_limits` finds between the node
budgets of the grid's ends. Every decision here is integer arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._api import plan as make_plan
from .._budget import estimate_budget
from .._errors import InputError
from .._random import seed_rng
from .._sizes import GraphSizes
from .._validate import as_nonnegative_int, as_positive_int
from ..planners import get_strategy
from ._profile import PlanProfile, profile_plan

__all__ = [
    "Candidate",
    "DEFAULT_STRATEGIES",
    "BALANCING_STRATEGIES",
    "batch_size_grid",
    "candidate_requests",
    "cost_bucket_requests",
    "profile_candidates",
    "ProfiledCandidate",
]

#: Strategy families searched by default.
DEFAULT_STRATEGIES = ("dynamic", "pack-lpf", "buckets", "static-pow2", "static-64")
#: Added when ``world_size > 1``.
BALANCING_STRATEGIES = ("kk", "balance", "stratified")
#: Graph slots per batch-size unit of the packing candidates (``graphbatch bench``'s default).
PACKING_GRAPH_CAP = 2


@dataclass(frozen=True)
class Candidate:
    """One configuration: ``label`` (for tables) and ``request``, the keyword arguments of
    ``graphbatch.plan(sizes, **request)`` (JSON-ready: ints, strings, lists)."""

    label: str
    request: dict[str, Any]

    @property
    def strategy(self) -> str:
        return str(self.request["strategy"])


@dataclass(frozen=True)
class ProfiledCandidate:
    """A candidate with the `PlanProfile` of its epoch-0 plan (and later epochs' new shapes)."""

    candidate: Candidate
    profile: PlanProfile


def tolerance_per_mille(tolerance: float) -> int:
    """``tolerance`` (a fraction in [0, 0.5]) as an integer per-mille, quantised once."""
    t = float(tolerance)
    if not 0.0 <= t <= 0.5:
        raise InputError(f"batch tolerance must be in [0, 0.5], got {tolerance!r}")
    return int(round(t * 1000))


def batch_size_grid(batch_size: int, tolerance: float) -> list[int]:
    """Batch sizes ``round(B * (1 + f))`` for ``f`` in ``(-t, -t/2, 0, t/2, t)``, distinct,
    ascending, each >= 2 (integer arithmetic in per-mille)."""
    b = as_positive_int(batch_size, "batch_size")
    if b < 2:
        raise InputError(f"batch_size = {b} leaves no room for the padding graph; it must be >= 2")
    t = tolerance_per_mille(tolerance)
    out = set()
    for f in (-t, -(t // 2), 0, t // 2, t):
        out.add(max(2, (b * (1000 + f) + 500) // 1000))
    return sorted(out)


def _budget(sizes: GraphSizes, b: int, seed: int) -> list[int]:
    est = estimate_budget(sizes, b, rng=seed_rng(seed))
    return [int(est.n_node), int(est.n_edge), PACKING_GRAPH_CAP * b]


def candidate_requests(
    sizes: GraphSizes,
    batch_size: int,
    *,
    tolerance: float = 0.1,
    strategies: Sequence[str] | None = None,
    world_size: int = 1,
    seed: int = 0,
    max_shapes: int = 8,
    limit_search: bool = True,
) -> list[Candidate]:
    """The candidates for nominal ``batch_size`` (see the module docstring), in a fixed order.

    ``strategies``: the families to include (default `DEFAULT_STRATEGIES`, plus
    `BALANCING_STRATEGIES` when ``world_size > 1``); any registered strategy name is accepted
    (those not described above are planned at each grid batch size). ``max_shapes``: the largest
    ``K`` of ``buckets``. ``limit_search``: add ``pack-lpf`` at searched limits."""
    if not isinstance(sizes, GraphSizes):
        raise InputError(f"sizes must be a GraphSizes, got {type(sizes).__name__}")
    seed = as_nonnegative_int(seed, "seed")
    world_size = as_positive_int(world_size, "world_size")
    max_shapes = as_positive_int(max_shapes, "max_shapes")
    if strategies is None:
        strategies = DEFAULT_STRATEGIES + (BALANCING_STRATEGIES if world_size > 1 else ())
    for s in strategies:
        get_strategy(s)  # unknown names: one line listing the known ones
    grid = batch_size_grid(batch_size, tolerance)
    out: list[Candidate] = []

    def add(label: str, **request: Any) -> None:
        out.append(Candidate(label, {**request, "seed": seed}))

    for b in grid:
        for s in strategies:
            strat = get_strategy(s)
            if s == "pack-lpf" or (s.startswith("pack-") and strat.fixed_shape):
                add(f"{s} b={b}", strategy=s, budget=_budget(sizes, b, seed), tight_shape=True)
            elif s == "buckets":
                budget = _budget(sizes, b, seed)
                ks = (
                    range(1, min(max_shapes, 16) + 1)
                    if b == batch_size
                    else [k for k in (2, 4) if k <= max_shapes]
                )
                for k in ks:
                    add(f"buckets b={b} K={k}", strategy=s, budget=budget, num_shapes=k)
            elif s in BALANCING_STRATEGIES or "pad" in strat.options:
                for pad in ("max", "static-64"):
                    add(f"{s} b={b} pad={pad}", strategy=s, batch_size=b, pad=pad)
            else:
                add(f"{s} b={b}", strategy=s, batch_size=b)
    if limit_search and "pack-lpf" in strategies and len(sizes):
        out.extend(_searched_limits(sizes, grid, seed))
    return out


def cost_bucket_requests(
    sizes: GraphSizes,
    batch_size: int,
    shape_cost: Sequence[int],
    *,
    label: str,
    seed: int = 0,
    max_shapes: int = 8,
) -> list[Candidate]:
    """``buckets`` with tight shapes chosen by a fitted cost (option ``shape_cost``: integer
    ``[c0, c_node, c_edge, c_graph, c_shape]``, see `graphbatch.packing`'s tight bucket
    shapes) for ``K = 1 .. max_shapes`` at the budget of ``batch_size`` (``2 b`` graph slots)."""
    budget = _budget(sizes, as_positive_int(batch_size, "batch_size"), seed)
    cost = [int(c) for c in shape_cost]
    return [
        Candidate(
            f"buckets b={batch_size} K={k} {label}",
            {
                "strategy": "buckets",
                "budget": budget,
                "num_shapes": k,
                "shape_cost": cost,
                "seed": seed,
            },
        )
        for k in range(1, min(max_shapes, 16) + 1)
    ]


def _searched_limits(sizes: GraphSizes, grid: list[int], seed: int) -> list[Candidate]:
    """``pack-lpf`` at the limits `search_limits` finds between the node budgets of the grid's
    smallest and largest batch sizes (graph slots: twice the largest)."""
    from ..packing import search_limits

    lo, hi = _budget(sizes, grid[0], seed), _budget(sizes, grid[-1], seed)
    try:
        records = search_limits(sizes, max_graphs=hi[2], node_range=(lo[0], max(hi[0], lo[0])))
    except (ValueError, TypeError):
        return []  # e.g. the largest graph needs more than the range: no limits candidate
    if not records:
        return []
    r = records[0]
    budget = [int(r["max_nodes"]), int(r["max_edges"]), int(r["max_graphs"] or hi[2])]
    return [
        Candidate(
            f"pack-lpf limits {budget[0]}x{budget[1]}",
            {"strategy": "pack-lpf", "budget": budget, "tight_shape": True, "seed": seed},
        )
    ]


def _needs_later_epochs(strategy: str) -> bool:
    """Whether a strategy's shapes can change between epochs (then later epochs are planned to
    count recompilations): not for the fixed-shape strategies nor ``buckets`` (its shapes and
    the packs padded to each depend on the sizes only)."""
    return not (get_strategy(strategy).fixed_shape or strategy == "buckets")


def profile_candidates(
    sizes: GraphSizes,
    candidates: Sequence[Candidate],
    *,
    world_size: int = 1,
    epochs: int = 1,
    on_oversize: str = "error",
    progress: Callable[[str], None] | None = None,
) -> tuple[list[ProfiledCandidate], list[dict[str, str]]]:
    """Plan every candidate (epoch 0, plus epochs ``1 .. min(epochs, 4) - 1`` for strategies
    whose shapes can change between epochs) and profile it. Candidates whose plans run the same
    steps as an earlier one (equal `PlanProfile.key`) are dropped; a candidate the planner
    refuses is reported in the second list as ``{"label", "error"}``."""
    kept: list[ProfiledCandidate] = []
    failed: list[dict[str, str]] = []
    seen: set = set()
    extra = max(0, min(int(epochs), 4) - 1)
    for c in candidates:
        if progress is not None:
            progress(f"planning {c.label}")
        try:
            first = make_plan(sizes, world_size=world_size, on_oversize=on_oversize, **c.request)
            later = (
                [
                    make_plan(
                        sizes, world_size=world_size, on_oversize=on_oversize, epoch=e, **c.request
                    )
                    for e in range(1, extra + 1)
                ]
                if _needs_later_epochs(c.strategy)
                else []
            )
        except (ValueError, TypeError) as exc:
            failed.append({"label": c.label, "error": str(exc)})
            continue
        prof = profile_plan(first, later)
        if prof.num_steps == 0:
            failed.append({"label": c.label, "error": "the plan has no batches"})
            continue
        k = prof.key()
        if k in seen:
            continue
        seen.add(k)
        kept.append(ProfiledCandidate(c, prof))
    return kept, failed


def shape_cloud(profiled: Sequence[ProfiledCandidate]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct shapes over every candidate (``[M, 3]`` int64, sorted), the number of candidate
    steps per epoch that use each (int64), and each shape's largest share of one candidate's
    steps in per mille (int64; a later epoch's new shape counts as one step): where the search
    looks for costs, and how much each shape matters to some candidate."""
    if not profiled:
        z = np.zeros(0, np.int64)
        return np.zeros((0, 3), np.int64), z, z
    rows, weights, shares = [], [], []
    for p in profiled:
        w = np.concatenate([p.profile.steps, np.ones(p.profile.later_shapes.shape[0], np.int64)])
        rows.append(p.profile.all_shapes())
        weights.append(w)
        shares.append((w * 1000) // max(int(w.sum()), 1))
    allr = np.concatenate(rows)
    shapes, inverse = np.unique(allr, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    w = np.zeros(shapes.shape[0], np.int64)
    np.add.at(w, inverse, np.concatenate(weights))
    share = np.zeros(shapes.shape[0], np.int64)
    np.maximum.at(share, inverse, np.concatenate(shares))
    return shapes.astype(np.int64), w, share
