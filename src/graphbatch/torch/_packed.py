"""A batch dict packed into one buffer, to cross from a DataLoader worker to the main process
as one slot of the ring (`graphbatch.torch._slots`) or one shared block: a preset's view
(MACE's) makes its dict in the worker, `pack_layout` lays its tensors out (64-byte aligned, in
the dict's order), `pack_dict` writes them, and `unpack_dict` -- or views made once per layout
from `packed_entries` and `with_values` -- gives the dict back, every tensor a view of the
buffer. Values other than tensors (``num_graphs``, fairchem's ``sid`` lists) travel in the
layout itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["pack_dict", "pack_layout", "packed_entries", "unpack_dict", "with_values"]

_DTYPES_BY_NAME: dict[str, torch.dtype] = {}


def _dtype(name: str) -> torch.dtype:
    t = _DTYPES_BY_NAME.get(name)
    if t is None:
        t = getattr(torch, name, None)
        if not isinstance(t, torch.dtype):
            raise RuntimeError(f"packed batch names an unknown torch dtype {name!r}")
        _DTYPES_BY_NAME[name] = t
    return t


def pack_layout(batch: dict[str, Any]) -> tuple[tuple, int]:
    """``(layout, nbytes)`` of a batch dict packed into one buffer. ``layout`` is ``(entries,
    values)``: per key, in the dict's order, ``(key, offset, shape, dtype name)`` for a tensor
    (each at a 64-byte boundary) or ``(key, -1, None, None)`` for any other value, which
    travels in ``values`` (in the same order); ``entries`` is hashable (a cache key)."""
    entries: list[tuple[str, int, tuple[int, ...] | None, str | None]] = []
    values = []
    at = 0
    for key, value in batch.items():
        if isinstance(value, torch.Tensor):
            entries.append((key, at, tuple(value.shape), str(value.dtype).removeprefix("torch.")))
            at += -(-value.numel() * value.element_size() // 64) * 64
        else:
            entries.append((key, -1, None, None))
            values.append(value)
    return (tuple(entries), tuple(values)), at


def pack_dict(batch: dict[str, Any], layout: tuple, base: torch.Tensor) -> None:
    """Write the tensors of ``batch`` into ``base`` (1-D ``uint8``) as `pack_layout` laid
    them out."""
    for key, at, _, _ in layout[0]:
        if at >= 0:
            value = batch[key]
            nbytes = value.numel() * value.element_size()
            base[at : at + nbytes].view(value.dtype).view(value.shape).copy_(value)


_PACKED: dict[tuple, tuple] = {}


def packed_entries(layout: tuple) -> tuple:
    """`StoreBatcher.layout` entries of a packed layout (cached per layout)."""
    entries = layout[0]
    hit = _PACKED.get(entries)
    if hit is None:
        out = []
        for key, at, shape, dtype in entries:
            if at >= 0:
                t = _dtype(dtype)
                size = int(np.prod(shape, dtype=np.int64)) * t.itemsize
                out.append((key, at, at + size, shape, t))
        if len(_PACKED) >= 256:
            _PACKED.clear()
        hit = _PACKED[entries] = tuple(out)
    return hit


def with_values(tensors: dict[str, Any], layout: tuple) -> dict[str, Any]:
    """The packed batch dict: ``tensors`` and the layout's other values, in its key order."""
    values = iter(layout[1])
    return {key: tensors[key] if at >= 0 else next(values) for key, at, _, _ in layout[0]}


def unpack_dict(base: torch.Tensor, layout: tuple) -> dict[str, Any]:
    """The batch dict packed in ``base`` (1-D ``uint8`` tensor) by `pack_dict`: every tensor a
    view of ``base``."""
    tensors = {k: base[a:e].view(t).view(shp) for k, a, e, shp, t in packed_entries(layout)}
    return with_values(tensors, layout)
