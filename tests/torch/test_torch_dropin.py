"""The loader as a drop-in DataLoader: epochs from any caller, ranks read at iteration, pickling,
DataLoader arguments, and resume refusing a changed plan request (issues 13 and 14)."""

from __future__ import annotations

import copy
import itertools
import pickle
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")

from torch.utils.data import DataLoader, DistributedSampler  # noqa: E402

import graphbatch as gb  # noqa: E402
import graphbatch.torch as gt  # noqa: E402
from graphbatch.torch import _sampler  # noqa: E402

from .._torch_graphs import molecules, sizes_of  # noqa: E402

KW = dict(strategy="dynamic", batch_size=6, seed=3)


@pytest.fixture(scope="module")
def graphs():
    return molecules(40, seed=8, max_nodes=9)


def plan_batches(sizes, epoch, **kw):
    kw = dict(KW, **kw)
    strategy = kw.pop("strategy")
    return [b.tolist() for b in gb.plan(sizes, strategy, epoch=epoch, **kw).batches()]


def ids(batch):
    return batch.graph_index[batch.graph_mask].tolist()


# ------------------------------------------------------------------------------------ epochs
def test_loader_is_a_dataloader_with_a_distributed_sampler(graphs):
    ld = gt.loader(graphs, **KW)
    assert isinstance(ld, DataLoader)
    assert isinstance(ld.sampler, DistributedSampler)  # Lightning injects no other sampler
    assert ld.batch_sampler is ld.plan_sampler and ld.batch_sampler.sampler is ld.sampler
    p = gb.plan(sizes_of(graphs), "dynamic", batch_size=6, seed=3, epoch=0)
    assert list(ld.sampler) == p.order.tolist() and len(ld.sampler) == len(graphs)


@pytest.mark.parametrize("who", ["loader", "sampler", "batch_sampler", "graph_sampler"])
def test_set_epoch_from_any_caller_takes_effect_at_next_iter(graphs, who):
    ld = gt.loader(graphs, **KW)
    target = {
        "loader": ld,
        "sampler": ld.sampler,
        "batch_sampler": ld.batch_sampler,
        "graph_sampler": ld.batch_sampler.sampler,
    }[who]
    sizes = sizes_of(graphs)
    for epoch in (0, 1, 4, 2):
        target.set_epoch(epoch)
        expect = plan_batches(sizes, epoch)
        assert len(ld) == len(expect)
        got = [ids(b) for b in itertools.islice(ld, 2)]  # stop early, as Lightning's len / limits
        assert got == expect[:2]
    assert plan_batches(sizes, 0) != plan_batches(sizes, 1)


def test_early_stopped_pass_is_followed_by_next_epoch(graphs):
    sizes = sizes_of(graphs)
    ld = gt.loader(graphs, **KW)
    seen = [[ids(b) for b in itertools.islice(ld, 3)] for _ in range(3)]
    for epoch in range(3):
        assert seen[epoch] == plan_batches(sizes, epoch)[:3]
    assert ld.epoch == 2
    assert [ids(b) for b in ld] == plan_batches(sizes, 3)  # complete pass of epoch 3
    assert ld.epoch == 4
    # a DataLoader iterator created but not consumed does not count as a pass
    iter(ld)
    assert [ids(b) for b in itertools.islice(ld, 1)] == plan_batches(sizes, 4)[:1]


def test_set_epoch_after_iter_before_consumption_keeps_the_pass(graphs):
    """Lightning creates the epoch-0 iterator (and a resumed one) before calling set_epoch."""
    sizes = sizes_of(graphs)
    ld = gt.loader(graphs, dataloader_kwargs={"num_workers": 1}, **KW)
    it = iter(ld)
    ld.sampler.set_epoch(0)
    first = [ids(next(it)) for _ in range(3)]
    assert first == plan_batches(sizes, 0)[:3]
    state = ld.state_dict()
    assert (state["epoch"], state["offset"]) == (0, 3)
    del it
    again = gt.loader(graphs, dataloader_kwargs={"num_workers": 1}, **KW)
    again.load_state_dict(state)
    it = iter(again)
    again.sampler.set_epoch(0)  # same epoch: the loaded resume point survives
    assert [ids(b) for b in it] == plan_batches(sizes, 0)[3:]
    again.sampler.set_epoch(1)
    assert [ids(b) for b in again] == plan_batches(sizes, 1)


