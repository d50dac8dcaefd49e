"""The device path of `gt.DeviceFeed`, on CPU, through a fake `FeedBackend` that records every
stream, event and copy operation and runs copies lazily (as a device would, when the step's
stream waits for them): the copy of batch i+1 is issued before batch i is handed out, the step's
stream waits on batch i's event and nothing else (the host never blocks), a slot stays leased
until its copy's event is done, and a device buffer is never rewritten while a batch made from
it lives, nor before the side stream waited for the step's stream."""

from __future__ import annotations

import contextlib
import gc

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")
pytest.importorskip("h5py")

import graphbatch.torch as gt  # noqa: E402
from graphbatch.datasets import GraphStore  # noqa: E402
from graphbatch.torch._feed_backend import FeedBackend  # noqa: E402

from ..datasets.test_store_batch import _graphs, _write, assert_same_batch  # noqa: E402

KW = dict(strategy="pack-lpf", batch_size=6, seed=4)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return GraphStore(_write(tmp_path_factory.mktemp("order") / "g.h5", _graphs(90)))


class Event:
    def __init__(self, stream: str, n: int) -> None:
        self.stream, self.n, self.done = stream, n, False
        self.copies: list = []  # side-stream work this event follows

    def __repr__(self) -> str:
        return f"Event({self.stream}#{self.n})"


class FakeBackend(FeedBackend):
    """Records ``(op, ...)`` tuples in ``log``. Copies (and moves) are queued and run when the
    step's stream waits for their event, or on ``synchronize``; an event is done when the test
    says so (``finish``), or at once with ``auto_done``."""

    copies = True

    def __init__(self, auto_done: bool = True) -> None:
        super().__init__(torch.device("cpu"))
        self.log: list[tuple] = []
        self.auto_done = auto_done
        self.active = "step"
        self.queued: list = []  # side-stream copies not yet covered by an event
        self.events: list[Event] = []
        self.buffers: list[torch.Tensor] = []

    def side_stream(self):
        return "side"

    def current_stream(self):
        return self.active  # as torch.cuda.current_stream() inside torch.cuda.stream(...)

    @contextlib.contextmanager
    def on(self, stream):
        before, self.active = self.active, stream
        self.log.append(("on", stream))
        try:
            yield
        finally:
            self.active = before

    def record(self, stream):
        ev = Event(stream, len(self.events))
        self.events.append(ev)
        if stream == "side":
            ev.copies, self.queued = self.queued, []
        self.log.append(("record", stream, ev))
        return ev

    def _run(self, ev):
        for e in self.events[: ev.n + 1]:
            for fn in e.copies:
                fn()
            e.copies = []

    def wait(self, stream, event):
        self.log.append(("wait", stream, event))
        if stream == "step":  # the device runs the copies before the step
            self._run(event)
            if self.auto_done:
                event.done = True

    def done(self, event):
        return event.done

    def synchronize(self, event):
        self.log.append(("synchronize", event))
        self._run(event)
        event.done = True

    def finish(self):
        """The device caught up: every copy ran, every event is done."""
        for ev in self.events:
            self._run(ev)
            ev.done = True

    def empty(self, nbytes):
        buf = torch.full((nbytes,), 0xAB, dtype=torch.uint8)
        self.buffers.append(buf)
        self.log.append(("empty", nbytes, buf.data_ptr()))
        return buf

    def copy(self, dst, src):
        assert self.active == "side"
        self.log.append(("copy", dst.data_ptr(), dst.numel(), src.data_ptr()))
        self.queued.append(lambda: dst.copy_(src))

    def keep(self, tensor, stream):
        self.log.append(("keep", stream))

    def register(self, memory, owner):
        self.log.append(("register", memory.data_ptr()))
        return True

    def move(self, tensor):
        assert self.active == "side"
        out = torch.empty_like(tensor)
        self.log.append(("move", out.data_ptr()))
        self.queued.append(lambda: out.copy_(tensor))
        return out


def _side_events(log):
    """The side-stream events in order: the i-th follows the copy of batch i."""
    return [e[2] for e in log if e[0] == "record" and e[1] == "side"]


@pytest.mark.parametrize("depth,workers", [(2, 1), (3, 2), (1, 1)])
def test_copies_run_ahead_and_the_step_waits_on_its_batch_only(store, depth, workers):
    ref = list(gt.loader(store, **KW))
    fake = FakeBackend()
    ld = gt.loader(store, **KW, dataloader_kwargs={"num_workers": workers})
    got = []
    for k, b in enumerate(gt.DeviceFeed(ld, backend=fake, depth=depth)):
        fake.log.append(("got", k))
        assert_same_batch(b, ref[k])  # the copy ran before the step (the wait)
        got.append(k)
    assert len(got) == len(ref)
    log = fake.log
    events = _side_events(log)
    assert len(events) == len(ref)  # one copy (and one event) per batch
    assert not any(e[0] == "synchronize" for e in log)  # the host never blocks
    at = {e[1]: i for i, e in enumerate(log) if e[0] == "got"}
    for k in range(len(ref)):
        # batches k+1 .. k+depth-1 were issued before batch k was handed out
        ahead = min(k + depth - 1, len(ref) - 1)
        assert log.index(("record", "side", events[ahead])) < at[k]
        # between the previous batch and this one the step's stream waits once, on batch k
        start = at[k - 1] if k else 0
        waits = [e for e in log[start : at[k]] if e[0] == "wait" and e[1] == "step"]
        assert waits == [("wait", "step", events[k])]
    # every copy into a buffer follows a wait of the side stream on the step's stream
    last_mark = None
    for e in log:
        if e[0] == "wait" and e[1] == "side":
            assert e[2].stream == "step"
            last_mark = e[2]
        if e[0] == "copy":
            assert last_mark is not None
    assert any(e[0] == "register" for e in log)  # the ring is page-locked in place
    # each batch's buffer is made known to the allocator as used on the step's stream
    assert sum(1 for e in log if e == ("keep", "step")) >= len(ref)


