"""``graphbatch bench``: train the reference models under each batching strategy and measure."""

from __future__ import annotations

import argparse
import dataclasses

from .._errors import InputError
from ._format import format_table

__all__ = ["add_parser"]


def _csv(kind):
    def parse(text: str):
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"empty list: {text!r}")
        try:
            return tuple(kind(t) for t in items)
        except ValueError:
            raise argparse.ArgumentTypeError(f"bad list {text!r}") from None

    return parse


def add_parser(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="train models under each batching strategy; time, compile, memory, accuracy",
        description="Train SchNet/MPEU/PaiNN for N steps per (model, strategy, batch size, "
        "repeat) and write DIR/results.json (one record per run), results.csv, summary.json "
        "(targets, Mann-Whitney/t-tests) and plots. Default: a QM9 subset on CPU in minutes; "
        "--full: the static-vs-dynamic paper's grid.",
    )
    _add_what_runs(p)
    _add_how_it_trains(p)
    _add_run_options(p)
    _add_output(p)
    p.set_defaults(func=run)


def _add_what_runs(p) -> None:
    """The flags of what runs: framework, data source, models, strategies, batch sizes,
    steps, repeats, subset."""
    p.add_argument(
        "--framework",
        choices=["torch", "jax"],
        default="torch",
        help="torch (graphbatch.torch + torch models) or jax (graphbatch.jax.loader "
        "+ Flax models; baselines jraph-dynamic, jraph-pad64, unpadded)",
    )
    p.add_argument("--dataset", default=None, choices=["qm9"], help="dataset (default qm9)")
    p.add_argument(
        "--store",
        help="train from this QM9 graph store (graphbatch data build qm9 "
        "--out PATH), or with --models mace an atomistic store (graphbatch data "
        "build extxyz FILE --cutoff R --out PATH; MACE's r_max is the store's cutoff); "
        "implies --data store",
    )
    p.add_argument(
        "--data",
        choices=["memory", "store"],
        default=None,
        help="batches from QM9 graphs built in memory, or read from --store by the "
        "store batch path (default: store when --store is given, else memory)",
    )
    p.add_argument(
        "--models",
        type=_csv(str),
        help="comma list of schnet,mpeu,painn; or mace alone (mace-torch: a small MACE "
        "on QM9 at r_max 5 A, energies+forces; strategies: padded ones compiled once "
        "and the baselines mace-eager, mace-compile; see docs/atomistic.md)",
    )
    p.add_argument(
        "--strategies",
        type=_csv(str),
        help="comma list of planner strategies and baselines pyg-eager, pyg-compile, unpadded",
    )
    p.add_argument("--batch-sizes", type=_csv(int), help="comma list, e.g. 32,128")
    p.add_argument("--steps", type=int, help="optimizer steps per run")
    p.add_argument("--repeats", type=int, help="repeats per configuration")
    p.add_argument("--subset", type=int, help="first N QM9 molecules (default 5000; --full: all)")


def _add_how_it_trains(p) -> None:
    """The flags of how a run trains: device, torch.compile with its backend and mode, the
    step and the feed."""
    p.add_argument("--device", choices=["cpu", "cuda"], default=None)
    p.add_argument(
        "--compile",
        choices=["auto", "on", "off"],
        default=None,
        help="torch.compile padded strategies (auto: on CUDA all, on CPU pack-lpf both ways)",
    )
    p.add_argument(
        "--compile-backend",
        default=None,
        help="torch.compile backend (default inductor; 'eager' traces only)",
    )
    p.add_argument(
        "--compile-mode",
        default=None,
        choices=["default", "reduce-overhead", "max-autotune"],
        help="torch.compile mode for padded strategies (reduce-overhead: CUDA graphs)",
    )
    p.add_argument(
        "--step",
        choices=["auto", "captured", "loop"],
        default=None,
        help="how padded runs train: captured (graphbatch.torch.TrainStep: one CUDA graph "
        "per padded shape; on CPU the plain step on its static buffers), loop (the bench's "
        "own loop, the model torch.compile'd per --compile); auto (default): captured on "
        "CUDA, loop on CPU and with --compile-mode reduce-overhead/max-autotune",
    )
    p.add_argument(
        "--feed",
        choices=["auto", "device", "loader"],
        default=None,
        help="how padded runs' batches reach the device: device (graphbatch.torch."
        "DeviceFeed: copies on a side stream, the workers' slots with a store and "
        "--num-workers), loader (the loader's batches and .to(device); with --prefetch N a "
        "background thread); auto (default): device on CUDA without --prefetch, else loader",
    )


