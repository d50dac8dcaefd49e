"""Dense band propagation (Algorithm 1) vs scatter-add, and the GGNN on both backends."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from graphbatch.lowband import (  # noqa: E402
    BLOCK_L,
    BLOCK_U,
    apply_reordering,
    bandwidths,
    build_supergraphs,
    reduce_bandwidth,
)
from graphbatch.lowband.nn import (  # noqa: E402
    GGNN,
    BandPropagation,
    ScatterPropagation,
    band_blocks,
)

from .._lowband_graphs import random_collection  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny matmuls on a shared 2-core machine: one thread avoids oversubscription stalls."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def dense_reference(sg, h):
    """Plain loop over kept edges into per-type dense matrices A_p, then A_p @ E."""
    n, p = sg.num_nodes, sg.num_edge_types
    a = np.zeros((p, n, n))
    for j, i, t in zip(sg.senders, sg.receivers, sg.edge_type, strict=True):
        a[t, i, j] += 1.0
    pre = np.einsum("pij,jh->iph", a, h.numpy())
    return pre.reshape(n, p * h.shape[1])


def reordered(seed, count=20, **kw):
    g = random_collection(seed, count, **kw)
    return apply_reordering(g, reduce_bandwidth(g))


@pytest.mark.parametrize("s,k", [(4, 1), (4, 5), (8, 3), (16, 4), (5, 7)])
def test_band_equals_scatter_and_dense_reference_on_kept_edges(s, k):
    graphs = reordered(s * 100 + k, max_nodes=s * k, max_band=3 * s, num_edge_types=3)
    res = build_supergraphs(graphs, s, k, seed=1)
    assert res.num_dropped > 0 or s >= 16 or k == 1  # small blocks drop edges: covered too
    gen = torch.Generator().manual_seed(0)
    for sg in res.supergraphs:
        band = BandPropagation.from_supergraph(sg, dtype=torch.float64)
        scat = ScatterPropagation.from_supergraph(sg)
        h = torch.randn(sg.num_nodes, 6, dtype=torch.float64, generator=gen)
        got = band.premessages(h)
        assert got.shape == (s * k, 3 * 6)
        torch.testing.assert_close(got, scat.premessages(h), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got.numpy(), dense_reference(sg, h), rtol=1e-12, atol=1e-12)
        assert torch.equal(band.in_degree, scat.in_degree.to(torch.float64))


def test_blocks_layout_and_triangularity():
    graphs = reordered(11, max_nodes=30, max_band=6)
    s, k = 8, 6
    res = build_supergraphs(graphs, s, k, filter_bandwidth=True, seed=0)
    for sg in res.supergraphs:
        c, u, lo = band_blocks(sg, 4, dtype=torch.float64)
        assert c.shape == (k, s * 4, s) and u.shape == lo.shape == (k - 1, s * 4, s)
        assert int(c.sum() + u.sum() + lo.sum()) == sg.num_kept
        # bandwidth <= S-1: U blocks strictly lower, L blocks strictly upper triangular
        uu = u.reshape(k - 1, s, 4, s).sum(2)
        ll = lo.reshape(k - 1, s, 4, s).sum(2)
        assert torch.equal(uu, torch.tril(uu, -1)) and torch.equal(ll, torch.triu(ll, 1))
        # one edge checked by hand: row s_local*P + type, column sender's local slot
        for e in np.flatnonzero(sg.edge_class == BLOCK_U)[:3]:
            i, j, t = sg.receivers[e], sg.senders[e], sg.edge_type[e]
            assert u[i // s, (i % s) * 4 + t, j % s] >= 1
        for e in np.flatnonzero(sg.edge_class == BLOCK_L)[:3]:
            i, j, t = sg.receivers[e], sg.senders[e], sg.edge_type[e]
            assert lo[j // s, (i % s) * 4 + t, j % s] >= 1
    with pytest.raises(ValueError, match="below the supergraph"):
        band_blocks(res.supergraphs[0], 1)


def test_ggnn_backends_agree_in_forward_and_gradients():
    graphs = reordered(21, max_nodes=40, max_band=20, num_edge_types=2)
    sg = build_supergraphs(graphs, 16, 6, seed=0).supergraphs[0]
    torch.manual_seed(0)
    model = GGNN(8, 2, steps=3).double()
    torch.nn.init.normal_(model.bias)
    h0 = torch.randn(sg.num_nodes, 8, dtype=torch.float64)
    grads = []
    outs = []
    for prop in (
        BandPropagation.from_supergraph(sg, dtype=torch.float64),
        ScatterPropagation.from_supergraph(sg),
    ):
        model.zero_grad()
        out = model(h0, prop)
        out[: sg.num_real_nodes].square().sum().backward()
        outs.append(out.detach())
        grads.append([p.grad.clone() for p in model.parameters()])
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-10, atol=1e-10)
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def test_weights_trained_on_band_evaluate_on_all_edges_with_scatter():
    """Train with the band backend, evaluate the same weights with scatter on the original
    (not reordered) graphs and all their edges; with bandwidth-filtered graphs nothing is lost,
    so the per-node predictions agree after undoing the permutation."""
    raw = random_collection(31, 16, max_nodes=30, max_band=5, num_edge_types=2)
    raw = raw.replace(node_data={**raw.node_data, "uid": np.arange(raw.num_nodes)})
    graphs = apply_reordering(raw, reduce_bandwidth(raw))
    res = build_supergraphs(graphs, 16, 4, filter_bandwidth=True, seed=0)
    assert res.num_dropped == 0 and len(res.supergraphs) >= 2
    torch.manual_seed(1)
    model = GGNN(6, 2, steps=2)
    head = torch.nn.Linear(6, 5)
    embed = torch.nn.Linear(3, 6)
    params = [*model.parameters(), *head.parameters(), *embed.parameters()]
    batches = []
    for sg in res.supergraphs:
        x = torch.as_tensor(sg.gather_nodes(graphs.node_data["x"]), dtype=torch.float32)
        y = torch.as_tensor(sg.gather_nodes(graphs.node_data["label"], fill=-100))
        batches.append((BandPropagation.from_supergraph(sg), x, y))
    losses = []  # summed over the same supergraphs, one entry per epoch
    for _ in range(5):
        losses.append(0.0)
        for prop, x, y in batches:
            loss = torch.nn.functional.cross_entropy(
                head(model(embed(x), prop)), y, ignore_index=-100
            )
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():  # plain SGD (torch.optim would import torch._dynamo: slow)
                for p, g in zip(params, grads, strict=True):
                    p -= 0.05 * g
            losses[-1] += float(loss.detach())
    assert losses[-1] < losses[0]
    fresh = GGNN(6, 2, steps=2)
    fresh.load_state_dict(model.state_dict())  # same parameters, no backend-specific state
    with torch.no_grad():
        full = ScatterPropagation.from_graphs(raw)
        x_raw = torch.tensor(raw.node_data["x"], dtype=torch.float32)
        logits_full = head(fresh(embed(x_raw), full))
        for sg, (prop, x, _) in zip(res.supergraphs, batches, strict=True):
            logits_band = head(model(embed(x), prop))
            real = sg.node_index[: sg.num_real_nodes]
            uid = graphs.node_data["uid"][real]  # row of the same node in the raw graphs
            torch.testing.assert_close(
                logits_band[: sg.num_real_nodes], logits_full[uid], rtol=1e-4, atol=1e-5
            )


def test_equivalence_on_real_code_graphs():
    from graphbatch.lowband._sources import graphs_from_python

    src = Path(sysconfig.get_paths()["stdlib"]) / "json"
    graphs = graphs_from_python(src, limit=40)  # graphbatch.datasets code graphs, P = 4
    graphs = apply_reordering(graphs, reduce_bandwidth(graphs))
    assert bandwidths(graphs).max() > 32  # some graphs lose edges at S = 32
    res = build_supergraphs(graphs, 32, 8, seed=0)
    assert res.num_dropped > 0
    torch.manual_seed(2)
    model = GGNN(16, 4, steps=2).double()
    emb = torch.nn.Embedding(int(graphs.node_data["node_type"].max()) + 1, 16).double()
    for sg in res.supergraphs[:4]:
        h0 = emb(torch.as_tensor(sg.gather_nodes(graphs.node_data["node_type"])).long())
        band = BandPropagation.from_supergraph(sg, dtype=torch.float64)
        scat = ScatterPropagation.from_supergraph(sg)
        torch.testing.assert_close(band.premessages(h0), scat.premessages(h0))
        torch.testing.assert_close(model(h0, band), model(h0, scat), rtol=1e-9, atol=1e-9)


def test_bad_input_to_torch_parts():
    with pytest.raises(ValueError, match="hidden must be an integer >= 1, got 0"):
        GGNN(0, 2)
    c = torch.zeros(3, 8, 4)
    with pytest.raises(ValueError, match=r"U must have shape \[2, 8, 4\]"):
        BandPropagation(c, torch.zeros(3, 8, 4), torch.zeros(2, 8, 4))
    band = BandPropagation(c, torch.zeros(2, 8, 4), torch.zeros(2, 8, 4))
    with pytest.raises(ValueError, match=r"h must have shape \[12, H\]"):
        band.premessages(torch.zeros(10, 3))
    with pytest.raises(ValueError, match="edge endpoints"):
        ScatterPropagation([0, 5], [1, 2], [0, 0], 4, 1)
    with pytest.raises(ValueError, match="3 edge types, the model 2"):
        GGNN(4, 2, 1)(
            torch.zeros(12, 4),
            BandPropagation(torch.zeros(3, 12, 4), torch.zeros(2, 12, 4), torch.zeros(2, 12, 4)),
        )
