"""The reference training recipe that ``graphbatch bench`` and ``graphbatch tune`` share: the
reference models with the bench's hyperparameters, their compilation and their training step.

This module is framework-free (the options every framework's models take); the builders live
in `graphbatch.recipes.torch` (``graphbatch.models``, ``torch.compile``),
`graphbatch.recipes.mace` (the small MACE of mace-torch) and `graphbatch.recipes.jax` (Flax
models of ``graphbatch.jax.models``, an optax step). Import those explicitly: each needs its
framework.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["CUTOFF", "LEARNING_RATE", "model_kwargs"]

#: Adam's learning rate of the reference step.
LEARNING_RATE = 1e-3
#: Radius-graph cutoff of the reference models (Å).
CUTOFF = 6.0


def model_kwargs(
    name: str, *, cutoff: float = CUTOFF, options: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Keyword hyperparameters of the reference model ``name`` (``schnet``, ``mpeu``, ``painn``;
    torch and Flax alike): ``cutoff`` (Å); for SchNet ``pair_edges=True`` (a radius graph: every
    edge has its reverse); then ``options`` (any key, e.g. ``pair_edges=False``) over these."""
    kwargs: dict[str, Any] = {"cutoff": cutoff}
    if name == "schnet":
        kwargs["pair_edges"] = True
    kwargs.update(options or {})
    return kwargs
