"""graphbatch.jax.loader across JAX processes (issue 26, part 3): two CPU processes joined by
``jax.distributed.initialize`` on localhost check at the start of every iteration that they
hold the same plan (``process_allgather`` of the digests), raise `PlanMismatchError` in both,
naming the processes, when a size table, seed or epoch differs, and train normally when they
agree; ``verify_plan=False`` skips the check. Plus the single-process rules the torch loader
shares: ``set_epoch`` before the first batch, and one validation of resume states."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("jraph")

import graphbatch as gb  # noqa: E402
import graphbatch.jax as gj  # noqa: E402
from graphbatch._consistency import ROW_WORDS  # noqa: E402
from graphbatch.jax import _loader as jax_loader  # noqa: E402

from .test_jax_collate import make_graphs, sizes_of  # noqa: E402
from .test_jax_loader import epoch_indices  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[1] / "_jax_multihost_script.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def multihost(tmp_path_factory):
    out = tmp_path_factory.mktemp("jax-multihost")
    port = _free_port()
    logs = [open(out / f"log{p}", "w") for p in range(2)]  # noqa: SIM115 (the children's)
    procs = [
        subprocess.Popen(
            [sys.executable, str(SCRIPT), str(p), str(port), str(out)],
            stdout=logs[p],
            stderr=subprocess.STDOUT,
        )
        for p in range(2)
    ]
    for p, proc in enumerate(procs):
        try:
            rc = proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            rc = "timeout"
        logs[p].close()
        if rc != 0:
            pytest.fail(f"JAX process {p} failed ({rc}):\n" + (out / f"log{p}").read_text()[-4000:])
    return out


def _result(out: Path, case: str, p: int) -> dict:
    return json.loads((out / f"{case}{p}.json").read_text())


def _plan_steps(seed: int, epoch: int) -> list[list[list[int]]]:
    graphs = make_graphs(40, seed=3)
    p = gb.plan(sizes_of(graphs), "dynamic", batch_size=6, seed=seed, epoch=epoch, world_size=2)
    return [[p.batch(b).tolist() for b in p.rank_batches(r)] for r in range(2)]


@pytest.mark.slow
def test_processes_that_agree_train_on_their_share(multihost):
    got = [_result(multihost, "same", p)["steps"] for p in range(2)]
    for p in range(2):
        assert all(rank == p for rank, _ in got[p])  # each process holds its own device's rank
    want = [_plan_steps(5, 0)[p] + _plan_steps(5, 1)[p] for p in range(2)]
    assert [[ids for _, ids in got[p]] for p in range(2)] == want
    n0 = len(_plan_steps(5, 0)[0])
    for epoch in (slice(0, n0), slice(n0, None)):  # every graph once per epoch, both processes
        seen = sorted(i for p in range(2) for _, ids in got[p][epoch] for i in ids)
        assert seen == list(range(40))


@pytest.mark.slow
@pytest.mark.parametrize(
    "case, parts",
    [
        ("seed", ["plan request differs (process 0: ", "; process 1: ", "plan differs"]),
        ("sizes", ["size table differs (process 0: ", "; process 1: ", "plan differs"]),
        ("epoch", ["epoch differs (process 0: 0; process 1: 1)"]),
    ],
)
def test_processes_that_disagree_both_raise_naming_them(multihost, case, parts):
    res = [_result(multihost, case, p) for p in range(2)]
    assert [r.get("type") for r in res] == ["PlanMismatchError"] * 2, res
    assert res[0]["error"] == res[1]["error"]  # the same message in every process
    msg = res[0]["error"]
    assert msg.startswith("graphbatch plan consistency check failed across 2 JAX processes")
    for part in parts:
        assert part in msg


@pytest.mark.slow
def test_verify_plan_false_skips_the_check(multihost):
    res = [_result(multihost, "off", p) for p in range(2)]
    assert all("steps" in r for r in res)  # divergent seeds, trained without a check
    assert [ids for _, ids in res[1]["steps"]][:3] == _plan_steps(6, 0)[1][:3]


def test_check_runs_only_for_a_loader_over_several_processes(monkeypatch):
    """In one process there is nothing to compare: no gather; an injected gather shows the
    check's rows when the loader is made to think it spans two processes."""
    graphs = make_graphs(20, seed=1)
    ld = gj.loader(graphs, strategy="dynamic", batch_size=6, seed=2, prefetch=0)
    assert not ld.verifies()
    calls = []

    def second(row):  # the row of process 1: its loader rank is 1
        other = row.copy()
        other[ROW_WORDS - 4] = 1
        return other

    def gather(row):
        calls.append(row)
        other = second(row)
        other[0] ^= 1  # process 1 holds another graphbatch version
        return np.stack([row, other])

    monkeypatch.setattr(jax_loader, "process_gather", gather)
    monkeypatch.setattr(type(ld), "verifies", lambda self: True)
    with pytest.raises(
        gb.PlanMismatchError,
        match="graphbatch version differs "
        r"\(process 0: .*; process 1: ",
    ):
        next(iter(ld))
    assert len(calls) == 1
    monkeypatch.setattr(jax_loader, "process_gather", lambda row: np.stack([row, second(row)]))
    assert len(list(ld)) == len(ld.plan_for_epoch(0))


# ----------------------------------------------------------- single process: shared rules
@pytest.mark.parametrize("prefetch", [0, 2])
def test_set_epoch_after_iter_serves_the_new_epoch(prefetch):
    graphs = make_graphs(30, seed=2)
    ld = gj.loader(graphs, strategy="dynamic", batch_size=6, seed=4, prefetch=prefetch)
    it = iter(ld)
    ld.set_epoch(1)
    got = epoch_indices(it)
    p = gb.plan(sizes_of(graphs), "dynamic", batch_size=6, seed=4, epoch=1)
    assert got == [p.batch(b).tolist() for b in range(len(p))]
    assert ld.epoch == 2


@pytest.mark.parametrize("state", [None, [1], "x", 3, {}, {"offset": 1}])
def test_jax_refuses_what_is_not_a_state_as_torch_does(state):
    ld = gj.loader(make_graphs(12, seed=1), strategy="dynamic", batch_size=4)
    with pytest.raises(gb.InputError, match="not a JaxPlanLoader state"):
        ld.load_state_dict(state)


def test_state_without_fingerprint_needs_the_opt_in():
    graphs = make_graphs(30, seed=2)
    ld = gj.loader(graphs, strategy="dynamic", batch_size=6, seed=4)
    for k, _ in enumerate(ld):
        if k == 1:
            state = ld.state_dict()  # after the second step
            break
    assert (state["epoch"], state["offset"]) == (0, 2)
    del state["fingerprint"]
    other = gj.loader(graphs, strategy="dynamic", batch_size=12, seed=4)
    with pytest.raises(gb.InputError, match=r"no 'fingerprint'.*allow_missing_fingerprint=True"):
        other.load_state_dict(state)
    same = gj.loader(graphs, strategy="dynamic", batch_size=6, seed=4)
    same.load_state_dict(state, allow_missing_fingerprint=True)
    p = gb.plan(sizes_of(graphs), "dynamic", batch_size=6, seed=4, epoch=0)
    assert epoch_indices(same) == [p.batch(b).tolist() for b in range(2, len(p))]
    with pytest.raises(gb.InputError, match="saved with world_size = 2"):
        same.load_state_dict({**state, "world_size": 2}, allow_missing_fingerprint=True)
