"""What the step-cost model needs to know of a plan: its step shapes and their counts.

A `PlanProfile` is exact (int64 counts from the `BatchPlan`): the distinct padded shapes of the
steps of epoch 0, how many steps have each shape and where each first appears, the real and
padded totals, and the shapes first met in later epochs (the recompilations a static-shape
compiler performs after epoch 0).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .._plan import BatchPlan

__all__ = ["PlanProfile", "plan_arrays_digest", "profile_plan", "step_shapes"]


def plan_arrays_digest(plan: BatchPlan) -> str:
    """SHA-256 (hex) of a plan's batches: order, offsets, padded shapes, skipped graphs, ranks
    and steps (int64, little-endian). Equal digests: the same batches, shapes and ranks."""
    h = hashlib.sha256(b"graphbatch-tune-plan-v1")
    for name in (
        "order",
        "offsets",
        "pad_nodes",
        "pad_edges",
        "pad_graphs",
        "skipped",
        "rank",
        "step",
    ):
        a = getattr(plan, name)
        h.update(name.encode())
        if a is None:
            h.update(b"none")
            continue
        a = np.ascontiguousarray(a, dtype="<i8")
        h.update(f"[{a.shape[0]}]".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def step_shapes(plan: BatchPlan) -> np.ndarray:
    """Padded ``(n_node, n_edge, n_graph)`` of every training step, in step order, int64
    ``[steps, 3]``: one row per batch for a single-device plan, one per step (rank 0's batch,
    whose shape every rank of the step shares) for a distributed plan."""
    idx = plan.rank_batches(0)
    return np.stack([plan.pad_nodes[idx], plan.pad_edges[idx], plan.pad_graphs[idx]], axis=1)


@dataclass(frozen=True)
class PlanProfile:
    """Distinct step shapes of a plan's epoch 0 with their step counts, and its totals.

    ``shapes`` int64 ``[S, 3]`` sorted rows ``(n_node, n_edge, n_graph)``; ``steps[s]`` steps
    of epoch 0 have shape ``s``, the first of them at step ``first_step[s]``; ``world_size``
    batches run in parallel per step (all of one shape). Totals count every rank's batches.
    ``digest``: `plan_arrays_digest` of the epoch-0 plan.
    ``later_shapes``: shapes not in epoch 0 first met in epochs ``1 .. epochs_planned - 1``
    (``later_new[j]`` of them in epoch ``j + 1``), ``later_where[l] = (epoch, step)`` where
    shape ``l`` first appears.
    """

    shapes: np.ndarray
    steps: np.ndarray
    first_step: np.ndarray
    world_size: int
    real_graphs: int
    real_nodes: int
    real_edges: int
    padded_nodes: int
    padded_edges: int
    padded_graphs: int
    later_shapes: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), np.int64))
    later_where: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    later_new: tuple[int, ...] = ()
    epochs_planned: int = 1
    digest: str = ""

    @property
    def num_steps(self) -> int:
        return int(self.steps.sum())

    @property
    def num_batches(self) -> int:
        return self.num_steps * self.world_size

    @property
    def distinct_shapes(self) -> int:
        return int(self.shapes.shape[0])

    @property
    def node_efficiency(self) -> float:
        return self.real_nodes / self.padded_nodes if self.padded_nodes else 1.0

    @property
    def edge_efficiency(self) -> float:
        return self.real_edges / self.padded_edges if self.padded_edges else 1.0

    @property
    def graphs_per_batch(self) -> float:
        """Mean real graphs per batch."""
        return self.real_graphs / self.num_batches if self.num_batches else 0.0

    def where(self, shape: Sequence[int]) -> tuple[int, int]:
        """``(epoch, step)`` where ``shape`` (a row of `all_shapes`) first appears."""
        t = tuple(int(x) for x in shape)
        for i, r in enumerate(self.shapes.tolist()):
            if tuple(r) == t:
                return 0, int(self.first_step[i])
        for i, r in enumerate(self.later_shapes.tolist()):
            if tuple(r) == t:
                return int(self.later_where[i, 0]), int(self.later_where[i, 1])
        raise KeyError(t)

    def all_shapes(self) -> np.ndarray:
        """Epoch 0's shapes and the later epochs' new ones, ``[S + L, 3]``."""
        return np.concatenate([self.shapes, self.later_shapes]).astype(np.int64)

    def key(self) -> tuple:
        """Identity of the step-shape multiset and totals: equal keys run the same steps."""
        return (
            self.shapes.tobytes(),
            self.steps.tobytes(),
            self.later_shapes.tobytes(),
            self.real_graphs,
            self.world_size,
        )


def _distinct(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    shapes, inverse, counts = np.unique(rows, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    first = np.full(shapes.shape[0], rows.shape[0], np.int64)
    np.minimum.at(first, inverse, np.arange(rows.shape[0], dtype=np.int64))
    return shapes.astype(np.int64), counts.astype(np.int64), first


def profile_plan(plan: BatchPlan, later: list[BatchPlan] | tuple = ()) -> PlanProfile:
    """The `PlanProfile` of ``plan`` (epoch 0); ``later``: the plans of epochs 1, 2, ... of the
    same request, whose shapes not met before count as recompilations."""
    rows = step_shapes(plan)
    shapes, counts, first = _distinct(rows)
    seen = {tuple(r) for r in shapes.tolist()}
    later_rows: list[list[int]] = []
    later_where: list[list[int]] = []
    later_new = []
    for e, p in enumerate(later, start=1):
        new = 0
        rows_e = step_shapes(p)
        uniq, first_e = np.unique(rows_e, axis=0, return_index=True)
        for r, f in sorted(zip(uniq.tolist(), first_e.tolist(), strict=True), key=lambda x: x[1]):
            if tuple(r) not in seen:
                seen.add(tuple(r))
                later_rows.append(r)
                later_where.append([e, int(f)])
                new += 1
        later_new.append(new)
    ws = plan.world_size if plan.rank is not None else 1
    return PlanProfile(
        shapes=shapes,
        steps=counts,
        first_step=first,
        world_size=int(ws),
        real_graphs=plan.num_graphs,
        real_nodes=int(plan.real_nodes.sum(dtype=np.int64)),
        real_edges=int(plan.real_edges.sum(dtype=np.int64)),
        padded_nodes=int(plan.pad_nodes.sum(dtype=np.int64)),
        padded_edges=int(plan.pad_edges.sum(dtype=np.int64)),
        padded_graphs=int(plan.pad_graphs.sum(dtype=np.int64)),
        later_shapes=np.asarray(later_rows, np.int64).reshape(-1, 3),
        later_where=np.asarray(later_where, np.int64).reshape(-1, 2),
        later_new=tuple(later_new),
        epochs_planned=1 + len(later),
        digest=plan_arrays_digest(plan),
    )
