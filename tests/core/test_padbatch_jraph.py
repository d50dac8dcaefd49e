"""The kernel's ``layout="jraph"`` equals `graphbatch.jax.collate` (jraph.pad_with_graphs), so the
JAX adapter can read store batches through the same kernel."""

from __future__ import annotations

import numpy as np
import pytest

jraph = pytest.importorskip("jraph")
pytest.importorskip("h5py")

import graphbatch as gb  # noqa: E402
import graphbatch.jax as gj  # noqa: E402
from graphbatch._padbatch import pad_batch  # noqa: E402
from graphbatch.datasets import (  # noqa: E402
    GraphArrays,
    GraphStore,
    synthetic_graphs,
    synthetic_sizes,
    write_store,
)


def test_jraph_layout_equals_jax_collate(tmp_path):
    sizes = synthetic_sizes(60, "heavy", rng=2, mean_nodes=7)
    g = synthetic_graphs(sizes, rng=3, node_dim=2, n_targets=3)
    ga = GraphArrays(
        n_node=g.n_node,
        n_edge=g.n_edge,
        edge_index=g.edge_index,
        node=g.node,
        edge={"w": np.arange(int(g.n_edge.sum()), dtype=np.float32)},
        graph=g.graph,
    )
    store = GraphStore(write_store(tmp_path / "j.h5", [ga], name="j"))
    levels = {k: s["level"] for k, s in store.fields.items()}

    def single(i):
        d = store.read_graph(i)
        pick = lambda lv: {k: d[k] for k, v in levels.items() if v == lv}  # noqa: E731
        return jraph.GraphsTuple(
            nodes=pick("node"),
            edges=pick("edge"),
            globals=pick("graph"),
            senders=d["edge_index"][0],
            receivers=d["edge_index"][1],
            n_node=np.array([store.n_node[i]]),
            n_edge=np.array([store.n_edge[i]]),
        )

    plan = gb.plan(store.graph_sizes(), "pack-lpf", batch_size=8, seed=1)
    for b, idx in enumerate(plan.batches()):
        for cutoff in (None, 2.0):
            want = gj.collate(
                [single(int(i)) for i in idx], plan.shape(b), graph_index=idx, cutoff=cutoff
            )
            got = pad_batch(store.packed(), idx, plan.shape(b), layout="jraph", cutoff=cutoff)
            w = want.graphs
            assert np.array_equal(got.node_counts, w.n_node)
            assert np.array_equal(got.edge_counts, w.n_edge)
            assert np.array_equal(got.fields["edge_index"][0], w.senders)
            assert np.array_equal(got.fields["edge_index"][1], w.receivers)
            for tree in (w.nodes, w.edges, w.globals):
                for k, v in tree.items():
                    assert got.fields[k].dtype == np.asarray(v).dtype, k
                    assert np.array_equal(got.fields[k], v), k
            for k in ("node_mask", "edge_mask", "graph_mask", "graph_index"):
                assert np.array_equal(getattr(got, k), getattr(want, k)), k
