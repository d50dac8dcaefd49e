"""Flax SchNet/MPEU/PaiNN: the torch models' outputs with the same weights, padding contract."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("flax")
torch = pytest.importorskip("torch")
jnp = jax.numpy

import graphbatch.jax as gj  # noqa: E402
import graphbatch.jax.models as gjm  # noqa: E402
import graphbatch.models as tm  # noqa: E402

from .test_jax_collate import make_graphs  # noqa: E402

SMALL = {
    "schnet": dict(hidden=16, filters=12, num_interactions=2, num_gaussians=10),
    "mpeu": dict(hidden=16, edge_dim=12, num_steps=2, num_gaussians=10),
    "painn": dict(features=16, num_layers=2, num_rbf=10),
}


@pytest.fixture(scope="module")
def batch():
    gs = make_graphs(6, seed=11, max_nodes=9)
    n = sum(int(g.n_node[0]) for g in gs)
    e = sum(int(g.n_edge[0]) for g in gs)
    return gj.collate(gs, (n + 5, e + 7, 9), cutoff=3.0)  # 3 empty graph slots, 5 pad nodes


def torch_inputs(inp):
    return dict(
        z=torch.from_numpy(np.asarray(inp["z"], dtype=np.int64)),
        pos=torch.from_numpy(np.asarray(inp["pos"])),
        edge_index=torch.from_numpy(
            np.stack([np.asarray(inp["senders"]), np.asarray(inp["receivers"])]).astype(np.int64)
        ),
        batch=torch.from_numpy(np.asarray(inp["node_graph"], dtype=np.int64)),
        node_mask=torch.from_numpy(np.asarray(inp["node_mask"])),
        edge_mask=torch.from_numpy(np.asarray(inp["edge_mask"])),
        num_graphs=inp["num_graphs"],
    )


@pytest.mark.parametrize(
    "name,extra", [("schnet", {}), ("schnet", {"pair_edges": True}), ("mpeu", {}), ("painn", {})]
)
def test_same_weights_same_per_graph_outputs(batch, name, extra):
    torch.manual_seed(0)
    tmodel = tm.build_model(name, **SMALL[name], **extra).eval()
    params = gjm.params_from_torch(tmodel.state_dict())
    jmodel = gjm.build_model(name, **SMALL[name], **extra)
    inp = gjm.graph_inputs(batch)
    # the Flax model's own parameter tree has exactly the torch layers' names and shapes
    static = {k: v for k, v in inp.items() if k != "num_graphs"}
    own = jax.eval_shape(
        lambda k, x: jmodel.init(k, **x, num_graphs=inp["num_graphs"]),
        jax.random.PRNGKey(0),
        static,
    )
    assert jax.tree_util.tree_structure(own) == jax.tree_util.tree_structure(params)
    for a, b in zip(jax.tree_util.tree_leaves(own), jax.tree_util.tree_leaves(params), strict=True):
        assert a.shape == b.shape
    assert gjm.count_parameters(own) == tm.count_parameters(tmodel)
    out_j = np.asarray(jax.jit(jmodel.apply, static_argnames="num_graphs")(params, **inp))
    with torch.no_grad():
        out_t = tmodel(**torch_inputs(inp)).numpy()
    assert out_j.shape == (9,)
    np.testing.assert_allclose(out_j, out_t, rtol=2e-5, atol=2e-5)
    assert (out_j[~np.asarray(batch.graph_mask)] == 0).all()
    assert np.abs(out_j).max() > 1e-3  # not a trivially zero model


def test_schnet_default_size_matches_torch():
    model = gjm.SchNet()
    pg = gj.collate(make_graphs(2, seed=1), (30, 200, 3))
    inp = gjm.graph_inputs(pg)
    n_graph = inp.pop("num_graphs")
    shapes = jax.eval_shape(
        lambda k, x: model.init(k, **x, num_graphs=n_graph), jax.random.PRNGKey(0), inp
    )
    assert gjm.count_parameters(shapes) == 186_701


@pytest.mark.parametrize("name", ["schnet", "mpeu", "painn"])
def test_padding_changes_nothing_and_gradients_are_finite(batch, name):
    model = gjm.build_model(name, **SMALL[name])
    inp = gjm.graph_inputs(batch)
    params = model.init(jax.random.PRNGKey(1), **inp)
    nm = np.asarray(inp["node_mask"])
    moved = dict(inp)
    pos = np.asarray(inp["pos"]).copy()
    pos[~nm] = 0.0  # padding nodes on top of each other: zero-length padding edges
    z = np.asarray(inp["z"]).copy()
    z[~nm] = 7
    moved["pos"], moved["z"] = jnp.asarray(pos), jnp.asarray(z)
    apply = jax.jit(model.apply, static_argnames="num_graphs")
    a = apply(params, **inp)
    b = apply(params, **moved)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)

    n_graph = inp["num_graphs"]

    def loss(p, x):
        return jnp.sum(model.apply(p, **x, num_graphs=n_graph) ** 2)

    grad = jax.jit(jax.grad(loss))
    for x in (inp, moved):
        x = {k: v for k, v in x.items() if k != "num_graphs"}
        grads = grad(params, x)
        assert all(bool(jnp.isfinite(g).all()) for g in jax.tree_util.tree_leaves(grads))


def test_bad_hyperparameters_and_weights(batch):
    with pytest.raises(ValueError, match="hidden must be >= 1"):
        gjm.SchNet(hidden=0).init(jax.random.PRNGKey(0), **gjm.graph_inputs(batch))
    with pytest.raises(ValueError, match="unknown model"):
        gjm.build_model("gcn")
    with pytest.raises(ValueError, match="not a layer"):
        gjm.params_from_torch({"centres": np.zeros(3)})


def test_linear_initialises_standalone_with_both_schemes():
    """``Linear(...).init`` is Flax's own (a field named ``init`` used to hide it), and the two
    weight schemes give torch's uniform bias or Xavier with a zero bias."""
    from graphbatch.jax.models._ops import Linear

    x = jax.numpy.ones((2, 9))
    torch_like = Linear(4).init(jax.random.PRNGKey(0), x)["params"]
    assert torch_like["kernel"].shape == (9, 4) and torch_like["bias"].shape == (4,)
    bias = np.asarray(torch_like["bias"])
    assert np.all(np.abs(bias) <= 1 / 3) and np.any(bias != 0)
    xavier = Linear(4, weight_init="xavier").init(jax.random.PRNGKey(0), x)["params"]
    assert np.all(np.asarray(xavier["bias"]) == 0)
