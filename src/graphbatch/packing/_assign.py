"""Per-epoch assignment of concrete graphs to packs of size bins (IPU paper 5.1.3 / 5.5.3)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike, NDArray

from .._errors import InputError
from . import _memory
from ._memory import index_dtype

__all__ = ["assign_graphs", "group_by_key"]


def assign_graphs(
    slot_bin: np.ndarray,
    pack_offsets: np.ndarray,
    graph_bin: np.ndarray,
    graph_ids: np.ndarray | None,
    *,
    assign_rng: np.random.Generator | None,
    order_rng: np.random.Generator | None,
    return_pack_order: bool = False,
) -> tuple[np.ndarray, ...]:
    """Fill every slot with a graph of its bin; returns ``(order, offsets)`` of the batches.

    ``graph_bin[i]`` is the bin of graph ``graph_ids[i]`` (``graph_ids=None``: of graph ``i``);
    the slots of each bin must number exactly the graphs of that bin. ``assign_rng`` draws
    which graph of a bin fills which slot (``None``: graphs in the given order fill slots in
    pack order). ``order_rng`` shuffles the
    order of packs and the order of graphs within each pack (``None``: packs and slots as given).
    With ``return_pack_order=True`` the result is ``(order, offsets, pack_order)`` where batch
    ``b`` holds the graphs of input pack ``pack_order[b]``.
    """
    slot_bin = _as_int(slot_bin)
    graph_bin = _as_int(graph_bin)
    if graph_ids is not None:
        graph_ids = _as_int(graph_ids)
    pack_offsets = np.asarray(pack_offsets, dtype=np.int64)
    m = slot_bin.shape[0]
    if graph_bin.shape[0] != m or (graph_ids is not None and graph_ids.shape[0] != m):
        raise InputError(f"{m} slots but {graph_bin.shape[0]} graphs to assign")
    nb = int(max(slot_bin.max(initial=-1), graph_bin.max(initial=-1))) + 1
    per_bin_slots = np.bincount(slot_bin, minlength=nb)
    if not np.array_equal(per_bin_slots, np.bincount(graph_bin, minlength=nb)):
        b = int(np.flatnonzero(per_bin_slots != np.bincount(graph_bin, minlength=nb))[0])
        raise InputError(
            f"the packs' slots per size bin differ from the graphs per size bin: "
            f"bin {b} has {per_bin_slots[b]} slots and "
            f"{int((graph_bin == b).sum())} graphs"
        )
    # graphs grouped by bin (stable), in a random order within each bin; int32 positions
    if assign_rng is not None and np.count_nonzero(per_bin_slots > 1) * 16 > m:
        # assign_rng.permutation(m) as int32 below 2**31 graphs (the same draws: a shuffle
        # of arange(m), whatever its dtype)
        perm = np.arange(m, dtype=index_dtype(m))
        assign_rng.shuffle(perm)
        g_pos = group_by_key(graph_bin, per_bin_slots, perm)
        del perm
    else:
        g_pos = group_by_key(graph_bin, per_bin_slots)
        if assign_rng is not None:  # few, large bins: shuffle each bin's segment
            _shuffle_segments(assign_rng, g_pos, per_bin_slots)
    idt = index_dtype(max(m, 0 if graph_ids is None else int(graph_ids.max(initial=0)) + 1))
    num_packs = pack_offsets.shape[0] - 1
    sizes = np.diff(pack_offsets)
    width = int(sizes.max()) if num_packs else 0
    if order_rng is None or num_packs * width > 4 * m + 1024:
        # the graph filling every slot: the k-th slot of a bin (in slot order) gets the k-th
        # graph of that bin in g_pos
        slot_graph = _slot_graphs(slot_bin, per_bin_slots, g_pos, graph_ids, np.empty(m, idt))
        del g_pos
        if order_rng is None:
            return _out(slot_graph, pack_offsets, np.arange(num_packs), return_pack_order)
        perm_p = order_rng.permutation(num_packs)
        new_sizes = sizes[perm_p]
        new_offsets = np.concatenate([[0], np.cumsum(new_sizes)]).astype(np.int64)
        pack_of = np.repeat(np.arange(num_packs), new_sizes)
        order = slot_graph[pack_offsets[perm_p][pack_of] + (np.arange(m) - new_offsets[pack_of])]
        # within-pack shuffle by a sort on (pack, uniform key)
        key = pack_of + order_rng.random(m)
        return _out(order[np.argsort(key, kind="stable")], new_offsets, perm_p, return_pack_order)
    # packs as rows of a [packs, largest pack] matrix (-1 = empty), put in a random order and
    # each row permuted independently; permuted (and compacted) in chunks of rows: the rows
    # draw from order_rng in row order, as one call on the whole matrix would. Every slot's
    # graph is written straight to its pack's place in the new order (no per-slot array), so
    # rows of full packs are permuted where they lie; int64 items, which numpy permutes faster
    # than narrower ones (the same draws whatever the items).
    perm_p = order_rng.permutation(num_packs)
    new_sizes = sizes[perm_p]
    new_offsets = np.concatenate([[0], np.cumsum(new_sizes)]).astype(np.int64)
    shift = np.empty(num_packs, np.int64)  # new place of a pack's first slot minus the old
    shift[perm_p] = new_offsets[:-1] - pack_offsets[:-1][perm_p]
    order = _slot_graphs(
        slot_bin, per_bin_slots, g_pos, graph_ids, np.empty(m, np.int64), pack_offsets, shift
    )
    del g_pos
    step = max(1, _memory.ASSIGN_ROWS_CHUNK // max(width, 1))
    cols = np.arange(width)
    for q0 in range(0, num_packs, step):
        q1 = min(num_packs, q0 + step)
        lo, hi = int(new_offsets[q0]), int(new_offsets[q1])
        if hi - lo == (q1 - q0) * width:  # every pack full: no empty entries
            rows = order[lo:hi].reshape(q1 - q0, width)
            order_rng.permuted(rows, axis=1, out=rows)
            continue
        rows = np.full((q1 - q0, width), -1, np.int64)
        rows[cols < new_sizes[q0:q1, None]] = order[lo:hi]
        order_rng.permuted(rows, axis=1, out=rows)
        flat = rows.reshape(-1)
        order[lo:hi] = flat[flat >= 0]
    return _out(order, new_offsets, perm_p, return_pack_order)


def _shuffle_segments(rng: np.random.Generator, values: np.ndarray, counts: np.ndarray) -> None:
    """Shuffle each run of ``values`` (run ``b``: the next ``counts[b]`` entries) in place by
    ``rng.shuffle``, run after run: the same draws and the same result. Each run is shuffled
    as int64 items in one reused buffer: numpy's shuffle swaps the same positions whatever the
    items (its draws depend on the length only), and swaps 8-byte items faster than 4-byte
    ones, in cache and out of it."""
    ends = np.cumsum(counts)
    runs = np.flatnonzero(counts > 1)
    if runs.size == 0:
        return
    buf = np.empty(int(counts[runs].max()), np.int64)
    for b in runs.tolist():
        seg = values[ends[b] - counts[b] : ends[b]]
        items = buf[: seg.shape[0]]
        items[:] = seg
        rng.shuffle(items)
        seg[:] = items


def _sort_chunk(
    k: np.ndarray, ptr: NDArray[np.int64]
) -> tuple[NDArray[np.intp], NDArray[np.int64]]:
    """One chunk of a stable counting sort: ``(srt, dest)`` with ``srt`` the stable argsort of
    the keys ``k`` and ``dest[i]`` the output position of entry ``srt[i]``: ``ptr`` (the next
    free position of each key, advanced in place) plus its rank among the chunk's equal keys."""
    srt = np.argsort(k, kind="stable")
    ks = k[srt]
    nk = ptr.shape[0]
    if nk <= k.shape[0]:  # few keys: per-key offsets from a count (no run detection)
        c = np.bincount(ks, minlength=nk)
        first = np.zeros(nk, np.int64)
        np.cumsum(c[:-1], out=first[1:])
        dest = (ptr - first)[ks]
        dest += np.arange(ks.shape[0])
        ptr += c
        return srt, dest
    starts = np.concatenate([[0], np.flatnonzero(ks[1:] != ks[:-1]) + 1])
    cnt = np.diff(np.append(starts, ks.shape[0]))
    dest = ptr[ks] + (np.arange(ks.shape[0]) - np.repeat(starts, cnt))
    ptr[ks[starts]] += cnt
    return srt, dest


