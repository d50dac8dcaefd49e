"""`loader`: a DataLoader over a plan, yielding padded batches with the plan's shapes."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Iterator
from typing import Any, cast

import numpy as np
import torch
from numpy.typing import ArrayLike
from torch.utils.data import DataLoader, Dataset

from .._budget import Budget
from .._errors import InputError, InputTypeError
from .._padlayout import check_cutoff, short_padding_batches
from .._plan import BatchPlan
from .._sizes import GraphSizes
from .._validate import as_index_array, as_nonnegative_int
from ._collate import collate_dict
from ._preset import Preset
from ._pyg import collate
from ._sampler import PlanBatchSampler, PlannedBatch
from ._schema import Schema, _num_nodes, infer_schema
from ._store_batch import StoreCollater, StoreIndices, is_graph_store, store_schema

__all__ = ["loader", "PlanLoader", "read_sizes", "DATALOADER_ARGS"]

_SCHEMA_SAMPLE = 32


def read_sizes(dataset: Any, indices: ArrayLike | None = None) -> GraphSizes:
    """Node and edge counts of every graph (of the graphs ``indices``, in that order, when
    given), read once and without collating anything.

    Uses ``dataset.graph_sizes()`` when the dataset has it (an on-disk store's metadata), else
    each graph's ``num_nodes`` and ``edge_index.shape[1]`` (PyG ``Data``, old-style ``Data``,
    fairchem's ``AtomicData``) or, for dicts, ``num_nodes`` (else the dim-0 size of the first
    tensor other than ``edge_index``) and ``edge_index.shape[1]``.
    """
    get_sizes = getattr(dataset, "graph_sizes", None)
    if callable(get_sizes):
        sizes = get_sizes()
        if not isinstance(sizes, GraphSizes):
            raise InputTypeError(
                f"{type(dataset).__name__}.graph_sizes() must return a GraphSizes, got "
                f"{type(sizes).__name__}"
            )
        if len(sizes) != len(dataset):
            raise InputError(
                f"{type(dataset).__name__}.graph_sizes() has {len(sizes)} entries for "
                f"{len(dataset)} graphs"
            )
        return sizes if indices is None else sizes.subset(indices)
    items = range(len(dataset)) if indices is None else np.asarray(indices).tolist()
    nodes = np.empty(len(items), dtype=np.int64)
    edges = np.empty(len(items), dtype=np.int64)
    for i, item in enumerate(items):
        g = dataset[item]
        if isinstance(g, dict):
            nodes[i] = _num_nodes(g, g["edge_index"])
            edges[i] = int(g["edge_index"].shape[1])
        else:
            nodes[i] = int(g.num_nodes)
            edges[i] = int(g["edge_index"].shape[1])
    return GraphSizes(nodes, edges)


class _PlannedDataset(Dataset):
    """Wraps a map-style dataset so a `PlannedBatch` comes back with its graphs."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    @classmethod
    def wrap(cls, dataset: Any) -> _PlannedDataset:
        return dataset if isinstance(dataset, cls) else cls(dataset)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> Any:
        return self.dataset[i]

    def __getitems__(self, batch: list[int]) -> tuple[list[int], list[Any]]:
        inner = getattr(self.dataset, "__getitems__", None)
        graphs = inner(list(batch)) if callable(inner) else [self.dataset[i] for i in batch]
        return batch, graphs


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
            schema=self.schema,
            position_key=self.position_key,
        )


def _plan_sampler_of(batch_sampler: Any) -> PlanBatchSampler:
    """The `PlanBatchSampler` in ``batch_sampler`` (itself, or wrapped by a framework, e.g.
    Lightning's prediction wrapper, which keeps it as ``_batch_sampler``)."""
    seen = 0
    while not isinstance(batch_sampler, PlanBatchSampler) and seen < 4:
        batch_sampler = getattr(
            batch_sampler, "_batch_sampler", getattr(batch_sampler, "batch_sampler", None)
        )
        seen += 1
    if not isinstance(batch_sampler, PlanBatchSampler):
        raise InputTypeError(
            "PlanLoader needs batch_sampler= a PlanBatchSampler (build it with "
            "graphbatch.torch.loader)"
        )
    return batch_sampler