def _add_run_options(p) -> None:
    """The flags of evaluation, batch making (workers, prefetch, sharing), the shared
    budget's graph slots, threads and seed."""
    p.add_argument("--eval-every", type=int, help="steps between test evaluations")
    p.add_argument("--num-workers", type=int, help="DataLoader workers for collation")
    p.add_argument(
        "--prefetch",
        type=int,
        help="batches made ahead by a background thread of the training process "
        "(0: none; works with or without --num-workers)",
    )
    p.add_argument(
        "--graph-cap",
        type=float,
        help="graph slots of the shared budget = F x batch size for every "
        "budget-using strategy (default: 2 for pack-*/buckets, so that their node/edge "
        "caps bind; 1 -- Algorithm 1's -- for dynamic and the others)",
    )
    p.add_argument(
        "--sharing-strategy",
        choices=["file_descriptor", "file_system"],
        help="torch.multiprocessing sharing strategy for batches from workers "
        "(default with workers: file_system, which avoids a socket round trip per "
        "tensor; see docs/bench.md)",
    )
    p.add_argument(
        "--threads",
        type=int,
        help="torch intra-op threads (default: torch's, i.e. the cores; use 1 when "
        "other jobs share the cores)",
    )
    p.add_argument("--seed", type=int, help="base seed (repeat r uses seed + r)")
    p.add_argument(
        "--profile-steps",
        type=int,
        help="after each run's timed steps, run N more under torch.profiler (not timed) and "
        "add their per-step summary to the run's record as 'profile': host operator calls, "
        "CUDA kernels and device ms, the costliest entries (torch runs; default 0: none)",
    )


def _add_output(p) -> None:
    """The flags of the schedule of runs (--sequential, --full) and of the output."""
    p.add_argument(
        "--sequential",
        action="store_true",
        help="run configurations one after another (per-run peak memory) instead of "
        "stepping the runs of a repeat in turn",
    )
    p.add_argument("--full", action="store_true", help="the paper's full grid (hours)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG figures")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--out", required=True, help="output directory")


#: Flags only the torch runs read (``dest`` -> flag): with ``--framework jax`` they would be
#: silently ignored, so giving one is an error.
_TORCH_ONLY = {
    "store": "--store",
    "data": "--data",
    "device": "--device",
    "compile": "--compile",
    "compile_backend": "--compile-backend",
    "compile_mode": "--compile-mode",
    "step": "--step",
    "feed": "--feed",
    "num_workers": "--num-workers",
    "sharing_strategy": "--sharing-strategy",
    "threads": "--threads",
    "profile_steps": "--profile-steps",
}


def check_flag_collisions(args) -> None:
    """Refuse flags that the other flags make meaningless (instead of ignoring one of them)."""
    if getattr(args, "framework", "torch") == "jax":
        given = [flag for dest, flag in _TORCH_ONLY.items() if getattr(args, dest) is not None]
        if given:
            raise InputError(f"--framework jax does not use {', '.join(given)} (torch runs only)")
    if args.data == "memory" and args.store is not None:
        raise InputError(
            f"--store {args.store} with --data memory: the store would not be read "
            "(drop --data memory, or --store)"
        )


def config_from_args(args):
    check_flag_collisions(args)  # before importing the frameworks
    from ..bench import DEFAULT, FULL, JAX_DEFAULT, JAX_FULL

    if getattr(args, "framework", "torch") == "jax":
        base = JAX_FULL if args.full else JAX_DEFAULT
    elif args.models is not None and "mace" in args.models:
        from ..bench import MACE_DEFAULT

        if args.full:
            raise InputError(
                "--full is the paper's grid of SchNet/MPEU/PaiNN; model mace has "
                "its own default (omit --full)"
            )
        base = MACE_DEFAULT
    else:
        base = FULL if args.full else DEFAULT
    fields = {
        "dataset": args.dataset,
        "models": args.models,
        "store": args.store,
        "data": args.data or ("store" if args.store else None),
        "strategies": args.strategies,
        "batch_sizes": args.batch_sizes,
        "steps": args.steps,
        "repeats": args.repeats,
        "subset": args.subset,
        "device": args.device,
        "compile": args.compile,
        "eval_every": args.eval_every,
        "num_workers": args.num_workers,
        "prefetch": args.prefetch,
        "threads": args.threads,
        "graph_cap": args.graph_cap,
        "sharing_strategy": args.sharing_strategy,
        "seed": args.seed,
        "compile_backend": args.compile_backend,
        "compile_mode": None if args.compile_mode in (None, "default") else args.compile_mode,
        "step": args.step,
        "feed": args.feed,
        "profile_steps": args.profile_steps,
    }
    cfg = dataclasses.replace(base, **{k: v for k, v in fields.items() if v is not None})
    if args.sequential:
        cfg = dataclasses.replace(cfg, interleave=False)
    if cfg.eval_every > cfg.steps:
        cfg = dataclasses.replace(cfg, eval_every=cfg.steps)
    return cfg.validate()


def _check_outputs(out, cfg) -> None:
    """Refuse an output folder whose result files would replace an input (the store, or a
    shard of it), before anything runs."""
    from pathlib import Path

    from .._io import check_output_path
    from ..analysis import input_files

    inputs = input_files(cfg.store) if cfg.data == "store" else []
    for name in ("results.json", "results.csv", "summary.json"):
        check_output_path(Path(out) / name, inputs)


