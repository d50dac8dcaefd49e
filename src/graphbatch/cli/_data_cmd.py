"""``graphbatch data``: build a graph store from a real dataset, or export its size table.

Each action's parser and runner: ``build`` in `graphbatch.cli._data_build_cmd`, ``stats`` in
`graphbatch.cli._data_stats_cmd`, ``sizes``, ``verify`` and ``convert`` here."""

from __future__ import annotations

from typing import Any

from .._io import check_output_path
from ..analysis import input_files
from . import _data_build_cmd, _data_stats_cmd

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    """Register ``data`` and its actions, in the order ``graphbatch data --help`` lists them."""
    p = sub.add_parser(
        "data",
        help="build graph stores (QM9, MOSES, code) and size tables",
        description="Build an HDF5 graph store from installed data, or write a store's size table.",
    )
    dsub = p.add_subparsers(dest="data_command", metavar="ACTION")
    dsub.required = True
    _data_build_cmd.add_parser(dsub)
    _add_sizes_parser(dsub)
    _add_verify_parser(dsub)
    _add_convert_parser(dsub)
    _data_stats_cmd.add_parser(dsub)


def _add_sizes_parser(dsub: Any) -> None:
    """Register ``sizes``: a store's size table."""
    s = dsub.add_parser(
        "sizes",
        help="write a store's size table (.npz)",
        description="Write the per-graph size table (n_node, n_edge, n_bytes) of "
        "a graph store, read from its metadata only.",
    )
    s.add_argument("store", help="graph store (.h5)")
    s.add_argument("--out", required=True, help="size table to write (.npz)")
    s.set_defaults(func=run_sizes)


def _add_verify_parser(dsub: Any) -> None:
    """Register ``verify``: every checksum of a store or sharded store."""
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


def _add_convert_parser(dsub: Any) -> None:
    """Register ``convert``: a version-1 store rewritten in the current format."""
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