def _received(it: Iterator[Any], receive: Callable[[Any], Any]) -> Iterator[Any]:
    """``receive(batch)`` of each batch of ``it``, each before the next is asked for."""
    for batch in it:
        yield receive(batch)


class PlanLoader(DataLoader):
    """A ``torch.utils.data.DataLoader`` of padded batches, one per batch of this rank's share of
    the epoch's plan. Build it with `graphbatch.torch.loader`.

    It is a real ``DataLoader`` (its ``batch_sampler`` is the `PlanBatchSampler`, its
    ``collate_fn`` the `PlanCollater`), so frameworks treat it as one; re-instantiating it with
    DataLoader arguments (as Lightning does) keeps the plan. ``sampler`` is the rank's
    `PlanGraphSampler`, a ``DistributedSampler``, so Lightning does not inject another.

    Epochs: ``set_epoch`` here, on ``sampler`` or on ``batch_sampler`` takes effect at the next
    iteration, or at the one just created when none of its batches was drawn yet (``it =
    iter(loader); loader.sampler.set_epoch(1); next(it)`` gives epoch 1's first batch, with or
    without workers); each pass, complete or stopped early, is followed by the next epoch (rules
    in `graphbatch.torch._epoch`). ``len()`` is the number of batches of the current epoch. The plan
    is made in the main process; every batch travels to the workers with its padded shape.
    ``state_dict`` counts batches *consumed*, so resuming with workers is exact; Lightning saves
    and restores it in checkpoints. Under ``torch.distributed`` every pass starts with the plan
    consistency check (``verify_plan``, see `PlanBatchSampler`).
    """

    def __init__(
        self,
        dataset: Any,
        batch_sampler: Any = None,
        collate_fn: PlanCollater | StoreCollater | None = None,
        **kwargs: Any,
    ) -> None:
        plan_sampler = _plan_sampler_of(batch_sampler)
        if not callable(collate_fn):
            raise InputTypeError("PlanLoader needs collate_fn= a PlanCollater")
        super().__init__(
            _PlannedDataset.wrap(dataset),
            batch_sampler=batch_sampler,
            # torch types collate_fn as taking a list; ours take the
            # (PlannedBatch, graphs) pair _PlannedDataset.__getitems__ returns
            collate_fn=collate_fn,  # type: ignore[arg-type]
            **kwargs,
        )
        self.plan_sampler = plan_sampler
        plan_sampler.counted_by_loader = True
        # DataLoader sets `sampler` to a SequentialSampler it never uses once a batch_sampler is
        # given, and refuses to reassign it after __init__; the rank's graph sampler replaces it
        # so that `loader.sampler.set_epoch` (Lightning, the DistributedSampler idiom) works.
        object.__setattr__(self, "sampler", plan_sampler.sampler)

    @property
    def collater(self) -> PlanCollater | StoreCollater:
        return cast("PlanCollater | StoreCollater", self.collate_fn)

    @property
    def schema(self) -> Schema:
        return self.collater.schema

    @property
    def plan(self) -> BatchPlan:
        """The whole plan (all ranks) of the current epoch."""
        return self.plan_sampler.plan_for_epoch()

    @property
    def epoch(self) -> int:
        """The epoch of the pass in progress, or of the next pass when none is."""
        return self.plan_sampler.epoch

    def set_epoch(self, epoch: int) -> None:
        """Run ``epoch`` from its first batch at the next iteration."""
        self.plan_sampler.set_epoch(epoch)

    # the batches pass through the consumed-batch counter (a generator), not a DataLoader
    # iterator object
    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        it, pass_id = self._begin_pass()
        return self._counted(it, pass_id)

    def superseded(self, pass_id: int) -> bool:
        """Whether pass ``pass_id`` was overtaken before its first batch was consumed by
        ``set_epoch`` to another epoch or ``load_state_dict``: its iterator must start a new
        pass before serving a batch (`graphbatch.torch._epoch`)."""
        return self.plan_sampler.cursor.superseded(pass_id)

    def _begin_pass(self) -> tuple[Iterator[Any], int]:
        """Start a pass: the DataLoader's iterator over it, which counts nothing, and the pass
        id. Whoever hands its batches to the training loop reports each to
        ``plan_sampler.cursor`` (`_counted`; `graphbatch.torch.prefetch` on the consumer's side of
        its thread), so ``state_dict`` counts batches received, not batches made. On the store
        batch path the collater hands its workers a slot ring (`StoreCollater.start_pass`), and
        the iterator receives each batch from its slot before the next one is asked for (the
        ring's invariant: `graphbatch.torch._slots`)."""
        # super().__iter__() starts the pass: the batch sampler's iter() runs
        start_pass = getattr(self.collate_fn, "start_pass", None)
        if callable(start_pass):
            it, receive = start_pass(self, super().__iter__)
            if receive is not None:
                it = _received(it, receive)
        else:
            it = super().__iter__()
        sampler = self.plan_sampler
        this = sampler.latest_pass
        assert this is not None  # the DataLoader's iterator started one
        try:
            sampler.verify_pass(this)  # in the caller's thread, every rank at the same point
        except BaseException:
            close = getattr(it, "close", None)
            if close is not None:
                close()
            raise
        return it, this.id

    def _counted(self, it: Iterator[Any], pass_id: int) -> Iterator[Any]:
        cursor = self.plan_sampler.cursor
        if cursor.superseded(pass_id):  # set_epoch / load_state_dict since iter(): restart
            it, pass_id = self._begin_pass()
        for batch in it:
            cursor.consumed(pass_id)
            yield batch
        cursor.finished(pass_id)

    def state_dict(self) -> dict[str, Any]:
        """Epoch, number of its batches consumed and the plan request's fingerprint: resuming
        gives exactly the next batch (see `PlanBatchSampler.state_dict`)."""
        return self.plan_sampler.state_dict()

    def load_state_dict(
        self, state: dict[str, Any], *, allow_missing_fingerprint: bool = False
    ) -> None:
        """Continue from ``state`` (see `PlanBatchSampler.load_state_dict`: a state without a
        plan fingerprint needs ``allow_missing_fingerprint=True``)."""
        self.plan_sampler.load_state_dict(
            state, allow_missing_fingerprint=allow_missing_fingerprint
        )

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_iterator"] = None  # a live (multiprocess) iterator does not travel
        g = state.get("generator")
        if isinstance(g, torch.Generator):
            # torch.multiprocessing (ddp_spawn) cannot share a Generator's state tensor: send bytes
            state["generator"] = _GeneratorState(str(g.device), g.get_state().numpy().tobytes())
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        g = state.get("generator")
        if isinstance(g, _GeneratorState):
            state["generator"] = g.rebuild()
        self.__dict__.update(state)


