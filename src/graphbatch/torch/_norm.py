"""Normalisation that ignores padding: `MaskedBatchNorm`, `convert_masked_norm`, `padding_masks`.

BatchNorm's training statistics cross every row of a batch, so padding nodes (or edges) would
change the real nodes' outputs and the running statistics. `MaskedBatchNorm` takes its
statistics from real rows only. Its mask comes, in this order, from the ``mask=`` argument, or
from the innermost active `padding_masks` context, which `convert_masked_norm` opens by itself
around every forward call of a model that receives the padded batch (a PyG ``Batch`` or a
`collate_dict` dict, as argument or keyword) -- so a stock model such as OGB's GIN, whose forward
takes the batch, needs no change. A model that takes tensors runs inside
``with gt.padding_masks(batch): model(x, edge_index, ...)``.

Per-graph normalisations need nothing: in the torch layout the padding nodes form their own graph
(the last slot), so PyG's ``LayerNorm(mode="graph")``, ``GraphNorm``, ``InstanceNorm``,
``PairNorm`` and ``MeanSubtractionNorm`` called with ``batch`` compute every real graph's
statistics from its own nodes only (``InstanceNorm``'s optional running statistics excepted: they
average over every graph slot); node-wise ``torch.nn.LayerNorm`` never crosses nodes. Called
without ``batch`` (the whole batch as one graph), they are converted to masked subclasses.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from .._errors import InputError
from ._masks import mask_for_rows, masks_of, pop_masks, push_masks

__all__ = ["MaskedBatchNorm", "convert_masked_norm"]


class MaskedBatchNorm(_BatchNorm):
    """``BatchNorm1d`` over the real rows of a padded batch.

    Input ``[N, C]`` or ``[N, C, L]``; ``mask`` ``[N]`` bool (default: the active padding mask
    with ``N`` rows: node mask first, then edge, then graph; see the module docstring). In
    training mode (or
    without running statistics) the mean and biased variance are taken over real rows only and
    the running statistics are updated from them exactly as ``BatchNorm1d`` does from an
    unpadded batch (unbiased variance, ``momentum``, cumulative average when ``momentum`` is
    None); a batch without real rows leaves them unchanged. Every row, padding included, is
    normalised with those statistics (padding outputs stay finite). In eval mode with running
    statistics it is ``BatchNorm1d``. Same parameters, buffers and ``state_dict`` keys as
    ``BatchNorm1d``.

    ``sync=True`` (what `convert_masked_norm` makes of a ``SyncBatchNorm``): in training, when
    ``torch.distributed`` is initialised, the statistics are those of the real rows of every rank
    of ``process_group`` (sums and counts all-reduced, differentiably), like ``SyncBatchNorm``.
    """

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        *,
        sync: bool = False,
        process_group: Any = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)
        self.sync = bool(sync)
        self.process_group = process_group

    def _world(self) -> int:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return 1
        return dist.get_world_size(self.process_group)

    def _check_input_dim(self, x: torch.Tensor) -> None:
        if x.dim() not in (2, 3):
            raise InputError(f"MaskedBatchNorm expects [N, C] or [N, C, L] input, got {x.dim()}-D")

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        self._check_input_dim(x)
        use_batch_stats = self.training or self.running_mean is None
        if not use_batch_stats:
            return torch.nn.functional.batch_norm(
                x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps
            )
        if mask is None:
            mask = mask_for_rows(x.shape[0])
        if mask is None:
            raise RuntimeError(
                "MaskedBatchNorm in training mode needs the padding mask: pass mask=, run the "
                "model inside `with graphbatch.torch.padding_masks(batch):`, or let "
                "convert_masked_norm's hook find the batch among the model's arguments"
            )
        if mask.dtype != torch.bool or mask.shape != (x.shape[0],):
            raise InputError(
                f"mask must be bool [{x.shape[0]}], got {mask.dtype} {tuple(mask.shape)}"
            )
        dims = [0, *range(2, x.dim())]
        shape = [1, -1] + [1] * (x.dim() - 2)
        m = mask.to(x.dtype).view([-1] + [1] * (x.dim() - 1))
        per_row = 1
        for d in x.shape[2:]:
            per_row *= d
        count = m.sum() * per_row
        if self.sync and self._world() > 1:
            import torch.distributed.nn.functional as dist_fn

            sums = torch.cat([(x * m).sum(dims), (x * x * m).sum(dims), count.view(1)])
            sums = dist_fn.all_reduce(sums, group=self.process_group)
            c = x.shape[1]
            count = sums[2 * c]
            denom = count.clamp(min=1)
            mean = sums[:c] / denom
            var = (sums[c : 2 * c] / denom - mean * mean).clamp(min=0)
            centred = x - mean.view(shape)
        else:
            denom = count.clamp(min=1)
            mean = (x * m).sum(dims) / denom
            centred = x - mean.view(shape)
            var = (centred * centred * m).sum(dims) / denom
        y = centred * torch.rsqrt(var.view(shape) + self.eps)
        if self.affine:
            y = y * self.weight.view(shape) + self.bias.view(shape)
        if self.training and self.track_running_stats:
            rm, rv, nbt = self.running_mean, self.running_var, self.num_batches_tracked
            assert rm is not None and rv is not None and nbt is not None  # tracked
            with torch.no_grad():
                nbt.add_((count > 0).to(nbt.dtype))
                if self.momentum is None:
                    factor = 1.0 / nbt.clamp(min=1).to(x.dtype)
                else:
                    factor = torch.as_tensor(self.momentum, dtype=x.dtype, device=x.device)
                unbiased = var * count / (count - 1).clamp(min=1)
                has = count > 0
                rm.copy_(torch.where(has, rm + factor * (mean.detach() - rm), rm))
                rv.copy_(torch.where(has, rv + factor * (unbiased.detach() - rv), rv))
        return y


def _masks_hook(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    found = None
    for value in list(args) + list(kwargs.values()):
        if not isinstance(value, torch.Tensor):
            found = masks_of(value)
            if found is not None:
                break
    push_masks(found)  # popped by _pop_hook, batch or not
    return None


def _pop_hook(
    module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any
) -> None:
    pop_masks()
    return None


def _pyg_norms() -> dict[type, type]:
    try:
        from ._pyg_norm import MASKED_PYG_NORMS
    except ImportError:  # pragma: no cover - without PyG there is nothing to convert
        return {}
    return MASKED_PYG_NORMS


def _swap(module: torch.nn.Module, pyg: dict[type, type]) -> torch.nn.Module:
    masked_cls = pyg.get(type(module))
    if masked_cls is not None:
        if getattr(module, "track_running_stats", False):
            raise InputError(
                f"{type(module).__name__}(track_running_stats=True) averages its running "
                "statistics over every graph slot, padding included; use "
                "track_running_stats=False or a BatchNorm1d"
            )
        module.__class__ = masked_cls  # same parameters, buffers and state_dict keys
        return module
    sync = isinstance(module, torch.nn.SyncBatchNorm)
    if isinstance(module, (torch.nn.SyncBatchNorm, torch.nn.BatchNorm1d)) and not isinstance(
        module, MaskedBatchNorm
    ):
        new = MaskedBatchNorm(
            module.num_features,
            module.eps,
            module.momentum,
            module.affine,
            module.track_running_stats,
            sync=sync,
            process_group=getattr(module, "process_group", None),
        )
        new.train(module.training)
        with torch.no_grad():
            if module.affine:
                new.weight = module.weight
                new.bias = module.bias
            if module.track_running_stats:
                new.running_mean = module.running_mean
                new.running_var = module.running_var
                new.num_batches_tracked = module.num_batches_tracked
        if hasattr(module, "qconfig"):
            new.qconfig = module.qconfig
        return new
    for name, child in module.named_children():
        new_child = _swap(child, pyg)
        if new_child is not child:
            setattr(module, name, new_child)
    return module


def convert_masked_norm(module: torch.nn.Module, *, hook: bool = True) -> torch.nn.Module:
    """Replace every ``BatchNorm1d`` (and ``SyncBatchNorm``, by a synchronised one) in ``module``
    by a `MaskedBatchNorm`
    sharing its parameters and buffers (like ``SyncBatchNorm.convert_sync_batchnorm``); returns
    the converted module (a new object only when ``module`` itself is a BatchNorm).

    With ``hook`` (default) the returned module gets a forward pre-hook that, when one of its
    arguments is a padded batch (has ``node_mask``), makes that batch's masks active for the
    call, so the user's forward is unchanged. (PyG's ``BatchNorm`` wraps a ``BatchNorm1d`` and
    is converted through it.) PyG's ``LayerNorm``, ``GraphNorm``, ``PairNorm`` and
    ``InstanceNorm`` become their masked subclasses (`graphbatch.torch._pyg_norm`): unchanged when
    called with ``batch`` (already padding-safe), statistics over real nodes when called without.
    An ``InstanceNorm`` with running statistics raises ``ValueError``: no masked variant exists,
    and silently changing it would change the model.
    """
    out = _swap(module, _pyg_norms())
    if hook and not getattr(out, "_graphbatch_hooked", False):
        out.register_forward_pre_hook(_masks_hook, with_kwargs=True)
        out.register_forward_hook(_pop_hook, with_kwargs=True, always_call=True)
        # torch types Module attributes as Tensor | Module; a plain flag is allowed
        out._graphbatch_hooked = True  # type: ignore[assignment]
    return out
