"""Chunk-aware shuffling: every graph once per epoch, each batch inside one window of chunks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphbatch as gb
from graphbatch.datasets import chunk_shuffled_plan, chunk_windows, synthetic_sizes


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 400), chunk=st.integers(1, 64), window=st.integers(1, 5),
       strategy=st.sampled_from(["dynamic", "static-64", "pack-lpf", "buckets"]),
       world=st.sampled_from([None, 2]), seed=st.integers(0, 3), epoch=st.integers(0, 3))
def test_every_graph_once_and_batches_stay_in_a_window(n, chunk, window, strategy, world, seed,
                                                       epoch):
    sizes = synthetic_sizes(n, "normal", rng=seed, mean_nodes=8)
    kw = {"world_size": world} if world else {}
    p = chunk_shuffled_plan(sizes, strategy, batch_size=6, chunk_graphs=chunk,
                            window_chunks=window, seed=seed, epoch=epoch, **kw)
    p.validate(sizes)
    seen = np.concatenate([p.order, p.skipped])
    assert np.array_equal(np.sort(seen), np.arange(n))            # exactly once
    windows = chunk_windows(n, chunk, window, seed=seed, epoch=epoch)
    which = np.empty(n, dtype=np.int64)
    for k, w in enumerate(windows):
        which[w] = k
        assert np.unique(w // chunk).shape[0] <= window            # W chunks per window
    for idx in p.batches():
        assert np.unique(which[idx]).shape[0] <= 1                 # one window per batch
    for b in range(len(p)):
        shape = p.shape(b)
        idx = p.order[p.offsets[b]:p.offsets[b + 1]]
        assert sizes.n_node[idx].sum() <= shape[0] - 1 and sizes.n_edge[idx].sum() <= shape[1]
    if world:
        for s in np.unique(p.step):                               # equal-shape steps, all ranks
            assert sorted(p.rank[p.step == s].tolist()) == list(range(world))
            assert len({p.shape(int(b)) for b in np.flatnonzero(p.step == s)}) == 1
    again = chunk_shuffled_plan(sizes, strategy, batch_size=6, chunk_graphs=chunk,
                                window_chunks=window, seed=seed, epoch=epoch, **kw)
    assert np.array_equal(again.order, p.order)                   # deterministic per seed


def test_windows_change_with_the_epoch():
    a = chunk_windows(1000, 10, 4, seed=0, epoch=0)
    b = chunk_windows(1000, 10, 4, seed=0, epoch=1)
    assert len(a) == 25 and not all(np.array_equal(x, y) for x, y in zip(a, b))
    with pytest.raises(ValueError):
        chunk_windows(10, 0, 1, seed=0, epoch=0)
    with pytest.raises(TypeError):
        chunk_shuffled_plan([1, 2], "dynamic")
    assert isinstance(chunk_shuffled_plan(gb.GraphSizes([3, 4], [2, 2]), "dynamic",
                                          batch_size=2), gb.BatchPlan)
