"""Collation of a list of graphs into one batch of an exact padded shape (plain torch tensors).

Layout of a padded batch of shape ``(n_node, n_edge, n_graph)`` holding ``G`` real graphs with
``N`` nodes and ``E`` edges: real graphs first, in the given order; then ``n_graph - G - 1`` empty
padding graphs; then the last graph slot ``n_graph - 1``, a padding graph owning all
``n_node - N >= 1`` padding nodes and all ``n_edge - E`` padding edges. Padding edges connect
padding nodes only. Because the last slot always owns a node, ``batch.max() + 1 == n_graph`` for
every batch, so stock PyG reductions without ``size=`` return exactly ``n_graph`` rows.

The padding kernel (`graphbatch._padkernel`, shared with the JAX adapter and the store batch
path) gives the layout: the padding owner and the fit check, rows per graph slot and their
pointers, ``batch``, masks and ``graph_index``, padding-edge wiring and padding positions. Two
differences remain, for stated reasons:

* the real rows are concatenated here with ``torch.cat``, not gathered by the NumPy kernel:
  the inputs are per-graph torch tensors of any torch dtype (``bfloat16`` has no NumPy type)
  on any device, batched by PyG's per-field rules (``__cat_dim__`` along any dimension,
  ``__inc__`` offsets, count, number and object fields, tensor and callable pads); a NumPy
  round trip would add a copy and could not hold them. The kernel gathers rows where they are
  NumPy arrays already: a `graphbatch.datasets.GraphStore`, read by
  `graphbatch.torch._store_batch.StoreBatcher` and wrapped zero-copy into the same ``Batch``.
* the PyG front end (`graphbatch.torch._pyg.collate`) keeps PyG's ``Batch`` bookkeeping
  (``_slice_dict``, ``_inc_dict``, the graphs' ``Data`` subclass), which a NumPy kernel has no
  notion of.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .._errors import InputError
from .._padkernel import (
    fill_structure,
    padding_node_positions,
    padding_spacing,
)
from .._padlayout import padding_edge_index
from ._collate_check import CheckedBatch, check_batch
from ._schema import FieldSpec, Schema

__all__ = ["collate_dict", "collate_parts", "CollatedParts", "PadContext"]


class PadContext:
    """What a callable ``FieldSpec.pad`` sees of the batch it pads.

    ``key``/``spec``: the field; ``shape``: the padded ``(n_node, n_edge, n_graph)``;
    ``num_real``: ``(G, N, E)`` real graphs, nodes and edges; ``block_shape``: the shape of the
    padding block to fill; ``spacing``: the padding geometry's spacing ``s`` of this batch
    (``cutoff`` when given, else the automatic one; ``None`` without positions); ``dtype`` of the
    field. The callable returns a tensor broadcastable to ``block_shape``.
    """

    __slots__ = ("key", "spec", "shape", "num_real", "block_shape", "spacing", "dtype")
    key: str
    spec: FieldSpec
    shape: tuple[int, int, int]
    num_real: tuple[int, int, int]
    block_shape: tuple[int, ...]
    spacing: float | None
    dtype: torch.dtype

    def __init__(self, **kw: Any) -> None:
        for k, v in kw.items():
            setattr(self, k, v)

    def __repr__(self) -> str:
        return (
            f"PadContext(key={self.key!r}, shape={self.shape}, num_real={self.num_real}, "
            f"block_shape={self.block_shape}, spacing={self.spacing})"
        )


class CollatedParts:
    """Result of `collate_tensors` before it is wrapped into a PyG ``Batch`` or a dict."""

    __slots__ = (
        "fields",
        "node_ptr",
        "edge_ptr",
        "num_real",
        "shape",
        "schema",
        "node_counts",
        "incs",
        "graph_index",
    )
    fields: dict[str, Any]
    node_ptr: np.ndarray
    edge_ptr: np.ndarray
    num_real: tuple[int, int, int]
    shape: tuple[int, int, int]
    schema: Schema
    node_counts: np.ndarray
    incs: dict[str, torch.Tensor]
    graph_index: np.ndarray | None

    def __init__(self, **kw: Any) -> None:
        for k, v in kw.items():
            setattr(self, k, v)


def _count_field(spec: FieldSpec, key: str, c: CheckedBatch) -> torch.Tensor:
    """A count field's padded value: every graph slot's node or edge count (``ptr.diff()``)."""
    ptr = c.node_ptr if spec.count == "node" else c.edge_ptr
    out = torch.from_numpy(np.diff(ptr)).to(spec.dtype or torch.int64)
    if spec.shape is not None and spec.cat_dim is not None and len(spec.shape) > 1:
        shape = [1] * len(spec.shape)
        shape[spec.cat_dim] = -1
        out = out.reshape(shape)
    return out


def _spacing(c: CheckedBatch, cache: dict[str, Any]) -> float | None:
    """The padding geometry's spacing ``s`` of this batch (``None`` without positions)."""
    if not c.geometric:
        return None
    if "spacing" not in cache:
        if c.cutoff is not None:
            cache["spacing"] = c.cutoff
        else:
            vals = c.values[c.position_key]
            pos = (
                torch.cat(vals, dim=0).detach().cpu().double().numpy() if vals else np.zeros((0, 1))
            )
            cache["spacing"] = padding_spacing(pos, None)
    return cache["spacing"]


