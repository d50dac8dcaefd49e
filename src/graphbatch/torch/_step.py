"""`TrainStep`: forward, loss, backward and optimizer step, captured whole as one CUDA graph per
padded shape, or run as the plain (or ``torch.compile``d) step on CPU. See
docs/training-step.md.

Design: the object splits into parts that need no GPU and a small device interface, so the CPU
test suite covers all of its logic.

- **Batch -> static buffers** (``_step_tree.py``): a batch (PyG ``Batch``, dict, nested
  lists/tuples of tensors) is flattened into named tensors. Its `StepKey` (every tensor's name,
  shape, dtype, device) selects the cache entry; the first batch of a key gives that entry's
  static buffers (clones); every batch is ``copy_``'d into its entry's buffers, and the step
  always runs on them, on CPU as on CUDA. Values that are not tensors are those of the first
  batch of each shape.
- **Per-shape sequencing** (here): each entry runs ``warmup`` eager steps (the first of them,
  with ``check``, under the capture checks), is then captured once, and replays from then on.
  All captures of one `TrainStep` share one memory pool (``backend.new_pool()``, made at the
  first capture): a plan of K shapes gives K graphs in one pool. Graphs replay one at a time on
  one stream and each replay's loss is copied out before the next, so the graphs may share
  their temporaries in any order; parameters, gradients (kept by ``zero_grad(set_to_none=
  False)`` inside the step) and optimizer state are the same tensors in every graph.
- **Backend** (``_step_backend.py``, the `StepBackend` protocol): ``warmup`` (a side stream on
  CUDA), ``capture``, ``replay``, ``new_pool``, ``sync_check``. `CudaGraphBackend` follows
  PyTorch's whole-network capture recipe; `EagerBackend` (CPU, ``capture=False``) "captures"
  nothing and replays by running the step, so CPU runs the same sequencing on the same static
  buffers with the plain step's results. Tests drive the sequencing with a backend that
  records its calls.
- **Checks** (``_step_check.py``): at construction (capturing backends) the optimizer must be
  capturable and every parameter/buffer on the device; each new shape's batch tensors must be
  on the device; the checked warm-up runs forward and loss under a torch-function mode that
  refuses host syncs and data-dependent shapes (on every device) and, on CUDA, the whole step
  under ``torch.cuda.set_sync_debug_mode("error")``; before each replay `FrozenGuard` checks
  the Python values a graph keeps (training mode, optimizer hyperparameters and state) and
  re-attaches the gradient tensors. Every failure is a one-line `CaptureError`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from .._errors import CaptureError, GraphbatchError, InputError, InputTypeError
from ._step_backend import CudaGraphBackend, EagerBackend, StepBackend
from ._step_check import (
    FrozenGuard,
    check_devices,
    check_optimizer,
    host_sync_check,
    where_called,
)
from ._step_tree import StaticBatch, StepKey, flatten, step_key

__all__ = ["TrainStep"]

LossFn = Callable[[Any, Any], torch.Tensor]
ForwardFn = Callable[[torch.nn.Module, Any], Any]


def call_model(model: torch.nn.Module, batch: Any) -> Any:
    """The default ``forward``: ``model(batch)``."""
    return model(batch)


@dataclass
class _Entry:
    """One padded shape: its static buffers, warm-up steps run, and its graph once captured."""

    key: StepKey
    static: StaticBatch
    warmups: int = 0
    graph: Any = None


def _model_device(model: torch.nn.Module) -> torch.device:
    for t in (*model.parameters(), *model.buffers()):
        return t.device
    return torch.device("cpu")


def _default_backend(model: torch.nn.Module, capture: bool | None) -> StepBackend:
    device = _model_device(model)
    if capture is None:
        capture = device.type == "cuda"
    if not capture:
        return EagerBackend()
    if device.type != "cuda" or not torch.cuda.is_available():
        raise InputError(
            f"capture=True needs the model on a CUDA device, it is on {device}: move it with "
            f"model.to('cuda'), or leave capture=None to capture only where CUDA is"
        )
    return CudaGraphBackend(device)


def _compiled(fn: Callable[[Any], torch.Tensor], spec: Any, frozen: bool) -> Any:
    if spec is False or spec is None:
        return None
    if spec is True:
        kwargs: dict[str, Any] = {"dynamic": False}
    elif isinstance(spec, Mapping):
        kwargs = dict(spec)
    else:
        raise InputTypeError(
            f"compile must be a bool or a dict of torch.compile arguments, got "
            f"{type(spec).__name__}"
        )
    if frozen and kwargs.get("mode") in ("reduce-overhead", "max-autotune"):
        raise InputError(
            f"compile mode {kwargs['mode']!r} makes CUDA graphs of its own; a captured step "
            f"takes the default mode (or 'max-autotune-no-cudagraphs')"
        )
    return torch.compile(fn, **kwargs)


def _tensor_options(optimizer: Any) -> list[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` of every tensor hyperparameter (e.g. a tensor ``lr``): a graph reads a
    CPU one once, at capture."""
    return [
        (f"param_groups[{i}][{k!r}]", v)
        for i, g in enumerate(optimizer.param_groups)
        for k, v in g.items()
        if k != "params" and isinstance(v, torch.Tensor)
    ]


