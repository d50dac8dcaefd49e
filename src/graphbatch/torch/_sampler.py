"""`PlanBatchSampler`: a ``torch.utils.data`` batch sampler that yields the batches of a plan."""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
from torch.utils.data import Sampler

from .._api import plan as make_plan
from .._budget import Budget
from .._plan import BatchPlan
from .._sizes import GraphSizes
from .._validate import as_nonnegative_int, as_positive_int

__all__ = ["PlanBatchSampler", "PlannedBatch", "distributed_world"]


class PlannedBatch(list):
    """Dataset indices of one batch (a plain ``list`` of ints) with its padded ``shape``.

    ``shape`` is ``(n_node, n_edge, n_graph)``; ``epoch`` and ``batch`` (index in the epoch's
    plan) say where it came from. Pickles compactly, so it travels to DataLoader workers.
    """

    __slots__ = ("shape", "epoch", "batch")

    def __init__(self, indices, shape: tuple[int, int, int], epoch: int = 0, batch: int = 0):
        super().__init__(indices)
        self.shape = tuple(int(s) for s in shape)
        self.epoch = int(epoch)
        self.batch = int(batch)

    def __reduce__(self):
        return (PlannedBatch, (list(self), self.shape, self.epoch, self.batch))

    def __repr__(self) -> str:
        return f"PlannedBatch({list.__repr__(self)}, shape={self.shape})"


