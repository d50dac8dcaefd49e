"""JAX input throughput from a graph store: `graphbatch.jax.loader` on a `GraphStore` (the store
batch path), the same loader over per-graph reads, and jraph's own batching of the same graphs
held in memory, in real graphs per second with the device transfer included.

Paths, each timed over the same ``--batches`` batches of the loader's ``pack-lpf`` plan (epoch
0, batch size ``--batch-size``), in ``--rounds`` interleaved rounds (each round runs every path
once over its slice of batches; the medians over rounds are reported, with the same-round ratio
to the store batch path):

- ``store batch, prefetch 0``: ``graphbatch.jax.loader(GraphStore(path), strategy="pack-lpf",
  batch_size=B, prefetch=0)``: one vectorised gather per store array into jraph's padded layout,
  then ``jax.device_put``, in the caller's thread;
- ``store batch, prefetch 2``: the same with the loader's default ``prefetch=2`` (a background
  thread collates and transfers ahead; the consumer only waits);
- ``store per-graph``: the same loader over the store wrapped as a plain map-style dataset (one
  ``GraphsTuple`` read per graph, then `graphbatch.jax.collate`), ``prefetch=0``;
- ``jraph in memory``: the same graphs as single-graph ``GraphsTuple``s in a Python list (read
  before timing), batched in plan order by ``jraph.dynamically_batch`` to the same padded shape,
  then ``jax.device_put``.

Every batch is waited for with ``jax.block_until_ready``. Graphs/s are real graphs (graph mask)
per wall second and per process CPU second.

    python -m benchmarks.io.jax_store_read --store /tmp/storebench/qm9.h5
"""

from __future__ import annotations

import itertools
import sys
import time

import numpy as np

from benchmarks._harness import finish, parser, start


class PerGraph:
    """A `StoreGraphs` hidden behind a plain map-style dataset: the loader reads it per graph."""

    def __init__(self, graphs) -> None:
        self._g = graphs

    def __len__(self) -> int:
        return len(self._g)

    def __getitem__(self, i):
        return self._g[i]

    def graph_sizes(self):
        return self._g.graph_sizes()


def _consume(batches, n: int) -> tuple[int, float, float]:
    """Real graphs, wall s and CPU s for the next ``n`` device batches of ``batches``."""
    import jax

    c0, w0, graphs = time.process_time(), time.perf_counter(), 0
    for pg in itertools.islice(batches, n):
        jax.block_until_ready(pg)
        graphs += int(np.asarray(pg.graph_mask).sum())
    return graphs, time.perf_counter() - w0, time.process_time() - c0


def main(argv=None) -> int:
    ap = parser(__doc__, with_threads=False)
    ap.add_argument("--store", default="/tmp/storebench/qm9.h5")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--batches", type=int, default=150, help="batches per path per round")
    ap.add_argument("--per-graph-batches", type=int, default=60,
                    help="batches per round for the (slow) per-graph path")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    info = start(args)

    import jax
    import jraph

    import graphbatch.jax as gj
    from graphbatch.datasets import GraphStore
    from graphbatch.jax import PaddedGraphs
    from graphbatch.jax._source import StoreGraphs

    store = GraphStore(args.store)
    batch_ld = {p: gj.loader(store, strategy="pack-lpf", batch_size=args.batch_size, prefetch=p)
                for p in (0, 2)}
    plan = batch_ld[0].plan_for_epoch(0)
    shape = tuple(int(x) for x in plan.shape(0))
    need = args.batches * args.rounds
    if need > len(plan):
        ap.error(f"--batches x --rounds = {need} is more than the {len(plan)} batches of epoch 0")
    if len(set(tuple(plan.shape(b)) for b in range(need))) != 1:
        raise RuntimeError("pack-lpf plan is not single-shape")
    per_graph_ld = gj.loader(PerGraph(StoreGraphs(store)), strategy="pack-lpf",
                             batch_size=args.batch_size, prefetch=0)
    assert per_graph_ld.fingerprint == batch_ld[0].fingerprint  # same plan request
    t0 = time.perf_counter()
    reader = StoreGraphs(store)
    order = np.concatenate([plan.batch(b) for b in range(need)])
    in_memory = [reader[int(i)] for i in order]
    print(f"{len(in_memory)} graphs read into memory for jraph in {time.perf_counter() - t0:.1f} s",
          file=sys.stderr)

    def jraph_batches():
        for g in jraph.dynamically_batch(iter(in_memory), *shape):
            gm = np.asarray(jraph.get_graph_padding_mask(g))
            yield jax.device_put(PaddedGraphs(g, np.asarray(jraph.get_node_padding_mask(g)),
                                              np.asarray(jraph.get_edge_padding_mask(g)), gm,
                                              np.full(gm.shape[0], -1, np.int64)))

    iters = {"store batch, prefetch 0": iter(batch_ld[0]),
             "store batch, prefetch 2": iter(batch_ld[2]),
             "store per-graph": iter(per_graph_ld),
             "jraph in memory": jraph_batches()}
    counts = {k: args.per_graph_batches if k == "store per-graph" else args.batches
              for k in iters}
    rows: dict[str, list[tuple[int, float, float]]] = {k: [] for k in iters}
    for name, it in iters.items():  # warm up: first batch (thread start, device, caches)
        _consume(it, 1)
    for r in range(args.rounds):
        for name, it in iters.items():
            rows[name].append(_consume(it, counts[name]))
        print(f"round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
    for it in iters.values():
        getattr(it, "close", lambda: None)()

    base = "store batch, prefetch 0"
    bw = np.array([g / w for g, w, _ in rows[base]])
    print(f"store {args.store}: {len(store)} graphs; pack-lpf, batch size {args.batch_size}, "
          f"shape {shape}; {args.rounds} rounds; jax {jax.__version__}, device "
          f"{jax.devices()[0].platform}")
    print(f"{'path':<26} {'batches/round':>13} {'graphs/s wall':>14} {'graphs/s cpu':>13} "
          f"{'x store batch (same round)':>27}")
    out = {}
    for name, rs in rows.items():
        gw = np.array([g / w for g, w, _ in rs])
        gc = np.array([g / c if c > 0 else np.nan for g, _, c in rs])
        ratio = float(np.median(gw / bw))
        out[name] = (float(np.median(gw)), float(np.median(gc)), ratio)
        print(f"{name:<26} {counts[name]:>13} {np.median(gw):>14,.0f} {np.nanmedian(gc):>13,.0f} "
              f"{ratio:>27.2f}")
    finish(args, info, {k: dict(zip(("graphs_per_s_wall", "graphs_per_s_cpu", "x_store_batch"), v))
                        for k, v in out.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
