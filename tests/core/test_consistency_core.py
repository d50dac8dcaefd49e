"""The framework-free half of the plan consistency check (`graphbatch._consistency`): the rows
each rank contributes and the comparison that names the ranks that disagree. The all-gather is
injected here (a function returning every rank's row), as the torch and JAX adapters inject
``torch.distributed.all_gather`` and ``process_allgather``."""

from __future__ import annotations

import numpy as np
import pytest

import graphbatch as gb
from graphbatch._consistency import (
    COMPONENTS,
    ROW_WORDS,
    PlanVerifier,
    check_rows,
    digest_row,
    plan_digest,
    sizes_digest,
)

SIZES = gb.GraphSizes(np.arange(50) % 9 + 2, (np.arange(50) % 9 + 2) * 3)


def _plan(seed=1, epoch=0, world=4, sizes=SIZES):
    return gb.plan(sizes, "dynamic", batch_size=6, seed=seed, epoch=epoch, world_size=world)


def _rows(plans, starts=None, sizes=None):
    """Each rank's row, as a loader on that rank would contribute it."""
    out = []
    for r, p in enumerate(plans):
        v = PlanVerifier(sizes[r] if sizes else SIZES)
        out.append(
            digest_row(
                v.digests(p),
                loader_rank=r,
                plan_world=p.world_size,
                epoch=p.meta["epoch"],
                start=(starts or [0] * len(plans))[r],
            )
        )
    return np.stack(out)


def test_agreeing_rows_pass_and_rows_are_fixed_width():
    rows = _rows([_plan()] * 4)
    assert rows.shape == (4, ROW_WORDS) and rows.dtype == np.int64
    check_rows(rows, world=4, epoch=0)


def test_one_odd_rank_among_four_is_named():
    rows = _rows([_plan(), _plan(), _plan(), _plan(seed=2)])
    with pytest.raises(gb.PlanMismatchError) as info:
        check_rows(rows, world=4, epoch=0)
    msg = str(info.value)
    assert "plan request differs (ranks 0-2: " in msg and "; rank 3: " in msg
    assert "disagreeing ranks: 3." in msg
    assert "size table differs" not in msg and "graphbatch version differs" not in msg


def test_a_size_table_a_resume_position_and_an_epoch_are_compared():
    other = gb.GraphSizes(SIZES.n_node, SIZES.n_edge + (np.arange(50) == 7))
    rows = _rows([_plan()] * 4, sizes=[SIZES, SIZES, other, SIZES])
    with pytest.raises(
        gb.PlanMismatchError,
        match=r"size table differs \(ranks 0,1,3: .*; "
        r"rank 2: .*disagreeing ranks: 2\.",
    ):
        check_rows(rows, world=4, epoch=0)
    rows = _rows([_plan()] * 4, starts=[3, 3, 0, 3])
    with pytest.raises(
        gb.PlanMismatchError,
        match=r"starts at different batches \(ranks 0,1,3: "
        r"3; rank 2: 0\)",
    ):
        check_rows(rows, world=4, epoch=0)
    rows = _rows([_plan(), _plan(epoch=1), _plan(), _plan()])
    with pytest.raises(
        gb.PlanMismatchError,
        match=r"\(epochs 0, 1\): .*epoch differs "
        r"\(ranks 0,2,3: 0; rank 1: 1\)",
    ):
        check_rows(rows, world=4, epoch=0)


def test_two_sides_of_equal_size_name_no_odd_rank():
    rows = _rows([_plan(), _plan(), _plan(seed=2), _plan(seed=2)])
    with pytest.raises(gb.PlanMismatchError) as info:
        check_rows(rows, world=4, epoch=0)
    assert "ranks 0,1: " in str(info.value) and "ranks 2,3: " in str(info.value)
    assert "disagreeing" not in str(info.value)


def test_world_and_rank_checks():
    rows = _rows([_plan(world=2)] * 4)
    with pytest.raises(
        gb.PlanMismatchError, match="the plan is for world_size=2 but the process group has 4 ranks"
    ):
        check_rows(rows, world=4, epoch=0)
    check_rows(rows, world=4, epoch=0, plan_world=None)  # JAX: devices, not processes
    rows = _rows([_plan()] * 4)
    rows[:, ROW_WORDS - 4] = [0, 1, 1, 3]
    with pytest.raises(gb.PlanMismatchError, match=r"loader ranks .* are \[0, 1, 1, 3\]"):
        check_rows(rows, world=4, epoch=0)
    with pytest.raises(gb.PlanMismatchError, match="expected 4 rows"):
        check_rows(rows[:3], world=4, epoch=0)


def test_verifier_gathers_once_per_call_and_caches_digests(monkeypatch):
    v = PlanVerifier(SIZES)
    p = _plan()
    seen = []

    def gather(row):
        seen.append(row)
        others = [row.copy() for _ in range(3)]
        for r, o in enumerate(others, start=1):
            o[ROW_WORDS - 4] = r
        return np.stack([row, *others])

    v.verify(p, epoch=0, start=0, loader_rank=0, gather=gather)
    from graphbatch import _consistency

    calls = []
    monkeypatch.setattr(_consistency, "plan_digest", lambda q: calls.append(q) or "0" * 64)
    v.verify(p, epoch=0, start=0, loader_rank=0, gather=gather)  # the same plan: no rehash
    assert calls == [] and len(seen) == 2
    with pytest.raises(gb.PlanMismatchError, match="epoch differs"):
        v.verify(
            p,
            epoch=0,
            start=0,
            loader_rank=0,
            gather=lambda row: np.stack([row, *[_with(row, ROW_WORDS - 2, 5)] * 3]),
        )


def _with(row, i, value):
    out = row.copy()
    out[i] = value
    out[ROW_WORDS - 4] = 1
    return out


def test_digests_are_plain_functions_of_their_inputs():
    assert plan_digest(_plan()) == plan_digest(_plan())
    assert plan_digest(_plan()) != plan_digest(_plan(seed=2))
    assert sizes_digest(SIZES) == sizes_digest(
        gb.GraphSizes(SIZES.n_node.copy(), SIZES.n_edge.copy())
    )
    assert len(COMPONENTS) == 5
    with pytest.raises(gb.InputTypeError, match="BatchPlan"):
        plan_digest(SIZES)
