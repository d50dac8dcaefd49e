"""The JAX side of the reference recipe: a Flax reference model (``graphbatch.jax.models``)
with the bench's hyperparameters and its optax training step on padded batches."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from . import CUTOFF, model_kwargs

__all__ = ["reference_model", "train_step"]


def reference_model(
    name: str, *, cutoff: float = CUTOFF, options: Mapping[str, Any] | None = None
) -> Any:
    """The Flax reference model ``name`` with `graphbatch.recipes.model_kwargs` (``cutoff`` in
    Å, ``options`` over the defaults); its parameters come from ``model.init``."""
    from ..jax.models import build_model

    return build_model(name, **model_kwargs(name, cutoff=cutoff, options=options))


def train_step(model: Any, opt: Any) -> Callable[..., Any]:
    """``(params, opt_state, pg) -> (params, opt_state, loss)`` of the Flax ``model`` with the
    optax optimizer ``opt``: masked mean squared error of the prediction against
    ``pg.graphs.globals["y"][:, 0]`` over the real graphs, its gradient and the optimizer
    update. Not jitted: each caller jits its own (its own compilation cache)."""
    import jax
    import jax.numpy as jnp
    import optax

    from ..jax.models import graph_inputs

    def loss_fn(params: Any, pg: Any) -> Any:
        pred = model.apply(params, **graph_inputs(pg))
        err = jnp.where(pg.graph_mask, (pred - pg.graphs.globals["y"][:, 0]) ** 2, 0.0)
        return err.sum() / jnp.maximum(pg.graph_mask.sum(), 1)

    def step(params: Any, opt_state: Any, pg: Any) -> tuple[Any, Any, Any]:
        loss, grads = jax.value_and_grad(loss_fn)(params, pg)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step
