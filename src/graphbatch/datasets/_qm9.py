"""QM9 (130,831 small organic molecules, DFT B3LYP/6-31G(2df,p)) from the ``qm9pack`` package.

``qm9pack`` ships the dataset as three CSV files (``data/qm9_part{1,2,3}.csv``); they are read with
the `csv` module (no pandas, no import of ``qm9pack``). Molecules keep the files' order, which is
the order of the original GDB-9 index (``index``, 1-based, with 3,054 unconverged ids missing).
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._errors import InputError
from .._io import check_regular_file
from .._validate import as_nonnegative_int, as_positive_int
from ._construct import build_edges
from ._graphs import GraphArrays
from ._resources import package_data_path

__all__ = ["QM9_NUM_MOLECULES", "QM9_TARGETS", "QM9Molecules", "load_qm9", "qm9_graphs"]

#: Number of molecules in the qm9pack files.
QM9_NUM_MOLECULES = 130_831

#: The targets ``y`` in column order: (name, qm9pack column, unit). Units are the source's
#: (Hartree for energies, no conversion); the order is the QM9 paper's table of properties.
QM9_TARGETS: tuple[tuple[str, str, str], ...] = (
    ("A", "RotA_GHz", "GHz"),
    ("B", "RotB_GHz", "GHz"),
    ("C", "RotC_GHz", "GHz"),
    ("mu", "Dipole_debye", "D"),
    ("alpha", "Polarizability_bohr3", "bohr^3"),
    ("homo", "HOMO_au", "Ha"),
    ("lumo", "LUMO_au", "Ha"),
    ("gap", "HOMO_LUMO_gap_au", "Ha"),
    ("r2", "R2_bohr2", "bohr^2"),
    ("zpve", "ZPVE_au", "Ha"),
    ("U0", "InternalEnergy_0K_au", "Ha"),
    ("U", "InternalEnergy_298K_au", "Ha"),
    ("H", "Enthalphy_298K_au", "Ha"),
    ("G", "GibbsFreeEnergy_298K_au", "Ha"),
    ("Cv", "Heatcapacity_Cv_cal_mol_K", "cal/(mol K)"),
)

_PARTS = ("qm9_part1.csv", "qm9_part2.csv", "qm9_part3.csv")
_Z = {"H": 1, "C": 6, "N": 7, "O": 8, "F": 9}
_STRIP = str.maketrans("", "", "[]' ")


@dataclass(frozen=True)
class QM9Molecules:
    """QM9 molecules back to back: ``z`` int64 ``[N]`` (atomic numbers, H included), ``pos``
    float64 ``[N, 3]`` (Å), ``n_node`` int64 ``[G]`` (atoms per molecule), ``y`` float64
    ``[G, 15]`` (`QM9_TARGETS` order and units), ``index`` int64 ``[G]`` (GDB-9 id)."""

    z: np.ndarray
    pos: np.ndarray
    n_node: np.ndarray
    y: np.ndarray
    index: np.ndarray

    def __len__(self) -> int:
        return int(self.n_node.shape[0])


def qm9_source_dir(source: str | Path | None = None) -> Path:
    """Folder with the ``qm9_part*.csv`` files: ``source`` if given, else qm9pack's ``data/``."""
    if source is not None:
        path = Path(source)
        if not (path / _PARTS[0]).is_file():
            raise FileNotFoundError(f"{str(path)!r} has no {_PARTS[0]} (expected qm9pack's data/)")
        return path
    return package_data_path("qm9pack", "data")


