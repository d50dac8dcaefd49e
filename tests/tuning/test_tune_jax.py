"""graphbatch tune --framework jax on a tiny jitted factory (no timing is asserted): probes,
the fit, validation and the XLA memory analysis through the factory protocol."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("jraph")
optax = pytest.importorskip("optax")

import graphbatch as gb  # noqa: E402
from graphbatch.tuning import TuneStep, plan_arrays_digest  # noqa: E402


def tiny_factory(*, device, compile, source):
    """One round of sum aggregation over a learned node embedding, masked MSE on ``y``."""
    import jax.numpy as jnp

    opt = optax.adam(1e-2)

    def loss_fn(params, pg):
        g = pg.graphs
        h = jnp.tanh(g.nodes["pos"] @ params["w"])
        msg = jax.ops.segment_sum(h[g.senders], g.receivers, num_segments=h.shape[0])
        node_graph = jnp.repeat(
            jnp.arange(g.n_node.shape[0]), g.n_node, total_repeat_length=h.shape[0]
        )
        out = jax.ops.segment_sum((msg + h).sum(-1), node_graph, num_segments=g.n_node.shape[0])
        err = jnp.where(pg.graph_mask, (out - g.globals["y"][:, 0]) ** 2, 0.0)
        return err.sum() / jnp.maximum(pg.graph_mask.sum(), 1)

    @jax.jit
    def train(params, state, pg):
        loss, grads = jax.value_and_grad(loss_fn)(params, pg)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    params = {"w": jnp.ones((3, 4)) * 0.1}
    st = {"p": params, "o": opt.init(params)}

    def step(pg):
        st["p"], st["o"], loss = train(st["p"], st["o"], pg)
        return loss, st["p"], st["o"]

    def memory_bytes(pg):
        m = train.lower(st["p"], st["o"], pg).compile().memory_analysis()
        return int(
            m.argument_size_in_bytes
            + m.output_size_in_bytes
            - m.alias_size_in_bytes
            + m.temp_size_in_bytes
        )

    return TuneStep(step, memory_bytes=memory_bytes)


def test_jax_tune_on_a_size_table_with_synthetic_graphs():
    rng = np.random.default_rng(0)
    n = rng.integers(3, 20, 240)
    sizes = gb.GraphSizes(n, n * 2)
    res = gb.tune(
        sizes,
        model=tiny_factory,
        framework="jax",
        batch_size=16,
        probes=3,
        rounds=1,
        validate=1,
        validate_steps=3,
        epochs=2,
        strategies=["dynamic", "pack-lpf", "buckets"],
        max_shapes=2,
        memory_limit="1GiB",
    )
    assert res.mode == "jit" and set(res.models) == {"jit"}
    assert res.settings["memory_kind"] == "xla_memory_analysis"
    assert res.settings["synthetic_graphs"] is True
    m = res.models["jit"]
    assert len(m.probes) == 3 and all(p.peak_bytes > 0 for p in m.probes)
    v = res.validation[0]
    assert v["meas_peak_bytes"] > 0 and v["steps"] == 3
    assert plan_arrays_digest(gb.plan(sizes, **res.request)) == res.ranking[0].plan_digest
    # graphbatch.jax.loader takes the request unchanged
    import graphbatch.jax as gj
    from graphbatch.tuning._jax_backend import synthetic_graphs_tuples

    ld = gj.loader(synthetic_graphs_tuples(sizes), **res.request, prefetch=0)
    assert len(ld) == len(gb.plan(sizes, **res.request))
    with pytest.raises(ValueError, match="one device"):
        gb.tune(sizes, model=tiny_factory, framework="jax", world_size=2, probes=2, rounds=1)
