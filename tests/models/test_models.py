"""Reference models on padded batches: padded == unpadded per graph, gradients, compile."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from graphbatch.models import (  # noqa: E402
    MODELS,
    MPEU,
    PaiNN,
    SchNet,
    batch_inputs,
    build_model,
    count_parameters,
    pair_reverse_edges,
    unpadded_inputs,
)
from graphbatch.models._ops import shifted_softplus  # noqa: E402

SMALL = {
    "schnet": dict(hidden=16, filters=16, num_interactions=2, num_gaussians=8, cutoff=4.0),
    "mpeu": dict(hidden=12, edge_dim=10, num_steps=2, num_gaussians=8, cutoff=4.0),
    "painn": dict(features=12, num_layers=2, num_rbf=8, cutoff=4.0),
}


def molecules(num, seed=0, cutoff=4.0):
    """Random 'molecules' (z, pos, radius-graph edge_index with both directions) as NumPy."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(num):
        n = int(rng.integers(2, 9))
        pos = rng.normal(size=(n, 3)) * 1.5
        d = np.linalg.norm(pos[:, None] - pos[None], axis=-1)
        s, t = np.nonzero((d < cutoff) & ~np.eye(n, dtype=bool))
        perm = rng.permutation(s.shape[0])  # edge order must not matter
        out.append((rng.integers(1, 10, n), pos, np.stack([s[perm], t[perm]])))
    return out


def concat(mols):
    z, pos, ei, b, off = [], [], [], [], 0
    for g, (zz, pp, ee) in enumerate(mols):
        z.append(zz), pos.append(pp), ei.append(ee + off), b.append(np.full(len(zz), g))
        off += len(zz)
    return (np.concatenate(z), np.concatenate(pos), np.concatenate(ei, 1), np.concatenate(b))


def t(z, pos, ei, b):
    return (
        torch.as_tensor(z, dtype=torch.long),
        torch.as_tensor(pos, dtype=torch.float32),
        torch.as_tensor(ei, dtype=torch.long),
        torch.as_tensor(b, dtype=torch.long),
    )


def padded(mols, pad_nodes=7, pad_edges=11, extra_graphs=2, seed=1):
    """Real graphs first, then a padding graph with ``pad_nodes`` nodes (some coincident, as
    lazy collation would place them) and ``pad_edges`` edges among them (self loops included),
    then ``extra_graphs - 1`` empty padding graphs. Built by hand, independent of the adapter."""
    rng = np.random.default_rng(seed)
    z, pos, ei, b = concat(mols)
    n, g = len(z), len(mols)
    pz = np.zeros(pad_nodes, dtype=np.int64)
    ppos = np.zeros((pad_nodes, 3))
    ppos[1::2] = rng.normal(size=(len(ppos[1::2]), 3))  # some far, some at the same point
    pei = rng.integers(n, n + pad_nodes, size=(2, pad_edges))
    pei[:, 0] = n  # a self loop at distance 0
    out = dict(
        zip(
            ("z", "pos", "edge_index", "batch"),
            t(
                np.concatenate([z, pz]),
                np.concatenate([pos, ppos]),
                np.concatenate([ei, pei], 1),
                np.concatenate([b, np.full(pad_nodes, g)]),
            ),
            strict=True,
        )
    )
    out["node_mask"] = torch.arange(n + pad_nodes) < n
    out["edge_mask"] = torch.arange(ei.shape[1] + pad_edges) < ei.shape[1]
    out["num_graphs"] = g + extra_graphs
    return out


def unpadded(mols):
    z, pos, ei, b = t(*concat(mols))
    return unpadded_inputs(z, pos, ei, b, len(mols))


def make(name, seed=0, **kw):
    torch.manual_seed(seed)
    params = dict(SMALL[name], **kw)
    return build_model(name, **params)


CASES = [("schnet", {}), ("schnet", {"pair_edges": True}), ("mpeu", {}), ("painn", {})]


