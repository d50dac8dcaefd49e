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
The transform works on NumPy views of the kernel's arrays and writes its outputs into one new
buffer per batch (labels and weights the kernel already gathered in ``dtype``); its plain
torch form (`_MaceTransform.reference`, also used for dtypes other than float32/float64) gives
the same dicts bit for bit (``tests/atomistic/test_atomistic_store.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from numpy.typing import DTypeLike

from .._errors import InputError
from ..torch import StoreView

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
    "batch",
    "ptr",
    "node_mask",
    "edge_mask",
    "graph_mask",
    "graph_index",
    "edge_ptr",
    "num_graphs",
)
#: The padded batch's structure, passed through unchanged by every transform here.
_PADDING_KEYS = (
    "batch",
    "ptr",
    "node_mask",
    "edge_mask",
    "graph_mask",
    "graph_index",
    "edge_ptr",
    "num_graphs",
)
#: Store fields the MACE preset cannot do without.
NEEDED = ("positions", "atomic_numbers", "unit_shifts", "cell", "pbc")
#: Labels: name -> (level, per-row shape); weights of the stored ones.
_LABELS: dict[str, tuple[str, tuple[int, ...]]] = {
    "energy": ("graph", ()),
    "forces": ("node", (3,)),
    "stress": ("graph", (3, 3)),
    "virials": ("graph", (3, 3)),
    "charges": ("node", ()),
}
_WEIGHTS = (
    "weight",
    "energy_weight",
    "forces_weight",
    "stress_weight",
    "virials_weight",
    "charges_weight",
)


class StoreFieldError(InputError):
    """A store cannot feed a preset: a field it needs is missing, or an element is not in the
    model's z table."""


