"""A ``set_epoch`` (or ``load_state_dict``) between ``iter(loader)`` and the first batch takes
effect (issue 26, part 5: Lightning resuming from an end-of-epoch checkpoint creates its iterator
and then calls ``loader.sampler.set_epoch(1)``), and resume states are checked the same way by
the torch and the JAX loader: a state without a fingerprint needs an explicit opt-in.

The reference batches are ``graphbatch.plan(...)`` of the epoch, computed here.
"""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")

from torch.utils.data import DataLoader  # noqa: E402

import graphbatch as gb  # noqa: E402
import graphbatch.torch as gt  # noqa: E402

from .._torch_graphs import molecules, sizes_of  # noqa: E402
from ..torch.test_torch_dropin import KW, ids, plan_batches  # noqa: E402


@pytest.fixture(scope="module")
def graphs():
    return molecules(40, seed=1, max_nodes=9)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    pytest.importorskip("h5py")
    from graphbatch.datasets import synthetic_graphs, synthetic_sizes, write_store

    sizes = synthetic_sizes(60, "normal", rng=0, mean_nodes=8, spread=0.2)
    g = synthetic_graphs(sizes, rng=1, node_dim=3, n_targets=2)
    path = write_store(tmp_path_factory.mktemp("eb") / "g.h5", [g], name="t")
    from graphbatch.datasets import GraphStore

    return GraphStore(path)


# ----------------------------------------------------------- set_epoch before the first batch
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("via", ["sampler", "loader", "batch_sampler"])
def test_set_epoch_after_iter_serves_the_new_epoch(graphs, workers, via):
    sizes = sizes_of(graphs)
    ld = gt.loader(graphs, dataloader_kwargs={"num_workers": workers}, **KW)
    it = iter(ld)
    getattr(ld, via).set_epoch(1) if via != "loader" else ld.set_epoch(1)
    got = [ids(b) for b in it]
    assert got == plan_batches(sizes, 1)
    assert ld.epoch == 2  # the pass of epoch 1 ran to its end
    assert [ids(b) for b in ld] == plan_batches(sizes, 2)


def test_the_plain_reproduction_of_the_issue(graphs):
    ld = gt.loader(graphs, **KW)
    it = iter(ld)
    ld.sampler.set_epoch(1)
    first = next(it)
    assert ids(first) == plan_batches(sizes_of(graphs), 1)[0]
    assert ld.epoch == 1 and ld.state_dict()["offset"] == 1


def test_set_epoch_to_the_same_epoch_after_iter_keeps_the_pass(graphs):
    """Lightning's every-epoch call: iterator first, then set_epoch(current) -- a no-op."""
    sizes = sizes_of(graphs)
    ld = gt.loader(graphs, **KW)
    list(ld)
    it = iter(ld)
    ld.sampler.set_epoch(1)
    assert [ids(b) for b in it] == plan_batches(sizes, 1)


def test_set_epoch_after_the_first_batch_waits_for_the_next_pass(graphs):
    sizes = sizes_of(graphs)
    ld = gt.loader(graphs, **KW)
    it = iter(ld)
    first = next(it)
    ld.set_epoch(3)  # the pass in progress keeps its plan
    rest = [ids(b) for b in it]
    assert [ids(first), *rest] == plan_batches(sizes, 0)
    assert [ids(b) for b in ld] == plan_batches(sizes, 3)


def test_load_state_dict_after_iter_resumes_in_that_iterator(graphs):
    sizes = sizes_of(graphs)
    ld = gt.loader(graphs, **KW)
    list(itertools.islice(ld, 2))
    state = ld.state_dict()  # epoch 0, offset 2
    fresh = gt.loader(graphs, **KW)
    it = iter(fresh)
    fresh.load_state_dict(state)
    assert [ids(b) for b in it] == plan_batches(sizes, 0)[2:]


@pytest.mark.parametrize("workers", [0, 2])
def test_set_epoch_after_prefetch_started(graphs, workers):
    sizes = sizes_of(graphs)
    ld = gt.loader(graphs, dataloader_kwargs={"num_workers": workers}, **KW)
    pf = gt.prefetch(ld, depth=2)
    ld.sampler.set_epoch(1)
    got = [ids(b) for b in pf]
    assert got == plan_batches(sizes, 1)
    assert ld.epoch == 2


def test_set_epoch_on_a_bare_batch_sampler_in_a_dataloader(graphs):
    sizes = sizes_of(graphs)
    s = gt.PlanBatchSampler(sizes, "dynamic", batch_size=6, seed=3)
    dl = DataLoader(list(range(len(sizes))), batch_sampler=s, collate_fn=list)
    it = iter(dl)
    s.set_epoch(1)
    assert list(it) == plan_batches(sizes, 1)
    it = iter(s)
    s.set_epoch(2)
    assert [list(b) for b in it] == plan_batches(sizes, 2)


@pytest.mark.parametrize("workers", [0, 2])
def test_set_epoch_after_iter_on_the_store_path(store, workers):
    ld = gt.loader(store, dataloader_kwargs={"num_workers": workers}, **KW)
    sizes = store.graph_sizes()
    it = iter(ld)
    ld.sampler.set_epoch(1)
    got = [ids(b) for b in it]
    assert got == plan_batches(sizes, 1)
    pf = gt.prefetch(ld)
    ld.sampler.set_epoch(4)
    assert [ids(b) for b in pf] == plan_batches(sizes, 4)


# --------------------------------------------------------------------------- resume states
@pytest.mark.parametrize(
    "change", [dict(batch_size=12), dict(shuffle=False), dict(strategy="static-64")]
)
def test_state_without_fingerprint_is_refused_unless_opted_in(graphs, change):
    ld = gt.loader(graphs, **KW)
    list(itertools.islice(ld, 2))
    state = ld.state_dict()
    del state["fingerprint"]  # as written before fingerprints
    other = gt.loader(graphs, **dict(KW, **change))
    with pytest.raises(gb.InputError, match=r"no 'fingerprint'.*allow_missing_fingerprint=True"):
        other.load_state_dict(state)
    with pytest.raises(gb.InputError, match="no 'fingerprint'"):
        other.batch_sampler.load_state_dict(state)
    if "strategy" in change:  # the fields an old state holds are still compared
        with pytest.raises(gb.InputError, match="saved with strategy = 'dynamic'"):
            other.load_state_dict(state, allow_missing_fingerprint=True)
    else:
        other.load_state_dict(state, allow_missing_fingerprint=True)
        assert (other.epoch, other.state_dict()["offset"]) == (0, 2)
    same = gt.loader(graphs, **KW)
    same.load_state_dict(state, allow_missing_fingerprint=True)
    assert [ids(b) for b in same] == plan_batches(sizes_of(graphs), 0)[2:]


def test_state_without_fingerprint_into_a_store_loader_is_refused(graphs, store):
    state = gt.loader(store, **KW).state_dict()
    del state["fingerprint"]
    with pytest.raises(gb.InputError, match="no 'fingerprint'"):
        gt.loader(store, **KW).load_state_dict(state)


BAD_STATES = [None, [1], "x", 3, {}, {"offset": 1}]


@pytest.mark.parametrize("state", BAD_STATES)
def test_torch_refuses_what_is_not_a_state(graphs, state):
    with pytest.raises(gb.InputError, match="not a PlanBatchSampler state"):
        gt.loader(graphs, **KW).load_state_dict(state)
