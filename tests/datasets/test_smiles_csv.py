"""``graphbatch data build smiles FILE.csv``: a user's SMILES table with targets into a store."""

from __future__ import annotations

import gzip
import math

import numpy as np
import pytest

pytest.importorskip("h5py")
pytest.importorskip("rdkit.Chem")

from graphbatch._errors import InputError
from graphbatch.cli import main
from graphbatch.datasets import GraphStore, build_store, load_smiles_csv, smiles_to_graph

ROWS = [
    ("CCO", "-0.31", "7"),
    ("c1ccccc1", "2.13", "8"),
    ("not a smiles", "1.0", "9"),
    ("CC(=O)O", "", "10"),
    ("C1CC1N", "0.5", "11"),
]


def _csv(path, rows=ROWS, header="smiles,logp,mw"):
    path.write_text(header + "\n" + "".join(",".join(r) + "\n" for r in rows))
    return path


def test_cli_build_keeps_targets_and_reports_failures(tmp_path, capsys):
    src = _csv(tmp_path / "mols.csv")
    out = tmp_path / "mols.h5"
    rc = main(
        [
            "data",
            "build",
            "smiles",
            str(src),
            "--target",
            "logp",
            "mw",
            "--out",
            str(out),
            "--workers",
            "1",
            "--no-progress",
        ]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "1 record(s) could not be converted" in printed and ": 2" in printed
    store = GraphStore(out)
    assert len(store) == 4
    assert store.failed_index.tolist() == [2]
    assert store.graph_field("index").tolist() == [0, 1, 3, 4]
    assert store.meta["targets"] == ["logp", "mw"] and store.meta["column"] == "smiles"
    y = store.graph_field("y")
    assert y.dtype == np.float64 and y.shape == (4, 2)
    assert y[0].tolist() == [-0.31, 7.0] and y[3].tolist() == [0.5, 11.0]
    assert math.isnan(y[2, 0]) and y[2, 1] == 10.0  # an empty cell is a missing label
    for g, smi in zip(range(4), ["CCO", "c1ccccc1", "CC(=O)O", "C1CC1N"], strict=True):
        x, ei, ea = smiles_to_graph(smi)
        graph = store.read_graph(g)
        assert np.array_equal(graph["x"], x) and np.array_equal(graph["edge_index"], ei)
        assert np.array_equal(graph["edge_attr"], ea)


def test_other_column_gzip_and_no_targets(tmp_path):
    src = tmp_path / "m.csv.gz"
    with gzip.open(src, "wt") as fh:
        fh.write("id,SMI\n1,CCN\n2,O=C=O\n")
    report = build_store("smiles", tmp_path / "m.h5", source=src, column="SMI", workers=1)
    store = GraphStore(report.path)
    assert len(store) == 2 and "y" not in store.fields


@pytest.mark.parametrize(
    ("text", "args", "match"),
    [
        ("smiles,logp\nCCO,1\n", ["--column", "SMILES"], r"no column 'SMILES' \(--column\)"),
        ("smiles,logp\nCCO,1\n", ["--target", "pIC50"], r"no column 'pIC50' \(--target\)"),
        ("smiles,logp\nCCO,1\nCC,abc\n", ["--target", "logp"], r"line 3, column 'logp', is 'abc'"),
        ("smiles,logp\nCCO\n", [], r"line 2 has 1 fields, the header 2"),
        ("", [], r"is empty"),
    ],
)
def test_bad_tables_are_one_line_errors(tmp_path, capsys, text, args, match):
    src = tmp_path / "bad.csv"
    src.write_text(text)
    rc = main(["data", "build", "smiles", str(src), *args, "--out", str(tmp_path / "o.h5")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "bad.csv" in err
    assert pytest.importorskip("re").search(match, err), err
    assert not (tmp_path / "o.h5").exists()


def test_non_utf8_names_file_and_line(tmp_path):
    src = tmp_path / "latin.csv"
    src.write_bytes(b"smiles,name\nCCO,ok\nCC,caf\xe9\n")
    with pytest.raises(InputError, match=r"latin\.csv' line 3: not UTF-8"):
        load_smiles_csv(src, targets=())


def test_cli_needs_one_file_and_not_the_output(tmp_path, capsys):
    src = _csv(tmp_path / "m.csv")
    assert main(["data", "build", "smiles", "--out", str(tmp_path / "o.h5")]) == 2
    assert "smiles takes one CSV file" in capsys.readouterr().err
    assert main(["data", "build", "qm9", "--target", "mu", "--out", str(tmp_path / "q.h5")]) == 2
    assert "apply to smiles" in capsys.readouterr().err
    assert main(["data", "build", "smiles", str(src), "--out", str(src)]) == 2
    assert "must end in .h5" in capsys.readouterr().err
    odd = _csv(tmp_path / "table.h5")  # a CSV named like a store is still the input
    assert main(["data", "build", "smiles", str(odd), "--out", str(odd)]) == 2
    assert "is the input file" in capsys.readouterr().err
    assert odd.read_text().startswith("smiles,logp")
    assert src.read_text().startswith("smiles,logp")


def test_limit_and_slices(tmp_path):
    table = load_smiles_csv(_csv(tmp_path / "m.csv"), targets=["mw"], limit=3)
    assert table.smiles == ["CCO", "c1ccccc1", "not a smiles"]
    part = table.slice(1, 3)
    assert part.smiles == ["c1ccccc1", "not a smiles"] and part.targets[:, 0].tolist() == [8, 9]
