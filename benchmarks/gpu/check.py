"""The device check of issue 36 part 5: one command, at most 8 minutes, at most 8 files.

Parts, each run through the public API (`graphbatch.bench.run_bench`, `run_jax_bench`),
each wrapped so that a failure is recorded and the rest go on, each skipped once the global
time budget (``--budget-s``) is nearly spent:

- ``cuda_tests``: the CUDA test files (tests/torch/test_step_cuda.py, test_feed_cuda.py;
  they skip without CUDA) under pytest, log in ``cuda_tests.log``;
- ``schnet``: SchNet on the QM9 store, batch size 128: ``pyg-eager``; ``dynamic`` and
  ``pack-lpf`` compiled (default mode, the bench's own loop, ``.to(device)``); the same two
  through the captured `TrainStep` and the `DeviceFeed` (two DataLoader workers);
- ``warm``: the default CUDA path (compiled model in the captured step, device feed) over
  2,000 steps with compilation counted, cold and then in a fresh process on the same compile
  cache (`graphbatch.torch.compile_cache`), against the schnet part's ``pyg-eager``;
- ``mace``: MACE on the EMT store, batch size 32: ``mace-eager``, ``pack-lpf`` compiled, and
  ``pack-lpf`` captured + fed;
- ``memory``: peak memory per strategy (``torch.cuda.max_memory_allocated``; process RSS on CPU)
  for ``random``, ``kk``, ``stratified``, ``dynamic``: SchNet on QM9 and MACE on the
  heavy-tailed EMT table;
- ``workers``: SchNet on the QM9 store with DataLoader workers 0, 1, 2, 4 (the bench's default
  step and feed for the device);
- ``jax``: JAX SchNet (``graphbatch.jax.loader`` + Flax) against ``jraph.dynamically_batch``,
  on JAX's default device.

Files under ``--out`` (default ``$OUT``): ``check.json`` (everything, written after every
part), ``check.md`` (the tables), ``check.log`` (this script's log), ``cuda_tests.log``.
``--tiny``: a few steps of tiny models on small data, to test every part on CPU.

    python -m benchmarks.gpu.check --data .gpucheck [--out DIR] [--tiny] [--budget-s 450]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

PARTS = ("cuda_tests", "schnet", "warm", "mace", "memory", "workers", "jax")
#: Molecules of the QM9 store the ``schnet`` part trains on (``run.sh`` builds it on the
#: device): ~140 batches of 128 an epoch, so epoch starts weigh as little as in real training.
QM9_MOLECULES = 20000
ROOT = Path(__file__).resolve().parents[2]
TINY_SCHNET = {"schnet": {"hidden": 8, "filters": 8, "num_interactions": 1, "num_gaussians": 6}}
TINY_MACE = {
    "mace": {
        "hidden_irreps": "8x0e + 8x1o",
        "MLP_irreps": "8x0e",
        "max_ell": 1,
        "num_bessel": 4,
        "num_interactions": 1,
    }
}


@dataclass
class Ctx:
    """What every part reads: the data folder, the output folder, the sizes, the device."""

    data: Path
    out: Path
    tiny: bool
    device: str
    log: Callable[[str], None]
    #: what a part leaves for later ones (``pyg_eager``: the schnet part's baseline record)
    shared: dict[str, Any] = field(default_factory=dict)

    def steps(self, n: int) -> int:
        return 3 if self.tiny else n

    def batch(self, n: int) -> int:
        return 8 if self.tiny else n

    def subset(self, n: int) -> int:
        return 60 if self.tiny else n

    def profile_steps(self, n: int) -> int:
        return 2 if self.tiny else n


# ------------------------------------------------------------------------------- helpers
def _bench_cfg(ctx: Ctx, **kw: Any):
    """A `BenchConfig` for one part: one repeat, runs one after another (per-run peak memory),
    one evaluation at the end; tiny models and Dynamo's ``eager`` backend with ``--tiny``."""
    from graphbatch.bench import BenchConfig

    steps = kw.pop("steps")
    base = BenchConfig(
        repeats=1,
        device=ctx.device,
        interleave=False,
        steps=steps,
        eval_every=steps,
        subset=kw.pop("subset", None),
    )
    if ctx.tiny:
        base = replace(base, compile_backend="eager", threads=1)
        base = replace(base, model_options=TINY_MACE if "mace" in kw.get("models", ()) else {})
        if "mace" not in kw.get("models", ()):
            base = replace(base, model_options=TINY_SCHNET)
    return replace(base, **kw).validate()


