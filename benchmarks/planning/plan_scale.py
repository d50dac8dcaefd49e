"""Planning at scale: time and peak memory of one epoch's plan for up to 100M graphs.

Each configuration (table x strategy x world_size x graphs) runs in a fresh subprocess pinned to
one thread. The child builds the size table (the shipped MOSES or QM9 table resampled with
replacement, in chunks), resets the kernel's peak-RSS counter (``/proc/self/clear_refs``), plans
with ``graphbatch.plan`` and reports wall time, CPU time and the peak resident memory *during
planning* (``VmHWM``; it includes the size table itself, whose int64 columns are listed apart),
plus the process's lifetime ``ru_maxrss``. Results are printed side by side.

    python -m benchmarks.planning.plan_scale [--graphs 1e6 1e7 1e8] \
        [--strategies dynamic pack-lpf kk] [--world-sizes 8 64] [--tables moses qm9]
    # A/B against an older commit: git archive OLD src | tar -x -C /tmp/old
    python -m benchmarks.planning.plan_scale --graphs 1e7 --baseline-src /tmp/old/src
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from importlib import resources

import numpy as np

from benchmarks._harness import DATA, child_env, finish, module_command, parser, start

TABLES = {
    "moses": DATA / "moses_train_sizes.npz",
    "qm9": None,  # graphbatch/data/qm9_radius6_sizes.npz
}


def _table_path(name: str) -> str:
    if name == "qm9":
        return str(resources.files("graphbatch") / "data" / "qm9_radius6_sizes.npz")
    return str(TABLES[name])


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def resampled_sizes(table: str, n: int, seed: int = 0):
    """``n`` graphs drawn with replacement from ``table``, built chunk by chunk straight into
    the int64 columns (no per-graph temporaries beyond one chunk)."""
    import graphbatch as gb

    base = np.load(_table_path(table), allow_pickle=False)
    bn = base["n_node"].astype(np.int64)
    be = base["n_edge"].astype(np.int64)
    rng = np.random.default_rng(seed)
    nn = np.empty(n, np.int64)
    ne = np.empty(n, np.int64)
    chunk = 1 << 22
    for s in range(0, n, chunk):
        idx = rng.integers(0, bn.shape[0], size=min(chunk, n - s))
        nn[s:s + idx.shape[0]] = bn[idx]
        ne[s:s + idx.shape[0]] = be[idx]
    sizes = gb.GraphSizes(nn, ne)  # copies: the chunked columns are freed below
    del nn, ne
    return sizes


def child(args) -> None:
    import gc
    import resource

    import graphbatch as gb

    sizes = resampled_sizes(args.table, args.n)
    gc.collect()
    base_rss = _status_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:  # reset VmHWM (peak RSS) to the current RSS
        f.write("5")
    t0, c0 = time.perf_counter(), time.process_time()
    plan = gb.plan(sizes, args.strategy, batch_size=args.batch_size, seed=0,
                   world_size=args.world_size)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = _status_kib("VmHWM")
    out = dict(table=args.table, strategy=args.strategy, world_size=args.world_size, n=args.n,
               wall_s=wall, cpu_s=cpu, peak_plan_mib=peak / 1024, base_mib=base_rss / 1024,
               table_mib=(sizes.n_node.nbytes + sizes.n_edge.nbytes) / 2**20,
               plan_mib=sum(v.nbytes for v in plan.to_arrays().values()) / 2**20,
               maxrss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
               batches=len(plan), steps=plan.num_steps)
    print(json.dumps(out))


def run_one(table, strategy, ws, n, batch_size, timeout, src=None):
    # with `src`, plan with the graphbatch under `src` (an A/B baseline) instead of this tree's
    env = child_env(src, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    cmd = [*module_command(__spec__), "--child", "--table", table, "--strategy", strategy,
           "--world-size", str(ws), "--n", str(n), "--batch-size", str(batch_size)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(table=table, strategy=strategy, world_size=ws, n=n, error="timeout")
    if p.returncode:
        tail = (p.stderr.strip().splitlines() or ["?"])[-1]
        return dict(table=table, strategy=strategy, world_size=ws, n=n,
                    error=f"rc {p.returncode}: {tail}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    ap = parser(__doc__, with_threads=False, out_aliases=["--json"],
                out_help="also write the rows to this JSON file")
    ap.add_argument("--graphs", type=float, nargs="+", default=[1e6, 1e7, 1e8])
    ap.add_argument("--strategies", nargs="+", default=["dynamic", "pack-lpf", "kk"])
    ap.add_argument("--world-sizes", type=int, nargs="+", default=[8, 64])
    ap.add_argument("--tables", nargs="+", default=["moses", "qm9"], choices=sorted(TABLES))
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--target-seconds", type=float, default=30.0,
                    help="CPU-time target per plan at the largest graph count")
    ap.add_argument("--target-bytes", type=float, default=4.0e9,
                    help="peak-memory target (bytes) per plan at the largest graph count")
    ap.add_argument("--baseline-src", help="A/B: also plan with the graphbatch package under "
                    "this src directory (e.g. an exported older commit), alternating with this "
                    "tree's, and print the CPU-time ratios")
    ap.add_argument("--rounds", type=int, default=1, help="A/B rounds (baseline, this tree)")
    # child mode
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--table", help=argparse.SUPPRESS)
    ap.add_argument("--strategy", help=argparse.SUPPRESS)
    ap.add_argument("--world-size", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args)
        return
    info = start(args)
    if args.baseline_src:
        ab(args)
        return
    print(f"batch_size {args.batch_size}, one thread per run, each run a fresh process")
    head = (f"{'table':<6}{'strategy':<10}{'ws':>4}{'graphs':>12}{'wall s':>9}{'cpu s':>8}"
            f"{'peak MiB':>10}{'table MiB':>10}{'plan MiB':>10}{'batches':>10}")
    print(head, flush=True)
    rows = []
    for n in (int(g) for g in args.graphs):
        for table in args.tables:
            for strategy in args.strategies:
                for ws in args.world_sizes:
                    r = run_one(table, strategy, ws, n, args.batch_size, args.timeout)
                    rows.append(r)
                    if "error" in r:
                        print(f"{table:<6}{strategy:<10}{ws:>4}{n:>12,}  {r['error']}", flush=True)
                        continue
                    print(f"{table:<6}{strategy:<10}{ws:>4}{n:>12,}{r['wall_s']:>9.1f}"
                          f"{r['cpu_s']:>8.1f}{r['peak_plan_mib']:>10.0f}{r['table_mib']:>10.0f}"
                          f"{r['plan_mib']:>10.0f}{r['batches']:>10,}", flush=True)
    report(rows, args.target_seconds, args.target_bytes)
    finish(args, info, rows)


def ab(args) -> None:
    """Each configuration planned by the baseline and by this tree, alternating for
    ``--rounds`` rounds (same machine, same load period): CPU s, peak MiB and the ratio of the
    medians (this tree / baseline)."""
    print(f"A/B: baseline {args.baseline_src} vs this tree, {args.rounds} round(s), "
          f"load {os.getloadavg()[0]:.1f}")
    for n in (int(g) for g in args.graphs):
        for table in args.tables:
            for strategy in args.strategies:
                for ws in args.world_sizes:
                    got = {"base": [], "new": []}
                    for _ in range(args.rounds):
                        for who, src in (("base", args.baseline_src), ("new", None)):
                            load = os.getloadavg()[0]
                            r = run_one(table, strategy, ws, n, args.batch_size, args.timeout,
                                        src)
                            if "error" in r:
                                print(f"{who} {table} {strategy} {ws} {n:,}: {r['error']}")
                                continue
                            got[who].append(r["cpu_s"])
                            print(f"{who:<5}{table:<6}{strategy:<10}{ws:>4}{n:>12,}"
                                  f"{r['cpu_s']:>8.1f} cpu s{r['wall_s']:>8.1f} wall s"
                                  f"{r['peak_plan_mib']:>7.0f} MiB  load {load:.1f}", flush=True)
                    if got["base"] and got["new"]:
                        ratio = float(np.median(got["new"]) / np.median(got["base"]))
                        print(f"{'':5}{table:<6}{strategy:<10}{ws:>4}{n:>12,}  cpu new/base "
                              f"{ratio:.2f}", flush=True)


def report(rows, target_s: float, target_bytes: float) -> None:
    """Targets per configuration at the largest graph count (CPU seconds and peak bytes during
    planning, both measured in the child), and the growth from the smallest to the largest."""
    ok = [r for r in rows if "error" not in r]
    if not ok:
        return
    top = max(r["n"] for r in ok)
    low = min(r["n"] for r in ok)
    print(f"\ntargets at {top:,} graphs: cpu <= {target_s:g} s, peak <= {target_bytes:.3g} bytes "
          f"({target_bytes / 2**20:.0f} MiB)")
    print(f"{'table':<6}{'strategy':<10}{'ws':>4}{'cpu s':>8}{'peak MiB':>10}  time    memory")
    for r in ok:
        if r["n"] != top:
            continue
        t_ok = r["cpu_s"] <= target_s
        m_ok = r["peak_plan_mib"] * 2**20 <= target_bytes
        print(f"{r['table']:<6}{r['strategy']:<10}{r['world_size']:>4}{r['cpu_s']:>8.1f}"
              f"{r['peak_plan_mib']:>10.0f}  {'met' if t_ok else 'NOT met':<8}"
              f"{'met' if m_ok else 'NOT met'}")
    if low == top:
        return
    counts = sorted({r["n"] for r in ok})
    print(f"\ngrowth (cpu s / peak MiB) from {low:,} to {top:,} graphs")
    print(f"{'table':<6}{'strategy':<10}{'ws':>4}"
          + "".join(f"{n:>16,}" for n in counts) + f"{'time x':>9}{'B/graph':>9}")
    keys = sorted({(r["table"], r["strategy"], r["world_size"]) for r in ok})
    for key in keys:
        by_n = {r["n"]: r for r in ok if (r["table"], r["strategy"], r["world_size"]) == key}
        cells = "".join(f"{by_n[n]['cpu_s']:>9.1f}/{by_n[n]['peak_plan_mib']:<6.0f}"
                        if n in by_n else f"{'-':>16}" for n in counts)
        ratio = (f"{by_n[top]['cpu_s'] / max(by_n[low]['cpu_s'], 1e-9):>8.0f}x"
                 if top in by_n and low in by_n else f"{'-':>9}")
        per = (f"{by_n[top]['peak_plan_mib'] * 2**20 / top:>9.1f}" if top in by_n
               else f"{'-':>9}")
        print(f"{key[0]:<6}{key[1]:<10}{key[2]:>4}{cells}{ratio}{per}")


if __name__ == "__main__":
    main()
