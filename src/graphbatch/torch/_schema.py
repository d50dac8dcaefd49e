"""Field schema: how each attribute of a graph is concatenated and padded.

Inferred from PyG's own conventions (``Data.__cat_dim__`` / ``Data.__inc__``) and tensor shapes,
never from attribute names: a field whose size along its concatenation dimension equals the
graph's node count is node-level, its edge count edge-level, and the same fixed number in every
graph (1, a 0-d tensor, or e.g. the 3 rows of a ``[3, 3]`` cell) graph-level.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from numpy.typing import DTypeLike

from .._errors import InputError, InputTypeError, UnknownNameError

__all__ = ["FieldSpec", "Schema", "infer_schema", "torch_dtype", "RESERVED_KEYS", "RECOMPUTED_KEYS"]

LEVELS = ("node", "edge", "graph")
INCS = ("none", "node", "call")

#: Attributes the collated batch adds; input graphs must not carry them.
RESERVED_KEYS = ("batch", "ptr", "edge_ptr", "node_mask", "edge_mask", "graph_mask", "graph_index")

#: Reserved names that describe a graph's own place in a batch (a single graph's ``batch`` vector,
#: its ``ptr``): `infer_schema` ignores them in input graphs (fairchem's graphs carry ``batch``);
#: the collated batch recomputes them from its layout. Other reserved names raise.
RECOMPUTED_KEYS = ("batch", "ptr", "edge_ptr")

#: The structural field: ``[2, E]`` sender/receiver node indices of each graph.
EDGE_INDEX = "edge_index"


@dataclass(frozen=True)
class FieldSpec:
    """How one attribute is batched.

    ``level``: ``"node"``, ``"edge"`` or ``"graph"`` -- which padded dimension it follows.
    ``cat_dim``: tensor dimension graphs are concatenated along (``None``: 0-d values stacked).
    ``inc``: ``"none"``; ``"node"`` (values index nodes and are offset by the node counts of the
    preceding graphs, like ``edge_index``); ``"call"`` (offset by ``data.__inc__`` per graph).
    ``pad``: value written in padding slots (node-indexing fields point at padding nodes instead):
    a number, a tensor broadcast to each padding item's shape (e.g. ``r_max * torch.eye(3)`` for
    a ``[3, 3]`` cell), or a callable ``pad(ctx: PadContext) -> tensor`` broadcast to the whole
    padding block (values that depend on the batch, e.g. on its padding spacing).
    ``count``: ``None``, or ``"node"``/``"edge"`` for a graph-level *count* field derived from the
    padded layout: its padded value is every graph slot's node (edge) count, i.e. ``ptr.diff()``
    (``edge_ptr.diff()``), padding graphs included (fairchem's ``natoms``/``nedges``). Real graphs'
    own values are checked against their counts; the field may be absent from the graphs.
    ``kind``: ``"tensor"``, ``"number"`` (Python scalars, batched into a tensor) or ``"object"``
    (anything else, kept as a list with ``None`` for padding graphs).
    ``dtype``/``shape``: a tensor field's dtype and per-graph shape with ``-1`` at ``cat_dim``
    for node/edge fields; graph-level fields record their fixed per-graph size there (``rows``,
    e.g. 3 for a ``[3, 3]`` cell concatenated along dim 0; default 1). Recorded by inference;
    needed to build batches holding no real graph.
    """

    level: str
    cat_dim: int | None = 0
    inc: str = "none"
    pad: Any = 0
    kind: str = "tensor"
    dtype: torch.dtype | None = None
    shape: tuple[int, ...] | None = None
    count: str | None = None

    @property
    def rows(self) -> int:
        """Entries per graph along ``cat_dim`` of a graph-level field (1 unless ``shape`` says)."""
        if self.cat_dim is None or self.shape is None or not self.shape:
            return 1
        k = self.shape[self.cat_dim]
        return 1 if k == -1 else int(k)

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise InputError(f"FieldSpec.level must be one of {LEVELS}, got {self.level!r}")
        if self.inc not in INCS:
            raise InputError(f"FieldSpec.inc must be one of {INCS}, got {self.inc!r}")
        if self.kind not in ("tensor", "number", "object"):
            raise InputError(f"FieldSpec.kind must be tensor, number or object, got {self.kind!r}")
        if self.kind != "tensor" and self.level != "graph":
            raise InputError(f"a {self.kind!r} field must be graph-level, got {self.level!r}")
        if self.cat_dim is not None and not isinstance(self.cat_dim, int):
            raise InputTypeError(f"FieldSpec.cat_dim must be an int or None, got {self.cat_dim!r}")
        if self.count is not None:
            if self.count not in ("node", "edge"):
                raise InputError(
                    f"FieldSpec.count must be None, 'node' or 'edge', got {self.count!r}"
                )
            if self.level != "graph" or self.kind != "tensor" or self.inc != "none":
                raise InputError("a count field must be a graph-level tensor without increment")
            if self.rows != 1:
                raise InputError(f"a count field holds one count per graph, got {self.rows} rows")


class Schema(Mapping[str, FieldSpec]):
    """An ordered, immutable mapping ``attribute name -> FieldSpec``; must hold ``edge_index``."""

    def __init__(self, fields: Mapping[str, FieldSpec]) -> None:
        fields = dict(fields)
        for key, spec in fields.items():
            if not isinstance(spec, FieldSpec):
                raise InputTypeError(f"schema entry {key!r} must be a FieldSpec, got {spec!r}")
            if key in RESERVED_KEYS:
                raise InputError(
                    f"attribute {key!r} clashes with a field the collated batch adds "
                    f"({', '.join(RESERVED_KEYS)}); rename it"
                )
        if EDGE_INDEX not in fields:
            raise InputError(
                "graphs have no 'edge_index'; every graph needs an integer edge_index of shape "
                "[2, num_edges] (use an empty [2, 0] tensor for a graph without edges)"
            )
        ei = fields[EDGE_INDEX]
        if ei.level != "edge" or ei.inc != "node" or ei.kind != "tensor":
            raise InputError(f"'edge_index' must be an edge-level node-index tensor, got {ei}")
        self._fields = fields

    def __getitem__(self, key: str) -> FieldSpec:
        return self._fields[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}: {v.level}" for k, v in self._fields.items())
        return f"Schema({inner})"

    def with_pad(self, **pads: Any) -> Schema:
        """A copy with other pad values, e.g. ``schema.with_pad(y=float("nan"))``."""
        unknown = sorted(set(pads) - set(self._fields))
        if unknown:
            raise UnknownNameError(
                f"schema has no field(s) {', '.join(unknown)}; fields: {list(self)}"
            )
        return Schema(
            {k: replace(v, pad=pads[k]) if k in pads else v for k, v in self._fields.items()}
        )

    def node_anchor(self) -> str | None:
        """First node-level tensor field with no increment: it defines each graph's node count."""
        for key, spec in self._fields.items():
            if spec.level == "node" and spec.kind == "tensor" and spec.cat_dim is not None:
                return key
        return None


def _keys(graph: Any) -> list[str]:
    """Attribute names of a graph: a mapping's keys, PyG ``Data.keys()``, or ``keys`` of an
    old-style ``Data`` where it is a property listing the non-``None`` attributes (MACE's
    ``AtomicData``)."""
    keys = getattr(graph, "keys", None)
    if callable(keys):
        keys = keys()
    if keys is None or isinstance(keys, (str, bytes)):
        raise InputTypeError(f"a graph must be a PyG Data or a mapping, got {type(graph).__name__}")
    try:
        keys = list(keys)
    except TypeError:
        raise InputTypeError(
            f"a graph must be a PyG Data or a mapping, got {type(graph).__name__}"
        ) from None
    return [k for k in keys if k != "num_nodes" and k not in RECOMPUTED_KEYS]


def _num_nodes(graph: Any, edge_index: torch.Tensor) -> int:
    """Node count: ``num_nodes`` (PyG infers it for ``Data``); for a dict without ``num_nodes``,
    the dim-0 size of its first tensor field other than ``edge_index``."""
    if not isinstance(graph, Mapping):
        n = graph.num_nodes
    elif "num_nodes" in graph:
        n = graph["num_nodes"]
    else:
        n = next(
            (
                v.shape[0]
                for k, v in graph.items()
                if k != EDGE_INDEX and isinstance(v, torch.Tensor) and v.dim() >= 1
            ),
            None,
        )
    if n is None:
        raise InputError(
            "cannot tell the number of nodes of a graph without node-level fields; set num_nodes"
        )
    return int(n)


def infer_schema(graphs: Iterable[Any], *, pad: Mapping[str, Any] | None = None) -> Schema:
    """Infer the `Schema` of a list of graphs (PyG ``Data`` or plain dicts of tensors).

    For ``Data`` the concatenation dimension and increment of each attribute come from the
    graph's own ``__cat_dim__``/``__inc__``. Plain dicts follow PyG's default rules for their
    structure only: ``edge_index`` is ``[2, E]`` and indexes nodes, everything else concatenates
    along dim 0 without increment (pass a `Schema` to say otherwise); their node count is
    ``num_nodes`` or else the dim-0 size of the first other tensor field. The level of each field is
    the one (node, edge, graph) its size matches in *every* given graph; where several match (e.g.
    every graph has as many nodes as edges) node beats edge beats graph -- give more graphs or
    an explicit schema to resolve it. A graph-level field may hold any fixed number of entries
    per graph along its concatenation dim (a ``[3, 3]`` cell: 3). ``pad`` sets pad values per
    field (default 0; numbers, tensors or callables, see `FieldSpec`). Attributes named like the
    batch's structural fields (`RECOMPUTED_KEYS`: ``batch``, ``ptr``, ``edge_ptr``) are ignored.
    """
    graphs = list(graphs)
    if not graphs:
        raise InputError("cannot infer a schema from an empty list of graphs")
    pad = dict(pad or {})
    first = graphs[0]
    keys = _keys(first)
    is_mapping = isinstance(first, Mapping)
    if EDGE_INDEX not in keys:
        Schema({})  # raises the missing-edge_index error
    edge_counts, node_counts = [], []
    for i, g in enumerate(graphs):
        ei = g[EDGE_INDEX]
        if not isinstance(ei, torch.Tensor) or ei.dim() != 2 or ei.shape[0] != 2:
            shape = tuple(ei.shape) if isinstance(ei, torch.Tensor) else type(ei).__name__
            raise InputError(f"graph {i}: edge_index must be a tensor of shape [2, E], got {shape}")
        if ei.dtype.is_floating_point or ei.dtype == torch.bool:
            raise InputTypeError(f"graph {i}: edge_index must hold integers, got {ei.dtype}")
        edge_counts.append(int(ei.shape[1]))
        node_counts.append(_num_nodes(g, ei))
    fields: dict[str, FieldSpec] = {}
    for key in keys:
        value = first[key]
        if isinstance(value, torch.Tensor):
            try:
                fields[key] = _infer_tensor_field(key, graphs, node_counts, edge_counts, is_mapping)
            except ValueError as exc:
                source = _node_count_source(first) if is_mapping else None
                if source is None:
                    raise
                raise InputError(
                    f"{exc} (the node count was taken from {source!r}, the first "
                    "tensor field of a dict without 'num_nodes': set num_nodes)"
                ) from None
        elif isinstance(value, numbers.Number) and not isinstance(value, bool):
            fields[key] = FieldSpec("graph", None, "none", 0, "number")
        else:
            fields[key] = FieldSpec("graph", None, "none", None, "object")
        if key in pad:
            fields[key] = replace(fields[key], pad=pad[key])
    unknown = sorted(set(pad) - set(fields))
    if unknown:
        raise UnknownNameError(
            f"pad given for unknown field(s) {', '.join(unknown)}; fields: {list(fields)}"
        )
    return Schema(fields)


def _node_count_source(graph: Any) -> str | None:
    """The field a dict without ``num_nodes`` takes its node count from (see `_num_nodes`)."""
    if "num_nodes" in graph:
        return None
    return next(
        (
            k
            for k, v in graph.items()
            if k != EDGE_INDEX and isinstance(v, torch.Tensor) and v.dim() >= 1
        ),
        None,
    )


def _infer_tensor_field(
    key: str,
    graphs: Sequence[Any],
    node_counts: Sequence[int],
    edge_counts: Sequence[int],
    is_mapping: bool,
) -> FieldSpec:
    first = graphs[0]
    value = first[key]
    if is_mapping:
        cat_dim = 1 if key == EDGE_INDEX else 0
        inc_of = (lambda g, v, i: node_counts[i]) if key == EDGE_INDEX else (lambda g, v, i: 0)
    else:
        cat_dim = first.__cat_dim__(key, value)
        inc_of = lambda g, v, i: g.__inc__(key, v)  # noqa: E731
    if isinstance(cat_dim, tuple):
        raise InputTypeError(f"field {key!r}: sparse block-diagonal attributes are not supported")
    if cat_dim is None or value.dim() == 0:
        return FieldSpec("graph", None, "none", 0, dtype=value.dtype, shape=tuple(value.shape))
    d = cat_dim % value.dim()
    sizes, incs = [], []
    for i, g in enumerate(graphs):
        try:
            v = g[key]
        except KeyError:
            raise InputError(f"graph {i} has no attribute {key!r}, which graph 0 has") from None
        if not isinstance(v, torch.Tensor) or v.dim() != value.dim():
            raise InputError(
                f"field {key!r}: graph {i} has {_describe(v)}, graph 0 has {_describe(value)}"
            )
        sizes.append(int(v.shape[d]))
        inc = inc_of(g, v, i)
        incs.append(int(inc) if not isinstance(inc, torch.Tensor) else int(inc.reshape(-1)[0]))
    candidates = [
        level
        for level, counts in (("node", node_counts), ("edge", edge_counts), ("graph", None))
        if (counts is None and sizes[0] >= 1 and all(s == sizes[0] for s in sizes))
        or (counts is not None and sizes == counts)
    ]
    if key == EDGE_INDEX:
        candidates = ["edge"] if "edge" in candidates else []
    if not candidates:
        odd = [j for j, s in enumerate(sizes) if s not in (node_counts[j], edge_counts[j], 1)]
        i = odd[0] if odd else 0
        raise InputError(
            f"field {key!r} has size {sizes[i]} along dim {d} in graph {i}, matching neither its "
            f"{node_counts[i]} nodes, its {edge_counts[i]} edges nor one fixed size (graph-level) "
            "consistently across graphs; fix the data or pass an explicit schema"
        )
    if all(x == 0 for x in incs):
        inc = "none"
    elif incs == node_counts:
        inc = "node"
    else:
        inc = "call"
    if key == EDGE_INDEX and inc != "node":
        raise InputError("edge_index must be offset by node counts (check __inc__ overrides)")
    level = candidates[0]
    shape = tuple(-1 if j == d and level != "graph" else int(s) for j, s in enumerate(value.shape))
    return FieldSpec(level, d, inc, 0, dtype=value.dtype, shape=shape)


def _describe(v: object) -> str:
    if isinstance(v, torch.Tensor):
        return f"a tensor of shape {tuple(v.shape)}"
    return f"a {type(v).__name__}"


def torch_dtype(dtype: DTypeLike) -> np.dtype:
    """The NumPy dtype a stored array becomes in torch: ints -> int64, floats -> float32,
    bools stay bool."""
    kind = np.dtype(dtype).kind
    return np.dtype(np.bool_ if kind == "b" else np.int64 if kind in "iu" else np.float32)
