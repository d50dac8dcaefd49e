"""`build_store`: one call from a dataset name to a finished graph store on disk."""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ._construct import GRAPH_METHODS
from ._store import GraphStoreWriter

__all__ = ["DATASETS", "BuildReport", "build_store"]

#: Dataset names understood by `build_store` (and ``graphbatch data build``).
DATASETS = ("qm9", "moses", "code")


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


def _tqdm_chunks(chunks, total: int | None, unit: str, desc: str):
    from tqdm import tqdm

    with tqdm(total=total, unit=unit, desc=desc) as bar:
        for chunk in chunks:
            bar.update(len(chunk))
            yield chunk


def build_store(dataset: str, out: str | os.PathLike, *, graph: str = "radius",
                cutoff: float = 6.0, k: int = 24, limit: int | None = None,
                source: str | os.PathLike | None = None, workers: int | None = None,
                reverse_edges: bool = False, progress: bool = False) -> BuildReport:
    """Build ``dataset`` (``qm9``, ``moses`` or ``code``) into a graph store at ``out``.

    ``graph``/``cutoff`` (Å)/``k`` choose QM9's construction; ``limit`` keeps the first N records;
    ``source`` overrides the data location (qm9pack's ``data/`` folder, a MOSES ``.csv[.gz]``,
    or a folder of ``.py`` files); ``workers`` processes convert MOSES SMILES; ``reverse_edges``
    adds reversed edges to code graphs. The file appears at ``out`` only when complete; a
    failed build leaves no temporary behind, and temporaries of killed earlier builds of the
    same ``out`` are removed (`remove_stale_temporaries`).
    """
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose one of {DATASETS}")
    if graph not in GRAPH_METHODS:
        raise ValueError(f"unknown graph construction {graph!r}; choose one of {GRAPH_METHODS}")
    t0 = time.perf_counter()
    failures: list = []
    meta: dict = {"dataset": dataset, "limit": limit, "python": platform.python_version()}
    if dataset == "qm9":
        from ._qm9 import QM9_TARGETS, load_qm9, qm9_graphs

        mols = load_qm9(limit, source)
        chunks = qm9_graphs(graph, cutoff=cutoff, k=k, mols=mols, chunk_size=2048)
        if progress:
            chunks = _tqdm_chunks(chunks, len(mols), "mol", f"QM9 -> {graph} graphs")
        meta.update(graph=graph, cutoff_angstrom=cutoff if graph == "radius" else None,
                    k=k if graph == "knn" else None, source="qm9pack 1.0.3 (data/qm9_part*.csv)",
                    targets=[{"name": n, "column": c, "unit": u} for n, c, u in QM9_TARGETS],
                    units={"pos": "angstrom", "edge_dist": "angstrom"})
    elif dataset == "moses":
        from ._moses import load_moses_smiles, smiles_graphs
        from ._ogb import atom_feature_dims, bond_feature_dims

        smiles = load_moses_smiles("train", limit, source)
        chunks = smiles_graphs(smiles, workers=workers, progress=progress, failures=failures)
        meta.update(source="molsets 0.3.1 (moses/dataset/data/train.csv.gz)",
                    featurisation="OGB smiles2graph (9 atom, 3 bond features)",
                    atom_feature_dims=atom_feature_dims(), bond_feature_dims=bond_feature_dims())
    else:
        from ._code import AST_NODE_TYPES, CODE_EDGE_TYPES, code_graphs, python_files

        root, files = python_files(source)
        chunks = code_graphs(files=files, limit=limit, reverse_edges=reverse_edges,
                             progress=progress, failures=failures)
        meta.update(source=str(root), files=[str(f.relative_to(root)) for f in files],
                    node_types=list(AST_NODE_TYPES), edge_types=list(CODE_EDGE_TYPES),
                    reverse_edges=reverse_edges)
    n_graph = n_node = n_edge = 0
    with GraphStoreWriter(out, name=dataset, meta=meta) as writer:
        for chunk in chunks:
            writer.append(chunk)
            n_graph += len(chunk)
            n_node += int(chunk.n_node.sum())
            n_edge += int(chunk.n_edge.sum())
        writer.add_failed(np.asarray([i for i, _ in failures], dtype=np.int64))
        if n_graph == 0:
            raise ValueError(f"no {dataset} graphs were built (limit={limit}, "
                             f"{len(failures)} failures)")
    return BuildReport(path=Path(out), dataset=dataset, n_graph=n_graph, n_node=n_node,
                       n_edge=n_edge, seconds=time.perf_counter() - t0, failures=failures)
