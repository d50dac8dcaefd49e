"""Sharded MOSES build on a local Dask cluster (issue 17 part 3): 2 engine workers vs 1, side
by side, and equality with the single-file build of the same records.

One run builds the first ``--limit`` MOSES SMILES

- as one file (`graphbatch.datasets.build_store`, ``workers=1``: conversion in this process);
- as ``--shards`` shard stores plus a manifest (`graphbatch.datasets.build_sharded_store`) on a
  local Dask cluster of 1 worker process, then of 2 (``--workers``), in alternating rounds
  (``--rounds``), so each ratio compares builds measured in the same minutes of a shared
  machine;

and reports per build: driver wall seconds (records loaded, cluster started, manifest written),
engine wall seconds (first task submitted to last shard done: the part the workers speed up),
CPU seconds per graph summed over the shard tasks (``time.process_time`` in each worker), and
the load average. Next to each round, a control with no Dask and no I/O: the same pure-Python
CPU loop split over 1 and over 2 processes (``multiprocessing``), whose ratio is the parallel
speed-up the machine offers this build at that moment (on a shared machine with the kernel's
per-session CPU fairness, ``sched_autogroup``, it can be far below 2). Then it checks that
every sharded store's size table and graphs (every array of ``arrays(0, N)``) equal the
single-file build's. ``--read-batches N`` then times N batch reads from both stores.

    PYTHONPATH=src python benchmarks/sharded_build.py --limit 50000 --shards 4 \\
        --out-dir /tmp/shardbench [--rounds 2] [--read-batches 300]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np

from graphbatch.datasets import GraphStore, build_sharded_store, build_store


def _cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines()
                    if line.startswith("Model name"))
    except (OSError, subprocess.CalledProcessError, StopIteration):
        return platform.processor() or "unknown"


def _burn(n: int) -> float:
    t = time.process_time()
    s = 0
    for i in range(n):
        s += i * i
    return time.process_time() - t


def _control(n: int = 6_000_000) -> float:
    """Wall-time ratio of 4 equal CPU loops on 1 process vs on 2 processes."""
    import multiprocessing

    walls = {}
    for procs in (1, 2):
        t = time.perf_counter()
        with multiprocessing.get_context("spawn").Pool(procs) as pool:
            pool.map(_burn, [n] * 4)
        walls[procs] = time.perf_counter() - t
    return walls[1] / walls[2]


def _same(a: GraphStore, b: GraphStore) -> bool:
    if not (np.array_equal(a.n_node, b.n_node) and np.array_equal(a.n_edge, b.n_edge)):
        return False
    x, y = a.arrays(0, len(a)), b.arrays(0, len(b))
    if not np.array_equal(x.edge_index, y.edge_index):
        return False
    return all(np.array_equal(v, getattr(y, level)[k]) and v.dtype == getattr(y, level)[k].dtype
               for level in ("node", "edge", "graph") for k, v in getattr(x, level).items())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--limit", type=int, default=50_000)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--read-batches", type=int, default=0,
                   help="then time this many pack-lpf batches (batch size 128) read by "
                        "read_batch from the single file and from the last sharded build")
    p.add_argument("--out-dir", required=True)
    args = p.parse_args()
    out = Path(args.out_dir)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    print(f"CPU: {_cpu_model()}, {os.cpu_count()} logical CPUs; load average at start "
          f"{os.getloadavg()}")

    t0, c0 = time.perf_counter(), time.process_time()
    ref = build_store("moses", out / "single.h5", limit=args.limit, workers=1)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"single file, in process: {ref.n_graph} graphs, {wall:.1f} s wall, "
          f"{1e3 * cpu / ref.n_graph:.3f} CPU ms/graph (incl. reading the CSV); load "
          f"{os.getloadavg()[0]:.2f}")
    single = GraphStore(ref.path)

    rows = []
    controls = []
    for r in range(args.rounds):
        controls.append(_control())
        print(f"round {r}: control (pure CPU loop, 2 processes vs 1): x{controls[-1]:.2f}; "
              f"load {os.getloadavg()[0]:.2f}", flush=True)
        for w in args.workers:
            manifest = out / f"w{w}-r{r}" / "moses.json"
            load0 = os.getloadavg()[0]
            rep = build_sharded_store("moses", manifest, shards=args.shards, workers=w,
                                      limit=args.limit)
            load1 = os.getloadavg()[0]
            same = _same(single, GraphStore(manifest, verify=True))
            rows.append((w, r, rep, same, load0, load1))
            print(f"round {r}, {w} worker(s), {args.shards} shards: driver {rep.seconds:.1f} s, "
                  f"engine {rep.engine_seconds:.1f} s, shard CPU "
                  f"{1e3 * rep.cpu_seconds_per_graph:.3f} ms/graph, shard wall "
                  f"{[round(s, 1) for s in rep.shard_seconds]}; equals single file: {same}; "
                  f"load {load0:.2f} -> {load1:.2f}", flush=True)
    print()
    print("| workers | round | driver wall s | engine wall s | CPU ms/graph | graphs/s (engine) "
          "| equal to single file | load avg (1 min) before -> after |")
    print("|---|---|---|---|---|---|---|---|")
    for w, r, rep, same, l0, l1 in rows:
        print(f"| {w} | {r} | {rep.seconds:.1f} | {rep.engine_seconds:.1f} | "
              f"{1e3 * rep.cpu_seconds_per_graph:.3f} | {rep.n_graph / rep.engine_seconds:.0f} | "
              f"{same} | {l0:.2f} -> {l1:.2f} |")
    for r in range(args.rounds):
        by_w = {w: rep for w, rr, rep, *_ in rows if rr == r}
        if 1 in by_w and 2 in by_w:
            one, two = by_w[1], by_w[2]
            print(f"round {r}: 2 workers vs 1: engine wall "
                  f"x{one.engine_seconds / two.engine_seconds:.2f}, driver wall "
                  f"x{one.seconds / two.seconds:.2f}; control (machine) x{controls[r]:.2f}")
    if args.read_batches and rows:
        _read_speed(single, GraphStore(rows[-1][2].path), args.read_batches)
    print(f"load average at end {os.getloadavg()}")


def _read_speed(single: GraphStore, sharded: GraphStore, n: int) -> None:
    """Batch reads (torch layout) of one plan from both stores in alternating rounds."""
    import graphbatch as gb

    plan = gb.plan(single.graph_sizes(), "pack-lpf", batch_size=128, seed=0)
    batches = [(idx, plan.shape(b)) for b, idx in zip(range(n), plan.batches())]
    best = {"single file": [], "sharded": []}
    for _ in range(3):
        for name, store in (("single file", single), ("sharded", sharded)):
            t, c = time.perf_counter(), time.process_time()
            for idx, shape in batches:
                store.read_batch(idx, shape)
            best[name].append((time.perf_counter() - t, time.process_time() - c))
    for name, runs in best.items():
        wall, cpu = min(runs)
        print(f"read_batch, {name}: {1e3 * wall / len(batches):.2f} ms/batch wall, "
              f"{1e3 * cpu / len(batches):.2f} ms/batch CPU (best of 3, {len(batches)} "
              f"batches of {sharded.n_shards} shards)")
    ratio = min(best["sharded"])[1] / min(best["single file"])[1]
    print(f"sharded / single-file CPU per batch: x{ratio:.2f}")


if __name__ == "__main__":
    main()