def run(args) -> int:
    from ..bench import break_even_lines, run_bench, summarize, targets, write_results

    cfg = config_from_args(args)
    _check_outputs(args.out, cfg)
    if cfg.framework == "jax":
        return _run_jax(args, cfg)
    if cfg.models == ("mace",):
        return _run_mace(args, cfg)
    records = run_bench(cfg, progress=not args.quiet)
    paths = write_results(args.out, records, cfg.as_dict(), plots=not args.no_plots)
    if cfg.data == "store":
        print(
            f"training batches read from the store {cfg.store} (batching_ms = wait for a "
            "batch, update_ms = step)"
        )
    cols = [
        "model",
        "batch_size",
        "strategy",
        "compiles",
        "compile_s",
        "batching_ms",
        "update_ms",
        "step_ms_median",
        "step_ms_mean",
        "graphs_per_s",
        "steady_graphs_per_s",
        "peak_mem_mb",
        "test_rmse",
    ]
    print(format_table(summarize(records), cols))
    for t in targets(records):
        if "end_to_end" in t:
            e = t["end_to_end"]
            print(
                f"{t['model']} b={t['batch_size']}: {e['best']} {e['graphs_per_s']:.1f} "
                f"graphs/s vs pyg-eager {e['pyg_eager_graphs_per_s']:.1f} "
                f"-> {e['speedup']:.2f}x"
            )
        if "padding_cost" in t:
            pc = ", ".join(f"{k} {v:.3f}" for k, v in t["padding_cost"].items())
            print(f"{t['model']} b={t['batch_size']}: update time per real graph / unpadded: {pc}")
            reps = "; ".join(
                f"{k} " + " ".join(f"{x:.3f}" for x in v)
                for k, v in t["padding_cost_repeats"].items()
                if k != "unpadded"
            )
            print(f"{t['model']} b={t['batch_size']}: per repeat: {reps}")
    for line in break_even_lines(targets(records)):
        print(line)
    _print_wrote(paths, records)
    return 0


_RUN_COLUMNS = [
    "model",
    "batch_size",
    "strategy",
    "compiles",
    "compile_s",
    "batching_ms",
    "update_ms",
    "step_ms_median",
    "graphs_per_s",
    "steady_graphs_per_s",
    "peak_mem_mb",
    "test_rmse",
]


def _write_and_tabulate(args, cfg, records, extra: dict) -> dict:
    """Write the run's result files (with ``extra`` in results.json) and print its table."""
    from ..bench import summarize, write_results

    paths = write_results(args.out, records, cfg.as_dict(), plots=not args.no_plots, extra=extra)
    print(format_table(summarize(records), _RUN_COLUMNS))
    return paths


def _print_wrote(paths: dict, records: list) -> None:
    print(f"wrote {paths['results.json']} ({len(records)} records) and {len(paths) - 1} more files")


def _run_mace(args, cfg) -> int:
    from ..bench import break_even_lines, mace_targets, run_bench, targets

    records = run_bench(cfg, progress=not args.quiet)
    tm = mace_targets(records)
    paths = _write_and_tabulate(args, cfg, records, {"mace_targets": tm})
    for t in tm:
        head = f"mace b={t['batch_size']} r={t['repeat']}:"
        dyn = ", ".join(f"{k} {v}/{t['compiles'][k]}" for k, v in t["dynamic_graphs"].items())
        print(f"{head} dynamic-shape graphs / compilations: {dyn}")
        for pair, v in t["speedup"].items():
            print(
                f"{head} {pair}: median same-step ratio {v['median_step_ratio']:.2f}x "
                f"({v['steady_steps']} steady steps); graphs/s ratio compile excluded "
                f"{v['graphs_per_s_ratio_compile_excluded']:.2f}x, included "
                f"{v['graphs_per_s_ratio_compile_included']:.2f}x"
            )
    for line in break_even_lines(targets(records)):
        print(line)
    _print_wrote(paths, records)
    return 0


def _run_jax(args, cfg) -> int:
    from ..bench import jax_targets, run_jax_bench

    records = run_jax_bench(cfg, progress=not args.quiet)
    tj = jax_targets(records)
    paths = _write_and_tabulate(args, cfg, records, {"jax_targets": tj})
    for t in tj:
        head = f"{t['model']} b={t['batch_size']}:"
        for k in ("jraph_dynamic", "jraph_pad64"):
            if f"pack_lpf_over_{k}" in t:
                print(f"{head} pack-lpf / {k} real graphs/s = {t[f'pack_lpf_over_{k}']:.2f}x")
        if "padding_cost" in t:
            pc = ", ".join(f"{k} {v:.3f}" for k, v in t["padding_cost"].items())
            print(f"{head} update time per real graph / unpadded: {pc}")
        waits = ", ".join(f"{k} {v:.3f}" for k, v in t["input_wait_fraction"].items())
        print(f"{head} input wait / step time: {waits}")
    _print_wrote(paths, records)
    return 0
