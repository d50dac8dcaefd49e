"""Shared fixtures (small seeded size tables) and the ``requires`` marker: a test marked
``@pytest.mark.requires("matplotlib", "h5py")`` is skipped, naming the missing package, when
one of them cannot be imported (checked when the test runs, so collecting imports nothing)."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys

import numpy as np
import pytest
from hypothesis import settings

import graphbatch as gb

from . import _docblocks

settings.register_profile("ci", max_examples=60, deadline=None)
settings.register_profile("dev", max_examples=30, deadline=None)
settings.load_profile("ci")


@pytest.fixture
def molecule_sizes() -> gb.GraphSizes:
    """QM9-like: 3-29 nodes, radius-graph-like edges (~n*(n-1)*0.8)."""
    rng = np.random.default_rng(1234)
    n = rng.integers(3, 30, size=2000)
    e = np.maximum(0, (n * (n - 1) * rng.uniform(0.5, 1.0, size=n.shape[0])).astype(np.int64))
    return gb.GraphSizes(n, e)


@pytest.fixture(autouse=True)
def _environment_as_started():
    """Variables a library sets on import (mace-torch sets TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD, so
    every later ``torch.load`` unpickles arbitrary objects) do not outlive the test that
    imported it: later tests, and the processes they start, see the session's environment."""
    yield
    for name in ("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD",):
        if name in os.environ and name not in _docblocks.START_ENV:
            if "mace" in sys.modules:
                # finish mace's imports while its setting holds: e3nn 0.4 torch.loads its
                # constants when imported, which a later `from mace.data import ...` would
                # otherwise do without it (an order-dependent failure)
                for module in ("mace.data", "mace.modules"):
                    with contextlib.suppress(ImportError):
                        importlib.import_module(module)
            del os.environ[name]


def pytest_collection_modifyitems(config, items):
    """Run the JAX tests last: JAX starts threads, and tests that fork worker processes
    (DataLoader workers, process pools) must not fork after that (risk of deadlock)."""
    items.sort(key=lambda item: "jax" in item.nodeid.split("::")[0])


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "requires(*modules): skip unless every named module imports (optional "
        "dependencies: matplotlib, h5py, torch, ...)",
    )


#: Packages graphbatch reads data files from and never imports (qm9pack's own import needs
#: pkg_resources): installed is enough.
DATA_PACKAGES = {"qm9pack", "moses"}


def pytest_runtest_setup(item):
    for mark in item.iter_markers("requires"):
        for name in mark.args:
            if name in DATA_PACKAGES:
                if importlib.util.find_spec(name) is None:
                    pytest.skip(f"package {name!r} is not installed")
            else:
                pytest.importorskip(name)
