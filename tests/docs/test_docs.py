"""Every python block of README.md and docs/**/*.md runs as written in a fresh interpreter, both
as a script and pasted line by line into the interactive console, or is marked visibly as a
fragment / not run, with a reason; every block, fragments too, pastes without a syntax error
(`tests/_docblocks.py`, the one doc-test harness, has the convention). A block that the page's
next block continues runs as the first part of that block's run (in the same fresh interpreter,
as written), not a second time alone.

A few blocks get checks after they ran (in the same interpreter, on the block's globals ``ns``):
the MACE loop trains and its padded loss equals MACE's unpadded loss, the JAX loops use two
devices and compile once; others, of what they printed: training-step.md's loops train (its
capture check names PyG's readout), tune.md's blocks print the chosen request.
"""

from __future__ import annotations

import math
import re

import pytest

from .._docblocks import (
    OPTIONAL,
    START_ENV,
    Block,
    all_blocks,
    chain,
    missing_modules,
    missing_optional,
    paste_error,
    python_blocks,
    run_block,
)

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


def _plain_loop_and_capture_check(out: str) -> None:
    """docs/training-step.md's plain loop (block 0) trains with one graph per shape of a
    2-shape buckets plan; the capture check after it (block 1) names PyG's readout."""
    losses = [float(x) for x in re.findall(r"^epoch \d: mean loss (\S+)$", out, re.M)]
    assert len(losses) == 2 and all(x == x for x in losses), out
    assert "TrainStep(EagerBackend, 2 shapes, 2 graphs, warmup=0, check=False)" in out, out
    assert re.search(
        r"^TrainStep cannot capture this step: int\(tensor\) at torch_geometric/nn/aggr/\S+ in "
        r"__call__ copies a value to the host",
        out,
        re.M,
    ), out


def _tune_request(out: str) -> None:
    assert "'strategy'" in out, out  # tune's chosen request, printed


#: Checks of what a block printed, by (doc, block index).
PRINTED = {
    ("docs/atomistic.md", 0): _mace_losses,
    ("docs/atomistic.md", 2): _store_mace_training,
    ("docs/jax.md", 0): lambda out: (
        re.findall(r"^epoch \d: loss", out, re.M)
        == ["epoch 0: loss", "epoch 1: loss", "epoch 2: loss"]
        or pytest.fail(out)
    ),
    ("docs/getting-started/jax.md", 0): lambda out: (
        "compilations: 1" in out.splitlines() or pytest.fail(out)
    ),
    ("docs/training-step.md", 1): _plain_loop_and_capture_check,
    ("docs/training-step.md", 2): lambda out: (  # the Lightning module trains through the step
        "TrainStep(EagerBackend, 1 shape, 1 graph, warmup=0, check=False)" in out
        or pytest.fail(out)
    ),
    ("docs/training-step.md", 3): _mace_losses,  # MACE trains through the step
    ("docs/tune.md", 0): _tune_request,
    ("docs/tune.md", 2): _tune_request,
}


def _key(block):
    return (block.doc, block.index)


def _run_by_the_next(block: Block) -> bool:
    """The page's next block continues this one in the same environment and runs here, so its
    run runs this block first, as written, in the same fresh interpreter: a run of this block
    alone would repeat that (unless it has checks of its own)."""
    blocks = python_blocks(block.doc)
    if block.index + 1 == len(blocks) or _key(block) in CHECKS or _key(block) in PRINTED:
        return False
    after = blocks[block.index + 1]
    return after.continues and after.runs and after.env == block.env and not missing_modules(after)


#: (block, mode): every runnable block as a script and pasted into the console, except the
#: module files a page asks to save (``file``): the later blocks that import them run them;
#: and a block the next one continues (`_run_by_the_next`): that block's run runs it.
RUNS = [
    (b, m)
    for m in ("script", "console")
    for b in RUNNABLE
    if not b.file and not _run_by_the_next(b)
]


def test_the_harness_finds_the_documented_blocks():
    docs = {b.doc for b in BLOCKS}
    assert {
        "README.md",
        "docs/atomistic.md",
        "docs/jax.md",
        "docs/torch.md",
        "docs/lightning.md",
        "docs/getting-started/pyg.md",
        "docs/getting-started/jax.md",
    } <= docs
    for b in BLOCKS:  # every block runs, or says why not
        assert b.runs or (b.fragment or b.not_run), b.id
    for key in [*CHECKS, *PRINTED]:  # checks name blocks that run
        assert any(_key(b) == key for b, _ in RUNS), key
    ran = {_key(c) for b, _ in RUNS for c in chain(b)}
    for b in RUNNABLE:  # every block runs: alone, or first in the run of a block continuing it
        assert b.file or _key(b) in ran, b.id
    for b in BLOCKS:  # a module file is run by a later block of its page that imports it
        stem = b.file[: -len(".py")] if b.file else None
        assert stem is None or any(
            re.search(rf"^\s*(from|import) {stem}\b", later.code, re.M) and later.runs
            for later in python_blocks(b.doc)[b.index + 1 :]
        ), f"{b.id}: no later block imports {b.file}"
    assert len(RUNNABLE) >= 6


