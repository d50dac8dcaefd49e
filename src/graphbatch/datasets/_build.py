"""Dataset builds: source records -> graphs -> one graph store on disk.

One implementation serves both builds. `build_store` writes one file; the sharded build
(`graphbatch.datasets._cluster.build_sharded_store`) loads the records once
(`load_records`), cuts them into contiguous partitions (`slice_records`) and runs
`write_partition` for each on a cluster worker. Graph-level ids and failure indices are always
*global* source-record indices (a partition starting at record ``start`` adds ``start``), so a
sharded build holds exactly the graphs of the single-file build of the same records.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np

from .._errors import InputError
from .._io import check_output_path
from ._construct import GRAPH_METHODS
from ._graphs import GraphArrays
from ._store_write import STORE_SUFFIXES, GraphStoreWriter

if TYPE_CHECKING:
    from ._qm9 import QM9Molecules
    from ._smiles_csv import SmilesTable

    #: What `load_records` reads: QM9 molecules, MOSES SMILES, Python files or a SMILES table.
    Records = QM9Molecules | list[str] | list[Path] | SmilesTable

__all__ = [
    "DATASETS",
    "BuildOptions",
    "BuildReport",
    "build_store",
    "load_records",
    "record_count",
    "slice_records",
    "write_partition",
]

#: Dataset names understood by `build_store` (and ``graphbatch data build``).
DATASETS = ("qm9", "moses", "code", "smiles")


@dataclass(frozen=True)
class BuildOptions:
    """What to build: dataset name and its conversion options (validated by `check`).

    ``graph``/``cutoff`` (Å)/``k``: QM9's graph construction; ``limit``: the first N records
    (for ``code``: N functions); ``source``: data location (for ``smiles``: the CSV file);
    ``reverse_edges``: code graphs; ``column``/``targets``: a SMILES table's SMILES column and
    numeric target columns (stored as the graph field ``y``, float64 ``[G, T]``)."""

    dataset: str
    graph: str = "radius"
    cutoff: float = 6.0
    k: int = 24
    limit: int | None = None
    source: str | None = None
    reverse_edges: bool = False
    column: str = "smiles"
    targets: tuple[str, ...] = ()

    def check(self) -> BuildOptions:
        if self.dataset not in DATASETS:
            raise InputError(f"unknown dataset {self.dataset!r}; choose one of {DATASETS}")
        if self.graph not in GRAPH_METHODS:
            raise InputError(
                f"unknown graph construction {self.graph!r}; choose one of {GRAPH_METHODS}"
            )
        if self.limit is not None and (isinstance(self.limit, bool) or int(self.limit) < 0):
            raise InputError(f"limit must be >= 0, got {self.limit!r}")
        if self.dataset == "smiles" and self.source is None:
            raise InputError(
                "smiles needs its CSV file: graphbatch data build smiles FILE.csv "
                "--column smiles [--target COL ...] --out STORE"
            )
        if self.dataset != "smiles" and (self.targets or self.column != "smiles"):
            raise InputError(f"--column and --target apply to smiles, not {self.dataset}")
        return self

    def as_json(self) -> dict:
        return {
            "dataset": self.dataset,
            "graph": self.graph,
            "cutoff": self.cutoff,
            "k": self.k,
            "limit": self.limit,
            "source": self.source,
            "reverse_edges": self.reverse_edges,
            "column": self.column,
            "targets": list(self.targets),
        }


@dataclass(frozen=True)
class BuildReport:
    """What a build produced: graph/node/edge totals, failures ``(source index, message)``
    (records that could not be converted and are *not* in the store), wall seconds."""

    path: Path
    dataset: str
    n_graph: int
    n_node: int
    n_edge: int
    seconds: float
    failures: list = field(default_factory=list)

    @property
    def graphs_per_second(self) -> float:
        return self.n_graph / self.seconds if self.seconds > 0 else float("inf")


def _tqdm_chunks(
    chunks: Iterable[GraphArrays], total: int | None, unit: str, desc: str
) -> Iterator[GraphArrays]:
    from tqdm import tqdm

    with tqdm(total=total, unit=unit, desc=desc) as bar:
        for chunk in chunks:
            bar.update(len(chunk))
            yield chunk


def load_records(opts: BuildOptions) -> tuple[Records, dict]:
    """``(records, meta)``: the source records of ``opts.dataset`` and the store metadata.

    Records: QM9 -> `QM9Molecules` (first ``limit`` molecules); MOSES -> list of SMILES (first
    ``limit``); code -> list of ``.py`` file paths (``limit`` counts functions, applied during
    conversion)."""
    opts.check()
    meta: dict = {"dataset": opts.dataset, "limit": opts.limit, "python": platform.python_version()}
    records: Records
    if opts.dataset == "qm9":
        from ._qm9 import QM9_TARGETS, load_qm9

        records = load_qm9(opts.limit, opts.source)
        meta.update(
            graph=opts.graph,
            cutoff_angstrom=opts.cutoff if opts.graph == "radius" else None,
            k=opts.k if opts.graph == "knn" else None,
            source="qm9pack 1.0.3 (data/qm9_part*.csv)",
            targets=[{"name": n, "column": c, "unit": u} for n, c, u in QM9_TARGETS],
            units={"pos": "angstrom", "edge_dist": "angstrom"},
        )
    elif opts.dataset == "moses":
        from ._moses import load_moses_smiles
        from ._ogb import atom_feature_dims, bond_feature_dims

        records = load_moses_smiles("train", opts.limit, opts.source)
        meta.update(
            source="molsets 0.3.1 (moses/dataset/data/train.csv.gz)",
            featurisation="OGB smiles2graph (9 atom, 3 bond features)",
            atom_feature_dims=atom_feature_dims(),
            bond_feature_dims=bond_feature_dims(),
        )
    elif opts.dataset == "smiles":
        from ._ogb import atom_feature_dims, bond_feature_dims
        from ._smiles_csv import load_smiles_csv

        records = load_smiles_csv(
            cast(str, opts.source), opts.column, tuple(opts.targets), opts.limit
        )
        meta.update(
            source=str(opts.source),
            column=opts.column,
            targets=list(opts.targets),
            featurisation="OGB smiles2graph (9 atom, 3 bond features)",
            atom_feature_dims=atom_feature_dims(),
            bond_feature_dims=bond_feature_dims(),
        )
    else:
        from ._code import AST_NODE_TYPES, CODE_EDGE_TYPES, python_files

        root, files = python_files(opts.source)
        records = files
        meta.update(
            source=str(root),
            files=[str(f.relative_to(root)) for f in files],
            node_types=list(AST_NODE_TYPES),
            edge_types=list(CODE_EDGE_TYPES),
            reverse_edges=opts.reverse_edges,
        )
    return records, meta


def record_count(records: Records) -> int:
    """Number of source records (molecules, SMILES or files)."""
    return len(records)


def slice_records(records: Records, start: int, stop: int) -> Records:
    """Records ``start:stop`` (a contiguous partition) of what `load_records` returned."""
    from ._qm9 import QM9Molecules
    from ._smiles_csv import SmilesTable

    if isinstance(records, SmilesTable):
        return records.slice(start, stop)
    if isinstance(records, QM9Molecules):
        first = np.zeros(len(records) + 1, dtype=np.int64)
        np.cumsum(records.n_node, out=first[1:])
        a, b = first[start], first[stop]
        return QM9Molecules(
            z=records.z[a:b],
            pos=records.pos[a:b],
            n_node=records.n_node[start:stop],
            y=records.y[start:stop],
            index=records.index[start:stop],
        )
    return records[start:stop]  # a list: a new one


def _shift_graph_field(chunk: GraphArrays, name: str, start: int) -> GraphArrays:
    if start == 0:
        return chunk
    shifted = (chunk.graph[name] + start).astype(chunk.graph[name].dtype)
    return replace(chunk, graph={**chunk.graph, name: shifted})


def _smiles_chunks(
    opts: BuildOptions,
    records: Records,
    start: int,
    workers: int | None,
    progress: bool,
    failures: list,
) -> Iterator[GraphArrays]:
    """OGB graphs of MOSES SMILES or a SMILES table's rows; a table's targets become the graph
    field ``y`` (the rows of the molecules RDKit parsed)."""
    from ._moses import smiles_graphs
    from ._smiles_csv import SmilesTable

    table = records if isinstance(records, SmilesTable) else None
    smiles = table.smiles if table is not None else cast("list[str]", records)
    for chunk in smiles_graphs(smiles, workers=workers, progress=progress, failures=failures):
        if table is not None and table.target_names:
            chunk = replace(chunk, graph={**chunk.graph, "y": table.targets[chunk.graph["index"]]})
        yield _shift_graph_field(chunk, "index", start)


def convert_records(
    opts: BuildOptions,
    records: Records,
    *,
    start: int = 0,
    workers: int | None = 1,
    progress: bool = False,
    failures: list | None = None,
) -> Iterator[GraphArrays]:
    """Graphs of ``records`` (records ``start:start + len(records)`` of the whole source) in
    chunks. Ids and ``failures`` entries ``(index, message)`` use global record indices.
    ``workers``: processes for MOSES SMILES conversion (1 = in this process)."""
    local: list = []
    if opts.dataset == "qm9":
        from ._qm9 import qm9_graphs

        chunks = qm9_graphs(
            opts.graph,
            cutoff=opts.cutoff,
            k=opts.k,
            mols=cast("QM9Molecules", records),
            chunk_size=2048,
        )
        if progress:
            chunks = _tqdm_chunks(chunks, len(records), "mol", f"QM9 -> {opts.graph} graphs")
        yield from chunks  # QM9's graph id is the GDB-9 id: global already
        return
    try:
        if opts.dataset in ("moses", "smiles"):
            yield from _smiles_chunks(opts, records, start, workers, progress, local)
        else:
            from ._code import code_graphs

            for chunk in code_graphs(
                files=cast("list[Path]", records),
                limit=opts.limit,
                reverse_edges=opts.reverse_edges,
                progress=progress,
                failures=local,
            ):
                yield _shift_graph_field(chunk, "file_index", start)
    finally:
        if failures is not None:
            failures.extend((start + int(i), msg) for i, msg in local)


def write_partition(
    out: str | os.PathLike,
    opts: BuildOptions,
    records: Records,
    meta: dict,
    *,
    start: int = 0,
    workers: int | None = 1,
    progress: bool = False,
    allow_empty: bool = False,
) -> BuildReport:
    """Convert ``records`` (starting at global record ``start``) and write them to one store at
    ``out`` atomically (`GraphStoreWriter`: the file appears only when complete). If no record
    converts, raises ``ValueError`` -- or, with ``allow_empty`` (a shard of a bigger build),
    writes nothing and reports ``n_graph == 0`` with the failures."""
    t0 = time.perf_counter()
    failures: list = []
    n_graph = n_node = n_edge = 0
    with GraphStoreWriter(out, name=opts.dataset, meta=meta) as writer:
        for chunk in convert_records(
            opts, records, start=start, workers=workers, progress=progress, failures=failures
        ):
            writer.append(chunk)
            n_graph += len(chunk)
            n_node += int(chunk.n_node.sum())
            n_edge += int(chunk.n_edge.sum())
        writer.add_failed(np.asarray([i for i, _ in failures], dtype=np.int64))
        if n_graph == 0 and allow_empty:
            writer.discard()
        elif n_graph == 0:
            raise InputError(
                f"no {opts.dataset} graphs were built (limit={opts.limit}, "
                f"records {start}:{start + record_count(records)}, "
                f"{len(failures)} failures)"
            )
    return BuildReport(
        path=Path(out),
        dataset=opts.dataset,
        n_graph=n_graph,
        n_node=n_node,
        n_edge=n_edge,
        seconds=time.perf_counter() - t0,
        failures=failures,
    )


def build_store(
    dataset: str,
    out: str | os.PathLike,
    *,
    graph: str = "radius",
    cutoff: float = 6.0,
    k: int = 24,
    limit: int | None = None,
    source: str | os.PathLike | None = None,
    workers: int | None = None,
    reverse_edges: bool = False,
    progress: bool = False,
    column: str = "smiles",
    targets: Sequence[str] = (),
) -> BuildReport:
    """Build ``dataset`` (``qm9``, ``moses``, ``code`` or ``smiles``) into a graph store at
    ``out``.

    ``graph``/``cutoff`` (Å)/``k`` choose QM9's construction; ``limit`` keeps the first N records;
    ``source`` overrides the data location (qm9pack's ``data/`` folder, a MOSES ``.csv[.gz]``,
    a folder of ``.py`` files, or -- for ``smiles`` -- the CSV file whose ``column`` holds the
    SMILES and whose ``targets`` columns become the graph field ``y``); ``workers`` processes
    convert SMILES (MOSES and ``smiles``); ``reverse_edges``
    adds reversed edges to code graphs. The file appears at ``out`` only when complete; a
    failed build leaves no temporary behind, and temporaries of killed earlier builds of the
    same ``out`` are removed (`remove_stale_temporaries`). For a sharded build on a cluster see
    `graphbatch.datasets.build_sharded_store`.
    """
    t0 = time.perf_counter()
    check_output_path(out, [source], "out", suffixes=STORE_SUFFIXES, what="graph store")
    opts = BuildOptions(
        dataset,
        graph=graph,
        cutoff=cutoff,
        k=k,
        limit=limit,
        source=None if source is None else str(source),
        reverse_edges=reverse_edges,
        column=column,
        targets=tuple(targets),
    ).check()
    records, meta = load_records(opts)
    report = write_partition(out, opts, records, meta, workers=workers, progress=progress)
    return BuildReport(
        path=report.path,
        dataset=dataset,
        n_graph=report.n_graph,
        n_node=report.n_node,
        n_edge=report.n_edge,
        seconds=time.perf_counter() - t0,
        failures=report.failures,
    )
