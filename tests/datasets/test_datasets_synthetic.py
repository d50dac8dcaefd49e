"""Seeded synthetic sizes and graphs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from graphbatch import GraphSizes
from graphbatch.datasets import SIZE_DISTRIBUTIONS, synthetic_graphs, synthetic_sizes


@pytest.mark.parametrize("dist", SIZE_DISTRIBUTIONS)
def test_sizes_are_seeded_and_valid(dist):
    a = synthetic_sizes(2000, dist, rng=3)
    assert a == synthetic_sizes(2000, dist, rng=np.random.default_rng(3))
    assert a != synthetic_sizes(2000, dist, rng=4)
    assert (a.n_node >= 1).all()
    assert (a.n_edge <= a.n_node * (a.n_node - 1)).all()


def test_heavy_tail_is_heavier():
    ratio = {}
    for dist in SIZE_DISTRIBUTIONS:
        s = synthetic_sizes(20000, dist, rng=0, mean_nodes=30)
        ratio[dist] = s.n_node.max() / np.median(s.n_node)
    assert ratio["heavy"] > ratio["lognormal"] > ratio["normal"]


def test_graphs_have_exact_sizes_and_no_self_loops():
    sizes = synthetic_sizes(300, "heavy", rng=1)
    g = synthetic_graphs(sizes, rng=2, node_dim=4, n_targets=2)
    np.testing.assert_array_equal(g.n_node, sizes.n_node)
    np.testing.assert_array_equal(g.n_edge, sizes.n_edge)
    assert (g.edge_index[0] != g.edge_index[1]).all()
    assert g.node["x"].shape == (int(sizes.n_node.sum()), 4)
    assert g.graph["y"].shape == (300, 2)
    again = synthetic_graphs(sizes, rng=2, node_dim=4, n_targets=2)
    np.testing.assert_array_equal(again.edge_index, g.edge_index)


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown size distribution 'zipf'"):
        synthetic_sizes(10, "zipf", rng=0)
    with pytest.raises(TypeError, match="rng"):
        synthetic_sizes(10, rng=None)


@given(seed=st.integers(0, 2**31), n_graphs=st.integers(1, 40))
def test_symmetric_graphs_come_in_adjacent_reverse_pairs(seed, n_graphs):
    rng = np.random.default_rng(seed)
    n = rng.integers(2, 12, n_graphs)
    e = 2 * rng.integers(0, n * (n - 1) // 2 + 1)
    g = synthetic_graphs(GraphSizes(n, e), rng=seed, symmetric=True)
    assert np.array_equal(g.n_edge, e)
    ei = g.edge_index
    assert np.array_equal(ei[:, 0::2], ei[::-1, 1::2]) and (ei[0] != ei[1]).all()
    for k in range(n_graphs):  # every edge inside its graph (local indices)
        local = ei[:, g.edge_offsets[k] : g.edge_offsets[k + 1]]
        assert local.size == 0 or (local.min() >= 0 and local.max() < n[k])


def test_symmetric_graphs_need_even_edge_counts():
    with pytest.raises(ValueError, match="graph 1 has 3 edges"):
        synthetic_graphs(GraphSizes([3, 3], [2, 3]), rng=0, symmetric=True)
