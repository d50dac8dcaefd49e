"""The labels of atomistic frames, read and checked frame by frame (`read_labels`): MACE's
properties (energy, forces, stress, virials, charges) by the keys of `AtomsKeys`, their
per-property weights, the configuration weight, config type and head, and ``--keep`` keys.

As MACE's ``config_from_atoms``: a property is looked up in ``atoms.info`` (graph level) or
``atoms.arrays`` (per atom), then in the attached calculator's results; a missing optional
property gets value 0 and weight 0; ``config_<p>_weight`` and ``config_weight`` default to 1;
the configuration weight is ``config_weight x config_type_weights[config_type]``. Any value
a number can be read from is taken (Python or NumPy scalars, lists, integer or float32
arrays) and stored as float64; stress and virials as 3x3 matrices (Voigt input expanded).
The first bad value -- missing where required, not numeric, of the wrong shape, not finite --
stops the reading with `LabelsRefused`, which names the frame's position in the block and
carries the one-line `AtomsInputError` (file, frame, field).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._errors import AtomsInputError, GraphbatchError
from ._atoms import ATOMS_PROPERTIES, AtomsKeys, check_finite, frame_error
from ._extxyz import AtomsFrame

__all__ = ["BlockLabels", "LabelsRefused", "NameTable", "read_labels"]


class NameTable:
    """Names in order of first appearance, each with its code (its index in ``names``)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.codes: dict[str, int] = {}

    def code(self, name: str) -> int:
        """The code of ``name``, appended to ``names`` where new."""
        code = self.codes.get(name)
        if code is None:
            code = self.codes[name] = len(self.names)
            self.names.append(name)
        return code


@dataclass
class BlockLabels:
    """The labels of a block of frames, one entry per frame in frame order.

    ``values[p]``: property ``p``'s float64 value per frame (``[n, ...]`` per atom or the
    graph-level row shape; zeros where the frame lacks it); ``property_weights[p]``: its
    ``config_<p>_weight`` (0 where missing); ``weights``: the configuration weights;
    ``head_codes``/``config_type_codes`` index ``heads.names``/``config_types.names``;
    ``kept[k]``: the ``--keep`` key ``k`` per frame (node level: ``[n, ...]``; graph level:
    ``[1, ...]``), at ``kept_level[k]``; ``present[p]``: the frames that had ``p``."""

    values: dict[str, list[Any]]
    property_weights: dict[str, list[float]]
    present: dict[str, int]
    kept: dict[str, list[np.ndarray]]
    weights: list[float] = field(default_factory=list)
    head_codes: list[int] = field(default_factory=list)
    config_type_codes: list[int] = field(default_factory=list)
    kept_level: dict[str, str] = field(default_factory=dict)
    config_types: NameTable = field(default_factory=NameTable)
    heads: NameTable = field(default_factory=NameTable)


class LabelsRefused(GraphbatchError):
    """The labels of the frame at ``position`` in the block (0-based) are bad: ``error`` says
    which value and why."""

    def __init__(self, position: int, error: AtomsInputError) -> None:
        super().__init__(str(error))
        self.position = position
        self.error = error


def _lookup(frame: AtomsFrame, key: str, per_atom: bool) -> Any:
    """``arrays``/``info`` value of ``key``, else the calculator's result, else None."""
    value = (frame.arrays if per_atom else frame.info).get(key)
    if value is None:
        value = frame.results.get(key)
    return value


def _numeric(value: Any, where: str, frame: int, key: str) -> np.ndarray:
    """``value`` as a NumPy array of booleans, integers or floats (else the frame's error)."""
    try:
        array = np.asarray(value)
    except Exception as exc:  # pragma: no cover - numpy refuses odd objects
        raise frame_error(where, frame, key, f"not an array ({exc})") from None
    if array.dtype.kind not in "biuf":
        raise frame_error(
            where, frame, key, f"is not numeric ({array.dtype}, e.g. {str(value)[:40]!r})"
        )
    return array


def _as_matrix(array: np.ndarray, where: str, frame: int, key: str) -> np.ndarray:
    """A stress/virials value as a float64 3x3 matrix: Voigt ``(xx, yy, zz, yz, xz, xy)``, 9
    values in row order, or ``[3, 3]`` (MACE's ``voigt_to_matrix``)."""
    a = np.asarray(array, dtype=np.float64)
    if a.shape == (6,):
        return np.array([[a[0], a[5], a[4]], [a[5], a[1], a[3]], [a[4], a[3], a[2]]])
    if a.shape in ((9,), (3, 3)):
        return a.reshape(3, 3)
    raise frame_error(where, frame, key, f"needs 6 (Voigt) or 9 values, got shape {a.shape}")


def info_weight(info: Mapping, key: str, where: str, frame: int) -> float:
    """The weight ``info[key]`` (1 where absent) as a float: one finite number (MACE reads it
    with ``float``), else `AtomsInputError` naming the frame, the key and the value."""
    value = info.get(key, 1.0)
    if isinstance(value, float) and math.isfinite(value):  # the common case, at once
        return float(value)
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if not isinstance(value, (numbers.Real, np.bool_)):
        shown = value if isinstance(value, str) else str(value).replace("\n", " ")
        raise frame_error(where, frame, key, f"a weight is one number, got {shown[:40]!r}")
    weight = float(value)
    if not np.isfinite(weight):
        raise frame_error(where, frame, key, f"weight {weight} is not finite")
    return weight


