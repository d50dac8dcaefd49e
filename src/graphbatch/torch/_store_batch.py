"""The store batch path: padded PyG ``Batch``es read straight from a `GraphStore`.

A planned batch (index list + padded shape) is gathered by the NumPy kernel
`graphbatch._padbatch.pad_batch` from the store's memory-mapped arrays and wrapped with
``torch.from_numpy`` (zero-copy) into exactly the ``Batch`` that `graphbatch.torch.collate`
builds from the store's per-graph ``Data`` (``GraphStoreDataset(store)``): same fields, dtypes,
padding layout, masks, ``batch``/``ptr``, ``graph_index``, slice and increment dicts. No
per-graph object is made. `graphbatch.torch.loader` takes this path for a `GraphStore`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from numpy.typing import ArrayLike
from torch.utils.data import get_worker_info

from .._errors import InputError
from .._padbatch import PackedGraphs, PaddedArrays, buffer_layout
from .._padlayout import check_cutoff
from .._source import GraphSource
from ._packed import pack_dict, pack_layout, packed_entries, unpack_dict, with_values
from ._pyg import _new_batch, _pyg
from ._schema import EDGE_INDEX, FieldSpec, Schema, torch_dtype
from ._slots import SlotBatch, SlotRing

if TYPE_CHECKING:
    from ..datasets import GraphStore
    from ._preset import StoreView

__all__ = ["StoreBatcher", "is_graph_store", "store_batch", "store_schema"]

_STRUCTURE = ("batch", "ptr", "node_mask", "edge_mask", "graph_mask", "graph_index")


def is_graph_store(obj: object) -> bool:
    """Whether ``obj`` is a graph store -- a `graphbatch._source.GraphSource`, such as a
    `graphbatch.datasets.GraphStore` or ``ShardedGraphStore`` -- read on the store batch path
    (the check imports no datasets module)."""
    return isinstance(obj, GraphSource)


def _torch_dtypes(store: GraphStore) -> dict[str, np.dtype]:
    return {name: torch_dtype(spec["dtype"]) for name, spec in store.fields.items()}


def store_schema(store: GraphStore) -> Schema:
    """The `Schema` of a store's torch view, from its field table: ``edge_index`` ``[2, E]``
    offset by node counts; node/edge fields along dim 0; graph fields ``[1, ...]`` per graph;
    nothing else offset. Equals `infer_schema` of ``GraphStoreDataset(store)`` graphs."""
    dtypes = _torch_dtypes(store)
    fields = {EDGE_INDEX: FieldSpec("edge", 1, "node", 0, dtype=torch.int64, shape=(2, -1))}
    for name, spec in store.fields.items():
        # node/edge fields: -1 rows per graph; graph fields: one row per graph (`FieldSpec.rows`)
        rows = 1 if spec["level"] == "graph" else -1
        fields[name] = FieldSpec(
            spec["level"],
            0,
            "none",
            0,
            dtype=getattr(torch, dtypes[name].name),
            shape=(rows, *spec["shape"]),
        )
    return Schema(fields)


def _check_schema(store: GraphStore, schema: Schema) -> dict[str, Any]:
    """Pad values of a user schema, after checking it describes the store's fields."""
    want = store_schema(store)
    if set(schema) != set(want):
        raise InputError(f"schema fields {sorted(schema)} differ from the store's {sorted(want)}")
    for key, spec in schema.items():
        w = want[key]
        if (spec.level, spec.cat_dim, spec.inc, spec.kind) != (w.level, w.cat_dim, w.inc, w.kind):
            raise InputError(
                f"schema entry {key!r} = {spec} does not match the store's field "
                f"({w.level}-level, cat_dim {w.cat_dim}, inc {w.inc!r})"
            )
    return {k: s.pad for k, s in schema.items() if k != EDGE_INDEX and s.pad != 0}


_STRUCT_KEYS = {
    "batch": "batch",
    "ptr": "node_ptr",
    "node_mask": "node_mask",
    "edge_mask": "edge_mask",
    "graph_mask": "graph_mask",
    "graph_index": "graph_index",
    "edge_ptr": "edge_ptr",
    "edge_inc": "edge_inc",
    "graph_ptr": "graph_ptr",
}
_TORCH_DTYPES: dict[np.dtype, torch.dtype] = {}