def _mb(r: dict) -> float:
    """Peak memory of a record in MiB: CUDA allocated where measured, else its peak_mem_bytes."""
    v = r.get("peak_mem_allocated_bytes")
    return round((v if v is not None else r["peak_mem_bytes"]) / 2**20, 1)


def _row(r: dict, base: dict | None = None) -> dict[str, Any]:
    """One table row of a bench record, with its break-even step count against ``base``."""
    from graphbatch.analysis import break_even

    mode = "compiled" if r["compiled"] else "eager"
    if r.get("step_mode") == "captured":
        mode = "captured" + (" compiled" if r["compiled"] else "")
    row = {
        "run": f"{r['strategy']} ({mode}, feed {r.get('feed', 'loader')})",
        "steady graphs/s": round(r["steady_graphs_per_s"], 1),
        "graphs/s incl. compile": round(r["graphs_per_s"], 1),
        "update ms": round(r["update_ms_median"], 3),
        "batch wait ms": round(r["batching_ms_median"], 3),
        "step ms": round(r["step_ms_median"], 3),
        "compile s": round(r["compile_s"], 2),
        "compiles": r["compiles"],
        "peak MB": _mb(r),
        "steady step ms mean": _steady_mean(r),
        **_profile_cells(r.get("profile")),
    }
    if base is not None and r is not base:
        be = break_even(
            r["compile_s"],
            r["steady_graphs_per_s"],
            r["real_graphs"] / max(r["steps"], 1),
            base["compile_s"],
            base["steady_graphs_per_s"],
        )
        faster = r["steady_graphs_per_s"] > base["steady_graphs_per_s"]
        row["break-even steps"] = be.get("steps") if faster else "never"
    return row


def _steady_mean(r: dict) -> float | None:
    """Mean step ms over the steps without a compilation (epoch starts included: against the
    median, it shows what the median leaves out)."""
    steps, compiling = r.get("step_ms"), set(r.get("compile_steps") or ())
    steady = [ms for k, ms in enumerate(steps or ()) if k not in compiling]
    return round(sum(steady) / len(steady), 3) if steady else None


def _profile_cells(p: dict | None) -> dict[str, Any]:
    """A record's profile (``--profile-steps``) as table cells, per step: host operator calls,
    kernels and device ms (CUDA), the entry with the most self time."""
    if not p:
        return {}
    top = p["top"][0] if p["top"] else None
    key = "self_device_us" if p["kernels"] is not None else "self_host_us"
    return {
        "profiled host ops": p["host_ops"],
        "kernels": p["kernels"],
        "device ms": p["device_ms"],
        "top entry (us)": f"{top['name'][:40]} ({top[key]:.0f})" if top else None,
    }


def _rows(records: list[dict], base_strategy: str) -> list[dict[str, Any]]:
    base = next((r for r in records if r["strategy"] == base_strategy), None)
    return [_row(r, base) for r in records]


# --------------------------------------------------------------------------------- parts
def part_cuda_tests(ctx: Ctx) -> dict[str, Any]:
    files = ["tests/torch/test_step_cuda.py", "tests/torch/test_feed_cuda.py"]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files]
    log = ctx.out / "cuda_tests.log"
    with log.open("w") as fh:
        proc = subprocess.run(
            cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, timeout=240, check=False
        )
    lines = [x for x in log.read_text().splitlines() if x.strip()]
    summary = lines[-1] if lines else ""
    if proc.returncode not in (0, 5):
        raise RuntimeError(f"pytest exit {proc.returncode}: {summary}")
    return {"rows": [{"tests": " ".join(files), "result": summary}], "returncode": proc.returncode}


def _loop_against_fed(
    ctx: Ctx, common: dict[str, Any], loop: tuple[str, ...], fed: tuple[str, ...], baseline: str
) -> dict[str, Any]:
    """The ``loop`` strategies compiled in the bench's own loop fed by the loader, then the
    ``fed`` strategies captured (`TrainStep`) and fed by `DeviceFeed` from workers; rows
    against ``baseline``."""
    from graphbatch.bench import run_bench

    looped = _bench_cfg(ctx, strategies=loop, compile="on", step="loop", feed="loader", **common)
    captured = _bench_cfg(
        ctx,
        strategies=fed,
        compile="off",
        step="captured",
        feed="device",
        num_workers=1 if ctx.tiny else 2,
        **common,
    )
    records = run_bench(looped, progress=False) + run_bench(captured, progress=False)
    return {"rows": _rows(records, baseline), "records": _slim(records)}


