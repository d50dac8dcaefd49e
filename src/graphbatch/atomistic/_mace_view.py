"""MACE batches straight from an atomistic graph store (`graphbatch.datasets.build_atoms_store`).

`MaceStoreReader` is the ``store_reader`` of `graphbatch.atomistic.mace`: it checks a store
(fields, elements against the z table, cutoff, the batch's dtype) and gives the store batch
path a `StoreView` whose transform (`graphbatch.atomistic._mace_transform.MaceTransform`)
turns one padded batch of the store's fields into the dict MACE's own ``AtomicData`` path
gives (`graphbatch.torch.loader` over ``AtomicData.from_config`` graphs with the same
preset): the same keys in the same order (`MACE_BATCH_KEYS`), dtypes, shapes and values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from numpy.typing import DTypeLike

from .._errors import InputError
from ..torch import StoreView
from ._mace_transform import LABELS, NUMPY_FLOATS, WEIGHTS, MaceTransform
from ._store_view import PADDING_KEYS, StoreFieldError, check_cutoff, check_fields, store_name

if TYPE_CHECKING:
    from ..datasets import GraphStore

__all__ = ["MACE_BATCH_KEYS", "MaceStoreReader", "StoreFieldError"]

#: The keys of MACE's batch dict (mace-torch 0.3.16's ``AtomicData``), then graphbatch's.
MACE_BATCH_KEYS = (
    "edge_index",
    "positions",
    "shifts",
    "unit_shifts",
    "cell",
    "node_attrs",
    "weight",
    "head",
    "energy_weight",
    "forces_weight",
    "stress_weight",
    "virials_weight",
    "dipole_weight",
    "charges_weight",
    "polarizability_weight",
    "forces",
    "energy",
    "stress",
    "virials",
    "dipole",
    "charges",
    "polarizability",
    "elec_temp",
    "total_charge",
    "total_spin",
    "pbc",
    "density_coefficients",
    "rcell",
    "volume",
    "fermi_level",
    "external_field",
    *PADDING_KEYS,
)


def _atomic_numbers(z_table: Any) -> list[int]:
    """The atomic numbers of a z table (a sequence or MACE's ``AtomicNumberTable``)."""
    zs = getattr(z_table, "zs", z_table)
    try:
        out = [int(z) for z in zs]
    except TypeError:
        raise InputError(
            f"z_table must be a sequence of atomic numbers or MACE's "
            f"AtomicNumberTable, got {z_table!r}"
        ) from None
    if not out or len(set(out)) != len(out) or min(out) < 1 or max(out) > 255:
        raise InputError(f"z_table must hold distinct atomic numbers 1..255, got {out}")
    return out


class MaceStoreReader:
    """Reads MACE batches from an atomistic store (module docstring). ``r_max``: the model's
    cutoff (Å); ``z_table``: its atomic numbers in one-hot order (a list or MACE's
    ``AtomicNumberTable``); ``heads``: its head names (default ``["Default"]``); ``dtype``:
    float dtype of the batch (default: torch's default dtype when the preset was made; a
    store gives float32 or float64 batches, MACE's dtypes)."""

    def __init__(
        self,
        r_max: float,
        z_table: Any = None,
        heads: Sequence[str] | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        self.r_max = float(r_max)
        self.zs = None if z_table is None else _atomic_numbers(z_table)
        self.heads = ["Default"] if heads is None else [str(h) for h in heads]
        if not self.heads:
            raise InputError("heads must name at least one head")
        self.dtype = torch.get_default_dtype() if dtype is None else dtype
        if not self.dtype.is_floating_point:
            raise InputError(f"dtype must be a float dtype, got {self.dtype}")

    def _check(self, store: GraphStore) -> list[int]:
        """Check ``store`` can feed this model (fields, z table, elements, cutoff, dtype);
        return the z table."""
        check_fields(
            store,
            "ga.mace",
            "`graphbatch data build extxyz FILE --cutoff R --out STORE` "
            "(graphbatch.datasets.build_atoms_store)",
        )
        name = store_name(store)
        elements = [int(z) for z in store.meta.get("elements", [])]
        if self.zs is None:
            raise StoreFieldError(
                f"{name}: ga.mace(r_max, z_table=...) needs the model's z "
                f"table to read a store (this store's elements: {elements})"
            )
        outside = [z for z in elements if z not in self.zs]
        if outside:
            raise StoreFieldError(
                f"{name}: element(s) {outside} (atomic numbers) are not in the z table {self.zs}"
            )
        check_cutoff(store, self.r_max, say_why=True)
        if self.dtype not in NUMPY_FLOATS:
            raise InputError(
                f"{name}: a store gives MACE batches of dtype torch.float32 or torch.float64, "
                f"not {self.dtype} (set ga.mace(dtype=...))"
            )
        return self.zs

    def for_store(self, store: GraphStore) -> StoreView:
        """The `StoreView` of ``store`` (checked first). The kernel gathers coordinates and
        cells as stored (float64, for the geometry), integers as stored, and labels and
        weights in the batch's dtype."""
        zs = self._check(store)
        fields = store.fields
        store_heads = [str(h) for h in store.meta.get("heads", ["Default"])]
        last = len(self.heads) - 1  # a head the model lacks gets its last one, as in MACE
        head_lut = np.array(
            [self.heads.index(h) if h in self.heads else last for h in store_heads] or [0],
            dtype=np.int64,
        )
        labels = [k for k in LABELS if k in fields]
        weights = [k for k in WEIGHTS if k in fields]
        batch_float = np.dtype(NUMPY_FLOATS[self.dtype])
        dtypes: dict[str, DTypeLike] = {
            k: batch_float if k in labels or k in weights else np.float64
            for k, spec in fields.items()
            if np.dtype(spec["dtype"]).kind == "f"
        }
        dtypes.update(
            unit_shifts=np.dtype(fields["unit_shifts"]["dtype"]),
            atomic_numbers=np.dtype(fields["atomic_numbers"]["dtype"]),
        )
        pads: dict[str, Any] = {"cell": self.r_max * np.eye(3), "unit_shifts": 1.0}
        pads.update({w: 0.0 for w in weights})
        transform = MaceTransform(
            self.r_max, zs, head_lut, self.dtype, labels, weights, "head" in fields
        )
        return StoreView(dtypes=dtypes, pads=pads, transform=transform, position_key="positions")
