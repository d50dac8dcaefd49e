"""``graphbatch data``: build a graph store from a real dataset, or export its size table."""

from __future__ import annotations

import os
import signal
import sys

from .._errors import InputError
from .._io import check_output_path, parse_json
from ..analysis import input_files
from ..datasets import ENGINES
from . import _data_stats_cmd
from ._format import format_table

__all__ = ["add_parser"]


def add_parser(sub) -> None:
    p = sub.add_parser(
        "data",
        help="build graph stores (QM9, MOSES, code) and size tables",
        description="Build an HDF5 graph store from installed data, or write a store's size table.",
    )
    dsub = p.add_subparsers(dest="data_command", metavar="ACTION")
    dsub.required = True

    b = dsub.add_parser(
        "build",
        help="build a graph store (.h5)",
        description="Convert a dataset to graphs and write an HDF5 graph store "
        "atomically. qm9: qm9pack molecules with radius/kNN/full graphs; moses: "
        "molsets SMILES with OGB features; code: AST graphs of every function "
        "in a folder of .py files (default: the Python standard library); smiles: your own "
        "CSV of SMILES (--column) with OGB features and numeric --target columns as y.",
    )
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
    b.add_argument(
        "--out",
        required=True,
        help="graph store to write (.h5), or the manifest (.json) with --shards",
    )
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
    b.set_defaults(func=run_build)

    s = dsub.add_parser(
        "sizes",
        help="write a store's size table (.npz)",
        description="Write the per-graph size table (n_node, n_edge, n_bytes) of "
        "a graph store, read from its metadata only.",
    )
    s.add_argument("store", help="graph store (.h5)")
    s.add_argument("--out", required=True, help="size table to write (.npz)")
    s.set_defaults(func=run_sizes)

    v = dsub.add_parser(
        "verify",
        help="check every checksum of a graph store",
        description="Read a graph store once and check the CRC-32 checksum of "
        "every array (HDF5 checks its own metadata checksums on open). For a "
        "sharded store's manifest: check the manifest and every shard. Exit 0 if "
        "intact, 2 with a one-line message naming the damaged file if not.",
    )
    v.add_argument("store", help="graph store (.h5) or sharded store manifest (.json)")
    v.set_defaults(func=run_verify)

    c = dsub.add_parser(
        "convert",
        help="rewrite a version-1 store in the current format",
        description="Convert a graph store written by an earlier graphbatch "
        "(format version 1: chunked, compressed arrays) to the current format "
        "(contiguous, memory-mappable, checksummed). The input is not changed.",
    )
    c.add_argument("store", help="version-1 graph store (.h5)")
    c.add_argument("--out", required=True, help="converted store to write (.h5); not the input")
    c.set_defaults(func=run_convert)

    _data_stats_cmd.add_parser(dsub)


class _Terminated(SystemExit):
    """SIGTERM or SIGINT during a single-file build: unwinds through the writer (which deletes
    its temporaries) like any exit, past ``except Exception`` blocks."""


#: The signal that stopped this build (the first one; later ones are ignored).
_STOPPED_BY: list[int] = []

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _stopped_by(signum: int) -> bool:
    """Note a stop signal; whether it is the first (a later one -- Ctrl-C pressed twice --
    changes nothing: the first one's cleanup runs to its end)."""
    if _STOPPED_BY:
        return False
    _STOPPED_BY.append(signum)
    return True


def _terminate_cleanly(signum, frame):
    if _stopped_by(signum):
        raise _Terminated(128 + signum)


def _on_stop_signals(handler) -> dict:
    """Route SIGTERM and SIGINT (Ctrl-C; the build's worker processes ignore it) to
    ``handler``; returns the handlers they had."""
    return {signum: signal.signal(signum, handler) for signum in _STOP_SIGNALS}


def _restore(previous: dict) -> None:
    """The handlers before the build, unless a signal stopped it (then later ones stay
    ignored until the process exits)."""
    if not _STOPPED_BY:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _say_terminated(what: str) -> int:
    """The one line of a build stopped by a signal; returns its exit status, 128 + signal.
    Later stop signals are ignored from here on: the interpreter's shutdown resets Python's
    handlers to the default action, which would end the process by the signal instead of
    with this status."""
    try:
        _on_stop_signals(signal.SIG_IGN)
        signal.getsignal(signal.SIGINT)  # a call: a signal caught meanwhile is handled here
    except OSError:  # "Signal N ignored due to race condition": it was caught before
        pass
    signum = _STOPPED_BY[0] if _STOPPED_BY else signal.SIGTERM
    word = "interrupted" if signum == signal.SIGINT else "terminated"
    print(f"graphbatch data: {word} ({signal.Signals(signum).name}); {what}", file=sys.stderr)
    return 128 + signum


def _build_stopped(out: str, build, *args, **kwargs):
    """``build(*args, **kwargs)`` with SIGTERM and SIGINT stopping it cleanly: the report, or
    the exit status of the one line `_say_terminated` printed. Whatever the build raised
    once a signal arrived (a worker pool ended under it, say) is the signal's doing."""
    previous = _on_stop_signals(_terminate_cleanly)
    try:
        return build(*args, **kwargs)
    except BaseException:
        if _STOPPED_BY:
            return _say_terminated(f"nothing was written to {out} (temporaries removed)")
        raise
    finally:
        _restore(previous)


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
    if args.shards is not None:
        return _run_sharded_build(args)
    report = _build_stopped(
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
    report = _build_stopped(
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
        _stopped_by(signum)
        stop.set()

    previous = _on_stop_signals(call_off)
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
            return _say_terminated(
                f"no manifest was written to {args.out}; this build's shards were removed"
            )
        raise
    finally:
        _restore(previous)
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


def run_sizes(args) -> int:
    from ..datasets import open_store

    check_output_path(args.out, input_files(args.store), suffixes=(".npz",), what="size table")
    with open_store(args.store, cache_size=0) as store:
        sizes = store.graph_sizes()
    path = sizes.save(args.out)
    print(
        f"{len(sizes):,} graphs, {int(sizes.n_node.sum()):,} nodes, "
        f"{int(sizes.n_edge.sum()):,} edges -> {path}"
    )
    return 0


def run_verify(args) -> int:
    from ..datasets import open_store

    with open_store(args.store, cache_size=0) as store:
        store.verify()
        n = len(store.fields) + (6 if getattr(store, "format_version", 3) == 2 else 8)
        shards = getattr(store, "n_shards", None)
        where = f"{shards} shards of {n} arrays each" if shards else f"{n} arrays"
        print(f"{args.store}: intact ({len(store):,} graphs, {where}, store id {store.uuid})")
    return 0


def run_convert(args) -> int:
    from ..datasets import GraphStore, convert_store

    out = convert_store(args.store, args.out)
    with GraphStore(out, cache_size=0, verify=True) as store:
        print(f"converted {len(store):,} graphs -> {out} (store id {store.uuid})")
    return 0
