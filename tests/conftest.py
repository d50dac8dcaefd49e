"""Shared fixtures: small seeded size tables."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import settings

import graphbatch as gb

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
