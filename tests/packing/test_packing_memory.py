"""The kernel layer's memory module (`graphbatch.packing._memory`): every chunk size in one
place, and each chunked copy equal to its plain NumPy form whatever the chunk."""

from __future__ import annotations

import re
from pathlib import Path
from unittest import mock

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import graphbatch as gb
import graphbatch.packing._memory as memory_mod

SRC = Path(gb.__file__).parent


def test_every_chunk_size_lives_in_the_memory_module():
    # a module-level constant named *CHUNK*/*WINDOW*/*ROWS*/*SLOTS*/*BLOCK* or a literal chunk
    # step (`1 << k` as a step or slice length) anywhere else in planners/ or packing/ is a
    # chunk size outside the one place that tests can shrink
    pattern = re.compile(r"^_?[A-Z_]*(CHUNK|WINDOW|ROWS|SLOTS|BLOCK)[A-Z_]* = ", re.M)
    step = re.compile(r"(step|chunk)\s*=\s*1 << |range\(.*1 << ")
    for pkg in ("planners", "packing"):
        for path in (SRC / pkg).glob("*.py"):
            if path.name == "_memory.py":
                continue
            text = path.read_text()
            assert not pattern.search(text), path.name
            assert not step.search(text), path.name
    names = [n for n in dir(memory_mod) if n.isupper()]
    assert len(names) >= 15
    for n in names:
        assert isinstance(getattr(memory_mod, n), int) and getattr(memory_mod, n) > 0, n


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 300),
    top=st.sampled_from([10, 2**15 + 3, 2**40]),
    chunk=st.integers(1, 40),
    seed=st.integers(0, 2**16),
)
def test_gather_counts_and_take_into_equal_the_fancy_index(n, top, chunk, seed):
    rng = np.random.default_rng(seed)
    column = rng.integers(0, top, max(n, 1))
    index = rng.integers(0, column.shape[0], n).astype(np.int32)
    with (
        mock.patch.object(memory_mod, "GATHER_CHUNK", chunk),
        mock.patch.object(memory_mod, "TAKE_CHUNK", chunk),
    ):
        got = memory_mod.gather_counts(column, index)
        assert np.array_equal(got, column[index])
        big = int(column.max())
        if big < 2**31:  # the narrowest dtype holding the column
            assert got.dtype == (np.int16 if big < 2**15 else np.int32)
        values = rng.integers(0, 2**31 - 1, n + 5).astype(np.int32)
        want = values[index]
        out = memory_mod.take_into(values, index.copy())
        assert out.dtype == np.int32 and np.array_equal(out, want)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 300), chunk=st.integers(1, 40), seed=st.integers(0, 2**16), view=st.booleans()
)
def test_widen_into_equals_astype(n, chunk, seed, view):
    rng = np.random.default_rng(seed)
    out = np.empty(n, np.int64)
    if view:  # the low int32 halves of ``out``'s own items (as `PackedSizes.shuffled` does)
        out[:] = rng.integers(0, 2**31, n)
        values = out.view(np.int32)[0::2] if np.little_endian else out.view(np.int32)[1::2]
        want = values.astype(np.int64)
    else:
        values = rng.integers(-(2**15), 2**15, n).astype(np.int16)
        want = values.astype(np.int64)
    with mock.patch.object(memory_mod, "WIDEN_CHUNK", chunk):
        got = memory_mod.widen_into(values, out)
    assert got is out and np.array_equal(got, want)


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 9), max_size=40),
    chunk=st.integers(1, 30),
    seed=st.integers(0, 2**16),
)
def test_gather_batches_equals_the_slice_concatenation(sizes, chunk, seed):
    rng = np.random.default_rng(seed)
    order = rng.permutation(sum(sizes) + 7)
    starts = np.array([int(rng.integers(0, order.shape[0] - s + 1)) for s in sizes], np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    want = np.concatenate(
        [order[a : a + s] for a, s in zip(starts.tolist(), sizes, strict=False)]
        + [np.zeros(0, order.dtype)]
    )
    with mock.patch.object(memory_mod, "BATCH_GATHER_CHUNK", chunk):
        got = memory_mod.gather_batches(order, starts, offsets)
        narrow = memory_mod.gather_batches(order, starts, offsets, np.int32)
    assert np.array_equal(got, want) and np.array_equal(narrow, want)
    assert narrow.dtype == np.int32
