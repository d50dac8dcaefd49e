"""Tuple packing benchmark: pack-lpf/pack-spf/buckets vs dynamic vs the published listing.

    python -m benchmarks.planning.packing [--quick]

Prints, in one run: (1) batches vs the lower bound at the dynamic budget for batch size 32 and
128 (graph cap = batch size, and 4 x batch size); (2) limits from the limit search and the
efficiency there; (3) a heavy-tailed table with oversize policies and K shapes; (4) planning
time on one core; (5) the issue-18 targets side by side: default limit search, buckets with
default options, tight shapes vs kk, distributed plans. Tables: see
benchmarks/planning/_packing_tables.py.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import signal  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import graphbatch as gb  # noqa: E402
from graphbatch._random import seed_rng  # noqa: E402
from graphbatch.packing import pack_bins, search_limits  # noqa: E402

from benchmarks._harness import finish, format_table, parser, start  # noqa: E402
from benchmarks.planning import _packing_tables as T  # noqa: E402
from benchmarks.planning._published_lpfhp import pack_using_dlpfhp  # noqa: E402


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout


def published(sizes, budget, timeout):
    """Packs and efficiencies of the published listing at the budget's capacities, or None."""
    h = sizes.histogram()
    hist = {(int(a), int(b)): int(c) for a, b, c in zip(h.n_node, h.n_edge, h.count)}
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(int(timeout))
    t0 = time.perf_counter()
    try:
        sets, reps, _ = pack_using_dlpfhp(hist, (budget.node_capacity, budget.edge_capacity),
                                          budget.graph_capacity, verbose=False)
    except _Timeout:
        return None, time.perf_counter() - t0
    finally:
        signal.alarm(0)
    dt = time.perf_counter() - t0
    packs = int(reps.sum())
    return {"batches": packs,
            "node_eff": float(sizes.n_node.sum()) / (packs * budget.n_node),
            "edge_eff": float(sizes.n_edge.sum()) / (packs * budget.n_edge),
            "seconds": dt}, dt


def timed_plan(sizes, strategy, **kw):
    """(plan, stats, wall seconds, CPU seconds of this process) of one `gb.plan` call."""
    t0, c0 = time.perf_counter(), time.process_time()
    p = gb.plan(sizes, strategy, **kw)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    p.validate(sizes)
    return p, p.stats(), dt, cpu


def run_plan(sizes, strategy, **kw):
    p, st, dt, _ = timed_plan(sizes, strategy, **kw)
    return p, st, dt


def _eff(st) -> str:
    return f"{st.node_efficiency:.4f}/{st.edge_efficiency:.4f}"


def bound_section(tables, listing_tables, timeout):
    rows = []
    for name, sizes in tables:
        for bs in (32, 128):
            est = gb.estimate_budget(sizes, bs, rng=seed_rng(0))
            for cap in (bs, 4 * bs):
                budget = gb.Budget(est.n_node, est.n_edge, cap)
                row = {"table": name, "bs": bs, "budget": f"{budget.n_node}/{budget.n_edge}/{cap}"}
                for strat in ("dynamic", "pack-lpf", "pack-spf"):
                    _, st, dt = run_plan(sizes, strat, budget=budget, on_oversize="skip")
                    row["LB"] = st.lower_bound
                    row[f"{strat}/LB"] = round(st.batches_over_bound, 4)
                    if strat == "pack-lpf":
                        row["lpf node/edge eff"] = _eff(st)
                        row["lpf s"] = round(dt, 2)
                    if strat == "dynamic":
                        row["dyn node/edge eff"] = _eff(st)
                if name in listing_tables and cap == bs:
                    res, dt = published(sizes, budget, timeout)
                    row["listing/LB"] = (round(res["batches"] / row["LB"], 4) if res
                                         else f"timeout>{timeout}s")
                    row["listing node/edge eff"] = (
                        f"{res['node_eff']:.3f}/{res['edge_eff']:.3f}" if res else "-")
                    row["listing s"] = round(dt, 1)
                else:
                    row["listing/LB"] = "not run"
                    row["listing node/edge eff"] = "-"
                    row["listing s"] = "-"
                rows.append(row)
                print(f"  .. {name} bs={bs} cap={cap}", file=sys.stderr)
    return rows