class _GeneratorState:
    """A ``torch.Generator`` as plain bytes (pickles under every start method)."""

    def __init__(self, device: str, state: bytes) -> None:
        self.device = device
        self.state = state

    def rebuild(self) -> torch.Generator:
        g = torch.Generator(device=self.device)
        g.set_state(torch.frombuffer(bytearray(self.state), dtype=torch.uint8))
        return g


_DL_SIGNATURE = inspect.signature(DataLoader.__init__).parameters
#: DataLoader arguments `loader` passes through (everything but what the plan decides).
DATALOADER_ARGS = tuple(
    k
    for k in _DL_SIGNATURE
    if k
    not in (
        "self",
        "dataset",
        "batch_size",
        "shuffle",
        "sampler",
        "batch_sampler",
        "collate_fn",
        "drop_last",
    )
)
_PLAN_DECIDES = {
    "sampler": "the plan orders the graphs",
    "batch_sampler": "the plan is the batch sampler",
    "collate_fn": "batches are collated to the plan's shapes (use as_dict/schema)",
    "drop_last": "every graph is used once per epoch",
}


def _has_positions(schema: Schema, position_key: str) -> bool:
    spec = schema.get(position_key)
    return (
        spec is not None
        and spec.level == "node"
        and spec.kind == "tensor"
        and spec.dtype is not None
        and spec.dtype.is_floating_point
    )


