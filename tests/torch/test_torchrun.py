"""`examples/train_ddp.py` launched with torchrun as two node agents on this machine (gloo, CPU):
a rank SIGKILLed mid-epoch and a rank that stalls both turn into restarts from the last
checkpoint, and the committed history trains every graph exactly once per epoch, on the plan's
batches, with the loss curve of an uninterrupted run recomputed here in one process.
Plus the plan-consistency check (digests; a mismatch raises on every rank)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")
pytest.importorskip("h5py")

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import graphbatch as gb  # noqa: E402
import graphbatch.torch as gt  # noqa: E402
from graphbatch.torch._consistency import (  # noqa: E402
    consistency_digests,
    plan_digest,
    sizes_digest,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "train_ddp.py"
N_GRAPHS = 96
SEED, BATCH, EVERY, EPOCHS, LR = 0, 8, 3, 2, 1e-3
MODEL = dict(hidden=8, interactions=1, gaussians=8)
TRAIN_ARGS = [
    "--batch-size",
    str(BATCH),
    "--seed",
    str(SEED),
    "--checkpoint-every",
    str(EVERY),
    "--epochs",
    str(EPOCHS),
    "--lr",
    str(LR),
    "--hidden",
    str(MODEL["hidden"]),
    "--interactions",
    str(MODEL["interactions"]),
    "--gaussians",
    str(MODEL["gaussians"]),
    "--threads",
    "1",
]
LAUNCH_TIMEOUT = 240  # seconds for a whole torchrun job; the test fails (never hangs) past it


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """A QM9 store of the first 96 molecules, built with the CLI as users build it."""
    if importlib.util.find_spec("qm9pack") is None:
        pytest.skip("qm9pack not installed (pip install --no-deps qm9pack==1.0.3)")
    path = tmp_path_factory.mktemp("store") / "qm9.h5"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "graphbatch.cli",
            "data",
            "build",
            "qm9",
            "--limit",
            str(N_GRAPHS),
            "--no-progress",
            "--out",
            str(path),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return path


def torchrun_nodes(
    nodes: int, nproc: int, store: Path, out: Path, extra: list[str], tmp: Path
) -> list[tuple[int, str]]:
    """Run ``nodes`` torchrun agents (c10d rendezvous on one free local port) of ``nproc``
    workers each; returns (exit status, output) per agent. Kills them past LAUNCH_TIMEOUT."""
    port = _free_port()
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        # torch's shared rendezvous store leaks keys across restarts of multi-node jobs
        # (pytorch/pytorch#135712): docs/distributed.md
        TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1",
    )
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(nodes),
        "--nproc-per-node",
        str(nproc),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--rdzv-id",
        "test",
        "--max-restarts",
        "3",
        "--monitor-interval",
        "0.2",
        str(EXAMPLE),
        "--store",
        str(store),
        "--out",
        str(out),
        *TRAIN_ARGS,
        *extra,
    ]
    logs = [tmp / f"agent{i}.log" for i in range(nodes)]
    procs = []
    for log in logs:
        with open(log, "wb") as fh:
            procs.append(
                subprocess.Popen(
                    cmd,
                    env=env,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    cwd=ROOT,
                )
            )
    deadline = time.monotonic() + LAUNCH_TIMEOUT
    try:
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        for p in procs:  # each agent leads its own session: end it and its workers
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        tails = "\n".join(log.read_text()[-2000:] for log in logs)
        pytest.fail(f"torchrun job did not finish within {LAUNCH_TIMEOUT} s:\n{tails}")
    return [(p.returncode, log.read_text()) for p, log in zip(procs, logs, strict=True)]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plan_of(sizes: gb.GraphSizes, epoch: int, world: int) -> gb.BatchPlan:
    return gb.plan(sizes, "dynamic", batch_size=BATCH, seed=SEED, epoch=epoch, world_size=world)


def reference_losses(store: Path, world: int) -> list[float]:
    """The loss curve of an uninterrupted run, in one process without DDP: at each step the
    ranks' batches are summed into one loss over the global number of real graphs."""
    from graphbatch.datasets import QM9_TARGETS, GraphStore
    from graphbatch.models import SchNet, batch_inputs

    st = GraphStore(store)
    ds = gt.GraphStoreDataset(st)
    col = [t[0] for t in QM9_TARGETS].index("U0")
    y = np.asarray(st.graph_field("y"), dtype=np.float64)[:, col]
    atoms = st.graph_sizes().n_node.astype(np.float64)
    res = y - (y / atoms).mean() * atoms
    targets = torch.from_numpy(((res - res.mean()) / res.std()).astype(np.float32))
    loaders = [
        gt.loader(ds, strategy="dynamic", batch_size=BATCH, seed=SEED, num_replicas=world, rank=r)
        for r in range(world)
    ]
    torch.manual_seed(SEED)
    model = SchNet(
        hidden=MODEL["hidden"],
        filters=MODEL["hidden"],
        num_interactions=MODEL["interactions"],
        num_gaussians=MODEL["gaussians"],
    )
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    losses = []
    for epoch in range(EPOCHS):
        for ld in loaders:
            ld.set_epoch(epoch)
        for batches in zip(*loaders, strict=True):
            total, count = 0.0, 0
            for b in batches:
                err = (model(**batch_inputs(b)) - targets[b.graph_index.clamp(min=0)]) ** 2
                total = total + err[b.graph_mask].sum()
                count += int(b.graph_mask.sum())
            loss = total / count
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
    return losses


