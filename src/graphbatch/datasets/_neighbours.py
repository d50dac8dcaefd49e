"""Periodic neighbour lists for atomistic graphs, by vesin (``pip install vesin``).

`neighbour_list` gives MACE's edge set (``mace.data.neighborhood.get_neighborhood``): every
ordered pair ``(i, j)`` and integer cell shift ``S`` with ``|x_j - x_i + S @ cell| < cutoff``,
except an atom with itself at ``S = 0``; periodic images only along periodic directions
(``pbc``, mixed allowed: slabs ``T T F``), self-images included (a one-atom primitive cell has
neighbours), no cell needed without periodicity. Why vesin (docs/atomistic.md, measured by
``benchmarks/neighbour_lists.py``): the same edge sets as matscipy (MACE's own) and ASE on
periodic cells, slabs, clusters and one-atom cells, 2.4-3.3x faster than matscipy on cells of
8-256 atoms (as fast on one- and two-atom cells) and 20-200x faster than ASE's
``neighbor_list``, one C++ call per structure.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._errors import InputError

__all__ = ["NEIGHBOUR_LIBRARY", "check_cell", "neighbour_list"]

#: The library computing the edges (recorded in store metadata with its version).
NEIGHBOUR_LIBRARY = "vesin"
#: A periodic cell whose volume (or area, or length, over its periodic vectors) relative to
#: the product of its periodic vectors' lengths is below this is degenerate.
_FLAT = 1e-8

_LISTS: dict[float, Any] = {}


def _vesin_list(cutoff: float) -> Any:
    nl = _LISTS.get(cutoff)
    if nl is None:
        try:
            import vesin
        except ImportError as exc:  # pragma: no cover - vesin is in the atomistic extra
            raise ImportError("periodic neighbour lists need vesin: pip install "
                              "'graphbatch[atomistic]'") from exc
        if len(_LISTS) > 16:
            _LISTS.clear()
        # one thread: results never depend on thread counts, and builds scale by processes
        nl = _LISTS[cutoff] = vesin.NeighborList(cutoff=cutoff, full_list=True, n_threads=1)
    return nl


def check_cell(cell: np.ndarray, pbc: np.ndarray) -> str | None:
    """Why ``cell`` cannot serve ``pbc`` (a message), or ``None``: its periodic vectors must be
    finite and linearly independent (a periodic cell of zero volume, or a slab's zero-area
    periodic plane, has no lattice)."""
    if not np.isfinite(cell).all():
        return "is not finite"
    rows = cell[pbc]
    if rows.shape[0] == 0:
        return None
    lengths = np.linalg.norm(rows, axis=1)
    if (lengths == 0).any():
        k = int(np.flatnonzero(pbc)[int(np.flatnonzero(lengths == 0)[0])])
        return f"has a zero vector {k} along a periodic direction"
    gram = rows @ rows.T
    measure = float(np.sqrt(max(np.linalg.det(gram), 0.0)))
    if measure <= _FLAT * float(np.prod(lengths)):
        what = {3: "volume", 2: "area", 1: "length"}[rows.shape[0]]
        return f"has zero {what} over its periodic vectors"
    return None


def _box(cell: np.ndarray, pbc: np.ndarray) -> np.ndarray:
    """A full-rank box for vesin: ``cell`` where it has full rank, else its periodic vectors
    completed by unit vectors orthogonal to them along the non-periodic directions (which vesin
    never shifts along, so their length does not matter)."""
    if not pbc.any():
        return np.zeros((3, 3))
    if abs(np.linalg.det(cell)) > _FLAT * float(np.prod(np.linalg.norm(cell, axis=1)) or 1.0):
        return cell
    box = np.array(cell, dtype=np.float64)
    rows = box[pbc]
    # orthonormal complement of the periodic vectors' span
    _, _, vt = np.linalg.svd(rows)
    free = vt[rows.shape[0]:]
    box[~pbc] = free
    return box


def neighbour_list(positions: np.ndarray, cell: np.ndarray, pbc: np.ndarray,
                   cutoff: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(senders, receivers, unit_shifts)`` of one structure: int arrays ``[E]``, ``[E]`` and
    ``[E, 3]`` such that ``positions[receivers] - positions[senders] + unit_shifts @ cell`` are
    the edge vectors, shorter than ``cutoff`` (Å, or the positions' unit). ``cell`` ``[3, 3]``
    (rows are cell vectors) is read only along periodic directions (``pbc`` ``[3]`` bool);
    validate it first with `check_cell`. Edges come in vesin's order (deterministic)."""
    pos = np.ascontiguousarray(positions, dtype=np.float64)
    pbc = np.asarray(pbc, dtype=bool)
    cutoff = float(cutoff)
    if not cutoff > 0 or not np.isfinite(cutoff):
        raise InputError(f"cutoff must be a finite distance > 0, got {cutoff!r}")
    if pos.shape[0] == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 3), np.int64)
    box = _box(np.asarray(cell, dtype=np.float64), pbc)
    i, j, s = _vesin_list(cutoff).compute(pos, box, pbc, "ijS")
    return i, j, s