def load_qm9(limit: int | None = None, source: str | Path | None = None) -> QM9Molecules:
    """Read the first ``limit`` molecules (all when ``None``) from qm9pack's CSV files."""
    if limit is not None:
        limit = as_nonnegative_int(limit, "limit")
    folder = qm9_source_dir(source)
    symbols: list[str] = []
    coords: list[str] = []
    n_atoms: list[int] = []
    ys: list[list[str]] = []
    ids: list[int] = []
    for part in _PARTS:
        if limit is not None and len(n_atoms) >= limit:
            break
        check_regular_file(folder / part, "QM9 source file")  # a FIFO would block
        with open(folder / part, newline="") as fh:
            reader = csv.reader(fh)
            header = next(reader)
            try:
                col = {
                    name: header.index(name) for name in ("Index", "N_atoms", "Elements", "XYZ_Ang")
                }
                ycols = [header.index(c) for _, c, _ in QM9_TARGETS]
            except ValueError as exc:
                raise InputError(f"{folder / part}: unexpected header ({exc})") from exc
            for row in reader:
                if limit is not None and len(n_atoms) >= limit:
                    break
                ids.append(int(row[col["Index"]]))
                n_atoms.append(int(row[col["N_atoms"]]))
                symbols.append(row[col["Elements"]].translate(_STRIP))
                coords.append(row[col["XYZ_Ang"]].translate(_STRIP))
                ys.append([row[c] for c in ycols])
    n_node = np.asarray(n_atoms, dtype=np.int64)
    elems = ",".join(symbols).split(",") if symbols else []
    try:
        z = np.fromiter((_Z[e] for e in elems), dtype=np.int64, count=len(elems))
    except KeyError as exc:
        raise InputError(f"unknown element symbol {exc.args[0]!r} in QM9 data") from exc
    flat = np.asarray(",".join(coords).split(",") if coords else [], dtype=np.float64)
    if z.shape[0] != int(n_node.sum()) or flat.shape[0] != 3 * z.shape[0]:
        raise InputError(
            f"QM9 data is inconsistent: {z.shape[0]} elements, {flat.shape[0]} "
            f"coordinates, N_atoms sums to {int(n_node.sum())}"
        )
    y = np.asarray(
        [[float(v) if v.strip() else np.nan for v in r] for r in ys], dtype=np.float64
    ).reshape(-1, len(QM9_TARGETS))
    return QM9Molecules(
        z=z, pos=flat.reshape(-1, 3), n_node=n_node, y=y, index=np.asarray(ids, dtype=np.int64)
    )


def molecules_to_graphs(
    mols: QM9Molecules, graph: str = "radius", *, cutoff: float = 6.0, k: int = 24
) -> GraphArrays:
    """Build the geometric graphs of ``mols``: node fields ``z`` (uint8), ``pos`` (float32, Å);
    edge field ``edge_dist`` (float32, Å); graph fields ``y`` (float32 ``[15]``), ``index``."""
    edges = build_edges(mols.pos, mols.n_node, graph, cutoff=cutoff, k=k)
    return GraphArrays(
        n_node=mols.n_node,
        n_edge=edges.n_edge,
        edge_index=edges.edge_index.astype(np.int32),
        node={"z": mols.z.astype(np.uint8), "pos": mols.pos.astype(np.float32)},
        edge={"edge_dist": edges.dist.astype(np.float32)},
        graph={"y": mols.y.astype(np.float32), "index": mols.index},
    )


def qm9_graphs(
    graph: str = "radius",
    *,
    cutoff: float = 6.0,
    k: int = 24,
    limit: int | None = None,
    source: str | Path | None = None,
    chunk_size: int = 8192,
    mols: QM9Molecules | None = None,
) -> Iterator[GraphArrays]:
    """QM9 as graphs, yielded in chunks of ``chunk_size`` molecules (bounded memory).

    ``graph`` is ``"radius"`` (``cutoff`` Å), ``"knn"`` (``k``) or ``"full"``. Pass ``mols``
    to reuse already loaded molecules.
    """
    chunk_size = as_positive_int(chunk_size, "chunk_size")
    if mols is None:
        mols = load_qm9(limit, source)
    first = np.zeros(len(mols) + 1, dtype=np.int64)
    np.cumsum(mols.n_node, out=first[1:])
    for start in range(0, len(mols), chunk_size):
        stop = min(start + chunk_size, len(mols))
        a, b = first[start], first[stop]
        part = QM9Molecules(
            z=mols.z[a:b],
            pos=mols.pos[a:b],
            n_node=mols.n_node[start:stop],
            y=mols.y[start:stop],
            index=mols.index[start:stop],
        )
        yield molecules_to_graphs(part, graph, cutoff=cutoff, k=k)
