"""`DeviceFeed`: batches reach the device without a Python thread in the training process.

For a store-fed `graphbatch.torch.loader` with DataLoader workers, the workers read and pad each
batch into a shared-memory slot (`graphbatch.torch._slots`; a preset's transform -- MACE's --
runs there too) and send a few integers: one tuple of messages per DataLoader task, a task being
``group`` consecutive planned batches (`StoreCollater.raw_pass`), so the DataLoader's own cost
per task (queues, pickles) is paid once per group. The feed, in the training thread, then does
per batch, in order (every batch of a group before the next group is asked for):

1. *lease* the slot (no worker rewrites it until released) and, on CUDA, queue one copy of the
   slot's bytes into a device buffer on a side stream -- the ring is page-locked in place with
   ``cudaHostRegister``, so the copy is asynchronous and nothing is copied on the host -- and
   record a CUDA event after it;
2. hand out the batch made of views of that buffer (views made once per buffer and padded shape,
   handed out as fresh aliases), after making the current stream wait for that event only
   (``torch.cuda.current_stream().wait_event``): the host never blocks, and the step of batch
   ``i`` runs while the copies of batches ``i + 1 .. i + depth - 1`` are already queued;
3. release the slot when its copy's event is done; reuse a device buffer only when nothing made
   from it lives any more (torch's count of references to its storage), after the side stream
   waits for the work the current stream had queued by then.

On CPU there is nothing to copy: the batch is made of views of the slot itself, whose lease lasts
until nothing refers to that batch any more; the batches are equal, field by field, to the
loader's. Any other source (a loader without workers, a list, PyG's ``DataLoader``) is fed as
it comes: on CPU its batches are yielded unchanged (the same objects); on CUDA each is pinned and
moved on the side stream (``record_stream`` tells the allocator about the current stream).

The stream, event, copy and page-locking operations are behind `FeedBackend`
(`graphbatch.torch._feed_backend`); this module holds the logic, which tests run on CPU.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch._utils import ExceptionWrapper
from torch.utils.data.dataloader import _BaseDataLoaderIter

from .._errors import InputTypeError
from .._validate import as_positive_int
from ._feed_backend import DeviceBuffer, FeedBackend, backend_for
from ._loader import PlanLoader
from ._slots import _RECEIVERS, SlotBatch, SlotReceiver

__all__ = ["DeviceFeed", "FeedIterator", "device_feed"]

#: Device buffers a feed keeps for reuse beyond its ``depth`` (the batch the step holds, one
#: being replaced, one spare); more batches alive at once get buffers of their own.
SPARE_BUFFERS = 3


class DeviceFeed:
    """Batches of ``loader`` on ``device``, copied ahead on a side stream (module docstring).

    ``loader``: a `graphbatch.torch.loader` (store-fed loaders with ``num_workers`` take the
    slot path) or any iterable of batches (PyG ``Batch``, dicts, tensors). ``device``:
    ``"cuda"``, ``"cuda:N"``, ``"cpu"`` or a ``torch.device`` (default: CUDA when available).
    ``depth``: batches issued ahead, counting the one handed out (``>= 1``; 2 keeps the copy of
    the next batch queued while a step runs). ``group``: on the slot path, planned batches per
    DataLoader task (``>= 1``): a worker makes ``group`` consecutive batches and sends one
    message, so the DataLoader's own cost per task (index and result queues, unpickling) is
    paid once per ``group`` batches; the batches and their order are the same. A worker then
    makes a whole group before sending any of it, so a pass starts with smaller groups (1
    batch for each worker, then 2, doubling up to ``group``: the first batch of a pass comes
    as soon as without groups), and the ring has ``(prefetch_factor + 1) * group + depth +
    2`` slots per worker; groups shrink where such a ring would pass 64 MiB
    (`StoreCollater.GROUP_RING_BYTES`) or, for persistent workers started by another pass, to
    fit the ring they keep.
    ``backend``: the device operations (`graphbatch.torch._feed_backend.FeedBackend`; default:
    the device's).

    Iterating starts a pass of ``loader`` (an epoch); ``len`` is the loader's. For a
    `PlanLoader`, a batch counts as consumed (``loader.state_dict()``) when it is handed out,
    not when it is read ahead, and a ``set_epoch``/``load_state_dict`` between ``iter`` and
    the first batch is honoured, as with the loader itself. The batch handed out is valid on
    the stream that was current when it was handed out; keep using it as long as you like (its
    memory is reused only once nothing refers to it). Do not give the loader
    ``pin_memory=True``: the feed pins (page-locks the slots) itself, without the DataLoader's
    pinning thread.
    """

    def __init__(
        self,
        loader: Iterable[Any],
        device: Any = None,
        depth: int = 2,
        *,
        group: int = 8,
        backend: FeedBackend | None = None,
    ) -> None:
        if not isinstance(loader, Iterable):
            raise InputTypeError(f"loader must be iterable, got {type(loader).__name__}")
        self.loader = loader
        self.depth = as_positive_int(depth, "feed depth")
        self.group = as_positive_int(group, "feed group")
        if backend is not None and not isinstance(backend, FeedBackend):
            raise InputTypeError(f"backend must be a FeedBackend, got {type(backend).__name__}")
        self.backend = backend_for(device) if backend is None else backend
        self.device = self.backend.device

    def __iter__(self) -> FeedIterator:
        return FeedIterator(self)

    def __len__(self) -> int:
        try:
            return len(self.loader)  # type: ignore[arg-type]
        except TypeError:
            raise InputTypeError(
                f"the feed's loader ({type(self.loader).__name__}) has no len()"
            ) from None


def device_feed(
    loader: Iterable[Any], device: Any = None, depth: int = 2, *, group: int = 8
) -> DeviceFeed:
    """``DeviceFeed(loader, device, depth, group=group)``: ``loader``'s batches on ``device``,
    each copied while the previous step runs.

    Example::

        ld = loader(store, strategy="pack-lpf", batch_size=128,
                    dataloader_kwargs={"num_workers": 2})
        for batch in device_feed(ld, "cuda"):
            loss = step(batch)  # no .to(device)
    """
    return DeviceFeed(loader, device, depth, group=group)


class _Issued:
    """A batch read ahead: the batch (on the device), the event after its copy (``None``: no
    copy) and the device tensors the allocator must learn are used on the step's stream."""

    __slots__ = ("batch", "event", "keep")

    def __init__(self, batch: Any, event: Any, keep: tuple[torch.Tensor, ...] = ()) -> None:
        self.batch = batch
        self.event = event
        self.keep = keep


class FeedIterator:
    """One pass of a `DeviceFeed` (see there). `close` (or leaving a ``with`` block) stops it;
    the rest of the pass is not read."""

    def __init__(self, feed: DeviceFeed) -> None:
        self._feed = feed
        self._backend = feed.backend
        self._depth = feed.depth
        self._side = self._backend.side_stream()
        self._ready: deque[_Issued] = deque()
        self._pending: deque[Any] = deque()  # the rest of a group of messages
        self._groups = False  # the pass's messages may come as groups (tuples)
        self._pool: list[DeviceBuffer] = []
        self._receiver: SlotReceiver | None = None
        self._pass: tuple[Any, int] | None = None
        self._mark: Any = None  # the step stream's event of this `next`, made when needed
        self._first = True
        self._exhausted = False
        self._failure: Exception | None = None
        self._it = self._start()
        self._pull = _puller(self._it)

    # ------------------------------------------------------------------ passes
    def _start(self) -> Iterator[Any]:
        """Start a pass of the loader: raw slot messages for a store-fed `PlanLoader`."""
        src = self._feed.loader
        if not isinstance(src, PlanLoader):
            return iter(src)
        raw_pass = getattr(src.collate_fn, "raw_pass", None)
        if callable(raw_pass):
            with raw_pass(extra_slots=self._depth + 1, group=self._feed.group) as box:
                it, pass_id = src._begin_pass()
            self._receiver = box.receiver
            self._groups = True
        else:
            it, pass_id = src._begin_pass()
        self._pass = (src.plan_sampler.cursor, pass_id)
        return it

    def _restart_if_superseded(self) -> None:
        """Before the first batch: a ``set_epoch`` or ``load_state_dict`` since the pass
        started supersedes it; start the pass that was set (nothing was read yet)."""
        src = self._feed.loader
        if self._pass is None or not isinstance(src, PlanLoader):
            return
        if src.superseded(self._pass[1]):
            self._close_source()
            self._it = self._start()
            self._pull = _puller(self._it)

    def __iter__(self) -> FeedIterator:
        return self

    def __next__(self) -> Any:
        if self._first:
            self._first = False
            self._restart_if_superseded()
        self._mark = None
        if self._receiver is not None:
            # the batches read ahead, and the one handed out last (the caller's loop variable
            # still holds it during this call), are in use: their leases are not checked
            self._receiver.poll(skip_newest=len(self._ready) + 1)
        ready = self._ready
        if len(ready) < self._depth and not self._exhausted:
            self._read_ahead(ready)
        if not ready:
            failure = self._failure
            if failure is not None:
                self._failure = None
                raise failure
            if self._pass is not None and self._exhausted:
                self._pass[0].finished(self._pass[1])
                self._pass = None
            raise StopIteration
        issued = ready.popleft()
        if issued.event is not None or issued.keep:
            backend = self._backend
            stream = backend.current_stream()
            if issued.event is not None:
                backend.wait(stream, issued.event)
            for t in issued.keep:
                backend.keep(t, stream)
        if self._pass is not None:
            self._pass[0].consumed(self._pass[1])
        return issued.batch

    def _read_ahead(self, ready: deque[_Issued]) -> None:
        """Issue batches until ``depth`` are ready or the pass ends (an error ends it too:
        raised once the batches before it are handed out). A group's messages are issued one
        by one, each slot leased as its batch is issued, before the next group is read."""
        pending = self._pending
        while len(ready) < self._depth:
            if pending:
                item = pending.popleft()
            else:
                try:
                    item = self._pull()
                except StopIteration:
                    self._exhausted = True
                    return
                except Exception as exc:  # raised where it occurred: after the batches before
                    self._fail(exc)
                    return
                if self._groups and type(item) is tuple:  # a task's batches (`raw_pass`)
                    pending.extend(item)
                    continue
            if isinstance(item, ExceptionWrapper):  # a worker's failure within a group
                try:
                    item.reraise()
                except Exception as exc:
                    self._fail(exc)
                return
            ready.append(self._issue(item))

    def _fail(self, exc: Exception) -> None:
        self._exhausted = True
        self._failure = exc
        self._pending.clear()

    # ------------------------------------------------------------------ issuing
    def _issue(self, item: Any) -> _Issued:
        if isinstance(item, SlotBatch):
            return self._issue_slot(item)
        return self._issue_batch(item)

    def _issue_batch(self, item: Any) -> _Issued:
        """A batch made by the loader: unchanged on CPU, else pinned and moved."""
        backend = self._backend
        if not backend.copies:
            return _Issued(item, None)
        keep: list[torch.Tensor] = []
        with backend.on(self._side):  # allocated on the side stream, kept for the step's
            moved = _to_device(item, backend.move, keep)
            event = backend.record(self._side)
        return _Issued(moved, event, tuple(keep))

    def _issue_slot(self, msg: SlotBatch) -> _Issued:
        """A batch in a worker's slot: viewed in place (CPU) or copied from the page-locked
        slot into a device buffer; the slot is leased until then."""
        receiver = self._receiver_of(msg)
        batcher = receiver.source
        key, entries, counts = batcher.layout(msg)
        if msg.layout is None:  # the kernel's layout: a prototype batch per buffer and shape
            key = (key, msg.real_graphs > 0)  # an all-padding batch is of another class
            cache = batcher.anchored  # else the batch holds its own node counts
        else:  # a packed dict: its values other than tensors come with each batch
            cache = False
        ring = receiver.ring
        backend = self._backend
        if not backend.copies:
            view: DeviceBuffer | None = receiver.buffers.get(msg.slot)
            batch = view.copy_of(key) if view is not None and cache else None
            if view is None or batch is None:
                slot = ring.slot_tensor(msg.slot)
                if view is None:
                    view = receiver.buffers[msg.slot] = DeviceBuffer(slot)
                batch = view.batch(key, entries, _builder(batcher, msg, slot, counts), cache)
            receiver.hold(msg, view.free)  # until nothing refers to the batch
            return _Issued(batch, None)
        slot = ring.slot_tensor(msg.slot)
        if ring.pinned is None:
            ring.pinned = backend.register(ring.memory, ring)
        buf = self._buffer(msg.nbytes, ring.capacity)
        build = _builder(batcher, msg, slot, counts)
        batch = buf.batch(key, entries, build, cache)  # before the copy refers to the buffer
        side = self._side
        mark = self._step_mark()  # recorded on the step's stream: outside `on(side)`
        with backend.on(side):
            # the step's stream may still use what this memory held before
            backend.wait(side, mark)
            backend.copy(buf.base[: msg.nbytes], slot[: msg.nbytes])
            event = backend.record(side)
        receiver.hold(msg, lambda: backend.done(event))  # until the copy is done
        return _Issued(batch, event, (buf.base,))  # the step's stream uses the buffer

    def _receiver_of(self, msg: SlotBatch) -> SlotReceiver:
        receiver = self._receiver
        if receiver is None or receiver.ring.token != msg.token:
            receiver = _RECEIVERS.get(msg.token)
            if receiver is None or receiver.source is None:
                raise RuntimeError(f"no live slot ring for {msg} in this process")
            self._receiver = receiver
        return receiver

    def _step_mark(self) -> Any:
        """An event on the step's stream after the work queued there so far (one per
        `next`)."""
        if self._mark is None:
            backend = self._backend
            self._mark = backend.record(backend.current_stream())
        return self._mark

    def _buffer(self, nbytes: int, capacity: int) -> DeviceBuffer:
        """A device buffer of at least ``nbytes`` that nothing refers to: one of the pool's,
        a new pool buffer of ``capacity`` bytes, or (the pool full) one of its own."""
        for buf in self._pool:
            if buf.capacity >= nbytes and buf.free():
                return buf
        if len(self._pool) < self._depth + SPARE_BUFFERS:
            buf = DeviceBuffer(self._backend.empty(max(nbytes, capacity)))
            self._pool.append(buf)
            return buf
        return DeviceBuffer(self._backend.empty(nbytes))

    # ------------------------------------------------------------------ closing
    def _close_source(self) -> None:
        close = getattr(self._it, "close", None)
        if callable(close):
            close()
        self._it = iter(())
        self._pull = self._it.__next__

    def close(self) -> None:
        """Stop: the batches read ahead are dropped (their copies finished first)."""
        self._exhausted = True
        self._close_source()
        self._pending.clear()
        for issued in self._ready:
            if issued.event is not None:
                self._backend.synchronize(issued.event)
        self._ready.clear()
        if self._receiver is not None:
            self._receiver.poll()

    def __enter__(self) -> FeedIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _puller(it: Iterator[Any]) -> Callable[[], Any]:
    """``next(it)``; for a DataLoader's iterator, its ``_next_data`` without the profiler range
    its ``__next__`` opens around it (about a tenth of what the DataLoader costs the training
    thread per batch; the range only names the step in ``torch.profiler`` traces)."""
    nxt = getattr(it, "_next_data", None)
    if (
        not isinstance(it, _BaseDataLoaderIter)
        or not callable(nxt)
        or getattr(it, "_sampler_iter", None) is None
        or not isinstance(getattr(it, "_num_yielded", None), int)
    ):
        return it.__next__

    def pull() -> Any:
        data = nxt()  # StopIteration at the end, as from __next__
        it._num_yielded += 1
        return data

    return pull


def _builder(
    batcher: Any, msg: SlotBatch, slot: torch.Tensor, counts: tuple[int, int] | None
) -> Callable[[dict[str, torch.Tensor]], Any]:
    """``build(tensors)``: the batch of ``msg`` made of ``tensors`` (views laid out as
    ``batcher.layout(msg)`` says), its node counts read from the host ``slot``."""
    node_counts = _counts_reader(slot, counts)

    def build(tensors: dict[str, torch.Tensor]) -> Any:
        return batcher.assemble(msg, tensors, node_counts)

    return build


def _counts_reader(slot: torch.Tensor, counts: tuple[int, int] | None) -> Callable[[], list[int]]:
    """Reads the nodes per graph slot from the host slot (only PyG batches without node
    fields need them)."""
    if counts is None:
        return list
    at, end = counts
    return lambda: slot[at:end].view(torch.int64).tolist()


def _to_device(obj: Any, move: Callable[[torch.Tensor], torch.Tensor], keep: list) -> Any:
    """``obj`` with every tensor moved (appended to ``keep``): tensors, dicts, lists and
    tuples, PyG ``Data``/``Batch`` (a shallow copy: the loader's object is left as it was);
    anything else as it is."""
    if isinstance(obj, torch.Tensor):
        out = move(obj)
        keep.append(out)
        return out
    if type(obj) is dict:
        return {k: _to_device(v, move, keep) for k, v in obj.items()}
    if type(obj) in (list, tuple):
        return type(obj)(_to_device(v, move, keep) for v in obj)
    if hasattr(obj, "stores") and callable(getattr(obj, "apply", None)):
        out = copy.copy(obj)

        def moved(t: torch.Tensor) -> torch.Tensor:
            t = move(t)
            keep.append(t)
            return t

        return out.apply(moved)
    return obj
