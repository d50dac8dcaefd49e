"""`PlanBatchSampler`: a ``torch.utils.data`` batch sampler that yields the batches of a plan."""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Iterable, Iterator
from types import ModuleType
from typing import Any

import numpy as np
from torch.utils.data import DistributedSampler, Sampler

from .._budget import Budget
from .._errors import InputError, InputTypeError
from .._plan import BatchPlan
from .._schedule import EpochSchedule, Pass
from .._sizes import GraphSizes
from .._validate import as_nonnegative_int, as_positive_int

__all__ = [
    "PlanBatchSampler",
    "PlanGraphSampler",
    "PlannedBatch",
    "PlannedGroup",
    "distributed_world",
]


class PlannedBatch(list):
    """Dataset indices of one batch (a plain ``list`` of ints) with its padded ``shape``.

    ``shape`` is ``(n_node, n_edge, n_graph)``; ``epoch`` and ``batch`` (index in the epoch's
    plan) say where it came from. Pickles compactly, so it travels to DataLoader workers.
    """

    __slots__ = ("shape", "epoch", "batch")

    def __init__(
        self, indices: Iterable[int], shape: tuple[int, int, int], epoch: int = 0, batch: int = 0
    ) -> None:
        super().__init__(indices)
        n_node, n_edge, n_graph = shape
        self.shape = (int(n_node), int(n_edge), int(n_graph))
        self.epoch = int(epoch)
        self.batch = int(batch)

    def __reduce__(
        self,
    ) -> tuple[type[PlannedBatch], tuple[list[int], tuple[int, int, int], int, int]]:
        return (PlannedBatch, (list(self), self.shape, self.epoch, self.batch))

    def __repr__(self) -> str:
        return f"PlannedBatch({list.__repr__(self)}, shape={self.shape})"


class PlannedGroup(list):
    """Consecutive `PlannedBatch` objects of one pass, sent to a DataLoader worker as one task
    (`PlanBatchSampler.grouped`), so the DataLoader's per-task cost is paid once per group."""

    __slots__ = ()

    def __reduce__(self) -> tuple[type[PlannedGroup], tuple[list[PlannedBatch]]]:
        return (PlannedGroup, (list(self),))


def group_sizes(size: int, ramp: int) -> Iterator[int]:
    """The sizes of a pass's groups (`_groups`): ``size`` each, or with ``ramp > 0`` first
    ``ramp`` groups of 1, then ``ramp`` of 2, doubling up to ``size``. A DataLoader hands its
    ``ramp`` workers their first tasks in turn, so each worker's first batch comes after one
    batch's work, not a whole group's: the first batch of a pass waits as long as without
    groups, and each worker's groups grow while the consumer still takes the ones before."""
    k = 1 if ramp > 0 else size
    while True:
        for _ in range(ramp if k < size else 1):
            yield min(k, size)
        k = min(2 * k, size)


def _groups(batches: Iterator[PlannedBatch], size: int, ramp: int = 0) -> Iterator[PlannedGroup]:
    """``batches`` in consecutive groups of the sizes `group_sizes` gives (the last group may
    be shorter), in order."""
    sizes = group_sizes(size, ramp)
    want = next(sizes)
    group = PlannedGroup()
    for b in batches:
        group.append(b)
        if len(group) == want:
            yield group
            group = PlannedGroup()
            want = next(sizes)
    if group:
        yield group


#: The sampler and group size of the pass this thread is starting (`PlanBatchSampler.grouped`).
_GROUPING = threading.local()


def _dist() -> ModuleType | None:
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


