"""The JAX loader reads a GraphStore at batch level (the shared NumPy kernel, jraph layout), and
the result equals the per-graph reads plus `graphbatch.jax.collate` exactly (values and dtypes)."""

from __future__ import annotations

import numpy as np
import pytest

jraph = pytest.importorskip("jraph")
pytest.importorskip("h5py")

import graphbatch as gb  # noqa: E402
from graphbatch.datasets import (  # noqa: E402
    GraphArrays,
    GraphStore,
    synthetic_graphs,
    synthetic_sizes,
    write_store,
)
from graphbatch.jax._collate import collate  # noqa: E402
from graphbatch.jax._source import StoreGraphs, make_padded  # noqa: E402


def _store(tmp_path):
    sizes = synthetic_sizes(80, "heavy", rng=5, mean_nodes=7)
    g = synthetic_graphs(sizes, rng=6, node_dim=3, n_targets=2)
    node = dict(g.node)
    node["pos"] = np.random.default_rng(7).normal(size=(int(g.n_node.sum()), 3)).astype(np.float32)
    ga = GraphArrays(
        n_node=g.n_node,
        n_edge=g.n_edge,
        edge_index=g.edge_index,
        node=node,
        edge={"w": np.arange(int(g.n_edge.sum()), dtype=np.float32)},
        graph=g.graph,
    )
    return GraphStore(write_store(tmp_path / "s.h5", [ga], name="s"))


def _assert_same(got, want):
    import jax

    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=False):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.array_equal(a, b)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)


@pytest.mark.parametrize(
    "strategy, kw",
    [
        ("pack-lpf", {}),
        ("dynamic", {}),
        ("static-64", {}),
        ("kk", {}),
        ("dynamic", {"world_size": 3}),
    ],
)
@pytest.mark.parametrize("cutoff", [None, 2.5])
def test_store_batch_path_equals_per_graph_collate(tmp_path, strategy, kw, cutoff):
    src = StoreGraphs(_store(tmp_path))
    plan = gb.plan(src.graph_sizes(), strategy, batch_size=9, seed=3, **kw)
    for b, idx in enumerate(plan.batches()):
        got = make_padded(src, idx, plan.shape(b), template=src[0], cutoff=cutoff)
        want = collate(
            [src[int(i)] for i in idx],
            plan.shape(b),
            graph_index=idx,
            cutoff=cutoff,
            template=src[0],
        )
        _assert_same(got, want)


def test_store_batch_path_without_positions_refuses_cutoff(tmp_path):
    src = StoreGraphs(_store(tmp_path))
    with pytest.raises(ValueError, match="cutoff needs node positions"):
        src.read_batch([0, 1], (64, 512, 4), cutoff=1.0, position_key="xyz")
