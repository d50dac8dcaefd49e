"""Compilation paid once: a cold compile of padded SchNet vs a fresh cache that loads the
previous run's saved artifacts (issue 36, part 3).

    python -m benchmarks.training.compile_cache [--subset 400] [--batch-size 128] [--repeats 1]

Every run is a fresh ``python`` process training SchNet (``graphbatch.models``, compiled as
``graphbatch bench`` compiles padded runs: ``torch.compile(dynamic=False, fullgraph=True)``) on
one padded QM9 shape (``pack-lpf``), with its compile cache pointed at a folder by
``graphbatch.torch.compile_cache``:

* ``cold``: an empty cache folder; after training it saves its compiled artifacts
  (``graphbatch.torch.save_compile_artifacts``) into a run folder, as a job would beside its
  plan or checkpoint;
* ``artifacts``: ANOTHER empty cache folder (a fresh node) that loads the cold run's artifacts
  (``load_compile_artifacts``) before its first step -- the target: its compile time (artifact
  load included) <= 10% of the cold run's;
* ``torch-only``: another empty folder loading only torch's cache-artifact bytes
  (``torch.compiler.load_cache_artifacts``), without the compiled C++ kernels graphbatch adds
  (what torch's API alone gives on CPU);
* ``same-folder``: the cold run's own folder again (torch's local caches, one machine).

Compile time = the first step's wall time minus the median of the following steady steps,
plus the artifact load. CPU seconds (the process and its children) are printed beside it: on a
shared machine the wall time carries the load, the CPU time less so. Data loading, imports and
model construction are outside both.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from benchmarks._harness import child_env, finish, module_command, parser, print_table, start

VARIANTS = ("cold", "artifacts", "torch-only", "same-folder")
TARGET = 0.10


def _cpu_s() -> float:
    self_, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return self_.ru_utime + self_.ru_stime + kids.ru_utime + kids.ru_stime


def _load_torch_only(run_dir: Path, key: Any) -> bool:
    """Only torch's artifact bytes of the saved run (the record says which file holds them)."""
    import torch

    record = json.loads((run_dir / f"compile-{key.short}.json").read_text())
    torch.compiler.load_cache_artifacts((run_dir / record["files"]["torch"]["file"]).read_bytes())
    return True


