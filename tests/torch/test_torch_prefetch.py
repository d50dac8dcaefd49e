"""`graphbatch.torch.prefetch`: a background thread that makes the next batches in order."""

from __future__ import annotations

import gc
import threading

import pytest

torch = pytest.importorskip("torch")

from graphbatch.torch import prefetch  # noqa: E402
from graphbatch.torch._prefetch import Prefetcher  # noqa: E402

from .._waiting import wait_for  # noqa: E402


def _threads() -> int:
    return sum(t.name == "graphbatch-prefetch" for t in threading.enumerate())


def test_same_items_in_order_and_runs_ahead():
    made = []

    def source():
        for i in range(10):
            made.append(i)
            yield torch.full((3,), i)

    p = prefetch(source(), depth=3)
    assert wait_for(lambda: len(made) >= 3)  # made before anyone asked
    out = [int(b[0]) for b in p]
    assert out == list(range(10))
    with pytest.raises(StopIteration):
        next(p)


def test_error_of_the_source_is_raised_where_it_happened():
    def source():
        yield 1
        yield 2
        raise KeyError("graph 7 is missing")

    p = prefetch(source())
    assert next(p) == 1 and next(p) == 2
    with pytest.raises(KeyError, match="graph 7"):
        next(p)
    with pytest.raises(StopIteration):
        next(p)


def test_close_stops_the_thread_without_draining_the_source():
    made = []
    closed = []

    def source():
        try:
            for i in range(10**6):
                made.append(i)
                yield i
        finally:
            closed.append(True)

    before = _threads()
    with Prefetcher(source(), depth=2) as p:
        assert next(p) == 0
    assert wait_for(lambda: _threads() == before)
    assert closed == [True]
    assert len(made) <= 5  # depth 2 + the one being made + the one consumed


def test_abandoned_prefetcher_is_collected_and_its_thread_ends():
    before = _threads()
    p = prefetch(iter(range(10**6)), depth=2)
    assert next(p) == 0
    del p
    gc.collect()
    assert wait_for(lambda: _threads() == before)


def test_pin_memory_is_applied_in_the_thread():
    class Pinnable:
        def __init__(self):
            self.pinned_in = None

        def pin_memory(self):
            self.pinned_in = threading.current_thread().name
            return self

    items = [Pinnable(), {"x": Pinnable(), "n": 3}]
    got = list(prefetch(items, pin_memory=True))
    assert got[0].pinned_in == "graphbatch-prefetch"
    assert got[1]["x"].pinned_in == "graphbatch-prefetch" and got[1]["n"] == 3


def test_transform_runs_in_the_thread_after_pinning():
    class Pinnable:
        def __init__(self):
            self.steps = []

        def pin_memory(self):
            self.steps.append(("pin", threading.current_thread().name))
            return self

    def to_device(b):
        b.steps.append(("to", threading.current_thread().name))
        return b

    got = list(prefetch([Pinnable(), Pinnable()], pin_memory=True, transform=to_device))
    assert [b.steps for b in got] == [
        [("pin", "graphbatch-prefetch"), ("to", "graphbatch-prefetch")]
    ] * 2
    assert [int(t) for t in prefetch(torch.arange(4), transform=lambda t: t * 10)] == [
        0,
        10,
        20,
        30,
    ]


def test_is_the_cores_consumer_paced_prefetcher():
    """One implementation: a take does not wake the thread (it refills on its own poll)."""
    from graphbatch._prefetch import Prefetcher as Core

    assert issubclass(Prefetcher, Core)
    with prefetch(iter(range(10**6)), depth=2) as p:
        for _ in range(10):
            next(p)
            assert wait_for(lambda: p._queue.full())
            assert not p._queue.not_full._waiters


def test_bad_depth_and_transform():
    with pytest.raises(ValueError, match="depth"):
        prefetch([1], depth=0)
    with pytest.raises(TypeError, match="transform"):
        prefetch([1], transform="cuda")


def test_prefetched_plan_loader_gives_the_same_batches():
    pytest.importorskip("torch_geometric")
    import graphbatch.torch as gt

    from .._torch_graphs import molecules

    graphs = molecules(60, seed=3)
    ld = gt.loader(graphs, strategy="pack-lpf", batch_size=8, seed=5)
    direct = list(ld)
    ld.set_epoch(0)
    fetched = list(prefetch(ld, depth=2))
    assert len(fetched) == len(direct) > 1
    for a, b in zip(direct, fetched, strict=True):
        for key in ("z", "pos", "edge_index", "batch", "node_mask", "edge_mask", "graph_mask"):
            assert torch.equal(getattr(a, key), getattr(b, key))


@pytest.mark.parametrize("taken", [0, 1, 3])
def test_state_dict_of_a_prefetched_plan_loader_counts_batches_received(taken):
    """The loader's resume point counts the batches the training loop received, not the ones
    the thread made ahead: resuming from it gives exactly the remaining batches."""
    pytest.importorskip("torch_geometric")
    import graphbatch.torch as gt

    from .._torch_graphs import molecules

    graphs = molecules(60, seed=3)

    def make():
        return gt.loader(graphs, strategy="pack-lpf", batch_size=8, seed=5)

    def ids(batches):
        return [b.graph_index[b.graph_mask].tolist() for b in batches]

    full = ids(make())
    ld = make()
    with prefetch(ld, depth=3) as p:
        got = [next(p) for _ in range(taken)]
        assert wait_for(lambda: p._queue.full())  # the thread made 3 more than were taken
        state = ld.state_dict()
    assert (state["epoch"], state["offset"]) == (0, taken)
    resumed = make()
    resumed.load_state_dict(state)
    assert ids(got) + ids(prefetch(resumed)) == full
    assert resumed.epoch == 1  # read to its end through the thread: the next epoch is armed
    assert ids(resumed) != full  # epoch 1's order


def test_iterating_a_plan_loader_leaves_the_global_rng_alone():
    """The loader draws its DataLoader seed from its own generator: model initialisation that
    runs while a (prefetched) loader iterates gets the same weights as without it."""
    pytest.importorskip("torch_geometric")
    import graphbatch.torch as gt

    from .._torch_graphs import molecules

    ld = gt.loader(molecules(20, seed=1), strategy="dynamic", batch_size=4, seed=0)
    torch.manual_seed(123)
    expect = torch.rand(3)
    torch.manual_seed(123)
    list(ld)
    assert torch.equal(torch.rand(3), expect)