@pytest.mark.parametrize("name,kw", CASES)
def test_padded_equals_unpadded_and_single_graphs(name, kw):
    mols = molecules(5, seed=3)
    model = make(name, **kw).double()
    pad = {k: (v.double() if k == "pos" else v) for k, v in padded(mols).items()}
    ref = {k: (v.double() if k == "pos" else v) for k, v in unpadded(mols).items()}
    with torch.no_grad():
        out_pad = model(**pad)
        out_ref = model(**ref)
        singles = torch.cat(
            [
                model(**{k: (v.double() if k == "pos" else v) for k, v in unpadded([m]).items()})
                for m in mols
            ]
        )
    assert out_pad.shape == (len(mols) + 2,)
    torch.testing.assert_close(out_pad[: len(mols)], out_ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(out_ref, singles, rtol=1e-10, atol=1e-10)
    assert torch.all(out_pad[len(mols) :] == 0)  # padding graphs: exactly nothing


@pytest.mark.parametrize("name,kw", CASES)
def test_padding_contributes_no_gradient(name, kw):
    mols = molecules(4, seed=5)
    y = torch.randn(len(mols))
    grads = []
    for inputs in (padded(mols), unpadded(mols)):
        model = make(name, seed=1, **kw)
        out = model(**inputs)[: len(mols)]
        ((out - y) ** 2).mean().backward()
        grads.append({k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for k in grads[0]:
        assert torch.isfinite(grads[0][k]).all(), k
        torch.testing.assert_close(grads[0][k], grads[1][k], rtol=1e-4, atol=1e-6, msg=k)


def test_schnet_matches_pyg_schnet_with_the_same_weights():
    pyg = pytest.importorskip("torch_geometric.nn.models")
    mols = molecules(4, seed=7)
    ref = unpadded(mols)
    ours = SchNet(hidden=16, filters=12, num_interactions=3, num_gaussians=8, cutoff=4.0).double()
    ei = ref["edge_index"]

    def graph(pos, batch):
        return ei, (pos[ei[0]] - pos[ei[1]]).norm(dim=-1)

    theirs = pyg.SchNet(
        hidden_channels=16,
        num_filters=12,
        num_interactions=3,
        num_gaussians=8,
        cutoff=4.0,
        interaction_graph=graph,
    ).double()
    assert count_parameters(ours) == count_parameters(theirs)
    with torch.no_grad():
        ours.embedding.weight.copy_(theirs.embedding.weight)
        w1 = torch.cat([b.mlp[0].weight for b in theirs.interactions])
        b1 = torch.cat([b.mlp[0].bias for b in theirs.interactions])
        ours.filter1.weight.copy_(w1), ours.filter1.bias.copy_(b1)
        for mine, blk in zip(ours.interactions, theirs.interactions, strict=True):
            mine.filter2.load_state_dict(blk.mlp[2].state_dict())
            mine.lin_in.load_state_dict(blk.conv.lin1.state_dict())
            mine.lin_out.load_state_dict(blk.conv.lin2.state_dict())
            mine.lin.load_state_dict(blk.lin.state_dict())
        ours.out1.load_state_dict(theirs.lin1.state_dict())
        ours.out2.load_state_dict(theirs.lin2.state_dict())
        expect = theirs(ref["z"], ref["pos"].double(), ref["batch"]).view(-1)
        got = ours(**dict(ref, pos=ref["pos"].double()))
        ours.pair_edges = True
        got_paired = ours(**dict(ref, pos=ref["pos"].double()))
    torch.testing.assert_close(got, expect, rtol=1e-7, atol=1e-7)
    torch.testing.assert_close(got_paired, expect, rtol=1e-7, atol=1e-7)


def test_painn_is_rotation_and_translation_invariant():
    mols = molecules(3, seed=11)
    model = make("painn").double()
    ref = unpadded(mols)
    q, _ = torch.linalg.qr(
        torch.randn(3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    )
    with torch.no_grad():
        a = model(**dict(ref, pos=ref["pos"].double()))
        b = model(**dict(ref, pos=ref["pos"].double() @ q.T + 3.0))
    torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


def test_gaussian_rbf_never_emits_subnormals():
    """Features are exp(coeff (d - mu)^2), floored to exactly 0 below exp(RBF_MIN_EXPONENT), so no
    float32 subnormal (which slows CPU matrix products ~20x) reaches the filter network."""
    from graphbatch.models import GaussianRBF
    from graphbatch.models._ops import RBF_MIN_EXPONENT

    rbf = GaussianRBF(0.0, 6.0, 25)
    d = torch.linspace(0.0, 6.0, 20001, requires_grad=True)
    out = rbf(d)
    tiny = torch.finfo(torch.float32).tiny
    assert not ((out != 0) & (out.abs() < tiny)).any()
    arg = rbf.coeff * (d.detach().unsqueeze(-1) - rbf.centres) ** 2
    expect = torch.where(arg > RBF_MIN_EXPONENT, torch.exp(arg.double()), 0.0).float()
    torch.testing.assert_close(out.detach(), expect, rtol=1e-6, atol=0)
    # the unfloored expansion would hold subnormals at these distances
    assert ((torch.exp(arg) != 0) & (torch.exp(arg) < tiny)).any()
    out.sum().backward()
    assert torch.isfinite(d.grad).all()


def test_shifted_softplus_is_stable_and_matches_definition():
    x = torch.tensor([-1e4, -30.0, -1.0, 0.0, 1e-3, 2.0, 50.0, 1e4], dtype=torch.float64)
    expect = torch.tensor(
        [math.log1p(math.exp(v)) if v < 30 else v for v in x.tolist()], dtype=torch.float64
    ) - math.log(2.0)
    torch.testing.assert_close(shifted_softplus(x), expect)
    assert shifted_softplus(torch.zeros(1)).item() == 0.0
    # the branch-free formula (used under torch.compile) agrees too
    stable = torch.log1p(torch.exp(-x.abs())) + x.clamp_min(0) - math.log(2.0)
    torch.testing.assert_close(stable, expect)


def test_pair_reverse_edges_rejects_asymmetric_graphs():
    ei = torch.tensor([[0, 1, 1], [1, 0, 2]])
    with pytest.raises(ValueError, match="symmetric"):
        pair_reverse_edges(ei, torch.ones(3, dtype=torch.bool), 3)
    # symmetric real part plus odd padding: accepted, reverse pairs adjacent, padding last
    ei = torch.tensor([[2, 0, 1, 0, 5], [0, 1, 0, 2, 5]])
    mask = torch.tensor([True, True, True, True, False])
    e2, m2 = pair_reverse_edges(ei, mask, 6)
    assert e2.shape == (2, 6) and m2.tolist() == [True] * 4 + [False] * 2
    assert torch.equal(e2[:, 0:4:2], e2[:, 1:4:2].flip(0))


def test_bad_hyperparameters_and_missing_inputs():
    with pytest.raises(ValueError, match="cutoff"):
        SchNet(cutoff=0.0)
    with pytest.raises(ValueError, match="num_layers"):
        PaiNN(num_layers=0)
    with pytest.raises(ValueError, match="hidden"):
        MPEU(hidden=0)
    with pytest.raises(ValueError, match="unknown model"):
        build_model("gcn")

    class Half:
        z = torch.zeros(1)

    with pytest.raises(AttributeError, match="pos"):
        batch_inputs(Half())


def test_parameter_counts():
    counts = {name: count_parameters(build_model(name)) for name in MODELS}
    # SchNet's count equals PyG's SchNet with the same hyperparameters (checked above on a small
    # model); with the defaults: embedding 100x100, 4 x (filter 25*100+100 + 100*100+100,
    # lin_in 100*100, lin_out 100*100+100, lin 100*100+100), readout 100*50+50 + 50+1
    assert counts["schnet"] == 100 * 100 + 4 * (2600 + 10100 + 10000 + 10100 + 10100) + 5050 + 51
    assert all(c > 0 for c in counts.values())


@pytest.mark.parametrize("name", sorted(SMALL))
def test_fullgraph_trace_once_per_shape(name):
    """No graph breaks (fullgraph=True) and one Dynamo compilation per distinct padded shape.

    Uses the ``eager`` backend: Dynamo's tracing and guards are what decide graph breaks and
    recompilations; Inductor code generation is exercised by the bench tests."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = make(name)
    fn = torch.compile(model, dynamic=False, fullgraph=True, backend="eager")
    shapes = [(7, 11), (7, 11), (9, 13), (7, 11)]
    for k, (pn, pe) in enumerate(shapes):
        mols = molecules(3, seed=20 + k)
        inputs = padded(mols, pad_nodes=pn, pad_edges=pe)
        n_real, e_real = int(inputs["node_mask"].sum()), int(inputs["edge_mask"].sum())
        inputs = padded(mols, pad_nodes=pn + 40 - n_real, pad_edges=pe + 120 - e_real)
        out = fn(**inputs)
        with torch.no_grad():
            torch.testing.assert_close(out, model(**inputs), rtol=1e-5, atol=1e-5)
    assert counters["stats"]["unique_graphs"] == 2
    assert not counters["graph_break"]
    torch._dynamo.reset()


def test_gather_scatter_operators_pass_opcheck():
    """The opaque CPU operators used under torch.compile: schema, fake kernels, autograd."""
    from graphbatch.models._ops import _gather_rows_op, _scatter_sum_op

    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 4, 3, dtype=torch.float64, generator=g, requires_grad=True)
    idx = torch.tensor([0, 5, 5, 2, 0, 1, 3])
    src = torch.randn(7, 4, 3, dtype=torch.float64, generator=g, requires_grad=True)
    torch.library.opcheck(_gather_rows_op, (x, idx))
    torch.library.opcheck(_scatter_sum_op, (src, idx, 6))
    assert torch.autograd.gradcheck(lambda a: _gather_rows_op(a, idx), (x,))
    assert torch.autograd.gradcheck(lambda a: _scatter_sum_op(a, idx, 6), (src,))


@pytest.mark.parametrize("name", sorted(SMALL))
def test_compiled_model_equals_eager_with_gradients(name):
    """Under torch.compile (AOTAutograd, which traces our gather/scatter operators and their
    gradients) outputs and parameter gradients equal eager ones."""
    torch._dynamo.reset()
    model = make(name).double()
    mols = molecules(3, seed=5)
    inputs = padded(mols, pad_nodes=60, pad_edges=200)
    inputs["pos"] = inputs["pos"].double()

    def grads(fn):
        model.zero_grad()
        out = fn(**inputs)
        (out * torch.arange(1.0, out.shape[0] + 1, dtype=out.dtype)).sum().backward()
        return out.detach(), [p.grad.clone() for p in model.parameters()]

    ref_out, ref_g = grads(model)
    fn = torch.compile(model, dynamic=False, fullgraph=True, backend="aot_eager")
    out, g = grads(fn)
    torch.testing.assert_close(out, ref_out, rtol=1e-10, atol=1e-10)
    for a, b in zip(g, ref_g, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)