def test_the_printed_checks_name_the_blocks_they_read():
    """The blocks `PRINTED` reads are the ones its checks describe."""
    step = python_blocks("docs/training-step.md")
    assert [b.runs for b in step] == [True, True, True, True]
    assert step[1].continues and "check=True" in step[1].code
    assert "L.Trainer" in step[2].code and "mace" in step[3].code
    tune = python_blocks("docs/tune.md")
    assert [b.file for b in tune] == [None, "my_models.py", None]
    assert all("gb.tune(" in tune[i].code for i in (0, 2))


def test_every_block_pastes_into_the_interactive_console():
    """Compiled as pasted, line by line (nothing runs): a statement right after an indented
    block without a blank line, or a blank line inside a class or function, is a SyntaxError
    in ``python``'s console although the file runs as a script. Fragments too."""
    errors = [e for e in map(paste_error, BLOCKS) if e]
    assert not errors, "blocks that do not paste into `python`:\n" + "\n".join(errors)


def _block(tmp_path, text: str) -> Block:
    doc = tmp_path / "page.md"
    doc.write_text(text)
    return python_blocks(doc)[0]


def test_the_paste_check_fails_what_the_console_refuses(tmp_path, monkeypatch):
    monkeypatch.setattr("tests._docblocks.ROOT", tmp_path)
    after_loop = "```python\nfor i in range(2):\n    x = i\nprint(x)\n```\n"
    blank_in_class = "```python\nclass A:\n    a = 1\n\n    b = 2\n```\n"
    fine = "```python\nfor i in range(2):\n    x = i\n\nprint(x)\n```\n"
    assert "SyntaxError" in paste_error(_block(tmp_path, after_loop))
    assert "IndentationError" in paste_error(_block(tmp_path, blank_in_class))
    assert paste_error(_block(tmp_path, fine)) is None
    compile(_block(tmp_path, after_loop).code, "script", "exec")  # yet it runs as a script


def test_a_fragment_is_marked_visibly_not_in_a_comment(tmp_path, monkeypatch):
    monkeypatch.setattr("tests._docblocks.ROOT", tmp_path)
    hidden = "<!-- doc-test: fragment: `x` is yours -->\n```python\nprint(x)\n```\n"
    with pytest.raises(ValueError, match="visibly"):
        _block(tmp_path, hidden)
    visible = "Text.\n\n*Fragment: `x` is yours.*\n<!-- doc-test: requires h5py -->\n"
    block = _block(tmp_path, visible + "```python\nprint(x)\n```\n")
    assert (block.fragment, block.runs, block.requires) == ("`x` is yours.", False, ("h5py",))
    block = _block(tmp_path, "*Not run by the doc test: slow.*\n```python\nprint(1)\n```\n")
    assert (block.not_run, block.runs) == ("slow.", False)


def test_the_console_runs_in_main_like_the_repl_and_stops_at_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr("tests._docblocks.ROOT", tmp_path)
    probe = (
        "```python\nimport sys\nprint(__name__, '__file__' in globals(), hasattr(sys, 'ps1'))\n"
        "for i in range(2):\n    pass\n\nprint('done')\n```\n"
    )
    res = run_block(_block(tmp_path, probe), tmp_path / "a", console=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["__main__", "False", "True", "done"]
    failing = "```python\nx = 1\nraise RuntimeError('boom')\nprint('after')\n```\n"
    res = run_block(_block(tmp_path, failing), tmp_path / "b", console=True)
    assert res.returncode == 1 and "boom" in res.stderr and "after" not in res.stdout
    assert "line 2 of block 1" in res.stderr, res.stderr


def test_the_session_environment_is_the_one_tests_started_with():
    """mace-torch sets TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD when imported; a doc block must not
    inherit it from another test's import (it hid the MACE block's failure at `from e3nn
    import o3`). Nothing in tests/ sets it."""
    assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD" not in START_ENV or pytest.fail(
        "the test session was started with TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD set"
    )


@pytest.mark.slow
@pytest.mark.parametrize(("block", "mode"), RUNS, ids=[f"{b.id}-{m}" for b, m in RUNS])
def test_doc_block_runs_as_written(block, mode, tmp_path):
    missing = missing_modules(block)
    unknown = [m for m in missing if m not in OPTIONAL]
    assert not unknown, f"{block.id} imports {', '.join(unknown)}, which no page or extra provides"
    if missing:
        pytest.skip(f"{block.id} needs {', '.join(missing)}")
    check = CHECKS.get(_key(block))
    res = run_block(block, tmp_path, check=check, console=mode == "console")
    optional = missing_optional(res)
    if optional:  # installed, but not importable here (e.g. mace-torch without matplotlib)
        pytest.skip(f"{block.id} needs {optional}, which cannot be imported here")
    assert res.returncode == 0, (
        f"{block.id} failed ({mode}):\n{res.stdout[-2000:]}\n{res.stderr[-4000:]}"
    )
    if check is not None:
        assert "CHECKED" in res.stdout
    if _key(block) in PRINTED:
        PRINTED[_key(block)](res.stdout)