def test_replaying_an_epoch(graphs):
    sizes = sizes_of(graphs)
    ld = gt.loader(graphs, **KW)
    list(itertools.islice(ld, 2))
    ld.set_epoch(0)  # the pass consumed batches: set_epoch(0) replays epoch 0 from its start
    assert [ids(b) for b in ld] == plan_batches(sizes, 0)


# ------------------------------------------------------------------------------------- ranks
class FakeDist:
    def __init__(self, world, rank):
        self.world, self.r = world, rank

    def get_world_size(self):
        return self.world

    def get_rank(self):
        return self.r


def test_ranks_are_read_when_iteration_starts(graphs, monkeypatch):
    sizes = sizes_of(graphs)
    # built before the "process group" (a fake without collectives: no consistency check)
    ld = gt.loader(graphs, verify_plan=False, **KW)
    assert ld.batch_sampler.num_replicas == 1
    shares = []
    for r in range(2):
        monkeypatch.setattr(_sampler, "_dist", lambda r=r: FakeDist(2, r))
        ld.set_epoch(0)
        assert len(ld) == len(
            gb.plan(sizes, "dynamic", batch_size=6, seed=3, world_size=2).rank_batches(r)
        )
        shares.append([i for b in ld for i in ids(b)])
    assert sorted(shares[0] + shares[1]) == list(range(len(graphs)))
    assert not set(shares[0]) & set(shares[1])
    assert ld.state_dict()["fingerprint"]["num_replicas"] == 2


