"""Seeded random generators. Random state is always derived from ``(seed, epoch)``, never global."""

from __future__ import annotations

import numpy as np

from ._validate import as_nonnegative_int

__all__ = ["epoch_rng", "seed_rng"]


def epoch_rng(seed: int, epoch: int) -> np.random.Generator:
    """Generator for choices that change every epoch (shuffles, assignments)."""
    seed = as_nonnegative_int(seed, "seed")
    epoch = as_nonnegative_int(epoch, "epoch")
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1, epoch)))


def seed_rng(seed: int) -> np.random.Generator:
    """Generator for choices that must stay fixed for a whole run (budgets, padded shapes)."""
    seed = as_nonnegative_int(seed, "seed")
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0,)))
