"""Flax (linen) reference models on padded jraph batches: SchNet, MPEU, PaiNN.

The JAX twins of `graphbatch.models` (same hyperparameters, structure and padding contract);
``model.apply(params, **graph_inputs(pg))`` gives one value per graph slot. Import explicitly:
``import graphbatch.jax.models`` needs flax.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..._errors import UnknownNameError
from ._convert import params_from_torch
from ._models import MPEU, PaiNN, SchNet
from ._ops import node_graph_index

if TYPE_CHECKING:
    from .._collate import PaddedGraphs

#: Model classes by CLI name.
MODELS = {"schnet": SchNet, "mpeu": MPEU, "painn": PaiNN}


def build_model(name: str, **kwargs: Any) -> SchNet | MPEU | PaiNN:
    """A Flax model by name (``schnet``, ``mpeu``, ``painn``) with keyword hyperparameters."""
    try:
        cls = MODELS[name]
    except KeyError:
        raise UnknownNameError(
            f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}"
        ) from None
    return cls(**kwargs)


def graph_inputs(pg: PaddedGraphs, *, z_key: str = "z", pos_key: str = "pos") -> dict[str, Any]:
    """Model keyword arguments from a `graphbatch.jax.PaddedGraphs` (one device's batch, no
    leading device axis): atomic numbers and positions from ``pg.graphs.nodes``, the node ->
    graph-slot index from ``n_node``, masks, and ``num_graphs`` (static)."""
    g = pg.graphs
    z, pos = g.nodes[z_key], g.nodes[pos_key]
    return {
        "z": z,
        "pos": pos,
        "senders": g.senders,
        "receivers": g.receivers,
        "node_graph": node_graph_index(g.n_node, z.shape[0]),
        "node_mask": pg.node_mask,
        "edge_mask": pg.edge_mask,
        "num_graphs": int(g.n_node.shape[0]),
    }


def count_parameters(params: Any) -> int:
    """Number of scalar parameters in a parameter pytree."""
    import jax

    return int(sum(x.size for x in jax.tree_util.tree_leaves(params)))


__all__ = [
    "MODELS",
    "MPEU",
    "PaiNN",
    "SchNet",
    "build_model",
    "count_parameters",
    "graph_inputs",
    "node_graph_index",
    "params_from_torch",
]
