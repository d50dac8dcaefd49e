"""PyTorch / PyG adapter: padded collation, the plan batch sampler, the loader, masked losses.

Import explicitly (``import graphbatch.torch``); ``import graphbatch`` never imports torch.
"""

from .._padlayout import short_padding_batches
from ._collate import PadContext, collate_dict
from ._consistency import (
    PlanMismatchError,
    check_plan_consistency,
    consistency_digests,
    plan_digest,
    sizes_digest,
)
from ._loader import DATALOADER_ARGS, PlanCollater, PlanLoader, loader, read_sizes
from ._loss import masked_mean
from ._norm import (
    MaskedBatchNorm,
    PaddingMasks,
    active_masks,
    batch_edges,
    convert_masked_norm,
    padding_masks,
)
from ._prefetch import Prefetcher, prefetch
from ._preset import Preset
from ._pyg import collate, unpad, unpad_graphs
from ._sampler import (
    PlanBatchSampler,
    PlanGraphSampler,
    PlannedBatch,
    distributed_world,
    plan_fingerprint,
)
from ._schema import FieldSpec, Schema, infer_schema
from ._store_batch import StoreBatcher, StoreCollater, store_batch, store_schema

__all__ = [
    "DATALOADER_ARGS",
    "FieldSpec",
    "MaskedBatchNorm",
    "PadContext",
    "PaddingMasks",
    "PlanBatchSampler",
    "PlanCollater",
    "PlanGraphSampler",
    "PlanLoader",
    "PlanMismatchError",
    "PlannedBatch",
    "Prefetcher",
    "Preset",
    "Schema",
    "StoreBatcher",
    "StoreCollater",
    "active_masks",
    "batch_edges",
    "check_plan_consistency",
    "collate",
    "collate_dict",
    "consistency_digests",
    "convert_masked_norm",
    "distributed_world",
    "infer_schema",
    "loader",
    "masked_mean",
    "padding_masks",
    "plan_digest",
    "plan_fingerprint",
    "prefetch",
    "read_sizes",
    "short_padding_batches",
    "sizes_digest",
    "store_batch",
    "store_schema",
    "unpad",
    "unpad_graphs",
]
