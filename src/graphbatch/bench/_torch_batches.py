"""Where a torch bench run's batches come from: the plan loader over in-memory graphs, the graph
store (read in the training process by the store batch path, or by DataLoader workers), PyG's
``DataLoader`` for the baselines; then the device feed or the prefetch thread
(`run_batches`). Every source yields batches forever (epoch after epoch)."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

import numpy as np

from ._config import BenchConfig, RunSpec, bench_budget

__all__ = ["epochs", "padded_options", "prefetched", "run_batches", "store_loader"]


def padded_options(spec: RunSpec, cfg: BenchConfig, data) -> dict[str, Any]:
    """Loader options of a padded strategy: the shared budget where the strategy takes one."""
    from ..planners import get_strategy

    options = dict(cfg.strategy_options.get(spec.strategy, {}))
    if get_strategy(spec.strategy).uses_budget and "budget" not in options:
        options["budget"] = bench_budget(cfg, data.train_sizes, spec.batch_size, spec.strategy)
    return options


def prefetched(batches: Iterator[Any], depth: int, pin_memory: bool) -> Generator[Any, None, None]:
    """``batches`` made ``depth`` ahead by `graphbatch.torch.prefetch`. A generator, so the thread
    starts at the first step, after every run's model exists (no batch making overlaps another
    run's weight initialisation), and stops when the run closes it."""
    from ..torch import prefetch

    with prefetch(batches, depth, pin_memory=pin_memory) as fetched:
        yield from fetched


def _pin_in_loader(cfg: BenchConfig) -> bool:
    """Pinned host batches for asynchronous copies to CUDA (by the prefetch thread if any; the
    device feed pins by itself)."""
    return cfg.device == "cuda" and cfg.prefetch == 0 and cfg.feed != "device"


def _padded_batches(spec: RunSpec, cfg: BenchConfig, data) -> Generator[Any, None, None]:
    from ..torch import loader

    options = padded_options(spec, cfg, data)
    ld = loader(
        data.train,
        strategy=spec.strategy,
        sizes=data.train_sizes,
        batch_size=spec.batch_size,
        seed=cfg.seed + spec.repeat,
        dataloader_kwargs=dict(
            num_workers=cfg.num_workers,
            persistent_workers=cfg.num_workers > 0,
            pin_memory=_pin_in_loader(cfg),
        ),
        **options,
    )
    yield from epochs(ld)


def _with_target(b, target):
    """``b`` with ``y`` the bench target of its real graphs (0 for padding), on ``b``'s device
    (``target`` is moved there unless it is there already)."""
    import torch

    t = target.to(b.graph_mask.device, non_blocking=True)
    b.y = torch.where(b.graph_mask, t[b.graph_index.clamp(min=0)], 0.0).view(-1, 1)
    return b


def store_loader(spec: RunSpec, cfg: BenchConfig, data, **kwargs: Any):
    """``--data store`` with DataLoader workers: `graphbatch.torch.loader` over the store's
    training graphs, each batch read and padded in a worker (the slot path of the device
    feed); ``kwargs``: e.g. a preset."""
    from ..torch import loader

    return loader(
        data.store,
        strategy=spec.strategy,
        batch_size=spec.batch_size,
        seed=cfg.seed + spec.repeat,
        indices=data.train_index,
        dataloader_kwargs=dict(
            num_workers=cfg.num_workers,
            persistent_workers=True,
            pin_memory=_pin_in_loader(cfg),
        ),
        **kwargs,
        **padded_options(spec, cfg, data),
    )


def _store_batches(spec: RunSpec, cfg: BenchConfig, data) -> Generator[Any, None, None]:
    """``--data store``: the plan's batches read by the store batch path (one vectorised gather
    per array, no per-graph ``Data``), ``y`` replaced by the bench target (0 for padding)."""
    from ..torch import PlanBatchSampler, StoreBatcher

    options = padded_options(spec, cfg, data)
    sampler = PlanBatchSampler(
        data.train_sizes,
        spec.strategy,
        batch_size=spec.batch_size,
        seed=cfg.seed + spec.repeat,
        **options,
    )
    batcher = StoreBatcher(data.store)
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        for planned in sampler:
            b = _with_target(
                batcher(data.train_index[np.asarray(planned, dtype=np.int64)], planned.shape),
                data.target,
            )
            if _pin_in_loader(cfg):
                b = b.pin_memory()
            yield b
        epoch += 1


def _pyg_batches(spec: RunSpec, cfg: BenchConfig, data) -> Generator[Any, None, None]:
    import torch
    from torch_geometric.loader import DataLoader

    from ..torch import GraphStoreDataset

    gen = torch.Generator().manual_seed(cfg.seed + spec.repeat)
    train = data.train
    if data.store is not None:  # the baselines get the same training graphs as Data
        ds = GraphStoreDataset(data.store)
        train = []
        for i in data.train_index.tolist():
            d = ds[i]
            train.append(
                type(d)(
                    z=d.z,
                    pos=d.pos,
                    edge_index=d.edge_index,
                    y=data.target[i : i + 1],
                    num_nodes=d.num_nodes,
                )
            )
        data.train = train
    ld = DataLoader(
        train,
        batch_size=spec.batch_size,
        shuffle=True,
        generator=gen,
        num_workers=cfg.num_workers,
        persistent_workers=cfg.num_workers > 0,
        pin_memory=_pin_in_loader(cfg),
    )
    while True:
        yield from ld


def epochs(ld) -> Generator[Any, None, None]:
    """A plan loader's batches, epoch after epoch (each pass told its epoch number)."""
    epoch = 0
    while True:
        ld.set_epoch(epoch)
        yield from ld
        epoch += 1


def run_batches(spec: RunSpec, cfg: BenchConfig, data, device, padded: bool, feed: str):
    """The batch source of a run: PyG's loader (baselines), the store (read in the training
    process, or by DataLoader workers with ``num_workers``) or the plan loader; then the device
    feed (``feed == "device"``) or the prefetch thread (``cfg.prefetch``)."""
    from functools import partial

    from ._modes import device_fed

    if not padded:
        batches = _pyg_batches(spec, cfg, data)
    elif data.store is not None and cfg.num_workers > 0:
        ld = store_loader(spec, cfg, data)
        if feed == "device":  # batches on the device: the target too, moved once
            return device_fed(ld, device, partial(_with_target, target=data.target.to(device)))
        fix = partial(_with_target, target=data.target)
        batches = (fix(b) for b in epochs(ld))
    elif data.store is not None:
        batches = _store_batches(spec, cfg, data)
    else:
        batches = _padded_batches(spec, cfg, data)
    if feed == "device":
        return device_fed(batches, device)
    if cfg.prefetch > 0:
        return prefetched(batches, cfg.prefetch, device.type == "cuda")
    return batches
