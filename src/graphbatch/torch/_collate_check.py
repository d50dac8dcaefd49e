"""The checks of a batch of graphs before it is collated (`check_batch`), and what they
establish (`CheckedBatch`): the schema, every field's per-graph values, node and edge counts
per graph and their slot pointers. Every error names the graph (and its dataset index), the
field and the sizes that disagree; nothing is concatenated or padded here
(`graphbatch.torch._collate` does that once the batch is checked)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from .._errors import InputError, InputTypeError
from .._padkernel import check_fits, padded_shape, padding_owner, slot_counts
from .._padlayout import check_cutoff
from ._schema import EDGE_INDEX, Schema, infer_schema

__all__ = ["CheckedBatch", "check_batch"]


def _coerce_shape(shape: Any) -> tuple[int, int, int]:
    try:
        return padded_shape(shape)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"bad padded shape {shape!r}: {exc}") from None


def _label(i: int, graph_index: Any) -> str:
    if graph_index is None:
        return f"graph {i}"
    return f"graph {i} (dataset index {int(graph_index[i])})"


def _is_old_style(g: Any) -> bool:
    """An old-style PyG ``Data`` (MACE's vendored one): ``keys`` is a property, attributes live in
    the instance ``__dict__`` and missing ones read as ``None``."""
    return hasattr(g, "__cat_dim__") and isinstance(getattr(type(g), "keys", None), property)


def _mappings(graphs: list[Any]) -> list[Any] | None:
    """The attribute dicts of PyG ``Data`` graphs (plain dict look-ups are ~10x faster than
    ``data[key]``), the instance dicts of old-style ``Data`` (``None`` values dropped), or the
    graphs themselves when they are dicts; ``None`` for anything else."""
    if all(type(g) is dict for g in graphs):
        return graphs
    if graphs and all(_is_old_style(g) for g in graphs):
        return [{k: v for k, v in vars(g).items() if v is not None} for g in graphs]
    try:
        maps = [g._store._mapping for g in graphs]
    except AttributeError:
        return None
    return maps if all(type(m) is dict for m in maps) else None


def _values(
    graphs: list[Any], key: str, graph_index: Any, maps: list[Any] | None = None
) -> list[Any]:
    try:
        if maps is not None:
            return [m[key] for m in maps]
        return [g[key] for g in graphs]
    except (KeyError, AttributeError):
        for i, g in enumerate(graphs):
            try:
                if maps is not None:
                    maps[i][key]
                else:
                    g[key]
            except (KeyError, AttributeError):
                raise InputError(
                    f"{_label(i, graph_index)} has no attribute {key!r}, which the schema "
                    "(the other graphs) requires"
                ) from None
        raise


def _shape_of(v: Any) -> str:
    return str(tuple(v.shape)) if isinstance(v, torch.Tensor) else f"a {type(v).__name__}"


def _check_tensors(vals: Sequence[Any], key: str, graph_index: Any) -> None:
    for i, v in enumerate(vals):
        if not isinstance(v, torch.Tensor):
            raise InputTypeError(
                f"{_label(i, graph_index)}: field {key!r} is a {type(v).__name__}, "
                "expected a tensor"
            )


def _sizes(vals: list[Any], d: int, key: str, graph_index: Any) -> list[int]:
    """``v.shape[d]`` of every value (a clear error for non-tensors / too few dimensions)."""
    try:
        return [v.shape[d] for v in vals]
    except (AttributeError, IndexError):
        _check_tensors(vals, key, graph_index)
        i = next(i for i, v in enumerate(vals) if v.dim() <= d)
        raise InputError(
            f"{_label(i, graph_index)}: field {key!r} has shape {tuple(vals[i].shape)}, "
            f"no dim {d} to concatenate along"
        ) from None


def _first_mismatch(sizes: list[int], expected: list[int]) -> int:
    return next(i for i, (a, b) in enumerate(zip(sizes, expected, strict=False)) if a != b)


class CheckedBatch:
    """What `check_batch` established about a batch: counts, pointers and each field's values."""

    __slots__ = (
        "shape",
        "graph_index",
        "schema",
        "values",
        "g_real",
        "n_real",
        "e_real",
        "node_counts",
        "edge_counts",
        "counts_n",
        "node_ptr",
        "edge_ptr",
        "geometric",
        "cutoff",
        "position_key",
    )
    shape: tuple[int, int, int]
    graph_index: np.ndarray | None
    schema: Schema
    values: dict[str, Any]
    g_real: int
    n_real: int
    e_real: int
    node_counts: list[int]
    edge_counts: list[int]
    counts_n: np.ndarray
    node_ptr: np.ndarray
    edge_ptr: np.ndarray
    geometric: bool
    cutoff: float | None
    position_key: str

    def __init__(self, **kw: Any) -> None:
        for k, v in kw.items():
            setattr(self, k, v)


def _has_float_positions(schema: Schema, values: dict[str, Any], position_key: str) -> bool:
    spec = schema.get(position_key)
    if spec is None or spec.level != "node" or spec.kind != "tensor":
        return False
    if spec.dtype is not None:
        return spec.dtype.is_floating_point
    vals = values[position_key]
    return bool(vals) and isinstance(vals[0], torch.Tensor) and vals[0].is_floating_point()


def check_batch(
    graphs: list[Any],
    shape: Any,
    graph_index: Any,
    cutoff: float | None,
    schema: Schema | Mapping[str, Any] | None,
    position_key: str,
) -> CheckedBatch:
    """Every check of `graphbatch.torch._collate.collate_parts` (raises ``ValueError`` /
    ``TypeError`` naming the graph, the field and the sizes); returns the counts and field
    values the padding kernel needs."""
    shape = n_node, n_edge, n_graph = _coerce_shape(shape)
    g_real = len(graphs)
    graph_index = _checked_graph_index(graph_index, g_real)
    schema = _checked_schema(graphs, schema)
    cutoff = _checked_cutoff(cutoff, schema, position_key)
    check_fits((g_real, 0, 0), shape)  # the graph count, before any field
    # per-graph counts from the structural fields
    maps = _mappings(graphs)
    values: dict[str, Any] = {
        key: (
            _count_values(graphs, key, maps)
            if spec.count
            else _values(graphs, key, graph_index, maps)
        )
        for key, spec in schema.items()
    }
    edge_counts = _edge_counts(values[EDGE_INDEX], graph_index)
    node_counts = _node_counts(graphs, schema, values, graph_index)
    n_real = sum(node_counts)
    e_real = sum(edge_counts)
    where = "" if graph_index is None else f" (dataset indices {graph_index[:8].tolist()}...)"
    check_fits((g_real, n_real, e_real), shape, where)
    _check_field_sizes(schema, values, node_counts, edge_counts, graph_index)
    owner = padding_owner("torch", g_real, n_graph)
    counts_n, node_ptr = slot_counts(node_counts, n_node - n_real, n_graph, owner)
    _, edge_ptr = slot_counts(edge_counts, n_edge - e_real, n_graph, owner)
    return CheckedBatch(
        shape=shape,
        graph_index=graph_index,
        schema=schema,
        values=values,
        g_real=g_real,
        n_real=n_real,
        e_real=e_real,
        node_counts=node_counts,
        edge_counts=edge_counts,
        counts_n=counts_n,
        node_ptr=node_ptr,
        edge_ptr=edge_ptr,
        geometric=cutoff is not None or _has_float_positions(schema, values, position_key),
        cutoff=cutoff,
        position_key=position_key,
    )


def _checked_graph_index(graph_index: Any, g_real: int) -> np.ndarray | None:
    """``graph_index`` as int64 ``[g_real]`` (or ``None``: positions are used)."""
    if graph_index is not None:
        graph_index = np.asarray(graph_index, dtype=np.int64).reshape(-1)
        if graph_index.shape[0] != g_real:
            raise InputError(f"graph_index has {graph_index.shape[0]} entries for {g_real} graphs")
    return graph_index


def _checked_schema(graphs: list[Any], schema: Schema | Mapping[str, Any] | None) -> Schema:
    """``schema`` as a `Schema`, inferred from ``graphs`` when not given (which an empty batch
    cannot do)."""
    if schema is None:
        if not graphs:
            raise InputError("an empty batch (no real graph) needs an explicit schema")
        return infer_schema(graphs)
    return schema if isinstance(schema, Schema) else Schema(schema)


def _checked_cutoff(cutoff: float | None, schema: Schema, position_key: str) -> float | None:
    """``cutoff`` checked (`_padlayout.check_cutoff`); a cutoff needs the node-level tensor
    field ``position_key``."""
    cutoff = check_cutoff(cutoff)
    if cutoff is not None:
        spec = schema.get(position_key)
        if spec is None or spec.level != "node" or spec.kind != "tensor":
            raise InputError(
                "cutoff needs node positions: the graphs have no node-level field "
                f"{position_key!r} (set position_key)"
            )
    return cutoff


def _edge_counts(ei_vals: list[Any], graph_index: Any) -> list[int]:
    """Edges per graph: each ``edge_index`` must be a tensor of shape ``[2, E]``."""
    try:
        edge_counts = [v.shape[1] for v in ei_vals]
        if any(v.dim() != 2 or v.shape[0] != 2 for v in ei_vals):
            raise IndexError
    except (IndexError, AttributeError):
        i = next(
            i
            for i, v in enumerate(ei_vals)
            if not isinstance(v, torch.Tensor) or v.dim() != 2 or v.shape[0] != 2
        )
        raise InputError(
            f"{_label(i, graph_index)}: edge_index must be a tensor of shape [2, E], got "
            f"{_shape_of(ei_vals[i])}"
        ) from None
    return edge_counts


def _node_counts(
    graphs: list[Any], schema: Schema, values: dict[str, Any], graph_index: Any
) -> list[int]:
    """Nodes per graph: the size of the schema's node anchor field along its concatenation
    dim, else each graph's ``num_nodes``."""
    anchor = schema.node_anchor()
    if anchor is None:
        return [int(g["num_nodes"] if isinstance(g, Mapping) else g.num_nodes) for g in graphs]
    d = schema[anchor].cat_dim
    assert d is not None  # node_anchor picks a field with a cat_dim
    return _sizes(values[anchor], d, anchor, graph_index)


def _check_field_sizes(
    schema: Schema,
    values: dict[str, Any],
    node_counts: list[int],
    edge_counts: list[int],
    graph_index: Any,
) -> None:
    """Every tensor field's per-graph size along its concatenation dim against the graph's
    node or edge count (graph-level: ``spec.rows``), and every count field's own values."""
    anchor = schema.node_anchor()
    g_real = len(node_counts)
    expected = {"node": node_counts, "edge": edge_counts}
    for key, spec in schema.items():
        if spec.kind != "tensor":
            continue
        vals = values[key]
        if spec.count:
            _check_counts(
                vals,
                key,
                node_counts if spec.count == "node" else edge_counts,
                spec.count,
                graph_index,
            )
            continue
        expected["graph"] = [spec.rows] * g_real
        if spec.cat_dim is None:
            _check_tensors(vals, key, graph_index)
            continue
        sizes = _sizes(vals, spec.cat_dim, key, graph_index)
        if sizes != expected[spec.level]:
            i = _first_mismatch(sizes, expected[spec.level])
            source = {
                "node": f"its node-level field {anchor!r}" if anchor else "num_nodes",
                "edge": "its edge_index",
                "graph": "a graph-level field",
            }[spec.level]
            raise InputError(
                f"{_label(i, graph_index)}: mismatched attribute sizes: {spec.level}-level "
                f"field {key!r} has {sizes[i]} entries along dim {spec.cat_dim}, but {source} "
                f"says {expected[spec.level][i]}"
            )


def _count_values(graphs: list[Any], key: str, maps: list[Any] | None) -> list[Any] | None:
    """A count field's real values when every graph has it, else ``None`` (it is derived)."""
    try:
        if maps is not None:
            return [m[key] for m in maps]
        vals = [g[key] for g in graphs]
        return None if any(v is None for v in vals) else vals
    except (KeyError, AttributeError):
        return None


def _check_counts(
    vals: list[Any] | None, key: str, counts: list[int], what: str, graph_index: Any
) -> None:
    """A count field's own values must equal the counts of the graphs carrying them."""
    if vals is None:
        return
    _check_tensors(vals, key, graph_index)
    for i, (v, n) in enumerate(zip(vals, counts, strict=False)):
        if v.numel() != 1 or int(v.reshape(-1)[0]) != n:
            raise InputError(
                f"{_label(i, graph_index)}: count field {key!r} holds {v.reshape(-1).tolist()}, "
                f"but the graph has {n} {what}s"
            )
