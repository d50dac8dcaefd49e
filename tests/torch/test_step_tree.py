"""The batch -> static buffer mapping of `TrainStep`: flatten/unflatten round trips over nested
containers (hypothesis), shape keys that change exactly with a tensor's name, shape, dtype or
device, and static buffers that take a batch's values and never alias it."""

from __future__ import annotations

from collections import namedtuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")

import graphbatch as gb  # noqa: E402
import graphbatch.torch as gt  # noqa: E402
from graphbatch.torch._step_tree import StaticBatch, flatten, step_key, unflatten  # noqa: E402

from .._torch_graphs import molecules  # noqa: E402

Pair = namedtuple("Pair", "a b")
DTYPES = [torch.float32, torch.float64, torch.int64, torch.bool]


@st.composite
def tensors(draw):
    shape = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    dtype = draw(st.sampled_from(DTYPES))
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * 3).to(dtype)


leaves = tensors() | st.integers(-3, 3) | st.text(max_size=3) | st.none()
trees = st.recursive(
    leaves,
    lambda kids: (
        st.lists(kids, max_size=3)
        | st.lists(kids, max_size=3).map(tuple)
        | st.builds(Pair, kids, kids)
        | st.dictionaries(st.text("abcxyz", min_size=1, max_size=3), kids, max_size=3)
    ),
    max_leaves=8,
)


def same(a, b):
    """Equal structure and container types; tensors compared by identity."""
    if isinstance(a, torch.Tensor):
        return a is b
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@given(trees)
def test_flatten_unflatten_round_trip(tree):
    spec, names, leaves_ = flatten(tree)
    assert len(names) == len(leaves_) == len(set(names))
    assert same(unflatten(spec, leaves_), tree)
    assert step_key(names, leaves_) == step_key(*flatten(tree)[1:])


@given(trees)
def test_static_buffers_take_values_without_aliasing(tree):
    spec, names, leaves_ = flatten(tree)
    static = StaticBatch.of(spec, names, leaves_)
    other = [torch.ones_like(t) for t in leaves_]
    static.fill(other)
    assert sorted(i for g in static.groups for i in g) == list(range(len(leaves_)))
    assert all(len({leaves_[i].dtype for i in g}) == 1 for g in static.groups)
    for buf, src, first in zip(static.buffers, other, leaves_, strict=True):
        assert torch.equal(buf, src)
        assert buf.data_ptr() != src.data_ptr() or buf.numel() == 0
        assert buf.data_ptr() != first.data_ptr() or buf.numel() == 0
    rebuilt = static.batch()
    _, names2, leaves2 = flatten(rebuilt)
    assert names2 == names and all(a is b for a, b in zip(leaves2, static.buffers, strict=True))
    assert static.batch() is not rebuilt or not isinstance(rebuilt, dict | list)


@given(trees, st.data())
def test_key_changes_with_shape_dtype_and_name_only(tree, data):
    _, names, leaves_ = flatten(tree)
    key = step_key(names, leaves_)
    assert step_key(names, [t.clone() + 1 if t.dtype != torch.bool else ~t for t in leaves_]) == key
    if not leaves_:
        return
    i = data.draw(st.integers(0, len(leaves_) - 1))
    grown = list(leaves_)
    grown[i] = torch.zeros((*leaves_[i].shape, 1), dtype=leaves_[i].dtype)
    assert step_key(names, grown) != key
    cast = list(leaves_)
    cast[i] = leaves_[i].to(torch.int32)
    assert step_key(names, cast) != key
    renamed = list(names)
    renamed[i] = names[i] + "_"
    assert step_key(renamed, leaves_) != key


def test_unflatten_refuses_extra_tensors():
    spec, _, leaves_ = flatten({"a": torch.zeros(1)})
    with pytest.raises(gb.InputError, match="more than the spec's tensors"):
        unflatten(spec, [*leaves_, torch.zeros(1)])


def test_pyg_batch_round_trip_and_key_shape():
    graphs = molecules(12, seed=3, max_nodes=7)
    ld = gt.loader(graphs, strategy="dynamic", batch_size=4, seed=0, shuffle=False)
    batch = next(iter(ld))
    spec, names, leaves_ = flatten(batch)
    assert set(names) == set(batch.keys())
    static = StaticBatch.of(spec, names, leaves_)
    again = static.batch()
    assert type(again) is type(batch) and again.num_graphs == batch.num_graphs
    for k in list(batch.keys()):  # iterating a PyG batch gives (key, value) pairs
        assert torch.equal(again[k], batch[k]) and again[k] is not batch[k]
    key = step_key(names, leaves_)
    shape = (batch.num_nodes, batch.num_edges, batch.num_graphs)
    assert key.shape == shape  # the batch's padded shape (the plan's, with a spare node)
    assert key.describe() == "{} nodes, {} edges, {} graphs".format(*shape)
    # a model that replaces a field of its batch replaces nothing the step keeps
    again.pos = again.pos * 0
    assert torch.equal(static.batch().pos, batch.pos)


def test_key_without_masks_has_no_shape():
    _, names, leaves_ = flatten({"x": torch.zeros(2, 3), "y": [torch.zeros(2)]})
    key = step_key(names, leaves_)
    assert names == ["x", "y[0]"]
    assert key.shape is None and key.describe() == "2 tensors"


def test_static_buffers_keep_requires_grad():
    pos = torch.zeros(3, 3, requires_grad=True)
    spec, names, _ = flatten({"pos": pos * 1})
    static = StaticBatch.of(spec, names, [pos])
    assert static.buffers[0].requires_grad and static.buffers[0].is_leaf
    static.fill([torch.ones(3, 3)])  # a copy into a leaf that requires grad, without autograd
    assert torch.equal(static.buffers[0].detach(), torch.ones(3, 3))
