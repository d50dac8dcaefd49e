"""Stock PyG models on padded batches equal the unpadded run per graph (outputs, loss, gradients,
BatchNorm running statistics), and compile once with ``torch.compile(dynamic=False)`` over an
epoch: SchNet with ``interaction_graph=gt.batch_edges``, OGB's GIN recipe (GINE + BatchNorm, train
mode) through `convert_masked_norm`, and a DimeNet-style basis (Bessel basis with the ``1/x``
envelope, ``sqrt(sum of squares)`` distances) with default options. Plus the stock readouts and
the OGB featurisation parity on MOSES."""

from __future__ import annotations

import copy
import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")

from torch_geometric.data import Batch, Data  # noqa: E402
from torch_geometric.nn import (  # noqa: E402
    GINEConv,
    global_add_pool,
    global_max_pool,
    global_mean_pool,
)
from torch_geometric.nn.models import SchNet  # noqa: E402
from torch_geometric.nn.models.dimenet import BesselBasisLayer  # noqa: E402
from torch_geometric.utils import scatter  # noqa: E402

import graphbatch.torch as gt  # noqa: E402
from graphbatch.torch._masks import PaddingMasks  # noqa: E402

from .._torch_graphs import molecules  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(scope="module")
def graphs():
    return molecules(36, seed=13, max_nodes=9)


def unpadded(graphs, batch):
    """The PyG batch of the same real graphs, in the same order, without padding."""
    ids = batch.graph_index[batch.graph_mask].tolist()
    return Batch.from_data_list([graphs[i] for i in ids])


def all_ones(b):
    """Masks of an unpadded batch (every row real), for the `padding_masks` context."""
    ones = lambda n: torch.ones(n, dtype=torch.bool)  # noqa: E731
    return PaddingMasks(ones(b.num_nodes), ones(b.num_edges), ones(b.num_graphs), b.edge_index)


def grads(model):
    return {k: p.grad.detach().clone() for k, p in model.named_parameters() if p.grad is not None}


def compare_epoch(ld, graphs, make_model, run, *, compile_=True):
    """One epoch: for every batch, the padded model (compiled, counting compilations) and an
    unpadded copy give equal per-graph outputs, losses and gradients. Returns the number of
    frames compiled after the first batch and after the epoch."""
    from torch._dynamo.testing import CompileCounter

    torch.manual_seed(0)
    ref = make_model()
    padded = copy.deepcopy(ref)
    torch._dynamo.reset()
    counter = CompileCounter()
    step = torch.compile(padded, backend=counter, dynamic=False) if compile_ else padded
    counts = []
    n_batches = 0
    with torch._dynamo.config.patch(error_on_recompile=True):
        for batch in ld:
            n_batches += 1
            padded.zero_grad()
            out_p = run(step, batch, padded=True)
            assert out_p.shape[0] == batch.num_graphs  # stock readout: n_graph rows
            loss_p = gt.masked_mean((out_p - batch.y[:, 0]) ** 2, batch.graph_mask)
            loss_p.backward()
            ub = unpadded(graphs, batch)
            ref.zero_grad()
            out_u = run(ref, ub, padded=False)
            loss_u = ((out_u - ub.y[:, 0]) ** 2).mean()
            loss_u.backward()
            torch.testing.assert_close(
                gt.unpad(out_p.detach(), batch), out_u.detach(), rtol=RTOL, atol=ATOL
            )
            torch.testing.assert_close(loss_p.detach(), loss_u.detach(), rtol=RTOL, atol=ATOL)
            gp, gu = grads(padded), grads(ref)
            assert gp.keys() == gu.keys() and gp
            for k in gp:
                assert torch.isfinite(gp[k]).all(), k
                torch.testing.assert_close(gp[k], gu[k], rtol=RTOL, atol=ATOL, msg=k)
            counts.append(counter.frame_count)
    assert n_batches > 3 and ld.plan.stats().distinct_shapes == 1
    return counts[0], counts[-1], padded, ref