def config_type(info: Mapping, where: str, frame: int) -> Any:
    """``info["config_type"]`` ("Default" where absent): one name (a string, or a number or
    flag ASE parsed from it), else `AtomsInputError` naming the frame and the value."""
    name = info.get("config_type", "Default")
    if isinstance(name, np.ndarray) and name.ndim == 0:
        name = name[()]
    if not isinstance(name, (str, numbers.Number, np.generic)):
        shown = str(name).replace("\n", " ")
        raise frame_error(
            where, frame, "config_type", f"a config type is one name, got {shown[:40]!r}"
        )
    return name


def _missing(frame: AtomsFrame, prop: str, key: str, where: str) -> AtomsInputError:
    """The error of a required property ``prop`` that ``frame`` lacks under ``key``."""
    what = "array" if ATOMS_PROPERTIES[prop][0] == "node" else "info key"
    hint = (
        f"; ASE read a calculator {prop!r}: use --{prop}-key {prop}"
        if prop in frame.results
        else ""
    )
    return frame_error(
        where,
        frame.frame,
        key,
        f"missing (no {what} {key!r}; required {prop}, set its key option or make it "
        f"optional{hint})",
    )


def property_value(frame: AtomsFrame, prop: str, key: str, where: str) -> np.ndarray | None:
    """Property ``prop`` of ``frame`` read under ``key`` as a finite float64 array of its
    schema shape (`ATOMS_PROPERTIES`; ``[n, ...]`` per atom), or None where the frame lacks
    it; a value of another shape, not numeric or not finite raises the frame's error."""
    level, shape, _ = ATOMS_PROPERTIES[prop]
    value = _lookup(frame, key, level == "node")
    if value is None:
        return None
    array = _numeric(value, where, frame.frame, key)
    if prop in ("stress", "virials"):
        array = _as_matrix(array, where, frame.frame, key)
    else:
        array = array.astype(np.float64, copy=False)
        want = (len(frame), *shape) if level == "node" else shape
        if array.shape != want:
            raise frame_error(where, frame.frame, key, f"has shape {array.shape}, expected {want}")
    return check_finite(array, where, frame.frame, key)


def keep_value(
    frame: AtomsFrame, key: str, where: str, kept: dict, kept_level: dict[str, str]
) -> None:
    """Append ``--keep`` key ``key`` of ``frame`` to ``kept[key]`` (checks: present, numeric,
    finite, the same level and row shape as in earlier frames)."""
    n = len(frame)
    in_arrays = key in frame.arrays
    value = frame.arrays[key] if in_arrays else frame.info.get(key)
    if value is None:
        raise frame_error(where, frame.frame, key, "missing (a --keep key must be in every frame)")
    level = "node" if in_arrays else "graph"
    if kept_level.setdefault(key, level) != level:
        raise frame_error(
            where,
            frame.frame,
            key,
            f"is per-{level} here but per-{kept_level[key]} in earlier frames",
        )
    array = check_finite(_numeric(value, where, frame.frame, key), where, frame.frame, key)
    row = array.shape[1:] if level == "node" else array.shape
    if level == "node" and array.shape[:1] != (n,):
        raise frame_error(where, frame.frame, key, f"has shape {array.shape} for {n} atoms")
    if kept[key] and row != kept[key][0].shape[1:]:
        raise frame_error(
            where,
            frame.frame,
            key,
            f"has rows of shape {row}, earlier frames {kept[key][0].shape[1:]}",
        )
    kept[key].append(array if level == "node" else array[None])


def _read_frame(
    labels: BlockLabels, frame: AtomsFrame, keys: AtomsKeys, used: dict[str, str], where: str
) -> None:
    """Append the labels of ``frame`` to ``labels`` (checked in the order: each property in
    ``used`` (`AtomsKeys.used`) with its weight, the config type, the configuration weight,
    the kept keys)."""
    info = frame.info
    for prop, key in used.items():
        value = property_value(frame, prop, key, where)
        if value is None:
            if prop in keys.required:
                raise _missing(frame, prop, key, where)
            level, shape, _ = ATOMS_PROPERTIES[prop]
            labels.values[prop].append(np.zeros((len(frame), *shape) if level == "node" else shape))
            labels.property_weights[prop].append(0.0)
            continue
        labels.values[prop].append(value)
        labels.present[prop] += 1
        labels.property_weights[prop].append(
            info_weight(info, f"config_{prop}_weight", where, frame.frame)
        )
    name = config_type(info, where, frame.frame)
    weight = info_weight(info, "config_weight", where, frame.frame) * float(
        keys.config_type_weights.get(name, 1.0)
    )
    if not np.isfinite(weight):
        raise frame_error(where, frame.frame, "config_weight", f"weight {weight} is not finite")
    head = keys.head if keys.head_key is None else str(info.get(keys.head_key, keys.head))
    for key in keys.keep:
        keep_value(frame, key, where, labels.kept, labels.kept_level)
    labels.weights.append(weight)
    labels.head_codes.append(labels.heads.code(head))
    labels.config_type_codes.append(labels.config_types.code(str(name)))


def read_labels(frames: Sequence[AtomsFrame], keys: AtomsKeys, where: str) -> BlockLabels:
    """The `BlockLabels` of ``frames`` (of the input named ``where``), or `LabelsRefused` at
    the first frame with a bad label value."""
    used = keys.used()
    labels = BlockLabels(
        values={p: [] for p in used},
        property_weights={p: [] for p in used},
        present={p: 0 for p in used},
        kept={k: [] for k in keys.keep},
    )
    for position, frame in enumerate(frames):
        try:
            _read_frame(labels, frame, keys, used, where)
        except AtomsInputError as error:
            raise LabelsRefused(position, error) from None
    return labels
