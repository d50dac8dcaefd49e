"""`graphbatch._prefetch`: the one background-thread prefetch (core, used by both adapters)."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphbatch._prefetch import (
    POLL_MAX_S,
    POLL_MIN_S,
    POLL_SHARE,
    Prefetcher,
    ahead,
    poll_interval,
)

from .._imports import imports_of
from .._waiting import wait_for

SRC = Path(__file__).resolve().parents[2] / "src" / "graphbatch"
NAME = "graphbatch-test-prefetch"


def _threads() -> int:
    return sum(t.name == NAME for t in threading.enumerate())


class Source:
    """A generator source that records what was made and whether it was closed; raises
    ``exc`` when asked for item ``fail_at``."""

    def __init__(self, n: int, fail_at: int | None = None, exc: BaseException | None = None):
        self.n, self.fail_at, self.exc = n, fail_at, exc
        self.made: list[int] = []
        self.closed = False

    def __iter__(self):
        try:
            for i in range(self.n):
                if i == self.fail_at:
                    raise self.exc
                self.made.append(i)
                yield i
        finally:
            self.closed = True


def test_the_core_module_imports_no_framework():
    assert not any(
        m.split(".")[0] in ("torch", "jax", "jraph", "torch_geometric")
        for m in imports_of(SRC / "_prefetch.py")
    )
    code = (
        "import sys, graphbatch._prefetch; print([m for m in ('torch', 'jax') if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "[]"


def test_both_adapters_use_the_core_prefetcher():
    """One implementation: the adapters' modules hold no thread or queue of their own."""
    for path in (SRC / "torch" / "_prefetch.py", SRC / "jax" / "_loader.py"):
        mods = imports_of(path)
        assert ".._prefetch" in mods, path
        assert not mods & {"threading", "queue"}, path


def test_poll_follows_the_consumers_pace():
    assert poll_interval(None) == POLL_MAX_S
    assert poll_interval(10.0) == POLL_MAX_S  # slow steps: a 10 ms poll
    assert poll_interval(1e-6) == POLL_MIN_S
    assert poll_interval(0.02) == pytest.approx(POLL_SHARE * 0.02)


@pytest.mark.parametrize("depth", [1, 2, 5])
def test_delivers_in_order_and_keeps_up_with_a_fast_consumer(depth):
    """Every item once, in order; a consumer taking 2 ms per item is not slowed by the
    producer's timed poll (a fixed 10 ms poll would cost >= 2.5x with depth 2)."""
    n = 150

    def consume(d):
        out, t0 = [], time.perf_counter()
        for x in ahead(lambda i: i * i, range(n), d, name=NAME):
            out.append(x)
            time.sleep(0.002)
        return out, time.perf_counter() - t0

    same, base = consume(0)
    got, took = consume(depth)
    assert got == same == [i * i for i in range(n)]
    assert took < 1.8 * base + 0.1


def test_a_take_does_not_wake_the_producer():
    """While the queue is full the producer waits on its own timer, never on the queue's
    ``not_full`` condition, which every ``get`` notifies (the wake-up that preempted the
    training thread on a busy machine)."""
    src = Source(10**6)
    with Prefetcher(src, depth=2, name=NAME) as p:
        for _ in range(20):
            next(p)
            assert wait_for(lambda: p._queue.full())
            assert not p._queue.not_full._waiters
    assert src.closed


def test_runs_ahead_and_transform_runs_in_the_thread():
    src = Source(10)
    seen = []

    def transform(x):
        seen.append(threading.current_thread().name)
        return -x

    with Prefetcher(src, depth=3, transform=transform, name=NAME) as p:
        assert wait_for(lambda: len(src.made) >= 3)  # made before anyone asked
        assert list(p) == [-i for i in range(10)]
        assert p.exhausted
        with pytest.raises(StopIteration):
            next(p)
    assert seen == [NAME] * 10