def distributed_world(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    """``(num_replicas, rank)``: given values, else ``torch.distributed``'s when initialised,
    else ``(1, 0)``."""
    import torch.distributed as dist

    initialised = dist.is_available() and dist.is_initialized()
    if num_replicas is None:
        num_replicas = dist.get_world_size() if initialised else 1
    if rank is None:
        rank = dist.get_rank() if initialised else 0
    num_replicas = as_positive_int(num_replicas, "num_replicas")
    rank = as_nonnegative_int(rank, "rank")
    if rank >= num_replicas:
        raise ValueError(f"rank = {rank} must be < num_replicas = {num_replicas}")
    return num_replicas, rank


class PlanBatchSampler(Sampler[list]):
    """Yields, for this rank, the dataset indices of each batch of ``graphbatch.plan(...)``.

    Use as ``DataLoader(dataset, batch_sampler=sampler, collate_fn=...)``. Each yielded item is a
    `PlannedBatch` (a ``list`` of ints carrying its padded ``shape``). The plan of epoch ``e`` is
    ``graphbatch.plan(sizes, strategy, ..., seed=seed, epoch=e, world_size=num_replicas)``:
    ``set_epoch(e)`` re-plans, as with ``DistributedSampler`` (the epoch does not advance by
    itself). ``len()`` is exact: the number of batches the next iteration yields. With
    ``num_replicas > 1`` (default: ``torch.distributed``'s world size when initialised) every rank
    gets the same number of steps, and the batches of one step share one padded shape.

    ``state_dict()`` records the epoch and how many batches of it this sampler has yielded;
    after ``load_state_dict`` the next iteration continues with the following batch. (A
    ``DataLoader`` with workers prefetches: save the count of batches *consumed* instead, as
    `graphbatch.torch.PlanLoader.state_dict` does.)
    """

    def __init__(
        self,
        sizes: GraphSizes,
        strategy: str,
        *,
        batch_size: int | None = None,
        budget: Budget | tuple[int, int, int] | None = None,
        seed: int = 0,
        shuffle: bool = True,
        on_oversize: str = "error",
        num_replicas: int | None = None,
        rank: int | None = None,
        **options: Any,
    ) -> None:
        if not isinstance(sizes, GraphSizes):
            raise TypeError(f"sizes must be a GraphSizes, got {type(sizes).__name__}")
        self.sizes = sizes
        self.strategy = strategy
        self.num_replicas, self.rank = distributed_world(num_replicas, rank)
        self._kwargs = dict(
            batch_size=batch_size,
            budget=budget,
            seed=as_nonnegative_int(seed, "seed"),
            shuffle=bool(shuffle),
            on_oversize=on_oversize,
            **options,
        )
        self.seed = self._kwargs["seed"]
        self.epoch = 0
        self._resume = 0  # batches of the current epoch to skip on the next iteration
        self._position = 0  # batches of the current epoch yielded so far
        self._cache: tuple[int, BatchPlan, np.ndarray] | None = None
        self._rank_batches(0)  # plan epoch 0 now: bad arguments fail here, not in a worker

    # ------------------------------------------------------------------ plans
    def plan_for_epoch(self, epoch: int | None = None) -> BatchPlan:
        """The whole plan (all ranks) of ``epoch`` (default: the current one)."""
        epoch = self.epoch if epoch is None else as_nonnegative_int(epoch, "epoch")
        return self._planned(epoch)[0]

    @property
    def plan(self) -> BatchPlan:
        """The current epoch's plan."""
        return self.plan_for_epoch()

    def _planned(self, epoch: int) -> tuple[BatchPlan, np.ndarray]:
        if self._cache is None or self._cache[0] != epoch:
            kwargs = dict(self._kwargs)
            if self.num_replicas > 1:
                kwargs["world_size"] = self.num_replicas
            p = make_plan(self.sizes, self.strategy, epoch=epoch, **kwargs)
            self._cache = (epoch, p, self._select(p))
        return self._cache[1], self._cache[2]

    def _select(self, p: BatchPlan) -> np.ndarray:
        nb = len(p)
        if self.num_replicas == 1:
            if p.rank is not None and (p.rank != 0).any():
                raise ValueError("a single-replica sampler got a plan for several ranks")
            return np.arange(nb, dtype=np.int64)
        if p.rank is None or p.step is None:
            raise ValueError(
                f"plan for world_size={self.num_replicas} lacks per-batch rank/step arrays"
            )
        counts = np.bincount(p.rank, minlength=self.num_replicas)
        if counts.shape[0] != self.num_replicas or (counts != counts[0]).any():
            raise ValueError(
                f"distributed plan gives ranks unequal step counts {counts.tolist()}; "
                "DDP would hang"
            )
        return p.rank_batches(self.rank)

    def _rank_batches(self, epoch: int) -> np.ndarray:
        return self._planned(epoch)[1]

    # --------------------------------------------------------------- protocol
    def set_epoch(self, epoch: int) -> None:
        """Use the plan of ``epoch`` from the next iteration on (and forget any resume point)."""
        self.epoch = as_nonnegative_int(epoch, "epoch")
        self._resume = 0
        self._position = 0

    def __len__(self) -> int:
        return int(self._rank_batches(self.epoch).shape[0]) - self._resume

    def __iter__(self) -> Iterator[PlannedBatch]:
        epoch = self.epoch
        p, mine = self._planned(epoch)
        start, self._resume = self._resume, 0
        self._position = start
        order, offsets = p.order, p.offsets
        pn, pe, pg = p.pad_nodes, p.pad_edges, p.pad_graphs
        for b in mine[start:].tolist():
            self._position += 1
            yield PlannedBatch(
                order[offsets[b] : offsets[b + 1]].tolist(),
                (pn[b], pe[b], pg[b]),
                epoch,
                b,
            )

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """``epoch`` and ``offset`` (batches of it yielded so far), plus checks for resuming."""
        return {
            "epoch": self.epoch,
            "offset": self._position,
            "seed": self.seed,
            "strategy": self.strategy,
            "num_replicas": self.num_replicas,
            "num_graphs": len(self.sizes),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``: the next iteration starts at batch ``offset`` of ``epoch``."""
        for key in ("seed", "strategy", "num_replicas", "num_graphs"):
            mine = self.state_dict()[key]
            if key in state and state[key] != mine:
                raise ValueError(
                    f"state was saved with {key} = {state[key]!r}, this sampler has {mine!r}"
                )
        epoch = as_nonnegative_int(state["epoch"], "epoch")
        offset = as_nonnegative_int(state.get("offset", 0), "offset")
        total = int(self._rank_batches(epoch).shape[0])
        if offset > total:
            raise ValueError(f"offset {offset} is past the {total} batches of epoch {epoch}")
        self.epoch = epoch
        self._resume = offset
        self._position = offset
