"""Per-epoch cost of the plan consistency check (issue 26, part 3) in a 2-process gloo job.

Each rank builds two `PlanBatchSampler`s over the same size table and plan request, one with
``verify_plan=True`` (the default) and one with ``verify_plan=False``, and runs several epochs
of each side by side: ``iter(sampler)`` (plans the epoch) and then the first ``next`` (the
checking sampler digests the epoch's plan and all-gathers 192 bytes per rank there). The
overhead of an epoch is the checking sampler's first ``next`` minus the other's (it includes
waiting for the slower rank: the all-gather synchronises them). Printed per size table:
planning time per epoch, the check's per-epoch overhead (median over epochs 1..E-1; epoch 0
also hashes the size table once), hashing one plan alone (`plan_digest`), the all-gather alone,
and overhead / planning.

    python -m benchmarks.planning.plan_verify [--graphs 130831 1000000 10000000]
        [--epochs 5] [--strategy dynamic] [--batch-size 32] [--threads 1]

Size tables: the shipped QM9 radius-6 table (130,831 graphs), resampled with replacement to
the larger counts.
"""

from __future__ import annotations

import os
import socket
import statistics
import time
from importlib import resources

import numpy as np

from benchmarks._harness import parser, start, write_json


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _table(n: int):
    import graphbatch as gb

    with resources.as_file(resources.files("graphbatch") / "data" / "qm9_radius6_sizes.npz") as p:
        qm9 = gb.GraphSizes.load(p)
    if n == len(qm9):
        return qm9
    pick = np.random.default_rng(n).integers(0, len(qm9), n)
    return gb.GraphSizes(qm9.n_node[pick], qm9.n_edge[pick])


def _rank(rank: int, port: int, args, out) -> None:
    import torch
    import torch.distributed as dist

    import graphbatch.torch as gt
    from graphbatch._consistency import ROW_WORDS, plan_digest

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    rows = []
    for n in args.graphs:
        sizes = _table(n)
        kw = dict(batch_size=args.batch_size, seed=0)
        on = gt.PlanBatchSampler(sizes, args.strategy, **kw)
        off = gt.PlanBatchSampler(sizes, args.strategy, verify_plan=False, **kw)
        plan_s, over_s = [], []
        for epoch in range(args.epochs):
            firsts = {}
            for name, s in (("on", on), ("off", off)) if epoch % 2 else (("off", off), ("on", on)):
                s.set_epoch(epoch)
                dist.barrier()
                t0 = time.perf_counter()
                it = iter(s)  # plans the epoch
                t1 = time.perf_counter()
                next(it)  # the checking sampler verifies here
                t2 = time.perf_counter()
                firsts[name] = t2 - t1
                if name == "on":
                    plan_s.append(t1 - t0)
            over_s.append(firsts["on"] - firsts["off"])
        row = torch.zeros(ROW_WORDS, dtype=torch.int64)  # what the check sends
        gathered = [torch.empty_like(row) for _ in range(2)]
        gathers = []
        for _ in range(50):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_gather(gathered, row)
            gathers.append(time.perf_counter() - t0)
        hashes = []
        for epoch in range(args.epochs):
            plan = off.plan_for_epoch(epoch)
            t0 = time.perf_counter()
            plan_digest(plan)
            hashes.append(time.perf_counter() - t0)
        rows.append(dict(graphs=n, plan_ms=1e3 * statistics.median(plan_s[1:] or plan_s),
                         hash_ms=1e3 * statistics.median(hashes),
                         first_ms=1e3 * over_s[0],
                         verify_ms=1e3 * statistics.median(over_s[1:] or over_s),
                         gather_ms=1e3 * statistics.median(gathers)))
    if rank == 0:
        out.extend(rows)
        _print(rows, args)
        if args.out:
            write_json(args.out, rows, args.machine)
    dist.destroy_process_group()


def _print(rows, args) -> None:
    print(f"plan consistency check, 2 ranks (gloo), strategy {args.strategy}, batch size "
          f"{args.batch_size}, {args.threads} torch thread(s) per rank, rank 0's times")
    print(f"{'graphs':>11} {'plan ms/epoch':>14} {'check ms/epoch':>15} {'epoch 0 ms':>11} "
          f"{'plan hash ms':>13} {'gather ms':>10} {'check/plan':>11}")
    for r in rows:
        print(f"{r['graphs']:>11,} {r['plan_ms']:>14.1f} {r['verify_ms']:>15.2f} "
              f"{r['first_ms']:>11.2f} {r['hash_ms']:>13.2f} {r['gather_ms']:>10.3f} "
              f"{r['verify_ms'] / r['plan_ms']:>10.1%}")


def main(argv=None) -> None:
    ap = parser(__doc__, threads=1, threads_help="torch threads per rank (default: 1)")
    ap.add_argument("--graphs", type=int, nargs="+", default=[130_831, 1_000_000, 10_000_000])
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--strategy", default="dynamic")
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args(argv)
    import torch.multiprocessing as mp

    args.machine = start(args)

    print(f"load average {os.getloadavg()[0]:.1f}; cores {os.cpu_count()}")
    mp.start_processes(_rank, args=(_free_port(), args, []), nprocs=2, join=True,
                       start_method="spawn")


if __name__ == "__main__":
    main()
