"""Lightning drives `gt.loader` like any DataLoader: 2 CPU processes (gloo) under ``ddp`` and
``ddp_spawn``, the loader built before the process group (passed to ``fit``) and after it (by
`graphbatch.lightning.GraphDataModule`), ``limit_train_batches``, ``max_steps`` with a
mid-epoch checkpoint and its resume, resumes from end-of-epoch checkpoints (single process and
``ddp``), a single-process run, and a ``ddp`` run whose ranks plan with different seeds (the
loader's plan consistency check stops it).

Every run records, per rank, the dataset indices of each batch it trained on; the test compares
them with the plans computed here independently (``graphbatch.plan(..., world_size=2)``): every
rank trains on exactly its share of each epoch's plan, so every graph exactly once per epoch
across ranks, and each epoch has its own plan. The runs start together (Lightning's launcher
sleeps between processes), so the file takes about as long as its slowest run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lightning")
pytest.importorskip("torch_geometric")

import graphbatch as gb

from .._torch_graphs import molecules, sizes_of

pytestmark = pytest.mark.slow  # about 40 CPU-seconds of process start-up, run concurrently

SCRIPT = Path(__file__).resolve().parents[1] / "_lightning_script.py"
GRAPHS = dict(n_graphs=40, seed=8, max_nodes=9)  # as in the script
PLAN = dict(batch_size=6, seed=3)
RUNS = {
    # also writes a checkpoint at the end of every epoch (ModelCheckpoint's default trigger)
    "ddp-before": ["--strategy", "ddp", "--build", "before", "--epochs", "2", "--ckpt-epoch"],
    "spawn-before": ["--strategy", "ddp_spawn", "--build", "before", "--epochs", "2"],
    "spawn-after-limit": [
        "--strategy",
        "ddp_spawn",
        "--build",
        "after",
        "--epochs",
        "3",
        "--limit",
        "2",
    ],
    "ddp-after-stop": [
        "--strategy",
        "ddp",
        "--build",
        "after",
        "--epochs",
        "3",
        "--max-steps",
        "6",
        "--ckpt-every",
        "6",
    ],
    "single": ["--strategy", "single", "--build", "after", "--epochs", "2", "--ckpt-epoch"],
    # rank 1 plans with another seed: the loader's plan check must stop both ranks
    "ddp-mismatch": ["--strategy", "ddp", "--build", "after", "--epochs", "1", "--seed-per-rank"],
}
#: runs that must fail (their exit status is checked by the test, not by the fixture)
MUST_FAIL = {"ddp-mismatch"}
#: stopped run -> (its checkpoint, the resumed run's tag and arguments)
RESUMES = {
    "ddp-after-stop": (
        "step=6.ckpt",
        "ddp-after-resume",
        ["--strategy", "ddp", "--build", "after", "--epochs", "3"],
    ),
    # resumed from the checkpoint at the end of epoch 0: they train epoch 1 only
    "single": (
        "single-epoch=0.ckpt",
        "single-epoch-resume",
        ["--strategy", "single", "--build", "after", "--epochs", "2"],
    ),
    "ddp-before": (
        "ddp-before-epoch=0.ckpt",
        "ddp-epoch-resume",
        ["--strategy", "ddp", "--build", "before", "--epochs", "2"],
    ),
}


def _start(args, out: Path, tag: str):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    log = open(out / f"{tag}.log", "w")  # noqa: SIM115 (the child's: it outlives this call)
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), *args, "--out", str(out), "--tag", tag],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )


def _wait(proc, out: Path, tag: str) -> None:
    try:
        rc = proc.wait(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = "timeout"
    (out / f"{tag}.rc").write_text(str(rc))
    if rc != 0 and tag not in MUST_FAIL:
        pytest.fail(
            f"Lightning run {tag} failed ({rc}):\n" + (out / f"{tag}.log").read_text()[-4000:]
        )


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("lightning")
    procs = {tag: _start(args, out, tag) for tag, args in RUNS.items()}
    for stopped, (name, tag, args) in RESUMES.items():
        _wait(procs[stopped], out, stopped)
        ckpt = out / name
        assert ckpt.exists(), sorted(p.name for p in out.iterdir())
        procs[tag] = _start([*args, "--resume", str(ckpt)], out, tag)
    for tag, proc in procs.items():
        _wait(proc, out, tag)
    return out


def records(out: Path, tag: str, rank: int) -> dict[int, list[list[int]]]:
    """epoch -> the batches (dataset indices) that rank trained on, in order."""
    by_epoch: dict[int, list[list[int]]] = {}
    for epoch, _, ids, _ in json.loads((out / f"{tag}_rank{rank}.json").read_text()):
        by_epoch.setdefault(epoch, []).append(ids)
    return by_epoch


def expected(epoch: int, rank: int, world: int = 2) -> list[list[int]]:
    sizes = sizes_of(molecules(**GRAPHS))
    p = gb.plan(sizes, "dynamic", epoch=epoch, world_size=world, **PLAN)
    return [p.batch(b).tolist() for b in p.rank_batches(rank)]


def check_exactly_once(per_rank: list[dict[int, list[list[int]]]], epochs: int) -> None:
    n = GRAPHS["n_graphs"]
    for e in range(epochs):
        seen = sorted(i for rec in per_rank for batch in rec[e] for i in batch)
        assert seen == list(range(n)), f"epoch {e}"
    first = [i for rec in per_rank for batch in rec[0] for i in batch]
    second = [i for rec in per_rank for batch in rec[1] for i in batch]
    assert first != second  # epoch 1 has its own plan


@pytest.mark.parametrize("tag", ["ddp-before", "spawn-before"])
def test_full_epochs_every_graph_once_across_ranks(runs, tag):
    per_rank = [records(runs, tag, r) for r in range(2)]
    for r in range(2):
        assert sorted(per_rank[r]) == [0, 1]
        for e in (0, 1):
            assert per_rank[r][e] == expected(e, r)
    check_exactly_once(per_rank, 2)


def test_limit_train_batches_keeps_epochs_apart(runs):
    per_rank = [records(runs, "spawn-after-limit", r) for r in range(2)]
    for r in range(2):
        for e in range(3):
            assert per_rank[r][e] == expected(e, r)[:2]
    for e in range(3):
        ids = [i for rec in per_rank for batch in rec[e] for i in batch]
        assert len(ids) == len(set(ids))  # no graph twice within an epoch
    assert per_rank[0][0] != per_rank[0][1] != per_rank[0][2]


def test_max_steps_checkpoint_and_resume(runs):
    stopped = [records(runs, "ddp-after-stop", r) for r in range(2)]
    resumed = [records(runs, "ddp-after-resume", r) for r in range(2)]
    steps = len(expected(0, 0))
    assert steps < 6 < 2 * steps  # the checkpoint is taken mid-epoch 1
    combined = []
    for r in range(2):
        assert stopped[r][0] == expected(0, r)
        assert stopped[r][1] == expected(1, r)[: 6 - steps]
        assert 0 not in resumed[r]
        assert resumed[r][1] == expected(1, r)[6 - steps :]  # continues with the next batch
        assert resumed[r][2] == expected(2, r)
        combined.append({0: stopped[r][0], 1: stopped[r][1] + resumed[r][1], 2: resumed[r][2]})
    check_exactly_once(combined, 3)


def test_single_process_data_module(runs):
    (rec,) = [records(runs, "single", 0)]
    for e in (0, 1):
        assert rec[e] == expected(e, 0, world=1)
    check_exactly_once([rec], 2)


@pytest.mark.parametrize("world", [1, 2])
def test_resume_from_an_end_of_epoch_checkpoint_serves_the_next_epoch(runs, world):
    """Lightning 2.6 resuming from a checkpoint taken at an epoch's end does not call the
    loader's load_state_dict: it creates the iterator, then calls sampler.set_epoch(1). The
    resumed run must train on epoch 1's plan (it used to replay epoch 0's batches)."""
    stop, resume = (
        ("single", "ddp-before")[world - 1],
        ("single", "ddp")[world - 1] + "-epoch-resume",
    )
    stopped = [records(runs, stop, r) for r in range(world)]  # it went on with epoch 1 itself
    resumed = [records(runs, resume, r) for r in range(world)]
    for r in range(world):
        assert stopped[r][0] == expected(0, r, world)
        assert sorted(resumed[r]) == [1]  # nothing of epoch 0 again
        assert resumed[r][1] == expected(1, r, world)
    check_exactly_once([{0: stopped[r][0], 1: resumed[r][1]} for r in range(world)], 2)


def test_ranks_with_different_plans_stop_with_the_plan_check(runs):
    """Under Lightning's ddp, a rank that plans with another seed is caught before training:
    both ranks raise PlanMismatchError (the same message) naming both ranks; nothing trains."""
    assert (runs / "ddp-mismatch.rc").read_text() not in ("0", "timeout")
    log = (runs / "ddp-mismatch.log").read_text()
    msgs = re.findall(r"graphbatch plan consistency check failed across 2 ranks[^\n]*", log)
    assert len(msgs) >= 2 and len(set(msgs)) == 1, log[-3000:]  # every rank, one message
    assert "plan request differs (rank 0: " in msgs[0] and "; rank 1: " in msgs[0]
    assert not list(runs.glob("ddp-mismatch_rank*.json"))  # no batch was trained on
