"""`Preset`: a model family's batching conventions (schema overrides, geometry, output form).

A preset turns the schema inferred from a dataset's graphs into the one a model family needs --
pad values that keep padding numerically safe, count fields derived from the padded layout --
and says where positions live, which cutoff spaces the padding nodes and whether batches are
dicts. `graphbatch.torch.loader(..., preset=...)` and `Preset.collate` use it; the presets for
MACE and fairchem live in `graphbatch.atomistic`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from .._errors import InputError
from .._padlayout import check_cutoff
from ._schema import FieldSpec, Schema, infer_schema

__all__ = ["Preset", "StoreView"]


@dataclass(frozen=True)
class StoreView:
    """How a preset reads a `graphbatch.datasets.GraphStore` on the store batch path: the
    kernel's output NumPy ``dtypes`` and ``pads`` per store field, and ``transform(tensors,
    shape, real_graphs)`` turning the padded store tensors (the store's fields, ``edge_index``
    and the batch structure: ``batch``, ``ptr``, ``edge_ptr``, masks, ``graph_index``,
    ``num_graphs``) into the model's batch dict -- vectorised, no per-graph objects. Made by a
    preset's ``store_reader.for_store(store)``, which checks the store first. Picklable
    (DataLoader workers)."""

    dtypes: Mapping[str, Any]
    pads: Mapping[str, Any]
    transform: Callable[[dict, tuple, int], dict]
    #: the store's node positions (padding geometry), when not the preset's ``position_key``
    position_key: str | None = None


@dataclass(frozen=True)
class Preset:
    """Batching conventions of a model family.

    ``pads``: pad value per field (number, tensor or callable, see `FieldSpec`); fields the
    graphs do not have are skipped (a preset covers optional fields such as ``stress``).
    ``counts``: ``{field: "node" | "edge"}`` graph-level count fields derived from the padded
    layout (``ptr.diff()`` / ``edge_ptr.diff()``), added when the graphs lack them.
    ``position_key``: the node positions (padding nodes are placed by the padding geometry).
    ``cutoff``: the model's cutoff radius, used as the padding spacing (``> 0``).
    ``as_dict``: batches are dicts (`collate_dict`) instead of PyG ``Batch`` objects.
    ``store_reader``: how the preset reads a `GraphStore` (an object whose ``for_store(store)``
    returns a `StoreView`, or raises naming what the store lacks); ``None``: the preset takes
    datasets of graph objects only.
    """

    name: str
    position_key: str = "pos"
    cutoff: float | None = None
    as_dict: bool = False
    pads: Mapping[str, Any] = field(default_factory=dict)
    counts: Mapping[str, str] = field(default_factory=dict)
    store_reader: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "cutoff", check_cutoff(self.cutoff))
        for key, what in self.counts.items():
            if what not in ("node", "edge"):
                raise InputError(
                    f"preset count field {key!r} must count 'node' or 'edge', got {what!r}"
                )

    def schema_for(self, graphs: Sequence[Any]) -> Schema:
        """The schema of ``graphs`` (inferred) with this preset's pads and count fields."""
        fields = dict(infer_schema(graphs))
        for key, pad in self.pads.items():
            if key in fields:
                fields[key] = replace(fields[key], pad=pad)
        for key, what in self.counts.items():
            spec = fields.get(key)
            if spec is None:
                fields[key] = FieldSpec("graph", None, dtype=torch.int64, shape=(), count=what)
            else:
                if spec.kind != "tensor" or spec.level != "graph" or spec.rows != 1:
                    raise InputError(
                        f"field {key!r} cannot hold one {what} count per graph: {spec}"
                    )
                fields[key] = replace(spec, count=what, inc="none", pad=0)
        return Schema(fields)

    def collate(
        self,
        graphs: Sequence[Any],
        shape: tuple[int, int, int] | Sequence[int],
        *,
        schema: Schema | None = None,
        graph_index: Any = None,
    ) -> Any:
        """Collate ``graphs`` to ``shape`` with this preset (schema inferred unless given)."""
        from ._collate import collate_dict
        from ._pyg import collate

        graphs = list(graphs)
        if schema is None:
            schema = self.schema_for(graphs)
        fn = collate_dict if self.as_dict else collate
        return fn(
            graphs,
            shape,
            graph_index=graph_index,
            cutoff=self.cutoff,
            schema=schema,
            position_key=self.position_key,
        )
