"""JAX / jraph adapter: padded ``jraph.GraphsTuple`` batches with masks, and `loader`, planned
device-resident batches (background prefetch, multi-device data parallelism).

Import explicitly (``import graphbatch.jax``); ``import graphbatch`` never imports jax.
"""

from .._errors import PlanMismatchError
from ._collate import PaddedGraphs, batches, collate, unpad
from ._loader import DATA_AXIS, JaxPlanLoader, loader
from ._source import StoreGraphs, graph_sizes_of, make_padded

__all__ = [
    "DATA_AXIS",
    "JaxPlanLoader",
    "PaddedGraphs",
    "PlanMismatchError",
    "StoreGraphs",
    "batches",
    "collate",
    "graph_sizes_of",
    "loader",
    "make_padded",
    "unpad",
]