def limits_section(cases, grid, refine):
    rows = []
    for name, sizes, node_range, edge_range in cases:
        t0 = time.perf_counter()
        recs = search_limits(sizes, node_range=node_range, edge_range=edge_range, grid=grid,
                             refine=refine, method="auto")
        dt = time.perf_counter() - t0
        best = recs[0]
        budget = gb.Budget(best["max_nodes"], best["max_edges"], len(sizes) + 1)
        _, st, _ = run_plan(sizes, "pack-lpf", budget=budget)
        rows.append({"table": name, "node_range": f"{node_range[0]}:{node_range[1]}",
                     "edge_range": f"{edge_range[0]}:{edge_range[1]}", "points": len(recs),
                     "search s": round(dt, 1),
                     "best nodes/edges": f"{best['max_nodes']}/{best['max_edges']}",
                     "search node_eff": round(best["node_eff"], 4),
                     "search edge_eff": round(best["edge_eff"], 4),
                     "plan node_eff": round(st.node_efficiency, 4),
                     "plan edge_eff": round(st.edge_efficiency, 4)})
        print(f"  .. limits {name}", file=sys.stderr)
    return rows


def heavy_section(sizes):
    rows = []
    est = gb.estimate_budget(sizes, 128, rng=seed_rng(0))
    for cap in (128, 512):
        budget = gb.Budget(est.n_node, est.n_edge, cap)
        runs = [("dynamic", dict(on_oversize="skip")), ("pack-lpf", dict(on_oversize="skip")),
                ("pack-lpf", dict(on_oversize="own_batch"))]
        runs += [("buckets", dict(num_shapes=k)) for k in (1, 2, 4, 8)]
        for strat, kw in runs:
            _, st, dt = run_plan(sizes, strat, budget=budget, **kw)
            rows.append({"budget": f"{budget.n_node}/{budget.n_edge}/{cap}", "strategy": strat,
                         "options": ",".join(f"{k}={v}" for k, v in kw.items()),
                         "batches": st.num_batches, "node_eff": round(st.node_efficiency, 4),
                         "edge_eff": round(st.edge_efficiency, 4),
                         "shapes": st.distinct_shapes, "skipped": st.skipped,
                         "seconds": round(dt, 2)})
        print(f"  .. heavy cap={cap}", file=sys.stderr)
    return rows


def timing_section(tables, listing_tables, timeout):
    rows = []
    for name, sizes in tables:
        est = gb.estimate_budget(sizes, 128, rng=seed_rng(0))
        p, st, dt, cpu = timed_plan(sizes, "pack-lpf", budget=est)
        h = sizes.histogram(return_inverse=True)
        t0 = time.perf_counter()
        pack_bins(h.n_node, h.n_edge, h.count, node_limit=est.node_capacity,
                  edge_limit=est.edge_capacity, graph_limit=est.graph_capacity)
        pdt = time.perf_counter() - t0
        _, _, ddt = run_plan(sizes, "dynamic", budget=est)
        # what users run: batch_size= (estimated budget, then the tight shape)
        bs_cpu = {bs: timed_plan(sizes, "pack-lpf", batch_size=bs)[3] for bs in (32, 128)}
        ws_cpu = timed_plan(sizes, "pack-lpf", batch_size=128, world_size=8)[3]
        row = {"table": name, "graphs": len(sizes), "distinct pairs": len(h),
               "budget": str(est), "pack-lpf plan s": round(dt, 3),
               "pack-lpf plan cpu s": round(cpu, 3),
               "batch_size=32/128 cpu s": f"{bs_cpu[32]:.3f}/{bs_cpu[128]:.3f}",
               "bs128 world 8 cpu s": round(ws_cpu, 3),
               "packing only s": round(pdt, 3),
               "dynamic plan s": round(ddt, 3), "lpf/LB": round(st.batches_over_bound, 4)}
        if name in listing_tables:
            res, ldt = published(sizes, est, timeout)
            row["listing s"] = round(ldt, 1) if res else f"timeout>{timeout}s"
        else:
            row["listing s"] = "not run"
        rows.append(row)
        print(f"  .. timing {name}", file=sys.stderr)
    return rows


