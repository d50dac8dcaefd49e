"""`graphbatch data build extxyz|ase-db` on malformed input (issue 37): every case is one line
on stderr naming the file (and the frame, row or option and the value), exit status 2, nothing
written -- never a traceback, never a silently stored value."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ase")
pytest.importorskip("vesin")
pytest.importorskip("h5py")

from graphbatch.datasets import AtomsKeys, GraphStore, build_atoms_store

GOOD = "1\nProperties=species:S:1:pos:R:3:REF_forces:R:3 REF_energy=1.0\nCu 0 0 0 0 0 0\n"


def _frame(extra: str) -> str:
    """A good one-atom frame with ``extra`` on its comment line."""
    head = "Properties=species:S:1:pos:R:3:REF_forces:R:3 REF_energy=1.0"
    return f"1\n{head} {extra}\nCu 0 0 0 0 0 0\n"


def _main(capsys, *args) -> tuple[int, str]:
    from graphbatch.cli import main

    capsys.readouterr()
    rc = main([str(a) for a in args])
    return rc, capsys.readouterr().err


def _build(capsys, kind: str, src, out, *extra) -> tuple[int, str]:
    return _main(
        capsys, "data", "build", kind, src, "--cutoff", "3", "--out", out, "--no-progress", *extra
    )


def _one_line(rc: int, err: str) -> str:
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


#: the third frame's comment line (frames 0 and 1 are good) -> what the message must hold
BAD_INFO = {
    "config_type array": ('config_type="1 2"', ["frame 2", "config_type", "[1 2]"]),
    "config_weight array": ('config_weight="1 2"', ["frame 2", "config_weight", "[1 2]"]),
    "energy weight array": (
        'config_energy_weight="1 2"',
        ["frame 2", "config_energy_weight", "[1 2]"],
    ),
    "energy weight nan": ("config_energy_weight=nan", ["frame 2", "config_energy_weight", "nan"]),
    "energy weight inf": ("config_energy_weight=inf", ["frame 2", "config_energy_weight", "inf"]),
    "forces weight -inf": (
        "config_forces_weight=-inf",
        ["frame 2", "config_forces_weight", "-inf"],
    ),
    "config_weight text": ("config_weight=abc", ["frame 2", "config_weight", "'abc'"]),
    "config_weight nan": ("config_weight=nan", ["frame 2", "config_weight", "nan"]),
}


@pytest.mark.parametrize("case", sorted(BAD_INFO))
@pytest.mark.parametrize("workers", [1, 2], ids=["inline", "workers"])
def test_bad_weights_and_config_types_are_one_line(tmp_path, capsys, case, workers):
    extra, expect = BAD_INFO[case]
    src = tmp_path / "in.xyz"
    src.write_text(GOOD + GOOD + _frame(extra) + GOOD)
    out = tmp_path / "out.h5"
    args = ("--workers", str(workers), "--chunk-frames", "2") if workers > 1 else ()
    line = _one_line(*_build(capsys, "extxyz", src, out, *args))
    assert "in.xyz" in line and all(e in line for e in expect), line
    assert sorted(os.listdir(tmp_path)) == ["in.xyz"]


def test_finite_weights_of_every_kind_are_still_stored(tmp_path):
    src = tmp_path / "in.xyz"
    src.write_text(
        GOOD
        + _frame("config_type=slab config_weight=0.5 config_energy_weight=2 config_forces_weight=0")
    )
    keys = AtomsKeys(config_type_weights={"slab": 3.0})
    with GraphStore(build_atoms_store(src, tmp_path / "o.h5", cutoff=3.0, keys=keys).path) as s:
        assert s.graph_field("weight").tolist() == [1.0, 1.5]
        assert s.graph_field("energy_weight").tolist() == [1.0, 2.0]
        assert s.graph_field("forces_weight").tolist() == [1.0, 0.0]


def test_a_lone_carriage_return_is_refused_like_ase_does(tmp_path, capsys):
    import ase.io

    src = tmp_path / "in.xyz"
    src.write_bytes((GOOD + GOOD + _frame('comment="a\rb"')).encode())
    with pytest.raises(Exception):  # noqa: B017 - ASE refuses the file (its own error types)
        ase.io.read(src, ":", format="extxyz")
    line = _one_line(*_build(capsys, "extxyz", src, tmp_path / "o.h5"))
    assert "in.xyz: frame 2 (line 8)" in line and "carriage return" in line, line
    assert sorted(os.listdir(tmp_path)) == ["in.xyz"]
    # Windows line ends (CR LF) are ordinary line ends, as for ASE
    crlf = tmp_path / "crlf.xyz"
    crlf.write_bytes((GOOD + _frame("config_weight=0.5")).replace("\n", "\r\n").encode())
    assert len(ase.io.read(crlf, ":", format="extxyz")) == 2
    with GraphStore(build_atoms_store(crlf, tmp_path / "c.h5", cutoff=3.0).path) as s:
        assert s.graph_field("weight").tolist() == [1.0, 0.5]


def test_non_utf8_bytes_name_the_file_frame_and_line(tmp_path, capsys):
    src = tmp_path / "in.xyz"
    src.write_bytes(GOOD.encode() * 3 + _frame('comment="caf\xe9"').encode("latin-1"))
    line = _one_line(*_build(capsys, "extxyz", src, tmp_path / "o.h5"))
    assert "in.xyz: frame 3 (line 11)" in line and "UTF-8" in line and "0xe9" in line, line
    assert sorted(os.listdir(tmp_path)) == ["in.xyz"]


@pytest.mark.parametrize(
    "weights",
    [
        '{"Default": null}',
        "[1]",
        '{"Default": "x"}',
        '{"Default": [1]}',
        '{"Default": true}',
        "[" * 100_000,
    ],
    ids=["null", "list", "text", "list value", "true", "nested"],
)
def test_config_type_weights_must_map_names_to_numbers(tmp_path, capsys, weights):
    src = tmp_path / "in.xyz"
    src.write_text(GOOD)
    line = _one_line(
        *_build(capsys, "extxyz", src, tmp_path / "o.h5", "--config-type-weights", weights)
    )
    assert "config-type-weights" in line or "config_type_weights" in line, line
    assert sorted(os.listdir(tmp_path)) == ["in.xyz"]


def test_config_type_weights_in_python_are_checked_too():
    from graphbatch._errors import InputError, InputTypeError

    with pytest.raises(InputTypeError, match=r"config_type_weights must be a mapping"):
        AtomsKeys(config_type_weights=[1])  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"config_type_weights\['Default'\] = None"):
        AtomsKeys(config_type_weights={"Default": None})  # type: ignore[dict-item]
    assert AtomsKeys(config_type_weights={"a": 2}).config_type_weights == {"a": 2.0}


@pytest.mark.parametrize("cutoff", ["1e-6", "1e-300", "5e-7"])
def test_a_cutoff_below_the_neighbour_lists_limit_is_one_line(tmp_path, capsys, cutoff):
    src = tmp_path / "in.xyz"
    src.write_text(GOOD)
    rc, err = _main(
        capsys, "data", "build", "extxyz", src, "--cutoff", cutoff, "--out", tmp_path / "o.h5"
    )
    line = _one_line(rc, err)
    assert f"cutoff {float(cutoff)!r} Å" in line and "below 1e-06" in line, line


# ------------------------------------------------------------------ ASE databases
def _atoms_db(path: Path, n: int = 3) -> Path:
    import ase.db
    from ase import Atoms
    from ase.calculators.singlepoint import SinglePointCalculator

    with ase.db.connect(path) as db:
        for k in range(n):
            a = Atoms("H2", positions=[[0, 0, 0], [0.7 + 0.1 * k, 0, 0]])
            a.calc = SinglePointCalculator(a, energy=-1.0 - k, forces=np.zeros((2, 3)))
            db.write(a)
    return path


def _junk_row(tmp_path: Path, row) -> Path:
    good = _atoms_db(tmp_path / "good.json")
    d = json.loads(good.read_text())
    d["2"] = row
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    good.unlink()
    return bad


def _damaged_row(tmp_path: Path) -> Path:
    path = _atoms_db(tmp_path / "bad.db")
    con = sqlite3.connect(path)
    con.execute("update systems set positions=? where id=2", (b"\x01\x02\x03",))
    con.commit()
    con.close()
    return path


DB_CASES = {
    "not sqlite": (
        lambda t: (t / "bad.db").write_text("not a database\n" * 20) and t / "bad.db",
        ["bad.db", "not a readable ASE database", "file is not a database"],
    ),
    "json list": (
        lambda t: (t / "bad.json").write_text("[1, 2, 3]\n") and t / "bad.json",
        ["bad.json", "not a readable ASE database"],
    ),
    "aselmdb": (
        lambda t: (t / "bad.aselmdb").write_bytes(b"\0" * 64) and t / "bad.aselmdb",
        ["bad.aselmdb", "ase-db-backends"],
    ),
    "damaged row": (
        _damaged_row,
        ["bad.db", "row 2", "buffer size must be a multiple of element size"],
    ),
    "junk row": (lambda t: _junk_row(t, "junk"), ["bad.json", "row 2", "AttributeError"]),
    "row without atoms": (
        lambda t: _junk_row(t, {"foo": 1}),
        ["bad.json", "row 2", "AssertionError"],
    ),
}


@pytest.mark.parametrize("case", sorted(DB_CASES))
def test_unreadable_ase_databases_are_one_line_naming_file_and_row(tmp_path, capsys, case):
    make, expect = DB_CASES[case]
    src = make(tmp_path)
    before = sorted(os.listdir(tmp_path))
    line = _one_line(*_build(capsys, "ase-db", src, tmp_path / "o.h5"))
    assert all(e in line for e in expect), line
    assert not line.rstrip().endswith(":"), line  # never an empty message
    assert sorted(os.listdir(tmp_path)) == before


def test_a_good_ase_database_still_builds(tmp_path):
    src = _atoms_db(tmp_path / "ok.json")
    report = build_atoms_store(src, tmp_path / "o.h5", cutoff=3.0, format="ase-db")
    assert report.n_graph == 3


@pytest.mark.parametrize("kind", ["directory", "fifo", "devnull"])
@pytest.mark.parametrize("fmt", ["extxyz", "ase-db"])
def test_inputs_that_are_not_regular_files_say_what_they_are(tmp_path, capsys, kind, fmt):
    if kind == "directory":
        src, what = tmp_path / "d", "is a directory"
        src.mkdir()
    elif kind == "fifo":
        if not hasattr(os, "mkfifo"):
            pytest.skip("no FIFOs here")
        src, what = tmp_path / "f", "is a FIFO"
        os.mkfifo(src)
    else:
        src, what = Path(os.devnull), "is a character device"
    line = _one_line(*_build(capsys, fmt, src, tmp_path / "o.h5"))
    assert str(src) in line and what in line and "no such file" not in line, line
    assert not (tmp_path / "o.h5").exists()
    # a missing file is still a missing file
    line = _one_line(*_build(capsys, fmt, tmp_path / "missing.xyz", tmp_path / "o.h5"))
    assert "missing.xyz" in line and "does not exist" in line, line


def test_ase_db_with_ase_db_backends_missing_or_present_never_a_traceback(tmp_path):
    """The `.aselmdb` message names the package that reads it (when it is not installed) or
    ASE's own error of the damaged file (when it is)."""
    src = tmp_path / "x.aselmdb"
    src.write_bytes(b"\0" * 64)
    from graphbatch._errors import InputError

    with pytest.raises(InputError, match=r"x\.aselmdb"):
        build_atoms_store(src, tmp_path / "o.h5", cutoff=3.0)
