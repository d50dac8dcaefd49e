"""Chunk-aware shuffling for stores bigger than RAM: plans whose batches read few file regions;
`plan_epoch`, the one planning call of the loaders (``shuffle=True``/``False``/``"chunks"``).

The store keeps graphs back to back, so graphs ``[k * C, (k + 1) * C)`` (a *chunk* of ``C``
graphs) sit in one contiguous stretch of every array. `chunk_shuffled_plan` shuffles chunks,
not graphs, across the dataset: each epoch the chunks are permuted and dealt into *windows* of
``W`` chunks; each window is planned on its own by any strategy (which shuffles graphs within
the window), and the windows' batches follow each other. A batch therefore touches at most
``W`` chunks, and consecutive batches the same ``W`` chunks, so a cold page cache reads each
stretch once instead of seeking all over the file.

Effect on randomness (compared with a full shuffle): every graph still appears exactly once
per epoch, and the window order and window membership change every epoch (from ``(seed,
epoch)``); but a batch only mixes graphs of one window, i.e. of ``W * C`` graphs that were
neighbours in the store (built in source order), instead of the whole dataset. With ``W``
chunks per window out of ``K`` chunks, two given graphs of different chunks can share a batch
only in epochs where their chunks land in one window (probability about ``(W - 1) / (K - 1)``);
two graphs of one chunk are always in the same window. Within a window the strategy shuffles
as usual, with its own seed per window (drawn from ``(seed, epoch)``), so equal-size windows
are not shuffled alike. Choose ``W * C`` much larger than the batch size, and build the store
in a shuffled order if neighbouring source records are correlated.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from ._api import plan as make_plan
from ._errors import InputError, InputTypeError
from ._plan import BatchPlan
from ._random import epoch_rng
from ._sizes import GraphSizes
from ._validate import as_nonnegative_int, as_positive_int

__all__ = [
    "CHUNK_GRAPHS",
    "WINDOW_CHUNKS",
    "SHUFFLE_MODES",
    "check_shuffle",
    "chunk_shuffled_plan",
    "chunk_windows",
    "plan_epoch",
]

#: Defaults of ``shuffle="chunks"``: chunks of 4,096 consecutive graphs, 8 chunks per window.
CHUNK_GRAPHS = 4096
WINDOW_CHUNKS = 8
#: The loaders' ``shuffle`` values: a full shuffle, none, or chunk-aware (`chunk_shuffled_plan`).
SHUFFLE_MODES = (True, False, "chunks")


def chunk_windows(
    n_graph: int, chunk_graphs: int, window_chunks: int, *, seed: int, epoch: int
) -> list[np.ndarray]:
    """The epoch's windows: lists of graph indices (each the union of ``window_chunks``
    randomly chosen chunks of ``chunk_graphs`` consecutive graphs, in ascending order)."""
    return _windows(n_graph, chunk_graphs, window_chunks, epoch_rng(seed, epoch))


def _windows(
    n_graph: int, chunk_graphs: int, window_chunks: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """`chunk_windows` with the chunk permutation drawn from ``rng`` (advanced by it)."""
    n = as_nonnegative_int(n_graph, "n_graph")
    c = as_positive_int(chunk_graphs, "chunk_graphs")
    w = as_positive_int(window_chunks, "window_chunks")
    n_chunks = -(-n // c)
    perm = rng.permutation(n_chunks)
    out = []
    for k in range(0, n_chunks, w):
        chunks = np.sort(perm[k : k + w])
        out.append(
            np.concatenate([np.arange(j * c, min((j + 1) * c, n), dtype=np.int64) for j in chunks])
        )
    return out


def chunk_shuffled_plan(
    sizes: GraphSizes,
    strategy: str,
    *,
    chunk_graphs: int = CHUNK_GRAPHS,
    window_chunks: int = WINDOW_CHUNKS,
    seed: int = 0,
    epoch: int = 0,
    **plan_options: Any,
) -> BatchPlan:
    """A plan of ``sizes`` whose batches each draw from one window of ``window_chunks`` chunks
    of ``chunk_graphs`` consecutive graphs (module docstring: what this does to randomness).

    Window ``k`` is planned with ``graphbatch.plan(window_sizes, strategy, seed=s_k,
    epoch=epoch, **plan_options)``, ``s_k`` the ``k``-th of the window seeds drawn from
    ``(seed, epoch)`` (deterministic; not ``shuffle=False``: that is a plain plan).
    Fixed-shape strategies choose their shape per window from the window's sizes: pass an
    explicit ``budget`` for one shape across the epoch.
    Distributed plans (``world_size``) keep equal-shape steps per window; steps are numbered
    through the epoch. Strategies that need a minimum number of graphs (``kk``, ``random``:
    ``batch_size - 1``) need it in every window, the last (partial) one included. The plan's
    ``meta`` is the first window's plus ``chunk_shuffled``.
    """
    if not isinstance(sizes, GraphSizes):
        raise InputTypeError(f"sizes must be a GraphSizes, got {type(sizes).__name__}")
    seed = as_nonnegative_int(seed, "seed")
    epoch = as_nonnegative_int(epoch, "epoch")
    if "shuffle" in plan_options:
        raise InputTypeError("chunk_shuffled_plan takes no shuffle= (it always shuffles)")
    rng = epoch_rng(seed, epoch)
    windows = _windows(len(sizes), chunk_graphs, window_chunks, rng)
    if not windows:
        return make_plan(sizes, strategy, seed=seed, epoch=epoch, **plan_options)
    # one seed per window: the permutation's generator continued (same (seed, epoch) stream)
    seeds = rng.integers(0, 2**31 - 1, size=len(windows))
    parts = []
    for win, s in zip(windows, seeds.tolist(), strict=True):
        p = make_plan(sizes.subset(win), strategy, seed=s, epoch=epoch, **plan_options)
        parts.append((win, p))
    order, skipped, offsets = [], [], [np.zeros(1, dtype=np.int64)]
    ranks, steps, step0, start = [], [], 0, 0
    for win, p in parts:
        order.append(win[p.order])
        skipped.append(win[p.skipped])
        offsets.append(p.offsets[1:] + start)
        start += int(p.order.shape[0])
        if p.rank is not None:
            assert p.step is not None  # given with rank
            ranks.append(p.rank)
            steps.append(p.step + step0)
            step0 += int(p.step.max()) + 1 if p.step.shape[0] else 0
    cat = np.concatenate
    distributed = bool(ranks) and len(ranks) == len(parts)
    return BatchPlan(
        cat(order),
        cat(offsets),
        cat([p.pad_nodes for _, p in parts]),
        cat([p.pad_edges for _, p in parts]),
        cat([p.pad_graphs for _, p in parts]),
        cat(skipped),
        real_nodes=cat([p.real_nodes for _, p in parts]),
        real_edges=cat([p.real_edges for _, p in parts]),
        rank=cat(ranks) if distributed else None,
        step=cat(steps) if distributed else None,
        meta={
            **parts[0][1].meta,
            "chunk_shuffled": {
                "chunk_graphs": int(chunk_graphs),
                "window_chunks": int(window_chunks),
                "windows": len(parts),
            },
        },
    )


def check_shuffle(shuffle: object) -> bool | Literal["chunks"]:
    """A loader's ``shuffle``: ``True``, ``False`` (``bool`` or ``numpy.bool_``) or
    ``"chunks"``; another string is an `InputError`, anything else (``0``, ``None``) an
    `InputTypeError` (never a truth value)."""
    if isinstance(shuffle, str):
        if shuffle != "chunks":
            raise InputError(f"shuffle must be True, False or 'chunks', got {shuffle!r}")
        return "chunks"
    if isinstance(shuffle, (bool, np.bool_)):
        return bool(shuffle)
    raise InputTypeError(f"shuffle must be True, False or 'chunks', got {shuffle!r}")


def plan_epoch(
    sizes: GraphSizes,
    strategy: str,
    *,
    shuffle: bool | str = True,
    seed: int = 0,
    epoch: int = 0,
    chunk_graphs: int | None = None,
    window_chunks: int | None = None,
    **options: Any,
) -> BatchPlan:
    """The plan of one epoch as the loaders make it: ``graphbatch.plan(sizes, strategy,
    shuffle=shuffle, seed=seed, epoch=epoch, **options)``, or with ``shuffle="chunks"``
    `chunk_shuffled_plan` (``chunk_graphs`` default `CHUNK_GRAPHS`, ``window_chunks`` default
    `WINDOW_CHUNKS`; module docstring: the effect on randomness). ``chunk_graphs`` and
    ``window_chunks`` without ``shuffle="chunks"`` are a ``TypeError``."""
    shuffle = check_shuffle(shuffle)
    if shuffle == "chunks":
        return chunk_shuffled_plan(
            sizes,
            strategy,
            seed=seed,
            epoch=epoch,
            chunk_graphs=CHUNK_GRAPHS if chunk_graphs is None else chunk_graphs,
            window_chunks=WINDOW_CHUNKS if window_chunks is None else window_chunks,
            **options,
        )
    if chunk_graphs is not None or window_chunks is not None:
        raise InputTypeError(
            f"chunk_graphs/window_chunks need shuffle='chunks' (got shuffle={shuffle!r})"
        )
    return make_plan(sizes, strategy, shuffle=shuffle, seed=seed, epoch=epoch, **options)
