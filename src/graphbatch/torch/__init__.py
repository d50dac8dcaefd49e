"""PyTorch / PyG adapter: padded collation, the plan batch sampler, the loader, masked losses.

Import explicitly (``import graphbatch.torch``); ``import graphbatch`` never imports torch.
"""

from .._padlayout import short_padding_batches
from ._collate import collate_dict
from ._consistency import (
    PlanMismatchError,
    check_plan_consistency,
    consistency_digests,
    plan_digest,
    sizes_digest,
)
from ._loader import PlanCollater, PlanLoader, loader, read_sizes
from ._loss import masked_mean
from ._prefetch import Prefetcher, prefetch
from ._pyg import collate, unpad, unpad_graphs
from ._sampler import PlanBatchSampler, PlannedBatch, distributed_world
from ._schema import FieldSpec, Schema, infer_schema

__all__ = [
    "FieldSpec",
    "PlanBatchSampler",
    "PlanCollater",
    "PlanLoader",
    "PlanMismatchError",
    "PlannedBatch",
    "Prefetcher",
    "Schema",
    "check_plan_consistency",
    "collate",
    "collate_dict",
    "consistency_digests",
    "distributed_world",
    "infer_schema",
    "loader",
    "masked_mean",
    "plan_digest",
    "prefetch",
    "read_sizes",
    "short_padding_batches",
    "sizes_digest",
    "unpad",
    "unpad_graphs",
]
