"""Common interface of the reference models: padded-batch tensors in, one value per graph out."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["GraphRegressor", "INPUT_FIELDS", "batch_inputs", "count_parameters", "unpadded_inputs"]

#: Attributes a padded batch must carry (the names of `graphbatch.torch`'s PyG ``Batch``).
INPUT_FIELDS = ("z", "pos", "edge_index", "batch", "node_mask", "edge_mask", "num_graphs")


class GraphRegressor(nn.Module):
    """Base of the models: ``forward(z, pos, edge_index, batch, node_mask, edge_mask, num_graphs)``.

    Shapes: ``z`` long ``[N]`` (atomic numbers), ``pos`` float ``[N, 3]`` (Å), ``edge_index``
    long ``[2, E]`` (sender row 0, receiver row 1), ``batch`` long ``[N]`` (graph of each node,
    ``< num_graphs``), ``node_mask`` bool ``[N]``, ``edge_mask`` bool ``[E]``, ``num_graphs`` a
    Python int (the padded graph count). Returns float ``[num_graphs]``; entries of graphs without
    real nodes are 0. Padding nodes and edges contribute nothing to outputs or gradients.
    """

    def forward(
        self,
        z: Tensor,
        pos: Tensor,
        edge_index: Tensor,
        batch: Tensor,
        node_mask: Tensor,
        edge_mask: Tensor,
        num_graphs: int,
    ) -> Tensor:
        raise NotImplementedError


def batch_inputs(batch: Any) -> dict[str, Any]:
    """Keyword arguments for a model call from any object carrying `INPUT_FIELDS` as attributes.

    ``model(**batch_inputs(b))`` works for eager and compiled models alike. ``num_graphs`` is
    converted to a Python int (a static shape under ``torch.compile``).
    """
    missing = [f for f in INPUT_FIELDS if getattr(batch, f, None) is None]
    if missing:
        raise AttributeError(
            f"batch of type {type(batch).__name__} lacks model input(s) {', '.join(missing)}"
        )
    out = {f: getattr(batch, f) for f in INPUT_FIELDS}
    out["num_graphs"] = int(out["num_graphs"])
    return out


def unpadded_inputs(
    z: Tensor, pos: Tensor, edge_index: Tensor, batch: Tensor, num_graphs: int
) -> dict[str, Any]:
    """Model inputs for an ordinary (unpadded) batch: all-true masks."""
    return {
        "z": z,
        "pos": pos,
        "edge_index": edge_index,
        "batch": batch,
        "node_mask": torch.ones(z.shape[0], dtype=torch.bool, device=z.device),
        "edge_mask": torch.ones(edge_index.shape[1], dtype=torch.bool, device=z.device),
        "num_graphs": int(num_graphs),
    }


def count_parameters(model: nn.Module, trainable_only: bool = True) -> int:
    """Number of (trainable) scalar parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
