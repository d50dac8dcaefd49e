"""The test suite's own setting (`tests._threads`): under pytest-xdist each worker, and each
process its tests start, gets its share of the cores for torch's and NumPy's thread pools."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .. import _threads


@pytest.mark.parametrize(
    ("workers", "cores", "preset", "want"),
    [
        (None, 2, None, None),  # not under xdist: the libraries' defaults
        ("1", 8, None, None),  # -n 1: one worker, every core
        ("2", 2, None, "1"),
        ("2", 16, None, "8"),
        ("4", 2, None, "1"),  # never fewer than one
        ("2", 2, "3", "3"),  # the environment's own setting wins
    ],
)
def test_each_worker_gets_its_share_of_the_cores(monkeypatch, workers, cores, preset, want):
    for name in _threads.THREAD_VARS:
        monkeypatch.delenv(name, raising=False)
        if preset is not None:
            monkeypatch.setenv(name, preset)
    if workers is None:
        monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    else:
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", workers)
    monkeypatch.setattr(_threads, "cores", lambda: cores)
    _threads.share_cores()
    assert {os.environ.get(name) for name in _threads.THREAD_VARS} == {want}


def test_torch_here_and_in_started_processes_uses_the_share():
    """The setting is made before torch loads, so it holds in this process and in children."""
    torch = pytest.importorskip("torch")
    share = os.environ.get("OMP_NUM_THREADS")
    if share is None:  # a single process: the default, one thread per core
        assert "PYTEST_XDIST_WORKER_COUNT" not in os.environ or (
            int(os.environ["PYTEST_XDIST_WORKER_COUNT"]) <= 1
        )
        return
    code = "import torch; print(torch.get_num_threads())"
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert child.returncode == 0, child.stderr[-2000:]
    assert torch.get_num_threads() == int(child.stdout) == int(share)
