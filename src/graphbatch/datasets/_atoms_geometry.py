"""The geometry of a block of atomistic frames, checked and turned into MACE's edge lists
(`block_geometry`): vectorised over the block -- NumPy checks of every frame at once, one
vesin call per structure (`graphbatch.datasets._neighbours.half_pairs`), the full edge lists
of all structures assembled in one pass.

A frame is refused (`AtomsInputError` naming the file, frame and field) when it has no atoms,
an atomic number outside 1..118, a position that is not finite, a cell `check_cell` refuses,
a neighbour list that cannot finish (`half_pairs`) or a periodic image more than `SHIFT_MAX`
cells away within the cutoff; the first such frame in block order is named, and for it the
first of these checks in that order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .._errors import AtomsInputError, InputError
from ._atoms import SHIFT_MAX, check_finite, frame_error
from ._extxyz import AtomsFrame
from ._neighbours import _FLAT, _box, check_cell, half_pairs, search_steps

__all__ = ["BlockGeometry", "block_geometry"]


@dataclass(frozen=True)
class BlockGeometry:
    """The checked geometry and edges of ``F`` frames with ``N`` atoms and ``E`` edges in all.

    ``atom_counts`` int64 ``[F]``; ``numbers`` ``[N]`` atomic numbers (1..118);
    ``positions`` float64 ``[N, 3]`` (Å); ``cells`` float64 ``[F, 3, 3]`` (rows are cell
    vectors); ``pbcs`` bool ``[F, 3]``; ``edge_counts`` int64 ``[F]``; ``senders``,
    ``receivers`` int64 ``[E]`` (indices local to their structure) and ``unit_shifts``
    ``[E, 3]`` (|values| <= `SHIFT_MAX`): each structure's vesin half list, then the same
    pairs reversed with negated shifts, so that ``positions[receiver] - positions[sender] +
    unit_shift @ cell`` is the edge vector (shorter than the cutoff)."""

    atom_counts: np.ndarray
    numbers: np.ndarray
    positions: np.ndarray
    cells: np.ndarray
    pbcs: np.ndarray
    edge_counts: np.ndarray
    senders: np.ndarray
    receivers: np.ndarray
    unit_shifts: np.ndarray


def _symbol(z: int) -> str:
    from ase.data import chemical_symbols

    return chemical_symbols[z] if 0 <= z < len(chemical_symbols) else "?"


def _refusal(frame: AtomsFrame, where: str) -> AtomsInputError:
    """The error of ``frame``, which has no atoms, a bad atomic number or position, or a cell
    `check_cell` refuses (the first of these, in that order)."""
    if len(frame) == 0:
        return frame_error(where, frame.frame, "atoms", "the frame has no atoms")
    z = frame.numbers
    if z.min() < 1 or z.max() > 118:
        bad = int(np.flatnonzero((z < 1) | (z > 118))[0])
        return frame_error(
            where,
            frame.frame,
            "atomic_numbers",
            f"atom {bad} has atomic number {int(z[bad])} (unknown species "
            f"{_symbol(int(z[bad]))!r}; need 1..118)",
        )
    try:
        check_finite(np.asarray(frame.positions, dtype=np.float64), where, frame.frame, "positions")
    except AtomsInputError as error:
        return error
    cell = np.asarray(frame.cell, dtype=np.float64)
    pbc = np.asarray(frame.pbc, dtype=bool)
    why = check_cell(cell, pbc)
    if why is None:  # pragma: no cover - only frames that fail a check come here
        raise AssertionError(f"frame {frame.frame} passes the geometry checks")
    return frame_error(
        where,
        frame.frame,
        "cell",
        f"{why} (pbc {pbc.astype(int).tolist()}, cell {np.round(cell, 6).tolist()})",
    )


def _det3(c: np.ndarray) -> np.ndarray:
    """Determinants of ``[F, 3, 3]`` matrices (cofactor expansion)."""
    return (
        c[:, 0, 0] * (c[:, 1, 1] * c[:, 2, 2] - c[:, 1, 2] * c[:, 2, 1])
        - c[:, 0, 1] * (c[:, 1, 0] * c[:, 2, 2] - c[:, 1, 2] * c[:, 2, 0])
        + c[:, 0, 2] * (c[:, 1, 0] * c[:, 2, 1] - c[:, 1, 1] * c[:, 2, 0])
    )


def _first_refused(
    atom_counts: np.ndarray,
    offsets: np.ndarray,
    numbers: np.ndarray,
    positions: np.ndarray,
    cells: np.ndarray,
    pbcs: np.ndarray,
) -> tuple[int, list[np.ndarray]]:
    """The position of the first frame `_refusal` describes (the frame count where none) and
    the neighbour-list boxes (`_box`) of the frames before it. A periodic cell whose volume is
    clearly not zero (twice the margin of `check_cell`) is its own box; other cells are
    checked one by one."""
    n_frames = atom_counts.shape[0]
    first = int(np.argmin(atom_counts)) if not atom_counts.all() else n_frames
    bad_atoms = (numbers < 1) | (numbers > 118) | ~np.isfinite(positions).all(axis=1)
    if bad_atoms.any():
        atom = int(np.flatnonzero(bad_atoms)[0])
        first = min(first, int(np.searchsorted(offsets[1:], atom, side="right")))
    lengths = np.sqrt((cells * cells).sum(axis=2))
    with np.errstate(invalid="ignore", over="ignore"):
        clear = (
            pbcs.all(axis=1)
            & np.isfinite(cells).all(axis=(1, 2))
            & (np.abs(_det3(cells)) > 2 * _FLAT * lengths.prod(axis=1))
        )
    boxes = []
    for index in range(first):
        if clear[index]:
            boxes.append(cells[index])
        elif check_cell(cells[index], pbcs[index]) is not None:
            return index, boxes
        else:
            boxes.append(_box(cells[index], pbcs[index]))
    return first, boxes


def _check_shift_range(
    shift_lists: list[np.ndarray], frames: Sequence[AtomsFrame], where: str
) -> None:
    """Refuse the first of the frames whose half-list ``shift_lists`` (one per frame, in
    order) reach a periodic image more than `SHIFT_MAX` cells away."""
    widest = [int(np.abs(s).max()) if s.size else 0 for s in shift_lists]
    for index, cells_away in enumerate(widest):
        if cells_away > SHIFT_MAX:
            raise frame_error(
                where,
                frames[index].frame,
                "cell",
                f"a periodic image {cells_away} cells away is within the cutoff (more than "
                f"{SHIFT_MAX})",
            )


def _half_lists(
    frames: Sequence[AtomsFrame],
    positions: np.ndarray,
    offsets: np.ndarray,
    boxes: list[np.ndarray],
    pbcs: np.ndarray,
    cutoff: float,
    where: str,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """vesin's half lists ``(pairs, shifts)`` of the first ``len(boxes)`` frames, one per
    frame; a frame whose list cannot finish, or reaches too far, raises its error (the first
    such frame)."""
    stop = len(boxes)
    starts = offsets[:stop]
    block = positions[: offsets[stop]]
    extents = np.maximum.reduceat(block, starts) - np.minimum.reduceat(block, starts)
    atom_counts = np.diff(offsets[: stop + 1])
    steps = search_steps(np.stack(boxes), pbcs[:stop], extents, atom_counts, cutoff).tolist()
    pair_lists: list[np.ndarray] = []
    shift_lists: list[np.ndarray] = []
    for index in range(stop):
        atoms = slice(offsets[index], offsets[index + 1])
        try:
            pairs, shifts = half_pairs(
                positions[atoms], boxes[index], pbcs[index], cutoff, steps[index]
            )
        except InputError as exc:  # more work than can finish
            _check_shift_range(shift_lists, frames, where)
            field = "cell" if pbcs[index].any() else "cutoff"
            raise frame_error(where, frames[index].frame, field, str(exc)) from None
        pair_lists.append(pairs)
        shift_lists.append(shifts)
    if shift_lists and int(np.abs(np.concatenate(shift_lists)).max(initial=0)) > SHIFT_MAX:
        _check_shift_range(shift_lists, frames, where)
    return pair_lists, shift_lists


def _full_lists(
    pair_lists: list[np.ndarray], shift_lists: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(edge_counts, senders, receivers, unit_shifts)`` of every structure: its half list,
    then the same pairs reversed with negated shifts (see `BlockGeometry`)."""
    half = np.fromiter((p.shape[0] for p in pair_lists), dtype=np.int64, count=len(pair_lists))
    pairs = np.concatenate(pair_lists).astype(np.int64)
    shifts = np.concatenate(shift_lists)
    # half edge g of a structure with h0 half edges before it is its edge g + h0 (counted in
    # the block's full lists), and its reverse comes h_f edges later
    forward = np.arange(pairs.shape[0], dtype=np.int64) + np.repeat(np.cumsum(half) - half, half)
    backward = forward + np.repeat(half, half)
    edge_counts = 2 * half
    total = int(edge_counts.sum())
    senders = np.empty(total, dtype=np.int64)
    receivers = np.empty(total, dtype=np.int64)
    unit_shifts = np.empty((total, 3), dtype=shifts.dtype)
    senders[forward], senders[backward] = pairs[:, 0], pairs[:, 1]
    receivers[forward], receivers[backward] = pairs[:, 1], pairs[:, 0]
    unit_shifts[forward], unit_shifts[backward] = shifts, -shifts
    return edge_counts, senders, receivers, unit_shifts


