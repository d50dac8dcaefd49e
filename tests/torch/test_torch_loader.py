"""PlanBatchSampler, loader and masked_mean: protocol, exact len, epochs, resume, workers."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")

from torch.utils.data import DataLoader  # noqa: E402

import graphbatch as gb  # noqa: E402
import graphbatch.torch as gt  # noqa: E402
from graphbatch import _schedule  # noqa: E402
from graphbatch._padlayout import short_padding_batches  # noqa: E402

from .._torch_graphs import molecules, sizes_of  # noqa: E402


@pytest.fixture(scope="module")
def graphs():
    return molecules(90, seed=11)


def test_sampler_yields_plan_batches_with_exact_len(graphs):
    sizes = sizes_of(graphs)
    s = gt.PlanBatchSampler(sizes, "dynamic", batch_size=8, seed=4)
    p = gb.plan(sizes, "dynamic", batch_size=8, seed=4, epoch=0)
    n = len(s)
    got = list(s)
    assert n == len(p) == len(got)
    for b, (item, idx) in enumerate(zip(got, p.batches(), strict=True)):
        assert list(item) == idx.tolist() and item.shape == p.shape(b)
        assert isinstance(item, list)
    assert s.epoch == 1  # a complete pass moves to the next epoch
    s.set_epoch(3)
    p3 = gb.plan(sizes, "dynamic", batch_size=8, seed=4, epoch=3)
    assert len(s) == len(p3)
    assert [list(x) for x in s] == [i.tolist() for i in p3.batches()]


def test_planned_batch_pickles():
    pb = gt.PlannedBatch([4, 2, 9], (64, 128, 8), epoch=2, batch=5)
    back = pickle.loads(pickle.dumps(pb))
    assert back == [4, 2, 9] and back.shape == (64, 128, 8) and back.epoch == 2 and back.batch == 5


def test_sampler_works_in_plain_dataloader(graphs):
    sizes = sizes_of(graphs)
    s = gt.PlanBatchSampler(sizes, "static-64", batch_size=6, seed=0)
    schema = gt.infer_schema(graphs)
    dl = DataLoader(
        graphs, batch_sampler=s, collate_fn=lambda gs: gt.collate(gs, (256, 1024, 6), schema=schema)
    )
    seen = sum(int(b.graph_mask.sum()) for b in dl)
    assert seen == len(graphs) and len(dl) == len(s)


def test_sampler_resume_mid_epoch(graphs):
    sizes = sizes_of(graphs)
    s = gt.PlanBatchSampler(sizes, "dynamic", batch_size=8, seed=1)
    s.set_epoch(2)
    full = [list(b) for b in s]
    s.set_epoch(2)
    it = iter(s)
    for _ in range(4):
        next(it)
    state = s.state_dict()
    assert state["epoch"] == 2 and state["offset"] == 4
    fresh = gt.PlanBatchSampler(sizes, "dynamic", batch_size=8, seed=1)
    fresh.load_state_dict(state)
    assert len(fresh) == len(full)  # len is the epoch's; the pass yields the remaining ones
    assert [list(b) for b in fresh] == full[4:]
    assert fresh.epoch == 3  # the resumed epoch ended: the next pass is epoch 3
    with pytest.raises(ValueError, match="seed"):
        gt.PlanBatchSampler(sizes, "dynamic", batch_size=8, seed=9).load_state_dict(state)


def test_sampler_rank_selection_from_distributed_plan(graphs, monkeypatch):
    """Batches stored step-major with rank/step arrays: each rank gets its own, in step order."""
    sizes = sizes_of(graphs)
    base = gb.plan(sizes, "dynamic", batch_size=8, seed=0)
    nb = len(base) - len(base) % 2
    keep = np.arange(nb)
    order = np.concatenate([base.batch(b) for b in keep])
    offsets = np.concatenate([[0], np.cumsum([base.batch(b).shape[0] for b in keep])])

    def fake_plan(sizes, strategy, *, world_size=1, **kw):
        assert world_size == 2
        return gb.BatchPlan(
            order,
            offsets,
            base.pad_nodes[keep],
            base.pad_edges[keep],
            base.pad_graphs[keep],
            real_nodes=base.real_nodes[keep],
            real_edges=base.real_edges[keep],
            rank=keep % 2,
            step=keep // 2,
            meta={"world_size": 2},
        )

    monkeypatch.setattr(_schedule, "plan_epoch", fake_plan)
    per_rank = [
        list(gt.PlanBatchSampler(sizes, "dynamic", batch_size=8, num_replicas=2, rank=r))
        for r in range(2)
    ]
    assert len(per_rank[0]) == len(per_rank[1]) == nb // 2
    for r in range(2):
        assert [list(b) for b in per_rank[r]] == [base.batch(b).tolist() for b in keep[r::2]]
    with pytest.raises(ValueError, match="rank = 2"):
        gt.PlanBatchSampler(sizes, "dynamic", batch_size=8, num_replicas=2, rank=2)


def test_loader_shapes_epochs_and_every_graph_once(graphs):
    ld = gt.loader(
        graphs,
        strategy="static-pow2",
        batch_size=8,
        seed=5,
        collation=gt.Collation(spare_padding_node=False),
    )
    sizes = sizes_of(graphs)
    for epoch in range(2):
        p = gb.plan(sizes, "static-pow2", batch_size=8, seed=5, epoch=epoch)
        assert len(ld) == len(p)
        seen = []
        for b, batch in enumerate(ld):
            n_node, n_edge, n_graph = p.shape(b)
            assert batch.z.shape[0] == n_node and batch.edge_index.shape[1] == n_edge
            assert batch.num_graphs == n_graph
            gi = batch.graph_index[batch.graph_mask].tolist()
            assert gi == p.batch(b).tolist()
            seen += gi
        assert sorted(seen) == list(range(len(graphs)))
    assert ld.epoch == 2


def test_loader_replans_in_persistent_workers(graphs):
    ld = gt.loader(
        graphs,
        strategy="dynamic",
        batch_size=8,
        seed=2,
        dataloader_kwargs=dict(num_workers=2, persistent_workers=True, prefetch_factor=2),
    )
    sizes = sizes_of(graphs)
    for epoch in range(2):
        p = gb.plan(sizes, "dynamic", batch_size=8, seed=2, epoch=epoch)
        got = [b.graph_index[b.graph_mask].tolist() for b in ld]
        assert got == [i.tolist() for i in p.batches()]


def test_loader_resume_with_workers_is_exact(graphs):
    kw = dict(strategy="dynamic", batch_size=8, seed=3, dataloader_kwargs={"num_workers": 2})
    ld = gt.loader(graphs, **kw)
    ld.set_epoch(1)
    full = [b.graph_index.tolist() for b in ld]
    ld.set_epoch(1)
    it = iter(ld)
    first = [next(it).graph_index.tolist() for _ in range(3)]
    state = ld.state_dict()
    del it
    assert first == full[:3] and state["offset"] == 3 and state["epoch"] == 1
    again = gt.loader(graphs, **kw)
    again.load_state_dict(state)
    assert len(again) == len(full)
    assert [b.graph_index.tolist() for b in again] == full[3:]
    assert again.epoch == 2


def test_read_sizes_prefers_graph_sizes_method(graphs):
    class Store:
        def __init__(self, items):
            self.items = items
            self.reads = 0

        def __len__(self):
            return len(self.items)

        def __getitem__(self, i):
            self.reads += 1
            return self.items[i]

        def graph_sizes(self):
            return sizes_of(self.items)

    store = Store(graphs)
    assert gt.read_sizes(store) == sizes_of(graphs) and store.reads == 0
    store2 = Store(graphs)
    store2.graph_sizes = None
    assert gt.read_sizes(store2) == sizes_of(graphs) and store2.reads == len(graphs)


def test_read_sizes_of_dict_graphs():
    g = [
        {"x": torch.zeros(n, 2), "edge_index": torch.zeros(2, e, dtype=torch.long)}
        for n, e in ((3, 1), (5, 0))
    ]
    assert gt.read_sizes(g) == gb.GraphSizes([3, 5], [1, 0])
    ld = gt.loader(
        g, strategy="static-64", batch_size=3, shuffle=False, collation=gt.Collation(as_dict=True)
    )
    (b,) = list(ld)
    assert b["x"].shape == (64, 2) and b["graph_index"].tolist() == [0, 1, -1]


def test_loader_warns_when_cutoff_cannot_hold(graphs):
    sizes = sizes_of(graphs)
    p = gb.plan(sizes, "dynamic", budget=(40, 400, 8), seed=0)
    short = short_padding_batches(p)
    assert short.shape[0] > 0  # this seeded data set has such batches under this budget
    with pytest.warns(UserWarning, match=f"{short.shape[0]} of {len(p)} batches"):
        ld = gt.loader(
            graphs,
            strategy="dynamic",
            budget=(40, 400, 8),
            collation=gt.Collation(cutoff=1.0, spare_padding_node=False),
        )
    for b, batch in enumerate(ld):
        e_real = int(batch.edge_mask.sum())
        pad = batch.edge_index[:, e_real:]
        if b in set(short.tolist()):
            assert (pad == int(batch.node_mask.sum())).all()  # self-loops of the one padding node
            continue
        e_real = int(batch.edge_mask.sum())
        pad = batch.edge_index[:, e_real:]
        assert ((batch.pos[pad[0]] - batch.pos[pad[1]]).norm(dim=1) > 1.0).all()


def test_loader_sizes_mismatch(graphs):
    with pytest.raises(ValueError, match="entries for a dataset"):
        gt.loader(graphs, strategy="dynamic", batch_size=8, sizes=sizes_of(graphs[:5]))


# --------------------------------------------------------------- masked_mean
def test_masked_mean_single_process():
    v = torch.tensor([1.0, 2.0, 4.0, float("nan")], requires_grad=True)
    m = torch.tensor([True, True, True, False])
    out = gt.masked_mean(v, m)
    assert out.item() == pytest.approx(7.0 / 3.0)
    out.backward()
    assert v.grad.tolist()[:3] == pytest.approx([1 / 3] * 3) and v.grad[3] == 0
    v2 = torch.arange(8.0).reshape(4, 2)
    assert gt.masked_mean(v2, m).item() == pytest.approx((0.5 + 2.5 + 4.5) / 3)
    zero = gt.masked_mean(torch.ones(3, requires_grad=True), torch.zeros(3, dtype=torch.bool))
    assert zero.item() == 0.0 and zero.requires_grad
    with pytest.raises(TypeError, match="bool"):
        gt.masked_mean(v, m.long())


@pytest.mark.parametrize("strategy", ["dynamic", "static-64"])
def test_sampler_ranks_of_a_real_distributed_plan(graphs, strategy):
    sizes = sizes_of(graphs)
    per_rank = [
        list(gt.PlanBatchSampler(sizes, strategy, batch_size=6, seed=3, num_replicas=3, rank=r))
        for r in range(3)
    ]
    assert len({len(x) for x in per_rank}) == 1
    for step in zip(*per_rank, strict=True):
        assert len({b.shape for b in step}) == 1  # one padded shape per step
    seen = sorted(i for x in per_rank for b in x for i in b)
    assert seen == list(range(len(graphs)))
