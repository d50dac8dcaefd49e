"""fairchem batches straight from an atomistic graph store (`FairchemStoreReader`, the
``store_reader`` of `graphbatch.atomistic.fairchem`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..torch import StoreView
from ._store_view import PADDING_KEYS, check_cutoff, check_fields

if TYPE_CHECKING:
    from ..datasets import GraphStore

__all__ = ["FairchemStoreReader"]


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
        """The `StoreView` of ``store`` (checked first: fields, cutoff)."""
        check_fields(store, "ga.fairchem", "`graphbatch data build extxyz|ase-db ...`")
        check_cutoff(store, self.r_max)
        fields = store.fields
        dtypes: dict[str, Any] = {
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
    """``(tensors, shape, real_graphs) -> fairchem's padded batch dict`` (`FairchemStoreReader`;
    picklable: plain attributes). ``labels``: those the store holds; ``has_tags``: whether it
    holds a ``tags`` field."""

    def __init__(self, dataset: str | None, labels: list[str], has_tags: bool) -> None:
        self.dataset = dataset
        self.labels = labels
        self.has_tags = has_tags

    def __call__(self, tensors: dict, shape: tuple[int, int, int], real_graphs: int) -> dict:
        n_node, _, n_graph = shape
        index = tensors["graph_index"].tolist()
        out = {
            "pos": tensors["positions"],
            "atomic_numbers": tensors["atomic_numbers"].long(),
            "cell": tensors["cell"],
            "pbc": tensors["pbc"],
            "natoms": tensors["ptr"].diff(),
            "edge_index": tensors["edge_index"].flip(0),
            "cell_offsets": tensors["unit_shifts"].to(torch.float32),
            "nedges": tensors["edge_ptr"].diff(),
            "charge": torch.zeros(n_graph, dtype=torch.int64),
            "spin": torch.zeros(n_graph, dtype=torch.int64),
            "fixed": torch.zeros(n_node, dtype=torch.int64),
            "tags": (
                torch.where(tensors["node_mask"], tensors["tags"].long(), 0)
                if self.has_tags
                else torch.zeros(n_node, dtype=torch.int64)
            ),
        }
        for key in self.labels:
            out[key] = tensors[key]
        out["sid"] = [[str(i)] if i >= 0 else [""] for i in index]
        if self.dataset is not None:
            out["dataset"] = [[self.dataset] if i >= 0 else None for i in index]
        for key in PADDING_KEYS:
            out[key] = tensors[key]
        return out
