"""Values that were silently taken as something else (issue 37): a string "false" as a shuffle
flag, ``True`` as a seed or resume offset, a budget mapping without all three fields, and a
``.npz`` file with a duplicated member (read from the first copy where NumPy reads the last)."""

from __future__ import annotations

import warnings
import zipfile

import numpy as np
import pytest

import graphbatch as gb
from graphbatch._errors import InputError, InputTypeError


@pytest.fixture
def sizes() -> gb.GraphSizes:
    rng = np.random.default_rng(0)
    n = rng.integers(3, 15, size=60)
    return gb.GraphSizes(n, 2 * n)


@pytest.mark.parametrize("value", ["false", "False", "true", "", 0, 1, None, 1.0])
def test_plan_shuffle_must_be_a_real_boolean(sizes, value):
    with pytest.raises(InputTypeError, match=rf"shuffle must be True or False, got {value!r}"):
        gb.plan(sizes, "dynamic", batch_size=8, shuffle=value)


def test_numpy_booleans_are_booleans(sizes):
    a = gb.plan(sizes, "dynamic", batch_size=8, shuffle=np.bool_(False))
    b = gb.plan(sizes, "dynamic", batch_size=8, shuffle=False)
    assert np.array_equal(a.order, b.order) and np.array_equal(a.order, np.sort(a.order))


@pytest.mark.parametrize("name", ["seed", "epoch", "batch_size", "world_size"])
@pytest.mark.parametrize("value", [True, False])
def test_a_boolean_is_not_an_integer(sizes, name, value):
    kwargs = {"batch_size": 8, name: value}
    with pytest.raises(InputTypeError, match=rf"{name} must be an integer, got {value!r}"):
        gb.plan(sizes, "dynamic", **kwargs)


def test_integral_numbers_are_still_integers(sizes):
    a = gb.plan(sizes, "dynamic", batch_size=np.int64(8), seed=np.uint8(3), epoch=2.0)
    b = gb.plan(sizes, "dynamic", batch_size=8, seed=3, epoch=2)
    assert np.array_equal(a.order, b.order)


@pytest.mark.parametrize(
    "budget, missing",
    [({"n_node": 1}, "n_edge, n_graph"), ({"n_edge": 5, "n_graph": 3}, "n_node"), ({}, "n_node")],
)
def test_a_budget_mapping_needs_its_three_fields(sizes, budget, missing):
    with pytest.raises(InputError, match=rf"budget .* lacks {missing}"):
        gb.plan(sizes, "pack-lpf", budget=budget)
    with pytest.raises(InputError, match="unknown field"):
        gb.Budget.coerce({"n_node": 64, "n_edge": 64, "n_graph": 4, "n_nodes": 1})
    assert gb.Budget.coerce({"n_node": 64, "n_edge": 200, "n_graph": 4}) == gb.Budget(64, 200, 4)


def test_loader_shuffle_takes_booleans_and_chunks_only():
    from graphbatch._chunkplan import check_shuffle

    assert check_shuffle(True) is True and check_shuffle(np.bool_(False)) is False
    assert check_shuffle("chunks") == "chunks"
    for bad in ("false", 0, 1, None):
        with pytest.raises((InputError, InputTypeError), match=repr(bad)):
            check_shuffle(bad)
    with pytest.raises(InputTypeError):
        check_shuffle(0)


def test_a_resume_offset_of_true_is_refused():
    pytest.importorskip("torch")
    pytest.importorskip("torch_geometric")
    import graphbatch.torch as gt

    from .._torch_graphs import molecules

    data = molecules(40, seed=0)
    ld = gt.loader(data, strategy="dynamic", batch_size=4, seed=0)
    state = ld.state_dict()
    for key, value in (("offset", True), ("epoch", True), ("offset", False)):
        fresh = gt.loader(data, strategy="dynamic", batch_size=4, seed=0)
        with pytest.raises(InputTypeError, match=rf"{key} must be an integer, got {value!r}"):
            fresh.load_state_dict({**state, key: value})
    fresh = gt.loader(data, strategy="dynamic", batch_size=4, seed=0)
    fresh.load_state_dict({**state, "offset": 1})  # a real offset still resumes


# ------------------------------------------------------------------ .npz with duplicate members
def _duplicate_member(path, key: str, value: np.ndarray) -> None:
    """Append a second ``key.npy`` to the zip ``path`` (NumPy's ``np.load`` reads this one)."""
    import io

    buf = io.BytesIO()
    np.lib.format.write_array(buf, value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate name
        with zipfile.ZipFile(path, "a") as zf:
            zf.writestr(f"{key}.npy", buf.getvalue())


def test_a_plan_file_with_a_duplicated_member_is_refused(sizes, tmp_path):
    plan = gb.plan(sizes, "dynamic", batch_size=8, seed=1)
    path = plan.save(tmp_path / "plan.npz")
    _duplicate_member(path, "order", plan.order[::-1].copy())
    with np.load(path) as f:  # what NumPy would read: the second copy
        assert np.array_equal(f["order"], plan.order[::-1])
    with pytest.raises(InputError, match=r"'order'.* 2 times"):
        gb.BatchPlan.load(path)


def test_a_size_table_with_a_duplicated_member_is_refused(sizes, tmp_path):
    path = sizes.save(tmp_path / "sizes.npz")
    _duplicate_member(path, "n_node", sizes.n_node + 1)
    with pytest.raises(InputError, match=r"sizes.npz.*'n_node'.* 2 times"):
        gb.GraphSizes.load(path)
