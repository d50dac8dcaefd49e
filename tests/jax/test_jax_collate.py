"""graphbatch.jax: padded jraph.GraphsTuple batches with masks; a jitted step compiles once."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jraph = pytest.importorskip("jraph")
jnp = jax.numpy

import graphbatch as gb  # noqa: E402
import graphbatch.jax as gj  # noqa: E402


def make_graphs(n_graphs: int, seed: int = 0, max_nodes: int = 10):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_graphs):
        n = int(rng.integers(2, max_nodes + 1))
        pos = rng.uniform(0, 2.0, size=(n, 3)).astype(np.float32)
        d = np.linalg.norm(pos[:, None] - pos[None], axis=-1)
        s, r = np.nonzero((d < 1.5) & ~np.eye(n, dtype=bool))
        out.append(
            jraph.GraphsTuple(
                n_node=np.array([n], dtype=np.int32),
                n_edge=np.array([s.shape[0]], dtype=np.int32),
                nodes={"z": rng.integers(1, 9, size=n).astype(np.int32), "pos": pos},
                edges=rng.normal(size=(s.shape[0], 2)).astype(np.float32),
                globals=rng.normal(size=(1, 1)).astype(np.float32),
                senders=s.astype(np.int32),
                receivers=r.astype(np.int32),
            )
        )
    return out


def sizes_of(graphs):
    return gb.GraphSizes([int(g.n_node[0]) for g in graphs], [int(g.n_edge[0]) for g in graphs])


@pytest.fixture(scope="module")
def graphs():
    return make_graphs(50, seed=4)


def test_collate_follows_pad_with_graphs_and_masks(graphs):
    idx = [3, 7, 1]
    shape = (64, 300, 5)
    out = gj.collate([graphs[i] for i in idx], shape, graph_index=idx)
    ref = jraph.pad_with_graphs(jraph.batch_np([graphs[i] for i in idx]), *shape)
    for a, b in zip(
        jax.tree_util.tree_leaves(out.graphs), jax.tree_util.tree_leaves(ref), strict=False
    ):
        np.testing.assert_array_equal(a, b)
    n_real = sum(int(graphs[i].n_node[0]) for i in idx)
    e_real = sum(int(graphs[i].n_edge[0]) for i in idx)
    assert out.graphs.nodes["pos"].shape == (64, 3) and out.graphs.senders.shape == (300,)
    assert out.graphs.n_node.shape == (5,) and int(out.graphs.n_node.sum()) == 64
    assert out.node_mask.sum() == n_real and out.node_mask[:n_real].all()
    assert out.edge_mask.sum() == e_real and out.edge_mask[:e_real].all()
    assert out.graph_mask.tolist() == [True] * 3 + [False] * 2
    assert out.graph_index.tolist() == [*idx, -1, -1]
    np.testing.assert_array_equal(out.node_mask, jraph.get_node_padding_mask(out.graphs))
    assert (out.graphs.senders[e_real:] >= n_real).all()
    back = gj.unpad(out)
    assert len(back) == 3
    for g, i in zip(back, idx, strict=False):
        np.testing.assert_array_equal(g.senders, graphs[i].senders)
        np.testing.assert_array_equal(g.nodes["pos"], graphs[i].nodes["pos"])


def test_cutoff_padding_edges_are_long(graphs):
    idx = [0, 1]
    n_real = sum(int(graphs[i].n_node[0]) for i in idx)
    out = gj.collate([graphs[i] for i in idx], (n_real + 3, 200, 4), cutoff=1.5)
    e_real = int(out.edge_mask.sum())
    s, r = out.graphs.senders[e_real:], out.graphs.receivers[e_real:]
    pos = out.graphs.nodes["pos"]
    assert (np.linalg.norm(pos[s] - pos[r], axis=1) > 1.5).all()
    assert (s >= n_real).all() and (r >= n_real).all()


def test_errors(graphs):
    g = graphs[0]
    n = int(g.n_node[0])
    with pytest.raises(ValueError, match="do not fit"):
        gj.collate([g], (n, 500, 2))
    with pytest.raises(ValueError, match="template"):
        gj.collate([], (8, 8, 2))
    empty = gj.collate([], (8, 8, 2), template=g)
    assert empty.graphs.nodes["pos"].shape == (8, 3) and not empty.graph_mask.any()


def test_jitted_step_compiles_once_over_an_epoch(graphs):
    plan = gb.plan(sizes_of(graphs), "dynamic", batch_size=8, seed=0)
    assert len(plan) > 3
    traces = []

    @jax.jit
    def step(w, pg):
        traces.append(1)  # runs only while tracing, i.e. once per compilation
        g = pg.graphs
        h = g.nodes["pos"] @ w
        msg = jnp.where(pg.edge_mask[:, None], h[g.senders], 0.0)
        h = h + jax.ops.segment_sum(msg, g.receivers, num_segments=h.shape[0])
        node_graph = jnp.repeat(
            jnp.arange(g.n_node.shape[0]), g.n_node, total_repeat_length=h.shape[0]
        )
        out = jax.ops.segment_sum(
            jnp.where(pg.node_mask[:, None], h, 0.0), node_graph, num_segments=g.n_node.shape[0]
        )
        err = jnp.where(pg.graph_mask, (out[:, 0] - g.globals[:, 0]) ** 2, 0.0)
        return err.sum() / jnp.maximum(pg.graph_mask.sum(), 1)

    w = jnp.ones((3, 2))
    seen = []
    for pg in gj.batches(graphs, plan):
        step(w, pg).block_until_ready()
        seen += pg.graph_index[pg.graph_mask].tolist()
    assert sorted(seen) == list(range(len(graphs)))
    assert len(traces) == 1