def test_the_side_stream_waits_for_the_step_streams_work(store):
    """Before a copy rewrites a device buffer, the side stream waits for an event recorded on
    the step's stream (not on itself: that would order nothing); the side stream records one
    event per batch, its copy's."""
    fake = FakeBackend()
    ld = gt.loader(store, **KW, dataloader_kwargs={"num_workers": 1})
    n = sum(1 for _ in gt.DeviceFeed(ld, backend=fake, depth=2))
    side_waits = [e for e in fake.log if e[0] == "wait" and e[1] == "side"]
    assert len(side_waits) == n and all(ev.stream == "step" for _, _, ev in side_waits)
    assert sum(1 for e in fake.log if e[0] == "record" and e[1] == "side") == n


def test_a_slot_stays_leased_until_its_copy_is_done(store):
    """With the device behind (events not done), the slots stay leased, the workers skip
    them (their batches come in blocks of their own and are moved instead), and every batch
    is still right; once the events are done the leases end."""
    ref = list(gt.loader(store, **KW))
    fake = FakeBackend(auto_done=False)
    ld = gt.loader(store, **KW, dataloader_kwargs={"num_workers": 1, "prefetch_factor": 2})
    # groups of 2: a ring of (2 + 1) * 2 + 4 slots, fewer than the batches, so the worker
    # comes back to slots still leased
    it = iter(gt.DeviceFeed(ld, backend=fake, group=2))
    assert it._receiver.ring.slots < len(ref)
    got = []
    for k, b in enumerate(it):
        assert_same_batch(b, ref[k])
        ring = it._receiver.ring
        leased = [s for s in range(ring.slots) if ring.leased(s)]
        # no copy is done: every slot received is still leased
        copied = {e[3] for e in fake.log if e[0] == "copy"}
        slots = {s for s in range(ring.slots) if ring.slot_tensor(s).data_ptr() in copied}
        assert set(leased) == slots
        got.append(b)
        del b
    moves = [e for e in fake.log if e[0] == "move"]
    assert moves  # the workers sent batches outside the leased slots
    assert len(got) == len(ref)
    fake.finish()
    it._receiver.poll()
    assert not any(ring.leased(s) for s in range(ring.slots))


def test_a_device_buffer_is_never_rewritten_while_a_batch_of_it_lives(store):
    ref = list(gt.loader(store, **KW))
    fake = FakeBackend()
    ld = gt.loader(store, **KW, dataloader_kwargs={"num_workers": 2})
    kept = {}
    for k, b in enumerate(gt.DeviceFeed(ld, backend=fake, depth=2)):
        buf = next(
            x for x in fake.buffers if x.data_ptr() <= b.pos.data_ptr() < x.data_ptr() + x.numel()
        )
        if k % 3 == 0:
            kept[k] = (b, buf.data_ptr())  # held to the end
        live = {p for _, p in kept.values()}
        fake.log.append(("got", k, buf.data_ptr(), frozenset(live)))
    gc.collect()
    for k, (b, _) in kept.items():
        assert_same_batch(b, ref[k])
    # no copy targets a buffer held by a batch kept at that time
    live: frozenset = frozenset()
    for e in fake.log:
        if e[0] == "got":
            live = e[3]
        elif e[0] == "copy":
            assert e[1] not in live
    pooled = {e[2] for e in fake.log if e[0] == "empty"}
    reused = [e for e in fake.log if e[0] == "got" and e[2] in pooled]
    assert len(pooled) < len(ref) and reused  # buffers are reused once free


def test_batches_of_other_loaders_are_pinned_moved_and_kept_on_the_step_stream(store):
    """Without workers the loader's batches (PyG or dicts) are moved on the side stream, each
    tensor told to the allocator as used on the step's stream; the loader's objects are left
    as they were."""
    for as_dict in (False, True):
        batches = list(gt.loader(store, **KW, collation=gt.Collation(as_dict=as_dict)))
        before = [b["pos"].data_ptr() for b in batches]
        fake = FakeBackend()
        got = list(gt.DeviceFeed(batches, backend=fake))
        assert [b["pos"].data_ptr() for b in batches] == before
        for b, w in zip(got, batches, strict=True):
            assert b is not w and b["pos"].data_ptr() != w["pos"].data_ptr()
            if as_dict:
                assert list(b) == list(w)
                for k in w:
                    assert (
                        torch.equal(b[k], w[k]) if isinstance(w[k], torch.Tensor) else b[k] == w[k]
                    )
            else:
                assert_same_batch(b, w)
        keeps = sum(1 for e in fake.log if e[0] == "keep")
        moves = sum(1 for e in fake.log if e[0] == "move")
        assert keeps == moves > len(batches)


def test_close_finishes_the_copies_in_flight(store):
    fake = FakeBackend(auto_done=False)
    ld = gt.loader(store, **KW, dataloader_kwargs={"num_workers": 1})
    it = iter(gt.DeviceFeed(ld, backend=fake, depth=3))
    next(it)
    it.close()
    syncs = [e for e in fake.log if e[0] == "synchronize"]
    assert len(syncs) == 2  # the two batches read ahead
    ring = it._receiver.ring
    assert sum(ring.leased(s) for s in range(ring.slots)) == 1  # the one handed out
    with pytest.raises(StopIteration):
        next(it)
