"""Neighbour lists that could never finish, from the outside: a periodic cell of (nearly) zero
volume or a cutoff far larger than the structure. The work is bounded up front: what cannot
finish is refused in one line naming the file, frame and the number; a structure without
periodicity and a huge cutoff is every pair at once. Every case runs in a subprocess with a
timeout, so a regression fails instead of hanging the suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ase")
pytest.importorskip("vesin")
pytest.importorskip("h5py")

from hypothesis import given, settings
from hypothesis import strategies as st

from graphbatch.datasets import GraphStore, neighbour_list

_SRC = str(Path(__file__).resolve().parents[2] / "src")
_ENV = {**os.environ, "PYTHONPATH": _SRC}

WATER = "3\nProperties=species:S:1:pos:R:3 REF_energy=1.0\nO 0 0 0\nH 0.96 0 0\nH -0.24 0.93 0\n"


def _cli(*args, cwd, timeout=90) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "graphbatch.cli", *map(str, args)],
        cwd=cwd,
        env=_ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _one_cu(lattice: str) -> str:
    return (
        f'1\nLattice="{lattice}" Properties=species:S:1:pos:R:3 pbc="T T T" '
        "REF_energy=1.0\nCu 0 0 0\n"
    )


THIN = {
    "flat": "3 0 0 0 3 0 3 3 0.0001",  # volume 9e-4 A^3: lattice planes 1e-4 A apart
    "tiny": "0.001 0 0 0 0.001 0 0 0 0.001",  # a 1e-3 A cube
}


@pytest.mark.parametrize("fmt", ["extxyz", "ase-db"])
@pytest.mark.parametrize("cell", sorted(THIN))
def test_a_cell_too_thin_for_the_cutoff_is_refused_in_one_line(tmp_path, cell, fmt):
    """It hung in vesin's cell list (50,000 images per axis), deaf to SIGTERM."""
    import ase.io

    src = tmp_path / "in.xyz"
    src.write_text(
        "1\nProperties=species:S:1:pos:R:3 REF_energy=1.0\nCu 0 0 0\n" + _one_cu(THIN[cell])
    )
    if fmt == "ase-db":
        import ase.db
        from ase.calculators.singlepoint import SinglePointCalculator

        db_path = tmp_path / "in.db"
        with ase.db.connect(db_path) as db:
            for atoms in ase.io.read(src, ":"):
                atoms.calc = SinglePointCalculator(
                    atoms, energy=1.0, forces=np.zeros((len(atoms), 3))
                )
                db.write(atoms)
        src.unlink()
        src = db_path
    r = _cli(
        "data",
        "build",
        fmt,
        src,
        "--cutoff",
        5,
        "--out",
        "out.h5",
        "--require",
        "energy",
        "--no-progress",
        cwd=tmp_path,
    )
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    frame = "frame 2" if fmt == "ase-db" else "frame 1"  # ASE database rows count from 1
    assert f"{src.name}: {frame}: cell:" in lines[0], lines[0]
    assert "periodic images" in lines[0] and "limit" in lines[0], lines[0]
    assert sorted(os.listdir(tmp_path)) == [src.name]  # nothing written, no temporary


