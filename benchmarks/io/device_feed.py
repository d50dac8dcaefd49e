"""The training process's CPU per batch: `gt.DeviceFeed` beside the current path (issue 36).

One run, store-fed ``graphbatch.torch.loader`` over a QM9 radius-6 Å store (``--store``, or
the first ``--limit`` molecules built into a temporary folder with ``graphbatch data build
qm9``), DataLoader workers (``--workers``, persistent), ``--batch-size`` graphs per batch,
the same plan for every path; in interleaved rounds (each round one epoch of each path, in
turn, after one warm-up epoch each), per batch:

- ``DataLoader alone``: the workers' messages, taken and dropped (no batch is made: the floor
  that the DataLoader's own machinery costs the training process);
- ``DataLoader alone (groups)``: the same with ``--group`` planned batches per DataLoader task
  (the floor of the grouped feed);
- ``loader + .to``: ``for batch in loader: batch = batch.to(device, non_blocking=True)`` -- the
  current path (the main copies each batch out of its slot and builds it);
- ``prefetch + .to``: the same through ``graphbatch.torch.prefetch(loader, 2)`` (a thread;
  pinned on CUDA);
- ``DeviceFeed group 1``: ``for batch in DeviceFeed(loader, device, depth, group=1)`` -- one
  planned batch per DataLoader task (the feed before grouping);
- ``DeviceFeed``: ``for batch in DeviceFeed(loader, device, depth, group=--group)`` -- each
  DataLoader task makes ``--group`` planned batches (one message, one queue round trip).

Columns: ``main CPU ms``: the main thread's CPU time (``time.thread_time``); ``process CPU
ms``: the whole training process's (``time.process_time``: every thread of it -- a prefetch
thread, the DataLoader's queue threads -- and none of the workers); ``wall ms``; each per
batch, the median over rounds; ``first batch ms``: wall time from the start of an epoch to its
first batch (planning the epoch, the persistent workers' restart, the first task), the median
over rounds. ``--step-ms`` sleeps that long per batch (a device step the host
waits for; it costs no CPU). The issue's target: DeviceFeed's process CPU <= 0.15 ms per batch
of 128. The first line gives the CPU model, CPUs, threads and load (on 2 cores a load near 2
or above means no free core, and every CPU time grows with it).

    python -m benchmarks.io.device_feed [--store qm9.h5] [--rounds 5] [--device cuda]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader

import graphbatch.torch as gt
from graphbatch.datasets import GraphStore

from benchmarks._harness import finish, parser, print_table
from benchmarks._harness import start as start_run

PATHS = ("DataLoader alone", "DataLoader alone (groups)", "loader + .to", "prefetch + .to",
         "DeviceFeed group 1", "DeviceFeed")


def _messages(ld, group: int = 1):
    """The raw worker messages of one pass (nothing received or built), ``group`` batches per
    DataLoader task (a tuple of messages each)."""
    with ld.collate_fn.raw_pass(group=group):
        it, _ = ld.collate_fn.start_pass(ld, lambda: DataLoader.__iter__(ld))
    return (m for msgs in it for m in (msgs if type(msgs) is tuple else (msgs,)))


def _epoch(path: str, ld, device: torch.device, depth: int, group: int, step_s: float) -> tuple:
    """One epoch of ``path``: batches, main-thread CPU s, process CPU s, wall s, wall s to the
    first batch."""
    cuda = device.type == "cuda"
    if path == "DataLoader alone":
        source = _messages(ld)
    elif path == "DataLoader alone (groups)":
        source = _messages(ld, group)
    elif path == "loader + .to":
        source = (b.to(device, non_blocking=True) for b in ld)
    elif path == "prefetch + .to":
        source = (b.to(device, non_blocking=True) for b in gt.prefetch(ld, 2, pin_memory=cuda))
    elif path == "DeviceFeed group 1":
        source = gt.DeviceFeed(ld, device, depth, group=1)
    else:
        source = gt.DeviceFeed(ld, device, depth, group=group)
    n, first = 0, 0.0
    t0, c0, w0 = time.thread_time(), time.process_time(), time.perf_counter()
    for _ in source:
        if not n:
            first = time.perf_counter() - w0
        n += 1
        if step_s:
            time.sleep(step_s)
    if cuda:
        torch.cuda.synchronize(device)
    return n, time.thread_time() - t0, time.process_time() - c0, time.perf_counter() - w0, first


def build_qm9(limit: int, folder: Path) -> Path:
    path = folder / "qm9.h5"
    cmd = [sys.executable, "-m", "graphbatch.cli", "data", "build", "qm9", "--limit", str(limit)]
    subprocess.run([*cmd, "--no-progress", "--out", str(path)], check=True, capture_output=True)
    return path


def main() -> None:
    p = parser(__doc__, threads=1)
    p.add_argument("--store", help="a QM9 store (default: build one of --limit molecules)")
    p.add_argument("--limit", type=int, default=6000, help="molecules of the built store")
    p.add_argument("--strategy", default="dynamic")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--group", type=int, default=8, help="DeviceFeed's batches per task")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--step-ms", type=float, default=0.0)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--paths", default=",".join(PATHS), help="comma-separated, of: " + ", ".join(PATHS))
    args = p.parse_args()
    info = start_run(args)
    device = torch.device(args.device)
    paths = [x.strip() for x in args.paths.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        path = args.store or str(build_qm9(args.limit, Path(tmp)))
        store = GraphStore(path)
        kw = dict(strategy=args.strategy, batch_size=args.batch_size, seed=0,
                  dataloader_kwargs={"num_workers": args.workers, "persistent_workers": True})
        loaders = {name: gt.loader(store, **kw) for name in paths}
        print(f"# {path}: {len(store):,} graphs, {len(loaders[paths[0]])} batches of "
              f"{args.batch_size} per epoch, {args.workers} workers, device {device}, "
              f"depth {args.depth}, group {args.group}, step {args.step_ms} ms", flush=True)
        step_s = args.step_ms / 1000
        for name in paths:  # warm-up: workers started, caches made
            _epoch(name, loaders[name], device, args.depth, args.group, step_s)
        per = {name: [] for name in paths}
        for _ in range(args.rounds):
            for name in paths:
                per[name].append(_epoch(name, loaders[name], device, args.depth, args.group, step_s))
    rows = []
    for name in paths:
        runs = per[name]

        def med(k: int, runs=runs) -> float:
            return round(statistics.median(r[k] / r[0] for r in runs) * 1e3, 4)

        rows.append({"path": name, "batches": runs[0][0], "main CPU ms": med(1),
                     "process CPU ms": med(2), "wall ms": med(3),
                     "first batch ms": round(statistics.median(r[4] for r in runs) * 1e3, 2)})
    print_table(rows, title="per batch, median of rounds")
    print(f"# load at the end: {' '.join(f'{x:.2f}' for x in __import__('os').getloadavg())}")
    finish(args, info)


if __name__ == "__main__":
    main()
