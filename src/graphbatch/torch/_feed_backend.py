"""The device operations of `graphbatch.torch.DeviceFeed`, behind one small interface.

`FeedBackend` names every operation the feed performs on streams, events, device memory and
page-locked host memory; the feed calls nothing else. `CpuBackend` (batches stay where they
are: no copy, no stream, every event already done) and `CudaBackend` (a side stream, CUDA
events, ``cudaHostRegister``) implement it, so the feed's logic -- its ordering, leases and
buffer reuse -- is one piece of code that the test suite runs on CPU with a recording fake.

`DeviceBuffer`: a device (or host) buffer whose batches are views of it, made once per layout
and handed out as fresh aliases; it knows whether anything outside still uses it by counting
the references to its storage, so it is never rewritten while a batch made from it lives.
"""

from __future__ import annotations

import contextlib
import copy
import operator
import sys
import weakref
from collections.abc import Callable
from typing import Any

import torch

from .._errors import InputError, InputTypeError

__all__ = ["CpuBackend", "CudaBackend", "DeviceBuffer", "FeedBackend", "backend_for"]

#: Layouts whose views one buffer keeps (a plan has one padded shape per bucket; more are rare).
MAX_LAYOUTS = 16


_USE_COUNT = getattr(torch._C, "_storage_Use_Count", None)


def _storage_refs(cdata: int) -> int:
    """References to the storage ``cdata`` (torch's count: tensors, views, saved tensors;
    a torch without the count: never free, so buffers are never reused)."""
    return _USE_COUNT(cdata) if _USE_COUNT is not None else 1 << 62


_REFCOUNT = sys.getrefcount
_TENSOR_USES = torch.Tensor._use_count  # type: ignore[attr-defined]
_REQUIRES_GRAD = operator.attrgetter("requires_grad")


def _refcount_sum(tensors: list[torch.Tensor]) -> int:
    """The tensors' Python reference counts, summed (as `_Layout.held` counts them: the same
    call, so the references of the call itself are counted alike)."""
    return sum(map(_REFCOUNT, tensors))


class _Layout:
    """One layout's views of a `DeviceBuffer`: the views, the prototype batch made of them
    (``None``: not cached) and the views' Python reference counts, summed, while only this
    object and the prototype hold them."""

    __slots__ = ("views", "proto", "tensors", "count")

    def __init__(self, views: dict[str, torch.Tensor], proto: Any) -> None:
        self.views = views
        self.proto = proto
        self.tensors = list(views.values())
        self.count = _refcount_sum(self.tensors)

    def held(self) -> bool:
        """Whether a view is referenced by more than this layout (a batch, a list, a
        variable), or its tensor by C++ (an autograd record). No count is ever below its
        count at construction (this object holds each view), so the sums compare exactly."""
        tensors = self.tensors
        return _refcount_sum(tensors) > self.count or sum(map(_TENSOR_USES, tensors)) > len(tensors)

    def reset_grad(self) -> None:
        """A step's leaves among the views back to plain views (no ``requires_grad``,
        ``grad``)."""
        if any(map(_REQUIRES_GRAD, self.tensors)):
            for t in self.tensors:
                if t.requires_grad:
                    t.requires_grad_(False)
                    t.grad = None


class DeviceBuffer:
    """A 1-D ``uint8`` tensor ``base`` that batches are views of.

    `batch` gives a batch made of views of ``base`` made once per layout: a shallow copy
    (``copy.copy``) of a prototype batch built once, so making a batch costs neither slicing
    nor building. `free` is true when nothing but this object refers to the memory: no batch,
    tensor, view or autograd record made from it lives (torch's count of references to the
    storage, and each view's own references), so the buffer can take another batch. A view
    handed out again has lost what a step gave it (``requires_grad``, ``grad``)."""

    __slots__ = ("base", "capacity", "_cdata", "_refs", "_layouts", "_out")

    def __init__(self, base: torch.Tensor) -> None:
        self.base = base
        self.capacity = int(base.shape[0])
        self._cdata = base.untyped_storage()._cdata
        self._layouts: dict[Any, _Layout] = {}
        self._out: list[_Layout] = []  # layouts handed out since the buffer was last free
        self._refs = _storage_refs(self._cdata)

    def free(self) -> bool:
        refs = _storage_refs(self._cdata)
        if refs > self._refs:  # a new view, alias or saved tensor of the memory (or a copy
            return False  # into it still queued)
        out = self._out
        for layout in out:
            if layout.held():
                return False
        for layout in out:
            layout.reset_grad()
        out.clear()
        if refs < self._refs:  # a view lost its storage (``t.data = x``): make them anew
            self._forget()
        return True

    def _forget(self) -> None:
        self._layouts.clear()
        self._out.clear()
        self._refs = _storage_refs(self._cdata)

    def copy_of(self, key: Any) -> Any:
        """The batch of layout ``key`` when its prototype is cached (a copy of it), else
        ``None`` (then call `batch`). Same conditions as `batch`."""
        layout = self._layouts.get(key)
        if layout is None or layout.proto is None:
            return None
        if layout not in self._out:
            self._out.append(layout)
        return copy.copy(layout.proto)

    def batch(
        self,
        key: Any,
        entries: tuple,
        build: Callable[[dict[str, torch.Tensor]], Any],
        cache: bool = True,
    ) -> Any:
        """The batch of layout ``key`` (tensors ``entries``: ``(name, start, end, shape,
        dtype)`` each), made by ``build(views)`` once and copied after (``cache=False``: built
        every time, for batches that hold more than their layout). Call only while `free`, and
        before anything else refers to the memory (a copy queued into it)."""
        layout = self._layouts.get(key)
        if layout is None:
            if len(self._layouts) >= MAX_LAYOUTS:
                self._forget()
            base = self.base
            views = {name: base[a:e].view(dt).view(shape) for name, a, e, shape, dt in entries}
            proto = build(dict(views)) if cache else None
            layout = self._layouts[key] = _Layout(views, proto)
            self._refs = _storage_refs(self._cdata)
        if layout not in self._out:
            self._out.append(layout)
        if layout.proto is None:
            return build(dict(layout.views))
        return copy.copy(layout.proto)