@pytest.mark.slow
def test_torchrun_two_nodes_sigkill_and_stall_resume_exactly_once(store, tmp_path):
    world = 2  # two node agents x one worker: the smallest multi-node job
    from graphbatch.datasets import GraphStore

    sizes = GraphStore(store).graph_sizes()
    plans = [plan_of(sizes, e, world) for e in range(EPOCHS)]
    steps = [len(p.rank_batches(0)) for p in plans]  # steps per epoch (plans change per epoch)
    first = np.concatenate([[0], np.cumsum(steps)])  # global step before each epoch
    total = int(first[-1])
    assert steps[0] >= 5 and steps[1] >= 3  # the faults below fall mid-epoch
    out = tmp_path / "run"
    # rank 1 SIGKILLs itself after step 4 of epoch 0 (checkpoint at 3: step 4 is rolled back);
    # rank 0 stalls after step 2 of epoch 1 (the watchdog ends it; the third attempt resumes
    # from the last checkpoint before it: end of epoch 0 or a multiple of 3)
    results = torchrun_nodes(
        2,
        1,
        store,
        out,
        [
            "--fault",
            "kill:1:0:4",
            "--fault",
            "stall:0:1:2",
            "--step-timeout",
            "5",
            "--timeout",
            "20",
        ],
        tmp_path,
    )
    logs = "\n".join(text for _, text in results)
    assert [rc for rc, _ in results] == [0, 0], logs[-4000:]
    assert "injected fault kill" in logs and "injected fault stall" in logs
    assert "no training step finished" in logs  # the watchdog turned the stall into an exit

    starts = [a for a in read_jsonl(out / "attempts.jsonl") if "resume_step" in a]
    kill_step, stall_step = 4, int(first[1]) + 2
    # a fault fires after its step is logged, before that step's checkpoint would be written
    ckpts = {s for s in range(1, total + 1) if s % EVERY == 0} | set(first[1:].tolist())
    assert [a["resume_step"] for a in starts] == [
        0,
        max(s for s in ckpts if s < kill_step),
        max(s for s in ckpts if s < stall_step),
    ]
    assert all(a["world_size"] == world for a in starts)

    # committed history: attempt a's steps up to where attempt a+1 resumed, the last one's all
    cutoff = [a["resume_step"] for a in starts[1:]] + [total]
    records = [r for rank in range(world) for r in read_jsonl(out / "steps" / f"rank{rank}.jsonl")]
    committed = [r for r in records if r["global_step"] <= cutoff[r["attempt"]]]
    rolled_back = [r for r in records if r["global_step"] > cutoff[r["attempt"]]]
    assert {(r["attempt"], r["global_step"]) for r in rolled_back} >= {
        (0, kill_step),
        (1, stall_step),
    }

    # one committed record per rank and global step: equal steps per rank, nothing repeated
    assert Counter((r["rank"], r["global_step"]) for r in committed) == Counter(
        {(rank, s): 1 for rank in range(world) for s in range(1, total + 1)}
    )
    for epoch in range(EPOCHS):
        mine = [r for r in committed if r["epoch"] == epoch]
        seen = sorted(g for r in mine for g in r["graphs"])
        assert seen == list(range(N_GRAPHS)), f"epoch {epoch}: not every graph exactly once"
        for r in mine:  # and on the batch the plan gives this rank at this step
            b = plans[epoch].rank_batches(r["rank"])[r["step"] - 1]
            assert r["graphs"] == plans[epoch].batch(b).tolist()
            assert r["global_step"] == first[epoch] + r["step"]

    # the loss curve equals an uninterrupted run's, recomputed in one process
    by_step = {}
    for r in committed:
        by_step.setdefault(r["global_step"], set()).add(r["loss"])
    assert all(len(v) == 1 for v in by_step.values())  # every rank logged the global loss
    curve = [by_step[s].pop() for s in sorted(by_step)]
    np.testing.assert_allclose(curve, reference_losses(store, world), rtol=2e-4, atol=1e-6)

    # the shipped accounting tool agrees
    tool = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "ddp_coverage.py"),
            str(out),
            "--num-graphs",
            str(N_GRAPHS),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert tool.returncode == 0, tool.stdout + tool.stderr
    summary = json.loads(tool.stdout)
    assert summary["problems"] == [] and summary["attempts"] == 3
    assert summary["rolled_back_steps"] >= 2


# ----------------------------------------------------------------------------- consistency
def _sizes(n=40, bump=None) -> gb.GraphSizes:
    nodes = np.arange(n) % 7 + 3
    edges = nodes * 2
    if bump is not None:
        edges = edges.copy()
        edges[bump] += 2
    return gb.GraphSizes(nodes, edges)


