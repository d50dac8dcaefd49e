"""A fast reader for extxyz frames in the common case, giving exactly what ``ase.io.iread``
gives, and `AtomsFrame`, the plain record of one structure that the atomistic build converts.

ASE's extxyz reader spends most of its time in Python: the comment line is parsed character
by character (``key_val_str_to_dict``) and each atom line is split, converted and packed into
a structured array, frame by frame. `read_frames` parses a block of frames (the text of whole
frames, as `graphbatch.datasets._atoms_build` cuts a file) with the same semantics:

- the comment line is tokenised with one regular expression when it is plain ASCII ``key=value``
  / ``key="quoted value"`` / ``key`` pairs (no escapes, brackets, single quotes or ``=`` inside
  bare values); each value then goes through ASE's own conversion rules (integers, then
  floats, one number as a NumPy scalar, ``Lattice``/``stress``/``virial`` as 3x3 in Fortran
  order, ``T``/``F`` booleans, ``_JSON`` values), and any other line goes to ASE's
  ``key_val_str_to_dict`` itself;
- ``Properties`` are read by ASE's ``parse_properties`` (cached per string), and the atom lines
  of consecutive frames with the same ``Properties`` are converted together, one NumPy call per
  column (NumPy turns Python strings into numbers with Python's own ``float``/``int``);
- ``pbc``/``Lattice`` defaults, ``numbers`` from capitalised species, per-atom columns and
  ``info`` keys that ASE's calculator takes (``forces``, ``energy``, ``stress`` (as Voigt),
  ...) go where ASE puts them (`AtomsFrame.results`).

A frame that is not the common case -- other characters or quoting on the comment line, a
``Properties`` entry ASE treats specially (``Z``, ``move_mask``, ``initial_charges``, ...), an
atom line with more or fewer columns than announced, an unknown species, a logical column
value other than ``T``/``F``/``True``/``False``, an integer out of range, no atoms -- is read by
``ase.io`` (`Declined`), so ASE's semantics and ASE's errors hold there too.
``tests/datasets/test_extxyz_reader.py`` checks every frame of the generated EMT set and edge cases
against ``ase.io.iread``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from itertools import chain
from typing import Any

import numpy as np

from .._errors import GraphbatchError, InputError

__all__ = ["AtomsFrame", "Declined", "frame_from_atoms", "parse_comment", "read_frames"]


class AtomsFrame:
    """One structure as plain arrays and dicts -- what the atomistic build reads from an
    ``ase.Atoms`` (`frame_from_atoms`) or from extxyz text (`read_frames`): ``numbers`` int64
    ``[n]``, ``positions`` float64 ``[n, 3]``, ``cell`` float64 ``[3, 3]`` (rows are cell
    vectors), ``pbc`` bool ``[3]``, ``info`` (ASE's ``atoms.info``), ``arrays`` (ASE's
    ``atoms.arrays``, ``numbers`` and ``positions`` included) and ``results`` (the attached
    calculator's results, ``{}`` without one). ``frame``: its frame number (extxyz) or row id
    (ASE database)."""

    __slots__ = ("frame", "numbers", "positions", "cell", "pbc", "info", "arrays", "results")

    def __init__(
        self,
        frame: int,
        numbers: np.ndarray,
        positions: np.ndarray,
        cell: np.ndarray,
        pbc: np.ndarray,
        info: dict,
        arrays: dict,
        results: dict,
    ) -> None:
        self.frame = frame
        self.numbers = numbers
        self.positions = positions
        self.cell = cell
        self.pbc = pbc
        self.info = info
        self.arrays = arrays
        self.results = results

    def __len__(self) -> int:
        return int(self.numbers.shape[0])


def frame_from_atoms(frame: int, atoms: Any) -> AtomsFrame:
    """The `AtomsFrame` of an ``ase.Atoms`` (no copies)."""
    calc = atoms.calc
    results = getattr(calc, "results", None) or {} if calc is not None else {}
    return AtomsFrame(
        frame,
        atoms.numbers,
        atoms.positions,
        atoms.cell.array,
        atoms.pbc,
        atoms.info,
        atoms.arrays,
        results,
    )


class Declined(GraphbatchError):
    """This frame is not the common case: read it with ``ase.io`` (an internal signal, caught
    by the reader; never reaches the caller)."""


# ------------------------------------------------------------------ the comment line
_UNPROCESSED = {"uid"}  # ase.io.extxyz.UNPROCESSED_KEYS
_SPECIAL_3_3 = {"Lattice", "virial", "stress"}  # ase.io.extxyz.SPECIAL_3_3_KEYS
_STR_TO_BOOL = {
    "T": True,
    "F": False,
    "true": True,
    "false": False,
    "True": True,
    "False": False,
    "TRUE": True,
    "FALSE": False,
}
#: printable ASCII except space and the characters ASE's parser treats specially
_BARE = r"[!#-&(-<>-Z^-z|~]+"
#: inside double quotes: printable ASCII, space and tab, except ``"`` and ``\`` (not empty:
#: ASE continues an empty value with what follows the next space)
_QUOTED = r'"[ \t!#-\[\]-~]+"'
_PAIR = rf"({_BARE})(?:=({_BARE}|{_QUOTED}))?"
_LINE = re.compile(rf"(?:{_PAIR}(?:[ \t]+{_PAIR})*)?")
_PAIRS = re.compile(_PAIR)
_TOKENS = re.compile(r"[^\s,]+")
#: a value whose tokens (``[^\s,]+``) are all plain integers / plain decimal numbers
_INTS = re.compile(r"[\s,]*[+-]?[0-9]+(?:[\s,]+[+-]?[0-9]+)*[\s,]*")
_NUM = r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_FLOATS = re.compile(rf"[\s,]*{_NUM}(?:[\s,]+{_NUM})*[\s,]*")
#: characters a number can hold in Python's int/float syntax (infinity, nan, exponents, ...)
_NUMBERISH = frozenset("0123456789+-._eEiInNfFtTyYaA")


def _convert(key: str, text: str) -> Any:
    """One ``key=value`` pair's value as ASE's ``key_val_str_to_dict`` converts it (its rules,
    in its order; the NumPy conversions are the calls ASE makes)."""
    if key.lower() in _UNPROCESSED:
        return text
    value: Any = text
    split_value = _TOKENS.findall(text)
    numeric = None
    kinds: tuple[type, ...]
    if _INTS.fullmatch(text):
        kinds = (int, float)
    elif _FLOATS.fullmatch(text):
        kinds = (float,)  # np.array(..., dtype=int) fails on one of these
    elif split_value and not all(_NUMBERISH.issuperset(s) for s in split_value):
        kinds = ()  # a token no int or float parses: stays a string
    else:
        kinds = (int, float)
    for kind in kinds:
        try:
            numeric = np.array(split_value, dtype=kind)
            break
        except (ValueError, OverflowError):
            continue
    if numeric is not None:
        value = numeric[0] if len(numeric) == 1 else numeric
    if key in _SPECIAL_3_3:
        if not isinstance(value, np.ndarray) or value.shape != (9,):
            raise InputError(
                f"Got info item {key}, expecting special 3x3 matrix, but value "
                "is not in the form of a 9-long numerical vector"
            )
        value = np.array(value).reshape((3, 3), order="F")
    if isinstance(value, str):
        parts = _TOKENS.findall(value)
        if all(p in _STR_TO_BOOL for p in parts):
            flags = [_STR_TO_BOOL[p] for p in parts]
            value = flags[0] if len(flags) == 1 else flags
        elif value.startswith("_JSON "):
            d = json.loads(value.replace("_JSON ", "", 1))
            value = np.array(d)
            if value.dtype.kind not in ["i", "f", "b"]:
                value = d
    return value


def parse_comment(line: str) -> dict:
    """``ase.io.extxyz.key_val_str_to_dict(line)`` -- the ``info`` dict of an extxyz comment
    line (before ASE moves ``pbc``, ``Lattice``, ``Properties`` and calculator keys out of it):
    the plain case here, anything else by ASE's function."""
    line = line.strip()
    if not line:
        return {}
    if not line.isascii() or _LINE.fullmatch(line) is None:
        from ase.io.extxyz import key_val_str_to_dict

        return key_val_str_to_dict(line)
    out = {}
    cache = _CONVERTED
    for key, value in _PAIRS.findall(line):
        hit = cache.get((key, value))
        if hit is not None:  # a repeated text value (Properties, config_type, ...)
            out[key] = list(hit) if type(hit) is tuple else hit
            continue
        raw = value
        if not value:
            value = "T"  # a key without a value is True
        elif value[0] == '"':
            value = value[1:-1]
        out[key] = got = _convert(key, value)
        if isinstance(got, (str, bool)) or (
            type(got) is list and all(type(g) is bool for g in got)
        ):
            if len(cache) >= 4096:
                cache.clear()
            cache[(key, raw)] = tuple(got) if type(got) is list else got
    return out


#: converted text values (strings, booleans, lists of booleans as tuples) by (key, raw value)
_CONVERTED: dict[tuple[str, str], Any] = {}


# ------------------------------------------------------------------ Properties and atom lines
_SPECIAL_ARRAYS = {"numbers", "positions", "symbols", "initial_charges", "move_mask"}
_PROPERTIES: dict[str, tuple] = {}


def _properties(spec: str) -> tuple:
    """``(columns, n_columns)`` of a ``Properties`` string, by ASE's ``parse_properties``:
    ``columns`` lists ``(ase_name, first_column, n_columns, kind)`` with ``kind`` one of
    ``"R" "I" "S" "L"``. Raises `Declined` for what this reader leaves to ASE."""
    hit = _PROPERTIES.get(spec)
    if hit is None:
        from ase.io.extxyz import parse_properties

        try:
            properties, names, dtype, _ = parse_properties(spec)
        except Exception:
            raise Declined from None
        kinds = {"f": "R", "i": "I", "O": "S", "b": "L"}
        columns, at, seen = [], 0, set()
        for name in names:
            ase_name, cols = properties[name]
            field = dtype[name if cols == 1 else name + "0"]
            kind = kinds.get(field.kind)
            if (
                kind is None
                or cols < 1
                or ase_name in seen
                or (field.kind == "i" and field.itemsize != 4)
                or (field.kind == "f" and field.itemsize != 8)
            ):
                raise Declined
            seen.add(ase_name)
            columns.append((ase_name, at, cols, kind))
            at += cols
        if "symbols" not in seen or "positions" not in seen or len(_SPECIAL_ARRAYS & seen) != 2:
            raise Declined
        kinds_of = {c[0]: (c[2], c[3]) for c in columns}
        if kinds_of["symbols"] != (1, "S") or kinds_of["positions"] != (3, "R"):
            raise Declined
        if len(_PROPERTIES) > 64:
            _PROPERTIES.clear()
        hit = _PROPERTIES[spec] = (tuple(columns), at)
    return hit


_LOGICAL = {"T": True, "F": False, "True": True, "False": False}
_NUMBERS: dict[str, int] = {}


def _atomic_numbers(tokens: Sequence[str] | np.ndarray) -> np.ndarray:
    """Atomic numbers of species tokens as ASE gives them (capitalised, ``X`` is 0); an
    unknown symbol raises `Declined` (ASE then names it)."""
    table = _NUMBERS
    try:
        return np.array([table[s] for s in tokens], dtype=np.int64)
    except KeyError:
        pass
    from ase.data import atomic_numbers

    for s in set(tokens):
        if s not in table:
            z = atomic_numbers.get(s.capitalize())
            if z is None:
                raise Declined from None
            table[s] = z
    return np.array([table[s] for s in tokens], dtype=np.int64)


def _columns(rows: list[list[str]], n_columns: int, columns: tuple) -> dict[str, np.ndarray]:
    """The atom lines ``rows`` (split, ``n_columns`` tokens each) as arrays per property, in
    ASE's dtypes: float64, int32, object (strings), bool."""
    flat = list(chain.from_iterable(rows))
    out = {}
    for name, at, cols, kind in columns:
        parts = [flat[at + c :: n_columns] for c in range(cols)]
        if kind == "R":
            a = np.array(parts, dtype=np.float64)
        elif kind == "I":
            a = np.array(parts, dtype=np.int32)
        elif kind == "S":
            a = np.empty((cols, len(rows)), dtype=object)
            for c, p in enumerate(parts):
                a[c] = p
        else:
            try:
                a = np.array([[_LOGICAL[t] for t in p] for p in parts], dtype=bool)
            except KeyError:
                raise Declined from None
        out[name] = a[0] if cols == 1 else a.T
    return out


# ------------------------------------------------------------------ frames
def _frame_header(comment: str) -> tuple[dict, np.ndarray | None, Any, str]:
    """``(info, cell, pbc, Properties)`` of a comment line as ASE's ``_read_xyz_frame`` takes
    them apart (``cell``: the ``Lattice`` transposed; ``pbc``: None for ASE's default)."""
    info = parse_comment(comment)
    pbc: Any = None
    if "pbc" in info:
        pbc = info.pop("pbc")
    elif "Lattice" in info:
        pbc = [True, True, True]
    cell = None
    if "Lattice" in info:
        cell = info.pop("Lattice").T
    spec = info.pop("Properties", "species:S:1:pos:R:3")
    if not isinstance(spec, str):
        raise Declined
    return info, cell, pbc, spec


def _pbc(value: Any) -> np.ndarray:
    out = np.zeros(3, dtype=bool)
    if value is None:
        return out
    if isinstance(value, bool) or (
        isinstance(value, list) and len(value) == 3 and all(isinstance(v, bool) for v in value)
    ):
        out[:] = value
        return out
    raise Declined


def _cell(value: Any) -> np.ndarray:
    if value is None:
        return np.zeros((3, 3))
    if not isinstance(value, np.ndarray) or value.shape != (3, 3) or value.dtype.kind not in "iuf":
        raise Declined
    return np.array(value, dtype=np.float64)


_CALC_KEYS: list = []


def _calculator_keys() -> tuple:
    """ASE's calculator properties and those of them extxyz reads from ``info``."""
    if not _CALC_KEYS:
        from ase.calculators.calculator import all_properties
        from ase.io.extxyz import per_config_properties

        _CALC_KEYS.extend((frozenset(all_properties), frozenset(per_config_properties)))
    return _CALC_KEYS[0], _CALC_KEYS[1]


def _results_and_arrays(info: dict, per_atom: dict[str, np.ndarray]) -> tuple[dict, dict]:
    """ASE's ``set_calc_and_arrays`` and ``SinglePointCalculator``: per-atom arrays and
    ``info`` keys that are calculator properties become ``results`` (``stress`` 3x3 as Voigt;
    values other than energies as float arrays), the other arrays stay arrays."""
    all_properties, per_config_properties = _calculator_keys()
    raw: dict[str, Any] = {}
    arrays = {}
    for name, a in per_atom.items():
        if name in all_properties:
            raw[name] = a
        else:
            arrays[name] = a
    for key in [k for k in info if k in per_config_properties]:
        raw[key] = info.pop(key)
        if key == "stress" and getattr(raw[key], "shape", None) == (3, 3):
            s = raw[key]
            raw[key] = np.array([s[0, 0], s[1, 1], s[2, 2], s[1, 2], s[0, 2], s[0, 1]])
    results = {}
    for key, value in raw.items():
        if value is None:
            continue
        results[key] = (
            value if key in ("energy", "magmom", "free_energy") else np.array(value, float)
        )
    return results, arrays


def read_frames(lines: list[str], starts: list[int], first: int) -> list[AtomsFrame | None]:
    """The frames whose count lines are ``lines[starts[k]]`` (``lines``: the block's text split
    at ``\\n``; each frame's count line, comment line and atom lines follow each other) as
    `AtomsFrame` records numbered from ``first``; ``None`` for a frame left to ASE
    (`Declined`: not the common case, or malformed)."""
    out: list[AtomsFrame | None] = [None] * len(starts)
    heads: list[tuple[Any, ...] | None] = []
    for s in starts:
        try:
            n = int(lines[s])
            if n < 1:
                raise Declined
            info, cell, pbc, spec = _frame_header(lines[s + 1])
            columns, width = _properties(spec)
            heads.append((n, info, _cell(cell), _pbc(pbc), spec, columns, width))
        except Declined:
            heads.append(None)
        except Exception:  # ASE raises its own error for this frame
            heads.append(None)
    k = 0
    while k < len(starts):
        head = heads[k]
        if head is None:
            k += 1
            continue
        spec = head[4]
        group = [k]
        while (
            k + len(group) < len(starts)
            and (following := heads[k + len(group)]) is not None
            and following[4] == spec
        ):
            group.append(k + len(group))
        _read_group(lines, starts, first, heads, group, out)
        k = group[-1] + 1
    return out


def _read_group(
    lines: list[str], starts: list[int], first: int, heads: list, group: list[int], out: list
) -> None:
    """Frames ``group`` (consecutive, the same ``Properties``): their atom lines converted
    together; on anything unusual, frame by frame (a frame that still fails is left None)."""
    _, _, _, _, _, columns, width = heads[group[0]]
    rows: list[list[str]] = []
    counts = []
    for k in group:
        n, s = heads[k][0], starts[k]
        rows += map(str.split, lines[s + 2 : s + 2 + n])
        counts.append(n)
    try:
        if set(map(len, rows)) != {width}:
            raise Declined
        per_atom = _columns(rows, width, columns)
        numbers = _atomic_numbers(per_atom.pop("symbols"))
    except (Declined, ValueError, OverflowError, TypeError):
        if len(group) > 1:
            for k in group:
                _read_group(lines, starts, first, heads, [k], out)
        return
    positions = np.ascontiguousarray(per_atom.pop("positions"))
    per_atom = {name: np.ascontiguousarray(a) for name, a in per_atom.items()}
    at = 0
    for k, n in zip(group, counts, strict=False):
        _, info, cell, pbc, _, _, _ = heads[k]
        end = at + n
        mine = {name: a[at:end] for name, a in per_atom.items()}
        try:
            results, arrays = _results_and_arrays(info, mine)
        except Exception:
            at = end
            continue
        arrays = {"numbers": numbers[at:end], "positions": positions[at:end], **arrays}
        out[k] = AtomsFrame(
            first + k, arrays["numbers"], arrays["positions"], cell, pbc, info, arrays, results
        )
        at = end
