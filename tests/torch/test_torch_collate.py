"""Padded PyG / plain-torch collation: exact shapes, masks, padding wiring, schema, unpad and
errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pyg_data = pytest.importorskip("torch_geometric.data")

import graphbatch as gb  # noqa: E402
import graphbatch.torch as gt  # noqa: E402
from graphbatch._padlayout import short_padding_batches  # noqa: E402

from .._torch_graphs import molecules, sizes_of  # noqa: E402

Data = pyg_data.Data


@pytest.fixture(scope="module")
def graphs():
    return molecules(60, seed=3)


def reference_concat(graphs):
    """Plain loop: concatenate graphs, offsetting edge_index by the preceding node counts."""
    z, pos, ei, ea, y = [], [], [], [], []
    off = 0
    for g in graphs:
        z.append(g.z)
        pos.append(g.pos)
        ei.append(g.edge_index + off)
        ea.append(g.edge_attr)
        y.append(g.y)
        off += g.num_nodes
    return {
        "z": torch.cat(z),
        "pos": torch.cat(pos),
        "edge_index": torch.cat(ei, 1),
        "edge_attr": torch.cat(ea),
        "y": torch.cat(y),
    }


def check_batch(b, graphs, idx, shape):
    n_node, n_edge, n_graph = shape
    g_real = len(idx)
    n_real = sum(graphs[i].num_nodes for i in idx)
    e_real = sum(graphs[i].num_edges for i in idx)
    # exact shapes
    assert b.z.shape == (n_node,) and b.pos.shape == (n_node, 3)
    assert b.edge_index.shape == (2, n_edge) and b.edge_attr.shape == (n_edge, 2)
    assert b.y.shape == (n_graph, 3)
    assert b.num_graphs == n_graph and b.num_nodes == n_node
    assert b.batch.shape == (n_node,) and b.ptr.shape == (n_graph + 1,)
    # masks and graph_index
    assert b.node_mask.tolist() == [True] * n_real + [False] * (n_node - n_real)
    assert b.edge_mask.tolist() == [True] * e_real + [False] * (n_edge - e_real)
    assert b.graph_mask.tolist() == [True] * g_real + [False] * (n_graph - g_real)
    assert b.graph_index.tolist() == list(idx) + [-1] * (n_graph - g_real)
    # batch / ptr consistent, the last slot owns all padding nodes, other padding graphs empty
    counts = [graphs[i].num_nodes for i in idx] + [0] * (n_graph - g_real - 1) + [n_node - n_real]
    assert (b.ptr[1:] - b.ptr[:-1]).tolist() == counts
    assert b.batch.tolist() == [g for g, c in enumerate(counts) for _ in range(c)]
    # padding edges touch padding nodes only; real edges stay within their graph
    pad_e = b.edge_index[:, e_real:]
    assert (pad_e >= n_real).all() and (pad_e < n_node).all()
    real_e = b.edge_index[:, :e_real]
    assert (b.batch[real_e[0]] == b.batch[real_e[1]]).all()
    # real content equals the plain-loop reference
    ref = reference_concat([graphs[i] for i in idx])
    assert torch.equal(b.z[:n_real], ref["z"]) and torch.equal(b.pos[:n_real], ref["pos"])
    assert torch.equal(b.edge_index[:, :e_real], ref["edge_index"])
    assert torch.equal(b.edge_attr[:e_real], ref["edge_attr"])
    assert torch.equal(b.y[:g_real], ref["y"])
    assert (b.z[n_real:] == 0).all() and (b.edge_attr[e_real:] == 0).all()


@pytest.mark.parametrize("strategy", gb.strategy_names())
def test_every_strategy_gives_exact_shapes(graphs, strategy):
    sizes = sizes_of(graphs)
    p = gb.plan(sizes, strategy, batch_size=8, seed=1)
    schema = gt.infer_schema(graphs)
    for b, idx in enumerate(p.batches()):
        idx = idx.tolist()
        batch = gt.collate([graphs[i] for i in idx], p.shape(b), graph_index=idx, schema=schema)
        check_batch(batch, graphs, idx, p.shape(b))


def test_inferred_schema_levels_and_custom_fields():
    g = []
    for n, e in ((3, 4), (5, 2), (2, 0)):
        d = Data(
            x=torch.randn(n, 4),
            edge_index=torch.randint(0, n, (2, e)),
            w=torch.randn(e),
            label=torch.tensor(n * 1.0),
            y=torch.randn(1, 2),
            count=n,
            name=f"g{n}",
            deg_hist=torch.randn(n, 2, 2),
        )
        g.append(d)
    s = gt.infer_schema(g)
    assert {k: v.level for k, v in s.items()} == {
        "x": "node",
        "edge_index": "edge",
        "w": "edge",
        "label": "graph",
        "y": "graph",
        "count": "graph",
        "name": "graph",
        "deg_hist": "node",
    }
    assert s["edge_index"].inc == "node" and s["x"].inc == "none"
    b = gt.collate(g, (16, 8, 5), schema=s.with_pad(x=-1.0, y=float("nan"), w=7.0))
    assert b.x.shape == (16, 4) and (b.x[10:] == -1).all()
    assert b.w.shape == (8,) and (b.w[6:] == 7).all()
    assert b.label.shape == (5,) and b.label[:3].tolist() == [3.0, 5.0, 2.0]
    assert torch.isnan(b.y[3:]).all() and torch.equal(b.y[:3], torch.cat([d.y for d in g]))
    assert b.count.tolist() == [3, 5, 2, 0, 0]
    assert b.name == ["g3", "g5", "g2", None, None]
    assert b.deg_hist.shape == (16, 2, 2)


class Transposed(Data):
    """A Data subclass whose node features are stored feature-major ([F, n], cat along dim 1)."""

    def __cat_dim__(self, key, value, *args, **kwargs):
        if key == "xt":
            return 1
        return super().__cat_dim__(key, value, *args, **kwargs)


def test_schema_follows_cat_dim_of_data_subclass():
    g = [
        Transposed(
            xt=torch.randn(3, n),
            z=torch.ones(n, dtype=torch.long),
            edge_index=torch.zeros(2, 1, dtype=torch.long),
            num_nodes=n,
        )
        for n in (2, 4)
    ]
    s = gt.infer_schema(g)
    assert s["xt"].level == "node" and s["xt"].cat_dim == 1
    b = gt.collate(g, (9, 4, 3), schema=s)
    assert b.xt.shape == (3, 9)
    assert torch.equal(b.xt[:, :6], torch.cat([d.xt for d in g], dim=1))
    assert isinstance(b, Transposed)


def test_node_index_fields_are_offset_and_padded_to_padding_nodes():
    g = [
        Data(
            x=torch.randn(n, 1),
            edge_index=torch.zeros(2, 0, dtype=torch.long),
            anchor_index=torch.tensor([n - 1]),
        )
        for n in (2, 3)
    ]
    s = gt.infer_schema(g)
    assert s["anchor_index"].level == "graph" and s["anchor_index"].inc == "node"
    b = gt.collate(g, (8, 0, 4), schema=s)
    assert b.anchor_index.tolist() == [1, 4, 5, 5]  # 2-1, 2+(3-1), padding -> first padding node


def test_cutoff_places_padding_far_when_two_padding_nodes(graphs):
    idx = [0, 1, 2]
    n_real = sum(graphs[i].num_nodes for i in idx)
    e_real = sum(graphs[i].num_edges for i in idx)
    shape = (n_real + 4, e_real + 11, 5)
    b = gt.collate([graphs[i] for i in idx], shape, cutoff=1.5)
    pad = b.edge_index[:, e_real:]
    length = (b.pos[pad[0]] - b.pos[pad[1]]).norm(dim=1)
    assert (length > 1.5).all()
    assert (pad[0] != pad[1]).all() and (pad >= n_real).all()
    # padding nodes are far from every real node
    dist = torch.cdist(b.pos[n_real:], b.pos[:n_real])
    assert (dist > 1.5).all()


def test_cutoff_with_one_padding_node_gives_self_loops(graphs):
    idx = [0, 1]
    n_real = sum(graphs[i].num_nodes for i in idx)
    e_real = sum(graphs[i].num_edges for i in idx)
    b = gt.collate([graphs[i] for i in idx], (n_real + 1, e_real + 3, 3), cutoff=1.5)
    assert (b.edge_index[:, e_real:] == n_real).all()


def test_short_padding_batches_matches_loop(graphs):
    p = gb.plan(sizes_of(graphs), "dynamic", budget=(40, 200, 8), seed=0)
    expect = [
        b
        for b in range(len(p))
        if p.pad_nodes[b] - p.real_nodes[b] == 1 and p.pad_edges[b] > p.real_edges[b]
    ]
    assert short_padding_batches(p).tolist() == expect


def tiny_model(z, pos, edge_index, batch, num_graphs, node_mask=None, edge_mask=None):
    """One message-passing step with a distance filter, then a per-graph sum readout."""
    gen = torch.Generator().manual_seed(0)
    emb = torch.randn(16, 4, generator=gen, dtype=torch.float64)
    h = emb[z]
    src, dst = edge_index
    d = (pos[src] - pos[dst]).double().norm(dim=1, keepdim=True)
    msg = h[src] * torch.exp(-d)
    if edge_mask is not None:
        msg = torch.where(edge_mask[:, None], msg, 0.0)
    agg = torch.zeros_like(h).index_add_(0, dst, msg)
    node_out = h + agg
    if node_mask is not None:
        node_out = torch.where(node_mask[:, None], node_out, 0.0)
    graph_out = torch.zeros(num_graphs, 4, dtype=h.dtype).index_add_(0, batch, node_out)
    return node_out, graph_out


def test_unpad_matches_unpadded_reference(graphs):
    p = gb.plan(sizes_of(graphs), "static-64", batch_size=10, seed=2)
    schema = gt.infer_schema(graphs)
    for b, idx in enumerate(p.batches()):
        idx = idx.tolist()
        bt = gt.collate([graphs[i] for i in idx], p.shape(b), graph_index=idx, schema=schema)
        node_out, graph_out = tiny_model(
            bt.z, bt.pos, bt.edge_index, bt.batch, bt.num_graphs, bt.node_mask, bt.edge_mask
        )
        per_graph = gt.unpad(graph_out, bt, level="graph")
        per_node = gt.unpad(node_out, bt, level="node")
        assert per_graph.shape[0] == len(idx) and len(per_node) == len(idx)
        for k, i in enumerate(idx):
            g = graphs[i]
            ref_nodes, ref_graph = tiny_model(
                g.z, g.pos, g.edge_index, torch.zeros(g.num_nodes, dtype=torch.long), 1
            )
            torch.testing.assert_close(per_node[k], ref_nodes)
            torch.testing.assert_close(per_graph[k], ref_graph[0])
        edge_vals = gt.unpad(bt.edge_attr, bt, level="edge")
        for k, i in enumerate(idx):
            assert torch.equal(edge_vals[k], graphs[i].edge_attr)


def test_unpad_graphs_round_trip(graphs):
    idx = [5, 9, 2]
    b = gt.collate([graphs[i] for i in idx], (64, 256, 6), graph_index=idx)
    back = gt.unpad_graphs(b)
    assert len(back) == 3
    for d, i in zip(back, idx, strict=False):
        for key in ("z", "pos", "edge_index", "edge_attr", "y"):
            assert torch.equal(d[key], graphs[i][key]), key


def test_dict_variant_matches_pyg(graphs):
    idx = [3, 4, 5, 6]
    shape = (80, 300, 7)
    b = gt.collate([graphs[i] for i in idx], shape, graph_index=idx)
    plain = [{k: graphs[i][k] for k in ("z", "pos", "edge_index", "edge_attr", "y")} for i in idx]
    d = gt.collate_dict(plain, shape, graph_index=idx)
    for key in (
        "z",
        "pos",
        "edge_index",
        "edge_attr",
        "y",
        "batch",
        "ptr",
        "node_mask",
        "edge_mask",
        "graph_mask",
        "graph_index",
    ):
        assert torch.equal(d[key], b[key]), key
    assert d["num_graphs"] == 7
    counts = (d["edge_ptr"][1:] - d["edge_ptr"][:-1])[:4].tolist()
    assert counts == [graphs[i].num_edges for i in idx]
    assert [t.shape[0] for t in gt.unpad(d["pos"], d, level="node")] == [
        graphs[i].num_nodes for i in idx
    ]


def test_empty_batch_from_schema(graphs):
    schema = gt.infer_schema(graphs)
    b = gt.collate([], (8, 16, 2), schema=schema)
    assert b.z.shape == (8,) and b.edge_index.shape == (2, 16) and b.y.shape == (2, 3)
    assert not b.node_mask.any() and not b.graph_mask.any()
    assert b.graph_index.tolist() == [-1, -1]


# ------------------------------------------------------------------- errors
def test_graph_too_large_for_shape(graphs):
    g = graphs[0]
    with pytest.raises(ValueError, match="do not fit the padded shape"):
        gt.collate([g], (g.num_nodes, g.num_edges + 5, 2))
    with pytest.raises(ValueError, match="do not fit the padded shape"):
        gt.collate([g], (g.num_nodes + 1, max(g.num_edges - 1, 0), 2))
    with pytest.raises(ValueError, match="n_graph = 2"):
        gt.collate([g, g], (100, 400, 2))


def test_missing_edge_index():
    g = [Data(x=torch.randn(3, 2)), Data(x=torch.randn(2, 2))]
    with pytest.raises(ValueError, match="edge_index"):
        gt.collate(g, (8, 8, 3))


def test_mismatched_attribute_sizes(graphs):
    bad = graphs[1].clone()
    bad.pos = torch.randn(bad.num_nodes + 1, 3)
    schema = gt.infer_schema(graphs[:4])
    with pytest.raises(
        ValueError,
        match="mismatched attribute sizes: node-level field '(z|pos)' "
        r"has \d+ entries along dim 0, but its node-level field '(pos|z)' says",
    ):
        gt.collate([graphs[0], bad], (64, 256, 3), graph_index=[0, 1], schema=schema)
    with pytest.raises(ValueError, match="in graph 1, matching neither"):
        gt.infer_schema([graphs[0], bad])


def test_missing_attribute_in_one_graph(graphs):
    other = graphs[1].clone()
    del other.edge_attr
    with pytest.raises(ValueError, match="has no attribute 'edge_attr'"):
        gt.collate([graphs[0], other], (64, 256, 3))
    schema = gt.infer_schema(graphs[:3])
    with pytest.raises(ValueError, match=r"graph 1 \(dataset index 7\) has no attribute"):
        gt.collate([graphs[0], other], (64, 256, 3), graph_index=[4, 7], schema=schema)


def test_reserved_attribute_names_refused():
    g = [
        Data(
            x=torch.randn(2, 1),
            edge_index=torch.zeros(2, 0, dtype=torch.long),
            node_mask=torch.ones(2, dtype=torch.bool),
        )
    ]
    with pytest.raises(ValueError, match="clashes"):
        gt.collate(g, (4, 0, 2))


def test_cutoff_needs_positions():
    g = [Data(x=torch.randn(2, 1), edge_index=torch.zeros(2, 0, dtype=torch.long))]
    with pytest.raises(ValueError, match="positions"):
        gt.collate(g, (4, 0, 2), cutoff=2.0)
    with pytest.raises(ValueError, match="cutoff"):
        gt.collate(g, (4, 0, 2), cutoff=-1.0)


def test_core_import_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, graphbatch; print('torch' in sys.modules, 'jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


@settings(max_examples=40, deadline=None)
@given(
    counts=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 9)), min_size=0, max_size=7),
    slack=st.tuples(st.integers(1, 5), st.integers(0, 7), st.integers(1, 3)),
    seed=st.integers(0, 2**16),
    cutoff=st.sampled_from([None, 0.7]),
)
def test_collate_dict_rules_hold_for_random_graphs(counts, slack, seed, cutoff):
    """Graphs with 0..6 nodes (empty graphs included) and random slack: the rules hold."""
    rng = np.random.default_rng(seed)
    graphs = []
    for n, e in counts:
        e = e if n else 0
        graphs.append(
            {
                "num_nodes": n,
                "pos": torch.from_numpy(rng.normal(size=(n, 2))),
                "edge_index": torch.from_numpy(rng.integers(0, max(n, 1), size=(2, e))),
                "w": torch.from_numpy(rng.normal(size=e)),
            }
        )
    schema = gt.Schema(
        {
            "pos": gt.FieldSpec("node", 0, dtype=torch.float64, shape=(-1, 2)),
            "edge_index": gt.FieldSpec("edge", 1, "node", dtype=torch.int64, shape=(2, -1)),
            "w": gt.FieldSpec("edge", 0, pad=-1.0, dtype=torch.float64, shape=(-1,)),
        }
    )
    n_real = sum(g["num_nodes"] for g in graphs)
    e_real = sum(g["edge_index"].shape[1] for g in graphs)
    shape = (n_real + slack[0], e_real + slack[1], max(2, len(graphs) + slack[2]))
    d = gt.collate_dict(graphs, shape, schema=schema, cutoff=cutoff)
    # reference by a plain loop
    off, ei, batch = 0, [], []
    for k, g in enumerate(graphs):
        ei.append(g["edge_index"] + off)
        batch += [k] * g["num_nodes"]
        off += g["num_nodes"]
    assert d["pos"].shape == (shape[0], 2) and d["edge_index"].shape == (2, shape[1])
    if graphs:
        assert torch.equal(d["edge_index"][:, :e_real], torch.cat(ei, 1))
    assert d["batch"][:n_real].tolist() == batch
    assert (d["batch"][n_real:] == shape[2] - 1).all()  # the last slot owns padding nodes
    pad = d["edge_index"][:, e_real:]
    assert ((pad >= n_real) & (pad < shape[0])).all()
    assert (d["w"][e_real:] == -1).all()
    assert int(d["node_mask"].sum()) == n_real and int(d["edge_mask"].sum()) == e_real
    if cutoff is not None and shape[0] - n_real >= 2:
        length = (d["pos"][pad[0]] - d["pos"][pad[1]]).norm(dim=1)
        assert (length > cutoff).all()