# ---------------------------------------------------------------------------------- SchNet
def test_pyg_schnet_with_batch_edges(graphs):
    ld = gt.loader(graphs, strategy="dynamic", batch_size=6, seed=1)

    def make():
        return SchNet(
            hidden_channels=16,
            num_filters=16,
            num_interactions=2,
            num_gaussians=8,
            cutoff=3.0,
            interaction_graph=gt.batch_edges,
        )

    def run(model, b, padded):
        with gt.padding_masks(b if padded else all_ones(b)):
            return model(b.z, b.pos, b.batch)[:, 0]

    first, last, _, _ = compare_epoch(ld, graphs, make, run)
    assert first == last >= 1  # no recompilation over the epoch


# ------------------------------------------------------------------- OGB GIN + BatchNorm
class OGBGIN(torch.nn.Module):
    """OGB's molecule GIN recipe: Atom/BondEncoder, GINE convolutions whose MLP has a
    BatchNorm, a BatchNorm after each convolution, mean readout; forward takes the batch."""

    def __init__(self, emb: int = 16, layers: int = 2) -> None:
        super().__init__()
        from ogb.graphproppred.mol_encoder import AtomEncoder, BondEncoder

        self.atom = AtomEncoder(emb)
        self.bonds = torch.nn.ModuleList(BondEncoder(emb) for _ in range(layers))
        self.convs = torch.nn.ModuleList(
            GINEConv(
                torch.nn.Sequential(
                    torch.nn.Linear(emb, 2 * emb),
                    torch.nn.BatchNorm1d(2 * emb),
                    torch.nn.ReLU(),
                    torch.nn.Linear(2 * emb, emb),
                ),
                train_eps=True,
            )
            for _ in range(layers)
        )
        self.norms = torch.nn.ModuleList(torch.nn.BatchNorm1d(emb) for _ in range(layers))
        self.pred = torch.nn.Linear(emb, 1)

    def forward(self, data):
        h = self.atom(data.x)
        for conv, bond, norm in zip(self.convs, self.bonds, self.norms, strict=True):
            h = torch.relu(norm(conv(h, data.edge_index, bond(data.edge_attr))))
        return self.pred(global_mean_pool(h, data.batch))[:, 0]


@pytest.fixture(scope="module")
def ogb_graphs():
    from ogb.utils import smiles2graph

    from graphbatch.datasets import load_moses_smiles

    out = []
    rng = np.random.default_rng(0)
    for s in load_moses_smiles("train", limit=30):
        g = smiles2graph(s)
        out.append(
            Data(
                x=torch.from_numpy(g["node_feat"]),
                edge_attr=torch.from_numpy(g["edge_feat"]),
                edge_index=torch.from_numpy(g["edge_index"]),
                y=torch.from_numpy(rng.normal(size=(1, 1))).float(),
            )
        )
    return out


def test_ogb_gin_batchnorm_train_mode_via_masked_layers(ogb_graphs):
    ld = gt.loader(ogb_graphs, strategy="dynamic", batch_size=5, seed=2)

    def make():
        return OGBGIN().train()

    # the padded model is a converted deep copy; the reference keeps torch's BatchNorm1d.
    # Its forward is unchanged: the hook of convert_masked_norm finds the batch argument.
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    counter = CompileCounter()
    torch.manual_seed(0)
    ref = make()
    padded = gt.convert_masked_norm(copy.deepcopy(ref))
    assert sum(isinstance(m, gt.MaskedBatchNorm) for m in padded.modules()) == 4
    assert not any(isinstance(m, torch.nn.BatchNorm1d) for m in padded.modules())
    step = torch.compile(padded, backend=counter, dynamic=False)
    counts = []
    with torch._dynamo.config.patch(error_on_recompile=True):
        for batch in ld:
            padded.zero_grad()
            ref.zero_grad()
            out_p = step(batch)
            assert out_p.shape[0] == batch.num_graphs
            loss_p = gt.masked_mean((out_p - batch.y[:, 0]) ** 2, batch.graph_mask)
            loss_p.backward()
            ub = unpadded(ogb_graphs, batch)
            out_u = ref(ub)
            loss_u = ((out_u - ub.y[:, 0]) ** 2).mean()
            loss_u.backward()
            torch.testing.assert_close(
                gt.unpad(out_p.detach(), batch), out_u.detach(), rtol=RTOL, atol=ATOL
            )
            torch.testing.assert_close(loss_p.detach(), loss_u.detach(), rtol=RTOL, atol=ATOL)
            gp, gu = grads(padded), grads(ref)
            assert gp.keys() == gu.keys()
            for k in gp:
                torch.testing.assert_close(gp[k], gu[k], rtol=RTOL, atol=ATOL, msg=k)
            counts.append(counter.frame_count)
    assert len(counts) > 3 and counts[0] == counts[-1] >= 1
    # running statistics: updated from real nodes only, as the unpadded BatchNorm1d's
    sp, sr = padded.state_dict(), ref.state_dict()
    assert sp.keys() == sr.keys()
    for k in sp:
        torch.testing.assert_close(sp[k], sr[k], rtol=RTOL, atol=ATOL, msg=k)
    # eval mode uses the running statistics, padded or not
    padded.eval(), ref.eval()
    b = next(iter(ld))
    torch.testing.assert_close(
        gt.unpad(padded(b).detach(), b), ref(unpadded(ogb_graphs, b)).detach(), rtol=RTOL, atol=ATOL
    )


