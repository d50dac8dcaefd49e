"""Planning each epoch in the training process: the loaders' schedule against a fresh plan.

A loader plans every epoch in the training process when its first batch is asked for (the
DataLoader's sampler); the GPU waits meanwhile. The schedule (`graphbatch._schedule`, what
``graphbatch.torch.loader`` and ``graphbatch.jax.loader`` drive) does a strategy's
epoch-independent work once -- the packs of ``pack-*`` and ``buckets``, ``dynamic``'s tight
shape (`graphbatch.planners.planning_memo`) -- and then deals each epoch; ``graphbatch.plan``
per epoch does everything every epoch (what the schedule did before). Both give the same plans
(checked here, digest for digest). Per strategy, on the shipped QM9 radius-6 Å size table
resampled to ``--graphs`` graphs, batch size ``--batch-size``, epochs 1..``--epochs`` (epoch 0
first, untimed), interleaved: ms per epoch and µs per batch, the median of ``--rounds``.

    python -m benchmarks.planning.epoch_plans [--graphs 20000] [--epochs 10] [--rounds 3]
"""

from __future__ import annotations

import statistics
import time

import graphbatch as gb
from graphbatch._consistency import plan_digest
from graphbatch._schedule import EpochSchedule

from benchmarks._harness import finish, parser, print_table, qm9_like_sizes
from benchmarks._harness import start as start_run

STRATEGIES = ("dynamic", "pack-lpf", "pack-spf", "buckets", "kk", "random")


def _options(strategy: str, batch_size: int) -> dict:
    return {"batch_size": batch_size, **({"num_shapes": 4} if strategy == "buckets" else {})}


def _time_schedule(sizes, strategy: str, opts: dict, epochs: int) -> tuple[float, list[str]]:
    schedule = EpochSchedule(sizes, strategy, seed=0, **opts)
    schedule.plan(0)
    t = time.perf_counter()
    digests = [plan_digest(schedule.plan(e)) for e in range(1, epochs + 1)]
    return (time.perf_counter() - t) / epochs, digests


def _time_fresh(sizes, strategy: str, opts: dict, epochs: int) -> tuple[float, list[str]]:
    gb.plan(sizes, strategy, seed=0, epoch=0, **opts)
    t = time.perf_counter()
    digests = [plan_digest(gb.plan(sizes, strategy, seed=0, epoch=e, **opts))
               for e in range(1, epochs + 1)]
    return (time.perf_counter() - t) / epochs, digests


def main() -> None:
    p = parser(__doc__, threads=1)
    p.add_argument("--graphs", type=int, default=20000)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    args = p.parse_args()
    info = start_run(args)
    sizes, _ = qm9_like_sizes(args.graphs, seed=0)
    rows = []
    for strategy in args.strategies.split(","):
        opts = _options(strategy, args.batch_size)
        batches = gb.plan(sizes, strategy, seed=0, **opts).num_batches
        fresh, memo = [], []
        for _ in range(args.rounds):
            f, fd = _time_fresh(sizes, strategy, opts, args.epochs)
            m, md = _time_schedule(sizes, strategy, opts, args.epochs)
            if fd != md:
                raise SystemExit(f"{strategy}: the schedule's plans differ from graphbatch.plan's")
            fresh.append(f)
            memo.append(m)
        f, m = statistics.median(fresh), statistics.median(memo)
        rows.append({"strategy": strategy, "batches": batches,
                     "plan per epoch ms": round(f * 1e3, 2), "schedule ms": round(m * 1e3, 2),
                     "plan us/batch": round(f / batches * 1e6, 1),
                     "schedule us/batch": round(m / batches * 1e6, 1),
                     "speed-up": round(f / m, 2)})
    print_table(rows, title=f"{args.graphs:,} graphs, batch size {args.batch_size}: "
                "planning an epoch (median of rounds; plans equal)")
    finish(args, info)


if __name__ == "__main__":
    main()
