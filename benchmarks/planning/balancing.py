"""Memory balancing (issue 4): every balancing strategy side by side on a HEP-like and a QM9 table.

Prints, in one run: max / mean and p99 / mean batch cost per strategy (the floor is 1: the mean
batch cost), the reduction of the max vs `random`, planning time and peak traced memory for
~300,000 graphs, how much `stratified` and `kk` batches change between epochs (and that a repeated
`(seed, epoch)` gives the same plan), and per-step imbalance (max / mean real nodes and edges
across ranks) of `--world-size` distributed plans.

HEP-like table (stated generator): graph bytes ~ log-normal with median 192.5 MB and
sigma = sqrt(2 ln(243.72 / 192.5)) = 0.687 (so mean 243.7 MB, std ~ 190 MB, as in Table 1 of
Lee et al. 2024), clipped to [11.70, 2833.02] MB, 300,396 graphs; nodes = round(20 x MB),
edges = round(nodes x U(2.5, 3.5)). The QM9 table is the shipped QM9 radius-6 Å size table
(cost = nodes + edges, no bytes), resampled with replacement to the same size for timing.

    python -m benchmarks.planning.balancing [--quick] [--batch-size 65] [--world-size 8]
"""

from __future__ import annotations

import time
import tracemalloc

import numpy as np

import graphbatch as gb

from benchmarks._harness import describe, finish, parser, print_table, qm9_like_sizes, start

HEP_GRAPHS = 300_396
STRATEGIES = (
    ("random", {}),
    ("balance", {"fraction": 0.01}),
    ("balance", {"fraction": 0.1}),
    ("balance", {"fraction": 1.0}),
    ("zscore", {}),
    ("iqr", {}),
    ("kk", {}),
    ("stratified", {}),
)


def hep_like_sizes(n: int = HEP_GRAPHS, seed: int = 0) -> gb.GraphSizes:
    """The stated HEP-like generator (see the module docstring)."""
    rng = np.random.default_rng(seed)
    sigma = np.sqrt(2.0 * np.log(243.72 / 192.5))
    mb = np.clip(rng.lognormal(np.log(192.5), sigma, n), 11.70, 2833.02)
    nodes = np.round(20.0 * mb).astype(np.int64)
    edges = np.round(nodes * rng.uniform(2.5, 3.5, n)).astype(np.int64)
    return gb.GraphSizes(nodes, edges, np.round(mb * 1e6).astype(np.int64))


def label(name: str, opts: dict) -> str:
    return name + (f"({', '.join(f'{k}={v}' for k, v in opts.items())})" if opts else "")


def timed(fn, repeats: int):
    best = float("inf")
    out = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return out, best


def peak_mib(fn) -> float:
    tracemalloc.start()
    try:
        fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / 2**20


def batch_sets(plan):
    return {tuple(sorted(b.tolist())) for b in plan.batches()}


def balance_table(name: str, sizes: gb.GraphSizes, bs: int, repeats: int, seed: int) -> list:
    print(f"\n## {name}: {describe(sizes)}; batch_size={bs} ({bs - 1} real graphs + 1 padding)")
    if sizes.n_bytes is not None:
        mb = sizes.n_bytes / 1e6
        print(f"graph MB: mean {mb.mean():.2f}, median {np.median(mb):.2f}, std {mb.std():.2f}, "
              f"min {mb.min():.2f}, max {mb.max():.2f}")
    rows = []
    base_max = None
    for strat, opts in STRATEGIES:
        plan, secs = timed(lambda: gb.plan(sizes, strat, batch_size=bs, seed=seed, **opts), repeats)
        peak = peak_mib(lambda: gb.plan(sizes, strat, batch_size=bs, seed=seed, **opts))
        s = plan.stats()
        if base_max is None:
            base_max = s.cost_max
        rows.append({
            "strategy": label(strat, opts),
            "cost": s.cost_source,
            "max/mean": f"{s.cost_max_over_mean:.4f}",
            "p99/mean": f"{s.cost_p99 / s.cost_mean:.4f}",
            "max vs random": f"{100 * (s.cost_max / base_max - 1):+.1f}%",
            "outliers": plan.meta.get("outliers", "-"),
            "shapes": s.distinct_shapes,
            "plan s": f"{secs:.3f}",
            "peak MiB": f"{peak:.0f}",
        })
    print_table(rows)
    return rows