def block_geometry(frames: Sequence[AtomsFrame], cutoff: float, where: str) -> BlockGeometry:
    """The `BlockGeometry` of ``frames`` (at least one; of the input named ``where``) with
    edges shorter than ``cutoff`` (Å), or the error of the first bad frame (module
    docstring)."""
    n_frames = len(frames)
    atom_counts = np.fromiter((f.numbers.shape[0] for f in frames), dtype=np.int64, count=n_frames)
    offsets = np.zeros(n_frames + 1, dtype=np.int64)
    np.cumsum(atom_counts, out=offsets[1:])
    numbers = np.concatenate([f.numbers for f in frames])
    positions = np.concatenate([f.positions for f in frames]).astype(np.float64, copy=False)
    cells = np.stack([f.cell for f in frames]).astype(np.float64, copy=False)
    pbcs = np.stack([f.pbc for f in frames]).astype(bool, copy=False)
    refused, boxes = _first_refused(atom_counts, offsets, numbers, positions, cells, pbcs)
    pair_lists, shift_lists = (
        _half_lists(frames, positions, offsets, boxes, pbcs, cutoff, where) if boxes else ([], [])
    )
    if refused < n_frames:
        raise _refusal(frames[refused], where)
    edge_counts, senders, receivers, unit_shifts = _full_lists(pair_lists, shift_lists)
    return BlockGeometry(
        atom_counts, numbers, positions, cells, pbcs, edge_counts, senders, receivers, unit_shifts
    )