def test_stock_batchnorm_sees_padding_without_conversion(ogb_graphs):
    """The reason for the masked layers: a stock BatchNorm in train mode differs when padded."""
    ld = gt.loader(ogb_graphs, strategy="dynamic", batch_size=5, seed=2)
    torch.manual_seed(0)
    model = OGBGIN().train()
    b = next(iter(ld))
    out_p = gt.unpad(model(b).detach(), b)
    out_u = model(unpadded(ogb_graphs, b)).detach()
    assert not torch.allclose(out_p, out_u, rtol=RTOL, atol=1e-3)


def test_per_graph_norms_ignore_padding_as_they_are(graphs):
    """PyG's per-graph normalisations called with `batch`: padding nodes form their own graph."""
    from torch_geometric.nn.norm import GraphNorm, InstanceNorm, LayerNorm, PairNorm

    ld = gt.loader(graphs, strategy="dynamic", batch_size=6, seed=5)
    norms = [LayerNorm(4, mode="graph"), GraphNorm(4), InstanceNorm(4), PairNorm()]
    for b in itertools.islice(ld, 3):
        ub = unpadded(graphs, b)
        x = torch.cat([b.pos, b.z[:, None].float()], dim=1)
        ux = torch.cat([ub.pos, ub.z[:, None].float()], dim=1)
        n_real = int(b.node_mask.sum())
        for norm in norms:
            torch.testing.assert_close(
                norm(x, b.batch)[:n_real],
                norm(ux, ub.batch),
                rtol=RTOL,
                atol=ATOL,
                msg=type(norm).__name__,
            )


@pytest.mark.parametrize("momentum", [0.1, None])
@pytest.mark.parametrize("rows", [(7, 3), (5, 4, 2)])
def test_masked_batchnorm_equals_batchnorm_on_real_rows(momentum, rows):
    torch.manual_seed(1)
    ref = torch.nn.BatchNorm1d(rows[1], momentum=momentum)
    bn = gt.convert_masked_norm(copy.deepcopy(ref), hook=False)
    assert isinstance(bn, gt.MaskedBatchNorm)
    for step in range(3):
        x = torch.randn(*rows) * (step + 1) + step
        pad = torch.randn((4, *rows[1:])) * 100  # padding rows with wild values
        mask = torch.tensor([True] * rows[0] + [False] * 4)
        xp = torch.cat([x, pad]).requires_grad_()
        xr = x.clone().requires_grad_()
        out, out_ref = bn(xp, mask=mask), ref(xr)
        torch.testing.assert_close(out[: rows[0]], out_ref, rtol=RTOL, atol=ATOL)
        (out[: rows[0]] ** 2).sum().backward()
        (out_ref**2).sum().backward()
        torch.testing.assert_close(xp.grad[: rows[0]], xr.grad, rtol=RTOL, atol=ATOL)
        assert (xp.grad[rows[0] :] == 0).all()
    for k, v in ref.state_dict().items():
        torch.testing.assert_close(bn.state_dict()[k], v, msg=k)
    before = {k: v.clone() for k, v in bn.state_dict().items()}
    bn(torch.randn((4, *rows[1:])), mask=torch.zeros(4, dtype=torch.bool))  # no real row
    for k in ("running_mean", "running_var"):
        torch.testing.assert_close(bn.state_dict()[k], before[k])


