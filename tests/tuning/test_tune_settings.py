"""`TuneSettings.checked`: what `graphbatch.tune` checks before any model is built, in the
order it checks it, through the public `tune` and the settings object."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import graphbatch as gb
from graphbatch import InputError
from graphbatch.tuning import MAX_PROBES
from graphbatch.tuning._settings import TuneSettings

GOOD: dict[str, Any] = dict(
    model="schnet",
    batch_size=64,
    epochs=10,
    memory_limit="2GiB",
    world_size=1,
    validate=0,
    validate_steps=20,
    validate_retries=2,
    probes=8,
    rounds=5,
    batch_tolerance=0.1,
    strategies=None,
    max_shapes=8,
    seed=0,
    on_oversize="error",
)


def test_checked_keeps_the_options_and_parses_the_limit():
    s = TuneSettings.checked(**GOOD)
    assert s.memory_limit == 2 * 2**30
    assert (s.probes, s.rounds, s.epochs, s.batch_size) == (8, 5, 10, 64)


@given(st.integers(-3, MAX_PROBES + 5))
def test_probes_between_2_and_the_limit(probes):
    if 2 <= probes <= MAX_PROBES:
        assert TuneSettings.checked(**{**GOOD, "probes": probes}).probes == probes
    else:
        with pytest.raises(InputError, match="probes"):
            TuneSettings.checked(**{**GOOD, "probes": probes})


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("rounds", 0, "rounds"),
        ("epochs", -1, "epochs"),
        ("validate", -1, "validate"),
        ("validate_steps", 0, "validate_steps"),
        ("validate_retries", -2, "validate_retries"),
        ("world_size", 0, "world_size"),
        ("memory_limit", "4 parsecs", "unit"),
        ("batch_tolerance", 3.0, "tolerance"),
    ],
)
def test_bad_option_raises_before_any_model_is_built(key, value, message):
    with pytest.raises(InputError, match=message):
        TuneSettings.checked(**{**GOOD, key: value})
    sizes = gb.GraphSizes(np.array([3, 4, 5]), np.array([4, 6, 8]))
    with pytest.raises(InputError, match=message):  # the factory is never resolved
        gb.tune(sizes, model="no_such_module:factory", **{key: value})
