"""``graphbatch data build``: convert a dataset to a graph store -- one HDF5 file, or shards
built on a cluster engine plus their JSON manifest -- stopping cleanly on SIGTERM or SIGINT
(`graphbatch.cli._build_signals`)."""

from __future__ import annotations

import os
from typing import Any

from .._errors import InputError
from .._io import check_output_path, parse_json
from ..analysis import input_files
from ..datasets import ENGINES
from ._build_signals import (
    note_stop_signal,
    on_stop_signals,
    restore_handlers,
    run_stoppable,
    say_terminated,
)
from ._format import format_table

__all__ = ["add_parser", "run_build"]


def add_parser(dsub: Any) -> None:
    """Register ``build`` under ``graphbatch data``."""
    b = dsub.add_parser(
        "build",
        help="build a graph store (.h5)",
        description="Convert a dataset to graphs and write an HDF5 graph store "
        "atomically. qm9: qm9pack molecules with radius/kNN/full graphs; moses: "
        "molsets SMILES with OGB features; code: AST graphs of every function "
        "in a folder of .py files (default: the Python standard library); smiles: your own "
        "CSV of SMILES (--column) with OGB features and numeric --target columns as y.",
    )
    _add_dataset_arguments(b)
    _add_shard_arguments(b)
    b.add_argument(
        "--out",
        required=True,
        help="graph store to write (.h5), or the manifest (.json) with --shards",
    )
    _add_atoms_arguments(b)
    b.set_defaults(func=run_build)


def _add_dataset_arguments(b: Any) -> None:
    """The dataset, its inputs and the graph construction (every dataset)."""
    b.add_argument("dataset", choices=("qm9", "moses", "code", "smiles", "extxyz", "ase-db"))
    b.add_argument(
        "inputs",
        nargs="*",
        metavar="FILE",
        help="extxyz / ase-db: the input files (extxyz: one or more; ase-db: an ASE "
        "database, .db or .json); smiles: the .csv[.gz] file",
    )
    b.add_argument(
        "--column", default="smiles", help="smiles: the column holding SMILES (default smiles)"
    )
    b.add_argument(
        "--target",
        action="extend",
        nargs="+",
        default=[],
        metavar="COL",
        help="smiles: numeric columns stored as the graph target y (empty cells: NaN)",
    )
    b.add_argument(
        "--graph",
        choices=("radius", "knn", "full"),
        default="radius",
        help="QM9 graph construction (default radius)",
    )
    b.add_argument("--cutoff", type=float, default=6.0, help="radius cutoff in Å (default 6.0)")
    b.add_argument("--k", type=int, default=24, help="neighbours per node for knn (default 24)")
    b.add_argument("--limit", type=int, help="use only the first N records")
    b.add_argument(
        "--source",
        help="data location: qm9pack data/ folder, MOSES .csv[.gz], or a folder of .py files",
    )
    b.add_argument(
        "--workers",
        type=int,
        help="processes that convert the records: SMILES (moses; default: CPUs) and structures "
        "(extxyz, ase-db; default 1); qm9 and code build in one; with --shards: workers of the "
        "local cluster (default: CPUs)",
    )
    b.add_argument(
        "--reverse-edges",
        action="store_true",
        help="code graphs: also add reversed AST and next-token edges",
    )
    b.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_shard_arguments(b: Any) -> None:
    """A sharded build on a cluster engine (``--shards``)."""
    b.add_argument(
        "--shards",
        type=int,
        help="build N shard stores on a cluster engine plus a "
        "JSON manifest (--out MANIFEST.json); open it with open_store(MANIFEST)",
    )
    b.add_argument(
        "--engine", choices=ENGINES, help=f"cluster engine for --shards (default {ENGINES[0]})"
    )
    b.add_argument(
        "--address",
        help="with --shards: the running cluster's scheduler address "
        "(default: start a local cluster of --workers processes)",
    )


