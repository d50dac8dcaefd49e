"""Stock models in `TrainStep` on CPU: PyG's SchNet (with `gt.batch_edges` and
`gt.batch_readout`), PyG's GIN with a global pool, and MACE through the atomistic preset give
the plain hand-written loop's losses (to 1e-6) over 20 padded loader batches, eager (with the
capture check) and ``torch.compile``d, and a buckets plan keeps one cache entry per shape."""

from __future__ import annotations

import copy
import shutil

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")

from torch_geometric.nn import global_add_pool  # noqa: E402
from torch_geometric.nn.models import GIN, SchNet  # noqa: E402

import graphbatch.torch as gt  # noqa: E402

from .._torch_graphs import molecules  # noqa: E402

STEPS = 20
AOT = {"backend": "aot_eager", "dynamic": False}  # dynamo + AOTAutograd, no C++ compiler


def take(loader, n):
    """``n`` batches, over as many epochs as it takes."""
    out = []
    while len(out) < n:
        for batch in loader:
            out.append(batch)
            if len(out) == n:
                break
    return out


def plain_loop(model, opt, forward, loss_fn, batches):
    """The hand-written loop the step replaces."""
    losses = []
    for batch in batches:
        opt.zero_grad()
        loss = loss_fn(forward(model, batch), batch)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses)


def compare(
    make_model,
    forward,
    loss_fn,
    batches,
    *,
    lr=1e-2,
    make_mine=None,
    step_forward=None,
    rtol=0.0,
    **kw,
):
    """Losses and final parameters of the plain loop and of `TrainStep` from equal starts
    (``make_mine``/``step_forward``: the step's model, with ``make_model()``'s weights, and
    forward; default a copy of it and ``forward``)."""
    ref = make_model()
    mine = copy.deepcopy(ref) if make_mine is None else make_mine()
    start = [p.detach().clone() for p in ref.parameters()]
    want = plain_loop(ref, torch.optim.Adam(ref.parameters(), lr=lr), forward, loss_fn, batches)
    step = gt.TrainStep(
        mine,
        loss_fn,
        torch.optim.Adam(mine.parameters(), lr=lr),
        forward=forward if step_forward is None else step_forward,
        **kw,
    )
    got = torch.stack([step(b) for b in batches])
    assert got.shape == (STEPS,) and torch.isfinite(got).all()
    torch.testing.assert_close(got, want, rtol=rtol, atol=1e-6)
    for (k, p), q in zip(mine.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=rtol, atol=1e-6, msg=k)
    assert any(not torch.equal(p, q) for p, q in zip(start, ref.parameters(), strict=True))
    return step


@pytest.fixture(scope="module")
def graphs():
    return molecules(48, seed=13, max_nodes=8)


@pytest.fixture(scope="module")
def dynamic_batches(graphs):
    return take(gt.loader(graphs, strategy="dynamic", batch_size=6, seed=1), STEPS)


@pytest.fixture(scope="module")
def bucket_batches(graphs):
    loader = gt.loader(graphs, strategy="buckets", batch_size=6, seed=1, num_shapes=3, multiple=4)
    return take(loader, STEPS)


def n_shapes(batches):
    return len({(b.num_nodes, b.num_edges, b.num_graphs) for b in batches})


# --------------------------------------------------------------------------- SchNet
def make_schnet():
    torch.manual_seed(0)
    model = SchNet(
        hidden_channels=16,
        num_filters=16,
        num_interactions=2,
        num_gaussians=8,
        cutoff=3.0,
        interaction_graph=gt.batch_edges,
    )
    model.readout = gt.batch_readout(model.readout)  # no host sync for the graph count
    return model


def schnet_forward(model, b):
    with gt.padding_masks(b):
        return model(b.z, b.pos, b.batch)[:, 0]


def graph_mse(out, b):
    return gt.masked_mean((out - b.y[:, 0]) ** 2, b.graph_mask)


def test_schnet_eager_checked(dynamic_batches):
    step = compare(make_schnet, schnet_forward, graph_mse, dynamic_batches, check=True)
    assert len(step.shapes) == 1 and step.check