def part_schnet(ctx: Ctx) -> dict[str, Any]:
    common = dict(
        store=str(ctx.data / "qm9.h5"),
        data="store",
        batch_sizes=(ctx.batch(128),),
        steps=ctx.steps(500),
        subset=ctx.subset(QM9_MOLECULES),
        profile_steps=ctx.profile_steps(20),
    )
    result = _loop_against_fed(
        ctx, common, ("pyg-eager", "dynamic", "pack-lpf"), ("dynamic", "pack-lpf"), "pyg-eager"
    )
    ctx.shared["pyg_eager"] = next(
        (r for r in result["records"] if r["strategy"] == "pyg-eager"), None
    )
    return result


#: Runs a bench in a fresh interpreter on the compile cache ``argv[1]`` (`compile_cache`):
#: ``python -c WARM_RUN CACHE bench ...``.
WARM_RUN = (
    "import sys, warnings; warnings.simplefilter('ignore'); import graphbatch.torch as gt; "
    "gt.compile_cache(sys.argv[1]); from graphbatch.cli import main; sys.exit(main(sys.argv[2:]))"
)


def part_warm(ctx: Ctx) -> dict[str, Any]:
    """The default CUDA path (``--compile on``: the compiled model inside the captured step,
    device feed, 2 workers) over 2,000 steps with its compilation counted: a cold start, then a
    fresh process on the same compile cache (`graphbatch.torch.compile_cache`), each against
    the schnet part's ``pyg-eager`` steady throughput."""
    import tempfile

    rows = []
    base = ctx.shared.get("pyg_eager")
    with tempfile.TemporaryDirectory() as tmp:
        for run in ("cold", "warm"):
            out = Path(tmp) / run
            args = ["bench", "--store", str(ctx.data / "qm9.h5"), "--data", "store"]
            args += ["--strategies", "dynamic", "--batch-sizes", str(ctx.batch(128))]
            args += ["--steps", str(ctx.steps(2000)), "--repeats", "1", "--compile", "on"]
            args += ["--subset", str(ctx.subset(QM9_MOLECULES)), "--device", ctx.device]
            args += ["--num-workers", "1" if ctx.tiny else "2", "--eval-every", "100000"]
            args += ["--sequential", "--no-plots", "--quiet", "--out", str(out)]
            if ctx.tiny:
                args += ["--compile-backend", "eager", "--threads", "1"]
            cmd = [sys.executable, "-c", WARM_RUN, str(Path(tmp) / "cache"), *args]
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
            if proc.returncode != 0:
                raise RuntimeError(f"{run} run failed: {proc.stderr.strip()[-300:]}")
            (r,) = json.loads((out / "results.json").read_text())
            rows.append(
                {
                    "run": f"{run} ({r.get('step_mode')}, compiled, feed {r.get('feed')})",
                    "steps": r["steps"],
                    "compile s": round(r["compile_s"], 2),
                    "graphs/s incl. compile": round(r["graphs_per_s"], 1),
                    "steady graphs/s": round(r["steady_graphs_per_s"], 1),
                    "x pyg-eager incl. compile": round(
                        r["graphs_per_s"] / base["steady_graphs_per_s"], 2
                    )
                    if base
                    else None,
                }
            )
    return {"rows": rows}


def part_mace(ctx: Ctx) -> dict[str, Any]:
    common = dict(
        models=("mace",),
        store=str(ctx.data / "emt.h5"),
        data="store",
        batch_sizes=(ctx.batch(32),),
        steps=ctx.steps(150),
        subset=ctx.subset(3000),
        profile_steps=ctx.profile_steps(10),
    )
    return _loop_against_fed(ctx, common, ("mace-eager", "pack-lpf"), ("pack-lpf",), "mace-eager")


