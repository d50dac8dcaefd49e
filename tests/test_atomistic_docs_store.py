"""docs/atomistic.md, "From an extxyz file to compiled MACE training": the block runs as written
in a fresh interpreter (Dynamo's ``eager`` backend through ``GRAPHBATCH_COMPILE_BACKEND``, as the
doc says), trains from the store it builds, and compiles once."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("mace")
pytest.importorskip("vesin")

DOC = Path(__file__).resolve().parent.parent / "docs" / "atomistic.md"
HEADING = "## From an extxyz file to compiled MACE training (the store path)"


def _block() -> str:
    text = DOC.read_text()
    assert HEADING in text
    return re.findall(r"```python\n(.*?)```", text.split(HEADING, 1)[1], re.S)[0]


@pytest.mark.slow
def test_extxyz_to_compiled_mace_training_runs_as_written(tmp_path):
    env = {**os.environ, "GRAPHBATCH_COMPILE_BACKEND": "eager"}
    r = subprocess.run([sys.executable, "-c", _block()], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    losses = [ln.split() for ln in lines if re.fullmatch(r"\d+ \S+", ln)]
    assert [p[0] for p in losses] == ["0", "1"]
    assert all(float(p[1]) == float(p[1]) for p in losses)  # finite, not NaN
    assert "compilations: 1" in lines
    assert (tmp_path / "emt.xyz").is_file() and (tmp_path / "emt.h5").is_file()