def test_pyg_norms_without_batch_are_masked_after_conversion(graphs):
    """Called without `batch` (the whole batch as one graph), PyG's norms see padding; the
    converted ones take the statistics from the real nodes only, like the unpadded call."""
    import pickle

    from torch_geometric.nn.norm import GraphNorm, InstanceNorm, LayerNorm, PairNorm

    ld = gt.loader(graphs, strategy="dynamic", batch_size=6, seed=5)
    b = next(iter(ld))
    ub = unpadded(graphs, b)
    x = torch.cat([b.pos, b.z[:, None].float()], dim=1)
    ux = torch.cat([ub.pos, ub.z[:, None].float()], dim=1)
    n_real = int(b.node_mask.sum())
    for norm in (LayerNorm(4, mode="graph"), GraphNorm(4), InstanceNorm(4), PairNorm()):
        stock = copy.deepcopy(norm)
        model = gt.convert_masked_norm(torch.nn.Sequential(norm))
        assert type(model[0]).__name__ == "Masked" + type(stock).__name__
        assert model.state_dict().keys() == torch.nn.Sequential(stock).state_dict().keys()
        assert not torch.allclose(stock(x)[:n_real], stock(ux), atol=1e-3)  # stock sees padding
        with gt.padding_masks(b):
            torch.testing.assert_close(model(x)[:n_real], stock(ux), rtol=RTOL, atol=ATOL)
        torch.testing.assert_close(model[0](x, b.batch), stock(x, b.batch))  # with batch: same
        pickle.loads(pickle.dumps(model))  # importable classes (ddp_spawn, torch.save)
    with pytest.raises(ValueError, match="running"):
        gt.convert_masked_norm(torch.nn.Sequential(InstanceNorm(4, track_running_stats=True)))


def test_convert_handles_pyg_batchnorm_and_syncbatchnorm():
    from torch_geometric.nn import BatchNorm

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), BatchNorm(4), torch.nn.BatchNorm1d(4))
    ref = copy.deepcopy(model)
    out = gt.convert_masked_norm(model)
    assert out is model and sum(isinstance(m, gt.MaskedBatchNorm) for m in out.modules()) == 2
    x = torch.randn(6, 3)
    mask = torch.tensor([True] * 4 + [False] * 2)
    with gt.padding_masks(PaddingMasks(mask, mask[:0], mask[:1])):
        y = model(x)
    torch.testing.assert_close(y[:4], ref(x[:4]), rtol=RTOL, atol=ATOL)
    sync = gt.convert_masked_norm(torch.nn.Sequential(torch.nn.SyncBatchNorm(4)))
    assert isinstance(sync[0], gt.MaskedBatchNorm) and sync[0].sync
    z = torch.randn(6, 4)
    torch.testing.assert_close(
        sync[0](z, mask=mask)[:4], torch.nn.BatchNorm1d(4)(z[:4]), rtol=RTOL, atol=ATOL
    )  # one process: plain masked statistics


_SYNC_ROWS = ((5, 3), (2, 4))  # (real rows, padding rows) of ranks 0 and 1


def _sync_inputs(rank):
    g = torch.Generator().manual_seed(10 + rank)
    real, pad = _SYNC_ROWS[rank]
    x = torch.randn(real + pad, 3, generator=g) * (rank + 1) + rank
    x[real:] = 1e3  # padding rows with wild values
    w = torch.randn(real + pad, 3, generator=g)
    mask = torch.arange(real + pad) < real
    return x, w, mask


def _sync_worker(rank, port, out):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    torch.manual_seed(0)
    bn = gt.convert_masked_norm(torch.nn.SyncBatchNorm(3), hook=False)
    x, w, mask = _sync_inputs(rank)
    x.requires_grad_()
    y = bn(x, mask=mask)
    (y[mask] * w[mask]).sum().backward()
    torch.save({"y": y.detach(), "grad": x.grad, "state": bn.state_dict()}, f"{out}/r{rank}.pt")
    dist.destroy_process_group()


