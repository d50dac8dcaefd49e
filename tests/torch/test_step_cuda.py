"""`TrainStep` on a CUDA device (skipped without one): the captured SchNet step gives the eager
step's losses, K padded shapes give K graphs sharing one memory pool, replays never sync with
the host, and what a graph cannot hold is a `CaptureError` at capture time."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")

import graphbatch as gb  # noqa: E402
import graphbatch.torch as gt  # noqa: E402

from .._torch_graphs import molecules  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

STEPS = 20
CUDA = "cuda"


def take(loader, n):
    out = []
    while len(out) < n:
        for batch in loader:
            out.append(batch.to(CUDA))
            if len(out) == n:
                break
    return out


@pytest.fixture(scope="module")
def graphs():
    return molecules(64, seed=13, max_nodes=9)


@pytest.fixture(scope="module")
def dynamic_batches(graphs):
    return take(gt.loader(graphs, strategy="dynamic", batch_size=8, seed=1), STEPS)


@pytest.fixture(scope="module")
def bucket_batches(graphs):
    loader = gt.loader(graphs, strategy="buckets", batch_size=8, seed=1, num_shapes=3, multiple=4)
    return take(loader, STEPS)


def make_schnet(readout=True):
    from torch_geometric.nn.models import SchNet

    torch.manual_seed(0)
    model = SchNet(
        hidden_channels=32,
        num_filters=32,
        num_interactions=2,
        num_gaussians=16,
        cutoff=3.0,
        interaction_graph=gt.batch_edges,
    )
    if readout:
        model.readout = gt.batch_readout(model.readout)
    return model.to(CUDA)


def forward(model, b):
    with gt.padding_masks(b):
        return model(b.z, b.pos, b.batch)[:, 0]


def loss_fn(out, b):
    return gt.masked_mean((out - b.y[:, 0]) ** 2, b.graph_mask)


def run(batches, capture):
    model = make_schnet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, capturable=True)
    step = gt.TrainStep(model, loss_fn, opt, forward=forward, capture=capture)
    losses = torch.stack([step(b) for b in batches])
    torch.cuda.synchronize()
    return step, losses


def test_captured_schnet_gives_the_eager_losses(dynamic_batches):
    eager, want = run(dynamic_batches, capture=False)
    step, got = run(dynamic_batches, capture=True)
    assert isinstance(eager.backend, gt.EagerBackend)
    assert isinstance(step.backend, gt.CudaGraphBackend)
    assert got.device.type == "cuda" and len(step.graphs) == 1
    # scatter-adds on the GPU are not bitwise reproducible: equal within float32 noise
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_k_shapes_give_k_graphs_sharing_one_pool(bucket_batches):
    k = len({(b.num_nodes, b.num_edges, b.num_graphs) for b in bucket_batches})
    assert k >= 2  # the buckets plan of the fixture: several shapes (2 on the H200 run)
    step, got = run(bucket_batches, capture=True)
    _, want = run(bucket_batches, capture=False)
    assert len(step.shapes) == len(step.graphs) == k
    assert step.pool is not None
    assert all(g.graph.pool() == step.pool for g in step.graphs.values())
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_replays_never_sync(dynamic_batches):
    step, _ = run(dynamic_batches[:4], capture=True)
    assert len(step.graphs) == 1
    old = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        losses = [step(b) for b in dynamic_batches[4:8]]
    finally:
        torch.cuda.set_sync_debug_mode(old)
    assert torch.isfinite(torch.stack(losses)).all()


def test_capture_errors_on_cuda(dynamic_batches):
    stock = make_schnet(readout=False)
    opt = torch.optim.Adam(stock.parameters(), capturable=True)
    step = gt.TrainStep(stock, loss_fn, opt, forward=forward)
    with pytest.raises(gb.CaptureError, match=r"int\(tensor\)"):
        step(dynamic_batches[0])
    model = make_schnet()
    with pytest.raises(gb.CaptureError, match="capturable=False"):
        gt.TrainStep(model, loss_fn, torch.optim.Adam(model.parameters()), forward=forward)
    step = gt.TrainStep(
        model, loss_fn, torch.optim.Adam(model.parameters(), capturable=True), forward=forward
    )
    with pytest.raises(gb.CaptureError, match=r"batch tensor .* is on cpu"):
        step(dynamic_batches[0].to("cpu"))
