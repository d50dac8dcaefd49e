"""Issue 14 structure items for the packing layer: kernels below the planners, one batch lower
bound, one histogram, named dealers."""

import importlib
from pathlib import Path

import numpy as np
import pytest

import graphbatch as gb
from graphbatch.packing import _dealing, lower_bound
from graphbatch.packing._greedy import batches_lower_bound, budget_lower_bound

from .._imports import imports_of

PACKING = Path(gb.__file__).parent / "packing"


def test_packing_never_imports_planners():
    for path in PACKING.glob("*.py"):
        assert not any("planners" in m for m in imports_of(path)), path.name


def test_one_histogram():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("graphbatch.packing._hist")


@pytest.mark.parametrize("seed", range(20))
def test_one_lower_bound(seed):
    rng = np.random.default_rng(seed)
    n = rng.integers(0, 30, 50)
    e = np.where(n > 0, rng.integers(0, 60, 50), 0)
    budget = gb.Budget(
        int(rng.integers(30, 200)), int(rng.integers(60, 400)), int(rng.integers(2, 20))
    )
    h = gb.GraphSizes(n, e).histogram()
    want = max(
        -(-int(n.sum()) // budget.node_capacity),
        -(-int(e.sum()) // budget.n_edge),
        -(-50 // budget.graph_capacity),
    )
    assert (
        lower_bound(
            h.n_node,
            h.n_edge,
            h.count,
            budget.node_capacity,
            budget.edge_capacity,
            budget.graph_capacity,
        )
        == want
    )
    assert budget_lower_bound(int(n.sum()), int(e.sum()), 50, budget) == want


def test_lower_bound_zero_capacity():
    # zero-size graphs fit a node capacity of 0 (issue 14: ZeroDivisionError)
    assert batches_lower_bound(0, 0, 5, 0, 0, 2) == 3
    with pytest.raises(ValueError, match="cannot fit batches of capacity 0"):
        batches_lower_bound(4, 0, 5, 0, 0, 2)


@pytest.mark.parametrize("strategy", ["pack-lpf", "pack-spf", "buckets"])
def test_zero_size_graphs_with_one_node_budget(strategy):
    sizes = gb.GraphSizes([0] * 5, [0] * 5)
    p = gb.plan(sizes, strategy, budget=(1, 0, 3))
    p.validate(sizes)
    assert p.num_graphs == 5 and len(p) == 3


def test_named_dealers_deal_every_graph_once():
    assert "isinstance(pre" not in (PACKING / "_dealing.py").read_text()
    rng = np.random.default_rng(0)
    count = rng.integers(1, 5, 30)
    end = np.cumsum(count)
    n_items = int(end[-1])
    key = rng.integers(10, 200, 30)  # integer keys (quantised sizes), capacity 1000
    pos = np.repeat(np.arange(30), count)
    dealers = [
        _dealing.SnakeDealer(end),
        _dealing.SlotsDealer(pos[:5], pos[5:], key, 1000, 50),
        _dealing.PreloadedDealer(pos[3:], pos[:3], np.array([0, 2, 3]), key),
    ]
    for d in dealers:
        grid = d.deal(7)
        assert grid.shape[0] >= 7
        got = np.sort(grid[grid >= 0])
        assert np.array_equal(got, np.sort(pos)), type(d).__name__
    assert n_items == pos.shape[0]


def test_planning_errors_are_graphbatch_errors():
    # packing/ and planners/ raise the library's errors (still ValueError / TypeError)
    import re

    for pkg in ("packing", "planners"):
        for path in (Path(gb.__file__).parent / pkg).glob("*.py"):
            src = path.read_text()
            assert not re.search(r"raise (ValueError|TypeError)\b", src), path.name
    from graphbatch import GraphbatchError
    from graphbatch.packing import pack_bins, pack_histogram

    with pytest.raises(GraphbatchError, match="'bogus'") as err:
        pack_bins([1], [1], [1], node_limit=4, edge_limit=4, graph_limit=2, method="bogus")
    assert isinstance(err.value, ValueError)
    with pytest.raises(ValueError, match="exceed the limits of 4 nodes") as err:
        pack_histogram([9], [1], [1], node_limit=4, edge_limit=4, graph_limit=2)
    assert isinstance(err.value, GraphbatchError)
    with pytest.raises(TypeError, match="tight_shape") as err:
        gb.plan(gb.GraphSizes([3, 4], [2, 2]), "dynamic", batch_size=2, tight_shape="yes")
    assert isinstance(err.value, GraphbatchError)


def test_planners_reach_the_kernels_through_public_modules_only():
    # graphbatch.packing (user API) and graphbatch.packing.kernels (the strategies' kernels)
    for path in (PACKING.parent / "planners").glob("*.py"):
        for m in imports_of(path):
            if m.startswith(("..packing", "graphbatch.packing")):
                assert m.split(".")[-1] in ("packing", "kernels"), (path.name, m)
