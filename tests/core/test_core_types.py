"""GraphSizes, Budget and plan-file behaviour, including bad input."""

from __future__ import annotations

import numpy as np
import pytest

import graphbatch as gb


def test_sizes_validation_errors():
    with pytest.raises(ValueError, match="empty dataset"):
        gb.GraphSizes([], [])
    with pytest.raises(ValueError, match=r"n_node\[1\] = -2 is negative"):
        gb.GraphSizes([1, -2], [0, 0])
    with pytest.raises(ValueError, match=r"n_edge\[0\] = 1.5 is not an integer"):
        gb.GraphSizes([1], [1.5])
    with pytest.raises(ValueError, match="3 entries but n_edge has 2"):
        gb.GraphSizes([1, 2, 3], [1, 2])
    with pytest.raises(TypeError, match="integers"):
        gb.GraphSizes(["a"], [1])
    with pytest.raises(ValueError, match="graph 0 has 3 edges but no nodes"):
        gb.GraphSizes([0], [3])
    with pytest.raises(ValueError, match="1-D"):
        gb.GraphSizes([[1, 2]], [[1, 2]])


def test_sizes_integral_floats_and_immutability():
    s = gb.GraphSizes(np.array([2.0, 3.0]), [1, 2])
    assert s.n_node.dtype == np.int64 and s.n_node.tolist() == [2, 3]
    with pytest.raises(ValueError):
        s.n_node[0] = 5
    with pytest.raises(AttributeError):
        s.n_node = np.array([1])


def test_histogram_matches_counter():
    rng = np.random.default_rng(0)
    nodes = rng.integers(1, 6, 500)
    edges = rng.integers(0, 4, 500)
    h = gb.GraphSizes(nodes, edges).histogram(return_inverse=True)
    from collections import Counter

    expected = Counter(zip(nodes.tolist(), edges.tolist(), strict=True))
    got = {(int(a), int(b)): int(c) for a, b, c in zip(h.n_node, h.n_edge, h.count, strict=True)}
    assert got == dict(expected)
    assert sorted(got) == list(got)  # sorted by nodes then edges
    assert np.array_equal(h.n_node[h.inverse], nodes)
    assert np.array_equal(h.n_edge[h.inverse], edges)


def test_sizes_round_trip(tmp_path):
    s = gb.GraphSizes([1, 2, 3], [0, 2, 6], [10, 20, 30])
    path = s.save(tmp_path / "s.npz")
    assert gb.GraphSizes.load(path) == s
    s2 = gb.GraphSizes([4], [3])
    s2.save(tmp_path / "t.npz")
    assert gb.GraphSizes.load(tmp_path / "t.npz").n_bytes is None


def test_sizes_load_errors(tmp_path):
    np.savez(tmp_path / "bad.npz", nodes=[1, 2])
    with pytest.raises(ValueError, match="lacks key"):
        gb.GraphSizes.load(tmp_path / "bad.npz")
    with pytest.raises(FileNotFoundError):
        gb.GraphSizes.load(tmp_path / "missing.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="cannot read"):
        gb.GraphSizes.load(tmp_path / "junk.npz")
    np.savez(tmp_path / "obj.npz", n_node=np.array([1, None], dtype=object), n_edge=[0, 0])
    with pytest.raises(ValueError):
        gb.GraphSizes.load(tmp_path / "obj.npz")  # object arrays are never unpickled


def test_budget_validation():
    b = gb.Budget(64, 128, 8)
    assert (b.node_capacity, b.edge_capacity, b.graph_capacity) == (63, 128, 7)
    assert b.fits(63, 128, 7) and not b.fits(64, 0, 1) and not b.fits(1, 129, 1)
    assert not b.fits(1, 1, 8)
    with pytest.raises(ValueError, match="n_graph = 1"):
        gb.Budget(64, 64, 1)
    with pytest.raises(ValueError, match="n_node must be >= 1, got 0"):
        gb.Budget(0, 64, 4)
    with pytest.raises(ValueError, match="n_edge must be >= 0, got -1"):
        gb.Budget(10, -1, 4)
    with pytest.raises(TypeError, match="integer"):
        gb.Budget(10.5, 1, 4)
    assert gb.Budget.coerce((10, 20, 3)) == gb.Budget(10, 20, 3)
    with pytest.raises(TypeError):
        gb.Budget.coerce("abc")


@pytest.mark.parametrize("x", [0, 1, 2, 3, 63, 64, 65, 1000, 2**20, 2**20 + 1])
def test_rounding(x):
    assert gb.round_up(x, 64) == max(64, -(-x // 64) * 64)
    p = gb.next_pow2(x)
    assert p >= max(x, 1) and (p & (p - 1)) == 0 and (p == 1 or p // 2 < max(x, 1))


def test_rounding_vectorised():
    x = np.arange(0, 5000)
    assert np.array_equal(gb.next_pow2(x), [gb.next_pow2(int(v)) for v in x])
    assert np.array_equal(gb.round_up(x, 64), [gb.round_up(int(v), 64) for v in x])


def test_estimate_budget_algorithm1():
    s = gb.GraphSizes([10, 20, 30, 40], [100, 0, 50, 50])
    b = gb.estimate_budget(s, 32, rng=np.random.default_rng(0), sample_size=None)
    # mean nodes 25 * 32 = 800 -> 832 (next multiple of 64); mean edges 50 * 32 = 1600
    assert b == gb.Budget(832, 1600, 32)
    b2 = gb.estimate_budget(s, 32, rng=np.random.default_rng(0), sample_size=None, multiple=100)
    assert b2 == gb.Budget(800, 1600, 32)
    with pytest.raises(ValueError, match="batch_size = 1"):
        gb.estimate_budget(s, 1, rng=np.random.default_rng(0))


def test_stats_means_are_correctly_rounded_sums():
    """`plan --json`'s float statistics are the same on every machine: cost_mean and the step
    imbalance means are correctly rounded sums (math.fsum), not SIMD-ordered np.mean."""
    import math

    rng = np.random.default_rng(5)
    sizes = gb.GraphSizes(rng.integers(1, 40, 3000), rng.integers(0, 90, 3000))
    plan = gb.plan(
        sizes, "kk", batch_size=7, seed=1, world_size=8, cost_nodes=0.1, cost_edges=1.0 / 3.0
    )
    st = plan.stats()
    full = plan.graphs_per_batch > 0
    cost = plan.batch_costs()[full]
    assert st.cost_mean == math.fsum(cost.tolist()) / cost.shape[0]
    grid = np.zeros((plan.num_steps, plan.world_size), np.float64)
    grid[plan.step, plan.rank] = plan.real_nodes
    mean = grid.sum(axis=1) / plan.world_size
    ratio = np.where(mean > 0, grid.max(axis=1) / np.where(mean > 0, mean, 1.0), 1.0)
    assert st.step_node_imbalance_mean == math.fsum(ratio.tolist()) / ratio.shape[0]