def v2_limits(tables):
    """Issue 18 target 1: default `search_limits`, then pack-lpf at json[0]'s limits."""
    rows = []
    for name, sizes in tables:
        t0, c0 = time.perf_counter(), time.process_time()
        recs = search_limits(sizes)
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        best = recs[0]
        _, st, _ = run_plan(sizes, "pack-lpf",
                            budget=(best["max_nodes"], best["max_edges"], len(sizes) + 1))
        rows.append({"table": name, "search s": round(dt, 2), "search cpu s": round(cpu, 2),
                     "interior": recs.interior,
                     "optimum nodes/edges": f"{best['max_nodes']}/{best['max_edges']}",
                     "searched nodes": f"{recs.node_range[0]}..{recs.node_range[1]}",
                     "points exact/est": f"{recs.exact_points}/{recs.estimated_points}",
                     "json[0] node/edge eff": f"{best['node_eff']:.4f}/{best['edge_eff']:.4f}",
                     "pack-lpf node/edge eff": _eff(st)})
        print(f"  .. v2 limits {name}", file=sys.stderr)
    return rows


def v2_buckets(tables):
    """Issue 18 target 2: `plan --strategy buckets --batch-size 128 --num-shapes K`."""
    rows = []
    for name, sizes in tables:
        for k in (4, 8):
            _, st, dt = run_plan(sizes, "buckets", batch_size=128, num_shapes=k)
            rows.append({"table": name, "graphs": len(sizes), "max nodes": int(sizes.n_node.max()),
                         "K": k, "shapes": st.distinct_shapes, "batches": st.num_batches,
                         "node/edge eff": _eff(st), "seconds": round(dt, 2)})
        print(f"  .. v2 buckets {name}", file=sys.stderr)
    return rows


def v2_tight(tables):
    """Issue 18 target 3: estimated budgets, pack-lpf (tight shape) vs kk (pad=max)."""
    rows = []
    for name, sizes in tables:
        for bs in (32, 128):
            row = {"table": name, "bs": bs}
            for strat, kw in (("kk", {"pad": "max"}), ("pack-lpf", {}), ("dynamic", {})):
                p, st, dt, cpu = timed_plan(sizes, strat, batch_size=bs, **kw)
                row[f"{strat} batches/LB"] = f"{st.num_batches}/{st.lower_bound}"
                row[f"{strat} node/edge eff"] = _eff(st)
                if strat == "pack-lpf":
                    row["lpf budget -> shape"] = (
                        "/".join(str(x) for x in p.meta["budget"]) + " -> "
                        + "/".join(str(x) for x in p.meta.get("padded_shape", [])))
                    row["lpf cpu s"] = round(cpu, 2)
            rows.append(row)
        print(f"  .. v2 tight {name}", file=sys.stderr)
    return rows


def v2_distributed(tables):
    """Issue 18 target 4: world_size 8 and 64 at batch size 128."""
    rows = []
    for name, sizes in tables:
        for world in (8, 64):
            for strat, kw in (("pack-lpf", {}), ("dynamic", {}), ("kk", {"pad": "max"})):
                p, st, dt, cpu = timed_plan(sizes, strat, batch_size=128, world_size=world, **kw)
                rows.append({"table": name, "world": world, "strategy": strat,
                             "batches": st.num_batches, "steps": st.num_steps,
                             "padding-only": st.padding_only_batches,
                             "node/edge eff": _eff(st),
                             "worst step node imbalance": round(st.step_node_imbalance_max, 3),
                             "seconds": round(dt, 2), "cpu s": round(cpu, 2)})
        print(f"  .. v2 distributed {name}", file=sys.stderr)
    return rows


