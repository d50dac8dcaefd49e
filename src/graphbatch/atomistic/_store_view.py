"""MACE batches straight from an atomistic graph store (`graphbatch.datasets.build_atoms_store`).

`MaceStoreReader` is the ``store_reader`` of `graphbatch.atomistic.mace`: it checks a store
(fields, elements against the z table, cutoff) and gives the store batch path a `StoreView`
whose transform turns one padded batch of the store's fields -- gathered by the batch kernel,
no per-graph objects -- into the dict MACE's own ``AtomicData`` path gives
(`graphbatch.torch.loader` over ``AtomicData.from_config`` graphs with the same preset): the
same keys in the same order, dtypes, shapes and values. Per batch, vectorised:

- ``node_attrs``: one-hot of the atomic numbers over the z table (zero rows for padding);
- ``cell``: MACE's ``get_neighborhood`` cell -- each non-periodic direction's row replaced by
  ``(max|positions| + 1) * 5 * r_max`` times the unit vector (per structure, as MACE does);
  padding graphs ``r_max * I``;
- ``shifts = unit_shifts @ cell`` per edge (padding edges ``(r_max, r_max, r_max)``);
- ``volume = det(cell)``, ``rcell = 2 pi inv(cell^T)`` (0 for a singular cell), as
  ``AtomicData.from_config``;
- ``head``: the store's head names mapped to the model's ``heads`` (a name not in ``heads``
  gets the last, as MACE does); weights and labels from the store, MACE's defaults (value 0,
  weight 1; ``total_spin`` 1) for properties the store does not hold, 0 on padding graphs.

Geometry is computed in float64 from the stored float64 values, then cast to ``dtype``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .._errors import InputError
from ..torch._preset import StoreView

if TYPE_CHECKING:
    from ..datasets import GraphStore

__all__ = ["MACE_BATCH_KEYS", "MaceStoreReader", "StoreFieldError"]

#: The keys of MACE's batch dict (mace-torch 0.3.16's ``AtomicData``), then graphbatch's.
MACE_BATCH_KEYS = (
    "edge_index", "positions", "shifts", "unit_shifts", "cell", "node_attrs", "weight", "head",
    "energy_weight", "forces_weight", "stress_weight", "virials_weight", "dipole_weight",
    "charges_weight", "polarizability_weight", "forces", "energy", "stress", "virials",
    "dipole", "charges", "polarizability", "elec_temp", "total_charge", "total_spin", "pbc",
    "density_coefficients", "rcell", "volume", "fermi_level", "external_field",
    "batch", "ptr", "node_mask", "edge_mask", "graph_mask", "graph_index", "edge_ptr",
    "num_graphs",
)
#: Store fields the MACE preset cannot do without.
NEEDED = ("positions", "atomic_numbers", "unit_shifts", "cell", "pbc")
#: Labels: name -> (level, per-row shape); weights of the stored ones.
_LABELS = {"energy": ("graph", ()), "forces": ("node", (3,)), "stress": ("graph", (3, 3)),
           "virials": ("graph", (3, 3)), "charges": ("node", ())}
_WEIGHTS = ("weight", "energy_weight", "forces_weight", "stress_weight", "virials_weight",
            "charges_weight")


class StoreFieldError(InputError):
    """A store cannot feed a preset: a field it needs is missing, or an element is not in the
    model's z table."""


def _zs(z_table: Any) -> list[int]:
    zs = getattr(z_table, "zs", z_table)
    try:
        out = [int(z) for z in zs]
    except TypeError:
        raise InputError(f"z_table must be a sequence of atomic numbers or MACE's "
                         f"AtomicNumberTable, got {z_table!r}") from None
    if not out or len(set(out)) != len(out) or min(out) < 1 or max(out) > 255:
        raise InputError(f"z_table must hold distinct atomic numbers 1..255, got {out}")
    return out


