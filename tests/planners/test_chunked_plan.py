"""Chunk-aware shuffling: every graph once per epoch, each batch inside one window of chunks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphbatch as gb
from graphbatch._chunkplan import chunk_windows
from graphbatch.datasets import chunk_shuffled_plan, synthetic_sizes


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 400),
    chunk=st.integers(1, 64),
    window=st.integers(1, 5),
    strategy=st.sampled_from(["dynamic", "static-64", "pack-lpf", "buckets"]),
    world=st.sampled_from([None, 2]),
    seed=st.integers(0, 3),
    epoch=st.integers(0, 3),
)
def test_every_graph_once_and_batches_stay_in_a_window(
    n, chunk, window, strategy, world, seed, epoch
):
    sizes = synthetic_sizes(n, "normal", rng=seed, mean_nodes=8)
    kw = {"world_size": world} if world else {}
    p = chunk_shuffled_plan(
        sizes,
        strategy,
        batch_size=6,
        chunk_graphs=chunk,
        window_chunks=window,
        seed=seed,
        epoch=epoch,
        **kw,
    )
    p.validate(sizes)
    seen = np.concatenate([p.order, p.skipped])
    assert np.array_equal(np.sort(seen), np.arange(n))  # exactly once
    windows = chunk_windows(n, chunk, window, seed=seed, epoch=epoch)
    which = np.empty(n, dtype=np.int64)
    for k, w in enumerate(windows):
        which[w] = k
        assert np.unique(w // chunk).shape[0] <= window  # W chunks per window
    for idx in p.batches():
        assert np.unique(which[idx]).shape[0] <= 1  # one window per batch
    for b in range(len(p)):
        shape = p.shape(b)
        idx = p.order[p.offsets[b] : p.offsets[b + 1]]
        assert sizes.n_node[idx].sum() <= shape[0] - 1 and sizes.n_edge[idx].sum() <= shape[1]
    if world:
        for s in np.unique(p.step):  # equal-shape steps, all ranks
            assert sorted(p.rank[p.step == s].tolist()) == list(range(world))
            assert len({p.shape(int(b)) for b in np.flatnonzero(p.step == s)}) == 1
    again = chunk_shuffled_plan(
        sizes,
        strategy,
        batch_size=6,
        chunk_graphs=chunk,
        window_chunks=window,
        seed=seed,
        epoch=epoch,
        **kw,
    )
    assert np.array_equal(again.order, p.order)  # deterministic per seed


def test_windows_change_with_the_epoch():
    a = chunk_windows(1000, 10, 4, seed=0, epoch=0)
    b = chunk_windows(1000, 10, 4, seed=0, epoch=1)
    assert len(a) == 25 and not all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    with pytest.raises(ValueError):
        chunk_windows(10, 0, 1, seed=0, epoch=0)
    with pytest.raises(TypeError):
        chunk_shuffled_plan([1, 2], "dynamic")
    assert isinstance(
        chunk_shuffled_plan(gb.GraphSizes([3, 4], [2, 2]), "dynamic", batch_size=2), gb.BatchPlan
    )


# ---------------------------------------------------------------- shuffle="chunks" in the loaders
torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")
pytest.importorskip("h5py")

import graphbatch.torch as gt  # noqa: E402
from graphbatch._chunkplan import check_shuffle, plan_epoch  # noqa: E402
from graphbatch.datasets import GraphStore, synthetic_graphs, write_store  # noqa: E402


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    sizes = synthetic_sizes(97, "normal", rng=4, mean_nodes=6)
    g = synthetic_graphs(sizes, rng=5, node_dim=2, n_targets=1)
    return GraphStore(write_store(tmp_path_factory.mktemp("ck") / "c.h5", [g], name="c"))


def _indices(batches):
    return [b.graph_index[b.graph_mask].tolist() for b in batches]


@settings(max_examples=12, deadline=None)
@given(
    chunk=st.integers(1, 40),
    window=st.integers(1, 4),
    world=st.sampled_from([1, 2, 3]),
    seed=st.integers(0, 5),
    epoch=st.integers(0, 3),
    strategy=st.sampled_from(["dynamic", "pack-lpf", "static-64"]),
)
def test_loader_chunks_every_graph_once_across_ranks_and_deterministic(
    small_store, chunk, window, world, seed, epoch, strategy
):
    n = len(small_store)
    kw = dict(
        strategy=strategy,
        batch_size=5,
        seed=seed,
        shuffle="chunks",
        chunk_graphs=chunk,
        window_chunks=window,
    )
    windows = chunk_windows(n, chunk, window, seed=seed, epoch=epoch)
    which = np.empty(n, dtype=np.int64)
    for k, w in enumerate(windows):
        which[w] = k
    seen, lengths = [], set()
    for rank in range(world):
        ld = gt.loader(small_store, num_replicas=world, rank=rank, **kw)
        ld.set_epoch(epoch)
        got = _indices(ld)
        lengths.add(len(got))
        for idx in got:
            assert np.unique(which[idx]).shape[0] <= 1  # one window per batch
        seen += [i for idx in got for i in idx]
        again = gt.loader(small_store, num_replicas=world, rank=rank, **kw)
        again.set_epoch(epoch)
        assert _indices(again) == got  # same (seed, epoch)
    assert sorted(seen) == list(range(n))  # once per epoch, all ranks
    assert len(lengths) == 1  # equal steps per rank
    # the loader's plan is the shared function's (the JAX loader plans through it too)
    p = plan_epoch(
        small_store.graph_sizes(),
        strategy,
        batch_size=5,
        seed=seed,
        epoch=epoch,
        shuffle="chunks",
        chunk_graphs=chunk,
        window_chunks=window,
        **({"world_size": world} if world > 1 else {}),
    )
    assert sorted(p.order.tolist() + p.skipped.tolist()) == list(range(n))


def test_loader_chunks_resume_and_epochs(small_store):
    kw = dict(
        strategy="dynamic", batch_size=6, seed=3, shuffle="chunks", chunk_graphs=10, window_chunks=2
    )
    ref = gt.loader(small_store, **kw)
    first, second = _indices(ref), _indices(ref)  # epochs 0 and 1
    assert (
        sorted(i for b in first for i in b)
        == sorted(i for b in second for i in b)
        == list(range(len(small_store)))
    )
    assert first != second  # reshuffled per epoch
    ld = gt.loader(small_store, dataloader_kwargs={"num_workers": 1}, **kw)
    it = iter(ld)
    for _ in range(4):
        next(it)
    state = ld.state_dict()
    assert state["fingerprint"]["shuffle"] == "chunks"
    assert state["fingerprint"]["chunk_graphs"] == 10
    del it
    again = gt.loader(small_store, **kw)
    again.load_state_dict(state)
    assert _indices(again) == first[4:]  # exact resume
    other = gt.loader(small_store, **{**kw, "chunk_graphs": 11})
    with pytest.raises(ValueError, match="chunk_graphs"):
        other.load_state_dict(state)  # a different request


def test_shuffle_argument_is_checked(small_store):
    assert check_shuffle(True) is True and check_shuffle(False) is False
    assert check_shuffle("chunks") == "chunks"
    with pytest.raises(ValueError, match="'chunk'"):
        check_shuffle("chunk")
    sizes = synthetic_sizes(30, "normal", rng=0, mean_nodes=5)
    with pytest.raises(TypeError, match="chunk_graphs/window_chunks need shuffle='chunks'"):
        plan_epoch(sizes, "dynamic", batch_size=4, chunk_graphs=8)
    with pytest.raises(ValueError, match="shuffle must be True, False or 'chunks'"):
        gt.loader(small_store, strategy="dynamic", batch_size=2, shuffle="windows")
    with pytest.raises(TypeError, match="need shuffle='chunks'"):
        gt.loader(small_store, strategy="dynamic", batch_size=2, window_chunks=2)
    # shuffle=False stays a plain, unshuffled plan
    a = plan_epoch(sizes, "dynamic", batch_size=4, shuffle=False, epoch=0)
    b = plan_epoch(sizes, "dynamic", batch_size=4, shuffle=False, epoch=3)
    assert np.array_equal(a.order, b.order)


def test_jax_loader_plans_chunks_through_the_shared_function(small_store):
    gj = pytest.importorskip("graphbatch.jax")
    ld = gj.loader(
        small_store,
        strategy="dynamic",
        batch_size=5,
        seed=2,
        shuffle="chunks",
        chunk_graphs=9,
        window_chunks=3,
        prefetch=0,
    )
    for epoch in (0, 1):
        want = plan_epoch(
            small_store.graph_sizes(),
            "dynamic",
            batch_size=5,
            seed=2,
            epoch=epoch,
            shuffle="chunks",
            chunk_graphs=9,
            window_chunks=3,
        )
        got = ld.plan_for_epoch(epoch)
        assert np.array_equal(got.order, want.order)
        assert np.array_equal(got.offsets, want.offsets)
        assert got.meta["chunk_shuffled"]["chunk_graphs"] == 9
    torch_ld = gt.loader(
        small_store,
        strategy="dynamic",
        batch_size=5,
        seed=2,
        shuffle="chunks",
        chunk_graphs=9,
        window_chunks=3,
        collation=gt.Collation(spare_padding_node=False),
    )
    assert np.array_equal(torch_ld.plan.order, ld.plan_for_epoch(0).order)