def part_memory(ctx: Ctx) -> dict[str, Any]:
    from graphbatch.bench import run_bench

    strategies = ("random", "kk", "stratified", "dynamic")
    rows = []
    tables = (
        ("QM9 (SchNet)", {"store": str(ctx.data / "qm9.h5"), "batch_sizes": (ctx.batch(128),)}),
        (
            "EMT heavy-tailed (MACE)",
            {
                "models": ("mace",),
                "store": str(ctx.data / "emt.h5"),
                "batch_sizes": (ctx.batch(32),),
            },
        ),
    )
    for name, kw in tables:
        cfg = _bench_cfg(
            ctx,
            strategies=strategies,
            data="store",
            compile="off",
            step="loop",
            feed="loader",
            steps=ctx.steps(30),
            subset=ctx.subset(3000),
            **kw,
        )
        for r in run_bench(cfg, progress=False):
            rows.append(
                {
                    "table": name,
                    "strategy": r["strategy"],
                    "peak MB": _mb(r),
                    "peak kind": "cuda_max_memory_allocated"
                    if r.get("peak_mem_allocated_bytes") is not None
                    else r["peak_mem_kind"],
                    "node efficiency": round(r["node_efficiency"], 3),
                    "distinct shapes": r["distinct_shapes"],
                }
            )
    return {"rows": rows}


def part_workers(ctx: Ctx) -> dict[str, Any]:
    from graphbatch.bench import run_bench

    rows = []
    for workers in (0, 1) if ctx.tiny else (0, 1, 2, 4):
        cfg = _bench_cfg(
            ctx,
            store=str(ctx.data / "qm9.h5"),
            data="store",
            strategies=("dynamic",),
            batch_sizes=(ctx.batch(128),),
            steps=ctx.steps(300),
            subset=ctx.subset(QM9_MOLECULES),
            compile="off",
            num_workers=workers,
        )
        (r,) = run_bench(cfg, progress=False)
        rows.append({"workers": workers, **_row(r)})
    return {"rows": rows}


def part_jax(ctx: Ctx) -> dict[str, Any]:
    import jax

    from graphbatch.bench import BenchConfig, run_jax_bench

    if ctx.device == "cuda":  # leave the GPU's memory to JAX
        import torch

        torch.cuda.empty_cache()
    steps = ctx.steps(200)
    cfg = BenchConfig(
        framework="jax",
        strategies=("dynamic", "pack-lpf", "jraph-dynamic"),
        batch_sizes=(ctx.batch(128),),
        steps=steps,
        eval_every=steps,
        repeats=1,
        subset=ctx.subset(3000),
        prefetch=2,
        model_options=TINY_SCHNET if ctx.tiny else {},
    )
    records = run_jax_bench(cfg, progress=False)
    rows = [
        {
            "run": r["strategy"],
            "steady graphs/s": round(r["steady_graphs_per_s"], 1),
            "update ms": round(r["update_ms_median"], 3),
            "batch wait ms": round(r["batching_ms_median"], 3),
            "compile s": round(r["compile_s"], 2),
            "compiles": r["compiles"],
        }
        for r in records
    ]
    return {"rows": rows, "jax_device": str(jax.devices()[0])}


PART_FUNCS: dict[str, Callable[[Ctx], dict[str, Any]]] = {
    "cuda_tests": part_cuda_tests,
    "schnet": part_schnet,
    "warm": part_warm,
    "mace": part_mace,
    "memory": part_memory,
    "workers": part_workers,
    "jax": part_jax,
}


#: Per-step lists a record keeps in check.json (steps and compilations: enough to see where a
#: mean and a median part ways); the other lists are dropped.
KEPT_LISTS = ("step_ms", "update_ms_steps", "real_graphs_steps", "compile_steps")


def _slim(records: list[dict]) -> list[dict]:
    """Records without their evaluation curves and other long lists (`KEPT_LISTS` stay)."""
    from graphbatch.analysis import LIST_KEYS

    drop = (set(LIST_KEYS) - set(KEPT_LISTS)) | {"train_loss", "graph_dynamic", "backend_compile_s"}
    return [{k: v for k, v in r.items() if k not in drop} for r in records]


# ------------------------------------------------------------------------ environment
def environment() -> dict[str, Any]:
    """Device, driver and versions of what the check ran on."""
    import torch

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "cpus": os.cpu_count(),
    }
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
        try:
            q = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
            env["driver"] = subprocess.run(q, capture_output=True, text=True, timeout=20).stdout
            env["driver"] = env["driver"].strip()
        except (OSError, subprocess.SubprocessError):
            env["driver"] = None
    for name in ("torch_geometric", "jax", "flax", "mace", "e3nn", "graphbatch"):
        try:
            mod = __import__(name)
            env[name] = getattr(mod, "__version__", "?")
        except Exception as exc:  # a missing package is a finding, not a failure
            env[name] = f"missing: {type(exc).__name__}"
    return env


