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

Each sharded build runs as its own process, the way ``graphbatch data build moses --shards N
--workers W`` runs (this script re-invoked with ``--child``: import graphbatch, call
`build_sharded_store`, exit), so the **command wall** time covers everything a user waits for:
interpreter start and imports, reading the source, the local cluster's start, the tasks, the
manifest, the cluster's shutdown and exit. The driver's phases (``ShardedBuildReport.phases``)
are printed per build, and the **fixed serial time** = command wall - engine wall (the part
that does not shrink with more workers). ``--baseline-src DIR`` (e.g. ``git archive OLD src |
tar -x -C /tmp/old``, then ``/tmp/old/src``) adds the same builds with that older graphbatch, in
the same alternating rounds (A/B).

    python -m benchmarks.io.sharded_build --limit 50000 --shards 4 \\
        --out-dir /tmp/shardbench [--rounds 2] [--read-batches 300] [--baseline-src /tmp/old/src]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np

from benchmarks._harness import ROOT, child_env, cpu_model, module_command, parser, start


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


def _same(a, b) -> bool:
    """Whether stores ``a`` and ``b`` hold the same size table and graphs (dtypes included)."""
    if not (np.array_equal(a.n_node, b.n_node) and np.array_equal(a.n_edge, b.n_edge)):
        return False
    x, y = a.arrays(0, len(a)), b.arrays(0, len(b))
    if not np.array_equal(x.edge_index, y.edge_index):
        return False
    return all(np.array_equal(v, getattr(y, level)[k]) and v.dtype == getattr(y, level)[k].dtype
               for level in ("node", "edge", "graph") for k, v in getattr(x, level).items())


def _child(args) -> None:
    """One sharded build in this process (what the CLI does); prints its report as JSON."""
    t0 = time.perf_counter()
    from graphbatch.datasets import build_sharded_store as build

    imported = time.perf_counter() - t0
    rep = build("moses", args.child, shards=args.shards, workers=args.child_workers,
                limit=args.limit)
    print(json.dumps({"import": imported, "seconds": rep.seconds,
                      "engine_seconds": rep.engine_seconds, "n_graph": rep.n_graph,
                      "cpu_seconds": sum(rep.shard_cpu_seconds),
                      "shard_seconds": rep.shard_seconds,
                      "phases": getattr(rep, "phases", None) or {}}))


def _run_build(src: str, manifest: Path, workers: int, args) -> dict:
    """A sharded build as a separate process with graphbatch from ``src``; adds the command's
    wall seconds (``command``) to the child's report."""
    env = child_env(src)
    cmd = [*module_command(__spec__), "--child", str(manifest),
           "--child-workers", str(workers), "--shards", str(args.shards), "--limit",
           str(args.limit), "--out-dir", str(manifest.parent)]
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"build failed ({src}, {workers} workers): {proc.stderr[-2000:]}")
    rep = json.loads(proc.stdout.strip().splitlines()[-1])
    rep["command"] = wall
    rep["fixed"] = wall - rep["engine_seconds"]
    # CPU of the whole process tree (the driver and its reaped worker processes) minus the
    # shard tasks' own CPU: the fixed work's CPU, less sensitive to other jobs than wall time
    rep["command_cpu"] = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    rep["fixed_cpu"] = rep["command_cpu"] - rep["cpu_seconds"]
    return rep


def _phases(rep: dict) -> str:
    ph = rep["phases"]
    if not ph:
        return (f"(no phases in this version) driver {rep['seconds']:.2f}, engine "
                f"{rep['engine_seconds']:.2f}")
    return ", ".join(f"{k} {v:.2f}" for k, v in ph.items())