def child(variant: str, cache: str, run_dir: str, subset: int, batch_size: int,
          steps: int) -> dict[str, Any]:
    """One run in this (fresh) process: load the data and model, point the cache, maybe load
    artifacts, train ``steps`` steps (the first compiles), maybe save; return the timings."""
    import torch
    from torch._dynamo.utils import counters

    import graphbatch.torch as gt
    from graphbatch.bench import DEFAULT, bench_model, compile_padded
    from graphbatch.bench._data import load_bench_data
    from graphbatch.models import batch_inputs

    with warnings.catch_warnings():  # the benchmark's folders are temporary on purpose
        warnings.simplefilter("ignore")
        gt.compile_cache(cache)
    data = load_bench_data("qm9", subset=subset, cutoff=DEFAULT.cutoff, seed=0)
    ld = gt.loader(data.train, strategy="pack-lpf", sizes=data.train_sizes,
                   batch_size=batch_size, seed=0)
    batch = next(iter(ld))
    model = bench_model("schnet", DEFAULT)
    fn = compile_padded(model, DEFAULT)
    opt = torch.optim.Adam(model.parameters(), lr=DEFAULT.lr)
    key = gt.compile_key(model, ld.plan, options={"dynamic": False, "fullgraph": True,
                                                  "backend": DEFAULT.compile_backend,
                                                  "mode": DEFAULT.compile_mode})
    cpu0, t0 = _cpu_s(), time.perf_counter()
    loaded = None
    if variant == "artifacts":
        loaded = gt.load_compile_artifacts(run_dir, key, strict=True)
    elif variant == "torch-only":
        loaded = _load_torch_only(Path(run_dir), key)
    load_s = time.perf_counter() - t0

    def step() -> float:
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        out = fn(**batch_inputs(batch))
        loss = gt.masked_mean((out - batch.y.view(-1)) ** 2, batch.graph_mask)
        loss.backward()
        opt.step()
        return time.perf_counter() - t

    first = step()
    cpu_first = _cpu_s() - cpu0
    steady = sorted(step() for _ in range(steps - 1))
    steady_s = steady[len(steady) // 2]
    save_s = None
    if variant == "cold":
        t = time.perf_counter()
        gt.save_compile_artifacts(run_dir, key)
        save_s = time.perf_counter() - t
    ind, aot = counters["inductor"], counters["aot_autograd"]
    return {"variant": variant, "loaded": loaded, "load_s": round(load_s, 3),
            "first_step_s": round(first, 3), "steady_ms": round(1e3 * steady_s, 2),
            "compile_s": round(load_s + first - steady_s, 3),
            "cpu_s": round(cpu_first, 2), "save_s": None if save_s is None else round(save_s, 2),
            "fx_hits": int(ind["fxgraph_cache_hit"]), "fx_misses": int(ind["fxgraph_cache_miss"]),
            "aot_hits": int(aot["autograd_cache_hit"]), "shape": [int(x) for x in ld.plan.shapes()[0]],
            "key": key.short}


def run_child(args, variant: str, cache: Path, run_dir: Path) -> dict[str, Any]:
    cmd = [*module_command(__spec__), "--child", variant, "--cache", str(cache),
           "--run-dir", str(run_dir), "--subset", str(args.subset),
           "--batch-size", str(args.batch_size), "--steps", str(args.steps), "--quiet"]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    proc = subprocess.run(cmd, env=child_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"{variant} run failed ({proc.returncode})")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def main() -> None:
    p = parser(__doc__, out_help="write the runs and ratios as JSON to this file")
    p.add_argument("--subset", type=int, default=400, help="QM9 molecules loaded (default 400)")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=6, help="steps per run, the first compiles")
    p.add_argument("--repeats", type=int, default=1, help="cold/artifact pairs (default 1)")
    p.add_argument("--variants", default=",".join(VARIANTS),
                   help=f"comma list of {', '.join(VARIANTS)} (cold always runs)")
    p.add_argument("--workdir", help="folder for the caches and run folders (default: a new "
                   "temporary folder, removed afterwards)")
    p.add_argument("--child", choices=VARIANTS, help=argparse_hidden())
    p.add_argument("--cache", help=argparse_hidden())
    p.add_argument("--run-dir", help=argparse_hidden())
    args = p.parse_args()
    if args.child:
        if args.threads:
            import torch
            torch.set_num_threads(args.threads)
        rec = child(args.child, args.cache, args.run_dir, args.subset, args.batch_size,
                    args.steps)
        print("RESULT " + json.dumps(rec), flush=True)
        return
    info = start(args)
    variants = [v for v in args.variants.split(",") if v and v != "cold"]
    own = args.workdir is None
    work = Path(tempfile.mkdtemp(prefix="gb-compile-cache-")) if own else Path(args.workdir)
    rows, results = [], []
    try:
        for r in range(args.repeats):
            base = work / f"r{r}"
            run_dir = base / "run"
            cold = run_child(args, "cold", base / "cache-cold", run_dir)
            recs = [cold]
            for v in variants:
                cache = base / "cache-cold" if v == "same-folder" else base / f"cache-{v}"
                recs.append(run_child(args, v, cache, run_dir))
            for rec in recs:
                rec["repeat"] = r
                rec["ratio"] = round(rec["compile_s"] / cold["compile_s"], 4)
                rec["cpu_ratio"] = round(rec["cpu_s"] / cold["cpu_s"], 4)
            rows += recs
            results.append(recs)
        print_table(rows, ["repeat", "variant", "load_s", "first_step_s", "steady_ms",
                           "compile_s", "ratio", "cpu_s", "cpu_ratio", "fx_hits", "fx_misses",
                           "aot_hits", "save_s"],
                    title="SchNet compile: cold vs a fresh cache loading saved artifacts")
        shape = rows[0]["shape"]
        print(f"shape {shape} (pack-lpf, batch size {args.batch_size}); load "
              + " ".join(f"{x:.2f}" for x in os.getloadavg()))
        for rec in rows:
            if rec["variant"] == "artifacts":
                met = "met" if rec["ratio"] <= TARGET else "NOT met"
                print(f"repeat {rec['repeat']}: artifacts compile {rec['compile_s']:.2f} s / cold "
                      f"{[c for c in rows if c['repeat'] == rec['repeat']][0]['compile_s']:.2f} s"
                      f" = {100 * rec['ratio']:.1f}% (target <= {100 * TARGET:.0f}%: {met}); "
                      f"CPU {100 * rec['cpu_ratio']:.1f}%")
        finish(args, info, rows)
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
