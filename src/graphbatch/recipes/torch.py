"""The torch side of the reference recipe: a reference model (``graphbatch.models``) with the
bench's hyperparameters and initial weights, its compilation for padded batches (one
compilation per padded shape, counted per model) and the padded regression loss."""

from __future__ import annotations

import itertools
import types
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from . import CUTOFF, model_kwargs

if TYPE_CHECKING:
    import torch

__all__ = ["compile_fresh", "compile_padded", "padded_mse", "reference_model"]


def reference_model(
    name: str, *, cutoff: float = CUTOFF, seed: int = 0, options: Mapping[str, Any] | None = None
) -> torch.nn.Module:
    """The reference model ``name`` with `graphbatch.recipes.model_kwargs` (``cutoff`` in Å,
    ``options`` over the defaults) and initial weights from ``torch.manual_seed(seed)`` (the
    same weights for the same seed); on the CPU."""
    import torch

    from ..models import build_model

    torch.manual_seed(seed)
    return build_model(name, **model_kwargs(name, cutoff=cutoff, options=options))


_COMPILE_IDS = itertools.count()


def compile_fresh(model: Callable[..., Any], **compile_kwargs: Any) -> Callable[..., Any]:
    """``torch.compile(**compile_kwargs)`` of a wrapper of ``model`` whose code object is new.

    Dynamo caches compiled code per code object; a fresh code object per call keeps models that
    are stepped in turn (interleaved) from sharing or evicting each other's compilations, so
    each one's compilation count is its own."""
    import torch

    def call(*args: Any, **kw: Any) -> Any:
        return model(*args, **kw)

    code = call.__code__.replace(co_name=f"bench_run_{next(_COMPILE_IDS)}")
    fn = types.FunctionType(
        code, call.__globals__, code.co_name, call.__defaults__, call.__closure__
    )
    return torch.compile(fn, **compile_kwargs)


def compile_padded(
    model: Callable[..., Any], *, backend: str = "inductor", mode: str | None = None
) -> Callable[..., Any]:
    """``model`` compiled for padded batches: `compile_fresh` with ``dynamic=False,
    fullgraph=True`` and the compile ``backend`` and ``mode`` (one compilation per padded
    shape)."""
    return compile_fresh(model, dynamic=False, fullgraph=True, backend=backend, mode=mode)


def padded_mse(out: torch.Tensor, target: torch.Tensor, graph_mask: torch.Tensor) -> torch.Tensor:
    """Mean squared error of one value per graph slot over the real graphs (``graph_mask``);
    padding slots contribute nothing to the loss or its gradient."""
    from ..torch import masked_mean

    return masked_mean((out - target) ** 2, graph_mask)
