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

Bounded work: vesin's cell list visits about ``(2 s + 1)`` cells along each axis, ``s`` the
cutoff over the box's thickness there (lattice-plane spacing along a periodic direction, the
atoms' extent along another), and every atom pair in them -- a periodic cell of nearly zero
volume, or a cutoff far larger than a flat molecule, would keep it busy for hours in C code
where no signal reaches it. `search_steps` estimates that work up front; where it exceeds
`_VESIN_STEPS` and checking every atom pair against every needed periodic image in NumPy
(`_all_pairs_half`) is cheaper, that gives the same edge set (a cluster with a huge cutoff:
all pairs, at once); where both exceed `MAX_SEARCH_STEPS`, or a cell would have more than
`MAX_PAIRS` pairs, the structure is refused with the number (`half_pairs`).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from .._errors import InputError

__all__ = [
    "MAX_PAIRS",
    "MAX_SEARCH_STEPS",
    "NEIGHBOUR_LIBRARY",
    "check_cell",
    "half_pairs",
    "neighbour_list",
    "search_steps",
]

#: The library computing the edges (recorded in store metadata with its version).
NEIGHBOUR_LIBRARY = "vesin"
#: A periodic cell whose volume (or area, or length, over its periodic vectors) relative to
#: the product of its periodic vectors' lengths is below this is degenerate.
_FLAT = 1e-8

#: At most this many neighbour-search steps per structure (one step: a cell pair or an atom
#: pair visited by vesin, ~3 ns here; `search_steps`), about 3 s; a structure needing more is
#: refused (the edges alone would take gigabytes).
MAX_SEARCH_STEPS = 10**9
#: At most about this many pairs (half the edges) per structure periodic in every direction,
#: estimated up front (`_edges`): vesin takes ~0.4 us per pair (4 s); a box of 200,000 atoms
#: at 6 Å has ~9e6.
MAX_PAIRS = 10**7
#: Up to this many estimated steps vesin always runs (every ordinary structure: its edge order).
_VESIN_STEPS = 10**7
#: vesin steps one NumPy candidate (an atom pair and a periodic image) costs, about.
_PAIR_COST = 8
#: vesin's cap on the number of cells of its cell list.
_MAX_CELLS = 1e5
#: Candidates per NumPy block of `_all_pairs_half` (bounds its memory, ~20 MB).
_BLOCK = 1 << 18

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


def _thickness(boxes: np.ndarray, pbcs: np.ndarray, extents: np.ndarray) -> np.ndarray:
    """``[F, 3]`` thickness of each structure's search box along each axis, as vesin sees it:
    the lattice-plane spacing ``1 / |b_k|`` (``b_k`` the reciprocal vectors of ``boxes``
    ``[F, 3, 3]``) along a periodic direction, the atoms' extent along a Cartesian axis
    otherwise (1 where all atoms share the coordinate)."""
    periodic = np.asarray(pbcs.any(axis=1))
    safe = np.where(periodic[:, None, None], boxes, np.eye(3))
    with np.errstate(all="ignore"):
        spacing = 1.0 / np.linalg.norm(np.linalg.inv(safe), axis=1)
    flat = np.where(extents < 1e-6, 1.0, extents)
    return np.where(pbcs, spacing, flat)


