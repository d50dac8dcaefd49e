"""MOSES (1,584,663 drug-like molecules in the training split) from the ``molsets`` package.

The SMILES come from ``moses/dataset/data/<split>.csv.gz`` inside the installed package, which is
never imported (it pins old dependencies). Conversion uses the OGB featurisation
(`smiles_to_graph`) in a process pool; molecules RDKit rejects are reported by index through the
``failures`` list and stored in the graph store's ``failed_index`` -- never dropped silently.
"""

from __future__ import annotations

import csv
import gzip
import io
import multiprocessing
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import InputError
from .._io import check_regular_file
from .._sizes import GraphSizes
from .._validate import as_nonnegative_int, as_positive_int
from ._graphs import GraphArrays
from ._ogb import smiles_size, smiles_to_graph
from ._resources import package_data_path
from ._signals import quiet_worker, sigint_held

__all__ = ["MOSES_TRAIN_SIZE", "load_moses_smiles", "moses_graphs", "moses_sizes", "smiles_graphs"]

#: Molecules in MOSES's training split.
MOSES_TRAIN_SIZE = 1_584_663
_SPLITS = ("train", "test", "test_scaffolds")


def load_moses_smiles(
    split: str = "train", limit: int | None = None, source: str | Path | None = None
) -> list[str]:
    """The first ``limit`` SMILES of a MOSES split (``train``, ``test``, ``test_scaffolds``).

    ``source`` is a ``.csv``/``.csv.gz`` file with a ``SMILES`` column (default: molsets' file).
    """
    if split not in _SPLITS:
        raise InputError(f"unknown MOSES split {split!r}; choose one of {_SPLITS}")
    if limit is not None:
        limit = as_nonnegative_int(limit, "limit")
    path = (
        Path(source)
        if source is not None
        else package_data_path("moses", "dataset", "data", f"{split}.csv.gz")
    )
    if path.is_dir():
        path = path / f"{split}.csv.gz"
    check_regular_file(path, "MOSES source")  # a FIFO would block
    opener = gzip.open if path.suffix == ".gz" else open
    out: list[str] = []
    with opener(path, "rb") as raw:
        reader = csv.reader(io.TextIOWrapper(raw, encoding="utf-8", newline=""))
        header = next(reader, None)
        if not header or "SMILES" not in header:
            raise InputError(f"{str(path)!r} has no SMILES column (header {header!r})")
        col = header.index("SMILES")
        for row in reader:
            if limit is not None and len(out) >= limit:
                break
            out.append(row[col])
    return out


def _convert(task: tuple[int, Sequence[str], bool]) -> dict[str, Any]:
    """Worker: convert one block of SMILES; returns counts, features and failures."""
    start, block, sizes_only = task
    n_node, n_edge, xs, eis, eas, ok, failed = [], [], [], [], [], [], []
    for k, smi in enumerate(block):
        try:
            if sizes_only:
                n, e = smiles_size(smi)
            else:
                x, ei, ea = smiles_to_graph(smi)
                n, e = x.shape[0], ei.shape[1]
                xs.append(x)
                eis.append(ei)
                eas.append(ea)
        except Exception as exc:  # RDKit raises several types; every failure is reported
            failed.append((start + k, f"{type(exc).__name__}: {exc}"))
            continue
        ok.append(start + k)
        n_node.append(n)
        n_edge.append(e)
    res = {
        "n_node": np.asarray(n_node, np.int64),
        "n_edge": np.asarray(n_edge, np.int64),
        "index": np.asarray(ok, np.int64),
        "failed": failed,
    }
    if not sizes_only:
        res["x"] = np.concatenate(xs).astype(np.uint8) if xs else np.zeros((0, 9), np.uint8)
        res["edge_index"] = (
            np.concatenate(eis, axis=1).astype(np.int32) if eis else np.zeros((2, 0), np.int32)
        )
        res["edge_attr"] = (
            np.concatenate(eas).astype(np.uint8) if eas else np.zeros((0, 3), np.uint8)
        )
    return res