def v2_main(qm9, moses, code, quick, pcqm=None):
    real = [(n, s) for n, s in (("qm9_radius6", qm9), ("moses_train", moses)) if s is not None]
    print("== 5a. issue 18: default limit search, pack-lpf at json[0] (one core) ==")
    print(format_table(v2_limits(real)))
    print()
    heavy = [(n, s) for n, s in (("code_stdlib", code),) if s is not None]
    heavy.append(("ast_like_270k", T.ast_like(60_000 if quick else 270_000)))
    print("== 5b. issue 18: buckets at batch size 128, default options ==")
    print(format_table(v2_buckets(heavy)))
    print()
    print("== 5c. issue 18: estimated budgets, pack-lpf tight shape vs kk (pad=max) ==")
    print(format_table(v2_tight(real)))
    print()
    print("== 5d. issue 18: distributed plans at batch size 128 ==")
    print(format_table(v2_distributed(real + ([("pcqm_like", pcqm)] if pcqm is not None
                                              else []))))
    print()


def main(argv=None) -> int:
    ap = parser(__doc__, with_threads=False)
    ap.add_argument("--quick", action="store_true", help="smaller synthetic tables, no listing "
                    "on large tables, coarser limit grid")
    ap.add_argument("--timeout", type=float, default=180, help="seconds per listing run")
    ap.add_argument("--sections", default="1,2,3,4,5",
                    help="comma-separated sections to run (default: all)")
    args = ap.parse_args(argv)
    info = start(args)
    run = {int(x) for x in args.sections.split(",") if x.strip()}
    qm9, moses, code = T.real("qm9_radius6"), T.real("moses_train"), T.real("code_stdlib")
    ast = T.ast_like(100_000 if args.quick else 500_000)
    pcqm = T.pcqm_like(300_000 if args.quick else 3_378_606)
    d20k = T.distinct_20k()
    tables = [(n, s) for n, s in (("qm9_radius6", qm9), ("moses_train", moses)) if s is not None]
    if code is not None:
        tables.append(("code_stdlib", code))
    tables.append(("ast_like", ast))
    listing = {"qm9_radius6"} if args.quick else {"qm9_radius6", "moses_train"}
    if 1 in run:
        print("== 1. batches / lower bound at the dynamic budget (Algorithm 1, seed 0) ==")
        print(format_table(bound_section(tables, listing, args.timeout)))
        print()
    if 2 in run:
        limits_main(qm9, moses, pcqm, args.quick)
    if 3 in run:
        for name, table in (("code_stdlib", code), ("ast_like", ast)):
            if table is None:
                continue
            print(f"== 3. heavy-tailed {name} at the batch-size-128 budget ==")
            print(format_table(heavy_section(table)))
            print()
    if 5 in run:
        v2_main(qm9, moses, code, args.quick, pcqm)
    if 4 in run:
        print("== 4. planning time (one core) at the batch-size-128 budget ==")
        ttables = [(n, s) for n, s in (("moses_train", moses),) if s is not None]
        ttables += [("pcqm_like", pcqm), ("distinct_20k", d20k)]
        print(format_table(timing_section(ttables, set() if args.quick else {"distinct_20k"},
                                          args.timeout)))
    finish(args, info)
    return 0


def limits_main(qm9, moses, pcqm, quick):
    print("== 2. limit search (method=auto), then pack-lpf at the best limits ==")
    grid, refine = (4, False) if quick else (6, True)
    cases = []
    if qm9 is not None:
        cases.append(("qm9_radius6", qm9, (240, 720), (4000, 12200)))
    if moses is not None:
        cases.append(("moses_train", moses, (56, 448), (120, 960)))
    cases.append(("pcqm_like", pcqm, (21, 63), (54, 162)))
    print(format_table(limits_section(cases, grid, refine)))
    print()


if __name__ == "__main__":
    sys.exit(main())
