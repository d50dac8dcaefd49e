"""Background-thread prefetching for torch: collate the next batches while the model step runs.

The in-process alternative to DataLoader workers (IPU paper 4.2.3, asynchronous loading with
prefetch): the batches are made by a thread of the training process, so nothing is pickled or
sent between processes, and collation (NumPy / torch kernels that release the GIL) overlaps the
model step (whose kernels release it too). The thread is the core's `graphbatch._prefetch`
(one implementation for both adapters); this module adds torch's transforms (pinning, a user
transform such as a non-blocking device copy).

To feed a GPU from a store-fed loader with workers, prefer `graphbatch.torch.DeviceFeed`: it
needs no thread, which on a GPU competes with the thread that launches the step (issue 36: an
H200's SchNet update went from 2.2 to 3.6 ms with the prefetch thread).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .._errors import InputTypeError
from .._prefetch import Prefetcher as _CorePrefetcher
from .._schedule import EpochCursor
from .._validate import as_positive_int
from ._loader import PlanLoader

__all__ = ["Prefetcher", "prefetch"]

#: Name of the prefetch thread.
THREAD_NAME = "graphbatch-prefetch"


def _pinned(item: Any) -> Any:
    """``item.pin_memory()`` for PyG batches and tensors; a dict's tensors pinned one by one."""
    if isinstance(item, dict):
        return {k: v.pin_memory() if hasattr(v, "pin_memory") else v for k, v in item.items()}
    return item.pin_memory() if hasattr(item, "pin_memory") else item


def _then(first: Callable[[Any], Any], second: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda item: second(first(item))


class Prefetcher(_CorePrefetcher):
    """Iterator over ``source`` that runs ``source`` in a daemon thread, up to ``depth`` items
    ahead. ``pin_memory=True`` pins each batch in the thread (``batch.pin_memory()``; a dict's
    tensors one by one; needs an accelerator), so that a later
    ``batch.to("cuda", non_blocking=True)`` is asynchronous. ``transform`` (called in the thread
    on each batch, after pinning), e.g. ``lambda b: b.to(device, non_blocking=True)``.

    Order and content are those of ``source``; an exception raised by ``source`` (or a
    transform) is re-raised by ``next`` at the position where it occurred. `close` (or leaving a
    ``with`` block, or garbage collection) stops the thread without consuming the rest of
    ``source``. Taking a batch does not wake the thread: it refills at the consumer's pace
    (see `graphbatch._prefetch`). For a `PlanLoader` source, the loader's ``state_dict`` counts
    the batches ``next`` has returned (not those made ahead), so a resume is exact, and a pass
    read to its end moves the loader to the next epoch; a ``set_epoch`` or ``load_state_dict``
    on the loader before the first ``next`` takes effect (the batches made ahead are dropped).
    """

    def __init__(
        self,
        source: Iterable[Any],
        depth: int = 2,
        *,
        pin_memory: bool = False,
        transform: Callable[[Any], Any] | None = None,
    ) -> None:
        depth = as_positive_int(depth, "prefetch depth")  # checked before a pass starts
        if transform is not None and not callable(transform):
            raise InputTypeError(f"transform must be callable, got {type(transform).__name__}")
        if pin_memory:
            transform = _pinned if transform is None else _then(_pinned, transform)
        self._pass: tuple[EpochCursor, int] | None = None
        self._loader: PlanLoader | None = None
        self._args = (depth, transform)
        if isinstance(source, PlanLoader):  # count a batch when the consumer receives it
            self._loader = source
            cursor = source.plan_sampler.cursor
            source, pass_id = source._begin_pass()
            self._pass = (cursor, pass_id)
        super().__init__(source, depth, transform=transform, name=THREAD_NAME)

    def _restart_if_superseded(self) -> None:
        """Before the first batch: a ``set_epoch`` (to another epoch) or ``load_state_dict`` on
        the loader since this prefetcher started its pass supersedes it; stop the thread and
        start the pass that was set."""
        loader = self._loader
        self._loader = None  # only before the first batch
        if loader is None or self._pass is None or not loader.superseded(self._pass[1]):
            return
        self.close()
        source, pass_id = loader._begin_pass()
        self._pass = (self._pass[0], pass_id)
        depth, transform = self._args
        super().__init__(source, depth, transform=transform, name=THREAD_NAME)

    def __next__(self) -> Any:
        if self._loader is not None:
            self._restart_if_superseded()
        try:
            item = super().__next__()
        except StopIteration:
            if self._pass is not None and self.exhausted:
                self._pass[0].finished(self._pass[1])
                self._pass = None
            raise
        if self._pass is not None:
            self._pass[0].consumed(self._pass[1])
        return item


def prefetch(
    source: Iterable[Any],
    depth: int = 2,
    *,
    pin_memory: bool = False,
    transform: Callable[[Any], Any] | None = None,
) -> Prefetcher:
    """``Prefetcher(source, depth, pin_memory=..., transform=...)``: iterate ``source`` in a
    background thread.

    Example::

        for batch in prefetch(loader(ds, strategy="pack-lpf", batch_size=128)):
            batch = batch.to(device, non_blocking=True)
            ...
    """
    return Prefetcher(source, depth, pin_memory=pin_memory, transform=transform)
