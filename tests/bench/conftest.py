"""Fixtures of the bench tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def data():
    """The bench's in-memory QM9 data of 80 molecules (one per test module)."""
    pytest.importorskip("torch")
    pytest.importorskip("torch_geometric")
    from graphbatch.bench._data import load_bench_data

    return load_bench_data("qm9", subset=80, seed=0)