class MaceStoreReader:
    """Reads MACE batches from an atomistic store (module docstring). ``r_max``: the model's
    cutoff (Å); ``z_table``: its atomic numbers in one-hot order (a list or MACE's
    ``AtomicNumberTable``); ``heads``: its head names (default ``["Default"]``); ``dtype``:
    float dtype of the batch (default: torch's default dtype when the preset was made)."""

    def __init__(self, r_max: float, z_table: Any = None, heads: Sequence[str] | None = None,
                 dtype: torch.dtype | None = None) -> None:
        self.r_max = float(r_max)
        self.zs = None if z_table is None else _zs(z_table)
        self.heads = ["Default"] if heads is None else [str(h) for h in heads]
        if not self.heads:
            raise InputError("heads must name at least one head")
        self.dtype = torch.get_default_dtype() if dtype is None else dtype
        if not self.dtype.is_floating_point:
            raise InputError(f"dtype must be a float dtype, got {self.dtype}")

    def for_store(self, store: GraphStore) -> StoreView:
        fields = store.fields
        name = str(getattr(store, "path", store))
        missing = [f for f in NEEDED if f not in fields]
        if missing:
            raise StoreFieldError(
                f"{name}: the store has no field(s) {missing} that ga.mace needs (it has "
                f"{sorted(fields)}); build it with `graphbatch data build extxyz FILE --cutoff "
                "R --out STORE` (graphbatch.datasets.build_atoms_store)")
        elements = [int(z) for z in store.meta.get("elements", [])]
        if self.zs is None:
            raise StoreFieldError(f"{name}: ga.mace(r_max, z_table=...) needs the model's z "
                                  f"table to read a store (this store's elements: {elements})")
        outside = [z for z in elements if z not in self.zs]
        if outside:
            raise StoreFieldError(f"{name}: element(s) {outside} (atomic numbers) are not in "
                                  f"the z table {self.zs}")
        cutoff = store.meta.get("cutoff_angstrom")
        if cutoff is not None and self.r_max > float(cutoff) * (1 + 1e-12):
            raise StoreFieldError(f"{name}: r_max {self.r_max} is larger than the store's cutoff "
                                  f"{cutoff}: edges between {cutoff} and {self.r_max} are not in "
                                  "the store; build it again with --cutoff >= r_max")
        store_heads = [str(h) for h in store.meta.get("heads", ["Default"])]
        last = len(self.heads) - 1
        head_lut = np.array([self.heads.index(h) if h in self.heads else last
                             for h in store_heads] or [0], dtype=np.int64)
        c = self.r_max
        # floats gathered as stored (float64), cast to ``dtype`` once computed with
        dtypes = {k: np.float64 for k, spec in fields.items()
                  if np.dtype(spec["dtype"]).kind == "f"}
        # integers gathered as stored (whole-row copies), widened in torch
        dtypes.update(unit_shifts=np.dtype(fields["unit_shifts"]["dtype"]),
                      atomic_numbers=np.dtype(fields["atomic_numbers"]["dtype"]))
        pads: dict[str, Any] = {"cell": c * np.eye(3), "unit_shifts": 1.0}
        for w in _WEIGHTS:
            if w in fields:
                pads[w] = 0.0
        labels = [k for k in _LABELS if k in fields]
        weights = [k for k in _WEIGHTS if k in fields]
        return StoreView(dtypes=dtypes, pads=pads, transform=_MaceTransform(
            c, self.zs, head_lut, self.dtype, labels, weights, "head" in fields),
            position_key="positions")


