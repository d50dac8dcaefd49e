"""What `TrainStep` checks before and after it captures a step (every error a `CaptureError`).

- `host_sync_check`: a ``TorchFunctionMode`` active around forward and loss of one warm-up step
  per shape. It sees every Python-level torch call and refuses the ones that copy a value to the
  host (``.item()``, ``int()``/``float()``/``bool()`` of a tensor, ``.tolist()``, ``.numpy()``,
  ``.cpu()``, ``.to("cpu")`` -- a ``torch.device`` only for a tensor not on CPU --, printing or
  formatting a tensor, ``torch.equal``) or whose output shape depends on the data
  (``nonzero``, ``argwhere``, ``masked_select``, ``unique``, ``bincount``, one-argument
  ``where``, indexing with a bool mask, ``repeat_interleave`` without ``output_size``). It
  runs the same on CPU and CUDA, so a CPU run with ``check=True`` finds these. It does not see
  what C++ kernels do inside (e.g. ``one_hot`` reads its input's range on CPU only), the
  backward pass or the optimizer step; on CUDA the backend adds ``torch.cuda.set_sync_debug_mode``
  ("error") around the whole step, which catches every synchronising call.
- `check_optimizer`: an optimizer with a ``capturable`` option must have it on; of those
  without one only ``torch.optim.SGD`` is graph-safe (the rest keep a step counter on the host).
- `check_devices`: every parameter, buffer and batch tensor on the capture device.
- `FrozenGuard`: what a captured graph keeps from capture time (training mode, the optimizer's
  hyperparameters, its state tensors, the gradient tensors), verified before each replay.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Mapping
from types import FrameType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .._errors import CaptureError

__all__ = [
    "FrozenGuard",
    "check_devices",
    "check_optimizer",
    "host_sync_check",
    "sync_problem",
]

_SYNC = "copies a value to the host (a sync a CUDA graph cannot hold)"
_SHAPE = "gives a shape that depends on the data (a CUDA graph fixes every shape)"
# Python-level torch calls (their ``__name__``) that always sync or change shape with the data
_ALWAYS: dict[str, tuple[str, str]] = {
    "item": (".item()", _SYNC),
    "__int__": ("int(tensor)", _SYNC),
    "__float__": ("float(tensor)", _SYNC),
    "__complex__": ("complex(tensor)", _SYNC),
    "__bool__": ("bool(tensor) (or `if tensor:`)", _SYNC),
    "__index__": ("a tensor used as a Python index", _SYNC),
    "__contains__": ("`x in tensor`", _SYNC),
    "tolist": (".tolist()", _SYNC),
    "numpy": (".numpy()", _SYNC),
    "__array__": ("numpy.asarray(tensor)", _SYNC),
    "cpu": (".cpu()", _SYNC),
    "__repr__": ("printing a tensor", _SYNC),
    "__str__": ("printing a tensor", _SYNC),
    "__format__": ("formatting a tensor", _SYNC),
    "equal": ("torch.equal", _SYNC),
    "allclose": ("torch.allclose", _SYNC),
    "is_nonzero": ("torch.is_nonzero", _SYNC),
    "nonzero": ("torch.nonzero", _SHAPE),
    "argwhere": ("torch.argwhere", _SHAPE),
    "masked_select": ("torch.masked_select", _SHAPE),
    "unique": ("torch.unique", _SHAPE),
    "unique_consecutive": ("torch.unique_consecutive", _SHAPE),
    "bincount": ("torch.bincount", _SHAPE),
}
_HINTS = {
    _SYNC: "keep the value a tensor, or use a size the padded batch fixes "
    "(batch.num_graphs, gt.batch_readout)",
    _SHAPE: "use masks (torch.where(mask, x, 0)) and the padded sizes instead",
}


def _is_bool_tensor(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.dtype in (torch.bool, torch.uint8)


def _to_host(source: Any, target: Any) -> bool:
    """Whether ``source.to(target)`` names the host: the string ``"cpu"``, or a CPU
    ``torch.device`` for a tensor elsewhere (``.to(device=x.device)`` on CPU is no copy)."""
    if isinstance(target, str):
        return target.split(":")[0] == "cpu"
    if isinstance(target, torch.device) and target.type == "cpu":
        return isinstance(source, torch.Tensor) and source.device.type != "cpu"
    return False


def sync_problem(
    name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> tuple[str, str] | None:
    """``(what, why)`` when the torch call ``name(*args, **kwargs)`` cannot be captured, else
    ``None``."""
    if name in _ALWAYS:
        return _ALWAYS[name]
    if name == "where" and len(args) + len(kwargs) == 1:
        return "one-argument torch.where", _SHAPE
    if name == "__getitem__" and len(args) == 2:
        index = args[1]
        parts = index if isinstance(index, tuple | list) else (index,)
        if any(_is_bool_tensor(p) for p in parts):
            return "indexing with a bool mask", _SHAPE
    if name == "repeat_interleave" and kwargs.get("output_size") is None:
        repeats = args[1] if len(args) > 1 else kwargs.get("repeats")
        if isinstance(repeats, torch.Tensor) and repeats.numel() > 1:
            return "repeat_interleave without output_size", _SHAPE
    source = args[0] if args else None
    if name == "to" and any(_to_host(source, a) for a in (*args[1:], kwargs.get("device"))):
        return '.to("cpu")', _SYNC
    return None


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _short(path: str) -> str:
    marker = "site-packages" + os.sep
    if marker in path:
        return path.split(marker, 1)[1]
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") else path


def where_called(frame: FrameType | None) -> str:
    """``file:line in function`` of the innermost frame outside torch and this package's step
    modules (``_step*.py``), starting at ``frame``."""
    while frame is not None:
        name = frame.f_code.co_filename
        own = name.startswith(_HERE) and os.path.basename(name).startswith("_step")
        if not name.startswith(_TORCH_DIR) and not own:
            return f"{_short(name)}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return "an unknown place"


class _HostSyncCheck(TorchFunctionMode):
    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Iterable[type],
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        problem = sync_problem(getattr(func, "__name__", ""), args, kwargs)
        if problem is not None:
            what, why = problem
            raise CaptureError(
                f"TrainStep cannot capture this step: {what} at {where_called(sys._getframe(1))} "
                f"{why}; {_HINTS[why]}"
            )
        return func(*args, **kwargs)


def host_sync_check() -> TorchFunctionMode:
    """A context (``with host_sync_check():``) inside which every torch call that
    `sync_problem` refuses raises `CaptureError` naming the call and where it was made."""
    return _HostSyncCheck()


def check_optimizer(optimizer: Any) -> None:
    """`CaptureError` unless every param group of ``optimizer`` is capturable: its
    ``capturable`` option on, or (no such option) a ``torch.optim.SGD``."""
    name = type(optimizer).__name__
    for i, group in enumerate(optimizer.param_groups):
        if "capturable" in group:
            if not group["capturable"]:
                raise CaptureError(
                    f"optimizer {name} has capturable=False (param_groups[{i}]): build it with "
                    f"capturable=True to capture the step, or pass capture=False"
                )
        elif not isinstance(optimizer, torch.optim.SGD):
            raise CaptureError(
                f"optimizer {name} has no capturable option: a captured step takes SGD or an "
                f"optimizer built with capturable=True (Adam, AdamW, ...); pass capture=False "
                f"to run {name} uncaptured"
            )


def check_devices(
    named: Iterable[tuple[str, torch.Tensor]], device: torch.device, what: str
) -> None:
    """`CaptureError` naming the first tensor of ``named`` not on ``device``."""
    for name, t in named:
        if t.device.type != device.type or (
            device.index is not None and t.device.index not in (None, device.index)
        ):
            raise CaptureError(
                f"{what} {name!r} is on {t.device}, the captured step runs on {device}: move "
                f"it there first (e.g. batch.to({str(device)!r}))"
            )


def _hyper(optimizer: Any) -> list[list[tuple[str, Any]]]:
    return [[(k, v) for k, v in g.items() if k != "params"] for g in optimizer.param_groups]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return a is b
    return bool(a == b)


class FrozenGuard:
    """What the captured graphs of one `TrainStep` keep from capture time, and its check.

    `check` (before each replay) raises `CaptureError` when the model's training mode, a
    hyperparameter of the optimizer (a float ``lr`` a scheduler changed; a tensor ``lr`` is kept
    by identity and may change in place) or its state (``load_state_dict``) changed, and
    re-attaches the gradient tensors the graphs write (``optimizer.zero_grad()`` in user code
    sets them to ``None``; the guard holds them, so their memory is never reused)."""

    def __init__(self, model: torch.nn.Module, optimizer: Any) -> None:
        self.model = model
        self.optimizer = optimizer
        self.grads: dict[torch.Tensor, torch.Tensor] = {}
        self.frozen = False
        self.training = model.training
        self.hyper = _hyper(optimizer)
        self.state = optimizer.state

    def freeze(self) -> None:
        """Take the values `check` compares with (at the first capture)."""
        self.frozen = True
        self.training = self.model.training
        self.hyper = _hyper(self.optimizer)
        self.state = self.optimizer.state

    def keep_grads(self, params: Iterable[torch.Tensor]) -> None:
        """Hold the current gradient tensor of every parameter that has one (first seen)."""
        for p in params:
            if p.grad is not None and p not in self.grads:
                self.grads[p] = p.grad

    def restore_grads(self) -> None:
        """Put the held gradient tensors back where user code replaced or dropped them."""
        for p, g in self.grads.items():
            if p.grad is not g:
                p.grad = g

    def check(self) -> None:
        """`CaptureError` when a value the graphs keep changed since `freeze`; then the held
        gradients are put back."""
        if not self.frozen:
            self.restore_grads()
            return
        if self.model.training != self.training:
            raise CaptureError(
                f"model.training is {self.model.training}, the step was captured with "
                f"{self.training}: call step.reset() after model.train()/eval()"
            )
        if self.optimizer.state is not self.state:
            raise CaptureError(
                "the optimizer's state was replaced (load_state_dict) after capture: call "
                "step.reset() to capture again"
            )
        now = _hyper(self.optimizer)
        if len(now) != len(self.hyper):
            raise CaptureError(
                f"the optimizer has {len(now)} param groups, captured with {len(self.hyper)}: "
                f"call step.reset()"
            )
        for i, (new, old) in enumerate(zip(now, self.hyper, strict=True)):
            for (k, v), (k0, v0) in zip(new, old, strict=False):  # lengths compared below
                if k != k0 or not _same(v, v0):
                    raise CaptureError(
                        f"optimizer param_groups[{i}][{k!r}] is {v!r}, captured with {v0!r}: "
                        f"a captured step keeps Python values; give lr as a tensor updated in "
                        f"place (torch.tensor(lr, device=...)), or call step.reset()"
                    )
            if len(new) != len(old):
                raise CaptureError(
                    f"optimizer param_groups[{i}] has other keys than at capture: call step.reset()"
                )
        self.restore_grads()