def _zs(z_table: Any) -> list[int]:
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
    float dtype of the batch (default: torch's default dtype when the preset was made)."""

    def __init__(
        self,
        r_max: float,
        z_table: Any = None,
        heads: Sequence[str] | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        self.r_max = float(r_max)
        self.zs = None if z_table is None else _zs(z_table)
        self.heads = ["Default"] if heads is None else [str(h) for h in heads]
        if not self.heads:
            raise InputError("heads must name at least one head")
        self.dtype = torch.get_default_dtype() if dtype is None else dtype
        if not self.dtype.is_floating_point:
            raise InputError(f"dtype must be a float dtype, got {self.dtype}")

    def for_store(self, store: GraphStore, *, reference: bool = False) -> StoreView:
        """The `StoreView` of ``store`` (checked first). ``reference``: the plain form of the
        transform (torch, every float gathered as float64: `_MaceTransform.reference`), which
        the fast one equals exactly (tests); also used for float dtypes NumPy lacks."""
        fields = store.fields
        name = str(getattr(store, "path", store))
        missing = [f for f in NEEDED if f not in fields]
        if missing:
            raise StoreFieldError(
                f"{name}: the store has no field(s) {missing} that ga.mace needs (it has "
                f"{sorted(fields)}); build it with `graphbatch data build extxyz FILE --cutoff "
                "R --out STORE` (graphbatch.datasets.build_atoms_store)"
            )
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
        cutoff = store.meta.get("cutoff_angstrom")
        if cutoff is not None and self.r_max > float(cutoff) * (1 + 1e-12):
            raise StoreFieldError(
                f"{name}: r_max {self.r_max} is larger than the store's cutoff "
                f"{cutoff}: edges between {cutoff} and {self.r_max} are not in "
                "the store; build it again with --cutoff >= r_max"
            )
        store_heads = [str(h) for h in store.meta.get("heads", ["Default"])]
        last = len(self.heads) - 1
        head_lut = np.array(
            [self.heads.index(h) if h in self.heads else last for h in store_heads] or [0],
            dtype=np.int64,
        )
        c = self.r_max
        # floats gathered as stored (float64), cast to ``dtype`` once computed with
        dtypes: dict[str, DTypeLike] = {
            k: np.float64 for k, spec in fields.items() if np.dtype(spec["dtype"]).kind == "f"
        }
        # integers gathered as stored (whole-row copies), widened in torch
        dtypes.update(
            unit_shifts=np.dtype(fields["unit_shifts"]["dtype"]),
            atomic_numbers=np.dtype(fields["atomic_numbers"]["dtype"]),
        )
        pads: dict[str, Any] = {"cell": c * np.eye(3), "unit_shifts": 1.0}
        for w in _WEIGHTS:
            if w in fields:
                pads[w] = 0.0
        labels = [k for k in _LABELS if k in fields]
        weights = [k for k in _WEIGHTS if k in fields]
        transform = _MaceTransform(
            c, self.zs, head_lut, self.dtype, labels, weights, "head" in fields, fast=not reference
        )
        if transform.fast:
            # labels and weights are only cast: the kernel gathers them in the batch's dtype
            out = np.dtype(_NUMPY_FLOATS[self.dtype])
            dtypes.update({k: out for k in (*labels, *weights)})
        return StoreView(dtypes=dtypes, pads=pads, transform=transform, position_key="positions")


#: torch float dtypes the NumPy transform writes (others take `_MaceTransform.reference`).
_NUMPY_FLOATS = {torch.float32: np.float32, torch.float64: np.float64}
#: Outputs that are zero but where set (one zeroed block per batch), with their row shapes.
_ZERO_ROWS: dict[str, tuple[str, tuple[int, ...] | None]] = {
    "node_attrs": ("node", None),
    "dipole": ("graph", (3,)),
    "polarizability": ("graph", (3, 3)),
    "elec_temp": ("graph", ()),
    "total_charge": ("graph", ()),
    "density_coefficients": ("node", (1,)),
    "fermi_level": ("graph", ()),
    "external_field": ("graph", (3,)),
}
#: Graph-mask copies (1 on real graphs, 0 on padding) and their row shapes.
_MASK_ROWS = {"dipole_weight": (3,), "polarizability_weight": (3, 3), "total_spin": ()}
#: Largest ``max |unit shift|`` served by a per-(graph, shift) table in `_edge_shifts`.
_TABLE_SHIFT = 4


class _BatchBuffer:
    """Where the outputs a `_MaceTransform` writes lie in one buffer per batch of one shape:
    ``entries`` ``{key: (offset, shape, dtype)}``, the first ``zero_bytes`` bytes are the
    outputs that start as zeros."""

    __slots__ = ("entries", "nbytes", "zero_bytes")

    def __init__(self, specs: list[tuple[str, tuple, np.dtype]], n_zero: int) -> None:
        self.entries = {}
        at = 0
        for k, (key, shp, dt) in enumerate(specs):
            if k == n_zero:
                self.zero_bytes = at
            self.entries[key] = (at, shp, dt)
            at += -(-dt.itemsize * int(np.prod(shp, dtype=np.int64)) // 64) * 64
        if n_zero == len(specs):
            self.zero_bytes = at
        self.nbytes = max(at, 64)


_GRIDS: dict[int, np.ndarray] = {}


def _shift_grid(m: int) -> np.ndarray:
    """Every integer shift with components in ``-m..m`` as float64 columns ``[3, R**3]``
    (``R = 2 m + 1``; shift ``(u0, u1, u2)`` is column ``(u0 + m) R^2 + (u1 + m) R + u2 + m``)."""
    grid = _GRIDS.get(m)
    if grid is None:
        r = 2 * m + 1
        grid = _GRIDS[m] = (np.indices((r, r, r)).reshape(3, -1) - m).astype(np.float64)
        grid.flags.writeable = False
    return grid


def _edge_shifts(
    unit_shifts: np.ndarray,
    cell: np.ndarray,
    edge_counts: np.ndarray,
    out: np.ndarray,
    unit_float: np.ndarray | None = None,
) -> None:
    """``out[e] = unit_shifts[e] @ cell[graph of e]`` (edges of graph ``g`` are a run of
    ``edge_counts[g]`` rows), computed in float64 as ``(u0 * c0 + u1 * c1) + u2 * c2`` (each
    product and sum rounded in turn: the same bits on every CPU) and cast to ``out``'s dtype.
    With ``max |u| = m <= _TABLE_SHIFT`` the values are computed once per graph and distinct
    shift (``R**3`` rows per graph, ``R = 2 m + 1``) and every edge reads its row (found from
    ``unit_float``, the unit shifts already cast to ``out``'s dtype, when given); otherwise
    edge by edge."""
    n_edge, n_graph = unit_shifts.shape[0], cell.shape[0]
    if n_edge == 0:
        return
    m = max(int(unit_shifts.max()), -int(unit_shifts.min()))
    r = 2 * m + 1
    if m <= _TABLE_SHIFT and n_graph * r**3 <= n_edge:
        grid = _shift_grid(m)  # [3, R^3]
        c = cell.transpose(0, 2, 1)[:, :, :, None]  # [G, d, k, 1] = cell[g, k, d]
        table = grid[0] * c[:, :, 0]
        table += grid[1] * c[:, :, 1]
        table += grid[2] * c[:, :, 2]  # [G, d, R^3]
        table = table.transpose(0, 2, 1).astype(out.dtype)  # [G, R^3, d]
        # row of edge e: its graph's block, then (u0 + m) R^2 + (u1 + m) R + (u2 + m); the
        # small integers are exact in any float dtype, so one matrix-vector product finds it
        if unit_float is None:
            unit_float = unit_shifts.astype(out.dtype)
        code = (unit_float @ np.array([r * r, r, 1], dtype=unit_float.dtype)).astype(np.intp)
        code += np.repeat(
            np.arange(n_graph, dtype=np.intp) * r**3 + m * (r * r + r + 1), edge_counts
        )
        # one gather of whole rows (each row one opaque item of its 3 values)
        row = np.dtype((np.void, 3 * out.dtype.itemsize))
        np.take(table.reshape(-1).view(row), code, out=out.reshape(-1).view(row), mode="clip")
        return
    per_edge = np.repeat(cell.reshape(n_graph, 9).T, edge_counts, axis=1)  # [9, E]
    ut = unit_shifts.T.astype(np.float64)  # [3, E]
    st = ut[0] * per_edge[0:3]
    st += ut[1] * per_edge[3:6]
    st += ut[2] * per_edge[6:9]
    out[...] = st.T


class _MaceTransform:
    """The per-batch transform of `MaceStoreReader` (picklable: plain attributes). The fast
    form (``fast``, float16/32/64) works on NumPy views of the batch kernel's arrays and
    writes its outputs into one new buffer per batch; `reference` is the plain torch form
    (tests check both give the same dicts, bit for bit)."""

    def __init__(
        self,
        r_max: float,
        zs: list[int],
        head_lut: np.ndarray,
        dtype: torch.dtype,
        labels: list[str],
        weights: list[str],
        has_head: bool,
        fast: bool = True,
    ) -> None:
        self.r_max = r_max
        self.zs = zs
        lut = np.full(256, -1, dtype=np.int64)
        lut[zs] = np.arange(len(zs))
        self.z_lut = torch.from_numpy(lut)
        self.z_lut_np = lut
        self.head_lut = torch.from_numpy(head_lut)
        self.head_lut_np = head_lut
        self.dtype = dtype
        self.labels = labels
        self.weights = weights
        self.has_head = has_head
        self.fast = bool(fast) and dtype in _NUMPY_FLOATS
        self._layouts: dict = {}

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_layouts"] = {}
        return state

    def _layout(self, shape: tuple[int, int, int]) -> _BatchBuffer:
        """Where the outputs of a batch of ``shape`` lie in its buffer (cached per shape)."""
        hit = self._layouts.get(shape)
        if hit is None:
            n = {"node": shape[0], "edge": shape[1], "graph": shape[2]}
            f = np.dtype(_NUMPY_FLOATS[self.dtype])
            zero: list[tuple[str, tuple[int, ...], np.dtype]] = []
            for key, (level, row) in _ZERO_ROWS.items():
                zero.append((key, (n[level], *(row if row is not None else (len(self.zs),))), f))
            for name, (level, row) in _LABELS.items():
                if name not in self.labels:
                    zero.append((name, (n[level], *row), f))
            rest = [
                ("shifts", (shape[1], 3), f),
                ("unit_shifts", (shape[1], 3), f),
                ("cell", (3 * shape[2], 3), f),
                ("rcell", (3 * shape[2], 3), f),
                ("head", (shape[2],), np.dtype(np.int64)),
                ("graph_float", (shape[2],), f),
            ]
            if f != np.float64:
                rest.append(("positions", (shape[0], 3), f))
            rest += [(key, (shape[2], *row), f) for key, row in _MASK_ROWS.items()]
            if len(self._layouts) >= 256:
                self._layouts.clear()
            hit = self._layouts[shape] = _BatchBuffer(zero + rest, len(zero))
        return hit

    def __call__(self, t: dict, shape: tuple[int, int, int], real_graphs: int) -> dict:
        if not self.fast:
            return self.reference(t, shape, real_graphs)
        n_graph, c = shape[2], self.r_max
        lay = self._layout(shape)
        buf = np.empty(lay.nbytes, dtype=np.uint8)
        buf[: lay.zero_bytes] = 0
        arrays = {key: np.ndarray(shp, dt, buf, at) for key, (at, shp, dt) in lay.entries.items()}
        g_real = int(real_graphs)
        node_ptr = t["ptr"].numpy()
        n_real = int(node_ptr[g_real])
        pos = t["positions"].numpy()  # float64
        pbc = t["pbc"].numpy()
        cell64 = t["cell"].numpy()
        # MACE's get_neighborhood cell: non-periodic rows -> (max|pos| + 1) * 5 * r_max * e_k
        open_rows = ~pbc[:g_real]
        if open_rows.any():
            cell64 = cell64.copy()
            a = np.abs(pos[:n_real])
            most = np.append(np.maximum(np.maximum(a[:, 0], a[:, 1]), a[:, 2]), 0.0)
            top = np.maximum.reduceat(most, node_ptr[:g_real])
            top[node_ptr[1 : g_real + 1] == node_ptr[:g_real]] = 0.0  # graphs without atoms
            grow = (top + 1) * 5 * c
            g, k = np.nonzero(open_rows)
            cell64[g, k, :] = 0.0
            cell64[g, k, k] = grow[g]
        unit_shifts = t["unit_shifts"].numpy()
        arrays["unit_shifts"][...] = unit_shifts
        _edge_shifts(
            unit_shifts,
            cell64,
            np.diff(t["edge_ptr"].numpy()),
            arrays["shifts"],
            arrays["unit_shifts"],
        )
        cell_out = arrays["cell"]
        cell_out[...] = cell64.reshape(3 * n_graph, 3)
        # volume and reciprocal cell as MACE's AtomicData computes them (torch's LU)
        cell = torch.from_numpy(cell_out).view(n_graph, 3, 3)
        volume = torch.linalg.det(cell)
        inv = torch.linalg.inv_ex(cell.mT)[0].numpy()
        vol = volume.numpy()
        rcell = arrays["rcell"]
        np.multiply(inv.reshape(3 * n_graph, 3), 2 * math.pi, out=rcell)
        rcell.reshape(n_graph, 9)[~(np.abs(vol) > 0)] = 0
        if g_real < n_graph:
            rcell.reshape(n_graph, 3, 3)[g_real:] = (2 * math.pi / c) * np.eye(3, dtype=rcell.dtype)
            vol[g_real:] = c**3
        # one-hot node attributes over the z table; padding atoms stay zero
        idx = self.z_lut_np.take(t["atomic_numbers"].numpy()[:n_real])
        if n_real and int(idx.min()) < 0:
            bad = int(np.flatnonzero(idx < 0)[0])
            numbers = t["atomic_numbers"].numpy()
            structure = int(t["graph_index"].numpy()[int(t["batch"].numpy()[bad])])
            raise StoreFieldError(
                f"structure {structure} of the store holds atomic number "
                f"{int(numbers[bad])}, not in the z table {self.zs}"
            )
        node_attrs = arrays["node_attrs"]
        width = len(self.zs)
        node_attrs.reshape(-1)[np.arange(0, n_real * width, width) + idx] = 1
        gf = arrays["graph_float"]
        gf[:g_real] = 1
        gf[g_real:] = 0
        for key in _MASK_ROWS:
            arrays[key][...] = gf.reshape(n_graph, *([1] * (arrays[key].ndim - 1)))
        head = arrays["head"]
        if self.has_head:
            self.head_lut_np.take(t["head"].numpy()[:g_real], out=head[:g_real])
        else:
            head[:g_real] = 0
        head[g_real:] = 0
        tensors = {key: torch.from_numpy(a) for key, a in arrays.items()}
        weights = {name: t[name] if name in t else tensors["graph_float"] for name in _WEIGHTS}
        labels = {name: t[name] if name in t else tensors[name] for name in _LABELS}
        out = {
            "edge_index": t["edge_index"],
            "positions": tensors["positions"] if "positions" in tensors else t["positions"],
            "shifts": tensors["shifts"],
            "unit_shifts": tensors["unit_shifts"],
            "cell": tensors["cell"],
            "node_attrs": tensors["node_attrs"],
            "weight": weights["weight"],
            "head": tensors["head"],
            "energy_weight": weights["energy_weight"],
            "forces_weight": weights["forces_weight"],
            "stress_weight": weights["stress_weight"],
            "virials_weight": weights["virials_weight"],
            "dipole_weight": tensors["dipole_weight"],
            "charges_weight": weights["charges_weight"],
            "polarizability_weight": tensors["polarizability_weight"],
            "forces": labels["forces"],
            "energy": labels["energy"],
            "stress": labels["stress"],
            "virials": labels["virials"],
            "dipole": tensors["dipole"],
            "charges": labels["charges"],
            "polarizability": tensors["polarizability"],
            "elec_temp": tensors["elec_temp"],
            "total_charge": tensors["total_charge"],
            "total_spin": tensors["total_spin"],
            "pbc": t["pbc"],
            "density_coefficients": tensors["density_coefficients"],
            "rcell": tensors["rcell"],
            "volume": volume,
            "fermi_level": tensors["fermi_level"],
            "external_field": tensors["external_field"],
        }
        if "positions" in tensors:
            arrays["positions"][...] = pos
        for key in _PADDING_KEYS:
            out[key] = t[key]
        return out

    def reference(self, t: dict, shape: tuple[int, int, int], real_graphs: int) -> dict:
        """The plain form of the transform: torch ops over the batch, floats gathered as
        float64 (the fast `__call__` gives exactly these dicts: tests)."""
        n_node, n_edge, n_graph = shape
        dtype, c = self.dtype, self.r_max
        gm, nm = t["graph_mask"], t["node_mask"]
        pos = t["positions"]  # float64
        # MACE's get_neighborhood cell: non-periodic rows -> (max|pos| + 1) * 5 * r_max * e_k
        top = torch.zeros(n_graph, dtype=torch.float64).scatter_reduce_(
            0, t["batch"], pos.abs().amax(dim=1), "amax", include_self=True
        )
        grow = (top + 1) * 5 * c
        eye = torch.eye(3, dtype=torch.float64)
        replace = (~t["pbc"]) & gm[:, None]
        cell64 = torch.where(replace[:, :, None], grow[:, None, None] * eye, t["cell"])
        edge_graph = torch.repeat_interleave(
            torch.arange(n_graph), t["edge_ptr"].diff(), output_size=n_edge
        )
        unit_shifts = t["unit_shifts"].to(torch.float64)
        rows = cell64.reshape(n_graph, 9)[edge_graph]  # [E, 9]: each edge's cell
        shifts = (
            unit_shifts[:, 0:1] * rows[:, 0:3]
            + unit_shifts[:, 1:2] * rows[:, 3:6]
            + unit_shifts[:, 2:3] * rows[:, 6:9]
        )
        cell = cell64.to(dtype)
        volume = torch.linalg.det(cell)
        inv, _ = torch.linalg.inv_ex(cell.mT)
        rcell = torch.where(
            (volume.abs() > 0)[:, None, None], 2 * torch.pi * inv, torch.zeros((), dtype=dtype)
        )
        pad_g = ~gm
        rcell = torch.where(
            pad_g[:, None, None], (2 * math.pi / c) * torch.eye(3, dtype=dtype), rcell
        )
        volume = torch.where(pad_g, torch.tensor(c**3, dtype=dtype), volume)
        # one-hot node attributes over the z table; padding atoms (number 0) stay zero
        numbers = t["atomic_numbers"].long()
        idx = self.z_lut[numbers]
        bad = (idx < 0) & nm
        if bool(bad.any()):
            k = int(torch.nonzero(bad)[0, 0])
            g = int(t["graph_index"][int(t["batch"][k])])
            raise StoreFieldError(
                f"structure {g} of the store holds atomic number "
                f"{int(numbers[k])}, not in the z table {self.zs}"
            )
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
            return w.reshape(n_graph, *([1] * len(row))).expand(n_graph, *row).clone() if row else w

        head = (
            self.head_lut[t["head"].long()]
            if self.has_head
            else torch.zeros(n_graph, dtype=torch.int64)
        )
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
        for key in _PADDING_KEYS:
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
                f"{sorted(fields)}); build it with `graphbatch data build extxyz|ase-db ...`"
            )
        cutoff = store.meta.get("cutoff_angstrom")
        if cutoff is not None and self.r_max > float(cutoff) * (1 + 1e-12):
            raise StoreFieldError(
                f"{name}: r_max {self.r_max} is larger than the store's cutoff "
                f"{cutoff}; build it again with --cutoff >= r_max"
            )
        dtypes = {
            k: np.float32 for k, spec in fields.items() if np.dtype(spec["dtype"]).kind == "f"
        }
        dtypes.update(
            unit_shifts=np.dtype(fields["unit_shifts"]["dtype"]),
            atomic_numbers=np.dtype(fields["atomic_numbers"]["dtype"]),
        )
        pads = {"cell": self.r_max * np.eye(3), "unit_shifts": 1}
        labels: list[str] = [k for k in ("energy", "forces", "stress") if k in fields]
        return StoreView(
            dtypes=dtypes,
            pads=pads,
            transform=_FairchemTransform(self.dataset, labels, "tags" in fields),
            position_key="positions",
        )


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
            "tags": (
                torch.where(t["node_mask"], t["tags"].long(), 0)
                if self.has_tags
                else torch.zeros(n_node, dtype=torch.int64)
            ),
        }
        for key in self.labels:
            out[key] = t[key]
        out["sid"] = [[str(i)] if i >= 0 else [""] for i in index]
        if self.dataset is not None:
            out["dataset"] = [[self.dataset] if i >= 0 else None for i in index]
        for key in _PADDING_KEYS:
            out[key] = t[key]
        return out
