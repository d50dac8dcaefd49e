"""`BatchPlan`: which graphs go in which batch, and each batch's padded shape; the plan file."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ._io import atomic_savez, read_npz

__all__ = ["BatchPlan", "PlanStats", "PLAN_FORMAT_VERSION"]

#: Version of the plan-file contract (docs/plan-format.md). Readers accept <= this version.
PLAN_FORMAT_VERSION = 1

_REQUIRED_KEYS = ("order", "offsets", "pad_nodes", "pad_edges", "pad_graphs", "skipped")
_OPTIONAL_INT_KEYS = ("real_nodes", "real_edges", "real_cost", "rank", "step")


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

    def __init__(
        self,
        order,
        offsets,
        pad_nodes,
        pad_edges,
        pad_graphs,
        skipped=(),
        *,
        real_nodes,
        real_edges,
        real_cost=None,
        rank=None,
        step=None,
        meta: dict[str, Any] | None = None,
    ) -> None:
        def arr(x):
            return None if x is None else np.ascontiguousarray(x, dtype=np.int64).reshape(-1)

        self.order = arr(order)
        self.offsets = arr(offsets)
        self.pad_nodes = arr(pad_nodes)
        self.pad_edges = arr(pad_edges)
        self.pad_graphs = arr(pad_graphs)
        self.skipped = arr(skipped)
        self.real_nodes = arr(real_nodes)
        self.real_edges = arr(real_edges)
        self.real_cost = arr(real_cost)
        self.rank = arr(rank)
        self.step = arr(step)
        self.meta: dict[str, Any] = dict(meta or {})
        self._check_shapes()

    # ----------------------------------------------------------------- basics
    def _check_shapes(self) -> None:
        b = self.offsets.shape[0] - 1
        if b < 0:
            raise ValueError("offsets must have length num_batches + 1 >= 1")
        if self.offsets[0] != 0 or self.offsets[-1] != self.order.shape[0]:
            raise ValueError(
                f"offsets must start at 0 and end at len(order) = {self.order.shape[0]}, "
                f"got {self.offsets[0]}..{self.offsets[-1]}"
            )
        if b and (np.diff(self.offsets) < 0).any():
            raise ValueError("offsets must be non-decreasing")
        for name in ("pad_nodes", "pad_edges", "pad_graphs", "real_nodes", "real_edges"):
            if getattr(self, name).shape[0] != b:
                raise ValueError(f"{name} has {getattr(self, name).shape[0]} entries, expected {b}")
        for name in ("real_cost", "rank", "step"):
            v = getattr(self, name)
            if v is not None and v.shape[0] != b:
                raise ValueError(f"{name} has {v.shape[0]} entries, expected {b}")

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
            raise TypeError(f"rank must be an integer, got {rank!r}")
        if not 0 <= int(rank) < ws:
            raise ValueError(f"rank {rank} out of range for a plan of world size {ws}")
        if self.rank is None:
            return np.arange(len(self), dtype=np.int64)
        idx = np.flatnonzero(self.rank == int(rank))
        return idx[np.argsort(self.step[idx], kind="stable")].astype(np.int64)

    # ------------------------------------------------------------------ costs
    def cost_coefficients(self) -> tuple[str, float, float]:
        """``(source, per_node, per_edge)``: how batch cost relates to real/padded nodes and edges.

        A linear cost model stored in ``meta["cost_model"]`` is used as is. For plans with
        ``real_cost`` (bytes), per-node/per-edge bytes are fitted by non-negative least squares
        on the non-empty batches' totals (used for the padded size). Else cost = nodes + edges.
        """
        model = self.meta.get("cost_model") or {}
        if model.get("source") == "linear":
            return "linear", float(model["per_node"]), float(model["per_edge"])
        if self.real_cost is None:
            return "linear", 1.0, 1.0
        keep = self.graphs_per_batch > 0
        if not keep.any():
            return "n_bytes", 0.0, 0.0
        from scipy.optimize import nnls

        a = np.stack([self.real_nodes[keep], self.real_edges[keep]], axis=1).astype(np.float64)
        coef, _ = nnls(a, self.real_cost[keep].astype(np.float64))
        return "n_bytes", float(coef[0]), float(coef[1])

    def batch_costs(self) -> np.ndarray:
        """Real cost per batch (float64): ``real_cost`` (bytes) when present, unless the plan was
        balanced on a linear model (``meta["cost_model"]``); else the linear model."""
        source, a, b = self.cost_coefficients()
        if source == "n_bytes":
            return self.real_cost.astype(np.float64)
        return a * self.real_nodes.astype(np.float64) + b * self.real_edges.astype(np.float64)

    # ------------------------------------------------------------------ stats
    def stats(self) -> PlanStats:
        """Efficiencies, batch counts vs the lower bound, distinct shapes, graphs per batch."""
        gpb = self.graphs_per_batch
        nb = len(self)
        pad_n = int(self.pad_nodes.sum())
        pad_e = int(self.pad_edges.sum())
        pad_g = int(self.pad_graphs.sum())
        lb = int(self.meta.get("lower_bound", nb))

        def ratio(a: int, b: int) -> float:
            return float(a) / float(b) if b else 1.0

        def ratio_f(a: float, b: float) -> float:
            return a / b if b > 0 else 1.0

        source, per_node, per_edge = self.cost_coefficients()
        full = gpb > 0  # memory stats over batches holding graphs (padding-only cost nothing)
        cost = self.batch_costs()[full]
        padded = per_node * self.pad_nodes.astype(np.float64) + per_edge * self.pad_edges
        cost_mean = float(cost.mean()) if cost.shape[0] else 0.0
        empty = int((~full).sum())
        dist = self._step_imbalance()
        return PlanStats(
            strategy=self.strategy,
            num_graphs=self.num_graphs,
            num_batches=nb,
            lower_bound=lb,
            batches_over_bound=ratio(nb, lb),
            node_efficiency=ratio(int(self.real_nodes.sum()), pad_n),
            edge_efficiency=ratio(int(self.real_edges.sum()), pad_e),
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
            out += [float(ratio.mean()), float(ratio.max())]
        return out[0], out[1], out[2], out[3]

    # ------------------------------------------------------------ validation
    def validate(self, sizes=None) -> None:
        """Check the plan's invariants; raise ``ValueError`` naming the first violation.

        Without ``sizes``: structure and per-batch totals against the padded shapes. With
        ``sizes`` (a `GraphSizes`): also every graph exactly once in ``order``/``skipped`` and the
        per-batch totals recomputed from the sizes.
        """
        self._check_shapes()
        gpb = self.graphs_per_batch
        over_g = gpb > self.pad_graphs - 1
        over_n = self.real_nodes > self.pad_nodes - 1
        over_e = self.real_edges > self.pad_edges
        for name, bad in (("graphs", over_g), ("nodes", over_n), ("edges", over_e)):
            if bad.any():
                b = int(np.flatnonzero(bad)[0])
                raise ValueError(
                    f"batch {b} holds {gpb[b]} graphs / {self.real_nodes[b]} nodes / "
                    f"{self.real_edges[b]} edges, over its padded shape {self.shape(b)} "
                    f"less the padding reservation ({name})"
                )
        if self.rank is not None or self.step is not None:
            self._validate_distributed()
        if sizes is not None:
            n = len(sizes)
            allidx = np.concatenate([self.order, self.skipped])
            if allidx.shape[0] != n or not np.array_equal(np.sort(allidx), np.arange(n)):
                counts = np.bincount(allidx[(allidx >= 0) & (allidx < n)], minlength=n)
                missing = np.flatnonzero(counts == 0)
                dup = np.flatnonzero(counts > 1)
                raise ValueError(
                    f"plan does not hold each of the {n} graphs exactly once: "
                    f"{missing.shape[0]} missing (first {missing[:5].tolist()}), "
                    f"{dup.shape[0]} duplicated (first {dup[:5].tolist()})"
                )
            if len(self):
                starts = self.offsets[:-1]
                nonempty = gpb > 0
                rn = np.zeros(len(self), dtype=np.int64)
                re = np.zeros(len(self), dtype=np.int64)
                if self.order.shape[0]:
                    rn[nonempty] = np.add.reduceat(sizes.n_node[self.order], starts[nonempty])
                    re[nonempty] = np.add.reduceat(sizes.n_edge[self.order], starts[nonempty])
                if not (np.array_equal(rn, self.real_nodes) and np.array_equal(re, self.real_edges)):
                    raise ValueError("plan's real_nodes/real_edges disagree with the size table")

    def _validate_distributed(self) -> None:
        if self.rank is None or self.step is None:
            raise ValueError("a distributed plan needs both rank and step arrays")
        r = self.world_size
        nb = len(self)
        if r < 1 or nb % r:
            raise ValueError(f"{nb} batches do not fill whole steps of world size {r}")
        s = nb // r
        if not (np.array_equal(self.step, np.repeat(np.arange(s), r))
                and np.array_equal(self.rank, np.tile(np.arange(r), s))):
            raise ValueError("distributed batches must be stored step-major: step s, ranks 0..R-1")
        for name in ("pad_nodes", "pad_edges", "pad_graphs"):
            grid = getattr(self, name).reshape(s, r)
            bad = (grid != grid[:, :1]).any(axis=1)
            if bad.any():
                st = int(np.flatnonzero(bad)[0])
                raise ValueError(
                    f"step {st} mixes padded shapes across ranks ({name}: {grid[st].tolist()})"
                )

    # ----------------------------------------------------------------- files
    def to_arrays(self) -> dict[str, np.ndarray]:
        """The plan-file arrays (docs/plan-format.md)."""
        out = {
            "order": self.order,
            "offsets": self.offsets,
            "pad_nodes": self.pad_nodes,
            "pad_edges": self.pad_edges,
            "pad_graphs": self.pad_graphs,
            "skipped": self.skipped,
            "real_nodes": self.real_nodes,
            "real_edges": self.real_edges,
        }
        for name in ("real_cost", "rank", "step"):
            v = getattr(self, name)
            if v is not None:
                out[name] = v
        meta = dict(self.meta, format_version=PLAN_FORMAT_VERSION)
        out["meta"] = np.array(json.dumps(meta, sort_keys=True, default=_json_default))
        return out

    def save(self, path: str | os.PathLike) -> Path:
        """Write the plan file atomically (uncompressed ``.npz``, int64 arrays, JSON ``meta``)."""
        return atomic_savez(path, self.to_arrays())

    @classmethod
    def load(cls, path: str | os.PathLike) -> "BatchPlan":
        """Read a plan file; refuses pickled content and files of a newer format version."""
        arrays = read_npz(path, "plan file", _REQUIRED_KEYS)
        meta = json.loads(str(arrays.pop("meta"))) if "meta" in arrays else {}
        version = int(meta.get("format_version", 1))
        if version > PLAN_FORMAT_VERSION:
            raise ValueError(
                f"plan file {str(path)!r} has format version {version}; this graphbatch reads "
                f"up to {PLAN_FORMAT_VERSION}"
            )
        if "real_nodes" not in arrays or "real_edges" not in arrays:
            raise KeyError(
                f"plan file {str(path)!r} lacks real_nodes/real_edges; re-plan with graphbatch"
            )
        kwargs = {k: arrays[k] for k in _OPTIONAL_INT_KEYS if k in arrays}
        return cls(*(arrays[k] for k in _REQUIRED_KEYS), meta=meta, **kwargs)


def _json_default(o):
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"cannot store {type(o).__name__} in plan metadata")
