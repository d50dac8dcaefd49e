"""The data and batches of ``graphbatch bench --framework jax``: the torch bench's split as
single-graph ``jraph.GraphsTuple`` lists (`JaxBenchData`), the jraph users' own batching for the
baselines (``jraph-dynamic``, ``jraph-pad64``, ``unpadded``; run in the training thread) and
`graphbatch.jax.loader` batches for the padded strategies. Every source yields forever."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

import numpy as np

from ._config import BenchConfig, RunSpec

__all__ = [
    "JaxBenchData",
    "baseline_batches",
    "jraph_pad",
    "load_jax_bench_data",
    "loader_batches",
    "masked",
]


class JaxBenchData:
    """Train/test lists of single-graph ``jraph.GraphsTuple`` (``nodes = {"z", "pos"}``,
    ``globals = {"y": [1, 1]}``), train sizes, target scale and unit."""

    def __init__(self, train, test, train_sizes, scale: float, unit: str, num_graphs: int):
        self.train, self.test, self.train_sizes = train, test, train_sizes
        self.scale, self.unit, self.num_graphs = scale, unit, num_graphs


def load_jax_bench_data(
    dataset: str = "qm9", *, subset: int | None = 2000, cutoff: float = 6.0, seed: int = 0
) -> JaxBenchData:
    """The torch bench's split and target (`load_bench_arrays`) as ``GraphsTuple`` lists."""
    import jraph

    from ._data import load_bench_arrays

    a = load_bench_arrays(dataset, subset=subset, cutoff=cutoff, seed=seed)
    ga = a.graphs
    z = ga.node["z"].astype(np.int32)
    pos = np.ascontiguousarray(ga.node["pos"], dtype=np.float32)
    ei = ga.edge_index.astype(np.int32)
    y = a.target.astype(np.float32)
    no, eo = ga.node_offsets, ga.edge_offsets

    def graph(i: int):
        p, q, r, s = int(no[i]), int(no[i + 1]), int(eo[i]), int(eo[i + 1])
        return jraph.GraphsTuple(
            n_node=np.array([q - p], np.int32),
            n_edge=np.array([s - r], np.int32),
            nodes={"z": z[p:q], "pos": pos[p:q]},
            edges={},
            globals={"y": y[i : i + 1, None]},
            senders=ei[0, r:s],
            receivers=ei[1, r:s],
        )

    train = [graph(int(i)) for i in a.train_idx]
    test = [graph(int(i)) for i in a.test_idx]
    return JaxBenchData(train, test, ga.sizes().subset(a.train_idx), a.scale, a.unit, len(ga))


# --------------------------------------------------------------------------- batches
def _shuffled(n: int, seed: int) -> Iterator[int]:
    """Dataset indices, a fresh permutation per epoch from ``(seed, epoch)``, forever."""
    epoch = 0
    while True:
        yield from np.random.default_rng([seed, epoch]).permutation(n).tolist()
        epoch += 1


def masked(graphs, index=None):
    """`PaddedGraphs` of a ``jraph.pad_with_graphs`` result (masks from jraph's helpers)."""
    import jraph

    from ..jax import PaddedGraphs

    g_mask = np.asarray(jraph.get_graph_padding_mask(graphs))
    gi = np.full(g_mask.shape[0], -1, np.int64) if index is None else index
    return PaddedGraphs(
        graphs,
        np.asarray(jraph.get_node_padding_mask(graphs)),
        np.asarray(jraph.get_edge_padding_mask(graphs)),
        g_mask,
        gi,
    )


def _jraph_dynamic(data, budget, seed: int) -> Generator[Any, None, None]:
    """``jraph.dynamically_batch`` over a shuffled stream, to the dynamic strategy's budget."""
    import jraph

    stream = (data.train[i] for i in _shuffled(len(data.train), seed))
    for g in jraph.dynamically_batch(stream, budget.n_node, budget.n_edge, budget.n_graph):
        yield masked(g)


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def _jraph_pad64(data, batch_size: int, seed: int) -> Generator[Any, None, None]:
    """The common recipe: ``batch_size - 1`` graphs, ``jraph.batch_np``, then
    ``jraph.pad_with_graphs`` to the next multiples of 64 nodes and edges."""
    import jraph

    order = _shuffled(len(data.train), seed)
    while True:
        graphs = [data.train[next(order)] for _ in range(batch_size - 1)]
        b = jraph.batch_np(graphs)
        n = _round_up(int(b.n_node.sum()) + 1, 64)
        e = _round_up(int(b.n_edge.sum()), 64)
        yield masked(jraph.pad_with_graphs(b, n, e, batch_size))


def _unpadded(data, batch_size: int, seed: int) -> Generator[Any, None, None]:
    """Exact-size batches of ``batch_size`` graphs (no padding graph, all-true masks)."""
    import jraph

    from ..jax import PaddedGraphs

    order = _shuffled(len(data.train), seed)
    while True:
        b = jraph.batch_np([data.train[next(order)] for _ in range(batch_size)])
        n, e, g = int(b.n_node.sum()), int(b.n_edge.sum()), batch_size
        yield PaddedGraphs(
            b, np.ones(n, bool), np.ones(e, bool), np.ones(g, bool), np.zeros(g, np.int64)
        )


def loader_batches(spec: RunSpec, cfg: BenchConfig, data, options) -> Generator[Any, None, None]:
    from ..jax import loader

    ld = loader(
        data.train,
        strategy=spec.strategy,
        sizes=data.train_sizes,
        batch_size=spec.batch_size,
        seed=cfg.seed + spec.repeat,
        prefetch=max(cfg.prefetch, 0),
        **options,
    )
    while True:  # the loader advances its own epoch after each pass
        yield from ld


def jraph_pad(graph):
    """One graph padded by one node and one graph slot (model initialisation input)."""
    import jraph

    return jraph.pad_with_graphs(graph, int(graph.n_node[0]) + 1, int(graph.n_edge[0]), 2)


def baseline_batches(
    strategy: str, data: JaxBenchData, batch_size: int, seed: int, budget: Any
) -> Generator[Any, None, None]:
    """A baseline's batches (`graphbatch.bench.JAX_BASELINES`): ``jraph-dynamic`` to
    ``budget``, ``jraph-pad64`` or ``unpadded`` at ``batch_size``, shuffled from ``seed``."""
    if strategy == "jraph-dynamic":
        return _jraph_dynamic(data, budget, seed)
    if strategy == "jraph-pad64":
        return _jraph_pad64(data, batch_size, seed)
    return _unpadded(data, batch_size, seed)
