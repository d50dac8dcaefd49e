"""``graphbatch plan``: size table in, plan file (PLAN.npz) and stats out."""

from __future__ import annotations

import argparse
import json

from .._api import plan
from .._errors import InputError
from .._io import check_output_path
from ..analysis import input_files
from ..planners import get_strategy, strategy_names
from ._common import add_budget_args, budget_from_args, load_sizes
from ._format import format_table, print_json


def _parse_option(text: str):
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--option takes KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = value
    except RecursionError:
        raise argparse.ArgumentTypeError(
            f"--option {key}: JSON nested too deeply for an option value"
        ) from None
    return key.replace("-", "_"), parsed


def add_parser(sub) -> None:
    p = sub.add_parser(
        "plan",
        help="plan one epoch of batches and write PLAN.npz",
        description="Plan one epoch of batches from a size table (SIZES.npz with n_node, "
        "n_edge[, n_bytes]) and write the plan file. Strategies: " + ", ".join(strategy_names()),
    )
    p.add_argument("sizes", help="size table (.npz with int arrays n_node, n_edge[, n_bytes])")
    p.add_argument("--strategy", help="one of: " + ", ".join(strategy_names()))
    p.add_argument(
        "--config",
        metavar="REQUEST.json",
        help="the plan request as JSON (`graphbatch tune --out`, or a tune result): "
        "strategy, batch size or budget, seed, options; flags given too override it",
    )
    add_budget_args(p)
    p.add_argument("--seed", type=int, help="plan seed (default 0, or the --config's)")
    p.add_argument("--epoch", type=int, default=0)
    p.add_argument("--no-shuffle", action="store_true", help="keep dataset order")
    p.add_argument("--on-oversize", choices=("error", "skip", "own_batch"), default="error")
    p.add_argument("--multiple", type=int, help="rounding multiple (static-64, budget estimate)")
    p.add_argument("--sample-size", type=int, help="graphs sampled to estimate the budget")
    p.add_argument(
        "--pad",
        choices=("static-64", "pow2", "max"),
        help="padded shape of balancing strategies (default static-64)",
    )
    p.add_argument(
        "--world-size",
        type=int,
        default=1,
        help="ranks per step: a distributed plan of equal-shape steps (default 1)",
    )
    g = p.add_argument_group("tuple packing (pack-lpf, pack-spf, pack-lpf-1d, pack-nnls, buckets)")
    g.add_argument("--heuristic", help="priority heuristic: product, sum, max, min, node, edge")
    g.add_argument("--num-shapes", type=int, help="buckets: number of padded shapes K (1-16)")
    g.add_argument(
        "--max-graphs-per-pack",
        type=int,
        help="cap on real graphs per pack (below the budget's graph count)",
    )
    g.add_argument(
        "--method",
        choices=("auto", "histogram", "balanced"),
        help="pack-lpf/pack-spf packer (default auto)",
    )
    g.add_argument(
        "--fixed-packs",
        action="store_true",
        help="keep the graph-to-pack assignment fixed across epochs",
    )
    g.add_argument(
        "--no-edge-limit",
        action="store_true",
        help="pack-lpf-1d: do not limit edges; pad them to the worst pack",
    )
    p.add_argument(
        "--option",
        action="append",
        type=_parse_option,
        default=[],
        metavar="KEY=VALUE",
        help="strategy option (repeatable), e.g. --option multiple=32",
    )
    p.add_argument("--out", required=True, help="plan file to write (.npz)")
    p.add_argument("--json", action="store_true", help="print stats as one JSON object")
    p.set_defaults(func=run)


#: Arguments of ``graphbatch.plan`` that ``plan`` sets from its own flags: never an ``--option``.
_PLAN_ARGS = {
    "sizes": "the SIZES argument",
    "strategy": "--strategy",
    "batch_size": "--batch-size",
    "budget": "--max-nodes/--max-edges/--max-graphs",
    "seed": "--seed",
    "epoch": "--epoch",
    "shuffle": "--no-shuffle",
    "on_oversize": "--on-oversize",
    "world_size": "--world-size",
}


