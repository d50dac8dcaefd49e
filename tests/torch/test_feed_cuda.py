"""`gt.DeviceFeed` on CUDA (skipped without a CUDA device): batches on the device equal the
loader's, field by field; the workers' slots are page-locked in place and copied on a side
stream; the step's stream waits on each batch's event only; kept batches keep their values
while later copies run; batches of a loader without workers are moved and recorded on the
step's stream."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")
pytest.importorskip("h5py")

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

import graphbatch.torch as gt  # noqa: E402
from graphbatch.datasets import GraphStore  # noqa: E402
from graphbatch.torch._feed_backend import CudaBackend  # noqa: E402

from ..datasets.test_store_batch import _graphs, _write  # noqa: E402

KW = dict(strategy="pack-lpf", batch_size=6, seed=4)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return GraphStore(_write(tmp_path_factory.mktemp("feed_cuda") / "g.h5", _graphs(90)))


class SpyBackend(CudaBackend):
    """`CudaBackend` recording the operations the feed asks for."""

    def __init__(self, device):
        super().__init__(torch.device(device))
        self.log = []

    def record(self, stream):
        event = super().record(stream)
        self.log.append(("record", stream, event))
        return event

    def wait(self, stream, event):
        self.log.append(("wait", stream, event))
        super().wait(stream, event)

    def copy(self, dst, src):
        self.log.append(("copy", torch.cuda.current_stream(self.device), src.is_pinned()))
        super().copy(dst, src)

    def keep(self, tensor, stream):
        self.log.append(("keep", stream))
        super().keep(tensor, stream)


def _on_cpu(batch):
    if isinstance(batch, dict):
        return {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    return batch.cpu()


def _assert_equal(got, want):
    if isinstance(want, dict):
        assert list(got) == list(want)
        items = [(k, want[k]) for k in want]
    else:
        assert type(got) is type(want)
        items = list(want)
    for k, w in items:
        g = got[k]
        if isinstance(w, torch.Tensor):
            assert g.device.type == "cuda", k
            assert g.dtype == w.dtype and torch.equal(g.cpu(), w), k
        else:
            assert g == w, k


@pytest.mark.parametrize("as_dict,workers", [(False, 1), (False, 2), (True, 2)])
def test_batches_on_the_device_equal_the_loaders(store, as_dict, workers):
    ld = gt.loader(
        store,
        **KW,
        collation=gt.Collation(as_dict=as_dict),
        dataloader_kwargs={"num_workers": workers, "persistent_workers": True},
    )
    feed = gt.DeviceFeed(ld, "cuda")
    for epoch in range(2):
        ref = _epoch(store, as_dict, epoch)
        it = iter(feed)
        got = 0
        for b, w in zip(it, ref, strict=True):
            _assert_equal(b, w)
            got += 1
        assert got == len(ref)
        assert it._receiver.ring.pinned is True  # cudaHostRegister'ed in place


def _epoch(store, as_dict, epoch):
    """Epoch ``epoch`` of the loader without workers (on the CPU)."""
    ld = gt.loader(store, **KW, collation=gt.Collation(as_dict=as_dict))
    ld.set_epoch(epoch)
    return list(ld)


def test_copies_run_on_a_side_stream_and_the_step_waits_on_its_event_only(store):
    spy = SpyBackend("cuda")
    ld = gt.loader(store, **KW, dataloader_kwargs={"num_workers": 2})
    n = 0
    for b in gt.DeviceFeed(ld, backend=spy, depth=2):
        spy.log.append(("got", n))
        n += 1
        del b
    side = spy.side_stream()
    copies = [e for e in spy.log if e[0] == "copy"]
    assert len(copies) == n and all(e[1] == side and e[2] for e in copies)  # pinned slots
    side_events = [e[2] for e in spy.log if e[0] == "record" and e[1] == side]
    assert len(side_events) == n
    at = [i for i, e in enumerate(spy.log) if e[0] == "got"]
    for k in range(n):
        start = at[k - 1] if k else 0
        waits = [e for e in spy.log[start : at[k]] if e[0] == "wait" and e[1] != side]
        assert len(waits) == 1 and waits[0][2] is side_events[k]
        assert waits[0][1] == torch.cuda.current_stream()


def test_kept_batches_keep_their_values_while_later_copies_run(store):
    ref = list(gt.loader(store, **KW))
    ld = gt.loader(store, **KW, dataloader_kwargs={"num_workers": 2})
    kept = []
    total = torch.zeros((), device="cuda")
    for k, b in enumerate(gt.DeviceFeed(ld, "cuda")):
        total += b.pos.sum()  # a step on the current stream
        if k % 2 == 0:
            kept.append((k, b))
    torch.cuda.synchronize()
    for k, b in kept:
        _assert_equal(b, ref[k])
    want = sum(float(w.pos.sum()) for w in ref)
    assert abs(float(total) - want) <= 1e-3 * max(1.0, abs(want))


def test_batches_of_a_loader_without_workers_are_moved_and_kept_on_the_step_stream(store):
    ref = list(gt.loader(store, **KW))
    spy = SpyBackend("cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):  # the step on a stream of the user's
        got = list(gt.DeviceFeed(gt.loader(store, **KW), backend=spy))
    torch.cuda.synchronize()
    for b, w in zip(got, ref, strict=True):
        _assert_equal(b, w)
    keeps = [e for e in spy.log if e[0] == "keep"]
    assert keeps and all(e[1] == stream for e in keeps)
