"""How a bench run trains (``--step``) and how its batches reach the device (``--feed``).

``captured``: `graphbatch.torch.TrainStep` (one CUDA graph per padded shape on CUDA; on CPU its
`EagerBackend`, the plain step on the same static buffers). ``device``: `graphbatch.torch.
DeviceFeed` over the run's batch source (on a store with DataLoader workers, the workers' slots;
on CPU the source's batches unchanged). The runs of `graphbatch.bench._run` and
`graphbatch.bench._mace` build both through these helpers.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from typing import Any

from ._config import BenchConfig

__all__ = [
    "device_fed",
    "feed_mode",
    "make_train_step",
    "new_captures",
    "optimizer",
    "step_mode",
]

#: ``--compile-mode`` values that make CUDA graphs of their own (a captured step refuses them).
_GRAPHING_MODES = ("reduce-overhead", "max-autotune")


def step_mode(cfg: BenchConfig, padded: bool) -> str:
    """``"captured"`` or ``"loop"``: how a run trains. Baselines (unpadded) always loop; ``auto``
    captures padded runs on CUDA unless ``cfg.compile_mode`` makes CUDA graphs itself."""
    if not padded:
        return "loop"
    if cfg.step != "auto":
        return cfg.step
    if cfg.device == "cuda" and cfg.compile_mode not in _GRAPHING_MODES:
        return "captured"
    return "loop"


def feed_mode(cfg: BenchConfig, padded: bool) -> str:
    """``"device"``, ``"prefetch"`` (the loader's batches made ahead by a thread) or
    ``"loader"``: how a run's batches reach the device. Baselines never take the device feed;
    ``auto`` feeds padded runs through `DeviceFeed` on CUDA without ``--prefetch``."""
    device = padded and (
        cfg.feed == "device" or (cfg.feed == "auto" and cfg.device == "cuda" and not cfg.prefetch)
    )
    if device:
        return "device"
    return "prefetch" if cfg.prefetch else "loader"


def device_fed(
    source: Iterable[Any], device: Any, fix: Callable[[Any], Any] | None = None
) -> Generator[Any, None, None]:
    """``source``'s batches through `graphbatch.torch.DeviceFeed` on ``device``, pass after pass
    (a `PlanLoader` moves to its next epoch at the end of each; an endless generator is one
    pass), each batch given to ``fix`` first (e.g. the bench target) when given. A generator, so
    the feed starts at the first step and stops when the run closes it."""
    from ..torch import DeviceFeed

    feed = DeviceFeed(source, device)
    while True:
        seen = 0
        with iter(feed) as it:
            for b in it:
                seen += 1
                yield b if fix is None else fix(b)
        if not seen:  # an exhausted source: stop instead of spinning
            return


def make_train_step(
    model: Any, loss_fn: Callable[[Any, Any], Any], opt: Any, forward: Callable
) -> Any:
    """`graphbatch.torch.TrainStep` of the run. With ``--compile``, ``forward`` calls the run's
    own ``torch.compile``d model (full graph, one code object per run); the first warm-up step
    compiles, on the side stream, before the capture.

    The checked warm-up step is off (``check=False``): the bench's SchNet (``pair_edges``)
    validates its edge pairing on the host in eager steps -- the warm-up steps, skipped while a
    graph is captured -- which the check would refuse as a host sync; a sync left inside the
    captured step still fails its capture, as a one-line `CaptureError`."""
    from ..torch import TrainStep

    return TrainStep(model, loss_fn, opt, forward=forward, check=False)


def new_captures(train_step: Any) -> int:
    """Graphs captured so far by ``train_step`` (0 when it captures nothing: CPU)."""
    if train_step is None or not train_step.backend.frozen:
        return 0
    return len(train_step.graphs)


def optimizer(params: Any, lr: float, captured_on_cuda: bool) -> Any:
    """The bench's Adam; ``capturable`` when a CUDA graph will hold its step."""
    import torch

    if captured_on_cuda:
        return torch.optim.Adam(params, lr=lr, capturable=True)
    return torch.optim.Adam(params, lr=lr)
