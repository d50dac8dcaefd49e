"""Ranks verify their plan before they train (issue 26, part 3): with ``torch.distributed``
initialised, `gt.loader` / `PlanLoader` (map-style and store paths, with and without workers,
through `gt.prefetch`) and a bare `PlanBatchSampler` all-gather a digest of each epoch's plan at
the start of every pass -- one small collective per pass -- and raise `PlanMismatchError` on
every rank, naming the ranks, when a rank has another size table, seed, epoch or resume
position; matching ranks train on their share, every graph once per epoch. Two CPU processes
(gloo), one process group for every case (a mismatch raises on every rank, so the group stays
usable)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

import graphbatch as gb  # noqa: E402
import graphbatch.torch as gt  # noqa: E402

from .._torch_graphs import molecules, sizes_of  # noqa: E402

pytestmark = pytest.mark.slow

N = 30
KW = dict(strategy="dynamic", batch_size=5, seed=3)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ids(batch) -> list[int]:
    return batch.graph_index[batch.graph_mask].tolist()


def _bumped(sizes: gb.GraphSizes) -> gb.GraphSizes:
    e = sizes.n_edge.copy()
    e[4] += 2  # another size table of the same length (a stale store copy)
    return gb.GraphSizes(sizes.n_node, e)


def _cases(rank: int, graphs, store_path: str | None):
    """case -> a function running it on this rank, returning what it trained on."""
    sizes = sizes_of(graphs)

    def epochs(ld, n=2, wrap=lambda x: x):
        return [[_ids(b) for b in wrap(ld)] for _ in range(n)]

    def store_loader(**kw):
        from graphbatch.datasets import GraphStore

        return gt.loader(GraphStore(store_path), **dict(KW, **kw))

    def resumed():
        ld = gt.loader(graphs, **KW)
        state = ld.state_dict()
        ld.load_state_dict(dict(state, offset=1 + rank))
        return epochs(ld, 1)

    def set_after_iter():
        ld = gt.loader(graphs, **KW)
        it = iter(ld)
        ld.sampler.set_epoch(1)  # as Lightning does when it resumes at an epoch boundary
        return [[_ids(b) for b in it]]

    def bare_sampler():
        s = gt.PlanBatchSampler(sizes, "dynamic", batch_size=5, seed=3)
        dl = DataLoader(list(range(N)), batch_sampler=s, collate_fn=list)
        return [list(dl) for _ in range(2)]

    def one_rank_only():
        if rank != 0:
            return []
        ld = gt.loader(graphs, num_replicas=1, rank=0, **KW)  # no collective: must not hang
        return epochs(ld, 1)

    return {
        "same": lambda: epochs(gt.loader(graphs, **KW)),
        # forked workers: in a process started by spawn, workers would be spawned as well
        # (re-importing torch and PyG, seconds each)
        "workers": lambda: epochs(
            gt.loader(
                graphs,
                dataloader_kwargs=dict(num_workers=2, multiprocessing_context="fork"),
                **KW,
            )
        ),
        "prefetch": lambda: epochs(gt.loader(graphs, **KW), wrap=gt.prefetch),
        "store": (
            lambda: (
                epochs(
                    store_loader(
                        dataloader_kwargs=dict(num_workers=1, multiprocessing_context="fork")
                    )
                )
                if store_path
                else None
            )
        ),
        "bare-sampler": bare_sampler,
        "set-after-iter": set_after_iter,
        "one-rank-only": one_rank_only,
        "seed": lambda: epochs(gt.loader(graphs, **dict(KW, seed=3 + rank))),
        "sizes": lambda: epochs(gt.loader(graphs, sizes=_bumped(sizes) if rank else sizes, **KW)),
        "store-sizes": (lambda: epochs(store_loader(seed=3 if rank == 0 else 4), 1))
        if store_path
        else (lambda: None),
        "epoch": lambda: epochs(_at_epoch(gt.loader(graphs, **KW), rank), 1),
        "resume": resumed,
        "off": lambda: epochs(gt.loader(graphs, verify_plan=False, **dict(KW, seed=3 + rank))),
    }


def _at_epoch(ld, epoch):
    ld.set_epoch(epoch)
    return ld


def _worker(rank, port, out_dir, store_path):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    torch.set_num_threads(1)
    gathers = [0]
    real = dist.all_gather

    def counted(*a, **k):
        gathers[0] += 1
        return real(*a, **k)

    dist.all_gather = counted
    graphs = molecules(N, seed=5, max_nodes=8)
    for case, run in _cases(rank, graphs, store_path).items():
        gathers[0] = 0
        try:
            result = {"epochs": run()}
        except gt.PlanMismatchError as exc:
            result = {"error": str(exc)}
        result["gathers"] = gathers[0]
        Path(out_dir, f"{case}{rank}.json").write_text(json.dumps(result))
        dist.barrier()
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan-verify")
    store_path = None
    try:
        import h5py  # noqa: F401
    except ImportError:
        pass
    else:
        from graphbatch.datasets import synthetic_graphs, synthetic_sizes, write_store

        g = synthetic_graphs(
            synthetic_sizes(N, "normal", rng=0, mean_nodes=7, spread=0.2),
            rng=1,
            node_dim=3,
            n_targets=1,
        )
        store_path = str(write_store(out / "g.h5", [g], name="t"))
    mp.start_processes(
        _worker,
        args=(_free_port(), str(out), store_path),
        nprocs=2,
        join=True,
        start_method="spawn",
    )
    return out


def _results(out: Path, case: str) -> list[dict]:
    return [json.loads((out / f"{case}{r}.json").read_text()) for r in range(2)]


def _plan(epoch: int, seed: int = 3, sizes=None):
    sizes = sizes or sizes_of(molecules(N, seed=5, max_nodes=8))
    p = gb.plan(sizes, "dynamic", batch_size=5, seed=seed, epoch=epoch, world_size=2)
    return [[p.batch(b).tolist() for b in p.rank_batches(r)] for r in range(2)]


@pytest.mark.parametrize(
    "case, passes",
    [("same", 2), ("workers", 2), ("prefetch", 2), ("store", 2), ("bare-sampler", 2)],
)
def test_matching_ranks_train_normally_one_gather_per_pass(run, case, passes):
    res = _results(run, case)
    if res[0]["epochs"] is None:
        pytest.skip("the store case needs h5py")
    sizes = None
    if case == "store":
        from graphbatch.datasets import GraphStore

        sizes = GraphStore(run / "g.h5").graph_sizes()
    for r in range(2):
        assert "error" not in res[r], res[r]
        assert res[r]["epochs"] == [_plan(e, sizes=sizes)[r] for e in range(passes)]
        assert res[r]["gathers"] == passes  # one small collective per pass, no more
    for e in range(passes):  # every graph once per epoch across ranks
        seen = sorted(i for r in range(2) for b in res[r]["epochs"][e] for i in b)
        assert seen == list(range(N))


def test_set_epoch_after_iter_verifies_and_serves_the_epoch_set(run):
    res = _results(run, "set-after-iter")
    for r in range(2):
        assert res[r]["epochs"] == [_plan(1)[r]]
        assert res[r]["gathers"] == 2  # the superseded pass of epoch 0, then epoch 1


def test_a_loader_of_one_rank_does_not_take_part(run):
    res = _results(run, "one-rank-only")
    assert res[0]["gathers"] == 0 and res[1]["epochs"] == []
    assert len(res[0]["epochs"][0]) > 0


@pytest.mark.parametrize(
    "case, parts",
    [
        ("seed", ["plan request differs (rank 0: ", "; rank 1: ", "plan differs (rank 0: "]),
        ("sizes", ["size table differs (rank 0: ", "; rank 1: ", "plan differs"]),
        ("store-sizes", ["plan request differs (rank 0: ", "; rank 1: "]),
        ("epoch", ["epoch differs (rank 0: 0; rank 1: 1)"]),
        ("resume", ["the pass starts at different batches (rank 0: 1; rank 1: 2)"]),
    ],
)
def test_disagreeing_ranks_both_raise_naming_them(run, case, parts):
    res = _results(run, case)
    if "epochs" in res[0] and res[0]["epochs"] is None:
        pytest.skip("the store case needs h5py")
    assert ["error" in r for r in res] == [True, True], res
    assert res[0]["error"] == res[1]["error"]  # the same message on every rank
    msg = res[0]["error"]
    assert msg.startswith("graphbatch plan consistency check failed across 2 ranks")
    for part in parts:
        assert part in msg
    assert all(r["gathers"] == 1 for r in res)  # it failed at the first pass


def test_verify_plan_false_trains_on_divergent_plans(run):
    res = _results(run, "off")
    assert all("error" not in r and r["gathers"] == 0 for r in res)
    assert res[1]["epochs"][0] == _plan(0, seed=4)[1]