# --------------------------------------------------------------------------- the report
def markdown(result: dict[str, Any]) -> str:
    """The tables of every part, one section each, with the environment on top."""
    env = result["environment"]
    lines = ["# graphbatch device check (issue 36)", ""]
    lines.append(
        ", ".join(f"{k} {v}" for k, v in env.items() if v is not None)
        + f"; tiny={result['tiny']}; {result['elapsed_s']:.0f} s"
    )
    for name, part in result["parts"].items():
        lines += ["", f"## {name}: {part['status']} ({part.get('seconds', 0):.1f} s)", ""]
        if part["status"] != "ok":
            lines.append(f"`{part.get('error') or part.get('reason')}`")
            continue
        rows = part.get("rows") or []
        if rows:
            cols = list(dict.fromkeys(k for r in rows for k in r))
            lines.append("| " + " | ".join(cols) + " |")
            lines.append("|" + "---|" * len(cols))
            for r in rows:
                lines.append("| " + " | ".join(_cell(r.get(c)) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def _cell(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 100 else f"{v:,.0f}"
    return str(v)


def _write(out: Path, result: dict[str, Any]) -> None:
    (out / "check.json").write_text(json.dumps(result, indent=1, default=str))
    (out / "check.md").write_text(markdown(result))


def run_check(
    data: Path, out: Path, *, tiny: bool, budget_s: float, parts: tuple[str, ...] = PARTS
) -> dict[str, Any]:
    """Run ``parts`` in order; a part that raises is recorded (``failed``, its error) and the
    next one runs; once less than a fifth of ``budget_s`` (at least 30 s) is left, the remaining
    parts are ``skipped``. Writes check.json and check.md after every part; returns the result."""
    import torch

    out.mkdir(parents=True, exist_ok=True)
    logfile = (out / "check.log").open("a")
    t0 = time.monotonic()

    def log(msg: str) -> None:
        line = f"[{time.monotonic() - t0:7.1f} s] {msg}"
        print(line, flush=True)
        logfile.write(line + "\n")
        logfile.flush()

    ctx = Ctx(data, out, tiny, "cuda" if torch.cuda.is_available() else "cpu", log)
    result: dict[str, Any] = {"tiny": tiny, "budget_s": budget_s, "parts": {}, "elapsed_s": 0.0}
    result["environment"] = environment()
    reserve = max(30.0, budget_s / 5)
    for name in parts:
        left = budget_s - (time.monotonic() - t0)
        if left < reserve:
            result["parts"][name] = {
                "status": "skipped",
                "reason": f"time budget: {left:.0f} s left",
            }
            log(f"{name}: skipped ({left:.0f} s left)")
            continue
        log(f"{name}: start")
        t = time.monotonic()
        try:
            part = {"status": "ok", **PART_FUNCS[name](ctx)}
        except Exception as exc:
            part = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}
            log("".join(traceback.format_exc()))
        part["seconds"] = round(time.monotonic() - t, 1)
        result["parts"][name] = part
        result["elapsed_s"] = round(time.monotonic() - t0, 1)
        _write(out, result)
        log(f"{name}: {part['status']} in {part['seconds']} s")
    result["elapsed_s"] = round(time.monotonic() - t0, 1)
    _write(out, result)
    logfile.close()
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(ROOT / ".gpucheck"), help="folder of prepare.sh")
    p.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / ".gpucheck" / "out"))
    p.add_argument("--tiny", action="store_true", help="few steps, tiny models (CPU test)")
    p.add_argument("--budget-s", type=float, default=450.0, help="global time budget")
    p.add_argument("--parts", default=",".join(PARTS), help="comma list of " + ", ".join(PARTS))
    a = p.parse_args(argv)
    parts = tuple(x for x in a.parts.split(",") if x)
    unknown = [x for x in parts if x not in PART_FUNCS]
    if unknown:
        p.error(f"unknown part(s) {unknown}; known: {', '.join(PARTS)}")
    result = run_check(Path(a.data), Path(a.out), tiny=a.tiny, budget_s=a.budget_s, parts=parts)
    failed = [k for k, v in result["parts"].items() if v["status"] == "failed"]
    print(f"wrote {a.out}/check.json and check.md; failed parts: {failed or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