def test_plan_digest_depends_on_the_plan_not_on_timing():
    s = _sizes()
    p1 = gb.plan(s, "dynamic", batch_size=8, seed=3, world_size=2)
    p2 = gb.plan(s, "dynamic", batch_size=8, seed=3, world_size=2)
    assert plan_digest(p1) == plan_digest(p2)
    retimed = gb.BatchPlan(
        p1.order,
        p1.offsets,
        p1.pad_nodes,
        p1.pad_edges,
        p1.pad_graphs,
        real_nodes=p1.real_nodes,
        real_edges=p1.real_edges,
        rank=p1.rank,
        step=p1.step,
        meta=dict(p1.meta, plan_seconds=123.0),
    )
    assert plan_digest(retimed) == plan_digest(p1)
    assert plan_digest(p1) != plan_digest(gb.plan(s, "dynamic", batch_size=8, seed=4, world_size=2))
    assert plan_digest(p1) != plan_digest(
        gb.plan(s, "dynamic", batch_size=8, seed=3, epoch=1, world_size=2)
    )
    swapped = p1.order.copy()
    swapped[[0, -1]] = swapped[[-1, 0]]
    q = gb.BatchPlan(
        swapped,
        p1.offsets,
        p1.pad_nodes,
        p1.pad_edges,
        p1.pad_graphs,
        real_nodes=p1.real_nodes,
        real_edges=p1.real_edges,
        rank=p1.rank,
        step=p1.step,
        meta=p1.meta,
    )
    assert plan_digest(q) != plan_digest(p1)
    assert sizes_digest(s) == sizes_digest(_sizes())
    assert sizes_digest(s) != sizes_digest(_sizes(bump=5))
    with pytest.raises(TypeError, match="BatchPlan"):
        plan_digest(s)
    with pytest.raises(TypeError, match="GraphSizes"):
        sizes_digest(p1)


def test_consistency_digests_of_a_loader():
    from .._torch_graphs import molecules

    graphs = molecules(30, seed=2, max_nodes=8)
    ld = gt.loader(graphs, strategy="dynamic", batch_size=4, seed=1, num_replicas=2, rank=1)
    d = consistency_digests(ld, extra={"step": 3})
    assert set(d) == {"graphbatch version", "size table", "plan request", "plan", "extra"}
    assert d["plan"] == plan_digest(ld.plan)
    assert d["size table"] == sizes_digest(gt.read_sizes(graphs))
    assert d["extra"] != consistency_digests(ld, extra={"step": 4})["extra"]
    ld.set_epoch(1)
    assert consistency_digests(ld)["plan"] != d["plan"]
    with pytest.raises(TypeError, match="PlanLoader"):
        consistency_digests([1, 2, 3])
    with pytest.raises(RuntimeError, match="initialised"):
        gt.check_plan_consistency(ld)


CASES = ("same", "sizes", "seed", "extra", "world", "ranks")


def _consistency_worker(rank, port, out_dir):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    torch.set_num_threads(1)
    for case in CASES:  # one process group for all cases: a mismatch leaves it usable
        bump = 5 if (case == "sizes" and rank == 1) else None
        seed = 1 + rank if case == "seed" else 1
        replicas = 3 if case == "world" else 2
        p = gt.PlanBatchSampler(
            _sizes(bump=bump),
            "dynamic",
            batch_size=8,
            seed=seed,
            num_replicas=replicas,
            rank=0 if case == "ranks" else rank,
        )
        extra = {"resume_step": rank} if case == "extra" else None
        try:
            gt.check_plan_consistency(p, extra=extra)
            result = "ok"
        except gt.PlanMismatchError as exc:
            result = str(exc)
        Path(out_dir, f"{case}{rank}.txt").write_text(result)
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def consistency_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("consistency")
    mp.start_processes(
        _consistency_worker,
        args=(_free_port(), str(out)),
        nprocs=2,
        join=True,
        start_method="spawn",
    )
    return out


@pytest.mark.parametrize("case", CASES)
def test_check_plan_consistency_across_two_processes(case, consistency_run):
    msgs = [(consistency_run / f"{case}{r}.txt").read_text() for r in range(2)]
    if case == "same":
        assert msgs == ["ok", "ok"]
        return
    assert msgs[0] == msgs[1]  # every rank raises, with the same message
    msg = msgs[0]
    assert msg.startswith("graphbatch plan consistency check failed across 2 ranks (epoch 0)")
    expected = {
        "sizes": ["size table differs", "plan differs"],
        "seed": ["plan request differs", "plan differs"],
        "extra": ["extra differs"],
        "world": ["the plan is for world_size=3 but the process group has 2 ranks"],
        "ranks": ["loader ranks by process-group rank are [0, 0], expected each of 0..1 once"],
    }[case]
    for part in expected:
        assert part in msg
    if case in ("world", "ranks"):  # same inputs on both ranks: no digest differs
        assert " differs " not in msg
        return
    differing = {
        "sizes": {"size table", "plan"},
        "seed": {"plan request", "plan"},
        "extra": {"extra"},
    }[case]
    for name in {"graphbatch version", "size table", "plan request", "plan", "extra"} - differing:
        assert f"{name} differs" not in msg
    assert "rank 0: " in msg and "rank 1: " in msg