def test_masked_syncbatchnorm_across_two_ranks(tmp_path):
    """Two gloo ranks with different numbers of real rows: outputs, input gradients and running
    statistics equal BatchNorm1d over the real rows of both ranks in one process."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    mp.start_processes(
        _sync_worker, args=(port, str(tmp_path)), nprocs=2, join=True, start_method="spawn"
    )
    res = [torch.load(tmp_path / f"r{r}.pt") for r in range(2)]
    xs, ws, masks = zip(*[_sync_inputs(r) for r in range(2)], strict=True)
    reals = [x[m].clone().requires_grad_() for x, m in zip(xs, masks, strict=True)]
    ref = torch.nn.BatchNorm1d(3)
    y = ref(torch.cat(reals))
    (y * torch.cat([w[m] for w, m in zip(ws, masks, strict=True)])).sum().backward()
    n0 = _SYNC_ROWS[0][0]
    for r, (y_r, real) in enumerate(zip((y[:n0], y[n0:]), reals, strict=True)):
        torch.testing.assert_close(res[r]["y"][masks[r]], y_r.detach(), rtol=RTOL, atol=ATOL)
        torch.testing.assert_close(res[r]["grad"][masks[r]], real.grad, rtol=RTOL, atol=ATOL)
        assert (res[r]["grad"][~masks[r]] == 0).all()
        for k, v in ref.state_dict().items():
            torch.testing.assert_close(res[r]["state"][k], v, rtol=RTOL, atol=ATOL, msg=k)


def test_masked_batchnorm_needs_a_mask_in_training():
    bn = gt.MaskedBatchNorm(4)
    with pytest.raises(RuntimeError, match="padding mask"):
        bn(torch.randn(5, 4))
    bn.eval()
    assert bn(torch.randn(5, 4)).shape == (5, 4)  # running statistics: no mask needed


# ------------------------------------------------------------------- DimeNet-style basis
class BesselMPNN(torch.nn.Module):
    """DimeNet's radial basis (Bessel functions times the 1/x polynomial envelope) on
    ``sqrt(sum of squares)`` edge lengths, one message-passing step, stock add readout."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(16, 8)
        self.rbf = BesselBasisLayer(6, cutoff=3.0, envelope_exponent=5)
        self.lin = torch.nn.Linear(6, 8)
        self.out = torch.nn.Linear(8, 1)

    def forward(self, z, pos, edge_index, batch):
        src, dst = edge_index[0], edge_index[1]
        d = ((pos[src] - pos[dst]) ** 2).sum(-1).sqrt()
        h = self.emb(z)
        msg = self.lin(self.rbf(d)) * h[src]
        h = h + scatter(msg, dst, dim=0, dim_size=h.shape[0], reduce="sum")
        return self.out(global_add_pool(h, batch))[:, 0]


def test_dimenet_style_basis_default_options_no_nan(graphs):
    ld = gt.loader(graphs, strategy="dynamic", batch_size=6, seed=4)  # default options

    def run(model, b, padded):
        return model(b.z, b.pos, b.edge_index, b.batch)

    first, last, _, _ = compare_epoch(ld, graphs, BesselMPNN, run)
    assert first == last >= 1


