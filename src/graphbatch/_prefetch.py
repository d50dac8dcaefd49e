"""Background-thread prefetch: the one implementation, shared by the torch and JAX adapters.

`Prefetcher` iterates a source in a daemon thread, ``depth`` items ahead, applying an optional
``transform`` there (the adapters pass theirs: pinning / a device copy for torch, collation and
``jax.device_put`` for JAX). It imports no framework.

The producer refills at the consumer's pace: taking an item does not wake it. While the queue is
full it polls on a timer (`poll_interval` of the consumer's time between items). A wake-up at
every take would start the producer's GIL-holding work exactly while the training thread still
runs Python, and on a busy machine the woken thread preempts it: the step's wait for an already
prepared batch grew from ~0.1 ms to a scheduler time slice (median 1.5 ms, p90 11 ms at load 10
on 2 cores; measured in issue 16, in the git history of benchmarks/RESULTS.md). Polling, the
producer mostly wakes while the model step runs with the GIL released.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any

from ._errors import InputTypeError
from ._validate import as_nonnegative_int, as_positive_int

__all__ = ["POLL_MAX_S", "POLL_MIN_S", "POLL_SHARE", "Prefetcher", "ahead", "poll_interval"]

#: Bounds (seconds) of the producer's poll while the queue is full, and the share of the
#: consumer's time between items it waits at most.
POLL_MIN_S, POLL_MAX_S, POLL_SHARE = 0.0005, 0.01, 0.125
#: How often (seconds) a consumer waiting on an empty queue checks that the producer still lives.
_ALIVE_CHECK_S = 0.1
#: Weight of the newest interval in the consumer's smoothed pace.
_PACE_WEIGHT = 0.3


def poll_interval(consumer_interval_s: float | None) -> float:
    """The producer's poll (s) while the queue is full: ``POLL_SHARE`` of the consumer's time
    between items, within ``[POLL_MIN_S, POLL_MAX_S]`` (``POLL_MAX_S`` before it is known)."""
    if consumer_interval_s is None:
        return POLL_MAX_S
    return min(POLL_MAX_S, max(POLL_MIN_S, POLL_SHARE * consumer_interval_s))


class _End:
    """Queued after the last item: the source ran to its end."""


class _Failure:
    """Queued instead of an item: the source or the transform raised ``exc``."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class _Pace:
    """The consumer's smoothed time between takes (s); written by the consumer, read by the
    producer (a float assignment is atomic)."""

    __slots__ = ("interval", "_last")

    def __init__(self) -> None:
        self.interval: float | None = None
        self._last: float | None = None

    def tick(self) -> None:
        now = time.perf_counter()
        if self._last is not None:
            dt = now - self._last
            self.interval = (
                dt
                if self.interval is None
                else ((1 - _PACE_WEIGHT) * self.interval + _PACE_WEIGHT * dt)
            )
        self._last = now


def _put(q: queue.Queue, stop: threading.Event, pace: _Pace, item: Any) -> bool:
    """Put ``item`` once a slot is free, polling while the queue is full; False if stopped."""
    while not stop.is_set():
        if q.full():  # only the producer puts: a free slot stays free until it fills it
            stop.wait(poll_interval(pace.interval))
            continue
        q.put_nowait(item)
        return True
    return False


def _produce(
    it: Iterator[Any],
    transform: Callable[[Any], Any] | None,
    q: queue.Queue,
    stop: threading.Event,
    pace: _Pace,
) -> None:
    """The producer thread: ``transform(item)`` for each item of ``it`` into ``q``, then `_End`;
    an exception becomes a `_Failure`. A source left before its end (stopped by the consumer,
    or a transform failed) is closed, so a generator source runs its cleanup. Holds no
    reference to the `Prefetcher`, so an abandoned one can be garbage-collected (its
    ``__del__`` stops this thread)."""
    ended = False
    try:
        while not stop.is_set():
            try:
                item = next(it)
            except StopIteration:
                ended = True
                _put(q, stop, pace, _End())
                return
            if transform is not None:
                try:
                    item = transform(item)
                except StopIteration as exc:  # would end the consumer's loop silently
                    raise RuntimeError(
                        f"prefetch transform {transform!r} raised StopIteration"
                    ) from exc
            if not _put(q, stop, pace, item):
                return
    except BaseException as exc:
        _put(q, stop, pace, _Failure(exc))
    finally:
        close = getattr(it, "close", None)
        if close is not None and not ended:
            close()


class Prefetcher:
    """Iterator over ``transform(item) for item in source``, computed up to ``depth`` items ahead
    by one daemon thread named ``name``.

    Order and content are those of the synchronous loop; an exception raised by ``source`` or
    ``transform`` is re-raised by ``next`` at the position where it occurred (the original
    exception object), after which the iterator is exhausted. `close` (or leaving a ``with``
    block) stops the thread -- it finishes at most the item in hand -- drops the prepared items
    and joins it; the rest of ``source`` is not consumed and a generator source is closed.
    Garbage collection of an unclosed `Prefetcher` stops the thread too (without joining).
    ``exhausted`` is True once ``next`` has reached the end of ``source``.
    """

    def __init__(
        self,
        source: Iterable[Any],
        depth: int = 2,
        *,
        transform: Callable[[Any], Any] | None = None,
        name: str = "graphbatch-prefetch",
    ) -> None:
        depth = as_positive_int(depth, "prefetch depth")
        if transform is not None and not callable(transform):
            raise InputTypeError(f"transform must be callable, got {type(transform).__name__}")
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._pace = _Pace()
        self._done = False
        self.exhausted = False
        self._thread = threading.Thread(
            target=_produce,
            args=(iter(source), transform, self._queue, self._stop, self._pace),
            name=name,
            daemon=True,
        )
        self._thread.start()

    def __iter__(self) -> Prefetcher:
        return self

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        while True:
            try:
                item = self._queue.get(timeout=_ALIVE_CHECK_S)
                break
            except queue.Empty:  # the producer always queues an end; this guards a lost thread
                if not self._thread.is_alive() and self._queue.empty():
                    self._done = True
                    raise StopIteration from None
        self._pace.tick()
        if isinstance(item, _End):
            self._done = self.exhausted = True
            raise StopIteration
        if isinstance(item, _Failure):
            self._done = True
            raise item.exc
        return item

    def close(self) -> None:
        """Stop the thread (it finishes at most the item in hand), drop the prepared items and
        wait for the thread to end."""
        self._stop.set()
        self._done = True
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        if self._thread is not threading.current_thread():
            self._thread.join()

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._stop.set()


def ahead(
    transform: Callable[[Any], Any],
    items: Iterable[Any],
    depth: int,
    *,
    name: str = "graphbatch-prefetch",
) -> Generator[Any, None, None]:
    """``transform(item)`` for each item, computed ``depth`` items ahead by a `Prefetcher`
    (``depth=0``: in the caller's thread, no thread). A generator: closing it, or an exception
    while it is suspended, stops and joins the thread."""
    if as_nonnegative_int(depth, "prefetch depth") == 0:
        for item in items:
            yield transform(item)
        return
    with Prefetcher(items, depth, transform=transform, name=name) as made:
        yield from made
