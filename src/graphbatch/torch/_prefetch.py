"""Background-thread prefetching: collate the next batches while the model step runs.

The in-process alternative to DataLoader workers (IPU paper 4.2.3, asynchronous loading with
prefetch): the batches are made by a thread of the training process, so nothing is pickled or
sent between processes, and collation (NumPy / torch kernels that release the GIL) overlaps the
model step (whose kernels release it too).
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Iterable, Iterator

__all__ = ["Prefetcher", "prefetch"]

_END = object()
_POLL_S = 0.1


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _pinned(item: Any) -> Any:
    """``item.pin_memory()`` for PyG batches and tensors; a dict's tensors pinned one by one."""
    if isinstance(item, dict):
        return {k: v.pin_memory() if hasattr(v, "pin_memory") else v for k, v in item.items()}
    return item.pin_memory() if hasattr(item, "pin_memory") else item


def _put(q: queue.Queue, stop: threading.Event, item: Any) -> bool:
    while not stop.is_set():
        try:
            q.put(item, timeout=_POLL_S)
            return True
        except queue.Full:
            continue
    return False


def _fill(it: Iterator[Any], q: queue.Queue, stop: threading.Event, pin: bool) -> None:
    try:
        for item in it:
            if pin:
                item = _pinned(item)
            if not _put(q, stop, item):
                break
        else:
            _put(q, stop, _END)
    except BaseException as exc:  # handed to the consumer, raised there
        _put(q, stop, _Failure(exc))
    finally:
        close = getattr(it, "close", None)
        if close is not None and stop.is_set():
            close()


class Prefetcher:
    """Iterator over ``source`` that runs ``source`` in a daemon thread, up to ``depth`` items
    ahead. ``pin_memory=True`` pins each batch in the thread (``batch.pin_memory()``; a dict's
    tensors one by one; needs an accelerator), so that a
    later ``batch.to("cuda", non_blocking=True)`` in the training loop is asynchronous.

    Order and content are those of ``source``; an exception raised by ``source`` is re-raised by
    ``next`` at the position where it occurred. `close` (or leaving a ``with`` block, or garbage
    collection) stops the thread without consuming the rest of ``source``.
    """

    def __init__(self, source: Iterable[Any], depth: int = 2, *, pin_memory: bool = False) -> None:
        if int(depth) < 1:
            raise ValueError(f"prefetch depth must be >= 1, got {depth}")
        self._queue: queue.Queue = queue.Queue(maxsize=int(depth))
        self._stop = threading.Event()
        self._done = False
        # the thread gets the queue and the event, not ``self``: an abandoned Prefetcher can be
        # garbage-collected, and its ``__del__`` stops the thread
        self._thread = threading.Thread(
            target=_fill, args=(iter(source), self._queue, self._stop, bool(pin_memory)),
            name="graphbatch-prefetch", daemon=True)
        self._thread.start()

    def __iter__(self) -> "Prefetcher":
        return self

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        while True:
            try:
                item = self._queue.get(timeout=_POLL_S)
                break
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    self._done = True
                    raise StopIteration from None
        if item is _END:
            self._done = True
            raise StopIteration
        if isinstance(item, _Failure):
            self._done = True
            raise item.exc
        return item

    def close(self) -> None:
        """Stop the thread (it finishes the item it is making) and drop prefetched items."""
        self._stop.set()
        self._done = True
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._thread.join(timeout=30)

    def __enter__(self) -> "Prefetcher":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._stop.set()
        except Exception:  # interpreter shutdown
            pass


def prefetch(source: Iterable[Any], depth: int = 2, *, pin_memory: bool = False) -> Prefetcher:
    """``Prefetcher(source, depth, pin_memory=...)``: iterate ``source`` in a background thread.

    Example::

        for batch in prefetch(loader(ds, strategy="pack-lpf", batch_size=128)):
            batch = batch.to(device, non_blocking=True)
            ...
    """
    return Prefetcher(source, depth, pin_memory=pin_memory)
