"""Small input-validation helpers shared by the core (raise, never assert)."""

from __future__ import annotations

import math
import numbers

import numpy as np
from numpy.typing import ArrayLike

from ._errors import InputError, InputTypeError

__all__ = [
    "MAX_COUNT",
    "MAX_SHAPE",
    "MAX_TOTAL",
    "MAX_WORLD_SIZE",
    "as_bool",
    "as_count_array",
    "as_positive_int",
    "as_nonnegative_int",
    "as_index_array",
    "check_total",
]

#: Largest accepted per-graph count (nodes, edges, bytes): 2**36 (about 6.9e10).
MAX_COUNT = 2**36
#: Largest accepted padded-shape field (``Budget`` nodes/edges/graphs, ``batch_size``,
#: ``world_size``, rounding ``multiple``): 2**40 (about 1.1e12), so a graph of ``MAX_COUNT``
#: fits a budget and a shape times a small factor stays far from int64 overflow.
MAX_SHAPE = 2**40
#: Largest accepted ``world_size`` (ranks of a distributed plan): 2**20. A plan holds one batch
#: per rank and step, so the bound keeps a plan's arrays small for any size table.
MAX_WORLD_SIZE = 2**20
#: Largest accepted total of one size-table column (sum over all graphs): 2**53, the largest
#: integer float64 holds exactly, so int64 sums, float means and products of a total with a
#: small factor cannot overflow.
MAX_TOTAL = 2**53


def _limit(maximum: int) -> str:
    """``maximum`` for messages, with its power of two when it is one: ``1024 (2**10)``."""
    if maximum > 0 and maximum & (maximum - 1) == 0:
        return f"{maximum} (2**{maximum.bit_length() - 1})"
    return str(maximum)


def as_count_array(values: ArrayLike, name: str, maximum: int = MAX_COUNT) -> np.ndarray:
    """Return ``values`` as a 1-D int64 array of integers in ``[0, maximum]``.

    Integral floats are accepted (``3.0`` -> 3); anything else raises ``ValueError`` or
    ``TypeError`` naming the array, the first offending index and its value. Bounds are checked
    on the input dtype, before the cast (a ``uint64`` 2**64-1 is refused, not wrapped to -1).
    """
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise InputError(f"{name} must be a 1-D array, got shape {arr.shape}")
    if arr.dtype == bool:
        raise InputTypeError(f"{name} must hold integers, got booleans")
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr) | (arr != np.round(arr))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(f"{name}[{i}] = {arr[i].item()!r} is not an integer")
    elif arr.dtype.kind not in "iu":
        raise InputTypeError(f"{name} must hold integers, got dtype {arr.dtype}")
    if arr.size and (arr < 0).any():
        i = int(np.flatnonzero(arr < 0)[0])
        raise InputError(f"{name}[{i}] = {arr[i].item()} is negative")
    if arr.size and (arr > maximum).any():
        i = int(np.flatnonzero(arr > maximum)[0])
        raise InputError(f"{name}[{i}] = {arr[i].item()} exceeds the limit {_limit(maximum)}")
    return arr.astype(np.int64, copy=False)


def check_total(arr: np.ndarray, name: str, maximum: int = MAX_TOTAL) -> None:
    """Raise ``ValueError`` when the sum of the non-negative ``arr`` exceeds ``maximum``.

    The sum is taken in float64, which cannot overflow (relative error ~1e-16 near the limit).
    """
    total = float(np.sum(arr, dtype=np.float64))
    if total > maximum:
        raise InputError(
            f"{name} sums to {total:.6g}, over the limit {_limit(maximum)} on a column total"
        )


def _as_int(value: object, name: str) -> int:
    if isinstance(value, (bool, np.bool_)):  # a flag, never a count, seed or offset
        raise InputTypeError(f"{name} must be an integer, got {value!r}")
    if not isinstance(value, numbers.Integral):
        if isinstance(value, numbers.Real) and float(value).is_integer():
            return int(math.trunc(value))
        raise InputTypeError(f"{name} must be an integer, got {value!r}")
    return int(value)


def _check_max(v: int, name: str, maximum: int | None) -> int:
    if maximum is not None and v > maximum:
        raise InputError(f"{name} = {v} exceeds the limit {_limit(maximum)}")
    return v


def as_positive_int(value: object, name: str, maximum: int | None = None) -> int:
    """``value`` as an ``int`` in ``[1, maximum]`` (``None``: unbounded), else a clear error."""
    v = _as_int(value, name)
    if v < 1:
        raise InputError(f"{name} must be >= 1, got {v}")
    return _check_max(v, name, maximum)


def as_nonnegative_int(value: object, name: str, maximum: int | None = None) -> int:
    """``value`` as an ``int`` in ``[0, maximum]`` (``None``: unbounded), else a clear error."""
    v = _as_int(value, name)
    if v < 0:
        raise InputError(f"{name} must be >= 0, got {v}")
    return _check_max(v, name, maximum)


def as_bool(value: object, name: str) -> bool:
    """``value`` as a ``bool`` if it is one (``bool`` or ``numpy.bool_``); anything else -- a
    string such as ``"false"``, ``0``, ``None`` -- is an `InputTypeError` naming it (never a
    truth value: ``bool("false")`` is True)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise InputTypeError(f"{name} must be True or False, got {value!r}")


def as_index_array(values: ArrayLike, name: str, limit: int | None = None) -> np.ndarray:
    """``values`` as a non-empty 1-D int64 array of distinct indices in ``[0, limit)``
    (``limit=None``: unbounded), e.g. a dataset split; else a clear error naming a bad value."""
    arr = np.asarray(values)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise InputTypeError(
            f"{name} must be a 1-D sequence of ints, got {arr.dtype} values of shape {arr.shape}"
        )
    if arr.shape[0] == 0:
        raise InputError(f"{name} is empty: it needs at least one index")
    arr = arr.astype(np.int64)
    if arr.min() < 0:
        raise InputError(f"{name} must be >= 0, got {int(arr.min())}")
    if limit is not None and arr.max() >= limit:
        raise InputError(f"{name} holds {int(arr.max())}, out of range for {limit} graphs")
    uniq, counts = np.unique(arr, return_counts=True)
    if uniq.shape[0] != arr.shape[0]:
        twice = int(np.flatnonzero(counts > 1)[0])
        raise InputError(
            f"{name} holds {int(uniq[twice])} {int(counts[twice])} times; each "
            "graph comes once per epoch"
        )
    return arr