def _key_chunk(keys: np.ndarray, kdt: DTypeLike) -> np.ndarray:
    """Keys as ``kdt`` (16-bit keys sort by radix); non-negative int16 keys are viewed."""
    if keys.dtype == np.int16 and kdt == np.uint16:
        return keys.view(np.uint16)
    return keys.astype(kdt)


def _slot_graphs(
    slot_bin: NDArray[np.integer[Any]],
    counts: NDArray[np.integer[Any]],
    g_pos: NDArray[np.integer[Any]],
    graph_ids: NDArray[np.integer[Any]] | None,
    out: NDArray[np.integer[Any]],
    pack_offsets: np.ndarray | None = None,
    shift: NDArray[np.integer[Any]] | None = None,
) -> NDArray[np.integer[Any]]:
    """The graph of every slot into ``out``: the ``k``-th slot of bin ``b`` (in slot order)
    takes ``g_pos[start_b + k]`` (``start_b``: the first position of bin ``b`` in ``g_pos``),
    mapped through ``graph_ids`` when given. Slot ``s`` goes to ``out[s]``, or with
    ``shift`` to ``out[s + shift[p]]`` (``p`` its pack, ``pack_offsets`` the packs' slots).
    A chunked counting sort of the slots by bin (``out[group_by_key(slot_bin, counts)] =
    g_pos``, without that array). Returns ``out``."""
    m = slot_bin.shape[0]
    ptr = np.zeros(counts.shape[0], np.int64)  # next position of each bin in g_pos
    np.cumsum(counts[:-1], out=ptr[1:])
    kdt = np.uint16 if counts.shape[0] <= 2**16 else np.int64
    for s0 in range(0, m, _memory.SORT_CHUNK):
        s1 = min(m, s0 + _memory.SORT_CHUNK)
        srt, dest = _sort_chunk(_key_chunk(slot_bin[s0:s1], kdt), ptr)
        src = g_pos[dest]
        if graph_ids is not None:
            src = graph_ids[src]
        if shift is None:
            srt += s0
            out[srt] = src
        else:  # the packs over these slots, and each slot's place; written in slot order
            assert pack_offsets is not None  # (given with `shift`)
            p0 = int(np.searchsorted(pack_offsets, s0, "right")) - 1
            p1 = int(np.searchsorted(pack_offsets, s1, "left"))
            at = np.repeat(shift[p0:p1], np.diff(np.clip(pack_offsets[p0 : p1 + 1], s0, s1)))
            at += np.arange(s0, s1)
            local = np.empty(s1 - s0, out.dtype)
            local[srt] = src
            out[at] = local
    return out