def _torch_dtype(dt: np.dtype) -> torch.dtype:
    t = _TORCH_DTYPES.get(dt)
    if t is None:
        t = _TORCH_DTYPES[dt] = torch.from_numpy(np.empty(0, dtype=dt)).dtype
    return t


def _shared_allocator() -> tuple[Callable[[int], np.ndarray], list[torch.Tensor]]:
    """``(allocate, holder)``: ``allocate(nbytes)`` makes a ``uint8`` tensor in shared memory
    (appended to ``holder``) and returns its NumPy view, for `pad_batch` in a DataLoader
    worker: the batch then travels to the main process as one shared block, not one per
    tensor (as ``default_collate`` does for the tensors it stacks)."""
    holder: list[torch.Tensor] = []

    def allocate(nbytes: int) -> np.ndarray:
        base = torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(nbytes))
        holder.append(base)
        return base.numpy()

    return allocate, holder


def _as_tensors(
    padded: PaddedArrays, keys: Iterable[str], base: torch.Tensor | None
) -> dict[str, torch.Tensor]:
    """The batch's field and structure arrays as tensors sharing its memory: views of ``base``
    (the batch's buffer as one tensor, in workers) or ``torch.from_numpy`` per array."""
    if base is None:
        fields, from_numpy = padded.fields, torch.from_numpy
        out = {key: from_numpy(fields[key]) for key in keys}
        for key, attr in _STRUCT_KEYS.items():
            out[key] = from_numpy(getattr(padded, attr))
        return out
    arrays = {key: padded.fields[key] for key in keys}
    arrays.update({key: getattr(padded, attr) for key, attr in _STRUCT_KEYS.items()})
    offsets = padded.offsets
    assert offsets is not None  # a batch made in one buffer has its offsets
    names = {**{key: key for key in keys}, **_STRUCT_KEYS}
    out = {}
    for key, a in arrays.items():
        at = offsets[names[key]]
        out[key] = base[at : at + a.nbytes].view(_torch_dtype(a.dtype)).view(a.shape)
    return out


