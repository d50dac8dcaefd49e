"""Fuzz of plans at the edges (issue 14): uint64 and huge values, zero budgets, zero-size graphs.

Every strategy either refuses the input with the library's error (a ``ValueError`` subclass
naming the value) or returns a plan that holds every graph exactly once, within its shapes, the
same on a second call. Nothing else -- no wrap-around, no ``ZeroDivisionError``, no hang.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphbatch as gb

MAX_COUNT, MAX_TOTAL = 2**36, 2**53  # documented limits (docs/plan-format.md)

# Every registered strategy, the packing ones included.
STRATEGIES = list(gb.strategy_names())


@st.composite
def edge_tables(draw) -> tuple[np.ndarray, np.ndarray]:
    """Small tables mixing zero-size graphs, ordinary ones and graphs near the per-graph limit."""
    n = draw(st.integers(1, 24))
    kinds = draw(st.lists(st.sampled_from(["zero", "small", "huge"]), min_size=n, max_size=n))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    nodes = np.zeros(n, dtype=np.int64)
    edges = np.zeros(n, dtype=np.int64)
    for i, k in enumerate(kinds):
        if k == "small":
            nodes[i] = rng.integers(1, 30)
            edges[i] = rng.integers(0, 60)
        elif k == "huge":
            nodes[i] = rng.integers(MAX_COUNT - 1000, MAX_COUNT + 1)
            edges[i] = rng.integers(0, MAX_COUNT + 1)
    return nodes, edges


def _is_library_error(exc: BaseException) -> bool:
    return isinstance(exc, ValueError)


def _check(plan: gb.BatchPlan, sizes: gb.GraphSizes) -> None:
    plan.validate(sizes)
    allidx = np.concatenate([plan.order, plan.skipped])
    assert np.array_equal(np.sort(allidx), np.arange(len(sizes)))
    for b, idx in enumerate(plan.batches()):
        nodes = sum(int(sizes.n_node[i]) for i in idx)  # Python ints: exact
        edges = sum(int(sizes.n_edge[i]) for i in idx)
        assert nodes == plan.real_nodes[b] and edges == plan.real_edges[b]
        assert nodes <= int(plan.pad_nodes[b]) - 1 and edges <= int(plan.pad_edges[b])
        assert len(idx) <= int(plan.pad_graphs[b]) - 1


@settings(max_examples=40, deadline=None)
@given(
    table=edge_tables(),
    strategy=st.sampled_from(STRATEGIES),
    batch_size=st.sampled_from([2, 3, 5, 17]),
    budget=st.one_of(
        st.none(),
        st.tuples(
            st.sampled_from([1, 2, 65, 2**37, 2**40]),
            st.sampled_from([0, 1, 64, 2**40]),
            st.sampled_from([2, 3, 9]),
        ),
    ),
    oversize=st.sampled_from(["skip", "own_batch", "error"]),
    world_size=st.sampled_from([1, 2]),
)
def test_edge_tables_plan_or_refuse(table, strategy, batch_size, budget, oversize, world_size):
    sizes = gb.GraphSizes(*table)
    strat = gb.get_strategy(strategy)
    kw = dict(batch_size=batch_size, on_oversize=oversize, world_size=world_size, seed=2)
    if budget is not None and strat.uses_budget:
        kw["budget"] = budget
    try:
        plan = gb.plan(sizes, strategy, **kw)
    except Exception as exc:
        assert _is_library_error(exc), f"{type(exc).__name__}: {exc}"
        return
    _check(plan, sizes)
    again = gb.plan(sizes, strategy, **kw)
    assert np.array_equal(plan.order, again.order) and np.array_equal(plan.offsets, again.offsets)
    assert np.array_equal(plan.pad_nodes, again.pad_nodes)


@settings(max_examples=40, deadline=None)
@given(
    values=st.lists(
        st.one_of(
            st.integers(0, 2**64 - 1),
            st.integers(0, MAX_COUNT + 2),
            st.integers(MAX_COUNT - 2, MAX_COUNT + 2),
        ),
        min_size=1,
        max_size=12,
    ),
    dtype=st.sampled_from([np.uint64, np.float64, object]),
)
def test_uint64_and_huge_values_are_refused_before_the_cast(values, dtype):
    """Values past the limit never reach a planner; those within it are kept exactly."""
    arr = np.array(values, dtype=dtype)
    expect_refused = dtype is object or max(values) > MAX_COUNT
    try:
        sizes = gb.GraphSizes(arr, np.zeros(len(values), dtype=np.int64))
    except (ValueError, TypeError) as exc:
        assert isinstance(exc, gb.GraphbatchError), exc
        assert expect_refused, f"refused {values}: {exc}"
        return
    assert not expect_refused, f"accepted {values} as {sizes.n_node.tolist()}"
    assert sizes.n_node.tolist() == values  # exact: no wrap, no rounding
    p = gb.plan(sizes, "dynamic", batch_size=3, on_oversize="own_batch")
    _check(p, sizes)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_zero_size_graphs_with_zero_edge_budget(strategy):
    """All-zero tables and a zero edge budget: a valid plan or a library error."""
    sizes = gb.GraphSizes(np.zeros(7), np.zeros(7))
    strat = gb.get_strategy(strategy)
    kw = {"budget": (2, 0, 3)} if strat.uses_budget else {"batch_size": 3}
    for oversize in ("error", "skip", "own_batch"):
        try:
            plan = gb.plan(sizes, strategy, on_oversize=oversize, **kw)
        except Exception as exc:
            assert _is_library_error(exc), f"{type(exc).__name__}: {exc}"
            continue
        _check(plan, sizes)