@settings(max_examples=25, deadline=None)
@given(n=st.integers(0, 40), depth=st.integers(1, 4), data=st.data())
def test_every_item_once_in_order_early_stop_and_errors(n, depth, data):
    """Any length, depth, stop point and failure point: the consumer gets exactly the prefix
    the synchronous loop would give, the failure (the same exception object) where it
    happened, and afterwards no thread is left and a stopped source is closed."""
    before = _threads()
    fail_at = data.draw(st.one_of(st.none(), st.integers(0, n)), label="fail_at")
    stop_at = data.draw(st.one_of(st.none(), st.integers(0, n)), label="stop_at")
    in_transform = data.draw(st.booleans(), label="fail in transform")
    exc = KeyError(f"graph {fail_at} is missing")
    if in_transform:
        src = Source(n)

        def transform(x):
            if x == fail_at:
                raise exc
            return x
    else:
        src, transform = Source(n, fail_at, exc), None
    limit = n if fail_at is None else fail_at  # items before the failure (or all)
    want = list(range(limit if stop_at is None else min(limit, stop_at)))
    got, raised = [], None
    with Prefetcher(src, depth, transform=transform, name=NAME) as p:
        try:
            for x in p:
                if stop_at is not None and len(got) == stop_at:
                    break
                got.append(x)
        except KeyError as e:
            raised = e
    assert got == want
    stopped_first = stop_at is not None and stop_at < limit
    if fail_at is not None and fail_at < n and not stopped_first:
        assert raised is exc  # the original exception, at its position
    else:
        assert raised is None
    assert _threads() == before  # close joined the thread
    assert len(src.made) <= len(got) + depth + 2
    if stop_at is not None and stop_at < limit:
        assert src.closed  # a stopped generator source runs its cleanup


def test_a_source_left_after_a_failed_transform_is_closed():
    """Found by the property above: the transform fails at item 1 while the consumer stops
    after item 0; the producer abandons the source mid-way and closes it (its cleanup runs)
    even though the test still holds the exception (whose traceback holds the thread's
    frame, and so the source)."""
    exc = KeyError("graph 1 is missing")

    def transform(x):
        if x == 1:
            raise exc
        return x

    for stop_first in (True, False):
        src = Source(2)
        with Prefetcher(src, 2, transform=transform, name=NAME) as p:
            assert next(p) == 0
            if not stop_first:
                with pytest.raises(KeyError) as info:
                    next(p)
                assert info.value is exc
        assert src.closed, stop_first


def test_exception_raised_mid_epoch_by_the_consumer_stops_the_thread():
    before = _threads()
    src = Source(10**6)

    def train():
        for x in ahead(lambda i: i, src, 2, name=NAME):
            if x == 3:
                raise RuntimeError("loss is nan")

    with pytest.raises(RuntimeError, match="nan"):
        train()
    assert _threads() == before and src.closed
    assert len(src.made) <= 4 + 2 + 1


def test_abandoned_prefetcher_is_collected_and_its_thread_ends():
    before = _threads()
    src = Source(10**6)
    p = Prefetcher(src, depth=2, name=NAME)
    assert next(p) == 0
    del p
    gc.collect()
    assert wait_for(lambda: _threads() == before)
    assert wait_for(lambda: src.closed)


def test_stress_many_short_lived_prefetchers_leave_no_thread():
    before = threading.active_count()
    for k in range(200):
        with Prefetcher(range(k % 7), depth=1 + k % 3, name=NAME) as p:
            assert list(p) == list(range(k % 7))
        it = ahead(str, range(50), 1 + k % 2, name=NAME)
        assert next(it) == "0"
        it.close()
    assert threading.active_count() == before


def test_a_producer_in_a_slow_item_is_joined_on_close():
    """close() waits for the item in hand (no thread outlives it), then the source stops."""
    started = threading.Event()

    def slow(x):
        if x == 1:
            started.set()
            time.sleep(0.2)
        return x

    before = _threads()
    src = Source(100)
    p = Prefetcher(src, depth=1, transform=slow, name=NAME)
    assert next(p) == 0
    assert started.wait(5)
    p.close()
    assert _threads() == before and src.closed and src.made == [0, 1]


@pytest.mark.parametrize("depth", [0, -1, 1.5, "2", None])
def test_bad_depth(depth):
    with pytest.raises((ValueError, TypeError), match="depth"):
        Prefetcher([1], depth=depth)


def test_a_transform_raising_stop_iteration_is_an_error_not_a_silent_end():
    def transform(x):
        if x == 2:
            raise StopIteration
        return x

    got = []
    with pytest.raises(RuntimeError, match="StopIteration"):
        for x in Prefetcher(range(5), 2, transform=transform, name=NAME):
            got.append(x)
    assert got == [0, 1]


def test_bad_transform_and_ahead_depth():
    with pytest.raises(TypeError, match="transform"):
        Prefetcher([1], 2, transform=3)
    with pytest.raises(ValueError, match="depth"):
        next(ahead(str, [1], -1))
    assert list(ahead(str, [1, 2], 0)) == ["1", "2"]
