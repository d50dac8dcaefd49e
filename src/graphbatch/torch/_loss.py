"""Masked losses normalised by the global number of real graphs (or nodes)."""

from __future__ import annotations

from typing import Any

import torch

from .._errors import InputError, InputTypeError

__all__ = ["masked_mean"]


def masked_mean(
    values: torch.Tensor,
    mask: torch.Tensor,
    *,
    distributed: bool | None = None,
    group: Any = None,
) -> torch.Tensor:
    """Mean of ``values`` over the real entries of every rank, ready for DDP's gradient averaging.

    ``values`` is ``[n, ...]`` (e.g. a per-graph loss ``[n_graph]`` or ``[n_graph, k]``; trailing
    dimensions are averaged first), ``mask`` is ``[n]`` bool (``batch.graph_mask`` or
    ``node_mask``). Padding entries are excluded with ``torch.where`` (a NaN there does not leak).
    Single process: ``sum(real values) / number of real entries``. Distributed (default: when
    ``torch.distributed`` is initialised): the count is all-reduced over ``group`` and the result
    is multiplied by the world size, so that after DDP averages gradients over ranks the update
    is that of ``sum over all ranks / global count`` -- a rank holding only padding contributes
    zero, never a biased mean. With no real entry anywhere the result is 0 (still
    differentiable).
    """
    if mask.dtype != torch.bool:
        raise InputTypeError(f"mask must be a bool tensor, got {mask.dtype}")
    if mask.dim() != 1 or values.dim() < 1 or values.shape[0] != mask.shape[0]:
        raise InputError(
            f"values {tuple(values.shape)} and mask {tuple(mask.shape)} must share their first "
            "dimension, with a 1-D mask"
        )
    per_entry = values.reshape(values.shape[0], -1).mean(dim=1) if values.dim() > 1 else values
    total = torch.where(
        mask, per_entry, torch.zeros((), dtype=per_entry.dtype, device=per_entry.device)
    ).sum()
    count = mask.sum().to(per_entry.dtype)
    scale = 1.0
    if distributed is None:
        import torch.distributed as dist

        distributed = dist.is_available() and dist.is_initialized()
    if distributed:
        import torch.distributed as dist

        count = count.detach().clone()
        dist.all_reduce(count, op=dist.ReduceOp.SUM, group=group)
        scale = float(dist.get_world_size(group))
    return total * scale / count.clamp(min=1)
