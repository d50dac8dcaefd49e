"""Presets for MACE (``mace-torch``) and fairchem (``fairchem-core``) graphs.

Both families read padding edges' lengths from positions *and* periodic shifts, and divide by
cell volumes for stress, so zeros are unsafe pad values: a padding self-loop (a batch with one
padding node) of length 0 gives NaN forces and NaN parameter gradients even under a masked loss,
and a padding cell of volume 0 gives NaN stress gradients that MACE's displacement trick spreads
to every atom. The presets pad cells with ``r_max * I`` and shifts (MACE ``shifts``/``unit_shifts``,
fairchem ``cell_offsets``) with ``(1, 1, 1)`` cell vectors, so every padding edge is longer than
``r_max`` (its envelope is exactly 0) and every padding cell has volume ``r_max**3``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from .._errors import InputTypeError
from .._padlayout import check_cutoff
from ..torch import Preset

__all__ = ["mace", "fairchem", "to_fairchem"]


def _r_max(r_max: float) -> float:
    """``r_max`` checked as a cutoff (a positive finite number; ``None`` is not one here)."""
    c = check_cutoff(r_max)
    if c is None:
        raise InputTypeError("r_max must be a number, got None")
    return c


def _eye(c: float) -> torch.Tensor:
    return c * torch.eye(3, dtype=torch.float64)


def mace(
    r_max: float,
    *,
    z_table: Any = None,
    heads: Sequence[str] | None = None,
    dtype: torch.dtype | None = None,
) -> Preset:
    """Preset for MACE's ``AtomicData`` (``mace.data.AtomicData.from_config(..., cutoff=r_max)``),
    and for atomistic graph stores (`graphbatch.datasets.build_atoms_store`): over a
    `GraphStore`, `graphbatch.torch.loader` reads the same dicts straight from the store's
    arrays (`graphbatch.atomistic._mace_view`); that needs ``z_table`` (the model's atomic
    numbers in one-hot order, a list or MACE's ``AtomicNumberTable``), and takes ``heads`` (the
    model's head names, default ``["Default"]``) and ``dtype`` (the batch's float dtype,
    default torch's default dtype now).

    Batches are dicts MACE's models take as they are (``model(batch, training=True,
    compute_stress=...)``), with MACE's field names plus graphbatch's masks. Padding: nodes at
    the padding geometry's positions with spacing ``r_max`` and a zero one-hot ``node_attrs``
    (zero ``E0``); ``cell`` = ``r_max * I`` (``rcell`` its reciprocal ``2 pi / r_max * I``,
    ``volume`` ``r_max**3``); ``shifts`` = ``(r_max, r_max, r_max)`` = ``unit_shifts`` ``(1, 1,
    1)`` times the padding cell (consistent when MACE recomputes shifts for stress), so every
    padding edge, self-loops included, is at least ``sqrt(3) r_max`` long; ``weight`` and the
    per-property weights 0 (MACE's own losses then weigh padding graphs by 0).
    """
    c = _r_max(r_max)
    ones = torch.ones(3, dtype=torch.float64)
    pads = {
        "cell": _eye(c),
        "rcell": _eye(2 * math.pi / c),
        "volume": c**3,
        "shifts": c * ones,
        "unit_shifts": ones,
        "weight": 0.0,
        "energy_weight": 0.0,
        "forces_weight": 0.0,
        "stress_weight": 0.0,
        "virials_weight": 0.0,
        "dipole_weight": 0.0,
        "charges_weight": 0.0,
        "polarizability_weight": 0.0,
    }
    from ._mace_view import MaceStoreReader

    reader = MaceStoreReader(c, z_table, heads, dtype)
    return Preset(
        "mace", position_key="positions", cutoff=c, as_dict=True, pads=pads, store_reader=reader
    )


def fairchem(r_max: float, *, as_dict: bool = True, dataset: str | None = None) -> Preset:
    """Preset for fairchem's ``AtomicData`` graphs built with ``r_edges=True, radius=r_max``.

    ``natoms``/``nedges`` are count fields equal to the padded layout's ``ptr.diff()`` /
    ``edge_ptr.diff()`` (padding graphs included, as fairchem's per-graph reductions expect);
    ``cell`` (``[1, 3, 3]`` per graph) is padded with ``r_max * I`` and ``cell_offsets`` with
    ``(1, 1, 1)``, so padding edges are longer than ``r_max``; the per-atom ``batch`` they carry is
    recomputed by the batch. Use the model with ``otf_graph=False`` (the batch's edges): an
    on-the-fly radius graph depends on the data, so it cannot keep a fixed shape. Batches are
    dicts unless ``as_dict=False`` (then PyG ``Batch`` objects); fairchem's models index their
    input with ``data.get(key, default=...)``, so turn a dict batch into fairchem's own
    ``AtomicData`` with `to_fairchem` before the call. Over an atomistic `GraphStore`
    (`graphbatch.datasets.build_atoms_store`), `graphbatch.torch.loader` reads the same dicts
    from the store's arrays (`graphbatch.atomistic._fairchem_view.FairchemStoreReader`;
    ``dataset``: fairchem's task name for every structure).
    """
    c = _r_max(r_max)
    pads = {"cell": _eye(c), "cell_offsets": torch.ones(3, dtype=torch.float64), "sid": [""]}
    from ._fairchem_view import FairchemStoreReader

    return Preset(
        "fairchem",
        position_key="pos",
        cutoff=c,
        as_dict=as_dict,
        pads=pads,
        counts={"natoms": "node", "nedges": "edge"},
        store_reader=FairchemStoreReader(c, dataset),
    )


def to_fairchem(batch: dict[str, Any]) -> Any:
    """A padded `collate_dict` batch of fairchem graphs as fairchem's batched ``AtomicData``
    (needs ``fairchem-core``). ``sid`` becomes the flat list fairchem batches hold (``""`` for
    padding graphs); a per-graph ``dataset`` name is repeated from the first real graph on
    padding graphs (fairchem embeds it); masks, ``ptr``, ``edge_ptr`` and ``graph_index`` are kept
    as extra attributes."""
    from fairchem.core.datasets.atomic_data import AtomicData

    if not isinstance(batch, dict) or "graph_mask" not in batch:
        raise InputTypeError(
            "to_fairchem needs a padded dict batch (graphbatch.atomistic.fairchem "
            "preset with as_dict=True)"
        )
    n_graph = int(batch["graph_mask"].shape[0])
    g = int(batch["graph_mask"].sum())
    d = {k: v for k, v in batch.items() if k != "num_graphs"}
    if "sid" in d:
        d["sid"] = [_one(s, "") for s in d["sid"][:g]] + [""] * (n_graph - g)
    if "dataset" in d:
        real = [_one(s, None) for s in d["dataset"][:g]]
        fill = real[0] if real else ""
        d["dataset"] = real + [fill] * (n_graph - g)
    return AtomicData.from_dict(d)


def _one(value: Any, default: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return value[0] if value else default
    return default if value is None else value
