"""Padding cost in JAX: the jitted SchNet train step on `pack-lpf` batches vs the same graphs
unpadded (exact shapes), side by side.

For each of the first ``--batches`` batches of the bench's pack-lpf plan (QM9 subset, batch size
128, the bench's budget): the padded step (one compilation for all) and the unpadded step on
the same graphs (one compilation per batch, excluded) are each warmed up once and then timed
``--reps`` times, alternating; the ratio of the summed medians is the padded step time per real
graph over the unpadded one (1.0 = padding costs nothing).

    PYTHONPATH=src python benchmarks/jax_padding_cost.py --batches 8
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--subset", type=int, default=5000)
    args = ap.parse_args(argv)

    import jax
    import jax.numpy as jnp
    import jraph
    import optax

    import graphbatch.jax as gj
    from graphbatch.bench import BenchConfig
    from graphbatch.bench._jax_runner import load_jax_bench_data
    from graphbatch.bench._runner import bench_budget
    from graphbatch.jax.models import SchNet, graph_inputs

    cfg = BenchConfig(framework="jax")
    data = load_jax_bench_data(subset=args.subset)
    budget = bench_budget(cfg, data.train_sizes, args.batch_size, "pack-lpf")
    ld = gj.loader(data.train, strategy="pack-lpf", budget=budget, sizes=data.train_sizes,
                   prefetch=0)
    model = SchNet(pair_edges=True)
    opt = optax.adam(1e-3)

    def loss_fn(p, pg):
        pred = model.apply(p, **graph_inputs(pg))
        err = jnp.where(pg.graph_mask, (pred - pg.graphs.globals["y"][:, 0]) ** 2, 0.0)
        return err.sum() / jnp.maximum(pg.graph_mask.sum(), 1)

    def train_step(p, s, pg):
        loss, grads = jax.value_and_grad(loss_fn)(p, pg)
        upd, s = opt.update(grads, s, p)
        return optax.apply_updates(p, upd), s, loss

    step = jax.jit(train_step)
    first = ld.host_batch(0, 0)
    params = jax.jit(model.init, static_argnames="num_graphs")(jax.random.PRNGKey(0),
                                                                **graph_inputs(first))
    state = opt.init(params)
    plan = ld.plan_for_epoch(0)

    def timed(pg) -> float:
        jax.block_until_ready(step(params, state, pg))  # warm-up (compiles a new shape)
        ts = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            jax.block_until_ready(step(params, state, pg))
            ts.append(time.perf_counter() - t0)
        return float(np.median(ts))

    padded_s, unpadded_s, graphs = [], [], 0
    for b in range(min(args.batches, len(plan))):
        idx = plan.batch(b)
        pg = jax.device_put(ld.host_batch(0, b))
        raw = jraph.batch_np([data.train[int(i)] for i in idx])
        n, e, g = int(raw.n_node.sum()), int(raw.n_edge.sum()), len(idx)
        up = jax.device_put(gj.PaddedGraphs(raw, np.ones(n, bool), np.ones(e, bool),
                                            np.ones(g, bool), np.asarray(idx)))
        for _ in range(2):  # alternate so that load drifts hit both alike
            padded_s.append(timed(pg))
            unpadded_s.append(timed(up))
        graphs += len(idx)
        print(f"batch {b}: {len(idx)} graphs, padded {padded_s[-1] * 1e3:.1f} ms "
              f"(shape {plan.shape(b)}), unpadded {unpadded_s[-1] * 1e3:.1f} ms "
              f"({n} nodes, {e} edges)", flush=True)
    ratio = sum(padded_s) / sum(unpadded_s)
    print(f"padded / unpadded step time for the same {graphs} graphs: {ratio:.3f} "
          f"(padded compiles: {step._cache_size() - min(args.batches, len(plan))} + "
          f"{min(args.batches, len(plan))} unpadded shapes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