def search_steps(
    boxes: np.ndarray, pbcs: np.ndarray, extents: np.ndarray, counts: np.ndarray, cutoff: float
) -> np.ndarray:
    """float64 ``[F]``: about how many steps vesin's cell list takes for each of ``F``
    structures (``boxes`` ``[F, 3, 3]`` full-rank boxes from `_box`, or zeros without
    periodicity; ``pbcs`` ``[F, 3]``; ``extents`` ``[F, 3]`` the atoms' coordinate ranges;
    ``counts`` ``[F]`` atoms): ``min(C, n) + n^2 / C`` cell and atom-pair visits times the
    ``prod(2 s + 1)`` cells searched around each of the ``C`` cells (vesin's cells are at
    least ``cutoff`` thick, at most `_MAX_CELLS` of them; ``s`` = cutoff / cell thickness)."""
    d = _thickness(boxes, pbcs, extents)
    with np.errstate(all="ignore"):
        cells = np.maximum(1.0, np.floor(d / cutoff))
        total = cells.prod(axis=1)
        scale = np.where(total > _MAX_CELLS, np.cbrt(_MAX_CELLS / total), 1.0)
        cells = np.maximum(1.0, np.floor(cells * scale[:, None]))
        total = cells.prod(axis=1)
        reach = np.maximum(1.0, np.ceil(cutoff * cells / d))
        n = counts.astype(np.float64)
        steps = (2 * reach + 1).prod(axis=1) * (np.minimum(total, n) + n * n / total)
    return np.where(np.isfinite(steps), steps, np.inf)


def _images(box: np.ndarray, pbc: np.ndarray, cutoff: float) -> np.ndarray:
    """int64 ``[3]``: how many periodic images either way along each cell vector can hold a
    neighbour of an atom wrapped into the cell (0 along non-periodic directions)."""
    if not pbc.any():
        return np.zeros(3, dtype=np.int64)
    spacing = _thickness(box[None], pbc[None], np.ones((1, 3)))[0]
    with np.errstate(all="ignore"):
        k = np.ceil(cutoff / spacing) + 1
    return np.where(pbc, np.minimum(k, 2.0**40), 0).astype(np.int64)


def _all_pairs_half(
    pos: np.ndarray, box: np.ndarray, pbc: np.ndarray, cutoff: float, images: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """vesin's half list without its cell list: every pair ``i <= j`` of atoms wrapped into the
    cell against every periodic image within ``images`` (`_images`), in NumPy blocks of
    `_BLOCK` candidates. The same set as `half_pairs`: pairs ``i < j`` with any shift, an
    atom with its own image for one of each ``+S``/``-S`` (``S`` lexicographically positive).
    Order: by pair ``(i, j)`` row-major, then by image."""
    n = pos.shape[0]
    if pbc.any():
        wrap = np.floor(pos @ np.linalg.inv(box)) * pbc  # whole cells each atom lies outside
        base = pos - wrap @ box
    else:
        wrap, base = np.zeros_like(pos), pos
    axes = [np.arange(-k, k + 1) for k in images.tolist()]
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3).astype(np.int64)
    offsets = grid.astype(np.float64) @ box if pbc.any() else np.zeros((1, 3))
    forward = (grid[:, 0] > 0) | (
        (grid[:, 0] == 0) & ((grid[:, 1] > 0) | ((grid[:, 1] == 0) & (grid[:, 2] > 0)))
    )
    iu, ju = np.triu_indices(n)
    m = grid.shape[0]
    total = iu.shape[0] * m
    cut2 = cutoff * cutoff
    pairs, shifts = [], []
    for a in range(0, total, _BLOCK):
        flat = np.arange(a, min(total, a + _BLOCK), dtype=np.int64)
        p, g = np.divmod(flat, m)
        i, j = iu[p], ju[p]
        v = base[j] - base[i] + offsets[g]
        keep = np.einsum("ij,ij->i", v, v) < cut2
        keep &= (i != j) | forward[g]
        i, j, g = i[keep], j[keep], g[keep]
        pairs.append(np.stack([i, j], 1))
        # positions[j] - positions[i] + S @ cell, with positions = base + wrap @ cell
        shifts.append(grid[g] - wrap[j].astype(np.int64) + wrap[i].astype(np.int64))
    if not pairs:
        return np.zeros((0, 2), np.uint64), np.zeros((0, 3), np.int32)
    return np.concatenate(pairs).astype(np.uint64), np.concatenate(shifts).astype(np.int32)


