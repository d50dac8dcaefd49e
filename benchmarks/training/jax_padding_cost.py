"""Padding cost in JAX, resolved to about 1%: the jitted SchNet train step on `pack-lpf` batches
vs the same graphs unpadded (exact shapes), as many alternating pairs of calls.

For each of ``--batches`` batches (from ``--first-batch``) of the bench's pack-lpf plan (QM9
subset, batch size 128, the bench's budget, ``pair_edges=True`` as in the bench): the padded
step (one compilation for all batches) and the unpadded step on the same graphs (one
compilation per distinct shape) are compiled and warmed up, then called ``--rounds`` times
each, alternating (padded first in even rounds, unpadded first in odd ones), on fixed
parameters so every call does the same work.
Each call is timed by the process CPU time (``time.process_time``, all threads) and by wall
time. By default XLA runs single-threaded (``--xla_cpu_multi_thread_eigen=false
intra_op_parallelism_threads=1``), so the CPU time of a call is the work of the step and hardly
depends on what other processes do on a shared machine.

XLA's FLOP count of each compiled step (``cost_analysis``) gives the padding's extra work
without timing noise. Per pair (one padded and one unpadded call of the same batch in the same
round): ratio = padded / unpadded = the padded step time per real graph over the unpadded one
(both hold the same real graphs; 1.0 = padding costs nothing). Reported: the median of all
per-pair ratios, with a 95% bootstrap confidence interval (pairs resampled within each batch),
per batch and overall, for CPU and wall time.

    python -m benchmarks.training.jax_padding_cost --batches 6 --rounds 25 --json OUT.json
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from benchmarks._harness import finish, parser, start

SINGLE_THREAD_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def bootstrap_median_ci(groups: list[np.ndarray], *, resamples: int = 4000, seed: int = 0,
                        level: float = 0.95) -> tuple[float, float, float]:
    """Median of the concatenated ``groups`` and its ``level`` percentile-bootstrap interval,
    resampling with replacement within each group (stratified: every group keeps its count)."""
    rng = np.random.default_rng(seed)
    allv = np.concatenate(groups)
    meds = np.empty(resamples)
    for k in range(resamples):
        meds[k] = np.median(np.concatenate([g[rng.integers(0, g.size, g.size)] for g in groups]))
    lo, hi = np.quantile(meds, [(1 - level) / 2, (1 + level) / 2])
    return float(np.median(allv)), float(lo), float(hi)


def main(argv=None) -> int:
    ap = parser(__doc__, with_threads=False, out_aliases=["--json"],
                out_help="write the pairs and the summary here (JSON)")
    ap.add_argument("--batches", type=int, default=6, help="pack-lpf batches (distinct graphs)")
    ap.add_argument("--first-batch", type=int, default=0, help="plan batch to start from")
    ap.add_argument("--rounds", type=int, default=25, help="alternating pairs per batch")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--subset", type=int, default=5000)
    ap.add_argument("--model", default="schnet", choices=["schnet", "mpeu", "painn"])
    ap.add_argument("--multi-thread", action="store_true",
                    help="keep XLA's default threads (default: single-threaded XLA)")
    args = ap.parse_args(argv)
    if args.batches < 1 or args.rounds < 2:
        ap.error("--batches must be >= 1 and --rounds >= 2")
    if "jax" in sys.modules:
        raise RuntimeError("jax was imported before XLA_FLAGS could be set")
    if not args.multi_thread:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " "
                                   + SINGLE_THREAD_FLAGS).strip()

    info = start(args)
    import jax
    import jraph
    import optax

    import graphbatch.jax as gj
    from graphbatch.bench import BenchConfig, jax_train_step
    from graphbatch.bench._config import bench_budget
    from graphbatch.bench._jax_runner import load_jax_bench_data
    from graphbatch.jax.models import build_model, graph_inputs

    cfg = BenchConfig(framework="jax")
    data = load_jax_bench_data(subset=args.subset)
    budget = bench_budget(cfg, data.train_sizes, args.batch_size, "pack-lpf")
    ld = gj.loader(data.train, strategy="pack-lpf", budget=budget, sizes=data.train_sizes,
                   prefetch=0)
    kwargs = {"cutoff": cfg.cutoff}
    if args.model == "schnet":
        kwargs["pair_edges"] = True
    model = build_model(args.model, **kwargs)
    opt = optax.adam(1e-3)

    step = jax.jit(jax_train_step(model, opt))  # the bench's own step (masked MSE, Adam)
    params = jax.jit(model.init, static_argnames="num_graphs")(
        jax.random.PRNGKey(0), **graph_inputs(ld.host_batch(0, 0)))
    state = opt.init(params)
    plan = ld.plan_for_epoch(0)
    chosen = list(range(args.first_batch, min(args.first_batch + args.batches, len(plan))))
    nb = len(chosen)
    if nb == 0:
        ap.error(f"--first-batch {args.first_batch} is past the {len(plan)} batches of the plan")

    def call(pg) -> tuple[float, float]:
        c0, w0 = time.process_time(), time.perf_counter()
        jax.block_until_ready(step(params, state, pg))
        return time.process_time() - c0, time.perf_counter() - w0

    pairs = []
    for b in chosen:
        idx = plan.batch(b)
        padded = jax.device_put(ld.host_batch(0, b))
        raw = jraph.batch_np([data.train[int(i)] for i in idx])
        n, e, g = int(raw.n_node.sum()), int(raw.n_edge.sum()), len(idx)
        exact = jax.device_put(gj.PaddedGraphs(raw, np.ones(n, bool), np.ones(e, bool),
                                               np.ones(g, bool), np.asarray(idx)))
        for pg in (padded, exact):  # compile (a new shape for the unpadded one) and warm up
            call(pg)
            call(pg)
        pairs.append({"batch": b, "graphs": g, "shape": [int(x) for x in plan.shape(b)],
                      "nodes": n, "edges": e, "padded_cpu": [], "unpadded_cpu": [],
                      "padded_wall": [], "unpadded_wall": [], "pg": (padded, exact)})
    compiles = step._cache_size()

    flops_of: dict[tuple, float] = {}

    def flops(pg) -> float:
        """XLA's own FLOP count of the compiled step for ``pg``'s shape (noise-free work)."""
        key = (pg.node_mask.shape[0], pg.edge_mask.shape[0], pg.graph_mask.shape[0])
        if key not in flops_of:
            cost = step.lower(params, state, pg).compile().cost_analysis()
            cost = cost[0] if isinstance(cost, (list, tuple)) else cost
            flops_of[key] = float(cost.get("flops", float("nan")))
        return flops_of[key]

    for p in pairs:
        p["padded_flops"], p["unpadded_flops"] = (flops(x) for x in p["pg"])
    t_start = time.perf_counter()
    for r in range(args.rounds):
        for p in pairs:
            padded, exact = p["pg"]
            order = ("padded", "unpadded") if r % 2 == 0 else ("unpadded", "padded")
            for kind in order:
                c, w = call(padded if kind == "padded" else exact)
                p[f"{kind}_cpu"].append(c)
                p[f"{kind}_wall"].append(w)
        print(f"round {r + 1}/{args.rounds} done ({time.perf_counter() - t_start:.0f} s)",
              file=sys.stderr, flush=True)

    shape = (int(budget.n_node), int(budget.n_edge), int(budget.n_graph))
    out = {"model": args.model, "batch_size": args.batch_size, "budget": list(shape),
           "single_threaded_xla": not args.multi_thread,
           "xla_flags": os.environ.get("XLA_FLAGS", ""), "rounds": args.rounds,
           "compilations": int(compiles), "batches": []}
    print(f"{args.model}, pack-lpf budget {shape}, {nb} batches x "
          f"{args.rounds} alternating pairs, XLA "
          f"{'single-threaded' if not args.multi_thread else 'default threads'}; "
          f"{compiles} compilations (1 padded shape + "
          f"{len({(p['nodes'], p['edges']) for p in pairs})} distinct unpadded shapes)")
    print(f"{'batch':>5} {'graphs':>6} {'padded shape':>20} {'real nodes':>10} {'real edges':>10}"
          f" {'pad cpu ms':>10} {'unpad cpu ms':>12} {'cpu ratio':>9} {'wall ratio':>10}")
    cpu_groups, wall_groups = [], []
    for p in pairs:
        rc = np.asarray(p["padded_cpu"]) / np.asarray(p["unpadded_cpu"])
        rw = np.asarray(p["padded_wall"]) / np.asarray(p["unpadded_wall"])
        cpu_groups.append(rc)
        wall_groups.append(rw)
        print(f"{p['batch']:>5} {p['graphs']:>6} {str(tuple(p['shape'])):>20} {p['nodes']:>10} "
              f"{p['edges']:>10} {np.median(p['padded_cpu']) * 1e3:>10.1f} "
              f"{np.median(p['unpadded_cpu']) * 1e3:>12.1f} {np.median(rc):>9.4f} "
              f"{np.median(rw):>10.4f}")
        out["batches"].append({k: v for k, v in p.items() if k != "pg"}
                              | {"cpu_ratio_median": float(np.median(rc)),
                                 "wall_ratio_median": float(np.median(rw))})
    for name, groups in (("cpu", cpu_groups), ("wall", wall_groups)):
        med, lo, hi = bootstrap_median_ci(groups)
        out[f"{name}_ratio"] = {"median": med, "ci95": [lo, hi], "pairs": int(sum(map(len,
                                                                                      groups)))}
        print(f"padded / unpadded step time per real graph ({name} time): median {med:.4f} "
              f"over {sum(map(len, groups))} pairs, 95% bootstrap CI [{lo:.4f}, {hi:.4f}] "
              f"(width {hi - lo:.4f}); within 3%: "
              f"{'yes' if hi <= 1.03 else ('no' if lo > 1.03 else 'not resolved')}")
    fr = np.array([p["padded_flops"] / p["unpadded_flops"] for p in pairs])
    out["flops_ratio"] = {"per_batch": fr.tolist(), "mean": float(fr.mean())}
    print(f"padded / unpadded XLA FLOPs of the step (cost_analysis): mean {fr.mean():.4f}, "
          f"range [{fr.min():.4f}, {fr.max():.4f}]")
    nodes = sum(p["nodes"] for p in pairs) / (nb * pairs[0]["shape"][0])
    edges = sum(p["edges"] for p in pairs) / (nb * pairs[0]["shape"][1])
    out["node_fill"], out["edge_fill"] = nodes, edges
    print(f"real/padded: nodes {nodes:.4f}, edges {edges:.4f}")
    finish(args, info, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
