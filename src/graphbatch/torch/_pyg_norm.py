"""PyG's per-graph normalisations, masked when called without ``batch``.

Called with ``batch``, PyG's ``LayerNorm(mode="graph")``, ``GraphNorm``, ``PairNorm`` and
``InstanceNorm`` already ignore padding (the padding nodes form their own graph, the last slot).
Called *without* ``batch`` they treat the whole batch as one graph, padding included; the
subclasses here (swapped in by `graphbatch.torch.convert_masked_norm`) then take the statistics
from the real nodes only, by treating real nodes as graph 0 and padding nodes as graph 1, with the
active padding mask (see `graphbatch.torch.padding_masks`). Imported only when PyG is.
"""

from __future__ import annotations

import torch
from torch_geometric.nn.norm import GraphNorm, InstanceNorm, LayerNorm, PairNorm

from ._masks import mask_for_rows

__all__ = [
    "MaskedGraphNorm",
    "MaskedInstanceNorm",
    "MaskedLayerNorm",
    "MaskedPairNorm",
    "MASKED_PYG_NORMS",
]


class _WholeBatchMasked(torch.nn.Module):
    def forward(
        self, x: torch.Tensor, batch: torch.Tensor | None = None, batch_size: int | None = None
    ) -> torch.Tensor:
        if batch is None:
            mask = mask_for_rows(x.shape[0])
            if mask is not None:
                batch, batch_size = (~mask).long(), 2
        return super().forward(x, batch, batch_size)


class MaskedLayerNorm(_WholeBatchMasked, LayerNorm):
    """PyG ``LayerNorm``; without ``batch``, statistics over the real nodes only."""


class MaskedGraphNorm(_WholeBatchMasked, GraphNorm):
    """PyG ``GraphNorm``; without ``batch``, statistics over the real nodes only."""


class MaskedPairNorm(_WholeBatchMasked, PairNorm):
    """PyG ``PairNorm``; without ``batch``, statistics over the real nodes only."""


class MaskedInstanceNorm(_WholeBatchMasked, InstanceNorm):
    """PyG ``InstanceNorm`` (without running statistics); without ``batch``, statistics over the
    real nodes only."""


#: stock class -> masked subclass (same parameters, buffers and state_dict keys)
MASKED_PYG_NORMS: dict[type, type] = {
    LayerNorm: MaskedLayerNorm,
    GraphNorm: MaskedGraphNorm,
    PairNorm: MaskedPairNorm,
    InstanceNorm: MaskedInstanceNorm,
}
