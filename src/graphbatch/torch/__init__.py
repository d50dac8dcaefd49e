"""PyTorch / PyG adapter: padded collation, the plan batch sampler, the loader, masked losses.

Import explicitly (``import graphbatch.torch``); ``import graphbatch`` never imports torch.
`GraphStoreDataset` and `StoreData` (a graph store's per-graph view, ``store.to_torch()``)
import PyG when first used.
"""

import importlib
from typing import TYPE_CHECKING, Any

from .._errors import PlanMismatchError
from ._collate import collate_dict
from ._consistency import check_plan_consistency
from ._feed import DeviceFeed, device_feed
from ._loader import PlanLoader, loader, read_sizes
from ._loss import masked_mean
from ._masks import batch_edges, padding_masks
from ._norm import MaskedBatchNorm, convert_masked_norm
from ._prefetch import prefetch
from ._preset import Preset, StoreView
from ._pyg import collate, unpad, unpad_graphs
from ._sampler import PlanBatchSampler, PlanGraphSampler, PlannedBatch
from ._schema import FieldSpec, Schema, infer_schema
from ._store_batch import StoreBatcher, store_batch, store_schema

__all__ = [
    "DeviceFeed",
    "FieldSpec",
    "GraphStoreDataset",
    "MaskedBatchNorm",
    "PlanBatchSampler",
    "PlanGraphSampler",
    "PlanLoader",
    "PlanMismatchError",
    "PlannedBatch",
    "Preset",
    "Schema",
    "StoreBatcher",
    "StoreData",
    "StoreView",
    "batch_edges",
    "check_plan_consistency",
    "collate",
    "collate_dict",
    "convert_masked_norm",
    "device_feed",
    "infer_schema",
    "loader",
    "masked_mean",
    "padding_masks",
    "prefetch",
    "read_sizes",
    "store_batch",
    "store_schema",
    "unpad",
    "unpad_graphs",
]

if TYPE_CHECKING:  # for type checkers; at run time imported on first use (below)
    from ._store_data import GraphStoreDataset, StoreData

_LAZY = {"GraphStoreDataset": "._store_data", "StoreData": "._store_data"}


def __getattr__(name: str) -> Any:
    """`GraphStoreDataset` and `StoreData`, imported on first use (they import PyG)."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
