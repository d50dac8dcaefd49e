"""`loader`: a DataLoader over a plan, yielding padded batches with the plan's shapes."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

import numpy as np
import torch
from numpy.typing import ArrayLike
from torch.utils.data import DataLoader, Dataset

from .._budget import Budget
from .._errors import InputError, InputTypeError, StoreFormatError
from .._plan import BatchPlan
from .._schedule import select_graphs
from .._sizes import GraphSizes
from .._validate import as_nonnegative_int
from ._collation import COLLATION_ARGS, Collation, PlanCollater, resolve_collation
from ._preset import Preset
from ._sampler import PlanBatchSampler
from ._schema import Schema, _num_nodes
from ._store_collate import StoreCollater

__all__ = ["DATALOADER_ARGS", "PlanLoader", "loader", "read_sizes"]


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


def _explained(it: Iterator[Any], stores: list[Any]) -> Iterator[Any]:
    """The batches of ``it``; a DataLoader worker's death (torch's ``RuntimeError``) is
    re-raised as the `StoreFormatError` of a store in ``stores`` truncated while open, when one
    is: a worker that read a mapped page in the instant between the store's size check and
    the read was killed by SIGBUS, which no check inside the worker can turn into an error."""
    try:
        yield from it
    except RuntimeError as exc:
        if "DataLoader worker" in str(exc):
            for store in stores:
                try:
                    store.check_intact()
                except StoreFormatError as damage:
                    raise damage from exc
        raise


def _stores_read_by(loader: DataLoader) -> list[Any]:
    """The graph stores whose files ``loader``'s workers read (its collater's, its dataset's)."""
    found = [
        getattr(getattr(loader.collate_fn, "batcher", None), "store", None),
        getattr(getattr(loader.dataset, "dataset", None), "store", None),
    ]
    return [s for s in found if callable(getattr(s, "check_intact", None))]


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
    in `graphbatch._schedule`). ``len()`` is the number of batches of the current epoch. The plan
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
        pass before serving a batch (`graphbatch._schedule`)."""
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
        stores = _stores_read_by(self)
        if stores and self.num_workers > 0:
            it = _explained(it, stores)
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


#: ``DataLoader`` arguments `loader` refuses as keywords: they belong in ``dataloader_kwargs``.
DATALOADER_ARGS = (
    "num_workers",
    "pin_memory",
    "timeout",
    "worker_init_fn",
    "multiprocessing_context",
    "generator",
    "prefetch_factor",
    "persistent_workers",
    "pin_memory_device",
    "in_order",
)
#: ``DataLoader`` arguments the plan decides (refused everywhere, with the reason).
_PLAN_DECIDES = {
    "dataset": "the loader's dataset is its first argument",
    "batch_size": "the plan sizes the batches (batch_size= of loader itself)",
    "shuffle": "the plan orders the graphs (shuffle= of loader itself)",
    "sampler": "the plan orders the graphs",
    "batch_sampler": "the plan is the batch sampler",
    "collate_fn": "batches are collated to the plan's shapes (use collation= or preset=)",
    "drop_last": "every graph is used once per epoch",
}


def _check_plan_options(options: Mapping[str, Any]) -> None:
    """Refuse, in one line each, keywords that are not plan options: DataLoader arguments
    (they go in ``dataloader_kwargs``), `Collation` fields and what the plan decides."""
    for k in options:
        if k in _PLAN_DECIDES:
            raise InputTypeError(f"loader() takes no {k}=: {_PLAN_DECIDES[k]}")
        if k in DATALOADER_ARGS:
            raise InputTypeError(
                f"loader() takes DataLoader arguments in dataloader_kwargs: write "
                f"dataloader_kwargs={{{k!r}: ...}} instead of {k}="
            )
        if k in COLLATION_ARGS:
            raise InputTypeError(
                f"loader() takes {k} in collation=: write "
                f"collation=graphbatch.torch.Collation({k}=...) instead of {k}="
            )


def _dataloader_kwargs(given: Mapping[str, Any] | None, seed: int) -> dict[str, Any]:
    """The ``DataLoader`` arguments: ``given``, checked, with ``generator`` defaulting to one
    seeded with ``seed`` (the workers' base seed then never comes from torch's global RNG, so
    iterating leaves model init and dropout untouched)."""
    if given is not None and not isinstance(given, Mapping):
        raise InputTypeError(f"dataloader_kwargs must be a dict, got {type(given).__name__}")
    kw = dict(given or {})
    for k in kw:
        if k in _PLAN_DECIDES:
            raise InputTypeError(f"dataloader_kwargs cannot hold {k!r}: {_PLAN_DECIDES[k]}")
    if kw.get("generator") is None:
        kw["generator"] = torch.Generator().manual_seed(int(seed))
    if "num_workers" in kw:
        kw["num_workers"] = as_nonnegative_int(kw["num_workers"], "num_workers")
    if kw.get("timeout") and not kw.get("num_workers"):
        raise InputError(
            f"timeout={kw['timeout']} needs num_workers > 0 (the DataLoader waits for workers only)"
        )
    return kw


def loader(
    dataset: Any,
    *,
    strategy: str,
    batch_size: int | None = None,
    budget: Budget | tuple[int, int, int] | None = None,
    seed: int = 0,
    shuffle: bool | str = True,
    sizes: GraphSizes | None = None,
    indices: ArrayLike | None = None,
    preset: Preset | None = None,
    collation: Collation | None = None,
    num_replicas: int | None = None,
    rank: int | None = None,
    verify_plan: bool = True,
    dataloader_kwargs: Mapping[str, Any] | None = None,
    **plan_options: Any,
) -> PlanLoader:
    """A `PlanLoader` over ``dataset`` (map-style: ``len`` and ``dataset[i]`` giving a PyG
    ``Data`` or a dict of tensors) batched by ``graphbatch.plan(sizes, strategy, ...)``; a
    `graphbatch.datasets.GraphStore` takes the store batch path (`graphbatch.torch.store_batch`:
    each batch read from the store's arrays straight into its padded layout, equal to collating
    ``GraphStoreDataset(store)`` graphs).

    The plan: ``strategy``, ``batch_size``, ``budget``, ``seed`` and ``plan_options``
    (``on_oversize``, strategy options) as for ``graphbatch.plan``; epoch ``e`` is planned from
    ``(seed, e)``. ``shuffle``: ``True`` (a new order of the whole dataset every epoch),
    ``False``, or ``"chunks"`` (chunk-aware shuffling for stores bigger than RAM, options
    ``chunk_graphs``/``window_chunks``: `graphbatch.datasets.chunk_shuffled_plan`, which says
    what it does to randomness).

    The graphs: ``indices`` (a split: train, validation, ...) plans and loads only these graphs
    of ``dataset`` (distinct ints); batches' ``graph_index`` are still dataset indices.
    ``sizes``: the whole dataset's size table, default `read_sizes` (once, of the selected
    graphs only).

    The batches: ``preset`` (a `Preset`, e.g. ``graphbatch.atomistic.mace(r_max=5.0)``) and
    ``collation`` (a `Collation`: schema, cutoff, position_key, as_dict, spare_padding_node;
    fields given win over the preset's) decide how each batch is collated, in the DataLoader's
    workers. With positions, a spare padding node is on by default, so no padding edge is a
    self-loop; turned off, a warning names the batches of epoch 0 with one padding node.

    Ranks: ``num_replicas``/``rank`` default to ``torch.distributed``'s, read when each pass
    starts. ``verify_plan`` (default True): under an initialised ``torch.distributed`` of more
    than one rank (and ``num_replicas`` its world size) every pass starts with the plan
    consistency check (one all-gather of 192 bytes per rank; `PlanMismatchError` on every
    rank, naming the ranks that disagree; docs/distributed.md).

    ``dataloader_kwargs``: arguments of ``torch.utils.data.DataLoader`` (``num_workers``,
    ``pin_memory``, ``persistent_workers``, ``prefetch_factor``, ...); ``generator`` defaults
    to one seeded with ``seed``, so iterating leaves torch's global RNG untouched. Passed as
    keywords of ``loader`` they raise a one-line ``TypeError`` naming ``dataloader_kwargs``, and
    so do `Collation` fields (name ``collation``); ``sampler``, ``batch_sampler``,
    ``collate_fn`` and ``drop_last`` are the plan's business anywhere.
    """
    if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
        raise InputTypeError(
            f"dataset must be map-style (len and [i]), got {type(dataset).__name__}"
        )
    _check_plan_options(plan_options)
    dl_kwargs = _dataloader_kwargs(dataloader_kwargs, seed)
    sizes, chosen = select_graphs(len(dataset), sizes, indices, lambda i: read_sizes(dataset, i))
    batching = resolve_collation(dataset, collation, preset, chosen)
    sampler = PlanBatchSampler(
        sizes,
        strategy,
        batch_size=batch_size,
        budget=budget,
        seed=seed,
        shuffle=shuffle,
        num_replicas=num_replicas,
        rank=rank,
        extra_padding_nodes=int(batching.spare_padding_node),
        indices=chosen,
        verify_plan=verify_plan,
        **plan_options,
    )
    batching.warn_single_padding_node(lambda: sampler.plan_for_epoch(0))
    collater, data = batching.collater(dataset)
    return PlanLoader(data, batch_sampler=sampler, collate_fn=collater, **dl_kwargs)