def distributed_world(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    """``(num_replicas, rank)``: given values, else ``torch.distributed``'s when initialised,
    else ``(1, 0)``."""
    dist = _dist()
    if num_replicas is None:
        num_replicas = dist.get_world_size() if dist else 1
    if rank is None:
        rank = dist.get_rank() if dist else 0
    num_replicas = as_positive_int(num_replicas, "num_replicas")
    rank = as_nonnegative_int(rank, "rank")
    if rank >= num_replicas:
        raise InputError(f"rank = {rank} must be < num_replicas = {num_replicas}")
    return num_replicas, rank


class PlanBatchSampler(Sampler[list]):
    """Yields, for this rank, the dataset indices of each batch of ``graphbatch.plan(...)``.

    Use as ``DataLoader(dataset, batch_sampler=sampler, collate_fn=...)``. Each yielded item is a
    `PlannedBatch` (a ``list`` of ints carrying its padded ``shape``). The plan of epoch ``e`` is
    ``graphbatch.plan(sizes, strategy, ..., seed=seed, epoch=e, world_size=num_replicas)``.

    The plans, the rank slices, the split, resume state and fingerprints live in one
    `graphbatch._schedule.EpochSchedule` (``schedule``), shared with the JAX loader; this class
    resolves the ranks and yields index lists.

    Epochs (`graphbatch._schedule` gives the exact rules): the epoch and the position in it
    live in the schedule's one `EpochCursor`, shared by ``set_epoch`` here, on `sampler` (the
    per-rank graph sampler Lightning calls) and on `PlanLoader`. ``set_epoch(e)`` takes effect
    at the next iteration; a pass that ends, or is stopped early, is followed by the next epoch.

    Ranks: ``num_replicas``/``rank`` default to ``torch.distributed``'s world size and rank, read
    when each iteration starts (not at construction), so a sampler built before the process
    group (or pickled into spawned processes) takes its share. With ``num_replicas > 1`` every
    rank gets the same number of steps, and the batches of one step share one padded shape. A
    ``UserWarning`` says when an explicit ``num_replicas`` differs from an initialised
    ``torch.distributed`` world size.

    ``len()`` is the number of batches of the epoch (this rank's share) of the pass in progress,
    or of the next pass when none is; after ``load_state_dict`` the next pass yields the
    ``len() - offset`` remaining ones (as Lightning expects of a stateful loader).
    ``extra_padding_nodes`` adds that many padding nodes to every padded shape (see
    `graphbatch.torch.Collation`'s ``spare_padding_node``).

    ``state_dict()`` records the epoch, the batches of it consumed (yielded, for a sampler used
    directly: a ``DataLoader`` with workers runs ahead, so save `PlanLoader.state_dict`, which
    counts batches consumed) and a fingerprint of the plan request; ``load_state_dict`` refuses
    a state whose fingerprint differs, naming the field.

    ``indices`` (a split of a larger dataset): the dataset index of each graph of ``sizes``
    (distinct, non-negative ints; default ``0 .. len(sizes) - 1``). Plans index ``sizes``;
    yielded batches and `rank_graphs` hold ``indices[i]``. The fingerprint then holds a digest
    of ``indices``, so a state saved for another split is refused.

    ``verify_plan=True`` (default): when ``torch.distributed`` is initialised with more than one
    rank and this sampler's ``num_replicas`` is the world size, every pass starts with the plan
    consistency check (`graphbatch.torch.check_plan_consistency`: one all-gather of 192 bytes
    per rank; `PlanMismatchError` on every rank, naming the ranks that disagree, when their size
    tables, plan arguments, plans, epochs or start batches differ). Used directly, the sampler
    checks when the pass's first batch is drawn; under `PlanLoader` when the pass starts. A
    collective: every rank must iterate (a loader iterated on some ranks only needs
    ``num_replicas=1, rank=0`` or ``verify_plan=False``).
    """

    def __init__(
        self,
        sizes: GraphSizes,
        strategy: str,
        *,
        batch_size: int | None = None,
        budget: Budget | tuple[int, int, int] | None = None,
        seed: int = 0,
        shuffle: bool | str = True,
        on_oversize: str = "error",
        num_replicas: int | None = None,
        rank: int | None = None,
        extra_padding_nodes: int = 0,
        indices: Any = None,
        verify_plan: bool = True,
        **options: Any,
    ) -> None:
        self.schedule = EpochSchedule(
            sizes,
            strategy,
            batch_size=batch_size,
            budget=budget,
            seed=seed,
            shuffle=shuffle,
            on_oversize=on_oversize,
            indices=indices,
            extra_padding_nodes=extra_padding_nodes,
            **options,
        )
        self._world_arg = (
            None if num_replicas is None else as_positive_int(num_replicas, "num_replicas"),
            None if rank is None else as_nonnegative_int(rank, "rank"),
        )
        if not isinstance(verify_plan, bool):
            raise InputTypeError(f"verify_plan must be True or False, got {verify_plan!r}")
        self.verify_plan = verify_plan
        self.counted_by_loader = False  # a PlanLoader reports consumption instead of yields
        self._latest: Pass | None = None  # the latest started pass
        self._world_seen: tuple[int, int] | None = None  # world of the latest pass
        self._graph_sampler = PlanGraphSampler(self)
        self._rank_batches(0)  # plan epoch 0 now: bad arguments fail here, not in a worker

    # ------------------------------------------------------------- the request (read-only)
    sizes = property(lambda self: self.schedule.sizes, doc="Size table of the planned graphs.")
    indices = property(lambda self: self.schedule.indices, doc="The split (None: every graph).")
    strategy = property(lambda self: self.schedule.strategy)
    seed = property(lambda self: self.schedule.seed)
    shuffle = property(lambda self: self.schedule.shuffle)
    extra_padding_nodes = property(lambda self: self.schedule.extra_padding_nodes)
    cursor = property(lambda self: self.schedule.cursor, doc="The schedule's `EpochCursor`.")

    # ------------------------------------------------------------- world
    def world(self) -> tuple[int, int]:
        """``(num_replicas, rank)`` as of now (explicit values, else ``torch.distributed``'s)."""
        num_replicas, rank = self._world_arg
        world = distributed_world(num_replicas, rank)
        dist = _dist()
        if dist is not None and num_replicas is not None and dist.get_world_size() != world[0]:
            warnings.warn(
                f"PlanBatchSampler: num_replicas = {world[0]} but torch.distributed's world size "
                f"is {dist.get_world_size()}; ranks will not cover the data set exactly once "
                "(leave num_replicas/rank unset to follow torch.distributed)",
                stacklevel=3,
            )
        return world

    @property
    def num_replicas(self) -> int:
        return (self._world_seen or self.world())[0]

    @property
    def rank(self) -> int:
        return (self._world_seen or self.world())[1]

    # ------------------------------------------------------------- plans
    def plan_for_epoch(self, epoch: int | None = None) -> BatchPlan:
        """The whole plan (all ranks) of ``epoch`` (default: the current one)."""
        epoch = self.epoch if epoch is None else as_nonnegative_int(epoch, "epoch")
        return self.schedule.plan(epoch, self.num_replicas)

    @property
    def plan(self) -> BatchPlan:
        """The current epoch's plan."""
        return self.plan_for_epoch()

    def _rank_batches(self, epoch: int, world: tuple[int, int] | None = None) -> np.ndarray:
        """This rank's batch ids of ``epoch`` (its column of the schedule's step table)."""
        num_replicas, rank = world or self._world_seen or self.world()
        return self.schedule.steps(epoch, num_replicas)[:, rank]

    def rank_graphs(self, epoch: int | None = None) -> np.ndarray:
        """Dataset indices of this rank's graphs in ``epoch`` (default: current), batch order."""
        epoch = self.epoch if epoch is None else as_nonnegative_int(epoch, "epoch")
        return self.schedule.rank_graphs(epoch, self.num_replicas, self.rank)

    # ------------------------------------------------------------- epochs
    @property
    def epoch(self) -> int:
        """The epoch of the pass in progress, or of the next pass when none is."""
        return self.cursor.epoch

    def set_epoch(self, epoch: int) -> None:
        """Run ``epoch`` (from its first batch) at the next iteration."""
        self.cursor.set_epoch(epoch)

    @property
    def sampler(self) -> PlanGraphSampler:
        """This rank's graphs of the current epoch as a ``DistributedSampler`` (see
        `PlanGraphSampler`); ``set_epoch`` on it moves this sampler's epoch."""
        return self._graph_sampler

    # ------------------------------------------------------------ protocol
    def __len__(self) -> int:
        return int(self._rank_batches(self.cursor.epoch).shape[0])

    def begin_pass(self) -> Pass:
        """Start a pass: resolve the world, move the cursor. (Used by ``__iter__``.)"""
        self._world_seen = self.world()
        self._latest = self.cursor.begin()
        return self._latest

    @property
    def latest_pass(self) -> Pass | None:
        """The latest started pass (``None``: none yet)."""
        return self._latest

    def verifies(self) -> bool:
        """Whether passes start with the plan consistency check: ``verify_plan`` and an
        initialised ``torch.distributed`` of more than one rank whose world size is this
        sampler's ``num_replicas`` (as of the latest pass)."""
        if not self.verify_plan:
            return False
        dist = _dist()
        if dist is None:
            return False
        world = dist.get_world_size()
        return world > 1 and self.num_replicas == world

    def verify_pass(self, this: Pass) -> None:
        """The plan consistency check of pass ``this`` across ``torch.distributed``'s ranks (a
        collective; see the class docstring), when `verifies`."""
        if not self.verifies():
            return
        from ._consistency import torch_gather

        self.schedule.verify(
            this, world_size=self.num_replicas, loader_rank=self.rank, gather=torch_gather()
        )

    def __iter__(self) -> Iterator[PlannedBatch]:
        this = self.begin_pass()
        self._check_start(this)
        batches = self._batches(this, not self.counted_by_loader)
        size, ramp = self._group_size()
        if size == 1:
            return batches
        return _groups(batches, size, ramp)  # type: ignore[return-value]

    @contextlib.contextmanager
    def grouped(self, size: int, ramp: int = 0) -> Iterator[None]:
        """Within the block, a pass of this sampler that this thread starts (under a
        `PlanLoader`, whose consumer counts batches) yields `PlannedGroup` objects of ``size``
        consecutive batches (the last one shorter) instead of batches, in the same order: one
        DataLoader task each. ``ramp`` (the DataLoader's workers; 0: none): the pass's first
        groups are smaller, 1 batch for each worker, then 2, doubling up to ``size``
        (`group_sizes`). Only for a collater that takes groups (`StoreCollater`)."""
        size = as_positive_int(size, "group size")
        ramp = as_nonnegative_int(ramp, "group ramp")
        previous = getattr(_GROUPING, "state", None)
        _GROUPING.state = (self, size, ramp)
        try:
            yield
        finally:
            _GROUPING.state = previous

    def _group_size(self) -> tuple[int, int]:
        """The group size and ramp of the pass this thread starts (``(1, 0)``: no groups)."""
        state = getattr(_GROUPING, "state", None)
        if state is None or state[0] is not self or not self.counted_by_loader:
            return 1, 0
        return int(state[1]), int(state[2])

    def _check_start(self, this: Pass) -> None:
        total = int(self._rank_batches(this.epoch).shape[0])
        if this.start > total:
            raise InputError(
                f"resume offset {this.start} is past the {total} batches of epoch {this.epoch}"
            )

    def _batches(self, this: Pass, count: bool) -> Iterator[PlannedBatch]:
        if count:  # used directly: this runs when the first batch is drawn
            if self.cursor.superseded(this.id):
                # set_epoch / load_state_dict after iter() and before the first batch: they
                # take effect (Lightning creates its iterator before it calls set_epoch)
                this = self.begin_pass()
                self._check_start(this)
            self.verify_pass(this)
        schedule = self.schedule
        p = schedule.plan(this.epoch, self.num_replicas)
        for b in self._rank_batches(this.epoch)[this.start :].tolist():
            if count:
                self.cursor.consumed(this.id)
            graphs = schedule.graphs(p, b)
            yield PlannedBatch(graphs.tolist(), schedule.padded_shape(p, b), this.epoch, b)
        if count:
            self.cursor.finished(this.id)

    # --------------------------------------------------------------- state
    def fingerprint(self) -> dict[str, Any]:
        """The plan request (`EpochSchedule.fingerprint`) for this sampler's number of
        replicas."""
        return self.schedule.fingerprint(self.num_replicas)

    def state_dict(self) -> dict[str, Any]:
        """``epoch`` and ``offset`` (its batches consumed), the ``fingerprint`` of the plan request
        and, for reading, its ``seed``, ``strategy``, ``num_replicas`` and ``num_graphs``."""
        return self.schedule.state_dict(self.num_replicas)

    def load_state_dict(
        self, state: dict[str, Any], *, allow_missing_fingerprint: bool = False
    ) -> None:
        """Continue from ``state``: the next iteration starts at batch ``offset`` of ``epoch``
        (an offset at the end of its epoch: the next epoch's first batch).

        Refuses (``ValueError`` naming the field: `graphbatch.InputError`) anything but a
        ``state_dict()``, and a state saved under another plan request: strategy, options,
        seed, shuffle, size table, number of replicas. A state without ``fingerprint`` (written
        before fingerprints) is refused unless ``allow_missing_fingerprint=True``; then only
        the ``seed``, ``strategy``, ``num_replicas`` and ``num_graphs`` it holds are compared.
        A ``set_epoch`` or ``load_state_dict`` after ``iter()`` and before the first batch
        takes effect in that iterator.
        """
        self.schedule.load_state_dict(
            state,
            world_size=self.num_replicas,
            owner="PlanBatchSampler",
            allow_missing_fingerprint=allow_missing_fingerprint,
        )

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_world_seen"] = None  # the world is read again where it is unpickled
        return state


class PlanGraphSampler(DistributedSampler):
    """The graphs of a `PlanBatchSampler`'s current epoch on this rank, as a ``Sampler`` of
    dataset indices (plan order, padding excluded).

    It is what ``PlanLoader.sampler`` and ``PlanBatchSampler.sampler`` return. It subclasses
    ``DistributedSampler`` because it *is* one -- each rank draws its own share of every epoch --
    which tells frameworks that inject a distributed sampler (Lightning's
    ``use_distributed_sampler``) that the loader distributes already. ``set_epoch`` moves the
    batch sampler's one epoch cursor. Attributes ``num_replicas``, ``rank``, ``epoch``,
    ``shuffle`` and ``seed`` read the batch sampler, and so does every other public attribute
    (``plan_for_epoch``, ``state_dict``, ...).
    """

    def __init__(self, batch_sampler: PlanBatchSampler) -> None:
        # DistributedSampler.__init__ needs a dataset and a process group; none applies here
        self.batch_sampler = batch_sampler
        self.drop_last = False

    num_replicas = property(lambda self: self.batch_sampler.num_replicas)
    rank = property(lambda self: self.batch_sampler.rank)
    epoch = property(lambda self: self.batch_sampler.epoch)
    shuffle = property(lambda self: self.batch_sampler.shuffle)
    seed = property(lambda self: self.batch_sampler.seed)

    def set_epoch(self, epoch: int) -> None:
        self.batch_sampler.set_epoch(epoch)

    def __getattr__(self, name: str) -> Any:
        # the rest of the batch sampler's interface (plan_for_epoch, state_dict, ...), so code
        # written when `PlanLoader.sampler` was the batch sampler keeps working
        if name.startswith("_") or name == "batch_sampler":
            raise AttributeError(name)
        return getattr(self.batch_sampler, name)

    def __iter__(self) -> Iterator[int]:
        return iter(self.batch_sampler.rank_graphs().tolist())

    def __len__(self) -> int:
        return int(self.batch_sampler.rank_graphs().shape[0])
