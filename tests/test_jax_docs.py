"""docs/jax.md: the single-device and data-parallel training loops run as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")
pytest.importorskip("optax")

DOC = Path(__file__).resolve().parents[1] / "docs" / "jax.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_docs_training_loops_run_as_written_on_two_host_devices():
    blocks = python_blocks()
    assert len(blocks) >= 2 and "train_step" in blocks[0] and "devices=devices" in blocks[1]
    code = blocks[0] + "\n" + blocks[1] + "\nassert len(devices) == 2\nprint('DOCS OK')\n"
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
               JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "DOCS OK" in proc.stdout
    assert proc.stdout.count("epoch ") == 3
