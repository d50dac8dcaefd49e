"""Atomistic stores from the outside: extxyz / ASE databases -> `graphbatch data build` ->
MACE's edge set, labels and weights; bad input refused in one line with nothing written.
(MACE batches read from these stores: tests/atomistic/test_atomistic_store.py.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ase")
pytest.importorskip("vesin")
pytest.importorskip("h5py")

import ase.io
from ase import Atoms
from ase.build import bulk, fcc111

from graphbatch.datasets import (
    AtomsKeys,
    GraphStore,
    build_atoms_store,
    emt_structures,
    neighbour_list,
)

CUTOFF = 4.0


def special_structures() -> list[Atoms]:
    """Cases a neighbour list gets wrong first: one-atom primitive cells (self-images), a
    slab (pbc T T F) with a zero third cell vector, a cluster without a cell, a molecule in a
    box without periodicity, a skewed triclinic cell, a two-atom cell smaller than the
    cutoff."""
    rng = np.random.default_rng(7)
    out = []

    def label(a: Atoms, stress: bool) -> Atoms:
        a.info["REF_energy"] = float(rng.normal())
        a.arrays["REF_forces"] = rng.normal(size=(len(a), 3))
        if stress:
            a.info["REF_stress"] = rng.normal(size=6)
        return a

    out.append(label(bulk("Cu", "fcc", a=3.61), True))  # 1 atom
    out.append(label(bulk("Al", "bcc", a=3.2), True))  # 1 atom
    slab = fcc111("Pt", (2, 2, 3), a=3.92, vacuum=None)
    slab.pbc = (True, True, False)
    slab.cell[2] = 0.0
    slab.positions += rng.normal(0, 0.05, size=slab.positions.shape)
    out.append(label(slab, False))
    cluster = Atoms("Au4", positions=rng.normal(0, 1.5, size=(4, 3)))
    out.append(label(cluster, False))
    boxed = Atoms("Ni3", positions=rng.normal(3, 1.0, size=(3, 3)), cell=[8, 8, 8], pbc=False)
    out.append(label(boxed, False))
    tri = Atoms(
        "CuAg",
        scaled_positions=[[0, 0, 0], [0.4, 0.5, 0.6]],
        cell=[[3.0, 0, 0], [1.4, 2.9, 0], [0.7, 1.1, 3.3]],
        pbc=True,
    )
    out.append(label(tri, True))
    tiny = Atoms("Pd2", positions=[[0, 0, 0], [1.1, 0.3, 0.2]], cell=[2.4, 2.6, 2.8], pbc=True)
    out.append(label(tiny, True))
    return out


@pytest.fixture(scope="module")
def extxyz(tmp_path_factory) -> Path:
    """40 EMT structures (bulk, slabs, clusters; up to 40 atoms) and the special cases."""
    path = tmp_path_factory.mktemp("atoms") / "set.xyz"
    frames = list(emt_structures(40, seed=3, max_atoms=40)) + special_structures()
    ase.io.write(path, frames, format="extxyz")
    return path


@pytest.fixture(scope="module")
def store(extxyz) -> GraphStore:
    out = extxyz.with_suffix(".h5")
    build_atoms_store(extxyz, out, cutoff=CUTOFF)
    return GraphStore(out, verify=True)


def _edge_rows(i, j, s) -> np.ndarray:
    rows = np.concatenate([np.stack([i, j], 1), np.asarray(s)], 1).astype(np.int64)
    return rows[np.lexsort(rows.T[::-1])]


def test_store_edges_equal_mace_neighbourhood_on_every_structure(extxyz, store):
    """Edges as (i, j, unit shift) multisets equal MACE's get_neighborhood, frame by frame:
    periodic cells, slabs, clusters, one-atom cells."""
    from mace.data.neighborhood import get_neighborhood

    frames = ase.io.read(extxyz, ":")
    assert len(store) == len(frames)
    kinds = set()
    for g, atoms in enumerate(frames):
        ei, _, us, _ = get_neighborhood(
            atoms.positions,
            CUTOFF,
            pbc=tuple(bool(p) for p in atoms.pbc),
            cell=np.array(atoms.cell),
        )
        got = store.read_graph(g)
        mine = _edge_rows(got["edge_index"][0], got["edge_index"][1], got["unit_shifts"])
        np.testing.assert_array_equal(mine, _edge_rows(ei[0], ei[1], us), err_msg=f"frame {g}")
        np.testing.assert_array_equal(got["positions"], atoms.positions)
        np.testing.assert_array_equal(got["cell"][0], atoms.cell.array)
        np.testing.assert_array_equal(got["pbc"][0], atoms.pbc)
        kinds.add((tuple(atoms.pbc), len(atoms) == 1))
    assert {((True,) * 3, True), ((True, True, False), False), ((False,) * 3, False)} <= kinds
    assert store.n_edge[len(frames) - 7] == 18  # one-atom FCC at 4 Å: 12 + 6 images


def test_labels_and_weights_follow_mace_config_from_atoms(extxyz, store):
    """energy/forces/stress and the weights are MACE's Configuration values."""
    from mace.data.utils import KeySpecification, load_from_xyz

    keys = KeySpecification(
        info_keys={
            "energy": "REF_energy",
            "stress": "REF_stress",
            "virials": "REF_virials",
            "head": "head",
        },
        arrays_keys={"forces": "REF_forces", "charges": "REF_charges"},
    )
    _, configs = load_from_xyz(str(extxyz), keys)
    no = store.node_offsets
    for g, c in enumerate(configs):
        np.testing.assert_array_equal(store.graph_field("energy")[g], c.properties["energy"])
        np.testing.assert_array_equal(
            store.packed().node["forces"][no[g] : no[g + 1]], c.properties["forces"]
        )
        if c.properties["stress"] is not None:
            s = np.asarray(c.properties["stress"])
            v = (
                s
                if s.shape == (3, 3)
                else np.array([[s[0], s[5], s[4]], [s[5], s[1], s[3]], [s[4], s[3], s[2]]])
            )
            np.testing.assert_array_equal(store.graph_field("stress")[g], v)
        for p in ("energy", "forces", "stress", "virials", "charges"):
            assert store.graph_field(f"{p}_weight")[g] == c.property_weights[p], (g, p)
        assert store.graph_field("weight")[g] == c.weight
        ct = store.meta["config_types"][store.graph_field("config_type")[g]]
        assert ct == c.config_type
    assert store.meta["frames_with"]["virials"] == 0
    assert store.meta["units"]["energy"] == "eV" and store.meta["cutoff_angstrom"] == CUTOFF