def _check_loss(loss: Any) -> torch.Tensor:
    if not isinstance(loss, torch.Tensor):
        raise InputTypeError(f"loss_fn must return a tensor, got {type(loss).__name__}")
    if loss.numel() != 1:
        raise InputError(f"loss_fn must return one value, got a tensor of shape {list(loss.shape)}")
    return loss


def _sync_error(exc: RuntimeError) -> CaptureError:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = where_called(tb.tb_frame if tb is not None else None)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return CaptureError(
        f"TrainStep cannot capture this step: a host sync at {where} (CUDA sync debug mode: "
        f"{first}); keep values on the device and sizes fixed by the padded batch"
    )


class TrainStep:
    """One training step -- ``forward``, ``loss_fn``, backward, ``optimizer.step()`` -- as a
    callable: ``loss = step(batch)``.

    On CUDA (``capture=None`` and the model on a CUDA device, or ``capture=True``) each distinct
    padded shape of batch (`StepKey`) gets one CUDA graph: ``warmup`` eager steps on a side
    stream (the first checked for host syncs and data-dependent shapes, ``check``), one capture,
    then replays into which each batch is copied; all graphs share one memory pool. The loss
    comes back as a device tensor (no host sync). Elsewhere (CPU, or ``capture=False``) the same
    object runs the plain step, or the ``torch.compile``d one (``compile=True`` or a dict of
    ``torch.compile`` arguments; default ``dynamic=False``), on the same static buffers, with
    the plain loop's results.

    - ``loss_fn(output, batch) -> tensor`` of one value; ``forward(model, batch) -> output``
      (default ``model(batch)``), e.g. ``lambda m, b: m(b.z, b.pos, b.batch)``.
    - ``optimizer``: over the parameters to train; captured steps need ``capturable=True``
      (Adam, AdamW, ...) or SGD. Gradients are zeroed in place, never set to ``None``.
    - ``warmup``: eager steps per shape before its capture (default: the backend's, 2 on CUDA;
      0 on CPU), plus one checked step when ``check`` (default: on when capturing).
    - ``backend``: a `StepBackend` in place of the one ``capture`` selects.

    Every batch tensor must be on the model's device when capturing. Raises `CaptureError`
    (one line) for what a CUDA graph cannot hold; see docs/training-step.md.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        loss_fn: LossFn,
        optimizer: torch.optim.Optimizer,
        *,
        forward: ForwardFn | None = None,
        capture: bool | None = None,
        compile: bool | Mapping[str, Any] = False,
        warmup: int | None = None,
        check: bool | None = None,
        backend: StepBackend | None = None,
    ) -> None:
        if not isinstance(model, torch.nn.Module):
            raise InputTypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        for name, fn in (("loss_fn", loss_fn), ("forward", forward)):
            if fn is not None and not callable(fn):
                raise InputTypeError(f"{name} must be callable, got {type(fn).__name__}")
        if not all(hasattr(optimizer, a) for a in ("param_groups", "step", "zero_grad")):
            raise InputTypeError(
                f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}"
            )
        if backend is not None and capture is not None:
            raise InputError("pass capture= or backend=, not both")
        self.model = model
        self.loss_fn = loss_fn
        self.optimizer = optimizer
        self.forward = forward if forward is not None else call_model
        self.backend: StepBackend = (
            backend if backend is not None else _default_backend(model, capture)
        )
        self.check = self.backend.frozen if check is None else bool(check)
        self._compiled = _compiled(self._loss_of, compile, self.backend.frozen)
        self._warmup = self._warmup_steps(warmup)
        self._params = [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad]
        self._entries: dict[StepKey, _Entry] = {}
        self._pool: Any = None
        self._guard = FrozenGuard(model, optimizer) if self.backend.frozen else None
        if self.backend.frozen:
            check_optimizer(optimizer)
        if self.backend.device is not None:
            check_devices(model.named_parameters(), self.backend.device, "parameter")
            check_devices(model.named_buffers(), self.backend.device, "buffer")
            check_devices(_tensor_options(optimizer), self.backend.device, "optimizer option")

    def _warmup_steps(self, warmup: int | None) -> int:
        if warmup is None:
            steps = self.backend.warmup_steps
        elif isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
            raise InputError(f"warmup must be an integer >= 0, got {warmup!r}")
        else:
            steps = warmup
        if self._compiled is not None and self.backend.frozen:
            steps = max(steps, 1)  # compile before the capture, never inside it
        return steps + int(self.check)

    # ---------------------------------------------------------------------------- the step
    def __call__(self, batch: Any) -> torch.Tensor:
        """Train on ``batch``; return its loss (detached, on the model's device)."""
        spec, names, leaves = flatten(batch)
        key = step_key(names, leaves)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._new_entry(key, spec, names, leaves)
        entry.static.fill(leaves)
        if entry.graph is not None:
            if self._guard is not None:
                self._guard.check()
            return self.backend.replay(entry.graph)
        if entry.warmups < self._warmup:
            return self._warm(entry)
        self._capture(entry)
        return self.backend.replay(entry.graph)

    def _new_entry(
        self, key: StepKey, spec: Any, names: list[str], leaves: list[torch.Tensor]
    ) -> _Entry:
        if not leaves:
            raise InputError("the batch holds no tensor: a step needs tensors to copy in")
        if self.backend.device is not None:
            check_devices(zip(names, leaves, strict=True), self.backend.device, "batch tensor")
        entry = _Entry(key, StaticBatch.of(spec, names, leaves))
        self._entries[key] = entry
        return entry

    def _loss_of(self, batch: Any) -> torch.Tensor:
        return self.loss_fn(self.forward(self.model, batch), batch)

    def _run(self, entry: _Entry, checked: bool) -> torch.Tensor:
        """One whole step on ``entry``'s buffers; the function every backend runs."""
        batch = entry.static.batch()
        self.optimizer.zero_grad(set_to_none=False)
        with self.backend.sync_check() if checked else nullcontext():
            if checked:
                with host_sync_check():
                    loss = _check_loss(self._loss_of(batch))
            else:
                loss_of = self._compiled if self._compiled is not None else self._loss_of
                loss = _check_loss(loss_of(batch))
            torch.autograd.backward(loss, inputs=self._params or None)
            self.optimizer.step()
        return loss.detach()

    def _warm(self, entry: _Entry) -> torch.Tensor:
        checked = self.check and entry.warmups == 0
        if self._guard is not None:
            self._guard.restore_grads()
        try:
            loss = self.backend.warmup(partial(self._run, entry, checked))
        except RuntimeError as exc:
            if checked and not isinstance(exc, GraphbatchError) and "synchroniz" in str(exc):
                raise _sync_error(exc) from exc
            raise
        entry.warmups += 1
        if self._guard is not None:
            self._guard.keep_grads(self._params)
        return loss

    def _capture(self, entry: _Entry) -> None:
        if self._pool is None:
            self._pool = self.backend.new_pool()
        if self._guard is not None:
            if not self._guard.frozen:
                self._guard.freeze()
            self._guard.restore_grads()
        try:
            entry.graph = self.backend.capture(partial(self._run, entry, False), self._pool)
        except GraphbatchError:
            raise
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [""])[0]
            raise CaptureError(
                f"capturing the step for shape ({entry.key.describe()}) failed: "
                f"{type(exc).__name__}: {first}"
            ) from exc
        if self._guard is not None:
            self._guard.keep_grads(self._params)

    # ------------------------------------------------------------------------- inspection
    def reset(self) -> None:
        """Forget every shape, graph and the pool: the next batches warm up and capture anew
        (after ``model.train()``/``eval()``, a new float ``lr``, ``load_state_dict``)."""
        self._entries.clear()
        self._pool = None
        if self._guard is not None:
            self._guard = FrozenGuard(self.model, self.optimizer)

    @property
    def shapes(self) -> tuple[StepKey, ...]:
        """The padded shapes seen so far (one cache entry each), in order of first sight."""
        return tuple(self._entries)

    @property
    def graphs(self) -> dict[StepKey, Any]:
        """The captured graph of every shape that has one (the backend's objects)."""
        return {k: e.graph for k, e in self._entries.items() if e.graph is not None}

    @property
    def pool(self) -> Any:
        """The memory pool all graphs share (``None`` before the first capture, or eager)."""
        return self._pool

    @property
    def warmup_steps(self) -> int:
        """Eager steps each shape runs before its capture (the checked one included)."""
        return self._warmup

    def __repr__(self) -> str:
        def count(n: int, what: str) -> str:
            return f"{n} {what}" + ("" if n == 1 else "s")

        return (
            f"TrainStep({type(self.backend).__name__}, {count(len(self._entries), 'shape')}, "
            f"{count(len(self.graphs), 'graph')}, warmup={self._warmup}, check={self.check})"
        )