def loader(
    dataset: Any,
    *,
    strategy: str,
    sizes: GraphSizes | None = None,
    batch_size: int | None = None,
    budget: Budget | tuple[int, int, int] | None = None,
    seed: int = 0,
    shuffle: bool | str = True,
    on_oversize: str = "error",
    num_replicas: int | None = None,
    rank: int | None = None,
    cutoff: float | None = None,
    spare_padding_node: bool | None = None,
    schema: Schema | None = None,
    position_key: str = "pos",
    as_dict: bool = False,
    preset: Preset | None = None,
    indices: Any = None,
    verify_plan: bool = True,
    **options: Any,
) -> PlanLoader:
    """A `PlanLoader` over ``dataset`` (map-style: ``len`` and ``dataset[i]`` giving a PyG
    ``Data`` or a dict of tensors) batched by ``graphbatch.plan(sizes, strategy, ...)``.
    A `graphbatch.datasets.GraphStore` takes the store batch path: each batch is read from the
    store's arrays straight into its padded layout (`graphbatch.torch.store_batch`), with the
    same result as collating ``store.to_torch()`` graphs.

    ``options`` holding a ``torch.utils.data.DataLoader`` argument (``num_workers``,
    ``pin_memory``, ``timeout``, ``worker_init_fn``, ``multiprocessing_context``, ``generator``,
    ``prefetch_factor``, ``persistent_workers``, ``pin_memory_device``, ``in_order``: see
    `DATALOADER_ARGS`) go to the DataLoader; the others are strategy options for
    ``graphbatch.plan``. ``sampler``, ``batch_sampler``, ``collate_fn`` and ``drop_last`` are
    the plan's business (``TypeError``). ``generator`` defaults to one seeded with ``seed``, so
    iterating leaves torch's global RNG untouched.

    ``shuffle``: ``True`` (every epoch a new order of the whole dataset), ``False``, or
    ``"chunks"``: chunk-aware shuffling for stores bigger than RAM
    (`graphbatch.datasets.chunk_shuffled_plan`; options ``chunk_graphs``, default 4,096
    consecutive graphs per chunk, and ``window_chunks``, default 8 chunks per window; the
    same in `graphbatch.jax.loader`): each epoch permutes the
    chunks and deals them into windows, and each batch holds graphs of one window only, so a
    batch reads at most ``window_chunks`` stretches of the file. Every graph still comes once
    per epoch (per rank set), deterministically per ``(seed, epoch)``; but a batch mixes only
    graphs that were within ``chunk_graphs`` of each other in the store, and graphs of
    different chunks meet in a batch only in epochs where their chunks share a window.

    ``indices`` (a split: train, validation, ...): plan and load only these graphs of
    ``dataset`` (distinct ints); batches' ``graph_index`` are still dataset indices, and a store
    keeps its batch path. ``sizes`` is then the whole dataset's table or, when absent, is read
    for the selected graphs only.

    ``sizes`` default: `read_sizes(dataset)` (once). The schema is inferred once from up to 32
    graphs spread over the dataset unless given. Batches are PyG ``Batch`` objects
    (`graphbatch.torch.collate`), or dicts with ``as_dict=True``, padded to the plan's shapes and
    collated in the DataLoader's workers. ``num_replicas``/``rank`` default to
    ``torch.distributed``'s, read when each pass starts.

    Geometry: when the graphs have node positions (float node field ``position_key``),
    ``spare_padding_node`` (default: True exactly then) adds one padding node to every padded
    shape, so every batch has at least two padding nodes and no padding edge is a self-loop;
    padding positions are then safe by default (see `collate`; ``cutoff`` sets their spacing).
    Without the spare node, a warning names how many batches of epoch 0 have one padding node.

    ``preset`` (a `Preset`, e.g. ``graphbatch.atomistic.mace(r_max=5.0)``) supplies the schema
    (inferred from the sample, then the preset's pads and count fields), ``cutoff``,
    ``position_key`` and ``as_dict``; arguments given with other than their default values win.

    ``verify_plan`` (default True): under an initialised ``torch.distributed`` of more than one
    rank (and ``num_replicas`` its world size), every pass starts with the plan consistency
    check, one all-gather of 192 bytes per rank: `PlanMismatchError` on every rank, naming the
    ranks that disagree, when their size tables, plan arguments, plans, epochs or resume
    positions differ (docs/distributed.md). ``False`` skips it.
    """
    if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
        raise InputTypeError(
            f"dataset must be map-style (len and [i]), got {type(dataset).__name__}"
        )
    dl_kwargs = {k: options.pop(k) for k in list(options) if k in DATALOADER_ARGS}
    for k in list(options):
        if k in _PLAN_DECIDES:
            raise InputTypeError(f"loader() takes no {k}=: {_PLAN_DECIDES[k]}")
    if indices is not None:
        indices = as_index_array(indices, "indices", limit=len(dataset))
    if sizes is not None and len(sizes) != len(dataset):
        raise InputError(f"sizes has {len(sizes)} entries for a dataset of {len(dataset)} graphs")
    if sizes is None:
        sizes = read_sizes(dataset, indices)
    elif indices is not None:
        sizes = sizes.subset(indices)
    if preset is not None:
        if not isinstance(preset, Preset):
            raise InputTypeError(f"preset must be a graphbatch Preset, got {type(preset).__name__}")
        cutoff = preset.cutoff if cutoff is None else cutoff
        position_key = preset.position_key if position_key == "pos" else position_key
        as_dict = as_dict or preset.as_dict
    store = dataset if is_graph_store(dataset) else None  # the store batch path
    view = None
    if preset is not None and store is not None:
        if preset.store_reader is None:
            raise InputTypeError(
                f"preset {preset.name!r} reads datasets of graph objects, not a "
                "GraphStore; wrap the store (e.g. graphbatch.atomistic.MACEGraphs"
                "(store.to_torch(), ...)) or use a preset with a store reader"
            )
        view = preset.store_reader.for_store(store)  # checks the store's fields first
        position_key = view.position_key or position_key
    if schema is None and store is not None:
        schema = store_schema(store)
    elif schema is None:
        items = np.arange(len(dataset)) if indices is None else indices
        n = items.shape[0]
        pick = np.unique(np.linspace(0, n - 1, num=min(n, _SCHEMA_SAMPLE)).astype(np.int64))
        sample = [dataset[int(i)] for i in items[pick]]
        schema = preset.schema_for(sample) if preset is not None else infer_schema(sample)
    if spare_padding_node is None:
        spare_padding_node = _has_positions(schema, position_key)
    sampler = PlanBatchSampler(
        sizes,
        strategy,
        batch_size=batch_size,
        budget=budget,
        seed=seed,
        shuffle=shuffle,
        on_oversize=on_oversize,
        num_replicas=num_replicas,
        rank=rank,
        extra_padding_nodes=1 if spare_padding_node else 0,
        indices=indices,
        verify_plan=verify_plan,
        **options,
    )
    cutoff = check_cutoff(cutoff)
    if not spare_padding_node and _has_positions(schema, position_key):
        short = short_padding_batches(sampler.plan_for_epoch(0))
        if short.shape[0]:
            warnings.warn(
                f"spare_padding_node=False: {short.shape[0]} of {len(sampler.plan)} batches of "
                "epoch 0 have a single padding node, so their padding edges are self-loops "
                "(length 0)",
                stacklevel=2,
            )
    if store is not None:
        collater: PlanCollater | StoreCollater = StoreCollater(
            store, schema, cutoff=cutoff, position_key=position_key, as_dict=as_dict, view=view
        )
        dataset = StoreIndices(store)
    else:
        collater = PlanCollater(schema, cutoff=cutoff, position_key=position_key, as_dict=as_dict)
    if dl_kwargs.get("generator") is None:
        # the DataLoader draws its workers' base seed from this generator, not from torch's
        # global RNG: iterating the loader leaves the global RNG (model init, dropout) untouched
        dl_kwargs["generator"] = torch.Generator().manual_seed(int(seed))
    if "num_workers" in dl_kwargs:
        dl_kwargs["num_workers"] = as_nonnegative_int(dl_kwargs["num_workers"], "num_workers")
    if dl_kwargs.get("timeout") and not dl_kwargs.get("num_workers"):
        raise InputError(
            f"timeout={dl_kwargs['timeout']} needs num_workers > 0 (the DataLoader "
            "waits for workers only)"
        )
    return PlanLoader(dataset, batch_sampler=sampler, collate_fn=collater, **dl_kwargs)
