"""`BatchPlan`: which graphs go in which batch, and each batch's padded shape (the plan file it is
saved as and loaded from: `graphbatch._plan_file`)."""

from __future__ import annotations

import itertools
import math
import numbers
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from ._errors import InputError, InputTypeError
from ._exact_nnls import nnls
from ._io import atomic_savez
from ._plan_file import (
    OPTIONAL_INT_KEYS,
    PLAN_FORMAT_VERSION,
    REQUIRED_KEYS,
    plan_file_arrays,
    read_plan_file,
)

if TYPE_CHECKING:
    from ._sizes import GraphSizes

__all__ = ["BatchPlan", "PlanStats", "PLAN_FORMAT_VERSION"]


def _fsum(values: np.ndarray) -> float:
    """The correctly rounded sum of float ``values`` (``math.fsum``), chunk by chunk as lists."""
    step = 1 << 16
    return math.fsum(
        itertools.chain.from_iterable(
            values[s0 : s0 + step].tolist() for s0 in range(0, values.shape[0], step)
        )
    )


@dataclass(frozen=True)
class PlanStats:
    """Summary of a plan over one epoch. Efficiencies are real / padded, summed over batches."""

    strategy: str
    num_graphs: int
    num_batches: int
    lower_bound: int
    batches_over_bound: float
    node_efficiency: float
    edge_efficiency: float
    graph_efficiency: float
    distinct_shapes: int
    graphs_per_batch_min: int
    graphs_per_batch_mean: float
    graphs_per_batch_max: int
    max_pad_nodes: int
    max_pad_edges: int
    max_pad_graphs: int
    skipped: int
    # memory statistics (issue 4), over batches holding >= 1 graph: batch cost = real_cost
    # (bytes) when the plan has it, else the plan's linear model
    # cost_per_node * real_nodes + cost_per_edge * real_edges; padded_cost_max applies the same
    # coefficients (fitted by NNLS for bytes) to the padded shape, over all batches
    cost_source: str = "linear"
    cost_per_node: float = 1.0
    cost_per_edge: float = 1.0
    cost_max: float = 0.0
    cost_p99: float = 0.0
    cost_mean: float = 0.0
    cost_max_over_mean: float = 1.0
    padded_cost_max: float = 0.0
    # distributed plans (world_size > 1): per-step max/mean across ranks, averaged and worst
    world_size: int = 1
    num_steps: int = 0
    step_node_imbalance_mean: float = 1.0
    step_node_imbalance_max: float = 1.0
    step_edge_imbalance_mean: float = 1.0
    step_edge_imbalance_max: float = 1.0
    padding_only_batches: int = 0
    padding_only_share: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class BatchPlan:
    """A batch plan for one epoch.

    ``order[offsets[b]:offsets[b+1]]`` are the dataset indices of the real graphs of batch ``b``,
    whose padded shape is ``(pad_nodes[b], pad_edges[b], pad_graphs[b])``; ``skipped`` lists the
    graphs left out on purpose (``on_oversize="skip"``). Every graph index appears exactly once in
    ``order`` or ``skipped``. ``real_nodes``/``real_edges`` are per-batch real totals. Distributed
    plans add ``rank`` and ``step`` per batch (batches stored step-major). All arrays are int64.
    """

    #: ``meta`` keys that hold timings (the only part of a plan file that differs between two
    #: runs of one request; docs/plan-format.md).
    TIMING_META_KEYS = ("plan_seconds",)

    def __init__(
        self,
        order: ArrayLike,
        offsets: ArrayLike,
        pad_nodes: ArrayLike,
        pad_edges: ArrayLike,
        pad_graphs: ArrayLike,
        skipped: ArrayLike = (),
        *,
        real_nodes: ArrayLike,
        real_edges: ArrayLike,
        real_cost: ArrayLike | None = None,
        rank: ArrayLike | None = None,
        step: ArrayLike | None = None,
        meta: dict[str, Any] | None = None,
    ) -> None:
        def arr(x: ArrayLike) -> np.ndarray:
            return np.ascontiguousarray(x, dtype=np.int64).reshape(-1)

        def opt(x: ArrayLike | None) -> np.ndarray | None:
            return None if x is None else arr(x)

        self.order = arr(order)
        self.offsets = arr(offsets)
        self.pad_nodes = arr(pad_nodes)
        self.pad_edges = arr(pad_edges)
        self.pad_graphs = arr(pad_graphs)
        self.skipped = arr(skipped)
        self.real_nodes = arr(real_nodes)
        self.real_edges = arr(real_edges)
        self.real_cost = opt(real_cost)
        self.rank = opt(rank)
        self.step = opt(step)
        self.meta: dict[str, Any] = dict(meta or {})
        self._check_shapes()

    # ----------------------------------------------------------------- basics
    def _check_shapes(self) -> None:
        b = self.offsets.shape[0] - 1
        if b < 0:
            raise InputError("offsets must have length num_batches + 1 >= 1")
        if self.offsets[0] != 0 or self.offsets[-1] != self.order.shape[0]:
            raise InputError(
                f"offsets must start at 0 and end at len(order) = {self.order.shape[0]}, "
                f"got {self.offsets[0]}..{self.offsets[-1]}"
            )
        if b and (np.diff(self.offsets) < 0).any():
            raise InputError("offsets must be non-decreasing")
        for name in ("pad_nodes", "pad_edges", "pad_graphs", "real_nodes", "real_edges"):
            if getattr(self, name).shape[0] != b:
                raise InputError(f"{name} has {getattr(self, name).shape[0]} entries, expected {b}")
        for name in ("real_cost", "rank", "step"):
            v = getattr(self, name)
            if v is not None and v.shape[0] != b:
                raise InputError(f"{name} has {v.shape[0]} entries, expected {b}")

    def __len__(self) -> int:
        """Number of batches."""
        return int(self.offsets.shape[0] - 1)

    @property
    def num_batches(self) -> int:
        return len(self)

    @property
    def num_graphs(self) -> int:
        """Number of graphs placed in batches (skipped graphs excluded)."""
        return int(self.order.shape[0])

    @property
    def graphs_per_batch(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def strategy(self) -> str:
        return str(self.meta.get("strategy", "unknown"))

    @property
    def world_size(self) -> int:
        return int(self.meta.get("world_size", 1))

    def batch(self, b: int) -> np.ndarray:
        """Dataset indices of the real graphs of batch ``b``."""
        if not -len(self) <= b < len(self):
            raise IndexError(f"batch {b} out of range for a plan of {len(self)} batches")
        b %= len(self)
        return self.order[self.offsets[b] : self.offsets[b + 1]]

    def batches(self) -> Iterator[np.ndarray]:
        """Yield the dataset indices of each batch, in plan order."""
        order, offsets = self.order, self.offsets
        for b in range(len(self)):
            yield order[offsets[b] : offsets[b + 1]]

    def shape(self, b: int) -> tuple[int, int, int]:
        """Padded ``(n_node, n_edge, n_graph)`` of batch ``b``."""
        return (int(self.pad_nodes[b]), int(self.pad_edges[b]), int(self.pad_graphs[b]))

    def shapes(self) -> np.ndarray:
        """Distinct padded shapes as an int64 array ``[S, 3]`` (nodes, edges, graphs), sorted."""
        if len(self) == 0:
            return np.zeros((0, 3), dtype=np.int64)
        s = np.stack([self.pad_nodes, self.pad_edges, self.pad_graphs], axis=1)
        return np.unique(s, axis=0)

    def __repr__(self) -> str:
        return (
            f"BatchPlan(strategy={self.strategy!r}, batches={len(self)}, "
            f"graphs={self.num_graphs}, skipped={self.skipped.shape[0]}, "
            f"shapes={self.shapes().shape[0]})"
        )

    # --------------------------------------------------------- distributed
    @property
    def num_steps(self) -> int:
        """Training steps: batches per rank (= number of batches for a single-device plan)."""
        if self.step is None:
            return len(self)
        return int(self.step.max()) + 1 if len(self) else 0

    def rank_batches(self, rank: int = 0) -> np.ndarray:
        """Batch indices of ``rank``, in step order (every rank gets ``num_steps`` of them).

        A single-device plan has only rank 0, which gets every batch in plan order.
        """
        ws = self.world_size if self.rank is not None else 1
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)):
            raise InputTypeError(f"rank must be an integer, got {rank!r}")
        if not 0 <= int(rank) < ws:
            raise InputError(f"rank {rank} out of range for a plan of world size {ws}")
        if self.rank is None:
            return np.arange(len(self), dtype=np.int64)
        assert self.step is not None  # given with rank (checked by validate)
        idx = np.flatnonzero(self.rank == int(rank))
        return idx[np.argsort(self.step[idx], kind="stable")].astype(np.int64)

    # ------------------------------------------------------------------ costs
    def cost_coefficients(self) -> tuple[str, float, float]:
        """``(source, per_node, per_edge)``: how batch cost relates to real/padded nodes and edges.

        A linear cost model stored in ``meta["cost_model"]`` is used as is. For plans with
        ``real_cost`` (bytes), per-node/per-edge bytes are fitted by non-negative least squares
        on the non-empty batches' totals (used for the padded size), solved exactly
        (`graphbatch._exact_nnls`: the same numbers on every machine). Else cost = nodes +
        edges.
        """
        model = self.meta.get("cost_model") or {}
        if model.get("source") == "linear":
            return "linear", float(model["per_node"]), float(model["per_edge"])
        if self.real_cost is None:
            return "linear", 1.0, 1.0
        keep = self.graphs_per_batch > 0
        if not keep.any():
            return "n_bytes", 0.0, 0.0
        a = np.stack([self.real_nodes[keep], self.real_edges[keep]], axis=1)
        coef = nnls(a, self.real_cost[keep]).to_float()  # exact, then correctly rounded
        return "n_bytes", float(coef[0]), float(coef[1])

    def batch_costs(self) -> np.ndarray:
        """Real cost per batch (float64): ``real_cost`` (bytes) when present, unless the plan was
        balanced on a linear model (``meta["cost_model"]``); else the linear model."""
        source, a, b = self.cost_coefficients()
        if source == "n_bytes":
            assert self.real_cost is not None  # the n_bytes source is the real cost
            return self.real_cost.astype(np.float64)
        return a * self.real_nodes.astype(np.float64) + b * self.real_edges.astype(np.float64)

    # ------------------------------------------------------------------ stats
    def stats(self) -> PlanStats:
        """Efficiencies, batch counts vs the lower bound, distinct shapes, graphs per batch."""
        gpb = self.graphs_per_batch
        nb = len(self)
        # totals as float64 sums: padded sums over many batches cannot overflow int64 this way
        pad_n = float(np.sum(self.pad_nodes, dtype=np.float64))
        pad_e = float(np.sum(self.pad_edges, dtype=np.float64))
        pad_g = float(np.sum(self.pad_graphs, dtype=np.float64))
        lb = int(self.meta.get("lower_bound", nb))

        def ratio(a: float, b: float) -> float:
            return float(a) / float(b) if b else 1.0

        def ratio_f(a: float, b: float) -> float:
            return a / b if b > 0 else 1.0

        source, per_node, per_edge = self.cost_coefficients()
        full = gpb > 0  # memory stats over batches holding graphs (padding-only cost nothing)
        cost = self.batch_costs()[full]
        padded = per_node * self.pad_nodes.astype(np.float64) + per_edge * self.pad_edges
        # correctly rounded sums (math.fsum): the same on every machine, whatever order a SIMD
        # reduction would add in (docs/plan-format.md, "Same plan on every machine")
        cost_mean = _fsum(cost) / cost.shape[0] if cost.shape[0] else 0.0
        empty = int((~full).sum())
        dist = self._step_imbalance()
        return PlanStats(
            strategy=self.strategy,
            num_graphs=self.num_graphs,
            num_batches=nb,
            lower_bound=lb,
            batches_over_bound=ratio(nb, lb),
            node_efficiency=ratio(float(np.sum(self.real_nodes, dtype=np.float64)), pad_n),
            edge_efficiency=ratio(float(np.sum(self.real_edges, dtype=np.float64)), pad_e),
            graph_efficiency=ratio(self.num_graphs, pad_g),
            distinct_shapes=int(self.shapes().shape[0]),
            graphs_per_batch_min=int(gpb.min()) if nb else 0,
            graphs_per_batch_mean=float(gpb.mean()) if nb else 0.0,
            graphs_per_batch_max=int(gpb.max()) if nb else 0,
            max_pad_nodes=int(self.pad_nodes.max()) if nb else 0,
            max_pad_edges=int(self.pad_edges.max()) if nb else 0,
            max_pad_graphs=int(self.pad_graphs.max()) if nb else 0,
            skipped=int(self.skipped.shape[0]),
            cost_source=source,
            cost_per_node=per_node,
            cost_per_edge=per_edge,
            cost_max=float(cost.max()) if cost.shape[0] else 0.0,
            cost_p99=float(np.percentile(cost, 99)) if cost.shape[0] else 0.0,
            cost_mean=cost_mean,
            cost_max_over_mean=ratio_f(float(cost.max()) if cost.shape[0] else 0.0, cost_mean),
            padded_cost_max=float(padded.max()) if nb else 0.0,
            world_size=self.world_size if self.rank is not None else 1,
            num_steps=self.num_steps,
            step_node_imbalance_mean=dist[0],
            step_node_imbalance_max=dist[1],
            step_edge_imbalance_mean=dist[2],
            step_edge_imbalance_max=dist[3],
            padding_only_batches=empty,
            padding_only_share=float(empty) / nb if nb else 0.0,
        )

    def _step_imbalance(self) -> tuple[float, float, float, float]:
        """Mean and max over steps of (max / mean across ranks) for real nodes, then edges.

        A step whose mean is 0 counts as balanced (1.0). Single-device plans give 1.0.
        """
        if self.rank is None or self.step is None or len(self) == 0:
            return 1.0, 1.0, 1.0, 1.0
        r = self.world_size
        out = []
        for values in (self.real_nodes, self.real_edges):
            grid = np.zeros((self.num_steps, r), dtype=np.float64)
            grid[self.step, self.rank] = values
            mean = grid.mean(axis=1)
            ratio = np.where(mean > 0, grid.max(axis=1) / np.where(mean > 0, mean, 1.0), 1.0)
            out += [_fsum(ratio) / ratio.shape[0], float(ratio.max())]
        return out[0], out[1], out[2], out[3]

    # ------------------------------------------------------------ validation
    def validate(self, sizes: GraphSizes | None = None) -> None:
        """Check the plan's invariants; raise ``ValueError`` naming the first violation.

        Without ``sizes``: structure, non-negative totals, per-batch totals against the padded
        shapes, and ``order`` + ``skipped`` a permutation of ``0..M+S-1`` (no duplicate, no
        negative or out-of-range index). With ``sizes`` (a `GraphSizes`): every graph of the
        table exactly once and the per-batch totals recomputed from the sizes.
        """
        self._check_shapes()
        self._check_indices(None if sizes is None else len(sizes))
        for name, least in (
            ("real_nodes", 0),
            ("real_edges", 0),
            ("real_cost", 0),
            ("pad_nodes", 1),
            ("pad_edges", 0),
            ("pad_graphs", 1),
        ):
            v = getattr(self, name)  # checked first: pad - 1 below must not wrap around
            if v is not None and v.shape[0] and int(v.min()) < least:
                b = int(np.argmin(v))
                raise InputError(f"{name}[{b}] = {int(v[b])} is below {least}")
        gpb = self.graphs_per_batch
        over_g = gpb > self.pad_graphs - 1
        over_n = self.real_nodes > self.pad_nodes - 1
        over_e = self.real_edges > self.pad_edges
        for name, bad in (("graphs", over_g), ("nodes", over_n), ("edges", over_e)):
            if bad.any():
                b = int(np.flatnonzero(bad)[0])
                raise InputError(
                    f"batch {b} holds {gpb[b]} graphs / {self.real_nodes[b]} nodes / "
                    f"{self.real_edges[b]} edges, over its padded shape {self.shape(b)} "
                    f"less the padding reservation ({name})"
                )
        if self.rank is not None or self.step is not None or self.meta.get("world_size", 1) != 1:
            self._validate_distributed()
        if sizes is not None and len(self):
            starts = self.offsets[:-1]
            nonempty = gpb > 0
            rn = np.zeros(len(self), dtype=np.int64)
            re = np.zeros(len(self), dtype=np.int64)
            if self.order.shape[0]:
                rn[nonempty] = np.add.reduceat(sizes.n_node[self.order], starts[nonempty])
                re[nonempty] = np.add.reduceat(sizes.n_edge[self.order], starts[nonempty])
            if not (np.array_equal(rn, self.real_nodes) and np.array_equal(re, self.real_edges)):
                raise InputError("plan's real_nodes/real_edges disagree with the size table")

    def _check_indices(self, n: int | None) -> None:
        """``order`` + ``skipped`` must be a permutation of ``0..n-1`` (``n`` defaults to their
        combined length): raise ``ValueError`` counting negative, out-of-range, duplicated and
        missing indices."""
        allidx = np.concatenate([self.order, self.skipped])
        n = allidx.shape[0] if n is None else int(n)
        if allidx.shape[0] == n and np.array_equal(np.sort(allidx), np.arange(n)):
            return
        inside = (allidx >= 0) & (allidx < n)
        counts = np.bincount(allidx[inside], minlength=n)
        missing = np.flatnonzero(counts == 0)
        dup = np.flatnonzero(counts > 1)
        outside = allidx[~inside]
        raise InputError(
            f"plan does not hold each of the {n} graphs exactly once: "
            f"{outside.shape[0]} index(es) outside 0..{n - 1} (first {outside[:5].tolist()}), "
            f"{missing.shape[0]} missing (first {missing[:5].tolist()}), "
            f"{dup.shape[0]} duplicated (first {dup[:5].tolist()})"
        )

    def _validate_distributed(self) -> None:
        if self.rank is None or self.step is None:
            raise InputError(
                "a distributed plan needs both rank and step arrays "
                f"(meta world_size = {self.meta.get('world_size', 1)!r})"
            )
        r = self.meta.get("world_size", 1)
        if isinstance(r, bool) or not isinstance(r, numbers.Integral) or r < 1:
            raise InputError(f"meta world_size must be a positive integer, got {r!r}")
        r = int(r)
        nb = len(self)
        if r < 1 or nb % r:
            raise InputError(f"{nb} batches do not fill whole steps of world size {r}")
        s = nb // r
        if not (
            np.array_equal(self.step, np.repeat(np.arange(s), r))
            and np.array_equal(self.rank, np.tile(np.arange(r), s))
        ):
            raise InputError("distributed batches must be stored step-major: step s, ranks 0..R-1")
        for name in ("pad_nodes", "pad_edges", "pad_graphs"):
            grid = getattr(self, name).reshape(s, r)
            bad = (grid != grid[:, :1]).any(axis=1)
            if bad.any():
                st = int(np.flatnonzero(bad)[0])
                raise InputError(
                    f"step {st} mixes padded shapes across ranks ({name}: {grid[st].tolist()})"
                )

    # ----------------------------------------------------------------- files
    def to_arrays(self) -> dict[str, np.ndarray]:
        """The plan-file arrays (docs/plan-format.md)."""
        names = (*REQUIRED_KEYS, *OPTIONAL_INT_KEYS)
        return plan_file_arrays({name: getattr(self, name) for name in names}, self.meta)

    def save(self, path: str | os.PathLike) -> Path:
        """Write the plan file atomically (uncompressed ``.npz``, int64 arrays, JSON ``meta``)."""
        return atomic_savez(path, self.to_arrays())

    @classmethod
    def load(cls, path: str | os.PathLike) -> BatchPlan:
        """Read a plan file and check it: refuses pickled content, files of a newer format
        version, non-integer or multi-dimensional arrays, a ``meta`` that is not a JSON object,
        and any plan that fails :meth:`validate` (duplicate/negative/out-of-range indices,
        non-monotone offsets, inconsistent ranks/steps, totals over their shapes)."""
        where = f"plan file {str(path)!r}"
        arrays, meta = read_plan_file(path)
        kwargs = {k: arrays[k] for k in OPTIONAL_INT_KEYS if k in arrays}
        try:
            plan = cls(*(arrays[k] for k in REQUIRED_KEYS), meta=meta, **kwargs)
            plan.validate()
        except ValueError as exc:
            raise InputError(f"{where} is not a valid plan: {exc}") from None
        return plan
