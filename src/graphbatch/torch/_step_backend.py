"""The backends of `TrainStep`: how a step is warmed up, captured and replayed.

`StepBackend` is the small interface `TrainStep` drives (the sequencing lives in ``_step.py``
and is tested on CPU with a backend that records its calls). Two implementations:

- `CudaGraphBackend`: warm-up on a side stream (the device's current stream waits for it),
  capture with ``torch.cuda.graph`` on that same stream into the pool `new_pool` made once
  (``torch.cuda.graph_pool_handle``), replay with ``CUDAGraph.replay`` returning a copy of the
  captured loss (the next replay of any graph may overwrite the captured one), and
  ``torch.cuda.set_sync_debug_mode("error")`` as its `sync_check`.
- `EagerBackend` (CPU, or ``capture=False``): a "capture" that records nothing and a "replay"
  that runs the step in Python: the plain (or compiled) step on the same static buffers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from .._errors import InputError

__all__ = ["CudaGraphBackend", "EagerBackend", "StepBackend"]

StepFn = Callable[[], torch.Tensor]


class StepBackend(Protocol):
    """What `TrainStep` needs from a device. ``fn`` runs one whole training step on the static
    buffers of one padded shape and returns its (detached) loss."""

    #: True when a captured step keeps the Python-side values it saw at capture (a CUDA graph):
    #: the step then refuses non-capturable optimizers and checks those values before a replay
    frozen: bool
    #: the device every parameter and batch tensor must be on, or ``None`` (anywhere)
    device: torch.device | None
    #: eager steps per shape before its capture (the checked one, ``check=True``, extra)
    warmup_steps: int

    def new_pool(self) -> Any:
        """The one memory pool every graph of the step shares (made once, at the first capture)."""
        ...

    def sync_check(self) -> AbstractContextManager[Any]:
        """A context that makes every host sync inside it an error."""
        ...

    def warmup(self, fn: StepFn) -> torch.Tensor:
        """Run ``fn`` eagerly (a real step) where warm-up must run; return its loss."""
        ...

    def capture(self, fn: StepFn, pool: Any) -> Any:
        """Record ``fn`` into a graph allocating from ``pool``, without running it."""
        ...

    def replay(self, graph: Any) -> torch.Tensor:
        """Run the captured step once; return its loss (a tensor the caller may keep)."""
        ...


@dataclass
class _EagerGraph:
    fn: StepFn


class EagerBackend:
    """The plain step: nothing captured, each "replay" runs ``fn`` (CPU, or ``capture=False``)."""

    frozen = False
    device: torch.device | None = None

    def __init__(self, warmup_steps: int = 0) -> None:
        self.warmup_steps = warmup_steps

    def new_pool(self) -> Any:
        return None

    def sync_check(self) -> AbstractContextManager[Any]:
        return nullcontext()

    def warmup(self, fn: StepFn) -> torch.Tensor:
        return fn()

    def capture(self, fn: StepFn, pool: Any) -> _EagerGraph:
        return _EagerGraph(fn)

    def replay(self, graph: _EagerGraph) -> torch.Tensor:
        return graph.fn()


@dataclass
class CapturedGraph:
    """One captured step: the ``torch.cuda.CUDAGraph`` and the loss tensor it writes."""

    graph: Any
    loss: torch.Tensor


@contextmanager
def _sync_debug_error() -> Iterator[None]:
    old = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(old)


class CudaGraphBackend:
    """CUDA graphs on ``device``: PyTorch's whole-network capture recipe, one graph per shape.

    ``capture_error_mode`` goes to ``torch.cuda.graph``; the default ``"thread_local"`` lets
    other threads (a loader's pin-memory or prefetch thread) keep working during a capture.
    """

    frozen = True

    def __init__(
        self,
        device: torch.device | str | int | None = None,
        *,
        warmup_steps: int = 2,
        capture_error_mode: str = "thread_local",
    ) -> None:
        if not torch.cuda.is_available():
            raise InputError("CudaGraphBackend needs CUDA (torch.cuda.is_available() is False)")
        dev = torch.device("cuda", torch.cuda.current_device()) if device is None else device
        self.device: torch.device | None = torch.device(dev)
        self.warmup_steps = warmup_steps
        self.capture_error_mode = capture_error_mode
        self._stream: torch.cuda.Stream | None = None

    def _side(self) -> torch.cuda.Stream:
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.device)
        return self._stream

    def new_pool(self) -> Any:
        return torch.cuda.graph_pool_handle()

    def sync_check(self) -> AbstractContextManager[Any]:
        return _sync_debug_error()

    def warmup(self, fn: StepFn) -> torch.Tensor:
        side, current = self._side(), torch.cuda.current_stream(self.device)
        side.wait_stream(current)
        with torch.cuda.stream(side):
            loss = fn()
        current.wait_stream(side)
        loss.record_stream(current)
        return loss

    def capture(self, fn: StepFn, pool: Any) -> CapturedGraph:
        side, current = self._side(), torch.cuda.current_stream(self.device)
        side.wait_stream(current)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(
            graph, pool=pool, stream=side, capture_error_mode=self.capture_error_mode
        ):
            loss = fn()
        current.wait_stream(side)
        return CapturedGraph(graph, loss)

    def replay(self, graph: CapturedGraph) -> torch.Tensor:
        graph.graph.replay()
        return graph.loss.clone()
