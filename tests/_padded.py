"""Equality of two `graphbatch._padbatch.PaddedArrays` on content: every field, dtype and
structure array; the buffer and offsets (memory layout, with undefined alignment gaps) are not
compared."""

from __future__ import annotations

import dataclasses

import numpy as np


def assert_same_padded(x, y) -> None:
    for f in dataclasses.fields(x):
        if f.name in ("buffer", "offsets"):  # memory layout: not content (gaps are undefined)
            continue
        u, v = getattr(x, f.name), getattr(y, f.name)
        if isinstance(u, dict):
            assert u.keys() == v.keys(), f.name
            for k in u:
                assert u[k].dtype == v[k].dtype and np.array_equal(u[k], v[k]), (f.name, k)
        elif isinstance(u, np.ndarray):
            assert u.dtype == v.dtype and np.array_equal(u, v), f.name
        else:
            assert u == v, f.name