def main(argv=None) -> None:
    p = parser(__doc__, with_threads=False, with_out=False)
    p.add_argument("--limit", type=int, default=50_000)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--read-batches", type=int, default=0,
                   help="then time this many pack-lpf batches (batch size 128) read by "
                        "read_batch from the single file and from the last sharded build")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--baseline-src", help="an older graphbatch source folder (its 'src') to "
                   "build with too, in the same rounds")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--child-workers", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return _child(args)
    start(args)
    from graphbatch.datasets import GraphStore, build_store, open_store

    out = Path(args.out_dir)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    print(f"CPU: {cpu_model()}, {os.cpu_count()} logical CPUs; load average at start "
          f"{os.getloadavg()}")

    t0, c0 = time.perf_counter(), time.process_time()
    ref = build_store("moses", out / "single.h5", limit=args.limit, workers=1)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"single file, in process: {ref.n_graph} graphs, {wall:.1f} s wall, "
          f"{1e3 * cpu / ref.n_graph:.3f} CPU ms/graph (incl. reading the CSV); load "
          f"{os.getloadavg()[0]:.2f}")
    single = GraphStore(ref.path)

    here = str(ROOT / "src")
    versions = [("new", os.path.abspath(os.environ.get("PYTHONPATH", here).split(os.pathsep)[0]))]
    if args.baseline_src:
        versions.insert(0, ("old", args.baseline_src))
    rows = []
    controls = []
    for r in range(args.rounds):
        controls.append(_control())
        print(f"round {r}: control (pure CPU loop, 2 processes vs 1): x{controls[-1]:.2f}; "
              f"load {os.getloadavg()[0]:.2f}", flush=True)
        for name, src in versions:
            for w in args.workers:
                manifest = out / f"{name}-w{w}-r{r}" / "moses.json"
                load0 = os.getloadavg()[0]
                rep = _run_build(src, manifest, w, args)
                load1 = os.getloadavg()[0]
                same = _same(single, open_store(manifest, verify=True))
                rows.append((name, w, r, rep, same, load0, load1))
                print(f"round {r}, {name}, {w} worker(s), {args.shards} shards: command "
                      f"{rep['command']:.2f} s, driver {rep['seconds']:.2f} s, engine "
                      f"{rep['engine_seconds']:.2f} s, fixed {rep['fixed']:.2f} s (import "
                      f"{rep['import']:.2f}), fixed CPU {rep['fixed_cpu']:.2f} s; shard CPU "
                      f"{1e3 * rep['cpu_seconds'] / rep['n_graph']:.3f} ms/graph; equals single "
                      f"file: {same}; load {load0:.2f} -> {load1:.2f}\n    phases: "
                      f"{_phases(rep)}", flush=True)
    print()
    print("| version | workers | round | command wall s | engine wall s | fixed (command - "
          "engine) s | fixed CPU s | CPU ms/graph (tasks) | equal to single file | load avg "
          "(1 min) before -> after |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, w, r, rep, same, l0, l1 in rows:
        print(f"| {name} | {w} | {r} | {rep['command']:.2f} | {rep['engine_seconds']:.2f} | "
              f"{rep['fixed']:.2f} | {rep['fixed_cpu']:.2f} | "
              f"{1e3 * rep['cpu_seconds'] / rep['n_graph']:.3f} | {same} | {l0:.2f} -> {l1:.2f} |")
    print()
    phase_names = list(dict.fromkeys(k for *_, rep, _s, _a, _b in rows for k in rep["phases"]))
    if phase_names:
        print("| version | workers | round | import | " + " | ".join(phase_names) + " |")
        print("|---" * (4 + len(phase_names)) + "|")
        for name, w, r, rep, *_ in rows:
            if rep["phases"]:
                print(f"| {name} | {w} | {r} | {rep['import']:.2f} | " + " | ".join(
                    f"{rep['phases'].get(k, 0.0):.2f}" for k in phase_names) + " |")
        print()
    for r in range(args.rounds):
        for name, _ in versions:
            by_w = {w: rep for n, w, rr, rep, *_ in rows if rr == r and n == name}
            if 1 in by_w and 2 in by_w:
                one, two = by_w[1], by_w[2]
                print(f"round {r}, {name}: 2 workers vs 1: engine wall "
                      f"x{one['engine_seconds'] / two['engine_seconds']:.2f}, command wall "
                      f"x{one['command'] / two['command']:.2f}, fixed serial time "
                      f"{one['fixed']:.2f} / {two['fixed']:.2f} s (CPU {one['fixed_cpu']:.2f} / "
                      f"{two['fixed_cpu']:.2f} s); control (machine) "
                      f"x{controls[r]:.2f}")
    if args.read_batches and rows:
        _read_speed(single, open_store(out / f"new-w{args.workers[-1]}-r{args.rounds - 1}"
                                       / "moses.json"), args.read_batches)
    print(f"load average at end {os.getloadavg()}")


def _read_speed(single, sharded, n: int) -> None:
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
