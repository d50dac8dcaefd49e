"""JAX / jraph adapter: collate plans into padded ``jraph.GraphsTuple`` batches with masks.

Import explicitly (``import graphbatch.jax``); ``import graphbatch`` never imports jax.
"""

from .._padlayout import short_padding_batches
from ._collate import PaddedGraphs, batches, collate, unpad

__all__ = ["PaddedGraphs", "batches", "collate", "short_padding_batches", "unpad"]