def _pad_block(
    key: str,
    spec: FieldSpec,
    pad_shape: list[int],
    dtype: torch.dtype,
    c: CheckedBatch,
    cache: dict[str, Any],
) -> torch.Tensor:
    """The padding block of one field: ``spec.pad`` as a number, a tensor broadcast to each
    padding item, or a callable of a `PadContext`."""
    pad = spec.pad
    if callable(pad) and not isinstance(pad, torch.Tensor):
        pad = pad(
            PadContext(
                key=key,
                spec=spec,
                shape=c.shape,
                num_real=(c.g_real, c.n_real, c.e_real),
                block_shape=tuple(pad_shape),
                spacing=_spacing(c, cache),
                dtype=dtype,
            )
        )
    if not isinstance(pad, torch.Tensor):
        return torch.full(pad_shape, pad, dtype=dtype)
    pad = pad.to(dtype)
    try:
        if (
            spec.level == "graph"
            and spec.cat_dim is not None
            and spec.rows > 1
            and pad.dim() == len(pad_shape)
            and pad.shape[spec.cat_dim] == spec.rows
        ):
            # one padding item (e.g. a [3, 3] cell) repeated for every padding graph
            reps = [1] * pad.dim()
            reps[spec.cat_dim] = pad_shape[spec.cat_dim] // spec.rows
            return pad.repeat(reps).expand(pad_shape).clone()
        return pad.expand(pad_shape).clone()
    except RuntimeError:
        raise InputError(
            f"field {key!r}: pad value of shape {tuple(pad.shape)} does not fit the padding "
            f"block {tuple(pad_shape)}"
        ) from None


def _pad_field(
    key: str, spec: FieldSpec, graphs: list[Any], c: CheckedBatch, cache: dict[str, Any]
) -> tuple[Any, torch.Tensor | None]:
    """The padding kernel for one field of a checked batch: ``(padded value, increments)``
    (increments: per-graph offsets added to a node-indexing field, else ``None``)."""
    n_node, n_edge, n_graph = c.shape
    g_real = c.g_real
    vals = c.values[key]
    if spec.count:
        return _count_field(spec, key, c), None
    if spec.kind == "object":
        return list(vals) + [spec.pad] * (n_graph - g_real), None
    if spec.kind == "number":
        return torch.tensor(list(vals) + [spec.pad] * (n_graph - g_real)), None
    d = spec.cat_dim
    inc_full = None
    if d is None:  # 0-d / stacked graph-level values
        real = torch.stack(vals) if vals else _empty(spec, key)
        cat_d = 0
    else:
        try:
            real = torch.cat(vals, dim=d) if vals else _empty(spec, key)
        except RuntimeError as exc:
            raise InputError(f"field {key!r}: graphs cannot be concatenated: {exc}") from None
        cat_d = d
        if spec.inc != "none" and g_real:
            if spec.inc == "node":
                per_graph = torch.from_numpy(c.node_ptr[:g_real])
            else:
                per_graph = torch.as_tensor(
                    [int(g.__inc__(key, v)) for g, v in zip(graphs, vals, strict=False)],
                    dtype=torch.int64,
                )
            inc_full = torch.zeros(n_graph, dtype=torch.int64)
            inc_full[:g_real] = per_graph
            counts = (
                c.node_counts
                if spec.level == "node"
                else (c.edge_counts if spec.level == "edge" else [spec.rows] * g_real)
            )
            inc_vec = torch.repeat_interleave(
                per_graph, torch.as_tensor(counts), output_size=int(real.shape[d])
            ).to(real.dtype)
            view = [1] * real.dim()
            view[d] = -1
            real = real + inc_vec.view(view)
    target = {"node": n_node, "edge": n_edge, "graph": n_graph * spec.rows}[spec.level]
    missing = target - int(real.shape[cat_d])
    pad_shape = list(real.shape)
    pad_shape[cat_d] = missing
    if spec.inc == "node":
        if spec.level == "edge" and real.dim() == 2 and real.shape[1 - cat_d] == 2:
            if "pad_ei" not in cache:
                cache["pad_ei"] = torch.from_numpy(
                    padding_edge_index(c.n_real, n_node, n_edge - c.e_real, spread=c.geometric)
                )
            block = cache["pad_ei"].to(real.dtype)
            block = block if cat_d == 1 else block.t()
        else:
            block = torch.full(pad_shape, c.n_real, dtype=real.dtype)
    elif c.geometric and key == c.position_key:
        pos = real.detach().cpu().double().numpy()
        block = (
            torch.from_numpy(padding_node_positions(pos, missing, _spacing(c, cache)))
            .to(real.dtype)
            .reshape(pad_shape)
        )
    else:
        block = _pad_block(key, spec, pad_shape, real.dtype, c, cache)
    return torch.cat([real, block], dim=cat_d), inc_full


