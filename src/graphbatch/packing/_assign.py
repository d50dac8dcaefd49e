"""Per-epoch assignment of concrete graphs to packs of size bins (IPU paper 5.1.3 / 5.5.3)."""

from __future__ import annotations

import numpy as np

__all__ = ["assign_graphs"]


def assign_graphs(
    slot_bin: np.ndarray,
    pack_offsets: np.ndarray,
    graph_bin: np.ndarray,
    graph_ids: np.ndarray,
    *,
    assign_rng: np.random.Generator | None,
    order_rng: np.random.Generator | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Fill every slot with a graph of its bin; returns ``(order, offsets)`` of the batches.

    ``graph_bin[i]`` is the bin of graph ``graph_ids[i]``; the slots of each bin must number
    exactly the graphs of that bin. ``assign_rng`` draws which graph of a bin fills which slot
    (``None``: graphs in the given order fill slots in pack order). ``order_rng`` shuffles the
    order of packs and the order of graphs within each pack (``None``: packs and slots as given).
    """
    slot_bin = np.asarray(slot_bin, dtype=np.int64)
    graph_bin = np.asarray(graph_bin, dtype=np.int64)
    graph_ids = np.asarray(graph_ids, dtype=np.int64)
    pack_offsets = np.asarray(pack_offsets, dtype=np.int64)
    m = slot_bin.shape[0]
    if graph_bin.shape[0] != m or graph_ids.shape[0] != m:
        raise ValueError(f"{m} slots but {graph_bin.shape[0]} graphs to assign")
    nb = int(max(slot_bin.max(initial=-1), graph_bin.max(initial=-1))) + 1
    if not np.array_equal(np.bincount(slot_bin, minlength=nb), np.bincount(graph_bin, minlength=nb)):
        raise ValueError("the packs' slots per size bin differ from the graphs per size bin")
    key_dtype = np.int16 if nb < 2**15 else (np.int32 if nb < 2**31 else np.int64)
    if assign_rng is not None:
        perm = assign_rng.permutation(m)
        graph_ids, graph_bin = graph_ids[perm], graph_bin[perm]
    g_sorted = graph_ids[np.argsort(graph_bin.astype(key_dtype), kind="stable")]
    slot_graph = np.empty(m, np.int64)
    slot_graph[np.argsort(slot_bin.astype(key_dtype), kind="stable")] = g_sorted
    if order_rng is None:
        return slot_graph, pack_offsets
    num_packs = pack_offsets.shape[0] - 1
    sizes = np.diff(pack_offsets)
    perm_p = order_rng.permutation(num_packs)
    new_sizes = sizes[perm_p]
    new_offsets = np.concatenate([[0], np.cumsum(new_sizes)]).astype(np.int64)
    pack_of = np.repeat(np.arange(num_packs), new_sizes)
    within = np.arange(m) - new_offsets[pack_of]
    order = slot_graph[pack_offsets[perm_p][pack_of] + within]
    # within-pack shuffle: each row of a [packs, largest pack] matrix permuted independently
    # (padding entries move too and are dropped after), else a sort by (pack, uniform key)
    width = int(new_sizes.max()) if num_packs else 0
    if num_packs * width <= 4 * m + 1024:
        mat = np.full((num_packs, width), -1, np.int64)
        mat[pack_of, within] = order
        mat = order_rng.permuted(mat, axis=1)
        flat = mat.reshape(-1)
        return flat[flat >= 0], new_offsets
    key = pack_of + order_rng.random(m)
    return order[np.argsort(key, kind="stable")], new_offsets
