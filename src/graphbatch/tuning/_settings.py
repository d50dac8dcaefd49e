"""The options of one `graphbatch.tune` call, checked (`TuneSettings`), and memory sizes
(`parse_memory`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._errors import InputError
from .._validate import as_nonnegative_int, as_positive_int
from ._candidates import tolerance_per_mille

__all__ = ["MAX_PROBES", "TuneSettings", "parse_memory"]

#: Most probe shapes `tune` measures.
MAX_PROBES = 20

_UNITS = {
    "b": 1,
    "k": 2**10,
    "kb": 2**10,
    "kib": 2**10,
    "m": 2**20,
    "mb": 2**20,
    "mib": 2**20,
    "g": 2**30,
    "gb": 2**30,
    "gib": 2**30,
    "t": 2**40,
    "tb": 2**40,
    "tib": 2**40,
}


def parse_memory(value: int | float | str | None) -> int | None:
    """Bytes from an int (bytes), a float (GiB) or a string such as ``"2.5GiB"``, ``"800M"``
    (binary units; a bare number is GiB). ``None`` stays ``None``."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise InputError(f"memory limit must be bytes or a size such as '4GiB', got {value!r}")
    if isinstance(value, (int, np.integer)):
        b = int(value)
    elif isinstance(value, float):
        b = int(value * 2**30)
    else:
        text = str(value).strip().lower().replace(" ", "")
        num = text.rstrip("abcdefghijklmnopqrstuvwxyz")
        unit = text[len(num) :] or "gib"
        if unit not in _UNITS:
            raise InputError(
                f"memory limit {value!r}: unknown unit {unit!r} (use B, KiB, MiB, GiB, TiB)"
            )
        try:
            b = int(float(num) * _UNITS[unit])
        except ValueError:
            raise InputError(f"memory limit {value!r} is not a size such as '4GiB'") from None
    if b <= 0:
        raise InputError(f"memory limit must be > 0 bytes, got {value!r}")
    return b


@dataclass(frozen=True)
class TuneSettings:
    """What `graphbatch.tune` searches and how it measures, checked (`TuneSettings.checked`).

    ``model``: the name or factory measured; ``batch_size``: the nominal batch size, with
    configurations within ``batch_tolerance`` (a fraction) of it; ``epochs``: the training
    length compilation is amortised over; ``memory_limit``: bytes (None: no limit);
    ``world_size``: ranks per step; ``validate``: configurations trained for
    ``validate_steps`` steps each, re-measured up to ``validate_retries`` times; ``probes``:
    probe shapes (2 to `MAX_PROBES`); ``rounds``: timed steps per probe and mode;
    ``strategies`` (None: every one), ``max_shapes``, ``seed`` and ``on_oversize``: as the
    candidate plans take them."""

    model: str | Callable[..., Any]
    batch_size: int
    epochs: int
    memory_limit: int | None
    world_size: int
    validate: int
    validate_steps: int
    validate_retries: int
    probes: int
    rounds: int
    batch_tolerance: float
    strategies: Sequence[str] | None
    max_shapes: int
    seed: int
    on_oversize: str

    @classmethod
    def checked(cls, *, memory_limit: int | float | str | None, **options: Any) -> TuneSettings:
        """The settings of ``options`` (`TuneSettings`'s fields) with counts checked and
        ``memory_limit`` parsed (`parse_memory`); bad input raises `InputError` before any
        model is built."""
        probes = as_positive_int(options.pop("probes"), "probes")
        if probes > MAX_PROBES:
            raise InputError(f"probes = {probes} exceeds the limit {MAX_PROBES}")
        if probes < 2:
            raise InputError(f"probes = {probes}: the fit needs at least 2 probe shapes")
        settings = cls(
            probes=probes,
            rounds=as_positive_int(options.pop("rounds"), "rounds"),
            epochs=as_positive_int(options.pop("epochs"), "epochs"),
            validate=as_nonnegative_int(options.pop("validate"), "validate"),
            validate_steps=as_positive_int(options.pop("validate_steps"), "validate_steps"),
            validate_retries=as_nonnegative_int(
                options.pop("validate_retries"), "validate_retries"
            ),
            world_size=as_positive_int(options.pop("world_size"), "world_size"),
            memory_limit=parse_memory(memory_limit),
            **options,
        )
        tolerance_per_mille(settings.batch_tolerance)
        return settings
