"""Small input-validation helpers shared by the core (raise, never assert)."""

from __future__ import annotations

import numbers

import numpy as np

__all__ = ["as_count_array", "as_positive_int", "as_nonnegative_int"]


def as_count_array(values, name: str) -> np.ndarray:
    """Return ``values`` as a 1-D int64 array of non-negative integers.

    Integral floats are accepted (``3.0`` -> 3); anything else raises ``ValueError`` or
    ``TypeError`` naming the array, the first offending index and its value.
    """
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array, got shape {arr.shape}")
    if arr.dtype == bool:
        raise TypeError(f"{name} must hold integers, got booleans")
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr) | (arr != np.round(arr))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{name}[{i}] = {arr[i].item()!r} is not an integer")
    elif arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}")
    if arr.size and (arr < 0).any():
        i = int(np.flatnonzero(arr < 0)[0])
        raise ValueError(f"{name}[{i}] = {arr[i].item()} is negative")
    return arr.astype(np.int64, copy=False)


def _as_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, numbers.Real) and float(value).is_integer():
            return int(value)
        raise TypeError(f"{name} must be an integer, got {value!r}")
    return int(value)


def as_positive_int(value, name: str) -> int:
    """``value`` as an ``int`` >= 1, else a clear error quoting it."""
    v = _as_int(value, name)
    if v < 1:
        raise ValueError(f"{name} must be >= 1, got {v}")
    return v


def as_nonnegative_int(value, name: str) -> int:
    """``value`` as an ``int`` >= 0, else a clear error quoting it."""
    v = _as_int(value, name)
    if v < 0:
        raise ValueError(f"{name} must be >= 0, got {v}")
    return v
