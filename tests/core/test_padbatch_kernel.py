"""Pieces of the padded-batch kernel (`graphbatch._padbatch.pad_batch`) against simple
references: the edge-index range check (every damaged index found, no valid batch refused, for
every integer width), padding edges written in place, the batch index check, and the
touch-before-gather pass (no effect on the result)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphbatch._padbatch as pb
from graphbatch._padlayout import padding_edge_index


def _source(nn, ne, ei_dtype=np.int32, bad=None, seed=0) -> pb.PackedGraphs:
    """Graphs with ``nn`` nodes and ``ne`` edges, valid local edge indices, then ``bad``
    (``{edge: value}`` in the concatenated edge_index row 0) written in."""
    rng = np.random.default_rng(seed)
    nn, ne = np.asarray(nn, np.int64), np.asarray(ne, np.int64)
    top = int(np.iinfo(ei_dtype).max) + 1
    parts = [
        rng.integers(0, max(min(int(n), top), 1), (2, int(m))) for n, m in zip(nn, ne, strict=False)
    ]
    ei = np.concatenate([*parts, np.zeros((2, 0), np.int64)], axis=1).astype(ei_dtype)
    for e, v in (bad or {}).items():
        ei[0, e] = v
    N, E, G = int(nn.sum()), int(ne.sum()), len(nn)
    return pb.PackedGraphs(
        n_node=nn,
        n_edge=ne,
        node_offsets=np.r_[0, np.cumsum(nn)],
        edge_offsets=np.r_[0, np.cumsum(ne)],
        edge_index=ei,
        node={"h": np.arange(N, dtype=np.float32)},
        edge={"w": np.arange(E, dtype=np.int16)},
        graph={"y": np.arange(G, dtype=np.float64)},
    )


def _first_bad(src: pb.PackedGraphs, idx) -> int | None:
    """The first graph of ``idx`` (in batch order) with an edge index outside ``[0, n_node)``,
    checked graph by graph in Python."""
    for g in idx:
        a, b = src.edge_offsets[g], src.edge_offsets[g + 1]
        local = src.edge_index[:, a:b].astype(np.int64)
        if local.size and (local.min() < 0 or local.max() >= src.n_node[g]):
            return int(g)
    return None


@settings(max_examples=60, deadline=None)
@given(
    nn=st.lists(st.integers(0, 300), min_size=1, max_size=8),
    data=st.data(),
    ei_dtype=st.sampled_from([np.int8, np.int16, np.int32, np.int64, np.uint8]),
)
def test_range_check_finds_exactly_the_damaged_graphs(nn, data, ei_dtype):
    info = np.iinfo(ei_dtype)
    ne = [data.draw(st.integers(0, 5)) if n else 0 for n in nn]  # graphs without edges too
    E = sum(ne)
    bad = {}
    if E and data.draw(st.booleans()):
        e = data.draw(st.integers(0, E - 1))
        bad[e] = data.draw(
            st.sampled_from(
                [v for v in (-1, -300, 7, 127, 255, 300, 40000) if info.min <= v <= info.max]
                + [int(info.min), int(info.max)]
            )
        )
    src = _source(nn, ne, ei_dtype, bad, seed=len(nn))
    idx = np.array(
        data.draw(st.lists(st.integers(0, len(nn) - 1), max_size=6, unique=True)), dtype=np.int64
    )
    shape = (int(np.asarray(nn)[idx].sum()) + 2, int(np.asarray(ne)[idx].sum()) + 1, len(idx) + 2)
    want = _first_bad(src, idx)
    if want is None:
        got = pb.pad_batch(src, idx, shape)
        ref = np.concatenate(
            [
                src.edge_index[:, src.edge_offsets[g] : src.edge_offsets[g + 1]].astype(np.int64)
                + got.node_ptr[k]
                for k, g in enumerate(idx)
            ]
            + [np.zeros((2, 0), np.int64)],
            axis=1,
        )
        assert np.array_equal(got.fields["edge_index"][:, : ref.shape[1]], ref)
    else:
        with pytest.raises(ValueError, match=rf"edge_index of graph {want} holds .* outside"):
            pb.pad_batch(src, idx, shape)


def test_small_index_dtype_with_large_graphs_is_not_refused():
    # int8 indices of a 300-node graph: valid (all < 128), though 300 does not fit int8/uint8
    src = _source([300, 3], [4, 2], np.int8)
    out = pb.pad_batch(src, [0, 1], (310, 10, 4))
    assert out.num_real == (2, 303, 6)
    want = src.edge_index[:, 4:6].astype(np.int64) + 300
    assert np.array_equal(out.fields["edge_index"][:, 4:6], want)


@pytest.mark.parametrize("nn,value", [(237, -128), (300, -1), (200, -56), (129, -128)])
def test_negative_indices_of_graphs_beyond_the_dtype_range_are_found(nn, value):
    # read as uint8, -128 is 128 < 237 nodes: the bound is capped at 128 for such graphs
    src = _source([nn, 4], [3, 2], np.int8, bad={1: value})
    with pytest.raises(ValueError, match=rf"graph 0 holds \[{value}, .* outside its {nn} nodes"):
        pb.pad_batch(src, [1, 0], (nn + 10, 10, 4))
    assert pb.pad_batch(src, [1], (10, 10, 4)).num_real == (1, 4, 2)


@pytest.mark.parametrize("spread", [False, True])
@pytest.mark.parametrize(
    "n_real,n_node,e", [(0, 1, 3), (5, 6, 4), (5, 9, 7), (3, 10, 0), (0, 4, 9)]
)
def test_padding_edges_written_in_place_equal_new_ones(spread, n_real, n_node, e):
    want = padding_edge_index(n_real, n_node, e, spread=spread)
    for dtype in (np.int64, np.int32):
        out = np.full((2, e), -5, dtype=dtype)
        assert padding_edge_index(n_real, n_node, e, spread=spread, out=out) is out
        assert np.array_equal(out, want)
    with pytest.raises(ValueError, match=r"shape \(2, 3\)"):
        padding_edge_index(1, 4, 3, spread=spread, out=np.zeros((2, 4), np.int64))


@pytest.mark.parametrize(
    "index,err",
    [
        ([0, -1], IndexError),
        ([5], IndexError),
        (np.array([2**63 + 1], np.uint64), IndexError),
        ([[0]], ValueError),
        ([0.0], TypeError),
    ],
)
def test_bad_batch_indices_are_refused(index, err):
    src = _source([2, 3, 1, 4, 2], [1, 2, 0, 3, 1])
    with pytest.raises(err):
        pb.pad_batch(src, index, (20, 20, 4))
    assert pb.pad_batch(src, np.array([4, 0], np.uint8), (20, 20, 4)).num_real == (2, 4, 2)


def test_touching_before_the_gather_changes_nothing(monkeypatch):
    src = _source(np.arange(1, 40) % 9, np.arange(1, 40) % 5, seed=3)
    idx = np.array([7, 3, 30, 0, 12, 38], np.int64)
    shape = (60, 40, 8)
    want = pb.pad_batch(src, idx, shape, dtypes={"w": np.int64})
    monkeypatch.setattr(pb, "TOUCH_BYTES", 0)  # every array touched
    src2 = pb.PackedGraphs(
        **{
            k: getattr(src, k)
            for k in (
                "n_node",
                "n_edge",
                "node_offsets",
                "edge_offsets",
                "edge_index",
                "node",
                "edge",
                "graph",
            )
        }
    )
    got = pb.pad_batch(src2, idx, shape, dtypes={"w": np.int64})
    assert len(src2._layouts[next(iter(src2._layouts))].touch) == 3  # edge_index, h, w
    assert got.offsets == want.offsets
    for name in want.offsets:
        a = want.fields[name] if name in want.fields else getattr(want, name)
        b = got.fields[name] if name in got.fields else getattr(got, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
