"""How `graphbatch.torch.loader` collates each padded batch: `Collation` (the settings), their
resolution against a preset, a graph store and the dataset's graphs (`resolve_collation`), and
`PlanCollater`, the ``collate_fn`` of the per-graph path."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from .._errors import InputTypeError
from .._padlayout import check_cutoff, short_padding_batches
from .._plan import BatchPlan
from ._collate import collate_dict
from ._preset import Preset, StoreView
from ._pyg import collate
from ._sampler import PlannedBatch
from ._schema import Schema, infer_schema
from ._store_batch import is_graph_store, store_schema
from ._store_collate import StoreCollater, StoreIndices

__all__ = ["COLLATION_ARGS", "Collation", "PlanCollater", "Resolved", "resolve_collation"]

#: Graphs the schema is inferred from (spread over the dataset).
SCHEMA_SAMPLE = 32


@dataclass(frozen=True)
class Collation:
    """How `graphbatch.torch.loader` collates each batch. A field left ``None`` comes from the
    ``preset`` when the loader has one, else from the data; a field given wins over the preset.

    ``schema``: the field table (default: a store's field table, else inferred from up to 32
    graphs spread over the dataset, plus the preset's pads and count fields); for a store it
    may change pad values only. ``cutoff``: the spacing of padding positions (`collate`).
    ``position_key``: the float node field holding positions (default ``"pos"``).
    ``as_dict``: dicts of tensors (`collate_dict`) instead of PyG ``Batch`` objects.
    ``spare_padding_node``: one more padding node in every padded shape, so every batch has at
    least two padding nodes and no padding edge is a self-loop (default: exactly when the graphs
    have positions, a float node field ``position_key``).
    """

    schema: Schema | None = None
    cutoff: float | None = None
    position_key: str | None = None
    as_dict: bool | None = None
    spare_padding_node: bool | None = None


#: The `Collation` fields (``loader`` takes them in ``collation=``, not as keywords).
COLLATION_ARGS = tuple(f.name for f in fields(Collation))


@dataclass(frozen=True)
class Resolved:
    """A loader's collation with every default decided: the schema, geometry, output form,
    the store (``None``: per-graph path) and a preset's store view."""

    schema: Schema
    cutoff: float | None
    position_key: str
    as_dict: bool
    spare_padding_node: bool
    store: Any = None
    view: StoreView | None = None

    def has_positions(self) -> bool:
        """Whether the graphs have positions (a float node field ``position_key``)."""
        return _has_positions(self.schema, self.position_key)

    def collater(self, dataset: Any) -> tuple[PlanCollater | StoreCollater, Any]:
        """``(collate_fn, the DataLoader's dataset)``: the store batch path for a store, else
        per-graph collation of ``dataset``'s graphs."""
        if self.store is not None:
            collater = StoreCollater(
                self.store,
                self.schema,
                cutoff=self.cutoff,
                position_key=self.position_key,
                as_dict=self.as_dict,
                view=self.view,
            )
            return collater, StoreIndices(self.store)
        plain = PlanCollater(
            self.schema, cutoff=self.cutoff, position_key=self.position_key, as_dict=self.as_dict
        )
        return plain, dataset

    def warn_single_padding_node(self, first_plan: Callable[[], BatchPlan]) -> None:
        """Without the spare node, warn when batches of ``first_plan()`` (epoch 0's plan, asked
        for only then) with positions have a single padding node (their padding edges are
        self-loops)."""
        if self.spare_padding_node or not self.has_positions():
            return
        plan = first_plan()
        short = short_padding_batches(plan)
        if short.shape[0]:
            warnings.warn(
                f"spare_padding_node=False: {short.shape[0]} of {len(plan)} batches of "
                "epoch 0 have a single padding node, so their padding edges are self-loops "
                "(length 0)",
                stacklevel=3,
            )


def _has_positions(schema: Schema, position_key: str) -> bool:
    spec = schema.get(position_key)
    return (
        spec is not None
        and spec.level == "node"
        and spec.kind == "tensor"
        and spec.dtype is not None
        and spec.dtype.is_floating_point
    )


def _store_view(preset: Preset, store: Any) -> StoreView:
    if preset.store_reader is None:
        raise InputTypeError(
            f"preset {preset.name!r} reads datasets of graph objects, not a "
            "GraphStore; wrap the store (e.g. graphbatch.atomistic.MACEGraphs"
            "(GraphStoreDataset(store), ...)) or use a preset with a store reader"
        )
    view: StoreView = preset.store_reader.for_store(store)  # checks the store's fields first
    return view


def _sampled_schema(dataset: Any, indices: np.ndarray | None, preset: Preset | None) -> Schema:
    """The schema of up to `SCHEMA_SAMPLE` graphs spread over the (selected) dataset."""
    items = np.arange(len(dataset)) if indices is None else indices
    n = items.shape[0]
    pick = np.unique(np.linspace(0, n - 1, num=min(n, SCHEMA_SAMPLE)).astype(np.int64))
    sample = [dataset[int(i)] for i in items[pick]]
    return preset.schema_for(sample) if preset is not None else infer_schema(sample)


def resolve_collation(
    dataset: Any,
    collation: Collation | None,
    preset: Preset | None,
    indices: np.ndarray | None = None,
) -> Resolved:
    """Every `Collation` default decided for ``dataset`` (its split ``indices``), the given
    fields first, then the ``preset``'s, then the data's (see `Collation`)."""
    given = Collation() if collation is None else collation
    if not isinstance(given, Collation):
        raise InputTypeError(
            f"collation must be a graphbatch.torch.Collation, got {type(given).__name__}"
        )
    if preset is not None and not isinstance(preset, Preset):
        raise InputTypeError(f"preset must be a graphbatch Preset, got {type(preset).__name__}")
    cutoff = given.cutoff if given.cutoff is not None or preset is None else preset.cutoff
    position_key = given.position_key or (preset.position_key if preset else "pos")
    as_dict = bool(given.as_dict if given.as_dict is not None else preset and preset.as_dict)
    store = dataset if is_graph_store(dataset) else None
    view = None
    if preset is not None and store is not None:
        view = _store_view(preset, store)
        position_key = view.position_key or position_key
    schema = given.schema
    if schema is None:
        schema = (
            store_schema(store) if store is not None else _sampled_schema(dataset, indices, preset)
        )
    spare = given.spare_padding_node
    return Resolved(
        schema=schema,
        cutoff=check_cutoff(cutoff),
        position_key=position_key,
        as_dict=as_dict,
        spare_padding_node=_has_positions(schema, position_key) if spare is None else bool(spare),
        store=store,
        view=view,
    )


class PlanCollater:
    """``collate_fn`` for a DataLoader over `PlannedBatch` index lists (picklable for workers)."""

    def __init__(
        self,
        schema: Schema,
        *,
        cutoff: float | None = None,
        position_key: str = "pos",
        as_dict: bool = False,
    ) -> None:
        self.schema = schema
        self.cutoff = check_cutoff(cutoff)
        self.position_key = position_key
        self.as_dict = bool(as_dict)

    def __call__(self, item: tuple[PlannedBatch, list[Any]]) -> Any:
        batch, graphs = item
        if not isinstance(batch, PlannedBatch):
            raise InputTypeError("PlanCollater needs batches from a PlanBatchSampler")
        fn = collate_dict if self.as_dict else collate
        return fn(
            graphs,
            batch.shape,
            graph_index=list(batch),
            cutoff=self.cutoff,
            position_key=self.position_key,
            schema=self.schema,
        )