def _options_given(args) -> dict:
    """``--option KEY=VALUE`` pairs as a dict, refusing a key given twice and the keys of
    ``graphbatch.plan``'s own arguments (their flags set them)."""
    options: dict = {}
    for key, value in args.option:
        if key in _PLAN_ARGS:
            raise InputError(
                f"--option {key}=... sets an argument of graphbatch.plan itself; "
                f"use {_PLAN_ARGS[key]}"
            )
        if key in options:
            raise InputError(f"--option {key} given twice ({options[key]!r} and {value!r})")
        options[key] = value
    return options


def collect_options(args) -> dict:
    """Strategy options from dedicated flags and ``--option``; only those the strategy takes.
    An option set both ways (``--multiple 64 --option multiple=32``) is refused."""
    strat = get_strategy(args.strategy)
    options = _options_given(args)
    flags = {
        "multiple": args.multiple,
        "sample_size": args.sample_size,
        "pad": getattr(args, "pad", None),
        "heuristic": getattr(args, "heuristic", None),
        "num_shapes": getattr(args, "num_shapes", None),
        "max_graphs_per_pack": getattr(args, "max_graphs_per_pack", None),
        "method": getattr(args, "method", None),
        "fixed_packs": True if getattr(args, "fixed_packs", False) else None,
        "edge_limit": False if getattr(args, "no_edge_limit", False) else None,
    }
    for flag, value in flags.items():
        if value is None:
            continue
        shown = "no-edge-limit" if flag == "edge_limit" else flag.replace("_", "-")
        if flag not in strat.options:
            raise InputError(f"strategy {args.strategy!r} takes no --{shown}")
        if flag in options:
            raise InputError(
                f"--{shown} and --option {flag}={options[flag]!r} both set {flag}; give one"
            )
        options[flag] = value
    return options


def _config_request(args) -> dict:
    """The request of ``--config`` (empty without it); ``args.strategy`` set from it."""
    if args.config is None:
        if args.strategy is None:
            raise InputError("give --strategy, or --config with a plan request")
        return {}
    from ..tuning import load_request

    request = dict(load_request(args.config))
    for key in ("sizes", "epoch", "world_size"):  # graphbatch.plan's, but no request's
        if key in request:
            raise InputError(
                f"--config {args.config}: key {key!r} is not part of a plan request; "
                f"give it as {_PLAN_ARGS[key]}"
            )
    if args.strategy is not None and args.strategy != request["strategy"]:
        raise InputError(
            f"--strategy {args.strategy!r} differs from the --config's {request['strategy']!r}"
        )
    args.strategy = request.pop("strategy")
    return request


def run(args) -> int:
    inputs = [*input_files(args.sizes), *([args.config] if args.config else [])]
    check_output_path(args.out, inputs, suffixes=(".npz",), what="plan file")
    sizes = load_sizes(args.sizes)
    request = _config_request(args)
    options = {**request, **collect_options(args)}
    seed = options.pop("seed", 0)
    args.seed = seed = args.seed if args.seed is not None else seed
    budget = budget_from_args(
        args,
        sizes,
        sample_size=options.get("sample_size", 1000),
        multiple=options.get("multiple", 64),
    )
    for key, flag in (("batch_size", args.batch_size), ("budget", budget)):
        if flag is not None:
            options[key] = flag
    options.setdefault("shuffle", True)
    if args.no_shuffle:
        options["shuffle"] = False
    options.setdefault("on_oversize", args.on_oversize)
    result = plan(
        sizes, args.strategy, seed=seed, epoch=args.epoch, world_size=args.world_size, **options
    )
    result.save(args.out)
    stats = result.stats().as_dict()
    stats["plan_seconds"] = result.meta.get("plan_seconds")
    stats["out"] = str(args.out)
    if args.json:
        print_json(stats)
    else:
        print(format_table([{"metric": k, "value": v} for k, v in stats.items()]))
    return 0
