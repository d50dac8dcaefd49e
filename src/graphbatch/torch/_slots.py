"""Worker hand-off through a ring of shared-memory slots: a DataLoader worker writes a padded
batch into a slot made before the workers started and sends back only a small `SlotBatch`
message; the main process copies the slot out into a fresh buffer (one ``memcpy``).

Why: a tensor (or storage) a worker returns crosses to the main process through torch's
per-storage IPC (an fd passed over a socket per storage with the default ``file_descriptor``
strategy, the shm manager with ``file_system``), and the main pays ~1-2 ms per batch for it
-- more than reading the batch itself -- so workers could not beat one process. Here the main
pays for unpickling a few integers and copying the batch's bytes.

Invariant (no slot is rewritten before the main has copied it out), from
``torch.utils.data.dataloader._MultiProcessingDataLoaderIter`` (map-style dataset, ``W``
workers, ``P = prefetch_factor``):

* Each worker takes its tasks from its own index queue, in order, and the ring gives worker
  ``w`` its own ``P + 2`` slots, used in turn: the ``c``-th batch it writes goes to slot
  ``w * (P + 2) + c % (P + 2)``.
* A task goes to worker ``w`` only while fewer than ``P`` of ``w``'s earlier tasks are sent and
  not yet handed to the main (``_process_data``): with ``in_order=False`` by
  ``_workers_num_tasks[w] < P * W // W``; with ``in_order=True`` because tasks go round robin
  (every worker of a map-style dataset stays active) and ``_send_idx - _rcvd_idx <= P * W``
  (``_reset`` primes ``P * W`` tasks, each ``_process_data`` sends at most one more after one
  was taken). So when ``w`` starts its ``c``-th batch, its batches ``<= c - P`` have reached the
  main, and only batch ``c - P`` may still be being copied out (``_process_data`` sends the next
  task just before it returns the batch; the copy follows, before the next ``__next__``).
  Batches ``c - P .. c`` need ``P + 1`` distinct slots; ``P + 2`` leaves one spare (a ring
  made for a consumer that leases slots, `graphbatch.torch.DeviceFeed`, gets a few more per
  worker, so that the batches it keeps leased rarely make a worker skip a slot).
* The main copies a batch out as soon as it receives it: `PlanLoader` does it before the batch
  is yielded, or DataLoader's pin-memory thread does it (``SlotBatch.pin_memory``) before it
  queues the batch for the main thread, which takes it only after that.
* Groups (a pass started in `StoreCollater.raw_pass` with ``group = k``): a task is ``k``
  consecutive batches, written into the worker's next ``k`` slots and sent as one tuple of
  messages; the consumer leases each batch's slot as it issues that batch, and issues every
  batch of a group before it asks for the next group. The argument above, per task: when ``w``
  starts its task ``c``, its tasks ``<= c - P - 1`` are all issued (leased or done) and task
  ``c - P`` may wait, unleased, in the consumer; tasks ``c - P .. c`` need ``(P + 1) * k``
  distinct slots, so a ring for groups has ``(P + 1) * k + 1`` per worker (plus the
  consumer's extra slots); a ring made for smaller groups gets smaller groups.
* Persistent workers: a new pass (``_reset``) first drains every worker with
  ``_ResumeIteration``, so no batch of the old pass is written or unread afterwards; a fresh
  (non-persistent) set of workers gets a new ring.

Leases (`graphbatch.torch.DeviceFeed`): a consumer that keeps using a slot after it received
its batch -- a batch handed out as views of the slot, or an asynchronous copy from it to a
device still in flight -- leases it (`SlotRing.lease`, its ticket in the header's second word)
and releases it when done (`SlotReceiver.poll`). A worker whose turn comes to a leased slot
leaves it alone and sends that batch in a shared block of its own (as one too big for a slot),
so a leased slot is never rewritten, whatever the consumer's pace. The lease is written when the
batch is received, before the main asks for another, hence before any task that could make a
worker rewrite the slot is sent.

Checked, not trusted: a worker writes the batch's ticket into the slot's header before writing
the batch, and the main reads it before and after copying: a slot rewritten during the copy (a
broken invariant, e.g. another DataLoader implementation) raises ``RuntimeError`` instead of
yielding a mixed batch (the header is written first and read last; stores and loads keep their
order on x86, so the check is exact there and best effort elsewhere).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .._errors import InputError

__all__ = ["SlotBatch", "SlotRing", "SlotReceiver", "HEADER_BYTES"]

#: Bytes before each slot's batch: its ticket and its lease (int64 each), padded to a cache line
#: so the batch starts 64-byte aligned like a buffer of `graphbatch._padbatch.pad_batch`.
HEADER_BYTES = 64
_ALIGN = 64

#: Serialises "hand a ring to the collate_fn, start the workers, take it back" across threads.
START_LOCK = threading.Lock()

#: Main process: the receiver of each live ring by token (for ``SlotBatch.pin_memory``).
_RECEIVERS: weakref.WeakValueDictionary[int, SlotReceiver] = weakref.WeakValueDictionary()


class SlotBatch:
    """What a worker returns for a batch written into a ring slot: ring ``token``, ``slot``,
    ``ticket`` (the number in the slot's header), ``nbytes`` of the batch buffer, padded
    ``shape`` and ``real_graphs``; ``layout``: ``None`` for the batch kernel's buffer layout,
    else a packed dict's entries (`graphbatch.torch._packed.pack_dict`). Pickles as a
    tuple of ints (and the layout)."""

    __slots__ = ("token", "slot", "ticket", "nbytes", "shape", "real_graphs", "layout")

    def __init__(
        self,
        token: int,
        slot: int,
        ticket: int,
        nbytes: int,
        shape: tuple[int, int, int],
        real_graphs: int,
        layout: tuple | None = None,
    ) -> None:
        self.token = token
        self.slot = slot
        self.ticket = ticket
        self.nbytes = nbytes
        self.shape = shape
        self.real_graphs = real_graphs
        self.layout = layout

    def __reduce__(self) -> tuple[type[SlotBatch], tuple]:
        args = (self.token, self.slot, self.ticket, self.nbytes, self.shape, self.real_graphs)
        return (SlotBatch, args if self.layout is None else (*args, self.layout))

    def pin_memory(self, device: torch.device | str | None = None) -> Any:
        """The batch copied out of its slot straight into pinned memory (called by DataLoader's
        pin-memory thread in the main process; ``device`` is ignored, as by ``Tensor``)."""
        receiver = _RECEIVERS.get(self.token)
        if receiver is None:
            raise RuntimeError(
                f"no live slot ring with token {self.token} in this process (the "
                "loader's pass that made it has ended)"
            )
        return receiver.receive(self, pin=True)

    def __repr__(self) -> str:
        return (
            f"SlotBatch(slot={self.slot}, ticket={self.ticket}, nbytes={self.nbytes}, "
            f"shape={self.shape})"
        )


class SlotRing:
    """``workers * per_worker`` slots of ``capacity`` bytes (plus a header each) in one shared
    torch storage, made in the main process before the workers start (inherited on fork,
    shared through torch's reductions when pickled for spawn/forkserver workers).

    Worker side: `claim` (slot by the worker's own count, see the module docstring). Main side:
    `copy_out`. ``token`` identifies the ring (random, per ring)."""

    def __init__(self, workers: int, per_worker: int, capacity: int) -> None:
        if workers < 1 or per_worker < 2 or capacity < 0:
            raise InputError(
                f"slot ring of {workers} workers x {per_worker} slots of {capacity} bytes"
            )
        self.workers = int(workers)
        self.per_worker = int(per_worker)
        self.capacity = -(-int(capacity) // _ALIGN) * _ALIGN
        self.stride = HEADER_BYTES + self.capacity
        self.token = int.from_bytes(os.urandom(7), "little") + 1
        storage = torch.UntypedStorage._new_shared(self.stride * self.slots)
        self.memory = torch.empty(0, dtype=torch.uint8).set_(storage)
        self._count = 0
        self._array: np.ndarray | None = None
        self._heads: memoryview | None = None
        self._slot_tensors: dict[int, torch.Tensor] = {}
        #: main side: set by whoever page-locks the memory in place (`DeviceFeed` on CUDA)
        self.pinned: Any = None

    @property
    def slots(self) -> int:
        return self.workers * self.per_worker

    def __getstate__(self) -> dict[str, Any]:
        # the worker's own batch count starts at 0; the NumPy view is remade
        return {
            k: getattr(self, k)
            for k in ("workers", "per_worker", "capacity", "stride", "token", "memory")
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._count = 0
        self._array = None
        self._heads = None
        self._slot_tensors = {}
        self.pinned = None

    def _bytes(self) -> np.ndarray:
        if self._array is None:
            self._array = self.memory.numpy()
        return self._array

    def _header(self) -> memoryview:
        """The ring as int64 words (a memoryview: fast scalar access); slot ``s``'s ticket is
        word ``s * stride // 8``, its lease the next word."""
        if self._heads is None:
            self._heads = memoryview(self._bytes().data).cast("q")
        return self._heads

    def serves(self, worker: int, num_workers: int) -> bool:
        """Whether worker ``worker`` of ``num_workers`` has slots in this ring."""
        return num_workers == self.workers and 0 <= worker < self.workers

    def claim(self, worker: int, nbytes: int) -> tuple[int, int, np.ndarray] | None:
        """Worker side: ``(slot, ticket, buffer)`` for this worker's next batch of ``nbytes``
        (``buffer``: the slot's ``uint8`` NumPy view, at least ``nbytes`` long), with the
        ticket already in the slot's header; ``None`` when the batch does not fit a slot or
        the slot whose turn it is is leased by the main (it is skipped)."""
        if nbytes > self.capacity:
            return None
        count = self._count
        self._count += 1
        slot = worker * self.per_worker + count % self.per_worker
        words = self._header()
        word = slot * self.stride // 8
        if words[word + 1] != 0:  # leased: the main still uses this slot's batch
            return None
        ticket = count * self.workers + worker + 1
        words[word] = ticket  # before the batch is written
        at = slot * self.stride + HEADER_BYTES
        return slot, ticket, self._bytes()[at : at + self.capacity]

    def _ticket(self, slot: int) -> int:
        return int(self._header()[slot * self.stride // 8])

    # ------------------------------------------------------------ main side: leases
    def lease(self, msg: SlotBatch) -> None:
        """Lease the slot of ``msg`` (just received): no worker rewrites it until `release`.
        ``RuntimeError`` when the slot no longer holds that batch."""
        words = self._header()
        word = msg.slot * self.stride // 8
        if words[word] != msg.ticket:
            raise RuntimeError(
                f"slot {msg.slot} no longer holds {msg} (ticket {words[word]}): "
                "the worker hand-off invariant broke"
            )
        words[word + 1] = msg.ticket

    def release(self, slot: int, ticket: int) -> None:
        """End the lease of batch ``ticket`` on ``slot`` (``RuntimeError`` when the slot was
        rewritten while leased: the lease protocol broke)."""
        words = self._header()
        word = slot * self.stride // 8
        if words[word] != ticket:
            raise RuntimeError(
                f"slot {slot} was rewritten (ticket {words[word]}) while batch {ticket} "
                "was leased: the slot lease protocol broke"
            )
        words[word + 1] = 0

    def leased(self, slot: int) -> bool:
        return self._header()[slot * self.stride // 8 + 1] != 0

    def slot_tensor(self, slot: int) -> torch.Tensor:
        """The batch area of ``slot`` as a 1-D ``uint8`` tensor with a storage of its own (a
        NumPy view of the ring wrapped by ``torch.from_numpy``), so that the references to one
        slot's memory can be counted apart from the others'. Cached per slot."""
        t = self._slot_tensors.get(slot)
        if t is None:
            if not 0 <= slot < self.slots:
                raise RuntimeError(f"no slot {slot} in a ring of {self.slots}")
            at = slot * self.stride + HEADER_BYTES
            t = self._slot_tensors[slot] = torch.from_numpy(self._bytes()[at : at + self.capacity])
        return t

    def copy_out(self, msg: SlotBatch, *, pin: bool = False) -> np.ndarray | torch.Tensor:
        """Main side: the batch of ``msg`` copied into a new 1-D ``uint8`` buffer: a NumPy
        array, or with ``pin`` a page-locked tensor; ``RuntimeError`` when the slot does not
        hold that batch, before or after the copy (it was rewritten: the hand-off invariant
        broke)."""
        if not (0 <= msg.slot < self.slots and 0 <= msg.nbytes <= self.capacity):
            raise RuntimeError(
                f"{msg} does not fit a ring of {self.slots} slots of {self.capacity} bytes"
            )
        if self._ticket(msg.slot) != msg.ticket:
            raise RuntimeError(
                f"slot {msg.slot} no longer holds {msg} (ticket "
                f"{self._ticket(msg.slot)}): the worker hand-off invariant broke"
            )
        at = msg.slot * self.stride + HEADER_BYTES
        out: np.ndarray | torch.Tensor
        if pin:
            out = _pinned_buffer(msg.nbytes)
            out.copy_(self.memory[at : at + msg.nbytes])
        else:
            out = host = np.empty(msg.nbytes, dtype=np.uint8)
            np.copyto(host, self._bytes()[at : at + msg.nbytes])
        if self._ticket(msg.slot) != msg.ticket:
            raise RuntimeError(
                f"slot {msg.slot} was rewritten while {msg} was copied out: "
                "the worker hand-off invariant broke"
            )
        return out


def _pinned_buffer(nbytes: int) -> torch.Tensor:
    """A new page-locked ``uint8`` tensor of ``nbytes`` (needs an accelerator)."""
    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)


class SlotReceiver:
    """Main side of one ring: turns a `SlotBatch` into the batch ``build(buffer, msg)`` makes
    from the copied-out buffer; passes anything else through (a worker's batch that did not fit
    a slot). Registered by the ring's token while it lives (for ``SlotBatch.pin_memory``).
    ``source``: what made the batches (the `StoreBatcher`, for consumers that build batches
    from the slots themselves).

    Leases (module docstring): `hold` leases a received batch's slot until a check says it is
    free; every `receive` and `poll` ends the leases whose check passes. The receiver lives as
    long as the ring, so leases outlive the consumer that took them (a batch kept by the user
    after its `DeviceFeed` is gone keeps its slot)."""

    def __init__(
        self,
        ring: SlotRing,
        build: Callable[[np.ndarray | torch.Tensor, SlotBatch], Any],
        source: Any = None,
    ) -> None:
        self.ring = ring
        self.build = build
        self.source = source
        #: per-slot objects of a consumer that views the slots (`DeviceFeed`'s buffers)
        self.buffers: dict[int, Any] = {}
        self._holds: dict[int, tuple[int, Callable[[], bool]]] = {}
        _RECEIVERS[ring.token] = self

    def receive(self, item: Any, *, pin: bool = False) -> Any:
        if self._holds:
            self.poll()
        if not isinstance(item, SlotBatch):
            return item
        self.check(item)
        return self.build(self.ring.copy_out(item, pin=pin), item)

    __call__ = receive

    def check(self, item: SlotBatch) -> None:
        """``RuntimeError`` unless ``item`` comes from this receiver's ring."""
        if item.token != self.ring.token:
            raise RuntimeError(f"{item} comes from another slot ring than this pass's")

    def hold(self, msg: SlotBatch, free: Callable[[], bool]) -> None:
        """Lease the slot of ``msg`` (just received) until ``free()`` is true at a `poll`."""
        self.ring.lease(msg)
        self._holds[msg.slot] = (msg.ticket, free)

    def poll(self, skip_newest: int = 0) -> int:
        """End the leases whose check passes, not checking the ``skip_newest`` leases taken
        last (a consumer knows they are still in use); the number still held."""
        holds = self._holds
        if not holds:
            return 0
        check = len(holds) - skip_newest
        done = []
        for slot, (_, free) in holds.items():
            if check <= 0:
                break
            check -= 1
            if free():
                done.append(slot)
        for slot in done:
            ticket, _ = holds.pop(slot)
            self.ring.release(slot, ticket)
        return len(holds)