class _MaceTransform:
    """The per-batch transform of `MaceStoreReader` (picklable: plain attributes)."""

    def __init__(self, r_max: float, zs: list[int], head_lut: np.ndarray, dtype: torch.dtype,
                 labels: list[str], weights: list[str], has_head: bool) -> None:
        self.r_max = r_max
        self.zs = zs
        lut = np.full(256, -1, dtype=np.int64)
        lut[zs] = np.arange(len(zs))
        self.z_lut = torch.from_numpy(lut)
        self.head_lut = torch.from_numpy(head_lut)
        self.dtype = dtype
        self.labels = labels
        self.weights = weights
        self.has_head = has_head

    def __call__(self, t: dict, shape: tuple[int, int, int], real_graphs: int) -> dict:
        n_node, n_edge, n_graph = shape
        dtype, c = self.dtype, self.r_max
        gm, nm = t["graph_mask"], t["node_mask"]
        pos = t["positions"]                                      # float64
        # MACE's get_neighborhood cell: non-periodic rows -> (max|pos| + 1) * 5 * r_max * e_k
        top = torch.zeros(n_graph, dtype=torch.float64).scatter_reduce_(
            0, t["batch"], pos.abs().amax(dim=1), "amax", include_self=True)
        grow = (top + 1) * 5 * c
        eye = torch.eye(3, dtype=torch.float64)
        replace = (~t["pbc"]) & gm[:, None]
        cell64 = torch.where(replace[:, :, None], grow[:, None, None] * eye, t["cell"])
        edge_graph = torch.repeat_interleave(torch.arange(n_graph), t["edge_ptr"].diff(),
                                             output_size=n_edge)
        unit_shifts = t["unit_shifts"].to(torch.float64)
        rows = cell64.reshape(n_graph, 9)[edge_graph]             # [E, 9]: each edge's cell
        shifts = (unit_shifts[:, 0:1] * rows[:, 0:3] + unit_shifts[:, 1:2] * rows[:, 3:6]
                  + unit_shifts[:, 2:3] * rows[:, 6:9])
        cell = cell64.to(dtype)
        volume = torch.linalg.det(cell)
        inv, _ = torch.linalg.inv_ex(cell.mT)
        rcell = torch.where((volume.abs() > 0)[:, None, None], 2 * torch.pi * inv,
                            torch.zeros((), dtype=dtype))
        pad_g = ~gm
        rcell = torch.where(pad_g[:, None, None], (2 * math.pi / c) * torch.eye(3, dtype=dtype),
                            rcell)
        volume = torch.where(pad_g, torch.tensor(c ** 3, dtype=dtype), volume)
        # one-hot node attributes over the z table; padding atoms (number 0) stay zero
        numbers = t["atomic_numbers"].long()
        idx = self.z_lut[numbers]
        bad = (idx < 0) & nm
        if bool(bad.any()):
            k = int(torch.nonzero(bad)[0, 0])
            g = int(t["graph_index"][int(t["batch"][k])])
            raise StoreFieldError(f"structure {g} of the store holds atomic number "
                                  f"{int(numbers[k])}, not in the z table {self.zs}")
        node_attrs = torch.zeros(n_node, len(self.zs), dtype=dtype)
        real = torch.nonzero(nm).squeeze(1)
        node_attrs[real, idx[real]] = 1
        gf = gm.to(dtype)

        def label(name: str, level: str, row: tuple) -> torch.Tensor:
            if name in t:
                return t[name].to(dtype)
            return torch.zeros((n_node if level == "node" else n_graph, *row), dtype=dtype)

        def weight(name: str, row: tuple = ()) -> torch.Tensor:
            w = t[name].to(dtype) if name in t else gf
            return w.reshape(n_graph, *([1] * len(row))).expand(n_graph, *row).clone() \
                if row else w

        head = (self.head_lut[t["head"].long()] if self.has_head
                else torch.zeros(n_graph, dtype=torch.int64))
        head = torch.where(gm, head, torch.zeros((), dtype=torch.int64))
        zeros_g = torch.zeros(n_graph, dtype=dtype)
        out = {
            "edge_index": t["edge_index"],
            "positions": pos.to(dtype),
            "shifts": shifts.to(dtype),
            "unit_shifts": unit_shifts.to(dtype),
            "cell": cell.reshape(3 * n_graph, 3),
            "node_attrs": node_attrs,
            "weight": weight("weight"),
            "head": head,
            "energy_weight": weight("energy_weight"),
            "forces_weight": weight("forces_weight"),
            "stress_weight": weight("stress_weight"),
            "virials_weight": weight("virials_weight"),
            "dipole_weight": weight("dipole_weight", (3,)),
            "charges_weight": weight("charges_weight"),
            "polarizability_weight": weight("polarizability_weight", (3, 3)),
            "forces": label("forces", "node", (3,)),
            "energy": label("energy", "graph", ()),
            "stress": label("stress", "graph", (3, 3)),
            "virials": label("virials", "graph", (3, 3)),
            "dipole": torch.zeros(n_graph, 3, dtype=dtype),
            "charges": label("charges", "node", ()),
            "polarizability": torch.zeros(n_graph, 3, 3, dtype=dtype),
            "elec_temp": zeros_g,
            "total_charge": zeros_g.clone(),
            "total_spin": gf.clone(),
            "pbc": t["pbc"],
            "density_coefficients": torch.zeros(n_node, 1, dtype=dtype),
            "rcell": rcell.reshape(3 * n_graph, 3),
            "volume": volume,
            "fermi_level": zeros_g.clone(),
            "external_field": torch.zeros(n_graph, 3, dtype=dtype),
        }
        for key in ("batch", "ptr", "node_mask", "edge_mask", "graph_mask", "graph_index",
                    "edge_ptr", "num_graphs"):
            out[key] = t[key]
        return out


