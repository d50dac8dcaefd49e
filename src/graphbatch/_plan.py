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
        )

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