def _as_int(a: ArrayLike) -> NDArray[np.integer[Any]]:
    a = np.asarray(a)
    return a if a.dtype.kind in "iu" else a.astype(np.int64)


def group_by_key(
    keys: np.ndarray,
    counts: np.ndarray,
    index: np.ndarray | None = None,
    *,
    lookup: np.ndarray | None = None,
    values: np.ndarray | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """``index[np.argsort(keys[index], kind="stable")]`` (``index`` defaults to ``arange``):
    positions grouped by their key, in ``index`` order within a key. ``counts[k]`` is how many
    keys equal ``k``. Without ``index``: ``lookup`` sorts by ``lookup[keys]`` instead, mapped
    chunk by chunk (no per-position array of the mapped keys), and ``values`` gives
    ``values[positions]`` instead of the positions (no gather in sorted order). A chunked
    counting sort: int32 result (below 2**31 positions), no per-graph int64 temporaries; into
    ``out`` when given."""
    n = keys.shape[0] if index is None else index.shape[0]
    if index is not None and (lookup is not None or values is not None):
        raise InputError("group_by_key takes a lookup or values, or an index, not both")
    ptr = np.zeros(counts.shape[0], np.int64)  # next free position of each key
    np.cumsum(counts[:-1], out=ptr[1:])
    if out is None:
        out = np.empty(n, index_dtype(n))
    kdt = np.uint16 if counts.shape[0] <= 2**16 else np.int64
    if lookup is not None:
        lookup = np.asarray(lookup).astype(kdt)
    for s0 in range(0, n, _memory.SORT_CHUNK):
        if index is None:
            k = keys[s0 : s0 + _memory.SORT_CHUNK]
            k = _key_chunk(k, kdt) if lookup is None else lookup[k]
            srt, dest = _sort_chunk(k, ptr)
            if values is None:
                srt += s0
                out[dest] = srt
            else:
                out[dest] = values[s0 : s0 + _memory.SORT_CHUNK][srt]
        else:
            pos = index[s0 : s0 + _memory.SORT_CHUNK]
            srt, dest = _sort_chunk(keys[pos].astype(kdt), ptr)
            out[dest] = pos[srt]
    return out


def _out(
    order: np.ndarray, offsets: np.ndarray, pack_order: np.ndarray, with_pack_order: bool
) -> tuple[np.ndarray, ...]:
    return (order, offsets, pack_order) if with_pack_order else (order, offsets)
