"""Memory-balancing strategies with a fixed number of graphs per batch (HEP paper, Lee et al.
2024, Section 3): ``random``, ``balance``, ``zscore``, ``iqr``, ``kk``, plus ``stratified``.

Every strategy places ``N`` graphs in ``B = ceil(N / (batch_size - 1))`` batches whose real
graph counts differ by at most one (never more than ``batch_size - 1``; one graph slot stays for
padding, as for the static strategies). The cost of a graph is ``n_bytes`` when the size table
has it, else ``cost_nodes * n_node + cost_edges * n_edge`` (see `CostModel`), an integer (the
linear model quantised once to fixed point): every decision on costs is exact. Each batch still
gets a padded shape (option ``pad``: ``static-64`` (default), ``pow2`` or ``max``), so the plan
file stays complete.
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction
from typing import Any

import numpy as np

from .._errors import InputError, InputTypeError
from .._exact import decimal, floor_frac, square_sum
from .._plan import BatchPlan
from .._validate import MAX_SHAPE, as_nonnegative_int, as_positive_int
from ..packing.kernels import (
    balanced_ldm,
    columns_in_order,
    refine_by_swaps,
    refine_in_place,
    round_matrix,
    stratified_assignment,
)
from ._assemble import PAD_MODES, finish_fixed_count_plan, padded_shapes
from ._cost import CostModel, cost_model_from_options
from ._memo import once_per_schedule
from ._registry import PlanRequest, register

__all__ = [
    "PAD_MODES",
    "balancing_batch_count",
    "batch_counts",
    "padded_shapes",
    "outliers_zscore",
    "outliers_iqr",
    "spread_outliers",
    "plan_random",
    "plan_balance",
    "plan_zscore",
    "plan_iqr",
    "plan_kk",
    "plan_stratified",
]

#: Padded-shape rules for balancing plans.

_COMMON = ("pad", "multiple", "cost_nodes", "cost_edges")


# ------------------------------------------------------------------ helpers
def balancing_batch_count(num_graphs: int, batch_size: int) -> int:
    """Batches needed for ``num_graphs`` at ``batch_size - 1`` real graphs per batch."""
    return -(-int(num_graphs) // (int(batch_size) - 1))


def batch_counts(num_graphs: int, num_batches: int) -> np.ndarray:
    """Real graphs per batch, as equal as possible: the first ``N % B`` batches hold one more."""
    q, extra = divmod(int(num_graphs), int(num_batches))
    counts = np.full(num_batches, q, dtype=np.int64)
    counts[:extra] += 1
    return counts


def _real_option(
    req: PlanRequest,
    name: str,
    default: float,
    *,
    low: float | None = None,
    high: float | None = None,
) -> float:
    value = req.option(name, default)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputTypeError(f"{name} must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise InputError(f"{name} must be finite, got {value!r}")
    if low is not None and not v > low:
        raise InputError(f"{name} must be > {low}, got {value!r}")
    if high is not None and v > high:
        raise InputError(f"{name} must be <= {high}, got {value!r}")
    return v


class _Setup:
    """Validated inputs shared by all balancing strategies."""

    def __init__(self, req: PlanRequest) -> None:
        bs = req.fixed_batch_size("fixes the number of graphs per batch")
        n = len(req.sizes)
        if bs - 1 > n:
            raise InputError(
                f"batch_size = {bs} asks for {bs - 1} real graphs per batch but the dataset has "
                f"only {n} graph(s); use batch_size <= {n + 1}"
            )
        self.pad = req.option("pad", "static-64")
        if self.pad not in PAD_MODES:
            raise InputError(f"pad must be one of {', '.join(PAD_MODES)}, got {self.pad!r}")
        self.multiple = as_positive_int(req.option("multiple", 64), "multiple", MAX_SHAPE)
        self.model: CostModel = cost_model_from_options(req.sizes, req.options)
        # int64 costs in units of 2**-shift of the model's unit
        self.costs, self.shift = self.model.costs(req.sizes)
        self.batch_size = bs
        self.num_graphs = n
        self.num_batches = req.batch_count_for_ranks(balancing_batch_count(n, bs), n)


def _order_rng(req: PlanRequest) -> np.random.Generator:
    """Per-epoch stream for the batch order, independent of ``req.epoch_rng()``."""
    return np.random.default_rng(np.random.SeedSequence(req.seed, spawn_key=(3, req.epoch)))


def _finish(
    req: PlanRequest,
    setup: _Setup,
    batch_of: np.ndarray | None = None,
    *,
    columns: np.ndarray | None = None,
    **meta: Any,
) -> BatchPlan:
    """Turn an assignment into a plan: batch order shuffled per epoch, padded shapes.

    Give ``batch_of`` (batch id per graph) or ``columns`` (``[R, B]`` graph ids, ``-1`` for
    dummies, column = batch; avoids a sort).
    """
    nb = setup.num_batches
    relabel = (_order_rng(req).permutation(nb) if req.shuffle else np.arange(nb)).astype(np.int64)
    if columns is not None:  # plan batch j = column relabel[j]
        order, counts = columns_in_order(columns, relabel if req.shuffle else None)
    else:
        inverse = np.empty(nb, dtype=np.int64)
        inverse[relabel] = np.arange(nb, dtype=np.int64)
        batch_of = inverse[batch_of]
        counts = np.bincount(batch_of, minlength=nb).astype(np.int64)
        order = np.argsort(batch_of, kind="stable").astype(np.int64)
    if counts.max() > setup.batch_size - 1:  # internal invariant, never expected
        raise RuntimeError(f"balancing produced a batch of {counts.max()} graphs")
    offsets = np.zeros(nb + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return finish_fixed_count_plan(
        req,
        order=order,
        offsets=offsets,
        batch_size=setup.batch_size,
        pad_fn=lambda real_nodes, real_edges: padded_shapes(
            real_nodes, real_edges, setup.pad, setup.multiple
        ),
        lower_bound=nb,
        cost_model=setup.model.as_meta(),
        pad=setup.pad,
        **meta,
    )


def outliers_zscore(costs: np.ndarray, threshold: float = 3.0) -> np.ndarray:
    """Indices of graphs whose z-score ``(c - mean) / std`` (population std) exceeds
    ``threshold``, decided exactly on the integer ``costs`` (``threshold`` read by `decimal`):
    ``q (N c - S) > p sqrt(N Q - S**2)`` for ``threshold = p / q``, ``S`` and ``Q`` the sum
    and the sum of squares. None when every cost is equal."""
    n = costs.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    s = int(costs.sum(dtype=np.int64))
    d = n * square_sum(costs) - s * s  # N**2 times the variance
    if d == 0:
        return np.zeros(0, dtype=np.int64)
    t = decimal(threshold)
    p, q = t.numerator, t.denominator

    def above(c: int) -> bool:  # q (N c - S) > p sqrt(d), squared with the signs kept
        x = n * c - s
        if p >= 0:
            return x > 0 and q * q * x * x > p * p * d
        return x >= 0 or q * q * x * x < p * p * d

    # `above` grows with c: the smallest cost above the threshold, by bisection
    lo, hi = int(costs.min()), int(costs.max()) + 1
    while lo < hi:
        mid = (lo + hi) // 2
        if above(mid):
            hi = mid
        else:
            lo = mid + 1
    return np.flatnonzero(costs >= lo).astype(np.int64)


def _quantile(costs: np.ndarray, num: int, den: int) -> Fraction:
    """The ``num / den`` quantile of integer ``costs`` by linear interpolation between the
    order statistics around position ``(N - 1) * num / den`` (``np.percentile``'s default
    rule), as an exact rational."""
    n = costs.shape[0]
    h = Fraction((n - 1) * num, den)
    k = floor_frac(h)
    k1 = min(k + 1, n - 1)
    part = np.partition(costs, [k, k1]) if k1 != k else np.partition(costs, k)
    a, b = int(part[k]), int(part[k1])
    return a + (h - k) * (b - a)


def outliers_iqr(costs: np.ndarray, multiplier: float = 1.5) -> tuple[np.ndarray, Fraction]:
    """Indices of graphs above ``Q3 + multiplier * (Q3 - Q1)`` (upper fence), and the fence
    (exact; quartiles by `_quantile`, ``multiplier`` read by `decimal`)."""
    q1, q3 = _quantile(costs, 1, 4), _quantile(costs, 3, 4)
    fence = q3 + decimal(multiplier) * (q3 - q1)
    return np.flatnonzero(costs > floor_frac(fence)).astype(np.int64), fence


def spread_outliers(
    outliers: np.ndarray,
    costs: np.ndarray,
    num_graphs: int,
    num_batches: int,
    rng: np.random.Generator,
    *,
    snake: bool = True,
    permute_batches: bool = True,
) -> np.ndarray:
    """Batch id per graph: outliers dealt round-robin, the rest filling free slots at random.

    Outliers are sorted by cost (descending) and dealt one per batch per round over a batch
    order (a random permutation when ``permute_batches``); with ``snake`` every other round runs
    backwards. So no batch holds two outliers while there are at least as many batches as
    outliers, and batch outlier counts differ by at most one. The remaining graphs are shuffled
    into the free slots; batch sizes follow `batch_counts`, the larger sizes going to batches
    with more outliers.
    """
    b = int(num_batches)
    m = outliers.shape[0]
    outliers = outliers[np.argsort(-costs[outliers], kind="stable")]
    seq = rng.permutation(b) if permute_batches else np.arange(b)
    pos = np.arange(m)
    rnd, col = np.divmod(pos, b)
    if snake:
        col = np.where(rnd % 2 == 1, b - 1 - col, col)
    out_batch = seq[col].astype(np.int64)
    n_out = np.bincount(out_batch, minlength=b)
    counts = np.empty(b, dtype=np.int64)
    counts[np.argsort(-n_out, kind="stable")] = batch_counts(num_graphs, b)
    free = counts - n_out
    if (free < 0).any():  # impossible by construction (see docstring)
        raise RuntimeError("outlier dealing overfilled a batch")
    batch_of = np.empty(num_graphs, dtype=np.int64)
    batch_of[outliers] = out_batch
    is_out = np.zeros(num_graphs, dtype=bool)
    is_out[outliers] = True
    rest = np.flatnonzero(~is_out)
    rest = rest[rng.permutation(rest.shape[0])]
    batch_of[rest] = np.repeat(np.arange(b, dtype=np.int64), free)
    return batch_of


# --------------------------------------------------------------- strategies
@register(
    "random",
    description="HEP baseline: batch_size-1 random graphs per batch (counts differ by <= 1), "
    "padded per `pad` (static-64 | pow2 | max)",
    options=_COMMON,
    uses_budget=False,
)
def plan_random(req: PlanRequest) -> BatchPlan:
    s = _Setup(req)
    rng = req.epoch_rng()
    perm = req.order(rng)
    batch_of = np.empty(s.num_graphs, dtype=np.int64)
    batch_of[perm] = np.repeat(
        np.arange(s.num_batches, dtype=np.int64), batch_counts(s.num_graphs, s.num_batches)
    )
    return _finish(req, s, batch_of)


@register(
    "balance",
    description="HEP balance sampler: the `fraction` (default 0.1) largest graphs by cost dealt "
    "round-robin in size order, the rest at random; fraction 1 = bucket partitioning",
    options=(*_COMMON, "fraction"),
    uses_budget=False,
)
def plan_balance(req: PlanRequest) -> BatchPlan:
    s = _Setup(req)
    fraction = _real_option(req, "fraction", 0.1, low=0.0, high=1.0)
    f = decimal(fraction)
    m = min(s.num_graphs, -(-s.num_graphs * f.numerator // f.denominator))
    outliers = np.argsort(-s.costs, kind="stable")[:m].astype(np.int64)
    batch_of = spread_outliers(
        outliers,
        s.costs,
        s.num_graphs,
        s.num_batches,
        req.epoch_rng(),
        snake=False,
        permute_batches=False,
    )
    return _finish(req, s, batch_of, outliers=m, fraction=fraction)


@register(
    "zscore",
    description="HEP z-score sampler: graphs with cost z-score above `threshold` (default 3) "
    "dealt one per batch (snake round-robin), the rest at random",
    options=(*_COMMON, "threshold"),
    uses_budget=False,
)
def plan_zscore(req: PlanRequest) -> BatchPlan:
    s = _Setup(req)
    threshold = _real_option(req, "threshold", 3.0)
    outliers = outliers_zscore(s.costs, threshold)
    batch_of = spread_outliers(outliers, s.costs, s.num_graphs, s.num_batches, req.epoch_rng())
    return _finish(req, s, batch_of, outliers=int(outliers.shape[0]), threshold=threshold)


@register(
    "iqr",
    description="HEP IQR sampler: graphs above Q3 + `multiplier` x IQR (default 1.5) dealt one "
    "per batch (snake round-robin), the rest at random",
    options=(*_COMMON, "multiplier"),
    uses_budget=False,
)
def plan_iqr(req: PlanRequest) -> BatchPlan:
    s = _Setup(req)
    multiplier = _real_option(req, "multiplier", 1.5)
    if multiplier < 0:
        raise InputError(f"multiplier must be >= 0, got {multiplier!r}")
    outliers, fence = outliers_iqr(s.costs, multiplier)
    batch_of = spread_outliers(outliers, s.costs, s.num_graphs, s.num_batches, req.epoch_rng())
    return _finish(
        req,
        s,
        batch_of,
        outliers=int(outliers.shape[0]),
        multiplier=multiplier,
        fence=float(fence * Fraction(2) ** -s.shift),
    )  # in the model's unit


@register(
    "kk",
    description="Karmarkar-Karp largest differencing with exact batch sizes: balanced LDM over "
    "rounds of B graphs (O(N log N) time, O(N) memory) plus up to `passes` (default 16) swap "
    "passes; batch contents fixed across epochs",
    options=(*_COMMON, "passes"),
    uses_budget=False,
)
def plan_kk(req: PlanRequest) -> BatchPlan:
    passes = as_nonnegative_int(req.option("passes", 16), "passes")

    def make() -> tuple[_Setup, np.ndarray, int]:
        s = _Setup(req)
        # memory-lean: the round matrix is rearranged and refined in place, costs dropped once
        # used
        value, ident = round_matrix(s.costs, s.num_batches)
        del s.costs
        balanced_ldm(value, ident, inplace=True)
        swaps = refine_in_place(value, ident, passes)
        del value
        return s, ident, swaps

    # the batches' contents are the same every epoch: a schedule makes them once
    s, ident, swaps = once_per_schedule(req, ("kk", passes), make, lambda made: (made[1],))
    return _finish(req, s, columns=ident, swaps=swaps)


@register(
    "stratified",
    description="beyond the paper: graphs sorted into cost strata of B, each stratum dealt to "
    "the batches by a fresh random permutation every epoch, then up to `passes` (default 8) "
    "swap passes until max batch cost <= (1 + `tolerance`) x mean (default 0.01)",
    options=(*_COMMON, "passes", "tolerance"),
    uses_budget=False,
)
def plan_stratified(req: PlanRequest) -> BatchPlan:
    s = _Setup(req)
    passes = as_nonnegative_int(req.option("passes", 8), "passes")
    tolerance = _real_option(req, "tolerance", 0.01)
    if tolerance < 0:
        raise InputError(f"tolerance must be >= 0, got {tolerance!r}")
    value, ident = round_matrix(s.costs, s.num_batches)
    value, ident = stratified_assignment(value, ident, req.epoch_rng())
    # no batch above (1 + tolerance) x the mean load: an integer bound on integer loads
    target = floor_frac((1 + decimal(tolerance)) * int(s.costs.sum(dtype=np.int64)) / s.num_batches)
    value, ident, swaps = refine_by_swaps(value, ident, passes, target=target)
    return _finish(req, s, columns=ident, swaps=swaps, tolerance=tolerance)
