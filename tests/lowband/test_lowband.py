"""Low-bandwidth preprocessing (NumPy/SciPy): RCM reordering, statistics, supergraphs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import graphbatch as gb
from graphbatch.lowband import (
    BLOCK_C,
    BLOCK_L,
    BLOCK_U,
    DROPPED,
    EdgeGraphs,
    apply_reordering,
    bandwidth_summary,
    bandwidths,
    build_supergraphs,
    classify_edges,
    graph_bandwidth,
    rcm_permutation,
    reduce_bandwidth,
)

from .._lowband_graphs import random_banded, random_collection


def dense_bandwidth(n, edge_index):
    """Bandwidth by definition: smallest B with a_ij = 0 for |i-j| > B, from a dense matrix."""
    a = np.zeros((n, n), bool)
    for j, i in zip(*edge_index, strict=True):
        a[i, j] = True
    b = 0
    for i in range(n):
        for j in range(n):
            if a[i, j]:
                b = max(b, abs(i - j))
    return b


def edge_multiset(graphs, key="uid"):
    """Edges as (graph, uid[sender], uid[receiver], type) — invariant under node renumbering."""
    out = []
    for g in range(len(graphs)):
        _, ei, et = graphs.graph(g)
        uid = graphs.node_data[key][graphs.node_offsets[g] : graphs.node_offsets[g + 1]]
        out += [
            (g, int(uid[s]), int(uid[r]), int(t)) for s, r, t in zip(ei[0], ei[1], et, strict=True)
        ]
    return sorted(out)


# ----------------------------------------------------------------------- bandwidth and RCM
def test_bandwidth_matches_dense_definition():
    rng = np.random.default_rng(3)
    for _ in range(20):
        n, ei, et = random_banded(rng, int(rng.integers(1, 25)), 4, 30)
        g = EdgeGraphs.from_graphs([(n, ei, et)])
        assert bandwidths(g)[0] == dense_bandwidth(n, ei) == graph_bandwidth(ei)


@given(seed=st.integers(0, 2**31 - 1), shuffle=st.booleans(), max_band=st.integers(0, 20))
def test_rcm_never_widens_and_permutes_consistently(seed, shuffle, max_band):
    graphs = random_collection(seed, 12, max_band=max_band, shuffle=shuffle)
    graphs = graphs.replace(node_data={**graphs.node_data, "uid": np.arange(graphs.num_nodes)})
    r = reduce_bandwidth(graphs)
    assert (r.after <= r.before).all()
    assert np.array_equal(r.before, bandwidths(graphs))
    assert np.array_equal(r.after, np.where(r.used_rcm, r.rcm, r.before))
    out = apply_reordering(graphs, r)
    # each graph's perm is a permutation of its local ids
    for g in range(len(graphs)):
        a, b = graphs.node_offsets[g], graphs.node_offsets[g + 1]
        assert sorted(r.perm[a:b].tolist()) == list(range(b - a))
        assert dense_bandwidth(*out.graph(g)[:2]) == r.after[g]
    # same edges between the same nodes; features and labels travel with their node
    assert edge_multiset(out) == edge_multiset(graphs)
    uid = out.node_data["uid"]
    for name in ("x", "label"):
        assert np.array_equal(out.node_data[name], graphs.node_data[name][uid])


def test_plain_rcm_on_symmetrised_adjacency_per_graph():
    rng = np.random.default_rng(5)
    n, ei, et = random_banded(rng, 40, 3, 80)
    perm = rcm_permutation(n, ei)
    assert sorted(perm.tolist()) == list(range(n))
    inv = np.argsort(perm)
    assert graph_bandwidth(inv[ei]) <= 2 * 3 * 2  # a relabelled band-3 graph comes back narrow
    g = EdgeGraphs.from_graphs([(n, ei, et)])
    r = reduce_bandwidth(g, keep_better=False)
    assert r.used_rcm.all() and np.array_equal(r.after, r.rcm)


def test_self_loops_and_isolated_nodes_are_handled():
    # graph 0: self loops only; graph 1: isolated nodes 0 and 4 plus a path 3-1-2; graph 2: empty
    g = EdgeGraphs.from_graphs(
        [
            (3, np.array([[0, 1, 2], [0, 1, 2]]), None),
            (5, np.array([[3, 1, 1, 2, 1], [1, 3, 2, 1, 1]]), None),
            (0, np.zeros((2, 0), np.int64), None),
        ]
    )
    assert bandwidths(g).tolist() == [0, 2, 0]
    r = reduce_bandwidth(g)
    assert r.after.tolist() == [0, 1, 0]  # the path becomes consecutive, isolated nodes aside
    out = apply_reordering(g, r)
    assert bandwidths(out).tolist() == [0, 1, 0]
    assert (out.senders[:3] == out.receivers[:3]).all()  # self loops stay self loops
    sg = build_supergraphs(out, 4, 2, shuffle=False)
    assert sum(len(s.graph_index) for s in sg.supergraphs) == 3
    assert sg.num_dropped == 0


def test_bad_graph_input_is_rejected_with_the_value():
    with pytest.raises(ValueError, match=r"receivers\[1\] = 5 .* graph 0, which has 3 nodes"):
        EdgeGraphs([3], [2], [0, 1], [1, 5])
    with pytest.raises(ValueError, match="negative"):
        EdgeGraphs([3], [1], [-1], [0])
    with pytest.raises(ValueError, match=r"shape \[2, E\]"):
        EdgeGraphs.from_graphs([(3, np.zeros((3, 2), np.int64))])
    with pytest.raises(ValueError, match="edge_type"):
        EdgeGraphs([3], [1], [0], [1], [2], num_edge_types=2)
    with pytest.raises(ValueError, match="node_data"):
        EdgeGraphs([3], [0], [], [], node_data={"x": np.zeros(2)})
    g = random_collection(0, 3)
    bad = reduce_bandwidth(g)
    object.__setattr__(bad, "perm", np.zeros_like(bad.perm))
    with pytest.raises(ValueError, match="not a permutation"):
        apply_reordering(g, bad)


def test_save_load_round_trip_and_size_table_error(tmp_path):
    g = random_collection(1, 5)
    g.save(tmp_path / "g.npz")
    h = EdgeGraphs.load(tmp_path / "g.npz")
    for name in ("n_node", "n_edge", "senders", "receivers", "edge_type"):
        assert np.array_equal(getattr(g, name), getattr(h, name))
    assert np.array_equal(g.node_data["x"], h.node_data["x"])
    g.sizes().save(tmp_path / "sizes.npz")
    with pytest.raises(ValueError, match="size table has no edges"):
        EdgeGraphs.load(tmp_path / "sizes.npz")


# ----------------------------------------------------------------------- statistics
def test_summary_values_against_plain_loops():
    rng = np.random.default_rng(7)
    n = rng.integers(1, 3000, 500)
    before = np.array([int(rng.integers(0, v)) if v > 1 else 0 for v in n])
    after = np.array([int(rng.integers(0, b + 1)) for b in before])
    s = bandwidth_summary(n, before, after)
    for t in (128, 256, 512, 1024):
        assert s.share_below[t] == sum(1 for b in after if b < t) / 500
        assert s.share_below_before[t] == sum(1 for b in before if b < t) / 500
    ratio = [v / max(b, 1) for v, b in zip(n, after, strict=True)]
    assert s.share_ratio_at_least_3 == sum(1 for x in ratio if x >= 3) / 500
    assert sum(s.ratio_counts) == 500
    assert s.ratio_counts[0] == sum(1 for x in ratio if 1 <= x < 1.5)
    assert s.max_bandwidth_after == max(after) and s.num_nodes == int(n.sum())
    with pytest.raises(ValueError, match="equal lengths"):
        bandwidth_summary(n, before[:-1], after)


# ----------------------------------------------------------------------- supergraphs
def test_classify_edges_follows_the_paper_rule():
    s = 4
    # receiver 5 is in block 1 (slots 4..7)
    senders = np.array([5, 7, 4, 8, 11, 3, 0, 12, 15, 1])
    cls = classify_edges(senders, np.full(10, 5), s)
    assert cls.tolist() == [
        BLOCK_C,
        BLOCK_C,
        BLOCK_C,
        BLOCK_U,
        BLOCK_U,
        BLOCK_L,
        BLOCK_L,
        DROPPED,
        DROPPED,
        BLOCK_L,
    ]
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 200, 2000), rng.integers(0, 200, 2000)
    c = classify_edges(a, b, 8)
    d = np.abs(a - b)
    assert (c[d < 8] != DROPPED).all()  # |i-j| < S: always kept
    assert (c[d >= 16] == DROPPED).all()  # |i-j| >= 2S: always dropped
    mid = (d >= 8) & (d < 16)  # in between: kept iff blocks adjacent
    assert np.array_equal(c[mid] != DROPPED, np.abs(a // 8 - b // 8)[mid] == 1)
    with pytest.raises(ValueError, match="block_size must be >= 1, got 0"):
        classify_edges(a, b, 0)


def place_and_count(graphs, supergraphs, block_size):
    """Independent edge accounting: lay out each supergraph with a plain loop and count."""
    kept = dropped = 0
    for sg in supergraphs:
        offset = 0
        for g in sg.graph_index:
            n, ei, _ = graphs.graph(int(g))
            for j, i in zip(ei[0], ei[1], strict=True):
                bi, bj = (i + offset) // block_size, (j + offset) // block_size
                if abs(bi - bj) >= 2:
                    dropped += 1
                else:
                    kept += 1
            offset += n
    return kept, dropped


@given(
    seed=st.integers(0, 2**31 - 1), s=st.integers(1, 24), k=st.integers(1, 6), filt=st.booleans()
)
def test_supergraph_rules_and_edge_accounting(seed, s, k, filt):
    graphs = random_collection(seed, 15, max_nodes=40, max_band=16)
    graphs = apply_reordering(graphs, reduce_bandwidth(graphs))
    res = build_supergraphs(graphs, s, k, filter_bandwidth=filt, seed=seed % 7)
    packed = np.concatenate([sg.graph_index for sg in res.supergraphs] or [np.zeros(0, int)])
    everything = np.concatenate([packed, res.filtered, res.oversize])
    assert sorted(everything.tolist()) == list(range(len(graphs)))  # every graph exactly once
    bw = bandwidths(graphs)
    assert (bw[res.filtered] >= s).all() and (graphs.n_node[res.oversize] > s * k).all()
    kept, dropped = place_and_count(graphs, res.supergraphs, s)
    assert (res.num_kept, res.num_dropped) == (kept, dropped)
    assert res.num_edges == kept + dropped
    for sg in res.supergraphs:
        assert sg.num_real_nodes <= s * k
        assert (sg.edge_class == classify_edges(sg.senders, sg.receivers, s)).all()
        # kept edges are the source edges moved by their graph's offset
        gi = np.searchsorted(graphs.edge_offsets, sg.edge_index, side="right") - 1
        pos = {int(g): int(o) for g, o in zip(sg.graph_index, sg.node_offset, strict=True)}
        shift = np.array([pos[int(g)] for g in gi], dtype=np.int64)
        assert np.array_equal(sg.senders, graphs.senders[sg.edge_index] + shift)
        assert np.array_equal(sg.receivers, graphs.receivers[sg.edge_index] + shift)
        x = sg.gather_nodes(graphs.node_data["x"], fill=np.nan)
        for g, o, n in zip(sg.graph_index, sg.node_offset, sg.n_node, strict=True):
            a = graphs.node_offsets[g]
            assert np.array_equal(x[o : o + n], graphs.node_data["x"][a : a + n])
        assert np.isnan(x[sg.num_real_nodes :]).all()
        if filt or (bw[sg.graph_index] < s).all():
            # bandwidth invariant: graphs with B <= S-1 give a supergraph with B <= S-1
            assert sg.bandwidth() <= s - 1 and sg.num_dropped == 0


def test_supergraph_bad_input():
    g = random_collection(2, 6, max_nodes=30)
    with pytest.raises(ValueError, match="block_size must be >= 1, got 0"):
        build_supergraphs(g, 0, 4)
    with pytest.raises(ValueError, match="num_blocks must be >= 1, got -1"):
        build_supergraphs(g, 8, -1)
    with pytest.raises(ValueError, match="own_batch"):
        build_supergraphs(g, 8, 4, on_oversize="own_batch")
    with pytest.raises(ValueError, match="node budget"):
        build_supergraphs(g, 8, 4, strategy="static-64")
    big = int(np.argmax(g.n_node))
    with pytest.raises(ValueError, match=f"graph {big} has {g.n_node[big]} nodes"):
        build_supergraphs(g, 2, 2, on_oversize="error", shuffle=False)
    with pytest.raises(TypeError, match="EdgeGraphs"):
        build_supergraphs(g.sizes(), 8, 4)


def test_numpy_part_imports_no_framework():
    import subprocess
    import sys

    code = (
        "import sys, graphbatch.lowband, graphbatch.cli._bandwidth_cmd; "
        "bad = [m for m in ('torch', 'jax', 'torch_geometric') if m in sys.modules]; "
        "sys.exit(1 if bad else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_band_coverage_against_independent_counts():
    from graphbatch.lowband import band_coverage

    graphs = random_collection(9, 25, max_nodes=50, max_band=20)
    graphs = apply_reordering(graphs, reduce_bandwidth(graphs))
    rows = band_coverage(graphs, [4, 8, 16], 6, seed=3)
    for row in rows:
        s = row["block_size"]
        bw = [dense_bandwidth(*graphs.graph(g)[:2]) for g in range(len(graphs))]
        assert row["graphs_bw_below_S"] == sum(b < s for b in bw) / len(graphs)
        res = build_supergraphs(graphs, s, 6, seed=3)
        kept, dropped = place_and_count(graphs, res.supergraphs, s)
        assert row["edges_kept_share"] == pytest.approx(kept / (kept + dropped))
        assert row["graphs_oversize"] == sum(int(n) > 6 * s for n in graphs.n_node)


@pytest.mark.parametrize(
    "strategy", [n for n in gb.strategy_names() if gb.get_strategy(n).uses_budget]
)
def test_every_budget_strategy_packs_supergraphs_within_k_times_s(strategy):
    graphs = random_collection(12, 40, max_nodes=60, max_band=10)
    graphs = apply_reordering(graphs, reduce_bandwidth(graphs))
    res = build_supergraphs(graphs, 16, 4, strategy=strategy, seed=1)
    assert res.meta["strategy"] == strategy
    packed = np.concatenate([sg.graph_index for sg in res.supergraphs])
    assert sorted(np.concatenate([packed, res.oversize]).tolist()) == list(range(len(graphs)))
    assert all(sg.num_real_nodes <= 64 for sg in res.supergraphs)
    assert (res.num_kept, res.num_dropped) == place_and_count(graphs, res.supergraphs, 16)


def test_default_strategy_is_the_first_registered_preference():
    from graphbatch.lowband import PREFERRED_STRATEGIES, default_strategy

    names = gb.strategy_names()
    assert default_strategy() == next(n for n in PREFERRED_STRATEGIES if n in names)
    g = random_collection(13, 5, max_nodes=20)
    assert build_supergraphs(g, 8, 4).meta["strategy"] == default_strategy()
