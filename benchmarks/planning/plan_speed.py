"""Planning speed: every strategy vs a plain per-graph Python loop of the same algorithm.

Plans one shuffled epoch of >= 1.5M graphs and prints, side by side in one run, the time of the
library planner and of a straightforward per-graph loop (the way the algorithms are usually
written, e.g. Jraph's ``dynamically_batch`` or the paper's Algorithms 3 and 5), and their ratio.

    python -m benchmarks.planning.plan_speed [--graphs 1500000] [--batch-size 32]
"""

from __future__ import annotations

import time

import numpy as np

import graphbatch as gb
from tests._packing_util import greedy_offsets_reference

from benchmarks._harness import describe, finish, parser, qm9_like_sizes, start


def loop_static(nodes, edges, batch_size, pad):
    """Algorithm 5 per graph: take batch_size-1 graphs, sum, pad."""
    shapes = []
    cv = ce = cg = 0
    for v, e in zip(nodes, edges):
        cv += v
        ce += e
        cg += 1
        if cg == batch_size - 1:
            shapes.append(pad(cv, ce))
            cv = ce = cg = 0
    if cg:
        shapes.append(pad(cv, ce))
    return shapes


def reference(strategy, sizes, batch_size, budget, seed):
    """The plain per-graph loop for ``strategy`` (same shuffle as the library)."""
    order = gb.planners.PlanRequest(sizes, strategy, batch_size, None, seed, 0, True, "error").order()
    nodes = sizes.n_node[order].tolist()
    edges = sizes.n_edge[order].tolist()
    if strategy == "static-64":
        return loop_static(nodes, edges, batch_size,
                           lambda v, e: (-(-(v + 1) // 64) * 64, -(-max(e, 1) // 64) * 64))
    if strategy == "static-pow2":
        return loop_static(nodes, edges, batch_size,
                           lambda v, e: (1 << v.bit_length(), 1 << max(e - 1, 0).bit_length()))
    if strategy == "static-constant":
        t = (gb.round_up(max(nodes) * batch_size, 64), gb.round_up(max(edges) * batch_size, 64))
        return loop_static(nodes, edges, batch_size, lambda v, e: t)
    if strategy == "dynamic":
        return greedy_offsets_reference(np.asarray(nodes), np.asarray(edges), budget)
    return None


def main(argv=None) -> None:
    ap = parser(__doc__, with_threads=False)
    ap.add_argument("--graphs", type=int, default=1_500_000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3, help="library timings: best of R")
    args = ap.parse_args(argv)
    info = start(args)

    sizes, source = qm9_like_sizes(args.graphs, seed=args.seed)
    print(f"table: {describe(sizes)}; source: {source}; batch size {args.batch_size}")
    rows = []
    for strategy in gb.strategy_names():
        try:
            t_lib = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                plan = gb.plan(sizes, strategy, batch_size=args.batch_size, seed=args.seed)
                t_lib.append(time.perf_counter() - t0)
        except (ValueError, TypeError) as exc:
            rows.append((strategy, None, None, f"skipped: {exc}"))
            continue
        # dynamic fills to the tight shape it measured on a seed epoch (meta "padded_shape"),
        # never above the budget; the loop fills to the same shape
        shape = plan.meta.get("padded_shape") or plan.meta.get("budget")
        budget = gb.Budget(*shape) if shape else None
        t0 = time.perf_counter()
        ref = reference(strategy, sizes, args.batch_size, budget, args.seed)
        t_ref = time.perf_counter() - t0 if ref is not None else None
        if strategy == "dynamic":  # same algorithm, same answer
            assert np.array_equal(ref, plan.offsets), "library and loop disagree"
        rows.append((strategy, min(t_lib), t_ref, f"{plan.num_batches} batches"))

    print(f"{'strategy':<16}{'graphbatch s':>14}{'plain loop s':>14}{'speed-up':>10}  note")
    for name, t_lib, t_ref, note in rows:
        lib = f"{t_lib:.3f}" if t_lib is not None else "-"
        ref = f"{t_ref:.3f}" if t_ref is not None else "-"
        ratio = f"{t_ref / t_lib:.1f}x" if t_lib and t_ref else "-"
        print(f"{name:<16}{lib:>14}{ref:>14}{ratio:>10}  {note}")
    finish(args, info, [{"strategy": n, "graphbatch_s": a, "plain_loop_s": b, "note": c}
                        for n, a, b, c in rows])


if __name__ == "__main__":
    main()
