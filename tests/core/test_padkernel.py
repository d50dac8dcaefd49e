"""The padding kernel (`graphbatch._padkernel`, run by `graphbatch._padbatch.pad_batch`) against
its plain reference form: graph by graph, slot by slot, in Python loops -- the statement of what
the vectorised kernel computes. And the JAX collation, now on the kernel, against jraph itself
(``jraph.pad_with_graphs(jraph.batch_np(graphs))``) for random graphs and feature trees."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphbatch import _padkernel as pk
from graphbatch._padbatch import PackedGraphs, pad_batch
from graphbatch._padlayout import auto_spacing, padding_edge_index, padding_positions


# ------------------------------------------------------------------ the reference form
def reference_pad(graphs, shape, layout, cutoff=None, pad=None):
    """Graphs (dicts: ``x`` [n, 3] float32 positions, ``a`` [n] int16, ``w`` [e, 2] float64,
    ``edge_index`` [2, e] local, ``y`` [1] float32) padded to ``shape``, one graph at a time."""
    n_node, n_edge, n_graph = shape
    pad = pad or {}
    g_real = len(graphs)
    owner = n_graph - 1 if layout == "torch" else g_real
    node_counts, edge_counts = [0] * n_graph, [0] * n_graph
    x, a, w, y, ei, batch = [], [], [], [], [[], []], []
    first = 0
    for g, graph in enumerate(graphs):
        n = graph["x"].shape[0]
        node_counts[g], edge_counts[g] = n, graph["edge_index"].shape[1]
        for r in range(n):
            x.append(graph["x"][r])
            a.append(graph["a"][r])
            batch.append(g)
        for k in range(graph["edge_index"].shape[1]):
            ei[0].append(int(graph["edge_index"][0, k]) + first)
            ei[1].append(int(graph["edge_index"][1, k]) + first)
            w.append(graph["w"][k])
        y.append(graph["y"][0])
        first += n
    n_real, e_real = first, len(ei[0])
    node_counts[owner] += n_node - n_real
    edge_counts[owner] += n_edge - e_real
    geometric = cutoff is not None or layout == "torch"
    pads = padding_edge_index(n_real, n_node, n_edge - e_real, spread=geometric)
    ei[0] += pads[0].tolist()
    ei[1] += pads[1].tolist()
    real_x = np.array(x, dtype=np.float32).reshape(-1, 3)
    if geometric:
        s = cutoff if cutoff is not None else auto_spacing(real_x)
        top = real_x.max(axis=0) if n_real else np.zeros(3)
        pad_x = padding_positions(top, n_node - n_real, s).astype(np.float32)
    else:
        pad_x = np.full((n_node - n_real, 3), pad.get("x", 0), dtype=np.float32)
    for g in range(n_graph):
        if g >= g_real:
            batch += [g] * node_counts[g]
    return {
        "x": np.concatenate([real_x, pad_x]),
        "a": np.array(a + [pad.get("a", 0)] * (n_node - n_real), dtype=np.int16),
        "w": np.array(w + [[pad.get("w", 0)] * 2] * (n_edge - e_real), dtype=np.float64).reshape(
            n_edge, 2
        ),
        "y": np.array(y + [pad.get("y", 0)] * (n_graph - g_real), dtype=np.float32),
        "edge_index": np.array(ei, dtype=np.int64).reshape(2, n_edge),
        "node_counts": np.array(node_counts),
        "edge_counts": np.array(edge_counts),
        "node_ptr": np.cumsum([0, *node_counts]),
        "edge_ptr": np.cumsum([0, *edge_counts]),
        "batch": np.array(batch),
        "node_mask": np.arange(n_node) < n_real,
        "edge_mask": np.arange(n_edge) < e_real,
        "graph_mask": np.arange(n_graph) < g_real,
    }


def _random_graphs(sizes, seed):
    rng = np.random.default_rng(seed)
    out = []
    for n, e in sizes:
        e = e if n else 0
        out.append(
            {
                "x": rng.uniform(-3, 3, (n, 3)).astype(np.float32),
                "a": rng.integers(-9, 9, n).astype(np.int16),
                "w": rng.uniform(0, 1, (e, 2)),
                "edge_index": rng.integers(0, max(n, 1), (2, e)).astype(np.int32),
                "y": rng.uniform(0, 1, 1).astype(np.float32),
            }
        )
    return out


def _packed(graphs):
    nn = np.array([g["x"].shape[0] for g in graphs], dtype=np.int64)
    ne = np.array([g["edge_index"].shape[1] for g in graphs], dtype=np.int64)

    def cat(k: str, shape: tuple[int, ...]) -> np.ndarray:
        return np.concatenate([g[k] for g in graphs]) if graphs else np.zeros(shape, np.float32)

    return PackedGraphs(
        nn,
        ne,
        np.concatenate([[0], np.cumsum(nn)]).astype(np.int64),
        np.concatenate([[0], np.cumsum(ne)]).astype(np.int64),
        np.concatenate([g["edge_index"] for g in graphs], axis=1)
        if graphs
        else np.zeros((2, 0), np.int32),
        node={"x": cat("x", (0, 3)), "a": cat("a", (0,)).astype(np.int16)},
        edge={"w": cat("w", (0, 2)).astype(np.float64)},
        graph={"y": cat("y", (0,))},
    )


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 12)), min_size=1, max_size=9),
    take=st.data(),
    slack=st.tuples(st.integers(1, 6), st.integers(0, 6), st.integers(1, 4)),
    layout=st.sampled_from(["torch", "jraph"]),
    cutoff=st.sampled_from([None, 0.5, 2.0]),
    seed=st.integers(0, 2**16),
)
def test_pad_batch_equals_its_reference_form(sizes, take, slack, layout, cutoff, seed):
    graphs = _random_graphs(sizes, seed)
    idx = take.draw(st.lists(st.integers(0, len(graphs) - 1), max_size=6))
    chosen = [graphs[i] for i in idx]
    n = sum(g["x"].shape[0] for g in chosen)
    e = sum(g["edge_index"].shape[1] for g in chosen)
    shape = (n + slack[0], e + slack[1], max(len(idx) + slack[2], 2))
    pad = {"a": -1, "w": 7.5, "y": 0.25}
    got = pad_batch(
        _packed(graphs),
        np.array(idx, dtype=np.int64),
        shape,
        layout=layout,
        cutoff=cutoff,
        position_key="x",
        pad=pad,
    )
    want = reference_pad(chosen, shape, layout, cutoff, pad)
    for key, value in want.items():
        have = got.fields[key] if key in got.fields else getattr(got, key)
        assert have.shape == value.shape, key
        assert np.array_equal(have, value.astype(have.dtype)), key
    assert np.array_equal(got.graph_index, np.array(idx + [-1] * (shape[2] - len(idx))))


@given(
    real=st.lists(st.integers(0, 50), max_size=8),
    extra=st.integers(0, 20),
    spare=st.integers(1, 4),
    layout=st.sampled_from(pk.LAYOUTS),
)
def test_slot_counts_equal_a_loop(real, extra, spare, layout):
    n_graph = len(real) + spare
    owner = pk.padding_owner(layout, len(real), n_graph)
    counts, ptr = pk.slot_counts(np.array(real, dtype=np.int64), extra, n_graph, owner)
    want = real + [0] * spare
    want[owner] += extra
    total, want_ptr = 0, [0]
    for c in want:
        total += c
        want_ptr.append(total)
    assert counts.tolist() == want and ptr.tolist() == want_ptr
    assert counts.dtype == ptr.dtype == np.int64


def test_layout_and_fit_errors_name_the_values():
    with pytest.raises(ValueError, match="layout must be one of"):
        pk.padding_owner("pyg", 1, 3)
    with pytest.raises(ValueError, match="3 graphs do not fit a padded shape with n_graph = 3"):
        pk.check_fits((3, 1, 1), (10, 10, 3))
    with pytest.raises(ValueError, match=r"with 10 nodes and 1 edges do not fit .* room for 9"):
        pk.check_fits((1, 10, 1), (10, 10, 3))
    pk.check_fits((2, 9, 10), (10, 10, 3))


def test_fill_structure_writes_the_given_arrays():
    out = {
        name: np.full({"node": 5, "edge": 4, "graph": 3}[lv], 7, dtype=dt)
        for name, lv, dt in pk.STRUCTURE
    }
    counts, _ = pk.slot_counts([2, 1], 2, 3, 2)
    got = pk.fill_structure((5, 4, 3), (2, 3, 1), counts, [40, 41], out=out)
    assert all(got[k] is out[k] for k in out)
    assert got["batch"].tolist() == [0, 0, 1, 2, 2]
    assert got["edge_mask"].tolist() == [True, False, False, False]
    assert got["graph_index"].tolist() == [40, 41, -1]


# ------------------------------------------------------------------ JAX collation vs jraph
def _jraph_graphs(seed, n_items, *, per_item=1, dtype=np.int32, count_dtype=np.int32):
    jraph = pytest.importorskip("jraph")
    rng = np.random.default_rng(seed)
    items = []
    for _ in range(n_items):
        parts = []
        for _ in range(per_item):
            k = int(rng.integers(1, 6))
            m = int(rng.integers(0, 2 * k + 1))
            parts.append(
                jraph.GraphsTuple(
                    n_node=np.array([k], dtype=count_dtype),
                    n_edge=np.array([m], dtype=count_dtype),
                    nodes={
                        "pos": rng.uniform(0, 4, (k, 3)).astype(np.float32),
                        "h": [rng.integers(0, 5, (k,)), None],
                    },
                    edges=rng.uniform(0, 1, (m, 2)),
                    globals={"u": rng.uniform(0, 1, (1, 4))},
                    senders=rng.integers(0, k, m).astype(dtype),
                    receivers=rng.integers(0, k, m).astype(dtype),
                )
            )
        items.append(jraph.batch_np(parts) if per_item > 1 else parts[0])
    return items


def _same_tree(a, b):
    import jax

    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    assert ta == tb
    for x, y in zip(la, lb, strict=False):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y)


@pytest.mark.parametrize("per_item", [1, 3])
@pytest.mark.parametrize(
    "dtype,count_dtype", [(np.int32, np.int32), (np.int64, np.int64), (np.uint8, np.int32)]
)
@pytest.mark.parametrize("seed", range(4))
def test_jax_collate_equals_jraph_pad_with_graphs(seed, per_item, dtype, count_dtype):
    jraph = pytest.importorskip("jraph")
    from graphbatch.jax import collate

    items = _jraph_graphs(
        seed, 1 + seed * 2, per_item=per_item, dtype=dtype, count_dtype=count_dtype
    )
    batched = jraph.batch_np(items)
    n, e, g = int(batched.n_node.sum()), int(batched.n_edge.sum()), batched.n_node.shape[0]
    for shape in ((n + 1, e, g + 1), (n + 4, e + 3, g + 3)):
        got = collate(items, shape)
        _same_tree(got.graphs, jraph.pad_with_graphs(batched, *shape))
        assert got.graph_index.tolist() == list(range(g)) + [-1] * (shape[2] - g)


def test_jax_collate_refuses_bad_graphs():
    pytest.importorskip("jraph")
    from graphbatch.jax import collate

    items = _jraph_graphs(0, 3)
    with pytest.raises(ValueError):
        collate([items[0], items[1]._replace(nodes={"pos": items[1].nodes["pos"]})], (60, 60, 4))
    bad = items[2]._replace(senders=items[2].senders + 50)
    if bad.senders.size:
        with pytest.raises(ValueError, match="outside its"):
            collate([items[0], bad], (60, 60, 4))
    with pytest.raises(ValueError, match="do not fit"):
        collate(items, (2, 60, 4))
