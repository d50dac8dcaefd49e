"""The capture check on CPU: ``TrainStep(..., check=True)`` refuses, in one line naming the call
and the line that made it, what a CUDA graph cannot hold (host syncs, data-dependent shapes),
and passes models that avoid them, PyG's SchNet with `gt.batch_readout` included."""

from __future__ import annotations

import inspect

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")

import graphbatch as gb  # noqa: E402
import graphbatch.torch as gt  # noqa: E402
from graphbatch.torch._step_check import sync_problem  # noqa: E402

from .._torch_graphs import molecules  # noqa: E402


class Model(torch.nn.Module):
    """A linear model on a dict batch that runs ``bad(h, batch)`` in its forward."""

    def __init__(self, bad):
        super().__init__()
        self.lin = torch.nn.Linear(3, 1)
        self.bad = bad

    def forward(self, batch):
        h = self.lin(batch["x"])[:, 0]
        out = self.bad(h, batch)
        return h if out is None else out


def loss_fn(out, batch):
    return ((out - batch["y"]) ** 2).mean()


def run(bad, check=True):
    model = Model(bad)
    step = gt.TrainStep(model, loss_fn, torch.optim.SGD(model.parameters(), lr=0.1), check=check)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 3, generator=g)
    batch = {"x": x, "y": torch.randn(5, generator=g), "mask": x[:, 0] > 0}
    return step(batch)


def line_of(fn):
    """The ``file:line`` of a one-line lambda in this file."""
    return f"test_step_check.py:{inspect.getsourcelines(fn)[1]}"


CASES = [
    (lambda h, b: h * h.sum().item(), ".item()", "host"),
    (lambda h, b: h * int(h.sum()), "int(tensor)", "host"),
    (lambda h, b: h * float(h.mean()), "float(tensor)", "host"),
    (lambda h, b: h if bool(h.sum() > 0) else -h, "bool(tensor) (or `if tensor:`)", "host"),
    (lambda h, b: print(h), "printing a tensor", "host"),
    (lambda h, b: h * len(f"{h.sum()}"), "formatting a tensor", "host"),
    (lambda h, b: h + torch.tensor(h.tolist()), ".tolist()", "host"),
    (lambda h, b: h.cpu(), ".cpu()", "host"),
    (lambda h, b: h.to("cpu"), '.to("cpu")', "host"),
    (lambda h, b: h * (1.0, 2.0)[h.sum().long() % 2], "a tensor used as a Python index", "host"),
    (lambda h, b: h[torch.nonzero(b["mask"])[:, 0]].sum() + h, "torch.nonzero", "shape"),
    (lambda h, b: h[b["mask"]].sum() + h, "indexing with a bool mask", "shape"),
    (lambda h, b: h[torch.where(b["mask"])[0]].sum() + h, "one-argument torch.where", "shape"),
    (lambda h, b: h.masked_select(b["mask"]).sum() + h, "torch.masked_select", "shape"),
    (lambda h, b: h + torch.unique(b["mask"]).sum(), "torch.unique", "shape"),
    (
        lambda h, b: h.repeat_interleave(b["mask"].long() + 1).sum() + h,
        "repeat_interleave without output_size",
        "shape",
    ),
]


@pytest.mark.parametrize("bad, what, kind", CASES, ids=[c[1].split(" (")[0] for c in CASES])
def test_capture_check_refuses_with_one_line_naming_the_call(bad, what, kind):
    with pytest.raises(gb.CaptureError) as info:
        run(bad)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(f"TrainStep cannot capture this step: {what} at ")
    assert line_of(bad) in msg, msg
    reason = "copies a value to the host" if kind == "host" else "depends on the data"
    assert reason in msg


@pytest.mark.parametrize("bad, what, kind", CASES[:3], ids=[c[1] for c in CASES[:3]])
@pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad")
def test_without_check_the_plain_step_runs_them(bad, what, kind):
    loss = run(bad, check=False)
    assert loss.shape == () and torch.isfinite(loss)


@pytest.mark.parametrize(
    "ok",
    [
        lambda h, b: torch.where(b["mask"], h, 0.0),  # three-argument where: fixed shape
        lambda h, b: h.repeat_interleave(2)[::2],  # int repeats: fixed shape
        lambda h, b: h * h.shape[0],  # shapes are Python values already
        lambda h, b: h.to(torch.float64).to(torch.float32),
        lambda h, b: h.to(dtype=h.dtype, device=h.device),  # MACE's no-op move
        lambda h, b: h[b["mask"].long()],  # integer (not bool) indices
        lambda h, b: h * torch.ones(3)[h.sum().long() % 3],  # a 0-d index tensor: a gather
        lambda h, b: h.nan_to_num().clamp(-1e3, 1e3),
    ],
)
def test_capture_check_passes_what_a_graph_holds(ok):
    assert torch.isfinite(run(ok))


