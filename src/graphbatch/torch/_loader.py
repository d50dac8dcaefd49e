"""`loader`: a DataLoader over a plan, yielding padded batches with the plan's shapes."""

from __future__ import annotations

import warnings
from typing import Any, Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from .._budget import Budget
from .._padlayout import check_cutoff, short_padding_batches
from .._sizes import GraphSizes
from .._validate import as_nonnegative_int
from ._collate import collate_dict
from ._pyg import collate
from ._sampler import PlanBatchSampler, PlannedBatch
from ._schema import Schema, _num_nodes, infer_schema
from ._store_batch import StoreCollater, StoreIndices, is_graph_store

__all__ = ["loader", "PlanLoader", "read_sizes"]

_SCHEMA_SAMPLE = 32


def read_sizes(dataset) -> GraphSizes:
    """Node and edge counts of every graph, read once and without collating anything.

    Uses ``dataset.graph_sizes()`` when the dataset has it (an on-disk store's metadata), else
    each graph's ``num_nodes`` and ``num_edges`` (PyG ``Data``) or, for dicts, ``num_nodes`` (else
    the dim-0 size of the first tensor other than ``edge_index``) and ``edge_index.shape[1]``.
    """
    get_sizes = getattr(dataset, "graph_sizes", None)
    if callable(get_sizes):
        sizes = get_sizes()
        if not isinstance(sizes, GraphSizes):
            raise TypeError(
                f"{type(dataset).__name__}.graph_sizes() must return a GraphSizes, got "
                f"{type(sizes).__name__}"
            )
        if len(sizes) != len(dataset):
            raise ValueError(
                f"{type(dataset).__name__}.graph_sizes() has {len(sizes)} entries for "
                f"{len(dataset)} graphs"
            )
        return sizes
    n = len(dataset)
    nodes = np.empty(n, dtype=np.int64)
    edges = np.empty(n, dtype=np.int64)
    for i in range(n):
        g = dataset[i]
        if isinstance(g, dict):
            nodes[i] = _num_nodes(g, g["edge_index"])
            edges[i] = int(g["edge_index"].shape[1])
        else:
            nodes[i] = int(g.num_nodes)
            edges[i] = int(g.num_edges)
    return GraphSizes(nodes, edges)


class _PlannedDataset(Dataset):
    """Wraps a map-style dataset so a `PlannedBatch` comes back with its graphs."""

    def __init__(self, dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i):
        return self.dataset[i]

    def __getitems__(self, batch):
        inner = getattr(self.dataset, "__getitems__", None)
        graphs = inner(list(batch)) if callable(inner) else [self.dataset[i] for i in batch]
        return batch, graphs


class PlanCollater:
    """``collate_fn`` for a DataLoader over `PlannedBatch` index lists (picklable for workers)."""

    def __init__(self, schema: Schema, *, cutoff=None, position_key="pos", as_dict=False):
        self.schema = schema
        self.cutoff = check_cutoff(cutoff)
        self.position_key = position_key
        self.as_dict = bool(as_dict)

    def __call__(self, item):
        batch, graphs = item
        if not isinstance(batch, PlannedBatch):
            raise TypeError("PlanCollater needs batches from a PlanBatchSampler")
        fn = collate_dict if self.as_dict else collate
        return fn(
            graphs,
            batch.shape,
            graph_index=list(batch),
            cutoff=self.cutoff,
            schema=self.schema,
            position_key=self.position_key,
        )


class PlanLoader:
    """Iterable of padded batches, one per batch of this rank's share of the epoch's plan.

    Each pass over it is one epoch; the epoch advances by one after a complete pass (or set it
    with ``set_epoch``). The plan is made in the main process; every batch travels to the
    DataLoader workers with its padded shape, so re-planning reaches persistent workers too.
    ``len()`` is the exact number of batches of the next pass.
    """

    def __init__(self, dataset, sampler: PlanBatchSampler, collater: PlanCollater,
                 dataloader_kwargs: dict[str, Any]) -> None:
        self.dataset = dataset
        self.sampler = sampler
        self.collater = collater
        self.epoch = 0
        self._consumed = 0
        self.dataloader = DataLoader(
            _PlannedDataset(dataset),
            batch_sampler=sampler,
            collate_fn=collater,
            **dataloader_kwargs,
        )

    @property
    def schema(self) -> Schema:
        return self.collater.schema

    @property
    def plan(self):
        """The whole plan (all ranks) of the current epoch."""
        return self.sampler.plan_for_epoch(self.epoch)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = as_nonnegative_int(epoch, "epoch")
        self._consumed = 0
        self.sampler.set_epoch(self.epoch)

    def __len__(self) -> int:
        if self.sampler.epoch != self.epoch:
            self.sampler.set_epoch(self.epoch)
        return len(self.sampler)

    def __iter__(self) -> Iterator[Any]:
        if self.sampler.epoch != self.epoch:
            self.sampler.set_epoch(self.epoch)
        self._consumed = self.sampler._resume
        for batch in self.dataloader:
            self._consumed += 1
            yield batch
        self.epoch += 1
        self._consumed = 0
        self.sampler.set_epoch(self.epoch)

    def state_dict(self) -> dict[str, Any]:
        """Epoch and number of its batches consumed: resuming gives exactly the next batch."""
        state = self.sampler.state_dict()
        state.update(epoch=self.epoch, offset=self._consumed)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state)
        self.epoch = self.sampler.epoch
        self._consumed = self.sampler._resume