def test_a_huge_cutoff_without_periodicity_is_every_pair_at_once(tmp_path):
    """A 3-atom molecule took 8 s at 1,000 A and never ended at 10^6 A; MACE's own list
    (matscipy) is instant. Now every cutoff gives MACE's edges within milliseconds."""
    code = """
import time, json, numpy as np
from mace.data.neighborhood import get_neighborhood
from graphbatch.datasets import neighbour_list
pos = np.array([[0, 0, 0], [0.96, 0, 0], [-0.24, 0.93, 0]], float)
out = {}
for cut in (1e3, 1e4, 1e6, 1e12):
    t = time.perf_counter()
    i, j, s = neighbour_list(pos, np.zeros((3, 3)), np.zeros(3, bool), cut)
    took = time.perf_counter() - t
    ei, _, us, _ = get_neighborhood(pos, min(cut, 1e6), pbc=(False,) * 3, cell=np.zeros((3, 3)))
    mine = sorted(zip(i.tolist(), j.tolist(), map(tuple, s.tolist())))
    theirs = sorted(zip(ei[0].tolist(), ei[1].tolist(), map(tuple, us.tolist())))
    out[str(cut)] = [took, len(mine), mine == theirs]
print(json.dumps(out))
"""
    r = subprocess.run(
        [sys.executable, "-c", code], env=_ENV, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr[-2000:]
    for cut, (took, n, same) in json.loads(r.stdout.strip().splitlines()[-1]).items():
        assert n == 6 and same, cut
        assert took < 0.5, (cut, took)
    (tmp_path / "w.xyz").write_text(WATER)
    r = _cli(
        "data",
        "build",
        "extxyz",
        "w.xyz",
        "--cutoff",
        "1e6",
        "--out",
        "w.h5",
        "--require",
        "energy",
        "--no-progress",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert GraphStore(tmp_path / "w.h5", verify=True).n_edge.tolist() == [6]


def _rows(i, j, s) -> np.ndarray:
    rows = np.concatenate([np.stack([i, j], 1), np.asarray(s)], 1).astype(np.int64)
    return rows[np.lexsort(rows.T[::-1])]


def _mace_rows(pos, cell, pbc, cutoff) -> np.ndarray:
    from mace.data.neighborhood import get_neighborhood

    ei, _, us, _ = get_neighborhood(pos, cutoff, pbc=tuple(bool(p) for p in pbc), cell=cell.copy())
    return _rows(ei[0], ei[1], us)


@st.composite
def _crawling(draw) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Structures on which vesin's cell list would crawl: (nearly) flat along a non-periodic
    direction, with a cutoff much larger than that thickness -- clusters without a cell and
    with huge cutoffs, slabs (``T T F``) with a skewed in-plane cell."""
    n = draw(st.integers(1, 10))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    pos = rng.uniform(-3, 3, size=(n, 3))
    pos[:, 2] = rng.uniform(0, draw(st.sampled_from([0.0, 1e-5, 1e-3])), size=n)
    if draw(st.booleans()):  # a cluster
        return pos, np.zeros((3, 3)), np.zeros(3, bool), draw(st.sampled_from([50.0, 1e3, 1e5]))
    a = rng.uniform(2.0, 4.0)
    cell = np.array([[a, 0, 0], [rng.uniform(-1, 1), rng.uniform(2.0, 4.0), 0], [0, 0, 0]])
    pos[:, :2] = rng.uniform(-4, 8, size=(n, 2))  # also outside the cell
    return pos, cell, np.array([True, True, False]), draw(st.sampled_from([3.0, 6.5, 9.0]))


@pytest.fixture(scope="module")
def watchdog():
    """In-process neighbour lists: a hang (C code, deaf to signals) ends the test process
    with a traceback after 120 s instead of hanging the suite."""
    import faulthandler

    faulthandler.dump_traceback_later(120, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@settings(max_examples=40, deadline=None)
@given(case=_crawling())
def test_the_bounded_search_gives_mace_edges_where_the_cell_list_would_crawl(watchdog, case):
    pos, cell, pbc, cutoff = case
    i, j, s = neighbour_list(pos, cell, pbc, cutoff)
    np.testing.assert_array_equal(_rows(i, j, s), _mace_rows(pos, cell, pbc, cutoff))
    h = i.shape[0] // 2  # the half list, then its mirror
    np.testing.assert_array_equal(i[h:], j[:h])
    np.testing.assert_array_equal(s[h:], -s[:h])


def test_the_bounded_search_replaces_the_cell_list_only_where_it_would_crawl(monkeypatch):
    """The common case keeps vesin (and its edge order); a crawl never reaches it."""
    import graphbatch.datasets._neighbours as nb

    calls = []
    real = nb._vesin_list

    def spy(cutoff):
        calls.append(cutoff)
        assert len(calls) == 1, f"vesin's cell list called at cutoff {cutoff}"
        return real(cutoff)

    monkeypatch.setattr(nb, "_vesin_list", spy)
    pos = np.array([[0, 0, 0], [0.96, 0, 0], [-0.24, 0.93, 0]], float)
    neighbour_list(pos, np.zeros((3, 3)), np.zeros(3, bool), 5.0)
    assert calls == [5.0]
    neighbour_list(pos, np.zeros((3, 3)), np.zeros(3, bool), 1e6)
    slab = np.array([[0, 0, 0], [1.4, 1.1, 1e-4], [2.2, 0.3, 0]], float)
    neighbour_list(slab, np.diag([3.0, 3.0, 0.0]), np.array([True, True, False]), 6.0)
    assert calls == [5.0]