def test_the_check_runs_once_per_shape():
    calls = []

    def bad(h, b):
        calls.append(1)
        if len(calls) > 1:  # only the first step of a shape is checked
            h.sum().item()

    model = Model(bad)
    step = gt.TrainStep(model, loss_fn, torch.optim.SGD(model.parameters(), lr=0.1), check=True)
    batch = {"x": torch.zeros(4, 3), "y": torch.zeros(4), "mask": torch.zeros(4, dtype=bool)}
    step(batch)
    step(batch)  # not checked again: runs (it would be a replay on CUDA)
    batch5 = {k: torch.cat([v, v[:1]]) for k, v in batch.items()}
    with pytest.raises(gb.CaptureError, match=r"\.item\(\)"):
        step(batch5)  # a new shape: checked


def test_sync_problem_table():
    t = torch.zeros(3)
    mask = torch.zeros(3, dtype=torch.bool)
    assert sync_problem("item", (t,), {})[0] == ".item()"
    assert sync_problem("__getitem__", (t, (slice(None), mask)), {})[0] == (
        "indexing with a bool mask"
    )
    assert sync_problem("__getitem__", (t, 1), {}) is None
    assert sync_problem("where", (mask, t, t), {}) is None
    assert sync_problem("to", (t, "cuda:0"), {}) is None
    assert sync_problem("to", (t,), {"device": "cpu"})[0] == '.to("cpu")'
    # a device object names the host only for a tensor elsewhere: on CPU it is no copy
    assert sync_problem("to", (t,), {"device": torch.device("cpu")}) is None
    meta = torch.zeros(3, device="meta")
    assert sync_problem("to", (meta, torch.device("cpu")), {})[0] == '.to("cpu")'
    assert sync_problem("repeat_interleave", (t, torch.ones(3, dtype=int)), {}) is not None
    assert (
        sync_problem("repeat_interleave", (t, torch.ones(3, dtype=int)), {"output_size": 3}) is None
    )
    assert sync_problem("add", (t, t), {}) is None


# ------------------------------------------------------------------------ PyG SchNet
def schnet(readout: bool):
    from torch_geometric.nn.models import SchNet

    torch.manual_seed(0)
    model = SchNet(
        hidden_channels=8,
        num_filters=8,
        num_interactions=1,
        num_gaussians=4,
        cutoff=3.0,
        interaction_graph=gt.batch_edges,
    )
    if readout:
        model.readout = gt.batch_readout(model.readout)
    return model


def schnet_forward(model, b):
    with gt.padding_masks(b):
        return model(b.z, b.pos, b.batch)[:, 0]


def schnet_loss(out, b):
    return gt.masked_mean((out - b.y[:, 0]) ** 2, b.graph_mask)


@pytest.fixture(scope="module")
def batch():
    graphs = molecules(8, seed=5, max_nodes=6)
    return next(iter(gt.loader(graphs, strategy="dynamic", batch_size=4, seed=0)))


def test_stock_schnet_readout_is_a_host_sync(batch):
    model = schnet(readout=False)
    step = gt.TrainStep(
        model,
        schnet_loss,
        torch.optim.SGD(model.parameters(), lr=0.01),
        forward=schnet_forward,
        check=True,
    )
    with pytest.raises(gb.CaptureError, match=r"int\(tensor\) at torch_geometric/nn/aggr/"):
        step(batch)


def test_schnet_with_batch_readout_passes_and_reads_out_one_row_per_slot(batch):
    model = schnet(readout=True)
    stock = schnet(readout=False)
    with gt.padding_masks(batch):
        out = model(batch.z, batch.pos, batch.batch)
        torch.testing.assert_close(out, stock(batch.z, batch.pos, batch.batch))
    assert out.shape == (batch.num_graphs, 1)
    step = gt.TrainStep(
        model,
        schnet_loss,
        torch.optim.SGD(model.parameters(), lr=0.01),
        forward=schnet_forward,
        check=True,
    )
    assert torch.isfinite(step(batch))


def test_batch_readout_outside_a_batch_and_bad_argument():
    readout = gt.batch_readout(schnet(False).readout)
    with pytest.raises(RuntimeError, match="needs an active batch"):
        readout(torch.zeros(3, 2), torch.zeros(3, dtype=torch.long), dim=0)
    out = readout(torch.ones(3, 2), torch.zeros(3, dtype=torch.long), dim_size=2, dim=0)
    assert out.tolist() == [[3.0, 3.0], [0.0, 0.0]]
    with pytest.raises(gb.InputTypeError, match=r"torch\.nn\.Module aggregation"):
        gt.batch_readout("add")
