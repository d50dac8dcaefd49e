"""SMILES -> graph with the OGB molecule featurisation (``ogb.utils.smiles2graph`` semantics).

Nodes are the atoms RDKit keeps after ``MolFromSmiles`` (hydrogens implicit), with 9 integer
features; edges are both directions of every bond (``i -> j`` then ``j -> i``, in RDKit's bond
order) with 3 integer features. Each feature is the index of the value in its vocabulary below;
a value outside the vocabulary maps to the vocabulary's last entry (``"misc"``), except for the
boolean features and bond stereo, which have no ``misc`` entry (as in OGB).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._errors import InputError

__all__ = [
    "ATOM_FEATURES",
    "BOND_FEATURES",
    "atom_feature_dims",
    "bond_feature_dims",
    "smiles_to_graph",
    "smiles_size",
]

#: (name, vocabulary) of the 9 atom features, in column order of ``x``.
ATOM_FEATURES: tuple[tuple[str, tuple], ...] = (
    ("atomic_num", (*range(1, 119), "misc")),
    (
        "chirality",
        ("CHI_UNSPECIFIED", "CHI_TETRAHEDRAL_CW", "CHI_TETRAHEDRAL_CCW", "CHI_OTHER", "misc"),
    ),
    ("degree", (*range(11), "misc")),
    ("formal_charge", (*range(-5, 6), "misc")),
    ("num_hs", (*range(9), "misc")),
    ("num_radical_electrons", (*range(5), "misc")),
    ("hybridization", ("SP", "SP2", "SP3", "SP3D", "SP3D2", "misc")),
    ("is_aromatic", (False, True)),
    ("is_in_ring", (False, True)),
)

#: (name, vocabulary) of the 3 bond features, in column order of ``edge_attr``.
BOND_FEATURES: tuple[tuple[str, tuple], ...] = (
    ("bond_type", ("SINGLE", "DOUBLE", "TRIPLE", "AROMATIC", "misc")),
    ("stereo", ("STEREONONE", "STEREOZ", "STEREOE", "STEREOCIS", "STEREOTRANS", "STEREOANY")),
    ("is_conjugated", (False, True)),
)

_ATOM_INDEX = [{v: i for i, v in enumerate(vocab)} for _, vocab in ATOM_FEATURES]
_BOND_INDEX = [{v: i for i, v in enumerate(vocab)} for _, vocab in BOND_FEATURES]


def atom_feature_dims() -> list[int]:
    """Vocabulary size of each atom feature (for embedding tables)."""
    return [len(v) for _, v in ATOM_FEATURES]


def bond_feature_dims() -> list[int]:
    """Vocabulary size of each bond feature."""
    return [len(v) for _, v in BOND_FEATURES]


def _lookup(table: dict, value: object, *, misc: bool = True) -> int:
    i = table.get(value)
    if i is not None:
        return i
    if misc:
        return len(table) - 1
    raise InputError(f"value {value!r} has no entry in the OGB vocabulary {list(table)}")


def _atom_row(atom: Any) -> list[int]:
    t = _ATOM_INDEX
    return [
        _lookup(t[0], atom.GetAtomicNum()),
        _lookup(t[1], str(atom.GetChiralTag())),
        _lookup(t[2], atom.GetTotalDegree()),
        _lookup(t[3], atom.GetFormalCharge()),
        _lookup(t[4], atom.GetTotalNumHs()),
        _lookup(t[5], atom.GetNumRadicalElectrons()),
        _lookup(t[6], str(atom.GetHybridization())),
        _lookup(t[7], bool(atom.GetIsAromatic()), misc=False),
        _lookup(t[8], bool(atom.IsInRing()), misc=False),
    ]


def _bond_row(bond: Any) -> list[int]:
    t = _BOND_INDEX
    return [
        _lookup(t[0], str(bond.GetBondType())),
        _lookup(t[1], str(bond.GetStereo()), misc=False),
        _lookup(t[2], bool(bond.GetIsConjugated()), misc=False),
    ]


_QUIET = False


def _mol(smiles: str) -> Any:
    global _QUIET
    from rdkit import Chem

    if not _QUIET:  # RDKit's per-molecule warnings would flood a progress bar; errors raise
        from rdkit import RDLogger

        RDLogger.DisableLog("rdApp.*")  # type: ignore[attr-defined]  # not in RDKit's stubs
        _QUIET = True
    mol = Chem.MolFromSmiles(smiles)
    if mol is None:
        raise InputError(f"RDKit cannot parse SMILES {smiles!r}")
    return mol


def smiles_to_graph(smiles: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x int64 [n, 9], edge_index int64 [2, 2b], edge_attr int64 [2b, 3])`` for a SMILES
    string with ``n`` heavy atoms and ``b`` bonds; raises ``ValueError`` if RDKit rejects it."""
    mol = _mol(smiles)
    x = np.array([_atom_row(a) for a in mol.GetAtoms()], dtype=np.int64).reshape(-1, 9)
    bonds = list(mol.GetBonds())
    edge_index = np.empty((2, 2 * len(bonds)), dtype=np.int64)
    edge_attr = np.empty((2 * len(bonds), 3), dtype=np.int64)
    for b, bond in enumerate(bonds):
        i, j = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()
        edge_index[:, 2 * b] = (i, j)
        edge_index[:, 2 * b + 1] = (j, i)
        edge_attr[2 * b] = edge_attr[2 * b + 1] = _bond_row(bond)
    return x, edge_index, edge_attr


def smiles_size(smiles: str) -> tuple[int, int]:
    """``(n_node, n_edge)`` of `smiles_to_graph` without computing features."""
    mol = _mol(smiles)
    return mol.GetNumAtoms(), 2 * mol.GetNumBonds()