def test_single_padding_node_self_loops_would_give_nan(graphs):
    """Why the loader adds a spare padding node: with one padding node the padding edges are
    self-loops of length 0 and the 1/x envelope makes every gradient NaN."""
    i = 0
    g = graphs[i]
    b = gt.collate([g], (g.num_nodes + 1, g.num_edges + 2, 2))
    assert (b.edge_index[:, g.num_edges :] == g.num_nodes).all()
    model = BesselMPNN()
    gt.masked_mean(model(b.z, b.pos, b.edge_index, b.batch), b.graph_mask).backward()
    assert any(torch.isnan(p.grad).any() for p in model.parameters())
    b2 = gt.collate([g], (g.num_nodes + 2, g.num_edges + 2, 2))  # the spare node
    model.zero_grad()
    gt.masked_mean(model(b2.z, b2.pos, b2.edge_index, b2.batch), b2.graph_mask).backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_default_padding_geometry_guarantee(graphs):
    ld = gt.loader(graphs, strategy="dynamic", batch_size=6, seed=4)
    for b in ld:
        n_real, e_real = int(b.node_mask.sum()), int(b.edge_mask.sum())
        assert b.num_nodes - n_real >= 2  # the spare padding node
        pad = b.edge_index[:, e_real:]
        assert (pad >= n_real).all() and (pad[0] != pad[1]).all()
        length = (b.pos[pad[0]] - b.pos[pad[1]]).norm(dim=1)
        real = b.pos[:n_real]
        span = max(1.0, float((real.max(0).values - real.min(0).values).max()))
        torch.testing.assert_close(length, torch.full_like(length, 2 * span * 3**0.5))
        # longer than twice the diameter of every real graph
        for k in range(int(b.graph_mask.sum())):
            p = b.pos[b.ptr[k] : b.ptr[k + 1]]
            assert (length > 2 * torch.cdist(p, p).max()).all()
        assert (torch.cdist(b.pos[n_real:], real) > 2 * span).all()


# ------------------------------------------------------------------------- readouts
def test_stock_readouts_give_n_graph_rows(graphs):
    ld = gt.loader(graphs, strategy="static-64", batch_size=8, seed=0)
    seen_counts = set()
    for b in ld:
        ub = unpadded(graphs, b)
        seen_counts.add(int(b.graph_mask.sum()))
        x = b.pos.sum(-1, keepdim=True) + b.z[:, None].float()
        ux = ub.pos.sum(-1, keepdim=True) + ub.z[:, None].float()
        for pool in (global_add_pool, global_mean_pool, global_max_pool):
            out = pool(x, b.batch)  # no size=
            assert out.shape[0] == b.num_graphs
            torch.testing.assert_close(gt.unpad(out, b), pool(ux, ub.batch))
            assert gt.masked_mean(out, b.graph_mask).shape == ()
    assert len(seen_counts) > 1  # batches with different numbers of real graphs


def test_pyg_schnet_readout_rows(graphs):
    model = SchNet(
        hidden_channels=8,
        num_filters=8,
        num_interactions=1,
        num_gaussians=4,
        cutoff=3.0,
        interaction_graph=gt.batch_edges,
    )
    ld = gt.loader(graphs, strategy="dynamic", batch_size=10, seed=0)
    for b in ld:
        with gt.padding_masks(b):
            out = model(b.z, b.pos, b.batch)
        assert out.shape == (b.num_graphs, 1)
        assert gt.unpad(out, b).shape[0] == int(b.graph_mask.sum())
        gt.masked_mean(out, b.graph_mask)


def test_batch_edges_needs_an_active_batch():
    with pytest.raises(RuntimeError, match="padding_masks"):
        gt.batch_edges(torch.zeros(3, 3), torch.zeros(3, dtype=torch.long))


# ----------------------------------------------------------------------- OGB parity
def test_ogb_smiles2graph_equals_our_moses_featurisation():
    from ogb.utils import smiles2graph

    from graphbatch.datasets import load_moses_smiles, smiles_graphs

    smiles = load_moses_smiles("train", limit=4000)[::20]  # 200 spread over 4,000
    (arrays,) = list(smiles_graphs(smiles, workers=1, chunk_size=len(smiles)))
    assert arrays.n_node.shape[0] == len(smiles)
    node_ptr = np.concatenate([[0], np.cumsum(arrays.n_node)])
    edge_ptr = np.concatenate([[0], np.cumsum(arrays.n_edge)])
    for k, s in enumerate(smiles):
        ref = smiles2graph(s)
        assert ref["num_nodes"] == arrays.n_node[k]
        np.testing.assert_array_equal(
            arrays.node["x"][node_ptr[k] : node_ptr[k + 1]], ref["node_feat"]
        )
        np.testing.assert_array_equal(
            arrays.edge_index[:, edge_ptr[k] : edge_ptr[k + 1]], ref["edge_index"]
        )
        np.testing.assert_array_equal(
            arrays.edge["edge_attr"][edge_ptr[k] : edge_ptr[k + 1]], ref["edge_feat"]
        )