def test_workers_and_blocks_give_the_same_store(extxyz, store, tmp_path):
    out = tmp_path / "par.h5"
    build_atoms_store(extxyz, out, cutoff=CUTOFF, workers=2, chunk_frames=7)
    other = GraphStore(out)
    a, b = store.packed(), other.packed()
    np.testing.assert_array_equal(a.edge_index, b.edge_index)
    for level in ("node", "edge", "graph"):
        for k, v in getattr(a, level).items():
            np.testing.assert_array_equal(v, getattr(b, level)[k], err_msg=k)
    assert other.meta["config_types"] == store.meta["config_types"]


def test_ase_db_keys_voigt_calculator_results_and_keep(tmp_path):
    """An ASE database (calculator energy/forces/stress, key-value pairs, data arrays) and an
    extxyz whose labels ASE moved into a calculator (key ``energy``)."""
    import ase.db
    from ase.calculators.singlepoint import SinglePointCalculator

    rng = np.random.default_rng(0)
    db = tmp_path / "set.db"
    frames = []
    with ase.db.connect(db) as conn:
        for k in range(5):
            a = bulk("Cu", "fcc", a=3.6, cubic=True)
            a.positions += rng.normal(0, 0.05, size=a.positions.shape)
            e, f, s = float(rng.normal()), rng.normal(size=(4, 3)), rng.normal(size=6)
            a.calc = SinglePointCalculator(a, energy=e, forces=f, stress=s)
            conn.write(
                a,
                config_type="bulk" if k % 2 else "other",
                tag=float(k),
                data={"mag": rng.normal(size=4)},
            )
            frames.append((e, f, s, a.copy()))
    out = tmp_path / "db.h5"
    keys = AtomsKeys(
        energy="energy",
        forces="forces",
        stress="stress",
        virials=None,
        charges=None,
        keep=("tag", "mag"),
        config_type_weights={"bulk": 2.0},
    )
    build_atoms_store(db, out, cutoff=3.0, keys=keys)
    st = GraphStore(out)
    for g, (e, f, s, _) in enumerate(frames):
        assert st.graph_field("energy")[g] == e
        np.testing.assert_array_equal(st.read_graph(g)["forces"], f)
        stress = st.graph_field("stress")[g]
        assert stress[0, 1] == s[5] and stress[1, 2] == s[3]
        assert st.graph_field("tag")[g] == g
        assert st.graph_field("weight")[g] == (2.0 if g % 2 else 1.0)
        assert st.read_graph(g)["mag"].shape == (4,)
        assert st.graph_field("frame")[g] == g + 1  # ASE row ids
    assert "virials" not in st.fields and "charges" not in st.fields
    # the CLI builds the same store (ase-db defaults: the calculator's keys)
    r = _cli(
        "data",
        "build",
        "ase-db",
        db,
        "--cutoff",
        "3",
        "--out",
        "cli.h5",
        "--no-progress",
        "--virials-key",
        "none",
        "--charges-key",
        "none",
        "--keep",
        "tag",
        "mag",
        "--config-type-weights",
        '{"bulk": 2.0}',
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    cli = GraphStore(tmp_path / "cli.h5").packed()
    for level in ("node", "edge", "graph"):
        for k, v in getattr(st.packed(), level).items():
            np.testing.assert_array_equal(v, getattr(cli, level)[k], err_msg=k)


def _cli(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "graphbatch.cli", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _main(capsys, *args) -> tuple[int, str]:
    """``graphbatch ARGS`` in this process (what the CLI prints and returns)."""
    from graphbatch.cli import main

    capsys.readouterr()
    rc = main([str(a) for a in args])
    return rc, capsys.readouterr().err


BAD = {
    "malformed": (
        "2\nProperties=species:S:1:pos:R:3:REF_forces:R:3 REF_energy=1.0\n"
        "Cu 0 0 0 0 0 0\nCu 1 1 1 0 0\n",
        "frame 0 (line 4): malformed extxyz: REF_forces: ValueError",
    ),
    "count": (
        "2\nProperties=species:S:1:pos:R:3 REF_energy=1.0\nCu 0 0 0\nCu 1 1 1\ntwo\n",
        "frame 1 (line 5): atom count",
    ),
    "missing": (
        "1\nProperties=species:S:1:pos:R:3:REF_forces:R:3\nCu 0 0 0 0 0 0\n",
        "frame 0: REF_energy: missing",
    ),
    "nan": (
        "1\nProperties=species:S:1:pos:R:3:REF_forces:R:3 REF_energy=1.0\nCu 0 0 0 nan 0 0\n",
        "frame 0: REF_forces: holds nan",
    ),
    "volume": (
        '2\nLattice="3 0 0 0 3 0 6 0 0" pbc="T T T" Properties=species:S:1:pos:R:3:'
        "REF_forces:R:3 REF_energy=1.0\nCu 0 0 0 0 0 0\nCu 1 1 1 0 0 0\n",
        "frame 0: cell: has zero volume",
    ),
    "species": (
        "1\nProperties=species:S:1:pos:R:3:REF_forces:R:3 REF_energy=1.0\nQq 0 0 0 0 0 0\n",
        "frame 0 (line 3): species: unknown chemical symbol 'Qq'",
    ),
    "dummy": (
        "1\nProperties=species:S:1:pos:R:3:REF_forces:R:3 REF_energy=1.0\nX 0 0 0 0 0 0\n",
        "frame 0: atomic_numbers: atom 0 has atomic number 0",
    ),
    "float": (
        "2\nProperties=species:S:1:pos:R:3:REF_forces:R:3 REF_energy=1.0\n"
        "Cu 0 0 0 0 0 0\nCu 1 abc 1 0 0 0\n",
        "frame 0 (line 4): malformed extxyz: pos: ValueError: could not convert string "
        "to float: 'abc'",
    ),
    "lattice": (
        '1\nLattice="3 0 0 0 3 0 6 0" Properties=species:S:1:pos:R:3:REF_forces:R:3 '
        "REF_energy=1.0\nCu 0 0 0 0 0 0\n",
        "frame 0 (line 2): malformed extxyz: comment line: ValueError: Got info item Lattice",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line_naming_file_frame_and_field(tmp_path, case, capsys):
    text, expect = BAD[case]
    good = "".join(
        f"1\nProperties=species:S:1:pos:R:3:REF_forces:R:3 REF_energy=1.0\nCu {k} 0 0 0 0 0\n"
        for k in range(3)
    )
    src = tmp_path / "in.xyz"
    src.write_text(good + text)  # the bad frame comes after good ones (frame numbers shift)
    rc, err = _main(
        capsys,
        "data",
        "build",
        "extxyz",
        src,
        "--cutoff",
        "3",
        "--out",
        tmp_path / "out.h5",
        "--no-progress",
    )
    assert rc == 2, err
    msg = err.strip().splitlines()
    assert len(msg) == 1 and "Traceback" not in err, err
    # the three good frames before it shift frame numbers by 3 and line numbers by 9
    shifted = re.sub(r"frame (\d+)", lambda m: f"frame {int(m.group(1)) + 3}", expect)
    shifted = re.sub(r"line (\d+)", lambda m: f"line {int(m.group(1)) + 9}", shifted)
    assert f"in.xyz: {shifted}" in msg[0], msg[0]
    assert sorted(os.listdir(tmp_path)) == ["in.xyz"]  # nothing written, no temporaries


def test_cutoff_and_options_are_checked(tmp_path, extxyz, capsys):
    for cut in ("0", "-1", "nan"):
        rc, err = _main(
            capsys, "data", "build", "extxyz", extxyz, "--cutoff", cut, "--out", tmp_path / "o.h5"
        )
        assert rc == 2 and "cutoff must be a finite distance > 0" in err
    # a real process: one line on stderr, no traceback
    r = _cli("data", "build", "extxyz", extxyz, "--cutoff", "3", "--out", extxyz, cwd=tmp_path)
    assert r.returncode == 2 and "must end in .h5 or .hdf5" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    # an output that is the input through a hard link with a store's suffix
    link = tmp_path / "link.h5"
    os.link(extxyz, link)
    before = Path(extxyz).read_bytes()
    r = _cli("data", "build", "extxyz", extxyz, "--cutoff", "3", "--out", link, cwd=tmp_path)
    assert r.returncode == 2 and "input" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert Path(extxyz).read_bytes() == before
    link.unlink()
    with pytest.raises(ValueError, match="required but its key is None"):
        AtomsKeys(forces=None)
    assert os.listdir(tmp_path) == []


def test_cli_build_then_plan_limits_and_report_work_unchanged(tmp_path, extxyz):
    r = _cli(
        "data",
        "build",
        "extxyz",
        extxyz,
        "--cutoff",
        "3.5",
        "--out",
        "s.h5",
        "--no-progress",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    st = GraphStore(tmp_path / "s.h5", verify=True)
    assert st.meta["cutoff_angstrom"] == 3.5
    r = _cli(
        "plan", "s.h5", "--strategy", "dynamic", "--batch-size", "8", "--out", "p.npz", cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr
    from graphbatch import BatchPlan

    plan = BatchPlan.load(tmp_path / "p.npz")
    assert sorted(np.asarray(plan.order).tolist()) == list(range(len(st)))
    for cmd in (("limits", "s.h5"), ("analyze", "s.h5")):
        r = _cli(*cmd, cwd=tmp_path)
        assert r.returncode == 0, (cmd, r.stderr)


def test_neighbour_list_refuses_nonpositive_cutoffs():
    with pytest.raises(ValueError, match="cutoff"):
        neighbour_list(np.zeros((1, 3)), np.eye(3), np.ones(3, bool), 0.0)


def _records(path):
    from graphbatch.datasets._extxyz import frame_from_atoms

    return [frame_from_atoms(k, a) for k, a in enumerate(ase.io.read(path, ":"))]


def _assert_same_chunk(a, b) -> None:
    ga, gb = a.graphs, b.graphs
    np.testing.assert_array_equal(ga.n_node, gb.n_node)
    np.testing.assert_array_equal(ga.n_edge, gb.n_edge)
    assert ga.edge_index.dtype == gb.edge_index.dtype
    np.testing.assert_array_equal(ga.edge_index, gb.edge_index)
    for level in ("node", "edge", "graph"):
        da, db = getattr(ga, level), getattr(gb, level)
        assert list(da) == list(db), level
        for k in da:
            assert (da[k].dtype, da[k].shape) == (db[k].dtype, db[k].shape), k
            np.testing.assert_array_equal(da[k], db[k], err_msg=k)
    assert (a.config_types, a.heads, a.present) == (b.config_types, b.heads, b.present)


@pytest.mark.parametrize("variant", ["mace", "keep-heads-weights", "optional-missing"])
def test_vectorised_conversion_equals_the_reference_frame_by_frame(extxyz, variant):
    """`convert_frames` (labels frame by frame, geometry and edges over the block, one vesin
    call per structure) against `convert_frames_reference` (everything frame by frame, in
    tests/datasets/_atoms_reference.py): the same chunk, array for array."""
    from graphbatch.datasets._atoms_convert import convert_frames

    from ._atoms_reference import convert_frames_reference

    records = _records(extxyz)
    for k, r in enumerate(records):
        r.info["task"] = ["a", "b", "c"][k % 3]
        r.info["config_weight"] = 1.0 + k % 4
        r.info["config_forces_weight"] = 0.5
        r.arrays["spin"] = np.full(len(r), float(k))
        if variant == "optional-missing" and k % 5 == 0:
            r.info.pop("REF_stress", None)
    keys = {
        "mace": AtomsKeys(),
        "keep-heads-weights": AtomsKeys(
            keep=("spin", "config_weight"), head_key="task", config_type_weights={"bulk_fcc": 3.0}
        ),
        "optional-missing": AtomsKeys(required=("energy",)),
    }[variant]
    want = convert_frames_reference(records, cutoff=CUTOFF, keys=keys, source=1, where="set.xyz")
    got = convert_frames(records, cutoff=CUTOFF, keys=keys, source=1, where="set.xyz")
    _assert_same_chunk(got, want)
    assert got.graphs.n_edge.sum() > 0 and len(got.graphs) == len(records)


def test_vectorised_conversion_reports_the_first_bad_frame_as_the_reference(extxyz):
    """Bad values anywhere in a block (NaN forces in one frame, a --keep key missing from a
    later one, a string energy): the error names the first bad frame and field, as frame by
    frame."""
    from graphbatch.datasets._atoms import AtomsInputError
    from graphbatch.datasets._atoms_convert import convert_frames

    from ._atoms_reference import convert_frames_reference

    keys = AtomsKeys(keep=("spin",))
    for bad in ("nan", "keep", "string"):
        records = _records(extxyz)
        for r in records:
            r.arrays["spin"] = np.zeros(len(r))
        if bad == "nan":
            records[5].arrays["REF_forces"] = records[5].arrays["REF_forces"].copy()
            records[5].arrays["REF_forces"][0, 1] = np.nan
            del records[9].arrays["spin"]
            expect = "set.xyz: frame 5: REF_forces: holds nan at [0, 1]"
        elif bad == "keep":
            del records[9].arrays["spin"]
            records[12].info["REF_energy"] = np.inf
            expect = "set.xyz: frame 9: spin: missing"
        else:
            records[3].info["REF_energy"] = "high"
            expect = "set.xyz: frame 3: REF_energy: is not numeric"
        for convert in (convert_frames, convert_frames_reference):
            with pytest.raises(AtomsInputError) as err:
                convert(records, cutoff=CUTOFF, keys=keys, source=0, where="set.xyz")
            assert str(err.value).startswith(expect), str(err.value)


def test_neighbour_list_is_the_half_list_and_its_mirror():
    """The store's edges of a structure: vesin's half list, then each pair reversed with the
    negated shift -- the full list's multiset (one-atom cells: both self-images)."""
    import vesin

    for atoms in [*special_structures()[:2], bulk("Cu", "fcc", a=3.61, cubic=True)]:
        pos, cell, pbc = atoms.positions, atoms.cell.array, atoms.pbc
        i, j, s = neighbour_list(pos, cell, pbc, CUTOFF)
        h = i.shape[0] // 2
        np.testing.assert_array_equal(i[h:], j[:h])
        np.testing.assert_array_equal(s[h:], -s[:h])
        full = vesin.NeighborList(cutoff=CUTOFF, full_list=True).compute(pos, cell, pbc, "ijS")
        np.testing.assert_array_equal(_edge_rows(i, j, s), _edge_rows(*full))


def test_a_build_process_does_not_import_torch(extxyz, store, tmp_path):
    """`graphbatch data build` (and its workers) import vesin without torch -- seconds per
    process -- and the edges are the same; torch stays importable afterwards."""
    code = f"""
import sys
from graphbatch.cli import main
assert main(["data", "build", "extxyz", {str(extxyz)!r}, "--cutoff", "{CUTOFF}", "--out",
             {str(tmp_path / "cli.h5")!r}, "--no-progress", "--workers", "2"]) == 0
assert "torch" not in sys.modules, "torch imported"
import torch
print("ok", torch.__version__)
"""
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]
    a = GraphStore(tmp_path / "cli.h5").packed()
    b = store.packed()
    np.testing.assert_array_equal(a.edge_index, b.edge_index)
    np.testing.assert_array_equal(a.edge["unit_shifts"], b.edge["unit_shifts"])