class FeedBackend:
    """The operations a `graphbatch.torch.DeviceFeed` performs (this class: the CPU ones).

    ``copies``: batches are copied into device memory (``False``: used where they are).
    Streams and events are opaque objects of the backend; ``None`` on CPU.
    """

    copies = False

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def side_stream(self) -> Any:
        """The stream copies run on (made once per feed)."""
        return None

    def current_stream(self) -> Any:
        """The stream the training step runs on (read at every batch)."""
        return None

    def on(self, stream: Any) -> contextlib.AbstractContextManager[Any]:
        """A context in which the operations are queued on ``stream``."""
        return contextlib.nullcontext()

    def record(self, stream: Any) -> Any:
        """A new event recorded on ``stream`` (after the work queued there so far)."""
        return None

    def wait(self, stream: Any, event: Any) -> None:
        """Work queued on ``stream`` from now on waits for ``event`` (the host does not)."""

    def done(self, event: Any) -> bool:
        """Whether the work before ``event`` has finished (does not block)."""
        return True

    def synchronize(self, event: Any) -> None:
        """Block the host until ``event`` is done."""

    def empty(self, nbytes: int) -> torch.Tensor:
        """A new 1-D ``uint8`` device buffer of ``nbytes``, usable on both streams."""
        return torch.empty(nbytes, dtype=torch.uint8, device=self.device)

    def copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """Queue ``dst.copy_(src)`` (host to device, asynchronous) on the current stream."""
        dst.copy_(src)

    def keep(self, tensor: torch.Tensor, stream: Any) -> None:
        """Tell the allocator that ``tensor`` is used on ``stream`` (``record_stream``)."""

    def register(self, memory: torch.Tensor, owner: object) -> bool:
        """Page-lock ``memory`` (a host tensor) in place while ``owner`` lives; whether it
        is now page-locked (``False``: copies from it are not asynchronous)."""
        return False

    def move(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` on the device, copied asynchronously (pinned first when it is not)."""
        return tensor


class CpuBackend(FeedBackend):
    """CPU: batches stay where they are; nothing is copied or waited for."""


class CudaBackend(FeedBackend):
    """CUDA: copies on a side stream (``torch.cuda.Stream``), CUDA events, the step's stream
    waiting on the event of its batch only, ``record_stream`` for the caching allocator and
    ``cudaHostRegister`` to page-lock the workers' shared-memory slots in place."""

    copies = True

    def __init__(self, device: torch.device) -> None:
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        super().__init__(device)
        self._side: torch.cuda.Stream | None = None

    def side_stream(self) -> torch.cuda.Stream:
        if self._side is None:
            self._side = torch.cuda.Stream(self.device)
        return self._side

    def current_stream(self) -> torch.cuda.Stream:
        return torch.cuda.current_stream(self.device)

    def on(self, stream: Any) -> contextlib.AbstractContextManager[Any]:
        return torch.cuda.stream(stream)

    def record(self, stream: Any) -> torch.cuda.Event:
        event = torch.cuda.Event()
        event.record(stream)
        return event

    def wait(self, stream: Any, event: Any) -> None:
        stream.wait_event(event)

    def done(self, event: Any) -> bool:
        return bool(event.query())

    def synchronize(self, event: Any) -> None:
        event.synchronize()

    def empty(self, nbytes: int) -> torch.Tensor:
        # made on the step's stream (freed in its order); also used on the side stream
        out = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        out.record_stream(self.side_stream())
        return out

    def copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        dst.copy_(src, non_blocking=True)

    def keep(self, tensor: torch.Tensor, stream: Any) -> None:
        tensor.record_stream(stream)

    def register(self, memory: torch.Tensor, owner: object) -> bool:
        ptr, nbytes = memory.data_ptr(), memory.numel() * memory.element_size()
        if nbytes == 0:
            return False
        cudart = torch.cuda.cudart()
        if int(cudart.cudaHostRegister(ptr, nbytes, 1)) != 0:  # 1: cudaHostRegisterPortable
            return False
        # unregistered when the owner goes, while the memory is still held here
        weakref.finalize(owner, _unregister, ptr, memory)
        return True

    def move(self, tensor: torch.Tensor) -> torch.Tensor:
        if tensor.device.type != "cpu":
            return tensor.to(self.device, non_blocking=True)
        host = tensor if tensor.is_pinned() else tensor.pin_memory()
        return host.to(self.device, non_blocking=True)


def _unregister(ptr: int, memory: torch.Tensor) -> None:
    with contextlib.suppress(Exception):  # interpreter shutdown: CUDA may be gone
        torch.cuda.synchronize()  # no copy from the memory is left in flight
        torch.cuda.cudart().cudaHostUnregister(ptr)
    del memory


def backend_for(device: Any) -> FeedBackend:
    """The backend of ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:1"``, a ``torch.device``);
    ``None``: CUDA when available, else CPU."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise InputTypeError(f"device must name a torch device, got {device!r}") from None
    if dev.type == "cpu":
        return CpuBackend(dev)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError(f"device {str(dev)!r} needs CUDA, which this torch cannot use")
        return CudaBackend(dev)
    raise InputError(f"a device feed runs on 'cpu' or 'cuda', got {str(dev)!r}")
