"""OGB featurisation of SMILES and MOSES loading, against RDKit counts and hand-made values."""

from __future__ import annotations

import numpy as np
import pytest

Chem = pytest.importorskip("rdkit.Chem")

from graphbatch.datasets import load_moses_smiles, smiles_graphs, smiles_to_graph  # noqa: E402
from graphbatch.datasets._ogb import (  # noqa: E402
    atom_feature_dims,
    bond_feature_dims,
    smiles_size,
)


def test_ogb_documented_example():
    # the example in OGB's ogb/utils/features.py comments: chiral carbon and an E double bond
    x, _, edge_attr = smiles_to_graph("Cl[C@H](/C=C/C)Br")
    assert x[1].tolist() == [5, 2, 4, 5, 1, 0, 2, 0, 0]
    assert edge_attr[2 * 2].tolist() == [1, 2, 0]  # bond 2, first direction
    assert atom_feature_dims() == [119, 5, 12, 12, 10, 6, 6, 2, 2]
    assert bond_feature_dims() == [5, 6, 2]


def test_ethanol_and_benzene_by_hand():
    x, ei, ea = smiles_to_graph("CCO")
    # atomic number index = Z - 1; total degree incl. H; H count; SP3 = index 2
    assert x.tolist() == [
        [5, 0, 4, 5, 3, 0, 2, 0, 0],
        [5, 0, 4, 5, 2, 0, 2, 0, 0],
        [7, 0, 2, 5, 1, 0, 2, 0, 0],
    ]
    assert ei.T.tolist() == [[0, 1], [1, 0], [1, 2], [2, 1]]
    assert ea.tolist() == [[0, 0, 0]] * 4
    x, ei, ea = smiles_to_graph("c1ccccc1")
    assert x.shape == (6, 9) and ei.shape == (2, 12)
    assert (x[:, 7] == 1).all() and (x[:, 8] == 1).all() and (x[:, 6] == 1).all()  # SP2
    assert (ea == [3, 0, 1]).all()  # aromatic, no stereo, conjugated


def test_moses_counts_match_rdkit():
    try:
        smiles = load_moses_smiles("train", limit=25)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    assert len(smiles) == 25 and smiles[0] == "CCCS(=O)c1ccc2[nH]c(=NC(=O)OC)[nH]c2c1"
    for smi in smiles:
        mol = Chem.MolFromSmiles(smi)
        x, ei, ea = smiles_to_graph(smi)
        assert x.shape == (mol.GetNumAtoms(), 9)
        assert ei.shape == (2, 2 * mol.GetNumBonds()) and ea.shape == (2 * mol.GetNumBonds(), 3)
        want = set()
        for b in mol.GetBonds():
            i, j = b.GetBeginAtomIdx(), b.GetEndAtomIdx()
            want |= {(i, j), (j, i)}
        assert set(map(tuple, ei.T.tolist())) == want
        np.testing.assert_array_equal(x[:, 0], [a.GetAtomicNum() - 1 for a in mol.GetAtoms()])
        assert smiles_size(smi) == (x.shape[0], ei.shape[1])


@pytest.mark.parametrize("workers", [1, 2])
def test_failures_are_reported_not_dropped(workers):
    smiles = ["CCO", "not a molecule", "c1ccccc1", "C1CC", "O=C=O", "[Xx]"]
    failures: list = []
    parts = list(smiles_graphs(smiles, workers=workers, chunk_size=2, failures=failures))
    assert sorted(i for i, _ in failures) == [1, 3, 5]
    assert all("SMILES" in msg or "Error" in msg for _, msg in failures)
    index = np.concatenate([p.graph["index"] for p in parts])
    assert index.tolist() == [0, 2, 4]
    n_node = np.concatenate([p.n_node for p in parts])
    assert n_node.tolist() == [3, 6, 3]
    assert parts[0].node["x"].dtype == np.uint8 and parts[0].edge["edge_attr"].shape[1] == 3


def test_moses_store_keeps_failed_indices(tmp_path, capsys):
    pytest.importorskip("h5py")
    from graphbatch.cli import main
    from graphbatch.datasets import GraphStore

    csv = tmp_path / "mols.csv"
    csv.write_text("SMILES\nCCO\nC1CC\nc1ccccc1\n")
    out = tmp_path / "m.h5"
    assert (
        main(
            [
                "data",
                "build",
                "moses",
                "--source",
                str(csv),
                "--workers",
                "1",
                "--no-progress",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "1 record(s) could not be converted" in printed and ": 1\n" in printed
    with GraphStore(out) as store:
        assert len(store) == 2 and store.failed_index.tolist() == [1]
        assert store.graph_field("index").tolist() == [0, 2]
        g = store[1]
        assert g["x"].shape == (6, 9) and g["edge_attr"].shape == (12, 3)
