"""``graphbatch tune``: measure the model's step cost, search strategies and budgets, validate."""

from __future__ import annotations

import sys
import time

from .._io import check_output_path
from ..tuning import MAX_PROBES, TuneResult, tune
from ._common import nonnegative_int, positive_int
from ._format import format_table, print_json


def add_parser(sub) -> None:
    p = sub.add_parser(
        "tune",
        help="pick strategy, budget and shapes from step costs measured on your model",
        description="Time the model's training step (compiled and eager) on a few designed "
        "padded shapes, fit step time, peak memory and compile time to the shape, predict an "
        "epoch of every strategy and budget (dynamic, pack-lpf at searched limits, buckets "
        "K=1..8, static-pow2, static-64; balancing strategies with --world-size), and print "
        "the ranking. --out writes the chosen request as JSON for graphbatch.plan(sizes, "
        "**request), graphbatch.torch.loader, graphbatch.jax.loader and `graphbatch plan "
        "--config`. See docs/tune.md.",
    )
    _add_search(p)
    _add_measurement(p)
    _add_output(p)
    p.set_defaults(func=run)


def _add_search(p) -> None:
    """The flags of what is searched: the source, model, framework, device, batch sizes,
    epochs, memory limit, world size."""
    p.add_argument(
        "source",
        help="graph store (.h5, sharded .json manifest) or size table "
        "(.npz: probes use synthetic graphs of those sizes)",
    )
    p.add_argument(
        "--model",
        default="schnet",
        help="schnet, mpeu, painn, mace (torch) or MODULE:FACTORY (default schnet)",
    )
    p.add_argument("--framework", choices=("torch", "jax"), default="torch")
    p.add_argument("--device", default="cpu", help="cpu or cuda (jax: cpu or gpu)")
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=128,
        help="nominal graphs per batch incl. the padding graph (default 128)",
    )
    p.add_argument(
        "--batch-tolerance",
        type=float,
        default=0.1,
        help="batch sizes searched within this fraction of --batch-size (default 0.1)",
    )
    p.add_argument(
        "--epochs",
        type=positive_int,
        default=10,
        help="training epochs the compile time is amortised over (default 10)",
    )
    p.add_argument(
        "--memory-limit",
        metavar="GiB",
        help="hard limit on the worst batch's predicted peak memory: GiB, or a size such as 800MiB",
    )
    p.add_argument(
        "--world-size",
        type=positive_int,
        default=1,
        help="ranks per step (adds the balancing strategies; default 1)",
    )


def _add_measurement(p) -> None:
    """The flags of how it is measured: validation, probes, rounds, compile modes,
    strategies, shapes, seed, threads, oversize graphs."""
    p.add_argument(
        "--validate",
        type=nonnegative_int,
        default=0,
        metavar="K",
        help="train the top K configurations and print predicted vs measured",
    )
    p.add_argument(
        "--validate-steps",
        type=positive_int,
        default=20,
        help="steps per validated configuration (default 20)",
    )
    p.add_argument(
        "--validate-retries",
        type=nonnegative_int,
        default=2,
        metavar="N",
        help="measure a validation the machine disturbed again up to N times, then flag it "
        "as not trusted (default 2)",
    )
    p.add_argument(
        "--probes",
        type=positive_int,
        default=8,
        help=f"probe shapes, at most {MAX_PROBES} (default 8)",
    )
    p.add_argument(
        "--rounds", type=positive_int, default=5, help="timed steps per probe and mode (default 5)"
    )
    p.add_argument(
        "--compile",
        choices=("both", "on", "off"),
        default="both",
        help="torch: measure compiled and eager steps (both), or one (default both)",
    )
    p.add_argument(
        "--strategies",
        help="comma-separated strategy families (default: dynamic, "
        "pack-lpf, buckets, static-pow2, static-64)",
    )
    p.add_argument(
        "--max-shapes", type=positive_int, default=8, help="largest K of buckets (default 8)"
    )
    p.add_argument("--seed", type=nonnegative_int, default=0)
    p.add_argument("--threads", type=positive_int, help="torch intra-op threads while measuring")
    p.add_argument("--on-oversize", choices=("error", "skip", "own_batch"), default="error")


def _add_output(p) -> None:
    """The flags of the output: table rows, request and result files, JSON, progress."""
    p.add_argument("--top", type=positive_int, default=15, help="rows of the ranking printed")
    p.add_argument("--out", help="write the chosen request (JSON) here")
    p.add_argument(
        "--result",
        help="write the whole result (JSON: ranking, fitted models, "
        "probes, validation) here; `graphbatch report --tune` reads it",
    )
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress messages on stderr")