def _too_much(
    pos: np.ndarray, box: np.ndarray, pbc: np.ndarray, cutoff: float, what: str
) -> InputError:
    """The one-line refusal of a structure whose neighbour list cannot finish (``what``: the
    number over its limit)."""
    n = pos.shape[0]
    if pbc.any():
        spacing = _thickness(box[None], pbc[None], np.ones((1, 3)))[0]
        pairs = list(zip(spacing.tolist(), pbc.tolist(), strict=True))
        images = ", ".join(
            f"{min(np.ceil(cutoff / d), 2**62):,.0f}" if p else "-" for d, p in pairs
        )
        planes = ", ".join(f"{d:.3g}" if p else "-" for d, p in pairs)
        why = (
            f"{images} periodic images along the cell vectors at cutoff {cutoff:g} Å "
            f"(lattice planes {planes} Å apart; {n} atom{'s' if n != 1 else ''}); "
            "use a smaller cutoff or a thicker cell"
        )
    else:
        why = f"{n} atoms, every pair within cutoff {cutoff:g} Å; use a smaller cutoff"
    return InputError(f"the neighbour list needs {what}: {why}")


def _edges(box: np.ndarray, pbc: np.ndarray, n: int, cutoff: float) -> float:
    """About how many half-list pairs a structure periodic in all directions has: ``n^2 / 2``
    times the sphere of radius ``cutoff`` over the cell volume (0 if not periodic in all)."""
    if not pbc.all():
        return 0.0
    volume = abs(float(np.linalg.det(box)))
    return n * n / 2 * (4 / 3 * np.pi * cutoff**3) / volume if volume > 0 else np.inf


def _vesin_half(
    positions: np.ndarray, box: np.ndarray, pbc: np.ndarray, cutoff: float
) -> tuple[np.ndarray, np.ndarray]:
    """vesin's half list of one structure (no bound on its work: see `half_pairs`)."""
    return _vesin_list(cutoff).compute(positions, box, pbc, "PS")


def half_pairs(
    positions: np.ndarray,
    box: np.ndarray,
    pbc: np.ndarray,
    cutoff: float,
    steps: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """vesin's half list of one structure: ``(pairs, shifts)``, ``[H, 2]`` unsigned and
    ``[H, 3]`` int32, each unordered pair (and each pair of opposite self-images) once.
    ``positions`` float64 ``[n >= 1, 3]`` C-contiguous, ``box`` a full-rank box from `_box`
    (or zeros without periodicity), ``pbc`` bool ``[3]``; ``cutoff`` checked by the caller.
    The full list is ``(i, j, S)`` followed by ``(j, i, -S)`` (`neighbour_list`).

    Bounded (module docstring): ``steps`` (`search_steps`, computed here if not given) up to
    `_VESIN_STEPS` runs vesin; above, a periodic cell with more than `MAX_PAIRS` estimated pairs
    is refused, else the cheaper of vesin and `_all_pairs_half` runs if it fits
    `MAX_SEARCH_STEPS`; what does not fit raises `InputError` with the numbers."""
    if steps is None:
        extents = np.ptp(positions, axis=0)[None]
        counts = np.array([positions.shape[0]])
        steps = float(search_steps(box[None], pbc[None], extents, counts, cutoff)[0])
    if steps <= _VESIN_STEPS:
        return _vesin_half(positions, box, pbc, cutoff)
    n = positions.shape[0]
    edges = _edges(box, pbc, n, cutoff)
    if edges > MAX_PAIRS:
        raise _too_much(
            positions, box, pbc, cutoff, f"~{edges:.3g} pairs, over the limit of {MAX_PAIRS:.0e}"
        )
    images = _images(box, pbc, cutoff)
    brute = _PAIR_COST * float(np.prod(2.0 * images + 1)) * n * (n + 1) / 2
    if brute < steps and brute <= MAX_SEARCH_STEPS:
        return _all_pairs_half(positions, box, pbc, cutoff, images)
    if steps <= MAX_SEARCH_STEPS:
        return _vesin_half(positions, box, pbc, cutoff)
    cost = min(steps, brute)
    raise _too_much(
        positions,
        box,
        pbc,
        cutoff,
        f"~{cost:.3g} search steps, over the limit of {MAX_SEARCH_STEPS:.0e}",
    )


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