def epoch_table(sizes: gb.GraphSizes, bs: int, seed: int, epochs: int) -> list:
    print(f"\n## assignment across epochs ({epochs} epochs, seed {seed})")
    rows = []
    for strat in ("random", "iqr", "kk", "stratified"):
        plans = [gb.plan(sizes, strat, batch_size=bs, seed=seed, epoch=e) for e in range(epochs)]
        again = gb.plan(sizes, strat, batch_size=bs, seed=seed, epoch=0)
        same = all(np.array_equal(getattr(again, k), getattr(plans[0], k))
                   for k in ("order", "offsets", "pad_nodes", "pad_edges"))
        sets = [batch_sets(p) for p in plans]
        shared = [len(sets[e] & sets[e - 1]) / len(sets[e]) for e in range(1, epochs)]
        ratios = [p.stats().cost_max_over_mean for p in plans]
        rows.append({
            "strategy": strat,
            "same plan for same (seed, epoch)": same,
            "batches kept from previous epoch": f"{100 * max(shared):.1f}%",
            "max/mean worst epoch": f"{max(ratios):.4f}",
        })
    print_table(rows)
    return rows


def distributed_table(tables, bs: int, world: int, seed: int) -> list:
    print(f"\n## --world-size {world}: per-step imbalance across ranks (mean / worst step)")
    rows = []
    names = ["dynamic", "static-64", "pack-lpf", "random", "iqr", "kk", "stratified"]
    for tname, sizes in tables:
        for strat in names:
            if strat not in gb.strategy_names():
                continue
            plan, secs = timed(
                lambda: gb.plan(sizes, strat, batch_size=bs, seed=seed, world_size=world), 1)
            s = plan.stats()
            grid = np.zeros((s.num_steps, world))
            grid[plan.step, plan.rank] = plan.real_nodes
            full = (plan.graphs_per_batch.reshape(s.num_steps, world) > 0).all(axis=1)
            worst_full = float((grid[full].max(axis=1) / grid[full].mean(axis=1)).max())
            rows.append({
                "table": tname,
                "strategy": strat,
                "steps": s.num_steps,
                "nodes max/mean": f"{s.step_node_imbalance_mean:.4f} / "
                                  f"{s.step_node_imbalance_max:.3f}",
                "edges max/mean": f"{s.step_edge_imbalance_mean:.4f} / "
                                  f"{s.step_edge_imbalance_max:.3f}",
                "nodes worst full step": f"{worst_full:.3f}",
                "padding-only": s.padding_only_batches,
                "shapes": s.distinct_shapes,
                "plan s": f"{secs:.3f}",
            })
    print_table(rows)
    return rows


def main(argv=None) -> None:
    ap = parser(__doc__, with_threads=False)
    ap.add_argument("--quick", action="store_true", help="30,000 graphs instead of ~300,000")
    ap.add_argument("--batch-size", type=int, default=65, help="incl. one padding graph")
    ap.add_argument("--world-size", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=2, help="timings: best of R")
    args = ap.parse_args(argv)
    info = start(args)
    n_hep = 30_000 if args.quick else HEP_GRAPHS
    n_qm9 = 30_000 if args.quick else 300_000
    hep = hep_like_sizes(n_hep, seed=args.seed)
    qm9_full, source = qm9_like_sizes(n_qm9, seed=args.seed)
    print(f"QM9 source: {source}")
    results = {
        "hep": balance_table("HEP-like (log-normal bytes)", hep, args.batch_size, args.repeats,
                             args.seed),
        "qm9": balance_table("QM9 radius-6 Å (cost = nodes + edges)", qm9_full, args.batch_size,
                             args.repeats, args.seed),
        "epochs": epoch_table(hep.subset(np.arange(min(n_hep, 60_000))), args.batch_size,
                              args.seed, 4),
        "distributed": distributed_table([("QM9", qm9_full), ("HEP", hep)], args.batch_size,
                                         args.world_size, args.seed),
    }
    finish(args, info, results)


if __name__ == "__main__":
    main()
