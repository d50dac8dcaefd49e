"""Graph construction (full, radius, kNN) and QM9 loading, checked against brute force."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphbatch.datasets import (
    QM9_TARGETS,
    build_edges,
    full_edges,
    knn_edges,
    load_qm9,
    qm9_graphs,
    radius_edges,
)


def _clouds(seed: int, sizes, scale=3.0):
    rng = np.random.default_rng(seed)
    n_node = np.asarray(sizes, dtype=np.int64)
    return rng.normal(0.0, scale, (int(n_node.sum()), 3)), n_node


def _split(edges, n_node):
    """Per-graph list of (src, dst) pairs from an EdgeSet (local indices)."""
    off = np.concatenate([[0], np.cumsum(edges.n_edge)])
    return [
        set(map(tuple, edges.edge_index[:, off[g] : off[g + 1]].T.tolist()))
        for g in range(len(n_node))
    ]


def _brute_pairs(p, cutoff=None):
    d = np.sqrt(((p[:, None, :] - p[None, :, :]) ** 2).sum(-1))
    out = set()
    for i in range(len(p)):
        for j in range(len(p)):
            if i != j and (cutoff is None or d[i, j] <= cutoff):
                out.add((i, j))
    return out, d


def _check_common(edges, pos, n_node):
    off = np.concatenate([[0], np.cumsum(n_node)])
    e_off = np.concatenate([[0], np.cumsum(edges.n_edge)])
    assert edges.edge_index.shape == (2, int(edges.n_edge.sum()))
    for g in range(len(n_node)):
        ei = edges.edge_index[:, e_off[g] : e_off[g + 1]]
        assert (ei[0] != ei[1]).all(), "self loop"
        assert ((ei >= 0) & (ei < n_node[g])).all(), "index not local"
        keys = ei[0] * max(n_node[g], 1) + ei[1]
        assert (np.diff(keys) > 0).all(), "not sorted by (src, dst) or duplicated"
        p = pos[off[g] : off[g + 1]]
        want = np.linalg.norm(p[ei[0]] - p[ei[1]], axis=1)
        np.testing.assert_allclose(edges.dist[e_off[g] : e_off[g + 1]], want, rtol=1e-12)


@pytest.mark.parametrize("sizes", [[5, 1, 0, 7, 2], [1], [12, 12, 3]])
def test_full_edges_are_all_ordered_pairs(sizes):
    pos, n_node = _clouds(0, sizes)
    edges = full_edges(pos, n_node)
    _check_common(edges, pos, n_node)
    np.testing.assert_array_equal(edges.n_edge, n_node * (n_node - 1))
    off = np.concatenate([[0], np.cumsum(n_node)])
    for g, got in enumerate(_split(edges, n_node)):
        assert got == _brute_pairs(pos[off[g] : off[g + 1]])[0]


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    sizes=st.lists(st.integers(0, 15), min_size=1, max_size=6),
    cutoff=st.floats(0.5, 8.0),
)
def test_radius_edges_match_brute_force(seed, sizes, cutoff):
    pos, n_node = _clouds(seed, sizes)
    edges = radius_edges(pos, n_node, cutoff)
    _check_common(edges, pos, n_node)
    off = np.concatenate([[0], np.cumsum(n_node)])
    for g, got in enumerate(_split(edges, n_node)):
        assert got == _brute_pairs(pos[off[g] : off[g + 1]], cutoff)[0]


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    sizes=st.lists(st.integers(0, 14), min_size=1, max_size=6),
    k=st.integers(1, 8),
)
def test_knn_edges_take_the_k_nearest(seed, sizes, k):
    pos, n_node = _clouds(seed, sizes)
    edges = knn_edges(pos, n_node, k)
    _check_common(edges, pos, n_node)
    np.testing.assert_array_equal(edges.n_edge, n_node * np.minimum(k, np.maximum(n_node - 1, 0)))
    off = np.concatenate([[0], np.cumsum(n_node)])
    for g, got in enumerate(_split(edges, n_node)):
        n = int(n_node[g])
        _, d = _brute_pairs(pos[off[g] : off[g + 1]])
        for i in range(n):
            nbrs = sorted(j for j, t in got if t == i)  # edges j -> i
            others = sorted(d[i, j] for j in range(n) if j != i)
            want = others[: min(k, n - 1)]
            np.testing.assert_allclose(sorted(d[i, nbrs]), want, rtol=1e-12)


def test_construction_rejects_bad_input():
    pos, n_node = _clouds(0, [3, 2])
    with pytest.raises(ValueError, match="cutoff"):
        radius_edges(pos, n_node, 0.0)
    with pytest.raises(ValueError, match="rows"):
        radius_edges(pos[:-1], n_node)
    with pytest.raises(ValueError, match="shape"):
        full_edges(pos[:, :2], n_node)
    with pytest.raises(ValueError, match="k must be >= 1"):
        knn_edges(pos, n_node, 0)
    with pytest.raises(ValueError, match="unknown graph construction 'delaunay'"):
        build_edges(pos, n_node, "delaunay")


@pytest.fixture(scope="module")
def qm9_500():
    pytest.importorskip("graphbatch.datasets._qm9")
    try:
        return load_qm9(500)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


def test_qm9_first_molecules_by_hand(qm9_500):
    mols = qm9_500
    assert len(mols) == 500 and mols.index[0] == 1
    # molecule 1 is methane: C then four H (values copied from qm9_part1.csv)
    np.testing.assert_array_equal(mols.z[:5], [6, 1, 1, 1, 1])
    np.testing.assert_allclose(mols.pos[0], [-0.0126981359, 1.0858041578, 0.0080009958])
    names = [n for n, _, _ in QM9_TARGETS]
    assert names[10] == "U0" and len(names) == mols.y.shape[1] == 15
    assert mols.y[0, names.index("U0")] == pytest.approx(-40.47893)
    assert mols.y[1, names.index("mu")] == pytest.approx(1.6256)  # ammonia dipole, debye
    assert set(np.unique(mols.z)) <= {1, 6, 7, 8, 9}


def test_qm9_graph_counts_match_brute_force(qm9_500):
    mols = qm9_500
    off = np.concatenate([[0], np.cumsum(mols.n_node)])
    for graph, param in (("radius", 6.0), ("radius", 2.0), ("knn", 24), ("knn", 5), ("full", None)):
        kw = {"cutoff": param} if graph == "radius" else {"k": param} if graph == "knn" else {}
        parts = list(qm9_graphs(graph, mols=mols, chunk_size=128, **kw))
        n_edge = np.concatenate([p.n_edge for p in parts])
        for g in range(0, 500, 7):
            p = mols.pos[off[g] : off[g + 1]]
            n = len(p)
            d = np.sqrt(((p[:, None] - p[None]) ** 2).sum(-1))
            if graph == "radius":
                want = int((d <= param).sum()) - n
            elif graph == "knn":
                want = n * min(param, n - 1)
            else:
                want = n * (n - 1)
            assert n_edge[g] == want, (graph, param, g)
        first = parts[0]
        assert first.node["z"].dtype == np.uint8 and first.node["pos"].dtype == np.float32
        assert first.graph["y"].shape == (128, 15)


def test_shipped_qm9_table_matches_brute_force(qm9_500):
    from importlib import resources

    from graphbatch import GraphSizes
    from graphbatch.datasets import QM9_NUM_MOLECULES

    table = GraphSizes.load(str(resources.files("graphbatch") / "data" / "qm9_radius6_sizes.npz"))
    assert len(table) == QM9_NUM_MOLECULES
    mols = qm9_500
    off = np.concatenate([[0], np.cumsum(mols.n_node)])
    np.testing.assert_array_equal(table.n_node[:500], mols.n_node)
    for g in range(500):
        p = mols.pos[off[g] : off[g + 1]]
        d = np.sqrt(((p[:, None] - p[None]) ** 2).sum(-1))
        assert table.n_edge[g] == int((d <= 6.0).sum()) - len(p), g
