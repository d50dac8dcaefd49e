"""The per-batch transform of the MACE store reader (`MaceTransform`): one padded batch of an
atomistic store's fields -- gathered by the batch kernel, no per-graph objects -- into the
dict MACE's own ``AtomicData`` path gives (`graphbatch.atomistic._mace_view`), vectorised:

- ``node_attrs``: one-hot of the atomic numbers over the z table (zero rows for padding);
- ``cell``: MACE's ``get_neighborhood`` cell -- each non-periodic direction's row replaced by
  ``(max|positions| + 1) * 5 * r_max`` times the unit vector (per structure, as MACE does);
  padding graphs ``r_max * I``;
- ``shifts = unit_shifts @ cell`` per edge (padding edges ``(r_max, r_max, r_max)``);
- ``volume = det(cell)``, ``rcell = 2 pi inv(cell^T)`` (0 for a singular cell), as
  ``AtomicData.from_config`` (torch's LU);
- ``head``: the store's head codes mapped to the model's heads; weights and labels from the
  store, MACE's defaults (value 0, weight 1; ``total_spin`` 1) for properties the store does
  not hold, 0 on padding graphs.

Geometry is computed in float64 from the stored float64 values, then cast to the batch's
dtype (float32 or float64). The transform works on NumPy views of the kernel's arrays and
writes its outputs into one new buffer per batch; labels and weights come from the kernel,
already gathered in the batch's dtype. Its plain torch form
(tests/atomistic/_mace_reference.py) gives the same dicts bit for bit (tests).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ._store_view import PADDING_KEYS, StoreFieldError

__all__ = ["LABELS", "NUMPY_FLOATS", "WEIGHTS", "MaceTransform", "edge_shifts"]

#: torch float dtypes of MACE batches read from a store, with their NumPy dtypes.
NUMPY_FLOATS = {torch.float32: np.float32, torch.float64: np.float64}
#: Labels a store may hold: name -> (level, per-row shape).
LABELS: dict[str, tuple[str, tuple[int, ...]]] = {
    "energy": ("graph", ()),
    "forces": ("node", (3,)),
    "stress": ("graph", (3, 3)),
    "virials": ("graph", (3, 3)),
    "charges": ("node", ()),
}
#: Weights a store may hold (1 on real graphs where it does not).
WEIGHTS = (
    "weight",
    "energy_weight",
    "forces_weight",
    "stress_weight",
    "virials_weight",
    "charges_weight",
)
#: Outputs that are zero but where set (one zeroed block per batch), with their row shapes
#: (None: one column per element of the z table).
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
#: Largest ``max |unit shift|`` served by a per-(graph, shift) table in `edge_shifts`.
_TABLE_SHIFT = 4


class _BatchBuffer:
    """Where the outputs a `MaceTransform` writes lie in one buffer per batch of one shape:
    ``entries`` ``{key: (byte offset, shape, dtype)}`` (each 64-byte aligned); the first
    ``zero_bytes`` bytes are the outputs that start as zeros; ``nbytes`` in all."""

    __slots__ = ("entries", "nbytes", "zero_bytes")

    def __init__(self, specs: list[tuple[str, tuple, np.dtype]], n_zero: int) -> None:
        self.entries = {}
        at = 0
        for k, (key, shape, dtype) in enumerate(specs):
            if k == n_zero:
                self.zero_bytes = at
            self.entries[key] = (at, shape, dtype)
            at += -(-dtype.itemsize * int(np.prod(shape, dtype=np.int64)) // 64) * 64
        if n_zero == len(specs):
            self.zero_bytes = at
        self.nbytes = max(at, 64)

    def arrays(self) -> dict[str, np.ndarray]:
        """A new buffer as its outputs (NumPy views), the zero ones zeroed."""
        buffer = np.empty(self.nbytes, dtype=np.uint8)
        buffer[: self.zero_bytes] = 0
        return {
            key: np.ndarray(shape, dtype, buffer, at)
            for key, (at, shape, dtype) in self.entries.items()
        }


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


def edge_shifts(
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
        by_axis = cell.transpose(0, 2, 1)[:, :, :, None]  # [G, d, k, 1] = cell[g, k, d]
        table = grid[0] * by_axis[:, :, 0]
        table += grid[1] * by_axis[:, :, 1]
        table += grid[2] * by_axis[:, :, 2]  # [G, d, R^3]
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
    unit = unit_shifts.T.astype(np.float64)  # [3, E]
    shifts = unit[0] * per_edge[0:3]
    shifts += unit[1] * per_edge[3:6]
    shifts += unit[2] * per_edge[6:9]
    out[...] = shifts.T


def neighbourhood_cells(
    cells: np.ndarray, pbcs: np.ndarray, positions: np.ndarray, node_ptr: np.ndarray, r_max: float
) -> np.ndarray:
    """MACE's ``get_neighborhood`` cells (float64 ``[G, 3, 3]``): the stored ``cells`` with the
    row of each non-periodic direction of the first ``real`` graphs (``pbcs`` ``[real, 3]``)
    replaced by ``(max|positions| + 1) * 5 * r_max`` (over the graph's atoms; 0 without atoms)
    times that direction's unit vector. ``node_ptr``: the graphs' first atoms, and the end."""
    real = pbcs.shape[0]
    open_rows = ~pbcs
    if not open_rows.any():
        return cells
    cells = cells.copy()
    magnitudes = np.abs(positions[: node_ptr[real]])
    largest = np.maximum(np.maximum(magnitudes[:, 0], magnitudes[:, 1]), magnitudes[:, 2])
    top = np.maximum.reduceat(np.append(largest, 0.0), node_ptr[:real])
    top[node_ptr[1 : real + 1] == node_ptr[:real]] = 0.0  # graphs without atoms
    length = (top + 1) * 5 * r_max
    graph, axis = np.nonzero(open_rows)
    cells[graph, axis, :] = 0.0
    cells[graph, axis, axis] = length[graph]
    return cells


class MaceTransform:
    """The per-batch transform of `graphbatch.atomistic._mace_view.MaceStoreReader`
    (picklable: plain attributes): ``(tensors, shape, real_graphs) -> MACE's batch dict``
    (module docstring). ``zs``: the z table; ``head_lut``: model head index per store head
    code; ``dtype``: float32 or float64 (`NUMPY_FLOATS`); ``labels``/``weights``: those the
    store holds; ``has_head``: whether it holds head codes."""

    def __init__(
        self,
        r_max: float,
        zs: list[int],
        head_lut: np.ndarray,
        dtype: torch.dtype,
        labels: list[str],
        weights: list[str],
        has_head: bool,
    ) -> None:
        self.r_max = r_max
        self.zs = zs
        self.z_lut = np.full(256, -1, dtype=np.int64)
        self.z_lut[zs] = np.arange(len(zs))
        self.head_lut = head_lut
        self.dtype = dtype
        self.labels = labels
        self.weights = weights
        self.has_head = has_head
        self._layouts: dict[tuple[int, int, int], _BatchBuffer] = {}

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_layouts"] = {}
        return state

    def _layout(self, shape: tuple[int, int, int]) -> _BatchBuffer:
        """Where the outputs of a batch of ``shape`` lie in its buffer (cached per shape)."""
        hit = self._layouts.get(shape)
        if hit is None:
            rows = {"node": shape[0], "edge": shape[1], "graph": shape[2]}
            batch_float = np.dtype(NUMPY_FLOATS[self.dtype])
            zero: list[tuple[str, tuple[int, ...], np.dtype]] = []
            for key, (level, row) in _ZERO_ROWS.items():
                width = row if row is not None else (len(self.zs),)
                zero.append((key, (rows[level], *width), batch_float))
            for name, (level, row) in LABELS.items():
                if name not in self.labels:
                    zero.append((name, (rows[level], *row), batch_float))
            rest = [
                ("shifts", (shape[1], 3), batch_float),
                ("unit_shifts", (shape[1], 3), batch_float),
                ("cell", (3 * shape[2], 3), batch_float),
                ("rcell", (3 * shape[2], 3), batch_float),
                ("head", (shape[2],), np.dtype(np.int64)),
                ("graph_float", (shape[2],), batch_float),
            ]
            if batch_float != np.float64:
                rest.append(("positions", (shape[0], 3), batch_float))
            rest += [(key, (shape[2], *row), batch_float) for key, row in _MASK_ROWS.items()]
            if len(self._layouts) >= 256:
                self._layouts.clear()
            hit = self._layouts[shape] = _BatchBuffer(zero + rest, len(zero))
        return hit

    def _geometry(
        self, tensors: dict, arrays: dict[str, np.ndarray], real_graphs: int
    ) -> torch.Tensor:
        """Write ``unit_shifts``, ``shifts``, ``cell`` and ``rcell``; return ``volume``."""
        n_graph, r_max = arrays["head"].shape[0], self.r_max
        cells = neighbourhood_cells(
            tensors["cell"].numpy(),
            tensors["pbc"].numpy()[:real_graphs],
            tensors["positions"].numpy(),
            tensors["ptr"].numpy(),
            r_max,
        )
        unit_shifts = tensors["unit_shifts"].numpy()
        arrays["unit_shifts"][...] = unit_shifts
        edge_counts = np.diff(tensors["edge_ptr"].numpy())
        edge_shifts(unit_shifts, cells, edge_counts, arrays["shifts"], arrays["unit_shifts"])
        arrays["cell"][...] = cells.reshape(3 * n_graph, 3)
        # volume and reciprocal cell as MACE's AtomicData computes them (torch's LU)
        cell = torch.from_numpy(arrays["cell"]).view(n_graph, 3, 3)
        volume = torch.linalg.det(cell)
        inverse = torch.linalg.inv_ex(cell.mT)[0].numpy()
        rcell = arrays["rcell"]
        np.multiply(inverse.reshape(3 * n_graph, 3), 2 * math.pi, out=rcell)
        volumes = volume.numpy()
        rcell.reshape(n_graph, 9)[~(np.abs(volumes) > 0)] = 0
        if real_graphs < n_graph:
            pad_rcell = (2 * math.pi / r_max) * np.eye(3, dtype=rcell.dtype)
            rcell.reshape(n_graph, 3, 3)[real_graphs:] = pad_rcell
            volumes[real_graphs:] = r_max**3
        return volume

    def _one_hot(self, tensors: dict, node_attrs: np.ndarray, real_atoms: int) -> None:
        """Write the one-hot ``node_attrs`` of the real atoms over the z table (padding atoms
        stay zero); an atomic number outside the table raises `StoreFieldError`."""
        numbers = tensors["atomic_numbers"].numpy()
        column = self.z_lut.take(numbers[:real_atoms])
        if real_atoms and int(column.min()) < 0:
            bad = int(np.flatnonzero(column < 0)[0])
            structure = int(tensors["graph_index"].numpy()[int(tensors["batch"].numpy()[bad])])
            raise StoreFieldError(
                f"structure {structure} of the store holds atomic number "
                f"{int(numbers[bad])}, not in the z table {self.zs}"
            )
        width = len(self.zs)
        node_attrs.reshape(-1)[np.arange(0, real_atoms * width, width) + column] = 1

    def _masks_and_heads(
        self, tensors: dict, arrays: dict[str, np.ndarray], real_graphs: int
    ) -> None:
        """Write ``graph_float`` (1 on real graphs, 0 on padding), its copies (`_MASK_ROWS`)
        and the model head of each real graph (0 on padding)."""
        graph_float = arrays["graph_float"]
        graph_float[:real_graphs] = 1
        graph_float[real_graphs:] = 0
        for key in _MASK_ROWS:
            column = graph_float.reshape(-1, *([1] * (arrays[key].ndim - 1)))
            arrays[key][...] = column
        head = arrays["head"]
        if self.has_head:
            self.head_lut.take(tensors["head"].numpy()[:real_graphs], out=head[:real_graphs])
        else:
            head[:real_graphs] = 0
        head[real_graphs:] = 0

    def __call__(self, tensors: dict, shape: tuple[int, int, int], real_graphs: int) -> dict:
        """MACE's batch dict of the padded store tensors ``tensors`` of a batch of ``shape``
        ``(nodes, edges, graphs)`` whose first ``real_graphs`` graphs are real."""
        real_graphs = int(real_graphs)
        arrays = self._layout(shape).arrays()
        volume = self._geometry(tensors, arrays, real_graphs)
        real_atoms = int(tensors["ptr"].numpy()[real_graphs])
        self._one_hot(tensors, arrays["node_attrs"], real_atoms)
        self._masks_and_heads(tensors, arrays, real_graphs)
        if "positions" in arrays:
            arrays["positions"][...] = tensors["positions"].numpy()
        return _batch_dict(tensors, {key: torch.from_numpy(a) for key, a in arrays.items()}, volume)


def _batch_dict(tensors: dict, written: dict[str, torch.Tensor], volume: torch.Tensor) -> dict:
    """MACE's batch dict in its key order (``MACE_BATCH_KEYS``) from the kernel's
    ``tensors``, the transform's ``written`` outputs and ``volume``."""
    weights = {
        name: tensors[name] if name in tensors else written["graph_float"] for name in WEIGHTS
    }
    labels = {name: tensors[name] if name in tensors else written[name] for name in LABELS}
    out = {
        "edge_index": tensors["edge_index"],
        "positions": written["positions"] if "positions" in written else tensors["positions"],
        "shifts": written["shifts"],
        "unit_shifts": written["unit_shifts"],
        "cell": written["cell"],
        "node_attrs": written["node_attrs"],
        "weight": weights["weight"],
        "head": written["head"],
        "energy_weight": weights["energy_weight"],
        "forces_weight": weights["forces_weight"],
        "stress_weight": weights["stress_weight"],
        "virials_weight": weights["virials_weight"],
        "dipole_weight": written["dipole_weight"],
        "charges_weight": weights["charges_weight"],
        "polarizability_weight": written["polarizability_weight"],
        "forces": labels["forces"],
        "energy": labels["energy"],
        "stress": labels["stress"],
        "virials": labels["virials"],
        "dipole": written["dipole"],
        "charges": labels["charges"],
        "polarizability": written["polarizability"],
        "elec_temp": written["elec_temp"],
        "total_charge": written["total_charge"],
        "total_spin": written["total_spin"],
        "pbc": tensors["pbc"],
        "density_coefficients": written["density_coefficients"],
        "rcell": written["rcell"],
        "volume": volume,
        "fermi_level": written["fermi_level"],
        "external_field": written["external_field"],
    }
    for key in PADDING_KEYS:
        out[key] = tensors[key]
    return out
