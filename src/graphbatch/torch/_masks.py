"""The active padding masks: `padding_masks` (a nestable context), `active_masks`, the mask of a
given row count, and `batch_edges` (PyG SchNet's interaction graph from the active batch).

Shared by the masked normalisations (`_norm.py`, `_pyg_norm.py`); the stack of active masks is
pushed by `padding_masks` and by the hooks `convert_masked_norm` installs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import torch

from .._errors import InputError, InputTypeError

__all__ = [
    "PaddingMasks",
    "active_masks",
    "batch_edges",
    "mask_for_rows",
    "masks_of",
    "padding_masks",
    "push_masks",
    "pop_masks",
]


class PaddingMasks(NamedTuple):
    """The bool masks (True = real) of one padded batch, and its ``edge_index`` (for
    `batch_edges`)."""

    node: torch.Tensor
    edge: torch.Tensor
    graph: torch.Tensor
    edge_index: torch.Tensor | None = None


_ACTIVE: list[PaddingMasks | None] = []  # innermost last; None: a hooked call without a batch


def _get(batch: Any, key: str) -> Any:
    if isinstance(batch, dict):
        return batch.get(key)
    try:
        return batch[key] if hasattr(batch, "keys") else getattr(batch, key, None)
    except (KeyError, AttributeError):
        return None


def masks_of(batch: Any) -> PaddingMasks | None:
    """The masks of a padded batch (``Batch`` or dict with ``node_mask``...), else ``None``."""
    node = _get(batch, "node_mask")
    if not isinstance(node, torch.Tensor):
        return None
    return PaddingMasks(
        node, _get(batch, "edge_mask"), _get(batch, "graph_mask"), _get(batch, "edge_index")
    )


@contextmanager
def padding_masks(batch: Any) -> Iterator[PaddingMasks]:
    """Make ``batch``'s padding masks the active ones inside the ``with`` block (nestable)."""
    masks = batch if isinstance(batch, PaddingMasks) else masks_of(batch)
    if masks is None:
        raise InputTypeError(
            f"padding_masks needs a padded batch with node_mask/edge_mask/graph_mask, "
            f"got {type(batch).__name__}"
        )
    _ACTIVE.append(masks)
    try:
        yield masks
    finally:
        _ACTIVE.pop()


def active_masks() -> PaddingMasks | None:
    """The innermost active `padding_masks`, or ``None``."""
    for masks in reversed(_ACTIVE):
        if masks is not None:
            return masks
    return None


def mask_for_rows(rows: int) -> torch.Tensor | None:
    """The active mask with ``rows`` entries: node mask first, then edge, then graph."""
    masks = active_masks()
    if masks is None:
        return None
    trio = masks[:3]
    for m in trio:
        if isinstance(m, torch.Tensor) and m.shape[0] == rows:
            return m
    raise InputError(
        f"no padding mask has {rows} rows (node/edge/graph masks have "
        f"{[None if m is None else m.shape[0] for m in trio]}); pass mask= explicitly"
    )


def batch_edges(
    pos: torch.Tensor, batch: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``interaction_graph`` for PyG's SchNet (and models with the same hook): the active
    batch's ``edge_index`` and edge lengths ``||pos[src] - pos[dst]||`` (``Tensor.norm``).

    The batch is the one of the innermost `padding_masks` context (or of a model converted by
    `convert_masked_norm` that received the batch); graphbatch's edges replace PyG's radius
    graph (which needs ``torch-cluster``/``pyg-lib``), so the shapes stay fixed and padding
    edges only join padding nodes, at a non-zero length by default. ``batch`` is unused.
    """
    masks = active_masks()
    if masks is None or masks.edge_index is None:
        raise RuntimeError(
            "batch_edges needs an active batch: call the model inside "
            "`with graphbatch.torch.padding_masks(batch):`"
        )
    edge_index = masks.edge_index
    return edge_index, (pos[edge_index[0]] - pos[edge_index[1]]).norm(dim=-1)


def push_masks(masks: PaddingMasks | None) -> None:
    """Make ``masks`` the innermost active ones (``None``: a call without a padded batch)."""
    _ACTIVE.append(masks)


def pop_masks() -> None:
    """Drop the innermost entry pushed by `push_masks` (nothing when none is left)."""
    if _ACTIVE:
        _ACTIVE.pop()
