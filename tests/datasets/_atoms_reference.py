"""The plain form of `graphbatch.datasets._atoms_convert.convert_frames`, frame by frame: each
frame's checks in order, MACE's edge list of each structure alone
(`graphbatch.datasets.neighbour_list`), its labels as MACE's ``config_from_atoms`` reads them,
and the chunk assembled from per-frame lists. The property tests compare production to it
(the same chunk array for array, or the same error naming the first bad frame and field);
``benchmarks/io/atoms_store.py`` times the build through it."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from graphbatch._errors import InputError
from graphbatch.datasets import neighbour_list
from graphbatch.datasets._atoms import (
    ATOMS_PROPERTIES,
    SHIFT_MAX,
    AtomsInputError,
    AtomsKeys,
    check_finite,
    frame_error,
)
from graphbatch.datasets._atoms_convert import AtomsChunk
from graphbatch.datasets._atoms_labels import (
    NameTable,
    _as_matrix,
    _numeric,
    config_type,
    info_weight,
    keep_value,
)
from graphbatch.datasets._extxyz import AtomsFrame
from graphbatch.datasets._graphs import GraphArrays
from graphbatch.datasets._neighbours import check_cell


def _symbol(z: int) -> str:
    from ase.data import chemical_symbols

    return chemical_symbols[z] if 0 <= z < len(chemical_symbols) else "?"


def _geometry(atoms: AtomsFrame, cutoff: float, where: str):
    """``(positions, cell, pbc, senders, receivers, shifts)`` of one frame, checked."""
    frame, n = atoms.frame, len(atoms)
    if n == 0:
        raise frame_error(where, frame, "atoms", "the frame has no atoms")
    z = atoms.numbers
    if z.min() < 1 or z.max() > 118:
        bad = int(np.flatnonzero((z < 1) | (z > 118))[0])
        raise frame_error(
            where,
            frame,
            "atomic_numbers",
            f"atom {bad} has atomic number {int(z[bad])} (unknown species "
            f"{_symbol(int(z[bad]))!r}; need 1..118)",
        )
    pos = check_finite(np.asarray(atoms.positions, dtype=np.float64), where, frame, "positions")
    cell = np.asarray(atoms.cell, dtype=np.float64)
    pbc = np.asarray(atoms.pbc, dtype=bool)
    why = check_cell(cell, pbc)
    if why is not None:
        raise frame_error(
            where,
            frame,
            "cell",
            f"{why} (pbc {pbc.astype(int).tolist()}, cell {np.round(cell, 6).tolist()})",
        )
    try:
        i, j, s = neighbour_list(pos, cell, pbc, cutoff)
    except InputError as exc:
        raise frame_error(where, frame, "cell" if pbc.any() else "cutoff", str(exc)) from None
    if s.size and int(np.abs(s).max()) > SHIFT_MAX:
        raise frame_error(
            where,
            frame,
            "cell",
            f"a periodic image {int(np.abs(s).max())} cells away is within the cutoff "
            f"(more than {SHIFT_MAX})",
        )
    return pos, cell, pbc, i, j, s


def _property(atoms: AtomsFrame, prop: str, key: str, keys: AtomsKeys, where: str):
    """``(value, weight)`` of ``prop`` in one frame (zeros and 0 where missing), or None where
    missing; checked."""
    level, shape, _ = ATOMS_PROPERTIES[prop]
    frame, n = atoms.frame, len(atoms)
    value = (atoms.arrays if level == "node" else atoms.info).get(key)
    if value is None:
        value = atoms.results.get(key)
    if value is None:
        if prop in keys.required:
            what = "array" if level == "node" else "info key"
            hint = (
                f"; ASE read a calculator {prop!r}: use --{prop}-key {prop}"
                if prop in atoms.results
                else ""
            )
            raise frame_error(
                where,
                frame,
                key,
                f"missing (no {what} {key!r}; required {prop}, set its key option or make it "
                f"optional{hint})",
            )
        return None
    if prop in ("stress", "virials"):
        a = _as_matrix(_numeric(value, where, frame, key), where, frame, key)
    else:
        a = _numeric(value, where, frame, key).astype(np.float64)
        want = (n, *shape) if level == "node" else shape
        if a.shape != want:
            raise frame_error(where, frame, key, f"has shape {a.shape}, expected {want}")
    a = check_finite(a, where, frame, key)
    return a, info_weight(atoms.info, f"config_{prop}_weight", where, frame)


def convert_frames_reference(
    frames: Iterable[AtomsFrame], *, cutoff: float, keys: AtomsKeys, source: int, where: str
) -> AtomsChunk:
    """`convert_frames`, one frame at a time."""
    used = keys.used()
    ctypes, heads = NameTable(), NameTable()
    rows: dict[str, list] = {
        k: []
        for k in ("n_node", "n_edge", "i", "j", "s", "pos", "z", "cell", "pbc", "w", "head", "ct")
    }
    rows["frame"] = []
    values: dict[str, list] = {p: [] for p in used}
    weights: dict[str, list] = {p: [] for p in used}
    present = {p: 0 for p in used}
    kept: dict[str, list] = {k: [] for k in keys.keep}
    kept_level: dict[str, str] = {}
    for atoms in frames:
        frame, n = atoms.frame, len(atoms)
        pos, cell, pbc, i, j, s = _geometry(atoms, cutoff, where)
        for prop, key in used.items():
            got = _property(atoms, prop, key, keys, where)
            if got is None:
                level, shape, _ = ATOMS_PROPERTIES[prop]
                values[prop].append(np.zeros((n, *shape) if level == "node" else shape))
                weights[prop].append(0.0)
            else:
                values[prop].append(got[0])
                weights[prop].append(got[1])
                present[prop] += 1
        ct = config_type(atoms.info, where, frame)
        w = info_weight(atoms.info, "config_weight", where, frame)
        w *= float(keys.config_type_weights.get(ct, 1.0))
        if not np.isfinite(w):
            raise frame_error(where, frame, "config_weight", f"weight {w} is not finite")
        head = keys.head if keys.head_key is None else str(atoms.info.get(keys.head_key, keys.head))
        for k in keys.keep:
            keep_value(atoms, k, where, kept, kept_level)
        for name, value in (
            ("n_node", n),
            ("n_edge", i.shape[0]),
            ("i", i),
            ("j", j),
            ("s", s),
            ("pos", pos),
            ("z", atoms.numbers),
            ("cell", cell),
            ("pbc", pbc),
            ("w", w),
            ("head", heads.code(head)),
            ("ct", ctypes.code(str(ct))),
            ("frame", frame),
        ):
            rows[name].append(value)
    if not rows["n_node"]:
        raise AtomsInputError(f"{where}: no frames")
    node = {
        "positions": np.concatenate(rows["pos"]),
        "atomic_numbers": np.concatenate(rows["z"]).astype(np.uint8),
    }
    graph = {"cell": np.stack(rows["cell"]), "pbc": np.stack(rows["pbc"])}
    for prop in used:
        if ATOMS_PROPERTIES[prop][0] == "node":
            node[prop] = np.concatenate(values[prop]).astype(np.float64)
        else:
            graph[prop] = np.stack(values[prop]).astype(np.float64)
    graph["weight"] = np.asarray(rows["w"], dtype=np.float64)
    for prop in used:
        graph[f"{prop}_weight"] = np.asarray(weights[prop], dtype=np.float64)
    graph["head"] = np.asarray(rows["head"], dtype=np.int16)
    graph["config_type"] = np.asarray(rows["ct"], dtype=np.int32)
    graph["source"] = np.full(len(rows["n_node"]), int(source), dtype=np.int32)
    graph["frame"] = np.asarray(rows["frame"], dtype=np.int64)
    for k, parts in kept.items():
        (node if kept_level[k] == "node" else graph)[k] = np.concatenate(parts)
    graphs = GraphArrays(
        n_node=np.asarray(rows["n_node"]),
        n_edge=np.asarray(rows["n_edge"]),
        edge_index=np.stack([np.concatenate(rows["i"]), np.concatenate(rows["j"])]).astype(
            np.int32
        ),
        node=node,
        edge={"unit_shifts": np.concatenate(rows["s"]).astype(np.int16)},
        graph=graph,
    )
    return AtomsChunk(graphs, ctypes.names, heads.names, present)
