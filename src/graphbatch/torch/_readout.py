"""`batch_readout`: a PyG readout (an ``Aggregation``) with one output row per graph slot of the
active padded batch, so that reading out never asks the device how many graphs there are.

PyG's aggregations called without ``dim_size`` (SchNet's ``self.readout(h, batch, dim=0)``,
``global_add_pool(x, batch)``) compute it as ``int(batch.max()) + 1``: a host sync, which a CUDA
graph cannot hold (`graphbatch.torch.TrainStep`). A padded batch fixes the count (its graph
slots, ``len(batch.graph_mask)``), and the innermost `padding_masks` context knows it.
"""

from __future__ import annotations

from typing import Any

import torch

from .._errors import InputTypeError
from ._masks import active_masks

__all__ = ["BatchReadout", "batch_readout"]


class BatchReadout(torch.nn.Module):
    """Calls ``aggr(x, index, ..., dim_size=G)`` with ``G`` the graph slots of the active batch
    (`padding_masks`) when the caller gives no ``dim_size``; the output has ``G`` rows along
    ``dim``, the same rows PyG's own inference gives on a graphbatch batch (whose last graph slot
    always owns a padding node), without the host sync."""

    def __init__(self, aggr: torch.nn.Module) -> None:
        super().__init__()
        if not isinstance(aggr, torch.nn.Module):
            raise InputTypeError(
                f"batch_readout needs a torch.nn.Module aggregation (e.g. SchNet's "
                f"model.readout), got {type(aggr).__name__}"
            )
        self.aggr = aggr

    def forward(
        self,
        x: torch.Tensor,
        index: torch.Tensor | None = None,
        ptr: torch.Tensor | None = None,
        dim_size: int | None = None,
        dim: int = -2,
        **kwargs: Any,
    ) -> torch.Tensor:
        """``aggr(x, index, ptr=ptr, dim_size=dim_size or the active batch's graph slots,
        dim=dim)``; outside a `padding_masks` context without ``dim_size``: ``RuntimeError``."""
        if dim_size is None and ptr is None:
            masks = active_masks()
            if masks is None:
                raise RuntimeError(
                    "batch_readout needs an active batch: call the model inside "
                    "`with graphbatch.torch.padding_masks(batch):` (or pass dim_size=)"
                )
            dim_size = int(masks.graph.shape[0])
        out: torch.Tensor = self.aggr(x, index, ptr=ptr, dim_size=dim_size, dim=dim, **kwargs)
        return out


def batch_readout(aggr: torch.nn.Module) -> BatchReadout:
    """``aggr`` (a PyG ``Aggregation``, e.g. SchNet's ``model.readout``) reading out one row per
    graph slot of the active padded batch, without a host sync (a `BatchReadout`).

    For example::

        model = SchNet(..., interaction_graph=gt.batch_edges)
        model.readout = gt.batch_readout(model.readout)
        with gt.padding_masks(batch):
            out = model(batch.z, batch.pos, batch.batch)     # [batch.num_graphs, 1]
    """
    return BatchReadout(aggr)