def test_warns_when_explicit_world_differs_from_torch_distributed(graphs, monkeypatch):
    ld = gt.loader(graphs, num_replicas=1, rank=0, **KW)
    monkeypatch.setattr(_sampler, "_dist", lambda: FakeDist(4, 1))
    with pytest.warns(
        UserWarning, match="num_replicas = 1 but torch.distributed's world size is 4"
    ):
        next(iter(ld))
    monkeypatch.setattr(_sampler, "_dist", lambda: None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        next(iter(ld))


# ------------------------------------------------------------------------ pickling and args
def test_sizes_samplers_and_loaders_pickle_copy_and_deepcopy(graphs):
    sizes = sizes_of(graphs)
    ld = gt.loader(graphs, **KW)
    list(itertools.islice(ld, 2))
    for clone in (lambda x: pickle.loads(pickle.dumps(x)), copy.copy, copy.deepcopy):
        assert clone(sizes) == sizes
        s2 = clone(ld.batch_sampler)
        assert isinstance(s2, gt.PlanBatchSampler) and s2.state_dict() == ld.state_dict()
        ld2 = clone(ld)
        assert isinstance(ld2, gt.PlanLoader) and ld2.state_dict() == ld.state_dict()
    ld2 = pickle.loads(pickle.dumps(ld))
    expect = [ids(b) for b in ld]  # epoch 1: the pass of epoch 0 stopped early
    assert [ids(b) for b in ld2] == expect == plan_batches(sizes, 1)


def record_worker(worker_id):  # module level: spawn workers import it by name
    info = torch.utils.data.get_worker_info()
    assert info is not None and info.id == worker_id


def test_spawn_workers_and_dataloader_arguments(graphs):
    sizes = sizes_of(graphs)
    ld = gt.loader(
        graphs,
        dataloader_kwargs=dict(
            num_workers=1,
            multiprocessing_context="spawn",
            timeout=60,
            worker_init_fn=record_worker,
            persistent_workers=True,
            prefetch_factor=2,
        ),
        **KW,
    )
    assert ld.timeout == 60 and ld.worker_init_fn is record_worker and ld.num_workers == 1
    for epoch in range(2):
        assert [ids(b) for b in ld] == plan_batches(sizes, epoch)


def test_dataloader_arguments_the_plan_decides_are_refused(graphs):
    for key in ("sampler", "collate_fn", "drop_last", "batch_sampler"):
        with pytest.raises(TypeError, match=f"takes no {key}="):
            gt.loader(graphs, **KW, **{key: None})
        with pytest.raises(TypeError, match=f"dataloader_kwargs cannot hold '{key}'"):
            gt.loader(graphs, dataloader_kwargs={key: None}, **KW)
    for key in ("batch_size", "shuffle", "dataset"):
        with pytest.raises(TypeError, match=f"dataloader_kwargs cannot hold '{key}'"):
            gt.loader(graphs, dataloader_kwargs={key: 1}, **KW)
    with pytest.raises(TypeError, match="option"):
        gt.loader(graphs, not_an_option=3, **KW)
    with pytest.raises(ValueError, match="timeout=60 needs num_workers > 0"):
        gt.loader(graphs, dataloader_kwargs={"timeout": 60}, **KW)
    with pytest.raises(TypeError, match="dataloader_kwargs must be a dict"):
        gt.loader(graphs, dataloader_kwargs=[("num_workers", 1)], **KW)


@pytest.mark.parametrize("key", gt._loader.DATALOADER_ARGS)
def test_dataloader_arguments_as_keywords_name_dataloader_kwargs(graphs, key):
    """One line telling the caller where a DataLoader argument goes (it was a keyword before)."""
    with pytest.raises(TypeError, match=f"dataloader_kwargs={{'{key}': ...}} instead of {key}="):
        gt.loader(graphs, **KW, **{key: 1})


@pytest.mark.parametrize(
    "key", ["schema", "cutoff", "position_key", "as_dict", "spare_padding_node"]
)
def test_collation_fields_as_keywords_name_collation(graphs, key):
    with pytest.raises(TypeError, match=rf"Collation\({key}=\.\.\.\) instead of {key}="):
        gt.loader(graphs, **KW, **{key: None})


def test_collation_fields_given_win_over_the_preset(graphs):
    preset = gt.Preset("mine", cutoff=3.0, as_dict=True)
    ld = gt.loader(graphs, preset=preset, **KW)
    assert isinstance(next(iter(ld)), dict) and ld.collater.cutoff == 3.0
    mine = gt.loader(graphs, preset=preset, collation=gt.Collation(as_dict=False, cutoff=5.0), **KW)
    batch = next(iter(mine))
    assert not isinstance(batch, dict) and mine.collater.cutoff == 5.0
    assert ids(batch) == plan_batches(sizes_of(graphs), 0)[0]
    with pytest.raises(TypeError, match=r"collation must be a graphbatch\.torch\.Collation"):
        gt.loader(graphs, collation={"cutoff": 1.0}, **KW)


def test_lightning_style_reinstantiation_keeps_the_plan(graphs):
    """Lightning rebuilds a DataLoader from its attributes (e.g. for prediction)."""
    ld = gt.loader(graphs, dataloader_kwargs={"num_workers": 0}, **KW)
    attrs = {k: v for k, v in vars(ld).items() if not k.startswith("_")}
    clone = type(ld)(
        attrs["dataset"],
        batch_sampler=ld.batch_sampler,
        collate_fn=ld.collate_fn,
        sampler=None,
        shuffle=False,
        batch_size=1,
        drop_last=False,
        generator=attrs["generator"],
    )
    assert [ids(b) for b in clone] == plan_batches(sizes_of(graphs), 0)


# ------------------------------------------------------------------- resume fingerprint
@pytest.mark.parametrize(
    "change, field",
    [
        (dict(batch_size=12), "batch_size"),
        (dict(shuffle=False), "shuffle"),
        (dict(on_oversize="skip"), "on_oversize"),
        (dict(seed=4), "seed"),
        (dict(strategy="static-64"), "strategy"),
    ],
)
def test_resume_refuses_a_changed_plan_request(graphs, change, field):
    ld = gt.loader(graphs, **KW)
    list(itertools.islice(ld, 2))
    state = ld.state_dict()
    other = gt.loader(graphs, **dict(KW, **change))
    with pytest.raises(ValueError, match=f"saved with {field} = "):
        other.load_state_dict(state)


def test_resume_refuses_a_changed_budget_or_size_table(graphs):
    sizes = sizes_of(graphs)
    s = gt.PlanBatchSampler(sizes, "dynamic", budget=(80, 300, 8), seed=0)
    state = s.state_dict()
    with pytest.raises(ValueError, match="saved with budget = \\[80, 300, 8\\]"):
        gt.PlanBatchSampler(sizes, "dynamic", budget=(96, 300, 8), seed=0).load_state_dict(state)
    swapped = gb.GraphSizes(sizes.n_node[::-1], sizes.n_edge[::-1])  # same length, other table
    with pytest.raises(ValueError, match="saved with sizes_sha256"):
        gt.PlanBatchSampler(swapped, "dynamic", budget=(80, 300, 8), seed=0).load_state_dict(state)
    same = gt.PlanBatchSampler(
        gb.GraphSizes(sizes.n_node.copy(), sizes.n_edge.copy()),
        "dynamic",
        budget=(80, 300, 8),
        seed=0,
    )
    same.load_state_dict(state)  # an equal table and equal options resume


def test_state_of_a_finished_epoch_resumes_with_the_next(graphs):
    sizes = sizes_of(graphs)
    ld = gt.loader(graphs, **KW)
    n = len(ld)
    list(itertools.islice(ld, n))  # Lightning stops at len() without exhausting the iterator
    state = ld.state_dict()
    assert (state["epoch"], state["offset"]) == (0, n)
    again = gt.loader(graphs, **KW)
    again.load_state_dict(state)
    assert again.epoch == 1 and [ids(b) for b in again] == plan_batches(sizes, 1)
    assert np.array_equal(
        np.sort(np.concatenate([np.array(x) for x in plan_batches(sizes, 1)])),
        np.arange(len(graphs)),
    )


def test_lightning_reinstantiation_and_sampler_epoch_helpers(graphs):
    """Lightning's own helpers: its distributed-sampler check leaves the loader alone, its
    prediction re-instantiation keeps the plan, and its set_epoch helper reaches the plan."""
    pytest.importorskip("lightning")
    from lightning.fabric.utilities.data import _set_sampler_epoch
    from lightning.pytorch.trainer.states import RunningStage
    from lightning.pytorch.utilities.data import _update_dataloader

    sizes = sizes_of(graphs)
    ld = gt.loader(graphs, dataloader_kwargs={"worker_init_fn": record_worker}, **KW)
    assert isinstance(ld.sampler, DistributedSampler)  # `_requires_distributed_sampler` is False
    _set_sampler_epoch(ld, 2)
    assert [ids(b) for b in ld] == plan_batches(sizes, 2)
    with pytest.warns(Warning):
        again = _update_dataloader(ld, ld.sampler, mode=RunningStage.PREDICTING)
    assert isinstance(again, gt.PlanLoader) and again.worker_init_fn is record_worker
    again.set_epoch(1)
    assert [ids(b) for b in again] == plan_batches(sizes, 1)


# ------------------------------------------------------------- epoch rules, property-tested
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("take"), st.integers(1, 9)),
        st.tuples(st.just("set_epoch"), st.integers(0, 5)),
        st.tuples(st.just("resume"), st.just(0)),
    ),
    min_size=1,
    max_size=8,
)


