"""Building blocks of the Flax models, the JAX twins of `graphbatch.models._ops`.

Fixed shapes only (no data-dependent shapes), so a jitted step compiles once per padded shape.
Edge convention: ``senders`` are ``j``, ``receivers`` are ``i``; messages flow ``j -> i``.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

__all__ = [
    "LOG2",
    "RBF_MIN_EXPONENT",
    "Linear",
    "cosine_cutoff",
    "edge_vectors",
    "gaussian_rbf",
    "masked_graph_sum",
    "node_graph_index",
    "pair_reverse_edges",
    "shifted_softplus",
]

LOG2 = math.log(2.0)
#: Gaussian features with exponents below this are exactly 0 (no float32 subnormals; see the
#: torch `graphbatch.models.GaussianRBF` for the measured reason).
RBF_MIN_EXPONENT = -87.0


def shifted_softplus(x: jax.Array) -> jax.Array:
    """``softplus(x) - log 2`` (0 at ``x = 0``)."""
    return jax.nn.softplus(x) - LOG2


class Linear(nn.Module):
    """``y = x @ kernel + bias`` on the last axis; ``kernel`` is ``[in, out]`` (torch's
    ``weight.T``). ``weight_init="torch"``: torch ``nn.Linear``'s default (kernel and bias
    uniform in ``±1/sqrt(in)``); ``weight_init="xavier"``: Xavier-uniform kernel, zero bias
    (SchNet's reset). (Not ``init``: a field of that name would hide Flax's ``Module.init``.)"""

    features: int
    use_bias: bool = True
    weight_init: str = "torch"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        fan_in = x.shape[-1]
        k_init: nn.initializers.Initializer
        b_init: nn.initializers.Initializer
        if self.weight_init == "xavier":
            k_init = nn.initializers.xavier_uniform()
            b_init = nn.initializers.zeros
        else:
            k_init = nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")
            bound = 1.0 / math.sqrt(fan_in)

            def b_init(
                key: jax.Array, shape: tuple[int, ...], dtype: jnp.dtype = jnp.float32
            ) -> jax.Array:
                return jax.random.uniform(key, shape, dtype, -bound, bound)

        kernel = self.param("kernel", k_init, (fan_in, self.features), jnp.float32)
        y = jnp.dot(x, kernel)
        if self.use_bias:
            y = y + self.param("bias", b_init, (self.features,), jnp.float32)
        return y


def gaussian_rbf(d: jax.Array, start: float, stop: float, num: int) -> jax.Array:
    """``num`` Gaussians with centres evenly spaced on ``[start, stop]`` (Å), width = spacing,
    exactly 0 where the exponent is below `RBF_MIN_EXPONENT`: ``[*d.shape, num]``."""
    centres = jnp.linspace(start, stop, num, dtype=jnp.float32)
    coeff = -0.5 / float((stop - start) / (num - 1)) ** 2
    diff = d[..., None] - centres
    arg = coeff * diff * diff
    return jnp.where(arg > RBF_MIN_EXPONENT, jnp.exp(jnp.maximum(arg, RBF_MIN_EXPONENT)), 0.0)


def cosine_cutoff(d: jax.Array, cutoff: float, edge_mask: jax.Array) -> jax.Array:
    """``0.5 (cos(pi d / cutoff) + 1)`` on real edges with ``d < cutoff``, else exactly 0."""
    c = 0.5 * (jnp.cos(d * (math.pi / cutoff)) + 1.0)
    return jnp.where(edge_mask & (d < cutoff), c, 0.0)


def edge_vectors(
    pos: jax.Array, senders: jax.Array, receivers: jax.Array, edge_mask: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """``pos[i] - pos[j]`` per edge (Å) and its length; padding edges get a zero vector and
    length 1, so ``sqrt`` never sees 0 (whose gradient would put NaN into real gradients)."""
    vec = pos[receivers] - pos[senders]
    vec = jnp.where(edge_mask[:, None], vec, 0.0)
    d2 = jnp.sum(vec * vec, axis=-1)
    return vec, jnp.sqrt(jnp.where(edge_mask, d2, 1.0))


def node_graph_index(n_node: jax.Array, num_nodes: int) -> jax.Array:
    """Graph slot of every node from jraph's per-graph counts (``[num_nodes]`` int32)."""
    return jnp.repeat(
        jnp.arange(n_node.shape[0], dtype=jnp.int32), n_node, total_repeat_length=num_nodes
    )


def masked_graph_sum(
    x: jax.Array, node_graph: jax.Array, node_mask: jax.Array, num_graphs: int
) -> jax.Array:
    """Sum of node values per graph slot, padding nodes excluded: ``[num_graphs, ...]``."""
    mask = node_mask.reshape((-1,) + (1,) * (x.ndim - 1))
    return jax.ops.segment_sum(jnp.where(mask, x, 0.0), node_graph, num_segments=num_graphs)


def pair_reverse_edges(
    senders: jax.Array, receivers: jax.Array, edge_mask: jax.Array, num_nodes: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Edges reordered so that each real edge ``j->i`` sits next to its reverse ``i->j``
    (padding last; one padding edge appended when ``E`` is odd). Needs every real edge to have
    exactly one real reverse (radius / fully connected graphs); unchecked under ``jit``."""
    lo, hi = jnp.minimum(senders, receivers), jnp.maximum(senders, receivers)
    key = jnp.where(edge_mask, lo * num_nodes + hi, num_nodes * num_nodes)
    perm = jnp.argsort(key, stable=True)
    senders, receivers, edge_mask = senders[perm], receivers[perm], edge_mask[perm]
    if senders.shape[0] % 2:
        zero = jnp.zeros_like(senders[:1])
        senders = jnp.concatenate([senders, zero])
        receivers = jnp.concatenate([receivers, zero])
        edge_mask = jnp.concatenate([edge_mask, jnp.zeros((1,), bool)])
    return senders, receivers, edge_mask
