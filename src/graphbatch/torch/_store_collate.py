"""The store batch path under a DataLoader: `StoreIndices` (the store as the DataLoader sees
it: index lists pass through) and `StoreCollater` (its ``collate_fn``: a `StoreBatcher` fed by
planned batches or groups of them), which starts each pass of a `PlanLoader`'s workers with
the slot ring they write batches into (`start_pass`) and, for `graphbatch.torch.DeviceFeed`,
passes of grouped tasks whose messages the consumer takes itself (`raw_pass`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from torch._utils import ExceptionWrapper
from torch.utils.data import Dataset, get_worker_info

from .._errors import InputTypeError
from ._sampler import PlanBatchSampler, PlannedBatch, PlannedGroup
from ._schema import Schema
from ._slots import HEADER_BYTES, START_LOCK, SlotReceiver, SlotRing
from ._store_batch import StoreBatcher

if TYPE_CHECKING:
    from ..datasets import GraphStore
    from ._preset import StoreView

__all__ = ["PassLoader", "RawPass", "StoreCollater", "StoreIndices"]


class PassLoader(Protocol):
    """What `StoreCollater.start_pass` reads of the loader starting a pass (a
    `graphbatch.torch.PlanLoader`; named by its attributes so that this module does not import
    the loader module that imports it)."""

    plan_sampler: PlanBatchSampler
    num_workers: int
    prefetch_factor: int | None
    persistent_workers: bool


class StoreIndices(Dataset):
    """A store seen by the DataLoader on the batch path: fetching a batch returns its index
    list unchanged; `StoreCollater` reads the graphs, knowing the padded shape."""

    def __init__(self, store: GraphStore) -> None:
        self.store = store

    def __len__(self) -> int:
        return len(self.store)

    def __getitem__(self, i: int) -> int:
        return i

    def __getitems__(self, batch: list[int]) -> list[int]:
        return batch


class StoreCollater:
    """``collate_fn`` of the store batch path: a `StoreBatcher` fed by `PlannedBatch` objects.

    With DataLoader workers, `PlanLoader` starts each set of workers through `start_pass`: the
    workers write batches into a `graphbatch.torch._slots.SlotRing` made for them and the main
    process copies each one out (`SlotReceiver`), so a batch costs the main one ``memcpy``
    instead of torch's per-storage IPC. Used directly as a DataLoader's ``collate_fn``
    (without `PlanLoader`), workers return batches in one shared block each."""

    #: Spare slot capacity over the largest batch buffer known when a ring is made (later
    #: epochs of a static strategy may have somewhat larger shapes; bigger batches still work,
    #: through a shared block of their own).
    HEADROOM = 1.25
    #: Shared memory (bytes) that groups may grow a ring to: a pass asking for groups gets
    #: smaller ones where its ring would pass this (down to one batch per task, whose ring may
    #: be bigger, as without groups). 64 MiB: a container's default ``/dev/shm``.
    GROUP_RING_BYTES = 64 << 20

    def __init__(
        self,
        store: GraphStore,
        schema: Schema | None = None,
        *,
        cutoff: float | None = None,
        position_key: str = "pos",
        as_dict: bool = False,
        view: StoreView | None = None,
    ) -> None:
        self.batcher = StoreBatcher(
            store, schema, cutoff=cutoff, position_key=position_key, as_dict=as_dict, view=view
        )
        self._ring: SlotRing | None = None  # set only while `start_pass` starts workers

    @property
    def schema(self) -> Schema:
        return self.batcher.schema

    def __call__(self, item: tuple[PlannedBatch | PlannedGroup, Any]) -> Any:
        batch, _ = item
        if isinstance(batch, PlannedGroup):
            return self._group(batch)
        if not isinstance(batch, PlannedBatch):
            raise InputTypeError("StoreCollater needs batches from a PlanBatchSampler")
        return self.batcher(np.asarray(batch, dtype=np.int64), batch.shape, self._ring)

    def _group(self, group: PlannedGroup) -> tuple:
        """The batches (or `SlotBatch` messages) of a group, in order (a DataLoader worker's
        task of a grouped pass, `raw_pass`). A batch that raises ends the group with a
        ``torch`` ``ExceptionWrapper`` of the error, after the batches before it, so that the
        consumer raises it where it occurred."""
        out: list[Any] = []
        for batch in group:
            if not isinstance(batch, PlannedBatch):
                raise InputTypeError("StoreCollater needs batches from a PlanBatchSampler")
            try:
                out.append(self.batcher(np.asarray(batch, dtype=np.int64), batch.shape, self._ring))
            except Exception:
                info = get_worker_info()
                where = f"in DataLoader worker process {info.id if info else 0}"
                out.append(ExceptionWrapper(where=where))
                break
        return tuple(out)

    def slot_bytes(self, loader: PassLoader) -> int:
        """Slot capacity for ``loader``'s workers: the largest batch buffer of its current
        epoch's plan or of its budget (plus the spare padding nodes), times `HEADROOM`."""
        sampler = loader.plan_sampler
        plan = sampler.plan_for_epoch()
        extra = sampler.extra_padding_nodes
        shapes = [(int(n) + extra, int(e), int(g)) for n, e, g in plan.shapes()]
        budget = plan.meta.get("budget")
        if budget is not None:
            shapes.append((int(budget[0]) + extra, int(budget[1]), int(budget[2])))
        batcher = self.batcher
        if batcher.view is not None:  # the view's dict travels, packed
            most = max((batcher.packed_bytes(s) for s in shapes), default=0)
        else:
            most = max((batcher.buffer_bytes(s) for s in shapes), default=0)
        return int(most * self.HEADROOM)

    def start_pass(
        self, loader: PassLoader, start: Callable[[], Any]
    ) -> tuple[Any, SlotReceiver | None]:
        """Start a pass of ``loader`` (a `PlanLoader` over this collater) with ``start()`` (the
        ``DataLoader.__iter__``): ``(iterator, receive)``, where ``receive(batch)`` turns what
        the iterator yields into the batch (``None`` without workers). New workers get a new
        ring (this collater carries it while they start: inherited on fork, pickled for spawn);
        persistent workers keep theirs, found on the reused iterator."""
        it, receiver = self._start_pass(loader, start)
        box = getattr(_RAW, "box", None)
        if box is not None and box.collater is self:
            box.receiver = receiver
            if not loader.num_workers:
                box.group = 1
            return it, None
        return it, receiver

    def _start_pass(
        self, loader: PassLoader, start: Callable[[], Any]
    ) -> tuple[Any, SlotReceiver | None]:
        workers = int(loader.num_workers or 0)
        if workers == 0:
            return start(), None
        assert loader.prefetch_factor is not None  # DataLoader sets it with workers
        ahead = int(loader.prefetch_factor) + 1  # tasks of one worker not yet consumed
        box = getattr(_RAW, "box", None)
        if box is None or box.collater is not self:
            box = RawPass(self)  # a plain pass: one batch per task, no extra slots
        with START_LOCK:
            reused = getattr(loader, "_iterator", None) if loader.persistent_workers else None
            receiver = getattr(reused, "_graphbatch_receiver", None)
            if receiver is not None:
                # a ring made for another pass: groups only as large as its slots allow
                box.group = min(box.group, _group_fits(receiver.ring.per_worker, ahead, box))
                with loader.plan_sampler.grouped(box.group, ramp=workers):
                    it = start()
                if it is not reused:  # pragma: no cover - DataLoader made new workers anyway
                    receiver = None
                return it, receiver
            capacity = self.slot_bytes(loader)
            most = self.GROUP_RING_BYTES // (workers * (capacity + HEADER_BYTES))
            box.group = min(box.group, _group_fits(most, ahead, box))
            per_worker = ahead * box.group + 1 + box.extra_slots
            ring = SlotRing(workers, per_worker, capacity)
            receiver = SlotReceiver(ring, self.batcher.from_buffer, self.batcher)
            self._ring = ring
            try:
                with loader.plan_sampler.grouped(box.group, ramp=workers):
                    it = start()
            finally:
                self._ring = None
            with contextlib.suppress(AttributeError):  # an iterator with __slots__
                it._graphbatch_receiver = receiver  # kept as long as its workers live
        return it, receiver

    @contextlib.contextmanager
    def raw_pass(self, extra_slots: int = 0, group: int = 1) -> Iterator[RawPass]:
        """Within the block, a pass this thread starts (`start_pass`) yields the workers'
        messages as they come (`SlotBatch` objects, or batches that did not fit a slot)
        instead of receiving them: the returned `RawPass` holds the ring's `SlotReceiver`
        (``None`` without workers). For a consumer that takes batches from the slots itself
        (`graphbatch.torch.DeviceFeed`), which may keep ``extra_slots`` more batches per worker
        leased than the ring's minimum (a new ring gets that many more slots per worker).

        ``group``: with workers, each DataLoader task is a `PlannedGroup` of up to ``group``
        consecutive batches and yields a tuple of their messages, in order (the last one may
        be a ``torch`` ``ExceptionWrapper``: `_group`); ``RawPass.group`` says the size the
        pass got (smaller when persistent workers keep a ring made for smaller groups; 1
        without workers, when messages come one by one). The consumer must take a group's
        messages in order and lease each slot before it takes the next group (the slot
        invariant, `graphbatch.torch._slots`)."""
        box = RawPass(self, int(extra_slots), max(1, int(group)))
        previous = getattr(_RAW, "box", None)
        _RAW.box = box
        try:
            yield box
        finally:
            _RAW.box = previous


#: The `RawPass` of the pass this thread is starting, if any (`StoreCollater.raw_pass`).
_RAW = threading.local()


class RawPass:
    """What `StoreCollater.raw_pass` yields: the ``collater``, the slots per worker asked for
    beyond the ring's minimum, the batches per task asked for (``group``: the size the pass
    got once it started) and, once a pass started, its ring's ``receiver`` (``None`` without
    workers)."""

    def __init__(self, collater: StoreCollater, extra_slots: int = 0, group: int = 1) -> None:
        self.collater = collater
        self.extra_slots = extra_slots
        self.group = group
        self.receiver: SlotReceiver | None = None


def _group_fits(per_worker: int, ahead: int, box: RawPass) -> int:
    """The largest group a ring of ``per_worker`` slots per worker takes when each worker has
    up to ``ahead`` tasks not yet consumed: a worker writes its task ``c`` while its task ``c -
    ahead + 1`` may still wait, unleased, in the consumer, so ``ahead * group`` slots must be
    distinct (plus one spare and the consumer's extra slots: `_start_pass`)."""
    return max(1, (per_worker - 1 - box.extra_slots) // ahead)