class StoreBatcher:
    """Reads padded batches of one store: ``batcher(index, shape)`` -> PyG ``Batch`` (or the
    `graphbatch.torch.collate_dict` dict with ``as_dict=True``). Schema, dtypes and pad values
    are resolved once here, not per batch. ``schema`` (optional) may change pad values; its
    levels must be the store's. Picklable (the store re-opens in another process and checks
    it is still the same file)."""

    def __init__(
        self,
        store: GraphStore,
        schema: Schema | None = None,
        *,
        cutoff: float | None = None,
        position_key: str = "pos",
        as_dict: bool = False,
        view: StoreView | None = None,
    ) -> None:
        self.store = store
        self.schema = store_schema(store) if schema is None else schema
        self._pads = _check_schema(store, self.schema)
        self._dtypes = _torch_dtypes(store)
        # a preset's `StoreView`: its dtypes and pads, and its transform to the model's dict
        self.view = view
        if view is not None:
            self._dtypes.update({k: np.dtype(v) for k, v in view.dtypes.items()})
            self._pads.update(view.pads)
            as_dict = True
        self._keys = list(self.schema)
        self._levels = {key: spec.level for key, spec in self.schema.items()}
        self._anchored = self.schema.node_anchor() is not None
        self.cutoff = check_cutoff(cutoff)
        self.position_key = position_key
        self.as_dict = bool(as_dict)
        self._view_cache: dict = {}
        self._packed_cache: dict = {}
        self._entry_cache: dict = {}
        self._fields_only: PackedGraphs | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_view_cache"] = {}  # layout caches are remade where needed
        state["_packed_cache"] = {}
        state["_entry_cache"] = {}
        state["_fields_only"] = None
        return state

    def __call__(
        self, index: ArrayLike, shape: tuple[int, int, int], ring: SlotRing | None = None
    ) -> Any:
        """The padded batch of graphs ``index``. In a DataLoader worker given the ``ring`` of
        its pass (`StoreCollater` does), the batch is written into the worker's next slot and
        a `SlotBatch` message comes back instead (the main's `SlotReceiver` turns it into the
        batch); a batch that does not fit a slot, or a worker without a ring, gets a new shared
        block, so it crosses to the main process as one storage. With a preset's view, the
        view's transform runs in the worker and its dict travels packed the same way."""
        info = get_worker_info()
        if info is None:
            return self._read(index, shape)
        if ring is not None and not ring.serves(info.id, info.num_workers):
            ring = None
        if self.view is not None:
            return self._packed(index, shape, ring, info.id)
        claimed = None
        shared, holder = _shared_allocator()

        def allocate(nbytes: int) -> np.ndarray:
            nonlocal claimed
            got = None if ring is None else ring.claim(info.id, nbytes)
            if got is None:
                return shared(nbytes)
            claimed = (*got[:2], nbytes)
            return got[2]

        padded = self._kernel(index, shape, allocate)
        if claimed is not None:
            slot, ticket, nbytes = claimed
            assert ring is not None  # only a ring's slot is claimed
            return SlotBatch(ring.token, slot, ticket, nbytes, padded.shape, padded.num_real[0])
        # tensors share this batch's new shared block (never reused for another batch)
        tensors = _as_tensors(padded, self._keys, holder[0])
        return self._assemble(tensors, padded.shape, padded.num_real[0], padded.node_counts.tolist)

    def _kernel(
        self,
        index: ArrayLike,
        shape: tuple[int, int, int],
        allocate: Callable[[int], np.ndarray] | None = None,
    ) -> PaddedArrays:
        """`GraphStore.read_batch` with this batcher's options (``allocate``: where the batch
        buffer goes; default a new NumPy buffer)."""
        options = {} if allocate is None else {"allocate": allocate}
        return self.store.read_batch(
            index,
            shape,
            layout="torch",
            cutoff=self.cutoff,
            position_key=self.position_key,
            dtypes=self._dtypes,
            index_dtype=np.int64,
            pad=self._pads,
            **options,
        )

    def _read(self, index: ArrayLike, shape: tuple[int, int, int]) -> Any:
        """The batch of graphs ``index`` read in this process, into a buffer of its own."""
        padded = self._kernel(index, shape)
        tensors = _as_tensors(padded, self._keys, None)
        return self._assemble(tensors, padded.shape, padded.num_real[0], padded.node_counts.tolist)

    def _packed(
        self, index: ArrayLike, shape: tuple[int, int, int], ring: SlotRing | None, worker: int
    ) -> Any:
        """In a worker, a view's batch dict packed into the worker's next slot (a `SlotBatch`
        with its layout comes back), or into one new shared block when no slot takes it (the
        dict of views of that block comes back)."""
        out = self._read(index, shape)
        layout, nbytes = pack_layout(out)
        got = None if ring is None else ring.claim(worker, nbytes)
        if got is None:
            shared, holder = _shared_allocator()
            shared(max(nbytes, 1))
            pack_dict(out, layout, holder[0])
            return unpack_dict(holder[0], layout)
        assert ring is not None  # only a ring's slot is claimed
        slot, ticket, buf = got
        pack_dict(out, layout, torch.from_numpy(buf))
        real = int(np.asarray(index).shape[0])
        dims = (int(shape[0]), int(shape[1]), int(shape[2]))
        return SlotBatch(ring.token, slot, ticket, nbytes, dims, real, layout)

    def packed_bytes(self, shape: tuple[int, int, int]) -> int:
        """Bytes of a view's batch dict of ``shape`` packed (`pack_layout`), from one batch of
        padding only made here (cached per shape)."""
        hit = self._packed_cache.get(shape)
        if hit is None:
            hit = self._packed_cache[shape] = pack_layout(
                self._read(np.zeros(0, dtype=np.int64), shape)
            )[1]
        return hit

    # ------------------------------------------------- batches from a buffer (main process)
    def _views(self, shape: tuple[int, int, int]) -> tuple[int, list, tuple[int, int]]:
        """For batches of ``shape``: buffer bytes, ``[(key, start, end, shape, NumPy dtype,
        torch dtype)]`` of every output tensor, and the byte range of ``node_counts`` -- the
        layout `pad_batch` uses (`graphbatch._padbatch.buffer_layout` of the store's fields),
        cached per shape."""
        hit = self._view_cache.get(shape)
        if hit is None:
            lay = buffer_layout(self._field_source(), shape, self._dtypes, np.int64)
            attr = {**{key: key for key in self._keys}, **_STRUCT_KEYS}
            views = []
            for key, name in attr.items():
                at, end, shp, dt = lay.entries[name]
                views.append((key, at, end, shp, dt, _torch_dtype(dt)))
            counts = lay.entries["node_counts"][:2]
            if len(self._view_cache) >= 256:
                self._view_cache.clear()
            hit = self._view_cache[shape] = (lay.nbytes, views, counts)
        return hit

    def _field_source(self) -> PackedGraphs:
        """The store's fields as zero-row arrays (their trailing shapes and dtypes, in the
        store's order): enough for `buffer_layout`, without reading the file here."""
        if self._fields_only is None:
            per_level: dict[str, dict[str, np.ndarray]] = {"node": {}, "edge": {}, "graph": {}}
            for name, spec in self.store.fields.items():
                per_level[spec["level"]][name] = np.empty(
                    (0, *spec["shape"]), dtype=np.dtype(spec["dtype"])
                )
            empty = np.zeros(0, dtype=np.int64)
            self._fields_only = PackedGraphs(
                empty,
                empty,
                np.zeros(1, np.int64),
                np.zeros(1, np.int64),
                np.zeros((2, 0), np.int64),
                **per_level,
            )
        return self._fields_only

    def buffer_bytes(self, shape: Sequence[int]) -> int:
        """Bytes of the buffer of one padded batch of ``shape`` (``(n_node, n_edge,
        n_graph)``)."""
        n_node, n_edge, n_graph = (int(s) for s in shape)
        return self._views((n_node, n_edge, n_graph))[0]

    def from_buffer(self, base: np.ndarray | torch.Tensor, msg: SlotBatch) -> Any:
        """The batch of a `SlotBatch` from its copied-out buffer ``base`` (1-D ``uint8``, NumPy
        or -- pinned -- torch): the same ``Batch`` (or dict) the worker would have built, every
        tensor a view of ``base``."""
        if msg.layout is not None:
            if base.shape[0] != msg.nbytes:
                raise RuntimeError(f"{msg} has {msg.nbytes} bytes, its buffer {base.shape[0]}")
            if isinstance(base, np.ndarray):
                base = torch.from_numpy(base)
            return unpack_dict(base, msg.layout)
        nbytes, views, (at, end) = self._views(msg.shape)
        if nbytes != msg.nbytes or base.shape[0] != nbytes:
            raise RuntimeError(
                f"{msg} has {msg.nbytes} bytes, but a batch of shape "
                f"{msg.shape} of this store has {nbytes}"
            )
        counts: np.ndarray | torch.Tensor
        if isinstance(base, np.ndarray):
            # NumPy views wrapped by from_numpy: ~3x faster than slicing a tensor
            tensors = {
                key: torch.from_numpy(np.ndarray(shp, dt, base, a))
                for key, a, e, shp, dt, tdt in views
            }
            counts = base[at:end].view(np.int64)
        else:
            # views of the tensor itself keep its (pinned) storage
            tensors = {key: base[a:e].view(tdt).view(shp) for key, a, e, shp, dt, tdt in views}
            counts = base[at:end].view(torch.int64)
        return self._assemble(tensors, msg.shape, msg.real_graphs, counts.tolist)

    def layout(self, msg: SlotBatch) -> tuple[Any, tuple, Any]:
        """Where the tensors of the batch of ``msg`` lie in its buffer: ``(key, entries,
        counts)`` with ``entries`` ``((name, start, end, shape, torch dtype), ...)`` (``key``
        identifies the layout, for caches; ``counts``: the byte range of the nodes per graph
        slot, or ``None``). The batch is then ``assemble(msg, tensors)``."""
        if msg.layout is not None:
            return msg.layout[0], packed_entries(msg.layout), None
        hit = self._entry_cache.get(msg.shape)
        if hit is None:
            nbytes, views, counts = self._views(msg.shape)
            entries = tuple((k, a, e, shp, tdt) for k, a, e, shp, dt, tdt in views)
            if len(self._entry_cache) >= 256:
                self._entry_cache.clear()
            hit = self._entry_cache[msg.shape] = (nbytes, entries, counts)
        if hit[0] != msg.nbytes:
            raise RuntimeError(
                f"{msg} has {msg.nbytes} bytes, but a batch of shape "
                f"{msg.shape} of this store has {hit[0]}"
            )
        return msg.shape, hit[1], hit[2]

    @property
    def anchored(self) -> bool:
        """Whether a PyG batch knows its nodes from a node field (else it holds the nodes per
        graph slot, read from the batch's buffer)."""
        return self.as_dict or self._anchored

    def assemble(
        self, msg: SlotBatch, tensors: dict[str, Any], node_counts: Callable[[], list[int]]
    ) -> Any:
        """The batch (``Batch`` or dict) of ``msg`` from ``tensors`` laid out by `layout`
        (views of any buffer, on any device): no copy, no transform (a view's batch arrives
        transformed and packed)."""
        if msg.layout is not None:
            return with_values(tensors, msg.layout)
        return self._assemble(tensors, msg.shape, msg.real_graphs, node_counts)

    def _assemble(
        self,
        tensors: dict[str, Any],
        shape: tuple[int, int, int],
        real_graphs: int,
        node_counts: Callable[[], list[int]],
    ) -> Any:
        """The ``Batch`` (or dict) of one padded batch from its tensors (`_as_tensors`);
        ``node_counts()`` gives the nodes per graph slot (read only when needed)."""
        n_graph = shape[2]
        edge_ptr = tensors.pop("edge_ptr")
        edge_inc = tensors.pop("edge_inc")
        graph_ptr = tensors.pop("graph_ptr")
        if self.as_dict:
            tensors["edge_ptr"] = edge_ptr
            tensors["num_graphs"] = n_graph
            if self.view is not None:
                return self.view.transform(tensors, shape, real_graphs)
            return tensors
        Batch, Data, StoreData = _batch_classes()
        # like `collate`, whose Batch inherits from the type of its first graph (plain Data
        # when an all-padding batch of a distributed plan has no graph)
        out = _new_batch(Batch, StoreData if real_graphs else Data)
        _set_all(out, tensors)
        if not self._anchored:
            out.num_nodes = shape[0]
            out._store._num_nodes = node_counts()
        ptr = {"node": tensors["ptr"], "edge": edge_ptr, "graph": graph_ptr}
        out._slice_dict = {key: ptr[level] for key, level in self._levels.items()}
        inc = edge_inc if real_graphs else None
        out._inc_dict = {key: (inc if key == EDGE_INDEX else None) for key in self._keys}
        out._num_graphs = n_graph
        return out


