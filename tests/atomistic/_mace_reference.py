"""The plain torch form of the MACE store transform (`MaceTransform`,
src/graphbatch/atomistic/_mace_transform.py): torch ops over the batch, every float gathered
as float64 and cast to the batch's dtype where MACE's ``AtomicData`` would. The property tests
compare the production transform to it, bit for bit (`reference_view`)."""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import torch

from graphbatch.atomistic._mace_transform import MaceTransform
from graphbatch.atomistic._store_view import PADDING_KEYS, StoreFieldError
from graphbatch.torch import StoreView


def reference_view(view: StoreView) -> StoreView:
    """``view`` (a MACE store reader's) with every float field gathered as float64 and its
    transform's plain form."""
    transform = view.transform
    assert isinstance(transform, MaceTransform)
    dtypes = {k: np.float64 if np.dtype(dt).kind == "f" else dt for k, dt in view.dtypes.items()}
    return StoreView(
        dtypes=dtypes,
        pads=view.pads,
        transform=partial(reference_transform, transform),
        position_key=view.position_key,
    )


def _neighbourhood_cells(transform: MaceTransform, t: dict, n_graph: int) -> torch.Tensor:
    """MACE's get_neighborhood cells: non-periodic rows -> (max|pos| + 1) * 5 * r_max * e_k."""
    c = transform.r_max
    top = torch.zeros(n_graph, dtype=torch.float64).scatter_reduce_(
        0, t["batch"], t["positions"].abs().amax(dim=1), "amax", include_self=True
    )
    grow = (top + 1) * 5 * c
    eye = torch.eye(3, dtype=torch.float64)
    replace = (~t["pbc"]) & t["graph_mask"][:, None]
    return torch.where(replace[:, :, None], grow[:, None, None] * eye, t["cell"])


def _one_hot(transform: MaceTransform, t: dict, n_node: int) -> torch.Tensor:
    numbers = t["atomic_numbers"].long()
    column = torch.from_numpy(transform.z_lut)[numbers]
    bad = (column < 0) & t["node_mask"]
    if bool(bad.any()):
        k = int(torch.nonzero(bad)[0, 0])
        g = int(t["graph_index"][int(t["batch"][k])])
        raise StoreFieldError(
            f"structure {g} of the store holds atomic number "
            f"{int(numbers[k])}, not in the z table {transform.zs}"
        )
    node_attrs = torch.zeros(n_node, len(transform.zs), dtype=transform.dtype)
    real = torch.nonzero(t["node_mask"]).squeeze(1)
    node_attrs[real, column[real]] = 1
    return node_attrs


def reference_transform(
    transform: MaceTransform, t: dict, shape: tuple[int, int, int], real_graphs: int
) -> dict:
    """What ``transform(t, shape, real_graphs)`` gives, in plain torch."""
    n_node, n_edge, n_graph = shape
    dtype, c = transform.dtype, transform.r_max
    gm = t["graph_mask"]
    cell64 = _neighbourhood_cells(transform, t, n_graph)
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
    rcell = torch.where(~gm[:, None, None], (2 * math.pi / c) * torch.eye(3, dtype=dtype), rcell)
    volume = torch.where(~gm, torch.tensor(c**3, dtype=dtype), volume)
    gf = gm.to(dtype)

    def label(name: str, level: str, row: tuple) -> torch.Tensor:
        if name in t:
            return t[name].to(dtype)
        return torch.zeros((n_node if level == "node" else n_graph, *row), dtype=dtype)

    def weight(name: str, row: tuple = ()) -> torch.Tensor:
        w = t[name].to(dtype) if name in t else gf
        return w.reshape(n_graph, *([1] * len(row))).expand(n_graph, *row).clone() if row else w

    head = (
        torch.from_numpy(transform.head_lut)[t["head"].long()]
        if transform.has_head
        else torch.zeros(n_graph, dtype=torch.int64)
    )
    head = torch.where(gm, head, torch.zeros((), dtype=torch.int64))
    zeros_g = torch.zeros(n_graph, dtype=dtype)
    out = {
        "edge_index": t["edge_index"],
        "positions": t["positions"].to(dtype),
        "shifts": shifts.to(dtype),
        "unit_shifts": unit_shifts.to(dtype),
        "cell": cell.reshape(3 * n_graph, 3),
        "node_attrs": _one_hot(transform, t, n_node),
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
    for key in PADDING_KEYS:
        out[key] = t[key]
    return out