def collate_parts(
    graphs: Sequence[Any],
    shape: Any,
    *,
    graph_index: Any = None,
    cutoff: float | None = None,
    schema: Schema | None = None,
    position_key: str = "pos",
) -> CollatedParts:
    """Concatenate ``graphs`` (PyG ``Data`` or dicts of tensors) and pad to ``shape`` exactly.

    Returns the padded fields and the bookkeeping arrays; `collate_dict` and
    :func:`graphbatch.torch.collate` wrap them. `check_batch` does every check first; then
    `_pad_field` pads each field.

    ``shape`` is ``(n_node, n_edge, n_graph)`` (or a `Budget`); the real content must leave the
    padding reservation free (nodes <= n_node - 1, edges <= n_edge, graphs <= n_graph - 1), else
    ``ValueError``. ``graph_index`` gives the dataset index of each graph (default: positions).
    ``cutoff`` and the padding geometry: see :func:`graphbatch.torch.collate`.
    """
    graphs = list(graphs)
    c = check_batch(graphs, shape, graph_index, cutoff, schema, position_key)
    fields: dict[str, Any] = {}
    incs: dict[str, Any] = {}
    cache: dict[str, Any] = {}
    for key, spec in c.schema.items():
        fields[key], inc = _pad_field(key, spec, graphs, c, cache)
        if inc is not None:
            incs[key] = inc
    return CollatedParts(
        fields=fields,
        graph_index=c.graph_index,
        node_ptr=c.node_ptr,
        edge_ptr=c.edge_ptr,
        num_real=(c.g_real, c.n_real, c.e_real),
        shape=c.shape,
        schema=c.schema,
        node_counts=c.counts_n,
        incs=incs,
    )


def _empty(spec: FieldSpec, key: str) -> torch.Tensor:
    if spec.dtype is None or spec.shape is None:
        raise InputError(
            f"field {key!r}: an empty batch needs the field's dtype and shape in the schema "
            "(use a schema inferred from real graphs)"
        )
    if spec.cat_dim is None:
        return torch.empty((0, *spec.shape), dtype=spec.dtype)
    d = spec.cat_dim % len(spec.shape)
    return torch.empty(
        tuple(0 if j == d else s for j, s in enumerate(spec.shape)), dtype=spec.dtype
    )


def structure(parts: CollatedParts) -> dict[str, torch.Tensor]:
    """``batch``, ``ptr``, masks and ``graph_index`` tensors of a collated batch (the kernel's
    `graphbatch._padkernel.fill_structure`, wrapped zero-copy)."""
    g_real = parts.num_real[0]
    ids = np.arange(g_real, dtype=np.int64) if parts.graph_index is None else parts.graph_index
    arrays = fill_structure(parts.shape, parts.num_real, parts.node_counts, ids)
    out = {"batch": torch.from_numpy(arrays["batch"]), "ptr": torch.from_numpy(parts.node_ptr)}
    for key in ("node_mask", "edge_mask", "graph_mask", "graph_index"):
        out[key] = torch.from_numpy(arrays[key])
    return out


def collate_dict(
    graphs: Sequence[Any],
    shape: Any,
    *,
    graph_index: Any = None,
    cutoff: float | None = None,
    schema: Schema | None = None,
    position_key: str = "pos",
) -> dict[str, Any]:
    """Plain-torch collation (no PyG needed): a dict of padded tensors.

    ``graphs`` are dicts of tensors (or PyG ``Data``) with an integer ``edge_index`` ``[2, E]``;
    see :func:`graphbatch.torch.collate` for the layout, ``shape``, ``cutoff`` and ``schema``.
    Besides the fields the dict holds ``batch`` ``[n_node]``, ``ptr`` ``[n_graph + 1]``,
    ``edge_ptr`` ``[n_graph + 1]``, ``node_mask``/``edge_mask``/``graph_mask`` (bool),
    ``graph_index`` ``[n_graph]`` (-1 for padding graphs) and ``num_graphs`` (``n_graph``, int).
    """
    parts = collate_parts(
        graphs,
        shape,
        graph_index=graph_index,
        cutoff=cutoff,
        schema=schema,
        position_key=position_key,
    )
    out = dict(parts.fields)
    out.update(structure(parts))
    out["edge_ptr"] = torch.from_numpy(parts.edge_ptr)
    out["num_graphs"] = parts.shape[2]
    return out
