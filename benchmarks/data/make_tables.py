"""Derive the size tables shipped in benchmarks/data from packages installed in the venv.

    PYTHONPATH=src /work/venv/bin/python benchmarks/data/make_tables.py [qm9] [moses]

- ``qm9_radius6.npz``: QM9 (134k molecules, from the ``qm9pack`` package's CSV files, column
  ``XYZ_Ang``). ``n_node`` = atoms including hydrogens, ``n_edge`` = ordered atom pairs (i != j)
  closer than 6 Angstrom (a radius graph with cutoff 6 A, both directions counted, as in SchNet).
- ``moses_train.npz``: MOSES training split (``molsets`` package, ``moses/dataset/data/train.csv.gz``,
  1.58M SMILES). ``n_node`` = heavy atoms, ``n_edge`` = 2 x bonds (directed edges), from RDKit
  (``Chem.MolFromSmiles``).

Arrays are stored as small unsigned ints with ``np.savez_compressed``; ``GraphSizes.load`` reads them.
"""

from __future__ import annotations

import csv
import gzip
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SITE = Path(np.__file__).resolve().parent.parent


def qm9_radius6(cutoff: float = 6.0) -> None:
    folder = SITE / "qm9pack" / "data"
    nodes, edges = [], []
    csv.field_size_limit(1 << 30)
    for part in ("qm9_part1.csv", "qm9_part2.csv", "qm9_part3.csv"):
        with open(folder / part, newline="") as fh:
            for row in csv.DictReader(fh):
                text = row["XYZ_Ang"].replace("[", "").replace("]", "")
                xyz = np.asarray(text.split(","), dtype=np.float64).reshape(-1, 3)
                d2 = ((xyz[:, None, :] - xyz[None, :, :]) ** 2).sum(-1)
                n = xyz.shape[0]
                nodes.append(n)
                edges.append(int((d2 < cutoff * cutoff).sum()) - n)  # drop i == j
    np.savez_compressed(HERE / "qm9_radius6.npz", n_node=np.asarray(nodes, np.uint8),
                        n_edge=np.asarray(edges, np.uint16))
    print("qm9_radius6:", len(nodes), "graphs")


def moses_train() -> None:
    from rdkit import Chem, RDLogger

    RDLogger.DisableLog("rdApp.*")
    path = SITE / "moses" / "dataset" / "data" / "train.csv.gz"
    nodes, edges = [], []
    with gzip.open(path, "rt") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        col = header.index("SMILES")
        for row in reader:
            mol = Chem.MolFromSmiles(row[col])
            nodes.append(mol.GetNumAtoms())
            edges.append(2 * mol.GetNumBonds())
    np.savez_compressed(HERE / "moses_train.npz", n_node=np.asarray(nodes, np.uint8),
                        n_edge=np.asarray(edges, np.uint8))
    print("moses_train:", len(nodes), "graphs")


if __name__ == "__main__":
    which = sys.argv[1:] or ["qm9", "moses"]
    if "qm9" in which:
        qm9_radius6()
    if "moses" in which:
        moses_train()