@given(ops=_OPS)
def test_epoch_rules_hold_for_any_sequence(ops):
    """Each pass yields a contiguous run of one epoch's plan: after set_epoch(e) (with a pass
    consumed before it) the next pass starts epoch e at batch 0; otherwise a consumed pass is
    followed by the next epoch from batch 0; a resumed sampler continues right after the last
    consumed batch (or with the next epoch when that one was the epoch's last)."""
    sizes = gb.GraphSizes(np.arange(2, 26) % 7 + 1, np.arange(24) % 5)
    make = lambda: gt.PlanBatchSampler(sizes, "dynamic", batch_size=4, seed=1)  # noqa: E731
    plans = {}

    def batches(epoch):
        if epoch not in plans:
            plans[epoch] = [
                b.tolist()
                for b in gb.plan(sizes, "dynamic", batch_size=4, seed=1, epoch=epoch).batches()
            ]
        return plans[epoch]

    s = make()
    expect, armed, stopped = (0, 0), True, None  # next pass; set explicitly?; early stop point
    for op, arg in ops:
        if op == "set_epoch":
            s.set_epoch(arg)
            if not (armed and arg == expect[0]):  # a no-op keeps a loaded resume point
                expect, armed = (arg, 0), True
        elif op == "resume":
            state = s.state_dict()
            s = make()
            s.load_state_dict(state)
            if not armed:  # resuming an early-stopped pass continues it
                expect, armed = stopped, True
        else:
            got = list(itertools.islice(s, arg))
            epoch, start = expect
            plan = batches(epoch)
            assert [list(b) for b in got] == plan[start : start + arg]
            assert all(b.epoch == epoch for b in got)
            end = start + len(got)
            expect, armed, stopped = (epoch + 1, 0), end == len(plan), (epoch, end)
            state = s.state_dict()
            if end < len(plan):
                assert (state["epoch"], state["offset"]) == (epoch, end)
            else:  # the epoch's last batch was consumed: its state resumes with the next epoch
                assert (state["epoch"], state["offset"]) in ((epoch, end), (epoch + 1, 0))
                stopped = (epoch + 1, 0)
