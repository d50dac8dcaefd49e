"""Distributed data parallel on CPU: 2 processes (gloo) training a tiny model on a plan.

Checks that ranks see equal shapes each step and the same number of steps, that every graph is
used once per epoch across ranks, and that DDP gradients equal the gradient of the global mean
loss (masked_mean normalising by the global number of real graphs), recomputed in one process.
"""

from __future__ import annotations

import socket

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import graphbatch as gb  # noqa: E402
import graphbatch.torch as gt  # noqa: E402

from .._torch_graphs import molecules, sizes_of  # noqa: E402

WORLD = 2
EPOCHS = 2
KW = dict(batch_size=6, seed=7)


def round_robin_plan(sizes, strategy, *, world_size, epoch=0, **kw):
    """A distributed plan built independently of the core's distributed planner: the
    single-process plan's batches dealt to ranks step by step (step-major), the last step
    completed with an all-padding batch of the same shape when the count is odd."""
    p = gb.plan(sizes, strategy, epoch=epoch, **kw)
    nb = len(p)
    extra = (-nb) % world_size
    offsets = np.concatenate([p.offsets, np.full(extra, p.offsets[-1])])
    pick = np.concatenate([np.arange(nb), np.full(extra, nb - 1)])
    b = np.arange(nb + extra)
    zero = np.zeros(extra, dtype=np.int64)
    return gb.BatchPlan(
        p.order,
        offsets,
        p.pad_nodes[pick],
        p.pad_edges[pick],
        p.pad_graphs[pick],
        real_nodes=np.concatenate([p.real_nodes, zero]),
        real_edges=np.concatenate([p.real_edges, zero]),
        rank=b % world_size,
        step=b // world_size,
        meta=dict(p.meta, world_size=world_size),
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


MODES = ("planner", "round-robin")


def _worker(rank, port, graphs, out_dir):
    from graphbatch import _schedule

    from .test_torch_compile import TinyMPNN

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD
    )
    torch.set_num_threads(1)
    for mode in MODES:
        _schedule.plan_epoch = round_robin_plan if mode == "round-robin" else gb.plan
        model = torch.nn.parallel.DistributedDataParallel(TinyMPNN())  # rank 0's params
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        ld = gt.loader(graphs, strategy="dynamic", **KW)
        record = {"len": [], "shapes": [], "index": [], "params": [], "grads": []}
        for _ in range(EPOCHS):
            record["len"].append(len(ld))
            for b in ld:
                record["shapes"].append((b.z.shape[0], b.edge_index.shape[1], b.num_graphs))
                record["index"].append(b.graph_index.tolist())
                record["params"].append(
                    {k: v.detach().clone() for k, v in model.module.state_dict().items()}
                )
                pred = model(
                    b.z, b.pos, b.edge_index, b.batch, b.node_mask, b.edge_mask, b.graph_mask
                )
                loss = gt.masked_mean((pred - b.y[:, 0]) ** 2, b.graph_mask)
                opt.zero_grad()
                loss.backward()
                record["grads"].append([p.grad.detach().clone() for p in model.parameters()])
                opt.step()
        torch.save(record, f"{out_dir}/rank{rank}_{mode}.pt")
    dist.barrier()
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    """Spawn the 2 ranks once (spawn, not fork: other tests may have started JAX threads)."""
    if not dist.is_available():
        pytest.skip("torch.distributed unavailable")
    out = tmp_path_factory.mktemp("ddp")
    graphs = molecules(41, seed=5, max_nodes=9)
    mp.start_processes(
        _worker,
        args=(_free_port(), graphs, str(out)),
        nprocs=WORLD,
        join=True,
        start_method="spawn",
    )
    return out, graphs


@pytest.mark.parametrize("mode", MODES)
def test_ddp_two_ranks(ddp_run, mode):
    out, graphs = ddp_run
    rec = [torch.load(out / f"rank{r}_{mode}.pt") for r in range(WORLD)]
    # same number of steps, equal shapes at every step
    assert rec[0]["len"] == rec[1]["len"]
    assert len(rec[0]["shapes"]) == len(rec[1]["shapes"]) == sum(rec[0]["len"])
    assert rec[0]["shapes"] == rec[1]["shapes"]
    if mode == "round-robin":  # 9 batches per epoch: rank 1 gets an all-padding last step
        assert all(i == -1 for i in rec[1]["index"][rec[0]["len"][0] - 1])
    # every graph exactly once per epoch across ranks
    start = 0
    for n_steps in rec[0]["len"]:
        seen = [
            i
            for r in range(WORLD)
            for step in rec[r]["index"][start : start + n_steps]
            for i in step
            if i >= 0
        ]
        assert sorted(seen) == list(range(len(graphs)))
        start += n_steps
    # synchronised gradients, equal to the single-process gradient of the global mean loss
    from .test_torch_compile import TinyMPNN

    ref = TinyMPNN()
    schema = gt.infer_schema(graphs)
    for step in range(len(rec[0]["grads"])):
        for g0, g1 in zip(rec[0]["grads"][step], rec[1]["grads"][step], strict=True):
            torch.testing.assert_close(g0, g1)
        ref.load_state_dict(rec[0]["params"][step])
        ref.zero_grad()
        total, count = 0.0, 0
        for r in range(WORLD):
            idx = [i for i in rec[r]["index"][step] if i >= 0]
            if not idx:
                continue
            b = gt.collate([graphs[i] for i in idx], rec[r]["shapes"][step], schema=schema)
            pred = ref(b.z, b.pos, b.edge_index, b.batch, b.node_mask, b.edge_mask, b.graph_mask)
            total = total + ((pred - b.y[:, 0]) ** 2)[: len(idx)].sum()
            count += len(idx)
        (total / count).backward()
        for g_ddp, p in zip(rec[0]["grads"][step], ref.parameters(), strict=True):
            torch.testing.assert_close(g_ddp, p.grad, rtol=1e-5, atol=1e-6)


def test_round_robin_reference_plan_is_valid():
    sizes = sizes_of(molecules(41, seed=5, max_nodes=9))
    p = round_robin_plan(sizes, "dynamic", world_size=WORLD, **KW)
    p.validate(sizes)
    assert np.bincount(p.rank).tolist() == [len(p) // 2] * 2
    assert (p.graphs_per_batch == 0).sum() == 1  # the DDP test covers an all-padding batch
