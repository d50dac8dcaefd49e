"""Every python block of README.md and docs/*.md runs as written in a fresh interpreter, or is
marked as a fragment / not run, with a reason (`tests/_docblocks.py`, the one doc-test harness).

A few blocks get checks after they ran (in the same interpreter, on the block's globals ``ns``):
the MACE loop trains and its padded loss equals MACE's unpadded loss, the JAX loops use two
devices and compile once. docs/lightning.md's data module is also driven by Lightning in
tests/torch/test_torch_lightning.py (imported from the block as written).
"""

from __future__ import annotations

import math
import re

import pytest

from .._docblocks import START_ENV, all_blocks, missing_modules, missing_optional, run_block

BLOCKS = all_blocks()
RUNNABLE = [b for b in BLOCKS if b.runs]

#: Checks run after a block (in its interpreter, on its globals ``ns``), by (doc, block index).
CHECKS = {
    ("docs/atomistic.md", 0): """
import torch
from mace.modules.loss import WeightedEnergyForcesLoss
from mace.tools import torch_geometric

import graphbatch.atomistic as ga

loader, model, dataset = ns["loader"], ns["model"], ns["dataset"]
assert len({tuple(b["positions"].shape) for b in loader}) == 1      # one padded shape
torch.set_default_dtype(torch.float64)
for batch in list(loader)[:1]:  # the padded loss equals MACE's loss on the unpadded batch
    real = batch["graph_index"][batch["graph_mask"]].tolist()
    ref = torch_geometric.Batch.from_data_list([dataset[i] for i in real])
    lp = ga.energy_force_loss(model(batch, training=True), batch, forces_weight=100.0)
    lr = WeightedEnergyForcesLoss(1.0, 100.0)(ref, model(ref.to_dict(), training=True))
    assert abs(lp.item() - lr.item()) <= 1e-12 * max(1.0, abs(lr.item())), (lp, lr)
print("CHECKED")
""",
    ("docs/jax.md", 1): """
assert len(ns["devices"]) == 2, ns["devices"]   # the data-parallel loop ran on two devices
print("CHECKED")
""",
}


def _mace_losses(out: str) -> None:
    lines = [ln.split() for ln in out.splitlines() if re.fullmatch(r"\d+ \S+", ln)]
    assert [ln[0] for ln in lines] == ["0", "1"], out
    assert all(math.isfinite(float(ln[1])) for ln in lines), out


def _store_mace_training(out: str) -> None:
    _mace_losses(out)
    assert "compilations: 1" in out.splitlines(), out  # one padded shape, one compilation


#: Checks of what a block printed, by (doc, block index).
PRINTED = {
    ("docs/atomistic.md", 0): _mace_losses,
    ("docs/atomistic.md", 2): _store_mace_training,
    ("docs/jax.md", 0): lambda out: (
        re.findall(r"^epoch \d: loss", out, re.M)
        == ["epoch 0: loss", "epoch 1: loss", "epoch 2: loss"]
        or pytest.fail(out)
    ),
}


def _key(block):
    return (block.doc, block.index)


def test_the_harness_finds_the_documented_blocks():
    docs = {b.doc for b in BLOCKS}
    assert {
        "README.md",
        "docs/atomistic.md",
        "docs/jax.md",
        "docs/torch.md",
        "docs/lightning.md",
    } <= docs
    for b in BLOCKS:  # every block runs, or says why not
        assert b.runs or (b.fragment or b.not_run), b.id
    for key in [*CHECKS, *PRINTED]:  # checks name blocks that run
        assert any(_key(b) == key and b.runs for b in BLOCKS), key
    assert len(RUNNABLE) >= 6


def test_the_session_environment_is_the_one_tests_started_with():
    """mace-torch sets TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD when imported; a doc block must not
    inherit it from another test's import (it hid the MACE block's failure at `from e3nn
    import o3`). Nothing in tests/ sets it."""
    assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD" not in START_ENV or pytest.fail(
        "the test session was started with TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD set"
    )


@pytest.mark.slow
@pytest.mark.parametrize("block", RUNNABLE, ids=[b.id for b in RUNNABLE])
def test_doc_block_runs_as_written(block, tmp_path):
    missing = missing_modules(block)
    if missing:
        pytest.skip(f"{block.id} needs {', '.join(missing)}")
    check = CHECKS.get(_key(block))
    res = run_block(block, tmp_path, check=check)
    optional = missing_optional(res)
    if optional:  # installed, but not importable here (e.g. mace-torch without matplotlib)
        pytest.skip(f"{block.id} needs {optional}, which cannot be imported here")
    assert res.returncode == 0, f"{block.id} failed:\n{res.stdout[-2000:]}\n{res.stderr[-4000:]}"
    if check is not None:
        assert "CHECKED" in res.stdout
    if _key(block) in PRINTED:
        PRINTED[_key(block)](res.stdout)
