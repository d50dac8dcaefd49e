"""PyTorch / PyG adapter: padded collation, the plan batch sampler, the loader, masked losses.

Import explicitly (``import graphbatch.torch``); ``import graphbatch`` never imports torch.
"""

from .._padlayout import short_padding_batches
from ._collate import collate_dict
from ._loader import PlanCollater, PlanLoader, loader, read_sizes
from ._loss import masked_mean
from ._prefetch import Prefetcher, prefetch
from ._pyg import collate, unpad, unpad_graphs
from ._sampler import PlanBatchSampler, PlannedBatch, distributed_world
from ._schema import FieldSpec, Schema, infer_schema
from ._store_batch import StoreBatcher, StoreCollater, store_batch, store_schema

__all__ = [
    "FieldSpec",
    "PlanBatchSampler",
    "PlanCollater",
    "PlanLoader",
    "PlannedBatch",
    "Prefetcher",
    "Schema",
    "StoreBatcher",
    "StoreCollater",
    "collate",
    "collate_dict",
    "distributed_world",
    "infer_schema",
    "loader",
    "masked_mean",
    "prefetch",
    "read_sizes",
    "short_padding_batches",
    "store_batch",
    "store_schema",
    "unpad",
    "unpad_graphs",
]
