"""A/B of the prefetch thread: the current one (`graphbatch._prefetch`, consumer-paced, shared by
both adapters) against a previous implementation, side by side in one run.

``torch``: in one process, ``graphbatch.torch.loader(GraphStore(--store), strategy, batch_size)``
iterated through the current ``graphbatch.torch.prefetch`` (B) and through the ``Prefetcher`` of
an old ``graphbatch/torch/_prefetch.py`` (A, a stdlib-only file, loaded from ``--old-prefetch``),
in ``--rounds`` rounds (order A,B then B,A alternately), each side over the same batches (a
fresh loader with the same seed). Two consumers:

- ``iterate``: takes ``--steps`` batches and does nothing else (the thread is the bottleneck:
  batches/s, wall and process CPU);
- ``train``: a SchNet (`graphbatch.models`, eager; ``--hidden`` features, ``--interactions``
  blocks) forward, backward and Adam step per batch on the first QM9 target; the
  input wait is the training thread's time in ``next()``, as ``graphbatch bench`` counts it;
  ``step_thread_cpu_median_ms`` is the training thread's CPU time per step (its own work, less
  sensitive to other processes than wall time; with ``--threads 1`` it holds all of torch's).

``jax``: ``graphbatch bench --framework jax`` (short: ``--steps``, one strategy and batch size,
one repeat, the loader's ``prefetch=2``) run alternately with ``PYTHONPATH=--old-src`` (A) and
``PYTHONPATH=--new-src`` (B), ``--rounds`` times; reports the records' input wait as the bench
reports it (``input_wait_fraction``, and the median / p90 of ``input_wait_ms_steps`` over the
steady steps).

    git show bdc780f:src/graphbatch/torch/_prefetch.py > /tmp/old_prefetch.py
    python -m benchmarks.experiments.prefetch_ab torch --store /tmp/storebench/qm9.h5 \\
        --old-prefetch /tmp/old_prefetch.py
    mkdir -p /tmp/old && git archive bdc780f src | tar -x -C /tmp/old
    python -m benchmarks.experiments.prefetch_ab jax --old-src /tmp/old/src --new-src src --out /tmp/pfab
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks._harness import options, start


def _load_old(path: str):
    spec = importlib.util.spec_from_file_location("_old_prefetch", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.Prefetcher


def _stats(waits_ms: np.ndarray, steps_ms: np.ndarray, cpu_ms: np.ndarray) -> dict[str, float]:
    return {"wait_median_ms": float(np.median(waits_ms)),
            "step_thread_cpu_median_ms": float(np.median(cpu_ms)),
            "wait_p90_ms": float(np.percentile(waits_ms, 90)),
            "wait_fraction": float(waits_ms.sum() / steps_ms.sum()),
            "step_median_ms": float(np.median(steps_ms))}


def _torch_side(make_prefetcher, make_loader, mode: str, steps: int, model=None, opt=None):

    from graphbatch.models import batch_inputs
    from graphbatch.torch import masked_mean

    p = make_prefetcher(make_loader())
    waits, totals, cpu = np.zeros(steps), np.zeros(steps), np.zeros(steps)
    w0, c0 = time.perf_counter(), time.process_time()
    try:
        for k in range(steps):
            t0, c = time.perf_counter(), time.thread_time()
            b = next(p)
            t1 = time.perf_counter()
            if mode == "train":
                opt.zero_grad(set_to_none=True)
                out = model(**batch_inputs(b))
                target = b.y.reshape(out.shape[0], -1)[:, 0].to(out.dtype)  # first QM9 target
                loss = masked_mean((out - target) ** 2, b.graph_mask)
                loss.backward()
                opt.step()
            waits[k], totals[k] = (t1 - t0) * 1e3, (time.perf_counter() - t0) * 1e3
            cpu[k] = (time.thread_time() - c) * 1e3
    finally:
        p.close()
    wall, cpu_s = time.perf_counter() - w0, time.process_time() - c0
    skip = 1 if steps > 1 else 0  # the first batch: the thread has just started
    return {**_stats(waits[skip:], totals[skip:], cpu[skip:]), "wall_s": wall, "cpu_s": cpu_s,
            "batches_per_s": steps / wall}


def run_torch(args) -> dict:
    import torch

    import graphbatch.torch as gt
    from graphbatch.datasets import GraphStore
    from graphbatch.models import SchNet

    if args.threads:
        torch.set_num_threads(args.threads)
    old = _load_old(args.old_prefetch)
    store = GraphStore(args.store)
    sides = {"A old": lambda ld: old(ld, args.depth), "B new": lambda ld: gt.prefetch(ld, args.depth)}

    def make_loader():
        return gt.loader(store, strategy=args.strategy, batch_size=args.batch_size, seed=args.seed)

    torch.manual_seed(0)
    model = SchNet(hidden=args.hidden, filters=args.hidden, num_interactions=args.interactions)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    _torch_side(sides["B new"], make_loader, "train", 3, model, opt)  # warm-up, untimed
    out: dict = {"torch_threads": torch.get_num_threads(), "rounds": []}
    for r in range(args.rounds):
        order = list(sides) if r % 2 == 0 else list(sides)[::-1]
        row = {}
        for mode, steps in (("iterate", args.iterate_steps), ("train", args.steps)):
            for side in order:
                row[(mode, side)] = _torch_side(sides[side], make_loader, mode, steps, model, opt)
        out["rounds"].append(row)
        print(f"round {r}: " + ", ".join(
            f"{m} {s}: wait {v['wait_median_ms']:.2f} ms ({100 * v['wait_fraction']:.2f}%), "
            f"{v['batches_per_s']:.1f} b/s" for (m, s), v in row.items()), flush=True)
    print(f"\ntorch: {args.strategy} b={args.batch_size} depth {args.depth}, SchNet "
          f"{args.hidden}x{args.interactions}, "
          f"{args.rounds} rounds, torch threads {out['torch_threads']}; medians over rounds, "
          "ratio B/A per round then median")
    keys = ("batches_per_s", "cpu_s", "wait_median_ms", "wait_p90_ms", "wait_fraction",
            "step_median_ms", "step_thread_cpu_median_ms")
    print(f"{'consumer':8s} {'side':6s} " + " ".join(f"{k[:15]:>15s}" for k in keys))
    summary = {}
    for mode in ("iterate", "train"):
        for side in sides:
            vals = {k: float(np.median([row[(mode, side)][k] for row in out["rounds"]]))
                    for k in keys}
            summary[f"{mode} {side}"] = vals
            print(f"{mode:8s} {side:6s} " + " ".join(f"{vals[k]:15.4f}" for k in keys))
        ratios = {k: float(np.median([row[(mode, "B new")][k] / max(row[(mode, "A old")][k], 1e-12)
                                      for row in out["rounds"]])) for k in keys}
        summary[f"{mode} B/A"] = ratios
        print(f"{mode:8s} {'B/A':6s} " + " ".join(f"{ratios[k]:15.3f}" for k in keys))
    out["summary"] = summary
    out["rounds"] = [{f"{m} {s}": v for (m, s), v in row.items()} for row in out["rounds"]]
    return out


def run_jax(args) -> dict:
    out_root = Path(args.out)
    sides = {"A old": args.old_src, "B new": args.new_src}
    runs: dict[str, list[dict]] = {s: [] for s in sides}
    for r in range(args.rounds):
        order = list(sides) if r % 2 == 0 else list(sides)[::-1]
        for side in order:
            d = out_root / f"{side.split()[0]}{r}"
            env = {**os.environ, "PYTHONPATH": str(Path(sides[side]).resolve())}
            cmd = [sys.executable, "-m", "graphbatch.cli", "bench", "--framework", "jax",
                   "--strategies", args.strategy, "--batch-sizes", str(args.batch_size),
                   "--steps", str(args.steps), "--eval-every", str(args.steps),
                   "--repeats", "1", "--prefetch", str(args.depth), "--no-plots", "--quiet",
                   "--out", str(d)]
            w0 = time.perf_counter()
            subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
            rec = [x for x in json.loads((d / "results.json").read_text())
                   if x["strategy"] == args.strategy][0]
            waits = np.asarray(rec["input_wait_ms_steps"][1:])  # steady steps (first compiles)
            row = {"input_wait_fraction": rec["input_wait_fraction"],
                   "wait_median_ms": float(np.median(waits)),
                   "wait_p90_ms": float(np.percentile(waits, 90)),
                   "step_ms_median": rec["step_ms_median"], "run_wall_s": time.perf_counter() - w0}
            runs[side].append(row)
            print(f"round {r} {side}: " + ", ".join(f"{k} {v:.4f}" for k, v in row.items()),
                  flush=True)
    keys = list(runs["A old"][0])
    print(f"\njax bench: {args.strategy} b={args.batch_size}, {args.steps} steps, prefetch "
          f"{args.depth}, {args.rounds} rounds; medians over rounds")
    print(f"{'side':6s} " + " ".join(f"{k:>20s}" for k in keys))
    summary = {}
    for side in sides:
        vals = {k: float(np.median([x[k] for x in runs[side]])) for k in keys}
        summary[side] = vals
        print(f"{side:6s} " + " ".join(f"{vals[k]:20.4f}" for k in keys))
    return {"runs": runs, "summary": summary}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="which", required=True)
    common = [options(with_threads=False, with_out=False)]  # own --threads, --out, --json
    t = sub.add_parser("torch", parents=common)
    t.add_argument("--store", required=True)
    t.add_argument("--old-prefetch", required=True, help="an old graphbatch/torch/_prefetch.py")
    t.add_argument("--strategy", default="pack-lpf")
    t.add_argument("--batch-size", type=int, default=32)
    t.add_argument("--depth", type=int, default=2)
    t.add_argument("--steps", type=int, default=30, help="training steps per side and round")
    t.add_argument("--iterate-steps", type=int, default=300)
    t.add_argument("--rounds", type=int, default=3)
    t.add_argument("--hidden", type=int, default=64, help="SchNet hidden features and filters")
    t.add_argument("--interactions", type=int, default=2, help="SchNet interaction blocks")
    t.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    t.add_argument("--seed", type=int, default=0)
    j = sub.add_parser("jax", parents=common)
    j.add_argument("--old-src", required=True)
    j.add_argument("--new-src", required=True)
    j.add_argument("--out", required=True)
    j.add_argument("--strategy", default="pack-lpf")
    j.add_argument("--batch-size", type=int, default=32)
    j.add_argument("--depth", type=int, default=2)
    j.add_argument("--steps", type=int, default=30)
    j.add_argument("--rounds", type=int, default=3)
    for p in (t, j):
        p.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    start(args)
    res = run_torch(args) if args.which == "torch" else run_jax(args)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
