"""A batch as named tensors, its shape key, and the static buffers of one shape (`TrainStep`).

`flatten` walks a batch: a tensor, a dict, a list or tuple (named tuples too), or a PyG
``Data``/``Batch``/``HeteroData`` (its stores' attributes), nested; every other value is a
constant. It returns the tensors, their names (``"pos"``, ``"x[0]"``, ``"atoms.pos"``) and a
`Spec` that `unflatten` fills with other tensors. `StepKey` is what a CUDA graph fixes: every
tensor's name, shape, dtype and device. `StaticBatch` holds one shape's buffers: made from the
first batch of that shape (detached clones), refilled by ``copy_`` from every later batch, and
handed to the model as a new container of the same type around those buffers on each call (so
a model that replaces a field of its batch never replaces a buffer).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from .._errors import InputError

__all__ = ["Spec", "StaticBatch", "StepKey", "flatten", "step_key", "unflatten"]

#: ``("tensor",)``, ``("const", value)``, ``("dict", type, keys, children)``,
#: ``("seq", type, children)`` or ``("pyg", template, ((store, attr, child), ...))``
Spec = tuple[Any, ...]
_TENSOR: Spec = ("tensor",)


def _pyg_data(obj: Any) -> bool:
    module = sys.modules.get("torch_geometric.data.data")
    return module is not None and isinstance(obj, module.BaseData)


def _join(prefix: str, part: str) -> str:
    return f"{prefix}.{part}" if prefix else part


def _walk(obj: Any, name: str, names: list[str], leaves: list[torch.Tensor]) -> Spec:
    if isinstance(obj, torch.Tensor):
        names.append(name or "batch")
        leaves.append(obj)
        return _TENSOR
    if isinstance(obj, Mapping):
        keys = tuple(obj)
        kids = tuple(_walk(obj[k], _join(name, str(k)), names, leaves) for k in keys)
        return ("dict", type(obj), keys, kids)
    if isinstance(obj, list | tuple):
        kids = tuple(_walk(v, f"{name}[{i}]", names, leaves) for i, v in enumerate(obj))
        return ("seq", type(obj), kids)
    if _pyg_data(obj):
        parts = []
        for s, store in enumerate(obj.stores):
            key = getattr(store, "_key", None)
            base = _join(name, str(key)) if key is not None else name
            for attr, value in store.items():
                parts.append((s, attr, _walk(value, _join(base, attr), names, leaves)))
        return ("pyg", obj, tuple(parts))
    return ("const", obj)


def flatten(batch: Any) -> tuple[Spec, list[str], list[torch.Tensor]]:
    """``(spec, names, tensors)`` of ``batch``, tensors in a fixed walk order."""
    names: list[str] = []
    leaves: list[torch.Tensor] = []
    spec = _walk(batch, "", names, leaves)
    return spec, names, leaves


def _build(spec: Spec, leaves: Iterator[torch.Tensor]) -> Any:
    kind = spec[0]
    if kind == "tensor":
        return next(leaves)
    if kind == "const":
        return spec[1]
    if kind == "dict":
        _, cls, keys, kids = spec
        values = {k: _build(c, leaves) for k, c in zip(keys, kids, strict=True)}
        return values if cls is dict else cls(values)
    if kind == "seq":
        _, cls, kids = spec
        items = [_build(c, leaves) for c in kids]
        if cls in (list, tuple):
            return cls(items)
        return cls(*items)  # a named tuple
    _, template, parts = spec
    out = copy.copy(template)
    stores = out.stores
    for s, attr, child in parts:
        stores[s][attr] = _build(child, leaves)
    return out


def unflatten(spec: Spec, leaves: Sequence[torch.Tensor]) -> Any:
    """A new container shaped by ``spec`` (from `flatten`) around ``leaves`` (in order);
    constants are those of the batch ``spec`` came from."""
    it = iter(leaves)
    out = _build(spec, it)
    if next(it, None) is not None:
        raise InputError(f"unflatten got more than the spec's tensors ({len(leaves)} given)")
    return out


class StepKey(NamedTuple):
    """The padded shape of a batch as a CUDA graph fixes it: ``(name, shape, dtype, device)``
    of every tensor, in walk order. Equal keys share a graph."""

    fields: tuple[tuple[str, tuple[int, ...], torch.dtype, torch.device], ...]

    @property
    def shape(self) -> tuple[int, int, int] | None:
        """``(nodes, edges, graphs)`` from the ``node_mask``/``edge_mask``/``graph_mask``
        fields, or ``None`` when the batch has no such masks."""
        rows = {n.rsplit(".", 1)[-1]: s[0] for n, s, _, _ in self.fields if len(s) == 1}
        try:
            return rows["node_mask"], rows["edge_mask"], rows["graph_mask"]
        except KeyError:
            return None

    def describe(self) -> str:
        """One line: the padded shape when known, else the number of tensors."""
        shape = self.shape
        if shape is not None:
            return f"{shape[0]} nodes, {shape[1]} edges, {shape[2]} graphs"
        return f"{len(self.fields)} tensors"


def step_key(names: Sequence[str], leaves: Sequence[torch.Tensor]) -> StepKey:
    """The `StepKey` of a flattened batch (``torch.Size`` is a tuple: equal, same hash)."""
    return StepKey(
        tuple((n, t.shape, t.dtype, t.device) for n, t in zip(names, leaves, strict=True))
    )


def _static_clone(t: torch.Tensor) -> torch.Tensor:
    out = t.detach().clone()
    return out.requires_grad_(True) if t.requires_grad else out


def _groups(buffers: Sequence[torch.Tensor]) -> list[list[int]]:
    """Positions of ``buffers`` by (device, dtype), in first-seen order: one multi-tensor
    launch each (``_foreach_copy_`` copies a list of mixed dtypes one tensor at a time)."""
    groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
    for i, t in enumerate(buffers):
        groups.setdefault((t.device, t.dtype), []).append(i)
    return list(groups.values())


@dataclass
class StaticBatch:
    """The static buffers of one padded shape: made from its first batch, refilled per step."""

    spec: Spec
    names: list[str]
    buffers: list[torch.Tensor]
    groups: list[list[int]]

    @classmethod
    def of(cls, spec: Spec, names: list[str], leaves: Sequence[torch.Tensor]) -> StaticBatch:
        """Buffers cloned from ``leaves`` (detached; ``requires_grad`` kept). The containers
        are rebuilt around the buffers, so no tensor of the first batch is kept."""
        buffers = [_static_clone(t) for t in leaves]
        own_spec, _, _ = flatten(unflatten(spec, buffers))
        return cls(own_spec, list(names), buffers, _groups(buffers))

    def fill(self, leaves: Sequence[torch.Tensor]) -> None:
        """``copy_`` each tensor of a batch of this shape (same dtypes and devices: same
        `StepKey`) into its buffer: one multi-tensor copy per dtype, asynchronous where the
        devices allow."""
        if len(leaves) != len(self.buffers):
            raise InputError(f"{len(leaves)} tensors for {len(self.buffers)} buffers")
        with torch.no_grad():
            for group in self.groups:
                torch._foreach_copy_(
                    [self.buffers[i] for i in group], [leaves[i] for i in group], non_blocking=True
                )

    def batch(self) -> Any:
        """A new batch container around the buffers (the model's input for one step)."""
        return unflatten(self.spec, self.buffers)