def test_schnet_compiled(dynamic_batches):
    torch._dynamo.reset()
    step = compare(make_schnet, schnet_forward, graph_mse, dynamic_batches, compile=AOT)
    assert len(step.shapes) == 1


@pytest.mark.slow
@pytest.mark.skipif(not (shutil.which("g++") or shutil.which("cc")), reason="needs a C++ compiler")
def test_schnet_compiled_inductor(dynamic_batches):
    """``compile=True``: Inductor's kernels (default options, ``dynamic=False``); float32 sums
    in another order, so equal to the eager loop within one float32 rounding of the loss
    (observed: 9.5e-7 on losses up to 6 over the 20 steps)."""
    torch._dynamo.reset()
    step = compare(make_schnet, schnet_forward, graph_mse, dynamic_batches, compile=True, rtol=1e-6)
    assert len(step.shapes) == 1


def test_schnet_buckets_one_entry_per_shape(bucket_batches):
    k = n_shapes(bucket_batches)
    assert k == 3
    step = compare(make_schnet, schnet_forward, graph_mse, bucket_batches, check=True)
    assert len(step.shapes) == len(step.graphs) == k
    assert {key.shape for key in step.shapes} == {
        (b.num_nodes, b.num_edges, b.num_graphs) for b in bucket_batches
    }


# ------------------------------------------------------------------------------ GIN
class GINRegressor(torch.nn.Module):
    """PyG's GIN on embedded atom types, summed per graph slot (``size=batch.num_graphs``: the
    padded count, no host sync), then a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(10, 16)
        self.gin = GIN(16, 16, num_layers=2, out_channels=16)
        self.head = torch.nn.Linear(16, 1)

    def forward(self, b):
        h = self.gin(self.emb(b.z), b.edge_index)
        return self.head(global_add_pool(h, b.batch, size=b.num_graphs))[:, 0]


def make_gin():
    torch.manual_seed(0)
    return GINRegressor()


def test_gin_eager_checked(dynamic_batches):
    step = compare(make_gin, lambda m, b: m(b), graph_mse, dynamic_batches, check=True)
    assert len(step.shapes) == 1


def test_gin_compiled_buckets(bucket_batches):
    torch._dynamo.reset()
    step = compare(make_gin, lambda m, b: m(b), graph_mse, bucket_batches, compile=AOT)
    assert len(step.shapes) == n_shapes(bucket_batches) == 3


# ----------------------------------------------------------------------------- MACE
@pytest.fixture(scope="module")
def mace_batches():
    pytest.importorskip("mace.modules")
    ga = pytest.importorskip("graphbatch.atomistic")
    from .._mace_graphs import R_MAX, qm9_graphs

    loader = gt.loader(
        qm9_graphs(12), strategy="dynamic", batch_size=4, seed=0, preset=ga.mace(r_max=R_MAX)
    )
    return take(loader, STEPS)


def make_mace():
    from .._mace_graphs import small_model

    return small_model("MACE")


def mace_forward(model, batch):
    return model(batch, training=True)


def mace_loss(out, batch):
    import graphbatch.atomistic as ga

    return ga.energy_force_loss(out, batch)


@pytest.mark.slow
def test_mace_eager_checked(mace_batches):
    step = compare(make_mace, mace_forward, mace_loss, mace_batches, lr=1e-3, check=True)
    assert len(step.shapes) == 1


@pytest.mark.slow
def test_mace_compiled(mace_batches):
    """MACE's own compile recipe (`mace.tools.compile.prepare`, positions requiring grad before
    the call) in the step, against the plain loop of the eager MACE with the same weights."""
    from .._mace_graphs import small_model

    def prepared_forward(model, batch):
        batch["positions"].requires_grad_(True)
        return model(batch, training=True)

    torch._dynamo.reset()
    step = compare(
        make_mace,
        mace_forward,
        mace_loss,
        mace_batches,
        lr=1e-3,
        make_mine=lambda: small_model("compiled"),
        compile={"backend": "eager", "dynamic": False},
        step_forward=prepared_forward,
    )
    assert len(step.shapes) == 1
