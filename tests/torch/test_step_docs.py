"""docs/training-step.md says what its blocks do (tests/docs runs them; this reads their output):
the plain loop trains with one graph per shape of a 2-shape buckets plan, the capture check on
CPU names PyG's readout, and the Lightning module and MACE train through the step."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("torch")
pytest.importorskip("torch_geometric")

from .. import _docblocks

BLOCKS = _docblocks.python_blocks("docs/training-step.md")


def output_of(block, tmp_path):
    missing = _docblocks.missing_modules(block)
    if missing:
        pytest.skip(f"{block.id} needs {', '.join(missing)}")
    res = _docblocks.run_block(block, tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


@pytest.mark.slow
def test_plain_loop_and_capture_check_blocks(tmp_path):
    out = output_of(BLOCKS[1], tmp_path)  # runs block 0 first ("continues")
    losses = [float(x) for x in re.findall(r"^epoch \d: mean loss (\S+)$", out, re.M)]
    assert len(losses) == 2 and all(x == x for x in losses)
    assert "TrainStep(EagerBackend, 2 shapes, 2 graphs, warmup=0, check=False)" in out
    assert re.search(
        r"^TrainStep cannot capture this step: int\(tensor\) at torch_geometric/nn/aggr/\S+ in "
        r"__call__ copies a value to the host",
        out,
        re.M,
    )


@pytest.mark.slow
def test_lightning_block(tmp_path):
    pytest.importorskip("lightning")
    out = output_of(BLOCKS[2], tmp_path)
    assert "TrainStep(EagerBackend, 1 shape, 1 graph, warmup=0, check=False)" in out


@pytest.mark.slow
def test_mace_block(tmp_path):
    pytest.importorskip("mace.modules")
    out = output_of(BLOCKS[3], tmp_path)
    lines = re.findall(r"^(\d) (\S+)$", out, re.M)
    assert [e for e, _ in lines] == ["0", "1"] and all(float(x) == float(x) for _, x in lines)


def test_blocks_are_where_the_tests_expect_them():
    assert [b.runs for b in BLOCKS] == [True, True, True, True]
    assert BLOCKS[1].continues and "check=True" in BLOCKS[1].code
    assert "L.Trainer" in BLOCKS[2].code