_CLASSES: list = []


def _batch_classes() -> tuple[type, type, type]:
    """PyG's ``Batch`` and ``Data`` and `graphbatch.torch.StoreData`, imported once
    (on the first PyG batch: the ``as_dict`` path needs no PyG)."""
    if not _CLASSES:
        from ._store_data import StoreData

        _CLASSES.extend((*_pyg(), StoreData))
    return _CLASSES[0], _CLASSES[1], _CLASSES[2]


def _set_all(batch: Any, tensors: dict[str, torch.Tensor]) -> None:
    """``batch[key] = value`` for every entry, on a ``Batch`` just made: straight into its
    storage's mapping (what PyG's ``__setitem__`` does for a non-``None`` value after dropping
    cached keys, of which a new ``Batch`` has none), else item by item."""
    mapping = getattr(getattr(batch, "_store", None), "_mapping", None)
    if isinstance(mapping, dict) and not getattr(batch._store, "_cached_attr", None):
        mapping.update(tensors)
    else:  # pragma: no cover - other PyG storage layouts
        for key, value in tensors.items():
            batch[key] = value


def store_batch(
    store: GraphStore,
    index: ArrayLike,
    shape: tuple[int, int, int],
    *,
    schema: Schema | None = None,
    cutoff: float | None = None,
    position_key: str = "pos",
    as_dict: bool = False,
) -> Any:
    """Graphs ``index`` of ``store`` as one padded PyG ``Batch`` of ``shape`` (or the
    `graphbatch.torch.collate_dict` dict with ``as_dict=True``), equal to
    ``collate([GraphStoreDataset(store)[i] for i in index], shape, graph_index=index, ...)``.
    For many batches, build a `StoreBatcher` once."""
    return StoreBatcher(store, schema, cutoff=cutoff, position_key=position_key, as_dict=as_dict)(
        index, shape
    )