def _add_atoms_arguments(b: Any) -> None:
    """The extxyz / ase-db group: which keys hold the labels, and MACE's weights and heads."""
    a = b.add_argument_group(
        "extxyz / ase-db",
        "Structures read by ASE, streamed; periodic radius graphs at --cutoff "
        "with MACE's edge set (vesin), labels and weights as MACE reads them. Values are stored "
        "as in the file (stated units: eV, Å, eV/Å, eV/Å^3).",
    )
    for prop in ("energy", "forces", "stress", "virials", "charges"):
        a.add_argument(
            f"--{prop}-key",
            metavar="KEY",
            help=f"info/arrays key of the {prop} (default REF_{prop} for extxyz, "
            f"{prop} for ase-db; 'none' drops it)",
        )
    a.add_argument(
        "--require",
        nargs="*",
        metavar="PROP",
        help="properties every frame must have (default: energy forces); the others "
        "get weight 0 where missing, as in MACE",
    )
    a.add_argument(
        "--keep",
        nargs="+",
        default=(),
        metavar="KEY",
        help="also store these info (per structure) or arrays (per atom) keys",
    )
    a.add_argument(
        "--config-type-weights",
        metavar="JSON",
        help='MACE\'s per-config_type weights, e.g. \'{"Default": 1.0, "slab": 0.5}\'',
    )
    a.add_argument(
        "--head",
        default="Default",
        help="head name of every structure (MACE's head; default Default)",
    )
    a.add_argument("--head-key", help="info key holding each structure's head name")
    a.add_argument(
        "--chunk-frames",
        type=int,
        default=512,
        help="frames per block converted by one worker (default 512)",
    )


def run_build(args) -> int:
    from ..datasets import STORE_SUFFIXES, build_store

    check_output_path(
        args.out,
        input_files(args.source),
        suffixes=(".json",) if args.shards is not None else STORE_SUFFIXES,
        what="sharded store manifest" if args.shards is not None else "graph store",
    )

    if args.dataset in ("extxyz", "ase-db"):
        return _run_atoms_build(args)
    _check_build_options(args)
    if args.shards is not None:
        return _run_sharded_build(args)
    report = run_stoppable(
        args.out,
        build_store,
        args.dataset,
        args.out,
        graph=args.graph,
        cutoff=args.cutoff,
        k=args.k,
        limit=args.limit,
        source=args.source,
        workers=args.workers,
        reverse_edges=args.reverse_edges,
        progress=not args.no_progress,
        column=args.column,
        targets=args.target,
    )
    if isinstance(report, int):
        return report
    print(
        format_table(
            [
                {
                    "dataset": report.dataset,
                    "graphs": report.n_graph,
                    "nodes": report.n_node,
                    "edges": report.n_edge,
                    "failed": len(report.failures),
                    "graphs/s": round(report.graphs_per_second, 1),
                    "MB": round(os.path.getsize(report.path) / 2**20, 2),
                }
            ]
        )
    )
    if report.failures:
        _print_failures(report.failures)
        print(f"first failure: {report.failures[0][1]}")
    print(f"wrote {report.path}")
    return 0


def _check_build_options(args) -> None:
    """The flags of a qm9 / moses / code / smiles build, checked (``InputError`` naming the
    flag); ``smiles FILE.csv`` becomes the build's ``--source``."""
    if args.dataset == "smiles":
        _smiles_source(args)
    elif args.inputs:
        raise InputError(
            f"{args.dataset} takes no input files (got {args.inputs[0]!r}); use "
            "--source for another data location"
        )
    if args.limit is not None and args.limit < 1:
        raise InputError(f"--limit must be >= 1, got {args.limit}")
    if args.workers is not None and args.workers < 1:
        raise InputError(f"--workers must be >= 1, got {args.workers}")
    if args.shards is None:
        for flag in ("engine", "address"):
            if getattr(args, flag) is not None:
                raise InputError(f"--{flag} needs --shards (a sharded build)")
    elif args.shards < 1:
        raise InputError(f"--shards must be >= 1, got {args.shards}")


def _smiles_source(args) -> None:
    """``smiles FILE.csv``: the one input file becomes the build's source (checked against
    ``--out`` like every input)."""
    if len(args.inputs) != 1 or args.source is not None:
        raise InputError(
            "smiles takes one CSV file: graphbatch data build smiles FILE.csv "
            f"--column smiles [--target COL ...] --out STORE (got {len(args.inputs)} files"
            f"{' and --source' if args.source is not None else ''})"
        )
    args.source = args.inputs[0]
    check_output_path(args.out, input_files(args.source), what="graph store")


