"""The atomistic store schema: what a store built from atomistic structures (``ase.Atoms``,
as periodic radius graphs) holds, where each property is read (`AtomsKeys`), the units a
store states, and the one-line error of a bad value in a frame (`frame_error`).

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
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from .._errors import AtomsInputError, InputError, InputTypeError

__all__ = [
    "ATOMS_PROPERTIES",
    "SHIFT_MAX",
    "AtomsInputError",
    "AtomsKeys",
    "check_finite",
    "frame_error",
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
#: The largest |unit shift| a store holds (``unit_shifts`` is int16).
SHIFT_MAX = int(np.iinfo(np.int16).max)


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


def frame_error(where: str, frame: int, what: str, msg: str) -> AtomsInputError:
    """The one-line error of a bad value: ``FILE: frame F: FIELD: what is wrong``."""
    return AtomsInputError(f"{where}: frame {frame}: {what}: {msg}")


def check_finite(values: np.ndarray, where: str, frame: int, what: str) -> np.ndarray:
    """``values`` (returned) when every float in it is finite, else the `frame_error` naming
    the first value that is not and its index."""
    if values.dtype.kind == "f" and not np.isfinite(values).all():
        bad = np.argwhere(~np.isfinite(values))[0].tolist()
        raise frame_error(where, frame, what, f"holds {values[tuple(bad)]} at {bad} (not finite)")
    return values