#: Store fields the fairchem preset cannot do without.
FAIRCHEM_NEEDED = NEEDED


class FairchemStoreReader:
    """Reads fairchem batches from an atomistic store: the padded dict `ga.fairchem`'s preset
    gives over fairchem ``AtomicData`` graphs (``to_fairchem`` turns it into fairchem's batch):
    ``pos``, ``atomic_numbers``, ``cell`` ``[G, 3, 3]``, ``pbc``, ``edge_index`` as fairchem
    orders it (neighbour, centre: the store's edges flipped), ``cell_offsets`` (the unit
    shifts), count fields ``natoms``/``nedges``, ``charge``/``spin`` 0, ``fixed`` 0, ``tags``
    (a kept ``tags`` field, else 0), ``energy``/``forces``/``stress`` where stored, ``sid``
    (the store index) and ``dataset`` (``dataset``, fairchem's task name, when given).
    Floats are float32, fairchem's dtype."""

    def __init__(self, r_max: float, dataset: str | None = None) -> None:
        self.r_max = float(r_max)
        self.dataset = dataset

    def for_store(self, store: GraphStore) -> StoreView:
        fields = store.fields
        name = str(getattr(store, "path", store))
        missing = [f for f in FAIRCHEM_NEEDED if f not in fields]
        if missing:
            raise StoreFieldError(
                f"{name}: the store has no field(s) {missing} that ga.fairchem needs (it has "
                f"{sorted(fields)}); build it with `graphbatch data build extxyz|ase-db ...`")
        cutoff = store.meta.get("cutoff_angstrom")
        if cutoff is not None and self.r_max > float(cutoff) * (1 + 1e-12):
            raise StoreFieldError(f"{name}: r_max {self.r_max} is larger than the store's cutoff "
                                  f"{cutoff}; build it again with --cutoff >= r_max")
        dtypes = {k: np.float32 for k, spec in fields.items()
                  if np.dtype(spec["dtype"]).kind == "f"}
        dtypes.update(unit_shifts=np.dtype(fields["unit_shifts"]["dtype"]),
                      atomic_numbers=np.dtype(fields["atomic_numbers"]["dtype"]))
        pads = {"cell": self.r_max * np.eye(3), "unit_shifts": 1}
        labels: list[str] = [k for k in ("energy", "forces", "stress") if k in fields]
        return StoreView(dtypes=dtypes, pads=pads, transform=_FairchemTransform(
            self.dataset, labels, "tags" in fields), position_key="positions")


class _FairchemTransform:
    def __init__(self, dataset: str | None, labels: list[str], has_tags: bool) -> None:
        self.dataset = dataset
        self.labels = labels
        self.has_tags = has_tags

    def __call__(self, t: dict, shape: tuple[int, int, int], real_graphs: int) -> dict:
        n_node, _, n_graph = shape
        index = t["graph_index"].tolist()
        out = {
            "pos": t["positions"],
            "atomic_numbers": t["atomic_numbers"].long(),
            "cell": t["cell"],
            "pbc": t["pbc"],
            "natoms": t["ptr"].diff(),
            "edge_index": t["edge_index"].flip(0),
            "cell_offsets": t["unit_shifts"].to(torch.float32),
            "nedges": t["edge_ptr"].diff(),
            "charge": torch.zeros(n_graph, dtype=torch.int64),
            "spin": torch.zeros(n_graph, dtype=torch.int64),
            "fixed": torch.zeros(n_node, dtype=torch.int64),
            "tags": (torch.where(t["node_mask"], t["tags"].long(), 0) if self.has_tags
                     else torch.zeros(n_node, dtype=torch.int64)),
        }
        for key in self.labels:
            out[key] = t[key]
        out["sid"] = [[str(i)] if i >= 0 else [""] for i in index]
        if self.dataset is not None:
            out["dataset"] = [[self.dataset] if i >= 0 else None for i in index]
        for key in ("batch", "ptr", "node_mask", "edge_mask", "graph_mask", "graph_index",
                    "edge_ptr", "num_graphs"):
            out[key] = t[key]
        return out