def _model_lines(result: TuneResult) -> list[str]:
    out = []
    for mode, m in result.models.items():
        t = m.time
        out.append(
            f"{mode}: step {t.describe('ms')} (leave-one-out error median "
            f"{100 * t.loo_median:.1f}%, max {100 * t.loo_max:.1f}%)"
        )
        what = "compile" if m.compiles else "first call of a new shape"
        out.append(
            f"{mode}: {what} {m.compile.first_ms / 1000:.1f} s (first shape), "
            f"{m.compile.per_shape_ms / 1000:.2f} s per further shape"
        )
        if m.memory is not None:
            out.append(
                f"{mode}: peak {m.memory.describe('bytes')} + margin "
                f"{m.memory_margin:,} B (leave-one-out error max "
                f"{100 * m.memory.loo_max:.1f}%)"
            )
    return out


def break_even_line(be: dict | None) -> str | None:
    """The break-even sentence of a tune result's ``break_even`` (``None``: nothing to say)."""
    if be is None:
        return None
    head = (
        f"break-even: {be['compiled']} (compiled, {be['compile_s']:.1f} s compiling) vs "
        f"{be['eager']} (eager)"
    )
    planned = f"{be['planned_steps']:,} steps planned ({be['epochs']} epochs)"
    if be["steps"] is None:
        return f"{head}: never overtakes ({be.get('reason', '')}); {planned}"
    verdict = "pays off" if be["pays_off"] else "does NOT pay off"
    return (
        f"{head}: overtakes after {be['steps']:,} steps; {planned}: {verdict}, "
        f"{be['speedup_planned']:.2f}x over the planned steps"
    )


def _untrusted_lines(result: TuneResult) -> list[str]:
    out = []
    for v in result.untrusted:
        out.append(
            f"WARNING: validation of {v['config']} ({v['mode']}) NOT trusted after "
            f"{v['attempts']} measurement(s): " + "; ".join(v["trust_reasons"])
        )
    return out


def _fmt(rows):
    """Rows with floats rounded for display."""
    out = []
    for r in rows:
        out.append(
            {
                k: (
                    f"{v:,.1f}"
                    if isinstance(v, float) and abs(v) >= 100
                    else f"{v:.3g}"
                    if isinstance(v, float)
                    else v
                )
                for k, v in r.items()
            }
        )
    return out


def run(args) -> int:
    import json

    from ..analysis import input_files

    for flag in ("out", "result"):
        path = getattr(args, flag)
        if path is not None:
            check_output_path(
                path,
                input_files(args.source),
                flag=f"--{flag}",
                suffixes=(".json",),
                what="tune output",
            )
    t0 = time.perf_counter()

    def progress(msg: str) -> None:
        if not args.quiet:
            print(f"[tune {time.perf_counter() - t0:6.1f}s] {msg}", file=sys.stderr, flush=True)

    strategies = None
    if args.strategies:
        strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    result = tune(
        args.source,
        model=args.model,
        framework=args.framework,
        device=args.device,
        batch_size=args.batch_size,
        epochs=args.epochs,
        memory_limit=args.memory_limit,
        world_size=args.world_size,
        validate=args.validate,
        validate_steps=args.validate_steps,
        validate_retries=args.validate_retries,
        probes=args.probes,
        rounds=args.rounds,
        compile=args.compile,
        batch_tolerance=args.batch_tolerance,
        strategies=strategies,
        max_shapes=args.max_shapes,
        seed=args.seed,
        threads=args.threads,
        on_oversize=args.on_oversize,
        progress=progress,
    )
    if args.out:
        result.save_request(args.out)
    if args.result:
        result.save(args.result)
    if args.json:
        print_json(result.as_dict())
        return 0
    s = result.settings
    print(
        f"tune: {s['model']} ({s['framework']}, {s['device']}), {s['num_graphs']:,} graphs, "
        f"batch size {s['batch_size']} ±{100 * s['batch_tolerance']:.0f}%, {s['epochs']} "
        f"epochs; {s['distinct_candidates']} distinct configurations, {s['probes']} probe "
        f"shapes; {s['seconds']['total']:.0f} s"
    )
    for line in _model_lines(result):
        print("  " + line)
    print()
    print(format_table(_fmt(result.table(args.top))))
    if result.validation:
        print()
        print("validation (steady steps: predicted vs measured; peak at the worst batch):")
        print(format_table(_fmt(result.validation_table())))
        for warning in _untrusted_lines(result):
            print(warning)
    be_line = break_even_line(result.break_even)
    if be_line is not None:
        print()
        print(be_line)
    print()
    print(f"chosen ({result.mode}): " + json.dumps(result.request, sort_keys=True))
    if args.out:
        print(f"wrote {args.out}")
    if args.result:
        print(f"wrote {args.result}")
    return 0
