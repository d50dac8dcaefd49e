"""Compile once: torch.compile(dynamic=False) over a padded epoch recompiles once per shape."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")

import graphbatch as gb  # noqa: E402
import graphbatch.torch as gt  # noqa: E402

from .._torch_graphs import molecules  # noqa: E402


class TinyMPNN(torch.nn.Module):
    """Embedding, one distance-weighted message-passing step, masked per-graph sum readout."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(16, 8)
        self.lin = torch.nn.Linear(8, 8)
        self.out = torch.nn.Linear(8, 1)

    def forward(self, z, pos, edge_index, batch, node_mask, edge_mask, graph_mask):
        h = self.emb(z)
        src, dst = edge_index[0], edge_index[1]
        d = (pos[src] - pos[dst]).pow(2).sum(-1, keepdim=True)
        msg = torch.where(edge_mask[:, None], self.lin(h[src]) * torch.exp(-d), 0.0)
        h = h + torch.zeros_like(h).index_add(0, dst, msg)
        h = torch.where(node_mask[:, None], h, 0.0)
        g = torch.zeros(graph_mask.shape[0], 8, dtype=h.dtype).index_add(0, batch, h)
        return self.out(g).squeeze(-1)


def run_epoch(strategy: str, graphs, **kw) -> tuple[int, gb.BatchPlan]:
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    counter = CompileCounter()
    model = TinyMPNN()
    step = torch.compile(model, backend=counter, dynamic=False)
    ld = gt.loader(graphs, strategy=strategy, seed=0, **kw)
    with torch._dynamo.config.patch(recompile_limit=64):
        for b in ld:
            pred = step(b.z, b.pos, b.edge_index, b.batch, b.node_mask, b.edge_mask, b.graph_mask)
            loss = gt.masked_mean((pred - b.y[:, 0]) ** 2, b.graph_mask)
            loss.backward()
    return counter.frame_count, ld.sampler.plan_for_epoch(0)


@pytest.fixture(scope="module")
def graphs():
    return molecules(48, seed=21, max_nodes=10)


def test_dynamic_plan_compiles_once(graphs):
    count, plan = run_epoch("dynamic", graphs, batch_size=8)
    assert len(plan) > 3 and plan.stats().distinct_shapes == 1
    assert count == 1


def test_static_64_compiles_once_per_distinct_shape(graphs):
    count, plan = run_epoch("static-64", graphs, batch_size=8, multiple=16)
    distinct = {plan.shape(b) for b in range(len(plan))}
    assert len(distinct) > 1
    assert count == len(distinct)