def _context() -> multiprocessing.context.BaseContext:
    """``fork`` where the platform has it and the process is single-threaded (workers inherit
    the loaded modules and need no importable ``__main__``), else ``spawn``. A process with other
    threads -- Python threads, or torch's, once torch is imported -- is not forked: a child can
    inherit a lock some other thread held at the fork and wait on it forever (seen once in the
    test suite after torch had run)."""
    import sys
    import threading

    methods = multiprocessing.get_all_start_methods()
    single = threading.active_count() == 1 and "torch" not in sys.modules
    return multiprocessing.get_context("fork" if "fork" in methods and single else "spawn")


def _blocks(
    smiles: Sequence[str], chunk_size: int, sizes_only: bool
) -> Iterator[tuple[int, list[str], bool]]:
    for s in range(0, len(smiles), chunk_size):
        yield s, list(smiles[s : s + chunk_size]), sizes_only


def _run(
    smiles: Sequence[str],
    *,
    sizes_only: bool,
    workers: int | None,
    chunk_size: int,
    progress: bool,
    failures: list | None,
) -> Iterator[dict]:
    chunk_size = as_positive_int(chunk_size, "chunk_size")
    workers = (os.cpu_count() or 1) if workers is None else as_positive_int(workers, "workers")
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(smiles), unit="mol", desc="SMILES -> graphs")
    tasks = _blocks(smiles, chunk_size, sizes_only)
    results: Iterator[dict[str, Any]]
    try:
        if workers == 1:
            results = map(_convert, tasks)
            pool = None
        else:
            with sigint_held():  # the workers never see Ctrl-C: the parent stops them
                pool = _context().Pool(workers, initializer=quiet_worker)
            results = pool.imap(_convert, tasks)  # ordered: output order = input order
        for res in results:
            if failures is not None:
                failures.extend(res["failed"])
            if bar is not None:
                bar.update(res["n_node"].shape[0] + len(res["failed"]))
            yield res
    finally:
        if bar is not None:
            bar.close()
        if workers != 1 and pool is not None:
            pool.terminate()
            pool.join()


def smiles_graphs(
    smiles: Sequence[str],
    *,
    workers: int | None = None,
    chunk_size: int = 2048,
    progress: bool = False,
    failures: list | None = None,
) -> Iterator[GraphArrays]:
    """OGB graphs of ``smiles`` in input order, one `GraphArrays` per block of ``chunk_size``.

    Fields: node ``x`` (uint8 ``[n, 9]``), edge ``edge_attr`` (uint8 ``[E, 3]``), graph ``index``
    (position in ``smiles``). A SMILES RDKit rejects is skipped and ``(index, message)`` is
    appended to ``failures`` (pass a list to collect them). ``workers`` processes (default: all
    CPUs; 1 = in this process).
    """
    for res in _run(
        smiles,
        sizes_only=False,
        workers=workers,
        chunk_size=chunk_size,
        progress=progress,
        failures=failures,
    ):
        if res["n_node"].shape[0] == 0:
            continue
        yield GraphArrays(
            n_node=res["n_node"],
            n_edge=res["n_edge"],
            edge_index=res["edge_index"],
            node={"x": res["x"]},
            edge={"edge_attr": res["edge_attr"]},
            graph={"index": res["index"]},
        )


def moses_graphs(
    split: str = "train",
    *,
    limit: int | None = None,
    source: str | Path | None = None,
    **options: Any,
) -> Iterator[GraphArrays]:
    """MOSES molecules as OGB graphs; ``options`` as for `smiles_graphs`."""
    return smiles_graphs(load_moses_smiles(split, limit, source), **options)


def moses_sizes(
    split: str = "train",
    *,
    limit: int | None = None,
    source: str | Path | None = None,
    failures: list | None = None,
    **options: Any,
) -> tuple[GraphSizes, np.ndarray]:
    """``(sizes, index)``: node/edge counts of the OGB graphs (no features computed) and the
    SMILES index of each converted molecule (failures go to ``failures``)."""
    smiles = load_moses_smiles(split, limit, source)
    nn, ne, idx = [], [], []
    for res in _run(
        smiles,
        sizes_only=True,
        failures=failures,
        workers=options.get("workers"),
        chunk_size=options.get("chunk_size", 8192),
        progress=options.get("progress", False),
    ):
        nn.append(res["n_node"])
        ne.append(res["n_edge"])
        idx.append(res["index"])
    return GraphSizes(np.concatenate(nn), np.concatenate(ne)), np.concatenate(idx)
