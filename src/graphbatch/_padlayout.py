"""Where padding goes inside a padded batch: padding-edge wiring and padding-node positions.

Pure NumPy: the geometry under the padding kernel (`graphbatch._padkernel`), which every
collation path calls. A padded batch of shape ``(n_node, n_edge,
n_graph)`` holding ``N`` real nodes and ``E`` real edges has ``P = n_node - N >= 1`` padding nodes
(indices ``N .. n_node-1``) and ``n_edge - E`` padding edges, which connect padding nodes only.
Which graph owns them is the layout (`graphbatch._padkernel.padding_owner`): the torch adapter
gives them to the last graph slot ``n_graph - 1`` (so ``batch.max() + 1 == n_graph``); the JAX
adapter keeps ``jraph.pad_with_graphs``' layout, where the first padding graph owns them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from ._errors import InputError, InputTypeError
from ._validate import as_nonnegative_int, as_positive_int

if TYPE_CHECKING:
    from ._plan import BatchPlan

__all__ = [
    "auto_spacing",
    "padding_edge_index",
    "padding_positions",
    "check_cutoff",
    "short_padding_batches",
]


def check_cutoff(cutoff: Any) -> float | None:
    """``cutoff`` as a positive finite float (``None`` passes through), else ``ValueError``."""
    if cutoff is None:
        return None
    try:
        c = float(cutoff)
    except (TypeError, ValueError):
        raise InputTypeError(f"cutoff must be a number, got {cutoff!r}") from None
    if not np.isfinite(c) or c <= 0:
        raise InputError(f"cutoff must be a positive finite distance, got {cutoff!r}")
    return c


def padding_edge_index(
    num_real_nodes: int,
    n_node: int,
    num_pad_edges: int,
    *,
    spread: bool,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Sender/receiver indices ``[2, num_pad_edges]`` (int64) of the padding edges.

    Without ``spread`` every padding edge is a self-loop of the first padding node (jraph's
    convention). With ``spread`` and ``P >= 2`` padding nodes, padding edge ``k`` joins padding
    node ``j = k mod (P - 1)`` to ``j + 1``: no padding edge is a self-loop, and every one joins
    two consecutive padding nodes (with `padding_positions`, all have the same length). With
    ``P == 1`` a self-loop is the only choice and is returned.

    ``out`` (optional): an integer array ``[2, num_pad_edges]`` (e.g. the padding part of a
    batch's ``edge_index``) written in place and returned instead of a new int64 array.
    """
    n_real = as_nonnegative_int(num_real_nodes, "num_real_nodes")
    n_node = as_positive_int(n_node, "n_node")
    e = as_nonnegative_int(num_pad_edges, "num_pad_edges")
    p = n_node - n_real
    if p < 1:
        raise InputError(f"{n_real} real nodes leave no padding node in a batch of {n_node} nodes")
    if out is None:
        out = np.empty((2, e), dtype=np.int64)
    elif out.shape != (2, e) or out.dtype.kind not in "iu":
        raise InputError(
            f"out must be an integer array of shape (2, {e}), got {out.dtype} {out.shape}"
        )
    if not spread or p == 1:
        out[...] = n_real
    else:
        j = np.arange(e, dtype=np.int64)
        j %= p - 1
        j += n_real
        out[0] = j
        j += 1
        out[1] = j
    return out


def padding_positions(
    real_max: ArrayLike, num_pad_nodes: int, cutoff: float, dtype: DTypeLike = np.float64
) -> np.ndarray:
    """Coordinates ``[P, D]`` for the padding nodes: padding edges are longer than ``cutoff``.

    Padding node ``j`` sits at ``real_max + (j + 1) * 2 * cutoff`` on every axis, where
    ``real_max[d]`` is the largest real coordinate on axis ``d`` (0 when there are no real nodes).
    Hence two padding nodes are at least ``2 * cutoff`` apart (consecutive ones exactly
    ``2 * cutoff * sqrt(D)``) and every padding node is farther than ``2 * cutoff`` from every
    real node (on each axis separately).
    """
    real_max = np.asarray(real_max, dtype=np.float64).reshape(-1)
    if not np.isfinite(real_max).all():
        raise InputError(
            f"real node positions must be finite, got a maximum of {real_max.tolist()}"
        )
    p = as_nonnegative_int(num_pad_nodes, "num_pad_nodes")
    c = check_cutoff(cutoff)
    if c is None:
        raise InputTypeError("cutoff must be a number, got None")
    step = 2.0 * c
    j = np.arange(1, p + 1, dtype=np.float64)[:, None]
    return (real_max[None, :] + j * step).astype(dtype)


def auto_spacing(real_positions: ArrayLike) -> float:
    """The default padding spacing when no ``cutoff`` is given: ``max(1, R)`` where ``R`` is the
    largest coordinate range (max - min on one axis) of the real nodes ``[N, D]`` (1 without
    real nodes). Used as `padding_positions`' ``cutoff``, it makes every padding edge (length
    ``2 * s * sqrt(D)``) longer than twice the diameter of every real graph of the batch."""
    pos = np.asarray(real_positions, dtype=np.float64)
    if pos.shape[0] == 0:
        return 1.0
    pos = pos.reshape(pos.shape[0], int(np.prod(pos.shape[1:])))
    if not np.isfinite(pos).all():
        raise InputError("real node positions must be finite to place padding nodes")
    return float(max(1.0, (pos.max(axis=0) - pos.min(axis=0)).max(initial=0.0)))


def short_padding_batches(plan: BatchPlan) -> np.ndarray:
    """Batches of ``plan`` where padding edges must be self-loops even with a ``cutoff``.

    That happens when real nodes fill all but the one reserved padding node
    (``pad_nodes - real_nodes == 1``) and there is at least one padding edge. Returns the batch
    indices (int64). Empty means a ``cutoff`` is honoured by every batch of the plan.
    """
    one_pad_node = (plan.pad_nodes - plan.real_nodes) == 1
    has_pad_edges = (plan.pad_edges - plan.real_edges) > 0
    return np.flatnonzero(one_pad_node & has_pad_edges).astype(np.int64)
