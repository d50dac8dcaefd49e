"""SchNet, MPEU and PaiNN in Flax (linen) on padded jraph batches: the torch models of
`graphbatch.models` with the same hyperparameters, layer structure and padding contract.

Every model maps ``(z, pos, senders, receivers, node_graph, node_mask, edge_mask, num_graphs)``
to ``[num_graphs]`` values; padding nodes and edges contribute nothing to outputs or gradients
(masked readout; padding edges have a zero vector, length 1 and cutoff weight 0). Parameter
names follow the torch ``state_dict`` (``interactions_0/filter2/kernel`` for
``interactions.0.filter2.weight``), so `params_from_torch` copies weights across.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from ..._errors import InputError
from ._ops import (
    Linear,
    cosine_cutoff,
    edge_vectors,
    gaussian_rbf,
    masked_graph_sum,
    pair_reverse_edges,
    shifted_softplus,
)

__all__ = ["MPEU", "PaiNN", "SchNet"]

_EPS = 1e-8  # PaiNN: sqrt(|Vv|^2 + eps); vectors start at 0, where sqrt has no gradient


def _check(name: str, ints: dict[str, int], cutoff: float) -> None:
    for k, v in ints.items():
        if int(v) < 1:
            raise InputError(f"{name} {k} must be >= 1, got {v}")
    if not cutoff > 0:
        raise InputError(f"{name} cutoff must be > 0 Å, got {cutoff}")


def _segment_sum(x: jax.Array, index: jax.Array, n: int) -> jax.Array:
    return jax.ops.segment_sum(x, index, num_segments=n)


class SchNet(nn.Module):
    """SchNet (defaults: the IPU paper's 100 hidden/filters, 4 interactions, 25 Gaussians on
    [0, 6] Å, cosine cutoff 6 Å; 186,701 parameters like the torch model). ``pair_edges``:
    the filter network once per reverse-edge pair (radius / fully connected graphs)."""

    hidden: int = 100
    filters: int = 100
    num_interactions: int = 4
    num_gaussians: int = 25
    cutoff: float = 6.0
    num_embeddings: int = 100
    pair_edges: bool = False

    @nn.compact
    def __call__(
        self,
        z: jax.Array,
        pos: jax.Array,
        senders: jax.Array,
        receivers: jax.Array,
        node_graph: jax.Array,
        node_mask: jax.Array,
        edge_mask: jax.Array,
        num_graphs: int,
    ) -> jax.Array:
        _check(
            "SchNet",
            {
                "hidden": self.hidden,
                "filters": self.filters,
                "num_interactions": self.num_interactions,
                "num_gaussians": self.num_gaussians,
            },
            self.cutoff,
        )
        n = z.shape[0]
        if self.pair_edges:
            senders, receivers, edge_mask = pair_reverse_edges(senders, receivers, edge_mask, n)
        _, d = edge_vectors(pos, senders, receivers, edge_mask)
        cut = cosine_cutoff(d, self.cutoff, edge_mask)
        if self.pair_edges:
            d, cut = d[0::2], cut[0::2]
        rbf = gaussian_rbf(d, 0.0, self.cutoff, self.num_gaussians)
        f1_all = Linear(self.num_interactions * self.filters, weight_init="xavier", name="filter1")(
            rbf
        )
        f1 = jnp.split(f1_all, self.num_interactions, axis=-1)
        h = nn.Embed(
            self.num_embeddings,
            self.hidden,
            embedding_init=nn.initializers.normal(1.0),
            name="embedding",
        )(z)
        for t in range(self.num_interactions):
            p = f"interactions_{t}_"
            w = Linear(self.filters, weight_init="xavier", name=p + "filter2")(
                shifted_softplus(f1[t])
            )
            w = w * cut[:, None]
            x = Linear(self.filters, use_bias=False, weight_init="xavier", name=p + "lin_in")(h)
            xj = x[senders]
            if self.pair_edges:
                msg = (xj.reshape(-1, 2, self.filters) * w[:, None, :]).reshape(-1, self.filters)
            else:
                msg = xj * w
            agg = _segment_sum(msg, receivers, n)
            v = Linear(self.hidden, weight_init="xavier", name=p + "lin_out")(agg)
            h = h + Linear(self.hidden, weight_init="xavier", name=p + "lin")(shifted_softplus(v))
        out = Linear(self.hidden // 2, weight_init="xavier", name="out1")(h)
        out = Linear(1, weight_init="xavier", name="out2")(shifted_softplus(out))[:, 0]
        return masked_graph_sum(out, node_graph, node_mask, num_graphs)


class MPEU(nn.Module):
    """Message passing with edge updates (hidden 64, edge_dim 64, 3 steps, 32 Gaussians on
    [0, 6] Å by default; the torch `graphbatch.models.MPEU`)."""

    hidden: int = 64
    edge_dim: int = 64
    num_steps: int = 3
    num_gaussians: int = 32
    cutoff: float = 6.0
    num_embeddings: int = 100

    @nn.compact
    def __call__(
        self,
        z: jax.Array,
        pos: jax.Array,
        senders: jax.Array,
        receivers: jax.Array,
        node_graph: jax.Array,
        node_mask: jax.Array,
        edge_mask: jax.Array,
        num_graphs: int,
    ) -> jax.Array:
        _check(
            "MPEU",
            {
                "hidden": self.hidden,
                "edge_dim": self.edge_dim,
                "num_steps": self.num_steps,
                "num_gaussians": self.num_gaussians,
            },
            self.cutoff,
        )
        n = z.shape[0]
        ssp = shifted_softplus
        _, d = edge_vectors(pos, senders, receivers, edge_mask)
        e = Linear(self.edge_dim, name="edge_in")(
            gaussian_rbf(d, 0.0, self.cutoff, self.num_gaussians)
        )
        h = nn.Embed(
            self.num_embeddings,
            self.hidden,
            embedding_init=nn.initializers.normal(1.0),
            name="embedding",
        )(z)
        emask = edge_mask[:, None]
        for t in range(self.num_steps):
            p = f"steps_{t}_"
            hi, hj = h[receivers], h[senders]
            e = Linear(2 * self.edge_dim, name=p + "edge1")(jnp.concatenate([hi, hj, e], -1))
            e = ssp(Linear(self.edge_dim, name=p + "edge2")(ssp(e)))
            gate = ssp(
                Linear(self.hidden, name=p + "w3")(ssp(Linear(self.hidden, name=p + "w2")(e)))
            )
            msg = Linear(self.hidden, use_bias=False, name=p + "w1")(h)[senders] * gate
            msg = jnp.where(emask, msg, 0.0)
            m = _segment_sum(msg, receivers, n)
            h = h + Linear(self.hidden, name=p + "w5")(ssp(Linear(self.hidden, name=p + "w4")(m)))
        out = Linear(self.hidden // 2, name="out1")(h)
        out = Linear(1, name="out2")(ssp(out))[:, 0]
        return masked_graph_sum(out, node_graph, node_mask, num_graphs)


class PaiNN(nn.Module):
    """PaiNN (64 features, 3 layers, 20 Gaussians, cosine cutoff 6 Å by default; the torch
    `graphbatch.models.PaiNN`). Outputs are rotation invariant."""

    features: int = 64
    num_layers: int = 3
    num_rbf: int = 20
    cutoff: float = 6.0
    num_embeddings: int = 100

    @nn.compact
    def __call__(
        self,
        z: jax.Array,
        pos: jax.Array,
        senders: jax.Array,
        receivers: jax.Array,
        node_graph: jax.Array,
        node_mask: jax.Array,
        edge_mask: jax.Array,
        num_graphs: int,
    ) -> jax.Array:
        _check(
            "PaiNN",
            {"features": self.features, "num_layers": self.num_layers, "num_rbf": self.num_rbf},
            self.cutoff,
        )
        n, f = z.shape[0], self.features
        vec, d = edge_vectors(pos, senders, receivers, edge_mask)
        cut = cosine_cutoff(d, self.cutoff, edge_mask)
        unit = vec / d[:, None]
        rbf = gaussian_rbf(d, 0.0, self.cutoff, self.num_rbf)
        s = nn.Embed(
            self.num_embeddings, f, embedding_init=nn.initializers.normal(1.0), name="embedding"
        )(z)
        v = jnp.zeros((n, 3, f), s.dtype)
        for t in range(self.num_layers):
            p = f"messages_{t}_"
            phi = Linear(3 * f, name=p + "phi_2")(nn.silu(Linear(f, name=p + "phi_0")(s)))
            x = phi[senders] * (Linear(3 * f, name=p + "filt")(rbf) * cut[:, None])
            ds, dvv, dvs = jnp.split(x, 3, axis=-1)
            dv = v[senders] * dvv[:, None, :] + dvs[:, None, :] * unit[:, :, None]
            s = s + _segment_sum(ds, receivers, n)
            v = v + _segment_sum(dv, receivers, n)
            p = f"updates_{t}_"
            uv = Linear(f, use_bias=False, name=p + "u")(v)
            vv = Linear(f, use_bias=False, name=p + "v")(v)
            norm = jnp.sqrt(jnp.sum(vv * vv, axis=1) + _EPS)
            a = Linear(3 * f, name=p + "mlp_2")(
                nn.silu(Linear(f, name=p + "mlp_0")(jnp.concatenate([s, norm], -1)))
            )
            a_vv, a_sv, a_ss = jnp.split(a, 3, axis=-1)
            s = s + a_ss + a_sv * jnp.sum(uv * vv, axis=1)
            v = v + a_vv[:, None, :] * uv
        out = Linear(f // 2, name="out1")(s)
        out = Linear(1, name="out2")(nn.silu(out))[:, 0]
        return masked_graph_sum(out, node_graph, node_mask, num_graphs)
