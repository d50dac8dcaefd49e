"""PyTorch / PyG adapter: padded collation, the plan batch sampler, the loader, masked losses,
`TrainStep` (a training step captured as one CUDA graph per padded shape) and a persistent
compile cache with artifacts carried between runs (`compile_cache`).

Import explicitly (``import graphbatch.torch``); ``import graphbatch`` never imports torch.
`GraphStoreDataset(store)` (a graph store's per-graph view, a Dataset of `StoreData`) and
`StoreData` import PyG when first used.
"""

import importlib
from typing import TYPE_CHECKING, Any

from .._errors import CaptureError, PlanMismatchError
from ._collate import collate_dict
from ._collation import Collation
from ._compile_cache import (
    COMPILE_CACHE_ENV,
    CompileCache,
    CompileKey,
    compile_cache,
    compile_key,
    default_compile_cache,
    load_compile_artifacts,
    save_compile_artifacts,
)
from ._consistency import check_plan_consistency
from ._feed import DeviceFeed, device_feed
from ._loader import PlanLoader, loader, read_sizes
from ._loss import masked_mean
from ._masks import batch_edges, padding_masks
from ._norm import MaskedBatchNorm, convert_masked_norm
from ._prefetch import prefetch
from ._preset import Preset, StoreView
from ._pyg import collate, unpad, unpad_graphs
from ._readout import BatchReadout, batch_readout
from ._sampler import PlanBatchSampler, PlanGraphSampler, PlannedBatch
from ._schema import FieldSpec, Schema, infer_schema
from ._step import TrainStep
from ._step_backend import CudaGraphBackend, EagerBackend, StepBackend
from ._step_tree import StepKey
from ._store_batch import StoreBatcher, store_batch, store_schema

__all__ = [
    "BatchReadout",
    "CaptureError",
    "CudaGraphBackend",
    "EagerBackend",
    "Collation",
    "COMPILE_CACHE_ENV",
    "CompileCache",
    "CompileKey",
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
    "StepBackend",
    "StepKey",
    "StoreBatcher",
    "StoreData",
    "StoreView",
    "TrainStep",
    "batch_edges",
    "batch_readout",
    "check_plan_consistency",
    "collate",
    "collate_dict",
    "compile_cache",
    "compile_key",
    "convert_masked_norm",
    "default_compile_cache",
    "device_feed",
    "infer_schema",
    "load_compile_artifacts",
    "loader",
    "masked_mean",
    "padding_masks",
    "prefetch",
    "read_sizes",
    "save_compile_artifacts",
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