def loader(
    dataset,
    *,
    strategy: str,
    sizes: GraphSizes | None = None,
    batch_size: int | None = None,
    budget: Budget | tuple[int, int, int] | None = None,
    seed: int = 0,
    num_workers: int = 0,
    prefetch_factor: int | None = None,
    pin_memory: bool = False,
    persistent_workers: bool = False,
    cutoff: float | None = None,
    shuffle: bool = True,
    on_oversize: str = "error",
    num_replicas: int | None = None,
    rank: int | None = None,
    schema: Schema | None = None,
    position_key: str = "pos",
    as_dict: bool = False,
    multiprocessing_context=None,
    **options: Any,
) -> PlanLoader:
    """A `PlanLoader` over ``dataset`` (map-style: ``len`` and ``dataset[i]`` giving a PyG
    ``Data`` or a dict of tensors) batched by ``graphbatch.plan(sizes, strategy, ...)``.
    A `graphbatch.datasets.GraphStore` takes the store batch path: each batch is read from the
    store's arrays straight into its padded layout (`graphbatch.torch.store_batch`), with the
    same result as collating ``store.to_torch()`` graphs.

    ``sizes`` default: `read_sizes(dataset)` (once). The schema is inferred once from up to 32
    graphs spread over the dataset unless given. Batches are PyG ``Batch`` objects
    (`graphbatch.torch.collate`), or dicts with ``as_dict=True``, padded to the plan's shapes and
    collated in the DataLoader's workers. ``num_replicas``/``rank`` default to
    ``torch.distributed``'s. ``cutoff``: see `collate`; a warning names how many batches of
    epoch 0 cannot honour it. ``multiprocessing_context`` goes to the DataLoader (e.g.
    ``"spawn"`` when the process already runs JAX threads). Strategy ``options`` pass through to
    ``graphbatch.plan``.
    """
    if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
        raise TypeError(f"dataset must be map-style (len and [i]), got {type(dataset).__name__}")
    if sizes is None:
        sizes = read_sizes(dataset)
    elif len(sizes) != len(dataset):
        raise ValueError(f"sizes has {len(sizes)} entries for a dataset of {len(dataset)} graphs")
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
        **options,
    )
    store = dataset if is_graph_store(dataset) else None  # the store batch path
    if schema is None and store is None:
        n = len(dataset)
        pick = np.unique(np.linspace(0, n - 1, num=min(n, _SCHEMA_SAMPLE)).astype(np.int64))
        schema = infer_schema([dataset[int(i)] for i in pick])
    cutoff = check_cutoff(cutoff)
    if cutoff is not None:
        short = short_padding_batches(sampler.plan_for_epoch(0))
        if short.shape[0]:
            warnings.warn(
                f"cutoff={cutoff}: {short.shape[0]} of {len(sampler.plan)} batches of epoch 0 have "
                "a single padding node, so their padding edges are self-loops (length 0)",
                stacklevel=2,
            )
    if store is not None:
        collater = StoreCollater(store, schema, cutoff=cutoff, position_key=position_key,
                                 as_dict=as_dict)
        dataset = StoreIndices(store)
    else:
        collater = PlanCollater(schema, cutoff=cutoff, position_key=position_key,
                                as_dict=as_dict)
    kwargs: dict[str, Any] = dict(
        # the DataLoader draws its workers' base seed from this generator, not from torch's
        # global RNG: iterating the loader leaves the global RNG (model init, dropout) untouched
        generator=torch.Generator().manual_seed(int(seed)),
        num_workers=as_nonnegative_int(num_workers, "num_workers"),
        pin_memory=bool(pin_memory),
        persistent_workers=bool(persistent_workers),
    )
    if prefetch_factor is not None:
        kwargs["prefetch_factor"] = prefetch_factor
    if multiprocessing_context is not None:
        kwargs["multiprocessing_context"] = multiprocessing_context
    return PlanLoader(dataset, sampler, collater, kwargs)
