"""Atomistic structures (``ase.Atoms``) -> periodic radius graphs as `GraphArrays`: the
atomistic store schema.

Fields of a store built by `graphbatch.datasets.build_atoms_store` (values and units exactly as
in the source file; the conventional units are those of ASE and MACE, stated in the store's
``meta["units"]``, and graphbatch converts nothing)::

    node  positions       float64 [N, 3]   Å
          atomic_numbers  uint8   [N]
          forces          float64 [N, 3]   eV/Å          (when the forces key is in use)
          charges         float64 [N]      e             (charges key)
    edge  unit_shifts     int16   [E, 3]   edge vector = positions[j] - positions[i] + S @ cell
    graph cell            float64 [G, 3, 3] Å (rows are cell vectors, as in ASE)
          pbc             bool    [G, 3]
          energy          float64 [G]      eV            (energy key)
          stress          float64 [G, 3, 3] eV/Å^3       (stress key; Voigt input expanded)
          virials         float64 [G, 3, 3] eV           (virials key)
          weight          float64 [G]      config_weight x config_type_weights[config_type]
          <p>_weight      float64 [G]      config_<p>_weight (1), 0 where <p> is missing
          head            int16   [G]      index into meta["heads"]
          config_type     int32   [G]      index into meta["config_types"]
          source          int32   [G]      index into meta["sources"] (input files)
          frame           int64   [G]      frame (extxyz) or row id (ASE db) in that source
    + kept info keys (graph level) and arrays keys (node level), ``--keep``

``edge_index`` holds ``(sender i, receiver j)`` as local ``int32`` indices: MACE's edge set
(`graphbatch.datasets._neighbours.neighbour_list`). The weights follow MACE's
``config_from_atoms``: a property missing from a frame gets weight 0 there and value 0.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._errors import AtomsInputError, GraphbatchError, InputError, InputTypeError
from ._extxyz import AtomsFrame
from ._graphs import GraphArrays
from ._neighbours import _FLAT, _box, check_cell, half_pairs, neighbour_list, search_steps

__all__ = [
    "ATOMS_PROPERTIES",
    "AtomsInputError",
    "AtomsKeys",
    "AtomsChunk",
    "convert_frames",
    "convert_frames_reference",
    "store_units",
]

#: MACE's properties graphbatch stores: name -> (level, per-row shape, unit).
ATOMS_PROPERTIES = {
    "energy": ("graph", (), "eV"),
    "forces": ("node", (3,), "eV/Å"),
    "stress": ("graph", (3, 3), "eV/Å^3"),
    "virials": ("graph", (3, 3), "eV"),
    "charges": ("node", (), "e"),
}
_RESERVED = (
    {
        "positions",
        "atomic_numbers",
        "unit_shifts",
        "cell",
        "pbc",
        "weight",
        "head",
        "config_type",
        "source",
        "frame",
        "edge_index",
        "numbers",
    }
    | set(ATOMS_PROPERTIES)
    | {f"{p}_weight" for p in ATOMS_PROPERTIES}
)
_SHIFT_MAX = np.iinfo(np.int16).max


@dataclass(frozen=True)
class AtomsKeys:
    """Where each property is read (MACE's key options and defaults). A key is looked up in
    ``atoms.info`` (graph properties) or ``atoms.arrays`` (per-atom), then in the results of an
    attached calculator (ASE's reader puts ``energy=``/``forces``/``stress=`` there).

    ``None`` drops a property. ``required``: properties every frame must have (error naming the
    file, frame and key otherwise); the others get weight 0 where missing, as in MACE.
    ``keep``: more ``info``/``arrays`` keys to store under their own names (numeric, same
    shape in every frame). ``config_type_weights``: MACE's per-``config_type`` weights.
    ``head``: the head name of every frame (MACE's ``head_name``), or ``head_key``: the
    ``info`` key holding it (``head`` where absent)."""

    energy: str | None = "REF_energy"
    forces: str | None = "REF_forces"
    stress: str | None = "REF_stress"
    virials: str | None = "REF_virials"
    charges: str | None = "REF_charges"
    required: tuple[str, ...] = ("energy", "forces")
    keep: tuple[str, ...] = ()
    config_type_weights: Mapping[str, float] = field(default_factory=dict)
    head: str = "Default"
    head_key: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "required", tuple(self.required))
        object.__setattr__(self, "keep", tuple(self.keep))
        for p in self.required:
            if p not in ATOMS_PROPERTIES:
                raise InputError(
                    f"required property {p!r} is not one of {sorted(ATOMS_PROPERTIES)}"
                )
            if self.key(p) is None:
                raise InputError(f"property {p!r} is required but its key is None")
        for k in self.keep:
            if k in _RESERVED:
                raise InputError(f"--keep {k!r}: the store already has a field of that name")
        weights = self.config_type_weights
        if not isinstance(weights, Mapping):
            raise InputTypeError(
                "config_type_weights must be a mapping {config_type: weight}, "
                f"got {str(weights)[:60]!r}"
            )
        checked: dict[str, float] = {}
        for name, w in weights.items():
            if not isinstance(w, numbers.Real) or isinstance(w, (bool, np.bool_)):
                raise InputError(
                    f"config_type_weights[{name!r}] = {repr(w)[:40]}: a weight is a number"
                )
            if not np.isfinite(float(w)):
                raise InputError(f"config_type_weights[{name!r}] = {w!r} is not finite")
            checked[name] = float(w)
        object.__setattr__(self, "config_type_weights", checked)

    def key(self, prop: str) -> str | None:
        return getattr(self, prop)

    def used(self) -> dict[str, str]:
        """``{property: key}`` of the properties in use."""
        return {p: k for p in ATOMS_PROPERTIES if (k := self.key(p)) is not None}

    def as_json(self) -> dict:
        return {
            **{p: self.key(p) for p in ATOMS_PROPERTIES},
            "required": list(self.required),
            "keep": list(self.keep),
            "config_type_weights": self.config_type_weights,
            "head": self.head,
            "head_key": self.head_key,
        }


def store_units(keys: AtomsKeys, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The units stated in a store's meta (values are stored as read; these are ASE's and
    MACE's conventions, ``extra`` overrides them)."""
    units = {
        "positions": "Å",
        "cell": "Å",
        "unit_shifts": "cell vectors",
        **{p: ATOMS_PROPERTIES[p][2] for p in keys.used()},
    }
    units.update(extra or {})
    return units


@dataclass
class AtomsChunk:
    """Converted frames: their graphs, with ``config_type``/``head`` codes indexing this chunk's
    own ``config_types``/``heads`` tables, and how many frames had each optional property."""

    graphs: GraphArrays
    config_types: list[str]
    heads: list[str]
    present: dict[str, int]


def _fail(where: str, frame: int, what: str, msg: str) -> AtomsInputError:
    return AtomsInputError(f"{where}: frame {frame}: {what}: {msg}")


def _lookup(atoms: AtomsFrame, key: str, per_atom: bool) -> Any:
    """``arrays``/``info`` value of ``key``, else the calculator's result, else None."""
    value = (atoms.arrays if per_atom else atoms.info).get(key)
    if value is None:
        value = atoms.results.get(key)
    return value


def _as_matrix(value: Any, where: str, frame: int, key: str) -> np.ndarray:
    """A stress/virials value as a 3x3 matrix: Voigt ``(xx, yy, zz, yz, xz, xy)``, 9 values in
    row order, or ``[3, 3]`` (MACE's ``voigt_to_matrix``)."""
    a = np.asarray(value, dtype=np.float64)
    if a.shape == (6,):
        return np.array([[a[0], a[5], a[4]], [a[5], a[1], a[3]], [a[4], a[3], a[2]]])
    if a.shape in ((9,), (3, 3)):
        return a.reshape(3, 3)
    raise _fail(where, frame, key, f"needs 6 (Voigt) or 9 values, got shape {a.shape}")


def _numeric(value: Any, where: str, frame: int, key: str) -> np.ndarray:
    try:
        a = np.asarray(value)
    except Exception as exc:  # pragma: no cover - numpy refuses odd objects
        raise _fail(where, frame, key, f"not an array ({exc})") from None
    if a.dtype.kind not in "biuf":
        raise _fail(where, frame, key, f"is not numeric ({a.dtype}, e.g. {str(value)[:40]!r})")
    return a


def _finite(a: np.ndarray, where: str, frame: int, key: str) -> np.ndarray:
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        bad = np.argwhere(~np.isfinite(a))[0].tolist()
        raise _fail(where, frame, key, f"holds {a[tuple(bad)]} at {bad} (not finite)")
    return a


def _info_weight(info: Mapping, key: str, where: str, frame: int) -> float:
    """The weight ``info[key]`` (1 where absent) as a float: one finite number (MACE reads it
    with ``float``), else `AtomsInputError` naming the frame, the key and the value."""
    value = info.get(key, 1.0)
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if not isinstance(value, (numbers.Real, np.bool_)):
        shown = value if isinstance(value, str) else str(value).replace("\n", " ")
        raise _fail(where, frame, key, f"a weight is one number, got {shown[:40]!r}")
    w = float(value)
    if not np.isfinite(w):
        raise _fail(where, frame, key, f"weight {w} is not finite")
    return w


def _config_type(info: Mapping, where: str, frame: int) -> Any:
    """``info["config_type"]`` ("Default" where absent): one name (a string, or a number or
    flag ASE parsed from it), else `AtomsInputError` naming the frame and the value."""
    ct = info.get("config_type", "Default")
    if isinstance(ct, np.ndarray) and ct.ndim == 0:
        ct = ct[()]
    if not isinstance(ct, (str, numbers.Number, np.generic)):
        shown = str(ct).replace("\n", " ")
        raise _fail(where, frame, "config_type", f"a config type is one name, got {shown[:40]!r}")
    return ct


class _Table:
    def __init__(self) -> None:
        self.names: list[str] = []
        self.codes: dict[str, int] = {}

    def code(self, name: str) -> int:
        c = self.codes.get(name)
        if c is None:
            c = self.codes[name] = len(self.names)
            self.names.append(name)
        return c


def _symbol(z: int) -> str:
    from ase.data import chemical_symbols

    return chemical_symbols[z] if 0 <= z < len(chemical_symbols) else "?"


def _keep_value(frame: AtomsFrame, k: str, where: str, kept: dict, kept_level: dict) -> None:
    """Append ``--keep`` key ``k`` of ``frame`` to ``kept[k]`` (checks: present, numeric,
    finite, the same level and row shape as in earlier frames)."""
    n = len(frame)
    in_arrays = k in frame.arrays
    value = frame.arrays[k] if in_arrays else frame.info.get(k)
    if value is None:
        raise _fail(where, frame.frame, k, "missing (a --keep key must be in every frame)")
    level = "node" if in_arrays else "graph"
    if kept_level.setdefault(k, level) != level:
        raise _fail(
            where, frame.frame, k, f"is per-{level} here but per-{kept_level[k]} in earlier frames"
        )
    a = _finite(_numeric(value, where, frame.frame, k), where, frame.frame, k)
    row = a.shape[1:] if level == "node" else a.shape
    if level == "node" and a.shape[:1] != (n,):
        raise _fail(where, frame.frame, k, f"has shape {a.shape} for {n} atoms")
    if kept[k] and row != kept[k][0].shape[1:]:
        raise _fail(
            where, frame.frame, k, f"has rows of shape {row}, earlier frames {kept[k][0].shape[1:]}"
        )
    kept[k].append(a if level == "node" else a[None])


def _chunk(
    n_node: Sequence[int] | np.ndarray,
    n_edge: Sequence[int] | np.ndarray,
    senders: np.ndarray,
    receivers: np.ndarray,
    shifts: np.ndarray,
    node: dict[str, np.ndarray],
    graph: dict[str, np.ndarray],
    used: dict[str, str],
    values: Mapping[str, list[np.ndarray] | np.ndarray],
    pweights: Mapping[str, Sequence[float] | np.ndarray],
    w_l: Sequence[float],
    head_l: Sequence[int],
    ct_l: Sequence[int],
    frame_l: Sequence[int],
    source: int,
    kept: dict[str, list[np.ndarray]],
    kept_level: dict[str, str],
    ctypes: _Table,
    heads: _Table,
    present: dict[str, int],
) -> AtomsChunk:
    """Assemble converted frames (lists per frame, or block arrays) into an `AtomsChunk`."""
    for p in used:
        level = ATOMS_PROPERTIES[p][0]
        v = values[p]
        if level == "node":
            node[p] = (v if isinstance(v, np.ndarray) else np.concatenate(v)).astype(np.float64)
        else:
            graph[p] = (v if isinstance(v, np.ndarray) else np.stack(v)).astype(np.float64)
    graph["weight"] = np.asarray(w_l, dtype=np.float64)
    for p in used:
        graph[f"{p}_weight"] = np.asarray(pweights[p], dtype=np.float64)
    graph["head"] = np.asarray(head_l, dtype=np.int16)
    graph["config_type"] = np.asarray(ct_l, dtype=np.int32)
    graph["source"] = np.full(len(n_node), int(source), dtype=np.int32)
    graph["frame"] = np.asarray(frame_l, dtype=np.int64)
    for k, parts in kept.items():
        target = node if kept_level[k] == "node" else graph
        target[k] = np.concatenate(parts)
    ei = np.stack([senders, receivers]).astype(np.int32)
    graphs = GraphArrays(
        n_node=np.asarray(n_node),
        n_edge=np.asarray(n_edge),
        edge_index=ei,
        node=node,
        edge={"unit_shifts": shifts.astype(np.int16)},
        graph=graph,
    )
    return AtomsChunk(graphs, ctypes.names, heads.names, present)


def convert_frames_reference(
    frames: Iterable[AtomsFrame], *, cutoff: float, keys: AtomsKeys, source: int, where: str
) -> AtomsChunk:
    """`convert_frames`, frame by frame: the plain form (and the one that names the first bad
    value: file, frame, field)."""
    used = keys.used()
    ctw = keys.config_type_weights
    ctypes, heads = _Table(), _Table()
    n_node, n_edge, senders, receivers, shifts = [], [], [], [], []
    pos_l, z_l, cell_l, pbc_l, w_l, head_l, ct_l, frame_l = [], [], [], [], [], [], [], []
    values: dict[str, list] = {p: [] for p in used}
    pweights: dict[str, list] = {p: [] for p in used}
    present = {p: 0 for p in used}
    kept: dict[str, list] = {k: [] for k in keys.keep}
    kept_level: dict[str, str] = {}
    for atoms in frames:
        frame = atoms.frame
        n = len(atoms)
        if n == 0:
            raise _fail(where, frame, "atoms", "the frame has no atoms")
        z = atoms.numbers
        if z.min() < 1 or z.max() > 118:
            bad = int(np.flatnonzero((z < 1) | (z > 118))[0])
            raise _fail(
                where,
                frame,
                "atomic_numbers",
                f"atom {bad} has atomic number "
                f"{int(z[bad])} (unknown species {_symbol(int(z[bad]))!r}; need 1..118)",
            )
        pos = _finite(np.asarray(atoms.positions, dtype=np.float64), where, frame, "positions")
        cell = np.asarray(atoms.cell, dtype=np.float64)
        pbc = np.asarray(atoms.pbc, dtype=bool)
        why = check_cell(cell, pbc)
        if why is not None:
            raise _fail(
                where,
                frame,
                "cell",
                f"{why} (pbc {pbc.astype(int).tolist()}, cell {np.round(cell, 6).tolist()})",
            )
        try:
            i, j, s = neighbour_list(pos, cell, pbc, cutoff)
        except InputError as exc:  # more work than can finish (`half_pairs`)
            raise _fail(where, frame, "cell" if pbc.any() else "cutoff", str(exc)) from None
        if s.size and int(np.abs(s).max()) > _SHIFT_MAX:
            raise _fail(
                where,
                frame,
                "cell",
                f"a periodic image {int(np.abs(s).max())} cells "
                f"away is within the cutoff (more than {_SHIFT_MAX})",
            )
        info = atoms.info
        for p, key in used.items():
            level, shape, _ = ATOMS_PROPERTIES[p]
            value = _lookup(atoms, key, level == "node")
            if value is None:
                if p in keys.required:
                    what = "array" if level == "node" else "info key"
                    hint = (
                        f"; ASE read a calculator {p!r}: use --{p}-key {p}"
                        if p in atoms.results
                        else ""
                    )
                    raise _fail(
                        where,
                        frame,
                        key,
                        f"missing (no {what} {key!r}; required "
                        f"{p}, set its key option or make it optional{hint})",
                    )
                values[p].append(np.zeros((n, *shape) if level == "node" else shape))
                pweights[p].append(0.0)
                continue
            if p in ("stress", "virials"):
                a = _as_matrix(_numeric(value, where, frame, key), where, frame, key)
            else:
                a = _numeric(value, where, frame, key).astype(np.float64)
                want = (n, *shape) if level == "node" else shape
                if a.shape != want:
                    raise _fail(where, frame, key, f"has shape {a.shape}, expected {want}")
            values[p].append(_finite(a, where, frame, key))
            present[p] += 1
            pweights[p].append(_info_weight(info, f"config_{p}_weight", where, frame))
        ct = _config_type(info, where, frame)
        weight = _info_weight(info, "config_weight", where, frame) * float(ctw.get(ct, 1.0))
        if not np.isfinite(weight):
            raise _fail(where, frame, "config_weight", f"weight {weight} is not finite")
        head = keys.head if keys.head_key is None else str(info.get(keys.head_key, keys.head))
        for k in keys.keep:
            _keep_value(atoms, k, where, kept, kept_level)
        n_node.append(n)
        n_edge.append(i.shape[0])
        senders.append(i)
        receivers.append(j)
        shifts.append(s)
        pos_l.append(pos)
        z_l.append(z)
        cell_l.append(cell)
        pbc_l.append(pbc)
        w_l.append(weight)
        head_l.append(heads.code(head))
        ct_l.append(ctypes.code(str(ct)))
        frame_l.append(frame)
    if not n_node:
        raise AtomsInputError(f"{where}: no frames")
    node = {
        "positions": np.concatenate(pos_l),
        "atomic_numbers": np.concatenate(z_l).astype(np.uint8),
    }
    graph = {"cell": np.stack(cell_l), "pbc": np.stack(pbc_l)}
    return _chunk(
        n_node,
        n_edge,
        np.concatenate(senders),
        np.concatenate(receivers),
        np.concatenate(shifts),
        node,
        graph,
        used,
        values,
        pweights,
        w_l,
        head_l,
        ct_l,
        frame_l,
        source,
        kept,
        kept_level,
        ctypes,
        heads,
        present,
    )


class _NotPlain(GraphbatchError):
    """A value the vectorised conversion leaves to `convert_frames_reference` (as it leaves
    any error: the reference reports the first one in frame order)."""


#: exact types of graph-level scalar labels converted in bulk (ASE's extxyz gives np.float64)
_FLOAT_TYPES = (float, np.float64)


def _bulk_values(p: str, raw: list, counts: np.ndarray) -> tuple[np.ndarray, list, int]:
    """Property ``p`` of every frame as one float64 array (``raw``: each frame's value or
    None), zeros where missing; its per-frame presence; and how many frames had it. Raises
    `_NotPlain` for anything but float64 arrays of the expected shape (or, for scalars,
    Python/NumPy floats) and for values that are not finite."""
    level, shape, _ = ATOMS_PROPERTIES[p]
    have = [v is not None for v in raw]
    if level == "graph" and not shape:
        if not all(type(v) in _FLOAT_TYPES for v in raw if v is not None):
            raise _NotPlain
        out = np.array([0.0 if v is None else v for v in raw], dtype=np.float64)
    elif level == "node":
        parts = []
        for v, n in zip(raw, counts.tolist(), strict=False):
            if v is None:
                parts.append(np.zeros((n, *shape)))
                continue
            if type(v) is not np.ndarray or v.dtype != np.float64 or v.shape != (n, *shape):
                raise _NotPlain
            parts.append(v)
        out = np.concatenate(parts) if parts else np.zeros((0, *shape))
    else:  # stress / virials: 3x3 matrices
        rows = []
        for v in raw:
            if v is None:
                rows.append(np.zeros(9))
            elif type(v) is not np.ndarray or v.dtype != np.float64:
                raise _NotPlain
            elif v.shape == (6,):
                rows.append(v[_VOIGT])  # Voigt -> 3x3 in row order
            elif v.shape in ((9,), (3, 3)):
                rows.append(v.reshape(9))
            else:
                raise _NotPlain
        out = np.stack(rows).reshape(-1, 3, 3)
    if not np.isfinite(out).all():
        raise _NotPlain
    return out, have, sum(have)


#: Voigt (xx, yy, zz, yz, xz, xy) -> 3x3 in row order (MACE's voigt_to_matrix)
_VOIGT = np.array([0, 5, 4, 5, 1, 3, 4, 3, 2])


def _det3(c: np.ndarray) -> np.ndarray:
    """Determinants of ``[F, 3, 3]`` matrices (cofactor expansion)."""
    return (
        c[:, 0, 0] * (c[:, 1, 1] * c[:, 2, 2] - c[:, 1, 2] * c[:, 2, 1])
        - c[:, 0, 1] * (c[:, 1, 0] * c[:, 2, 2] - c[:, 1, 2] * c[:, 2, 0])
        + c[:, 0, 2] * (c[:, 1, 0] * c[:, 2, 1] - c[:, 1, 1] * c[:, 2, 0])
    )


def _convert_plain(
    frames: list[AtomsFrame], cutoff: float, keys: AtomsKeys, source: int, where: str
) -> AtomsChunk:
    """`convert_frames` vectorised over the block; raises `_NotPlain` where
    `convert_frames_reference` must decide."""
    used = keys.used()
    ctw = keys.config_type_weights
    ctypes, heads = _Table(), _Table()
    f_count = len(frames)
    counts = np.fromiter((f.numbers.shape[0] for f in frames), dtype=np.int64, count=f_count)
    if not counts.all():
        raise _NotPlain
    z = np.concatenate([f.numbers for f in frames])
    pos = np.concatenate([f.positions for f in frames]).astype(np.float64, copy=False)
    cells = np.stack([f.cell for f in frames]).astype(np.float64, copy=False)
    pbcs = np.stack([f.pbc for f in frames]).astype(bool, copy=False)
    if (
        z.shape[0] != int(counts.sum())
        or pos.shape != (z.shape[0], 3)
        or cells.shape != (f_count, 3, 3)
        or pbcs.shape != (f_count, 3)
    ):
        raise _NotPlain
    if z.min() < 1 or z.max() > 118 or not np.isfinite(pos).all():
        raise _NotPlain
    # cells: periodic ones whose volume is clearly not zero are their own neighbour-list box
    # (2x the margin of `check_cell`/`_box`); the rest are checked one by one
    periodic = pbcs.all(axis=1)
    lengths = np.sqrt((cells * cells).sum(axis=2))
    clear = (
        periodic
        & np.isfinite(cells).all(axis=(1, 2))
        & (np.abs(_det3(cells)) > 2 * _FLAT * lengths.prod(axis=1))
    )
    boxes = []
    for f in range(f_count):
        if clear[f]:
            boxes.append(cells[f])
            continue
        if check_cell(cells[f], pbcs[f]) is not None:
            raise _NotPlain
        boxes.append(_box(cells[f], pbcs[f]))
    # neighbour lists: vesin's half list per structure, mirrored below for the whole block
    offsets = np.zeros(f_count + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    extents = np.maximum.reduceat(pos, offsets[:-1]) - np.minimum.reduceat(pos, offsets[:-1])
    steps = search_steps(np.stack(boxes), pbcs, extents, counts, cutoff).tolist()
    pairs_l, shifts_l = [], []
    for f in range(f_count):
        at = slice(offsets[f], offsets[f + 1])
        fp, fs = half_pairs(pos[at], boxes[f], pbcs[f], cutoff, steps[f])
        pairs_l.append(fp)
        shifts_l.append(fs)
    half = np.fromiter((fp.shape[0] for fp in pairs_l), dtype=np.int64, count=f_count)
    pairs = np.concatenate(pairs_l).astype(np.int64)
    shifts = np.concatenate(shifts_l)
    if shifts.size and int(np.abs(shifts).max()) > _SHIFT_MAX:
        raise _NotPlain
    # labels, weights, config types and heads: dictionary look-ups per frame
    raw: dict[str, list] = {p: [] for p in used}
    pweights: dict[str, list] = {p: [] for p in used}
    w_l, head_l, ct_l = [], [], []
    kept: dict[str, list] = {k: [] for k in keys.keep}
    kept_level: dict[str, str] = {}
    lookups = [
        (p, key, ATOMS_PROPERTIES[p][0] == "node", f"config_{p}_weight") for p, key in used.items()
    ]
    head_key = keys.head_key
    for fr in frames:
        info, results = fr.info, fr.results
        for p, key, per_atom, wkey in lookups:
            value = (fr.arrays if per_atom else info).get(key)
            if value is None:
                value = results.get(key)
                if value is None:
                    if p in keys.required:
                        raise _NotPlain
                    raw[p].append(None)
                    pweights[p].append(0.0)
                    continue
            raw[p].append(value)
            pweights[p].append(float(info.get(wkey, 1.0)))
        ct = info.get("config_type", "Default")
        w_l.append(float(info.get("config_weight", 1.0)) * float(ctw.get(ct, 1.0)))
        head = keys.head if head_key is None else str(info.get(head_key, keys.head))
        head_l.append(heads.code(head))
        ct_l.append(ctypes.code(str(ct)))
        for k in keys.keep:
            _keep_value(fr, k, where, kept, kept_level)
    if not np.isfinite(w_l).all() or not all(np.isfinite(pweights[p]).all() for p in used):
        raise _NotPlain
    values, present = {}, {}
    for p in used:
        values[p], _, present[p] = _bulk_values(p, raw[p], counts)
    # the full edge list of each structure: its half list, then the same pairs reversed
    n_edge = 2 * half
    # half edge g of frame f (half edges before it: h0) goes to g + h0, its reverse h_f later
    fwd = np.arange(pairs.shape[0], dtype=np.int64) + np.repeat(np.cumsum(half) - half, half)
    back = fwd + np.repeat(half, half)
    total = int(n_edge.sum())
    senders = np.empty(total, dtype=np.int64)
    receivers = np.empty(total, dtype=np.int64)
    unit = np.empty((total, 3), dtype=shifts.dtype)
    senders[fwd], senders[back] = pairs[:, 0], pairs[:, 1]
    receivers[fwd], receivers[back] = pairs[:, 1], pairs[:, 0]
    unit[fwd], unit[back] = shifts, -shifts
    node: dict[str, np.ndarray] = {"positions": pos, "atomic_numbers": z.astype(np.uint8)}
    graph: dict[str, np.ndarray] = {"cell": cells, "pbc": pbcs}
    return _chunk(
        counts,
        n_edge,
        senders,
        receivers,
        unit,
        node,
        graph,
        used,
        values,
        pweights,
        w_l,
        head_l,
        ct_l,
        [f.frame for f in frames],
        source,
        kept,
        kept_level,
        ctypes,
        heads,
        present,
    )


def convert_frames(
    frames: Iterable[AtomsFrame], *, cutoff: float, keys: AtomsKeys, source: int, where: str
) -> AtomsChunk:
    """Convert the `AtomsFrame` records ``frames`` of input ``source`` (named ``where`` in
    errors) to one `AtomsChunk` of graphs with the store schema (module docstring).

    Vectorised over the block: NumPy checks and label arrays for all frames at once, one
    vesin call per structure; where anything is not the plain case (a label that is not a
    float64 array or float, a degenerate-looking cell, a value out of range), the block goes
    through `convert_frames_reference`, which gives the same chunk or raises
    `AtomsInputError` naming ``where``, the frame and the field of the first bad value."""
    frames = list(frames)
    if not frames:
        raise AtomsInputError(f"{where}: no frames")
    try:
        return _convert_plain(frames, cutoff, keys, source, where)
    except Exception:  # _NotPlain, or an error the reference must report in frame order
        return convert_frames_reference(
            frames, cutoff=cutoff, keys=keys, source=source, where=where
        )


def remap_codes(codes: np.ndarray, local: Sequence[str], table: list[str]) -> np.ndarray:
    """``codes`` into ``local`` names as codes into the growing global ``table``."""
    index = {name: k for k, name in enumerate(table)}
    lut = np.empty(len(local), dtype=np.int64)
    for k, name in enumerate(local):
        if name not in index:
            index[name] = len(table)
            table.append(name)
        lut[k] = index[name]
    return lut[codes].astype(codes.dtype) if len(local) else codes