def _atoms_keys(args):
    from ..datasets import AtomsKeys

    db = args.dataset == "ase-db"
    given = {}
    for prop in ("energy", "forces", "stress", "virials", "charges"):
        key = getattr(args, f"{prop}_key")
        if key is None:
            key = prop if db else f"REF_{prop}"
        given[prop] = None if key.lower() == "none" else key
    weights = {}
    if args.config_type_weights:
        weights = parse_json(args.config_type_weights, "--config-type-weights", max_bytes=1 << 20)
        if not isinstance(weights, dict):
            raise InputError("--config-type-weights must be a JSON object {config_type: weight}")
    required = ("energy", "forces") if args.require is None else tuple(args.require)
    return AtomsKeys(
        **given,
        required=tuple(p for p in required if given.get(p) or p not in given),
        keep=tuple(args.keep),
        config_type_weights=weights,
        head=args.head,
        head_key=args.head_key,
    )


def _run_atoms_build(args) -> int:
    from ..datasets import build_atoms_store, import_vesin

    import_vesin(without_torch=True)  # this process only builds: no torch import (seconds)

    if not args.inputs:
        raise InputError(
            f"{args.dataset} needs input files: graphbatch data build {args.dataset} "
            "FILE... --cutoff R --out STORE"
        )
    for flag in ("shards", "engine", "address", "limit", "source"):
        if getattr(args, flag) is not None:
            raise InputError(
                f"--{flag} does not apply to {args.dataset} (use --workers for parallel conversion)"
            )
    if args.dataset == "ase-db" and len(args.inputs) != 1:
        raise InputError(f"ase-db takes one database file, got {len(args.inputs)}")
    report = run_stoppable(
        args.out,
        build_atoms_store,
        args.inputs,
        args.out,
        cutoff=args.cutoff,
        format=args.dataset,
        keys=_atoms_keys(args),
        workers=args.workers or 1,
        chunk_frames=args.chunk_frames,
        progress=not args.no_progress,
    )
    if isinstance(report, int):
        return report
    print(
        format_table(
            [
                {
                    "dataset": args.dataset,
                    "structures": report.n_graph,
                    "atoms": report.n_node,
                    "edges": report.n_edge,
                    "cutoff": args.cutoff,
                    "structures/s": round(report.graphs_per_second, 1),
                    "MB": round(os.path.getsize(report.path) / 2**20, 2),
                }
            ]
        )
    )
    print(f"wrote {report.path}")
    return 0


def _print_failures(failures: list) -> None:
    """One line naming the records (first 20 indices) a build could not convert."""
    shown = ", ".join(str(i) for i, _ in failures[:20])
    more = f" (+{len(failures) - 20} more)" if len(failures) > 20 else ""
    print(
        f"{len(failures)} record(s) could not be converted and are not in the "
        f"store (indices also stored as failed_index): {shown}{more}"
    )


def _run_sharded_build(args) -> int:
    """A sharded build; SIGTERM or SIGINT sets the build's ``stop`` event (never an exception
    inside the cluster engine's calls), so the driver calls the build off cleanly."""
    import threading

    from .._errors import BuildCancelled
    from ..datasets import build_sharded_store

    stop = threading.Event()

    def call_off(signum, frame):
        note_stop_signal(signum)
        stop.set()

    previous = on_stop_signals(call_off)
    try:
        report = build_sharded_store(
            args.dataset,
            args.out,
            shards=args.shards,
            engine=args.engine or ENGINES[0],
            address=args.address,
            workers=args.workers,
            graph=args.graph,
            cutoff=args.cutoff,
            k=args.k,
            limit=args.limit,
            source=args.source,
            reverse_edges=args.reverse_edges,
            progress=not args.no_progress,
            stop=stop,
            column=args.column,
            targets=args.target,
        )
    except BaseException as exc:
        # terminated: the engine may fail in its own way first (e.g. worker processes that got
        # the signal too, from a process-group kill, fail to start)
        if isinstance(exc, BuildCancelled) or stop.is_set():
            return say_terminated(
                f"no manifest was written to {args.out}; this build's shards were removed"
            )
        raise
    finally:
        restore_handlers(previous)
    print(
        format_table(
            [
                {
                    "dataset": report.dataset,
                    "shards": len(report.shards),
                    "graphs": report.n_graph,
                    "nodes": report.n_node,
                    "edges": report.n_edge,
                    "failed": len(report.failures),
                    "graphs/s": round(report.graphs_per_second, 1),
                    "CPU ms/graph": round(1e3 * report.cpu_seconds_per_graph, 3),
                    "MB": round(sum(os.path.getsize(p) for p in report.shards) / 2**20, 2),
                }
            ]
        )
    )
    if report.failures:
        _print_failures(report.failures)
    print(f"wrote {len(report.shards)} shards and the manifest {report.path}")
    return 0
