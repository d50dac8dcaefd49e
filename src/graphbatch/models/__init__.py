"""Reference GNNs on padded, fixed-shape batches: SchNet, MPEU and PaiNN.

Each model maps a padded batch (``z``, ``pos``, ``edge_index``, ``batch``, ``node_mask``,
``edge_mask``, ``num_graphs``) to one value per graph; padding contributes nothing to outputs or
gradients, and the forward pass compiles with ``torch.compile(dynamic=False, fullgraph=True)``
(one compilation per padded shape). Import explicitly: ``import graphbatch.models`` needs torch.
"""

from typing import Any

from .._errors import UnknownNameError
from ._base import GraphRegressor, batch_inputs, count_parameters, unpadded_inputs
from ._mpeu import MPEU
from ._ops import GaussianRBF, gather_rows, pair_reverse_edges, scatter_sum
from ._painn import PaiNN
from ._schnet import SchNet

#: Model classes by CLI name.
MODELS = {"schnet": SchNet, "mpeu": MPEU, "painn": PaiNN}


def build_model(name: str, **kwargs: Any) -> GraphRegressor:
    """A model by name (``schnet``, ``mpeu``, ``painn``) with keyword hyperparameters."""
    try:
        cls = MODELS[name]
    except (KeyError, TypeError):
        raise UnknownNameError(
            f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}"
        ) from None
    return cls(**kwargs)


__all__ = [
    "MODELS",
    "MPEU",
    "PaiNN",
    "GaussianRBF",
    "GraphRegressor",
    "SchNet",
    "batch_inputs",
    "build_model",
    "count_parameters",
    "gather_rows",
    "pair_reverse_edges",
    "scatter_sum",
    "unpadded_inputs",
]
