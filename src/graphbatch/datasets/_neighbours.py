"""Periodic neighbour lists for atomistic graphs, by vesin (``pip install vesin``).

`neighbour_list` gives MACE's edge set (``mace.data.neighborhood.get_neighborhood``): every
ordered pair ``(i, j)`` and integer cell shift ``S`` with ``|x_j - x_i + S @ cell| < cutoff``,
except an atom with itself at ``S = 0``; periodic images only along periodic directions
(``pbc``, mixed allowed: slabs ``T T F``), self-images included (a one-atom primitive cell has
neighbours), no cell needed without periodicity. Why vesin (docs/atomistic.md, measured by
``benchmarks/io/neighbour_lists.py``): the same edge sets as matscipy (MACE's own) and ASE on
periodic cells, slabs, clusters and one-atom cells, 2.4-3.3x faster than matscipy on cells of
8-256 atoms (as fast on one- and two-atom cells) and 20-200x faster than ASE's
``neighbor_list``, one C++ call per structure.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from .._errors import InputError

__all__ = ["NEIGHBOUR_LIBRARY", "check_cell", "half_pairs", "neighbour_list"]

#: The library computing the edges (recorded in store metadata with its version).
NEIGHBOUR_LIBRARY = "vesin"
#: A periodic cell whose volume (or area, or length, over its periodic vectors) relative to
#: the product of its periodic vectors' lengths is below this is degenerate.
_FLAT = 1e-8

_LISTS: dict[float, Any] = {}


def import_vesin(*, without_torch: bool = False) -> Any:
    """The ``vesin`` module. vesin imports torch (seconds) only to accept torch tensors, which
    graphbatch never passes: with ``without_torch``, in a process that has imported neither yet,
    vesin is imported with torch blocked (and takes NumPy arrays only in this process) -- for
    processes that only build stores: ``graphbatch data build`` and the build's workers."""
    if without_torch and "vesin" not in sys.modules and "torch" not in sys.modules:
        sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` fails
        try:
            import vesin

            return vesin
        except ImportError:  # pragma: no cover - a vesin that needs torch: import it plainly
            for name in [m for m in sys.modules if m == "vesin" or m.startswith("vesin.")]:
                del sys.modules[name]
        finally:
            if sys.modules.get("torch", 0) is None:
                del sys.modules["torch"]
    try:
        import vesin
    except ImportError as exc:  # pragma: no cover - vesin is in the atomistic extra
        raise ImportError(
            "periodic neighbour lists need vesin: pip install 'graphbatch[atomistic]'"
        ) from exc
    return vesin


def _vesin_list(cutoff: float) -> Any:
    nl = _LISTS.get(cutoff)
    if nl is None:
        vesin = import_vesin()
        if len(_LISTS) > 16:
            _LISTS.clear()
        # one thread: results never depend on thread counts, and builds scale by processes;
        # a half list (each pair once, ~15% faster), mirrored by the callers
        nl = _LISTS[cutoff] = vesin.NeighborList(cutoff=cutoff, full_list=False, n_threads=1)
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
    free = vt[rows.shape[0] :]
    box[~pbc] = free
    return box


def half_pairs(
    positions: np.ndarray, box: np.ndarray, pbc: np.ndarray, cutoff: float
) -> tuple[np.ndarray, np.ndarray]:
    """vesin's half list of one structure: ``(pairs, shifts)``, ``[H, 2]`` unsigned and
    ``[H, 3]`` int32, each unordered pair (and each pair of opposite self-images) once.
    ``positions`` float64 ``[n >= 1, 3]`` C-contiguous, ``box`` a full-rank box from `_box`
    (or zeros without periodicity), ``pbc`` bool ``[3]``; ``cutoff`` checked by the caller.
    The full list is ``(i, j, S)`` followed by ``(j, i, -S)`` (`neighbour_list`)."""
    return _vesin_list(cutoff).compute(positions, box, pbc, "PS")


def neighbour_list(
    positions: np.ndarray, cell: np.ndarray, pbc: np.ndarray, cutoff: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(senders, receivers, unit_shifts)`` of one structure: int arrays ``[E]``, ``[E]`` and
    ``[E, 3]`` such that ``positions[receivers] - positions[senders] + unit_shifts @ cell`` are
    the edge vectors, shorter than ``cutoff`` (Å, or the positions' unit). ``cell`` ``[3, 3]``
    (rows are cell vectors) is read only along periodic directions (``pbc`` ``[3]`` bool);
    validate it first with `check_cell`. Edges (deterministic order): vesin's half list, then
    the same pairs reversed with negated shifts."""
    pos = np.ascontiguousarray(positions, dtype=np.float64)
    pbc = np.asarray(pbc, dtype=bool)
    cutoff = float(cutoff)
    if not cutoff > 0 or not np.isfinite(cutoff):
        raise InputError(f"cutoff must be a finite distance > 0, got {cutoff!r}")
    if pos.shape[0] == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 3), np.int64)
    box = _box(np.asarray(cell, dtype=np.float64), pbc)
    pairs, s = half_pairs(pos, box, pbc, cutoff)
    i, j = pairs[:, 0], pairs[:, 1]
    return np.concatenate([i, j]), np.concatenate([j, i]), np.concatenate([s, -s])
