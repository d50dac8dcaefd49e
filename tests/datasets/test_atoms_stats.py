"""`atoms_statistics` / ``graphbatch data stats`` on stores with the atomistic schema, against a
plain whole-array reference written from MACE's definitions (one structure at a time, one
``np.linalg.lstsq`` on the full count matrix): any chunk size, sharded stores, rank-deficient
compositions, missing labels, several heads, bounded memory, clear errors. (Against MACE's own
functions on its own loader: tests/atomistic/test_atoms_stats_mace.py.)"""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("h5py")

from graphbatch import InputError
from graphbatch.cli import main
from graphbatch.datasets import (
    AtomsStatistics,
    GraphArrays,
    GraphStore,
    atoms_statistics,
    write_store,
)
from graphbatch.datasets._manifest import write_manifest_of_shards

ZS = np.array([1, 6, 8, 29, 79])


def atoms_graphs(
    n: int,
    seed: int,
    *,
    zs: np.ndarray = ZS,
    fixed: np.ndarray | None = None,
    heads: int = 1,
    forces: bool = True,
    missing_energy: float = 0.0,
) -> GraphArrays:
    """``n`` structures with the atomistic store's fields: random atoms of ``zs`` (or the
    composition ``fixed`` times 1..4 per structure), random directed edges (some atoms receive
    none), energies ``sum E0 + noise``, forces; ``missing_energy``: share stored as MACE's
    missing property (value 0, ``energy_weight`` 0)."""
    rng = np.random.default_rng(seed)
    z_l, n_node, n_edge, ei = [], [], [], []
    for _ in range(n):
        if fixed is None:
            z = rng.choice(zs, int(rng.integers(1, 9)))
        else:
            z = np.repeat(zs, fixed * int(rng.integers(1, 5)))
        k = z.shape[0]
        e = int(rng.integers(0, 3 * k))
        ei.append(rng.integers(0, k, size=(2, e)))
        z_l.append(z)
        n_node.append(k)
        n_edge.append(e)
    z = np.concatenate(z_l).astype(np.uint8)
    e0 = {int(a): -10.0 * (i + 1) + 0.37 * a for i, a in enumerate(zs)}
    energy = np.array([sum(e0[int(a)] for a in zz) for zz in z_l]) + rng.normal(0, 0.3, n)
    weight = (rng.random(n) >= missing_energy).astype(np.float64)
    node = {"atomic_numbers": z, "positions": rng.normal(size=(z.shape[0], 3))}
    graph = {
        "energy": energy * weight,
        "energy_weight": weight,
        "head": rng.integers(0, heads, n).astype(np.int16),
    }
    if forces:
        node["forces"] = rng.normal(0, 0.5, size=(z.shape[0], 3))
        graph["forces_weight"] = np.ones(n)
    return GraphArrays(
        n_node=np.array(n_node),
        n_edge=np.array(n_edge),
        edge_index=np.concatenate(ei, axis=1).astype(np.int32),
        node=node,
        graph=graph,
    )


def store_of(path, g: GraphArrays, *, heads: int = 1, complete: bool = True) -> GraphStore:
    n = len(g.n_node)
    frames_with = {"energy": n if complete else int((g.graph["energy_weight"] != 0).sum())}
    meta = {"heads": [f"h{k}" for k in range(heads)], "frames_with": frames_with}
    return GraphStore(write_store(path, [g], name="atoms", meta=meta))


def reference(g: GraphArrays, rows: np.ndarray | None = None) -> dict:
    """MACE's definitions on whole arrays, structure by structure (``rows``: the structures
    with an energy; all by default)."""
    no = np.concatenate([[0], np.cumsum(g.n_node)])
    eo = np.concatenate([[0], np.cumsum(g.n_edge)])
    z = g.node["atomic_numbers"]
    zs = sorted(set(z.tolist()))
    n = len(g.n_node)
    rows = np.arange(n) if rows is None else rows
    a = np.zeros((n, len(zs)))
    receivers = 0
    for i in range(n):
        zi = z[no[i] : no[i + 1]]
        a[i] = [np.count_nonzero(zi == s) for s in zs]
        receivers += np.unique(g.edge_index[1, eo[i] : eo[i + 1]]).shape[0]
    own = [k for k, s in enumerate(zs) if a[rows, k].any()]
    e0 = np.linalg.lstsq(a[rows][:, own], g.graph["energy"][rows], rcond=None)[0]
    e0_all = np.zeros(len(zs))
    e0_all[own] = e0
    x = (g.graph["energy"][rows] - a[rows] @ e0_all) / g.n_node[rows]
    std = np.sqrt(np.square(x - x.mean()).sum() / (max(len(x) - 1, 1) + 1e-6))
    out = {
        "z_table": [zs[k] for k in own],
        "atomic_energies": {zs[k]: float(e) for k, e in zip(own, e0, strict=True)},
        "avg_num_neighbors": int(g.n_edge.sum()) / receivers if receivers else np.nan,
        "energy_per_atom_mean": float(x.mean()),
        "energy_per_atom_std": float(std) if std else 1.0,  # MACE's _check_non_zero
        "energy_mean": float(g.graph["energy"][rows].mean()),
    }
    if "forces" in g.node:
        out["forces_rms"] = float(np.sqrt(np.mean(np.square(g.node["forces"]))))
    return out


def assert_close(stats: AtomsStatistics, ref: dict, rel: float = 1e-10) -> None:
    assert list(stats.z_table) == ref["z_table"]
    scale = max(abs(v) for v in ref["atomic_energies"].values())
    for z, e in ref["atomic_energies"].items():
        assert abs(stats.atomic_energies[z] - e) <= rel * scale, (z, stats.atomic_energies[z], e)
    noise = ref["energy_per_atom_std"] < 1e-9 * scale  # an exact fit: the std is rounding
    assert not noise or stats.energy_per_atom_std < 1e-9 * scale or stats.energy_per_atom_std == 1
    for key, value in ref.items():
        if key not in ("z_table", "atomic_energies") and not (noise and "std" in key):
            got = getattr(stats, key)
            assert got == pytest.approx(value, rel=rel, abs=rel * scale, nan_ok=True), key


def same_statistics(a: AtomsStatistics, b: AtomsStatistics, rel: float = 1e-11) -> None:
    """Equal counts, tables and integers; floats within ``rel`` (rounding of sums)."""
    da, db = a.as_dict(), b.as_dict()
    for key in ("z_table", "n_graph", "n_node", "n_edge", "n_energy", "n_forces"):
        assert da[key] == db[key], key
    assert da["avg_num_neighbors"] == db["avg_num_neighbors"]  # a ratio of exact integers
    assert da["atoms_per_element"] == db["atoms_per_element"]
    scale = max(abs(v) for v in da["atomic_energies"].values())
    for z, e in da["atomic_energies"].items():
        assert abs(db["atomic_energies"][z] - e) <= rel * scale
    for key in ("energy_mean", "energy_rms", "energy_per_atom_mean", "energy_per_atom_std"):
        assert db[key] == pytest.approx(da[key], rel=rel, abs=rel * scale), key
    assert db["forces_rms"] == pytest.approx(da["forces_rms"], rel=rel)
    assert db["forces_mean"] == pytest.approx(da["forces_mean"], rel=rel, abs=1e-14)


@pytest.fixture(scope="module")
def graphs() -> GraphArrays:
    return atoms_graphs(300, seed=1)


@pytest.fixture(scope="module")
def store(graphs, tmp_path_factory) -> GraphStore:
    return store_of(tmp_path_factory.mktemp("stats") / "a.h5", graphs)


@pytest.fixture(scope="module")
def whole(store) -> AtomsStatistics:
    """The statistics of `store` read in one chunk."""
    return atoms_statistics(store, chunk_rows=10**9)


def test_equals_the_whole_array_reference(graphs, store):
    stats = atoms_statistics(store)
    assert_close(stats, reference(graphs))
    assert (stats.n_graph, stats.n_node, stats.n_edge) == (
        300,
        int(graphs.n_node.sum()),
        int(graphs.n_edge.sum()),
    )
    assert stats.n_energy == 300 and stats.n_forces == int(graphs.n_node.sum())
    assert stats.atoms_per_element == {
        int(z): int((graphs.node["atomic_numbers"] == z).sum()) for z in ZS
    }
    f = graphs.node["forces"]
    assert stats.forces_mean == pytest.approx(tuple(f.mean(axis=0)), abs=1e-15)
    assert stats.energy_rms == pytest.approx(np.sqrt(np.mean(graphs.graph["energy"] ** 2)))
    assert stats.heads == {}


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(chunk_rows=st.integers(1, 5000))
def test_the_result_does_not_depend_on_the_chunk_size(store, whole, chunk_rows):
    """From one structure per chunk to the whole store in one: the same statistics (integers
    exactly, floats to rounding)."""
    same_statistics(whole, atoms_statistics(store, chunk_rows=chunk_rows))


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    n=st.integers(1, 40),
    seed=st.integers(0, 2**32 - 1),
    chunk_rows=st.integers(1, 400),
    k=st.integers(1, 4),
)
def test_random_stores_at_random_chunk_sizes_equal_the_reference(tmp_path, n, seed, chunk_rows, k):
    rng = np.random.default_rng(seed)
    zs = np.sort(rng.choice(np.arange(1, 119), k, replace=False))
    g = atoms_graphs(n, seed, zs=zs)
    path = tmp_path / f"r{seed}_{n}.h5"
    path.unlink(missing_ok=True)
    stats = atoms_statistics(store_of(path, g), chunk_rows=chunk_rows)
    assert_close(stats, reference(g), rel=1e-8)  # also fewer structures than elements


def test_a_sharded_store_gives_the_single_file_statistics(graphs, store, tmp_path):
    paths = [
        write_store(tmp_path / f"s{k}.h5", [graphs.take(np.arange(a, b))], name="atoms")
        for k, (a, b) in enumerate([(0, 70), (70, 71), (71, 300)])
    ]
    write_manifest_of_shards(tmp_path / "m.json", paths, name="atoms", meta={}, build={})
    sharded = atoms_statistics(tmp_path / "m.json", chunk_rows=500)
    same_statistics(atoms_statistics(store), sharded)


def test_one_stoichiometry_gets_lstsq_minimum_norm_e0s(tmp_path):
    """Every structure (H2O)_k: the counts have rank 1, and MACE's lstsq returns the
    minimum-norm E0s; so does the streamed factor, at any chunk size."""
    g = atoms_graphs(200, seed=3, zs=np.array([1, 8]), fixed=np.array([2, 1]))
    s = store_of(tmp_path / "w.h5", g)
    ref = reference(g)
    for rows in (1, 37, 10**6):
        assert_close(atoms_statistics(s, chunk_rows=rows), ref, rel=1e-9)
    e = atoms_statistics(s).atomic_energies
    assert e[1] / e[8] == pytest.approx(2.0)  # the minimum-norm direction (2, 1)


def test_structures_without_an_energy_are_left_out_where_some_frames_lacked_it(tmp_path):
    g = atoms_graphs(200, seed=4, missing_energy=0.3)
    has = np.flatnonzero(g.graph["energy_weight"] != 0)
    partial = atoms_statistics(store_of(tmp_path / "p.h5", g, complete=False))
    ref = reference(g, rows=has)
    assert_close(partial, {k: v for k, v in ref.items() if k != "forces_rms"})
    assert partial.n_energy == has.shape[0] < 200
    # where every frame had an energy, a weight of 0 is the user's choice: all count (MACE)
    full = atoms_statistics(store_of(tmp_path / "f.h5", g, complete=True))
    assert full.n_energy == 200
    assert_close(full, reference(g))


def test_each_head_gets_its_own_fit_on_its_own_elements(tmp_path):
    g = atoms_graphs(240, seed=5, heads=3)
    stats = atoms_statistics(store_of(tmp_path / "h.h5", g, heads=3), chunk_rows=300)
    assert_close(stats, reference(g))
    assert list(stats.heads) == ["h0", "h1", "h2"]
    for code, name in enumerate(stats.heads):
        rows = np.flatnonzero(g.graph["head"] == code)
        sub = g.take(rows)
        assert_close(stats.heads[name], reference(sub))
        assert stats.heads[name].n_graph == rows.shape[0]
        assert stats.heads[name].heads == {}
    assert sum(h.n_edge for h in stats.heads.values()) == stats.n_edge


def test_a_store_without_forces_has_no_force_statistics(tmp_path):
    g = atoms_graphs(50, seed=6, forces=False)
    stats = atoms_statistics(store_of(tmp_path / "e.h5", g))
    assert stats.forces_rms is None and stats.forces_mean is None and stats.n_forces == 0
    assert_close(stats, reference(g))
    d = json.loads(stats.to_json())
    assert d["forces_rms"] is None and d["forces_mean"] is None


def test_memory_stays_within_a_chunk(tmp_path):
    """A store ~50x the chunk is streamed: the peak of Python/NumPy allocations stays a small
    fraction of the store's data (a whole-store read would hold all of it)."""
    g = atoms_graphs(6000, seed=7)
    s = store_of(tmp_path / "m.h5", g)
    data = sum(a.nbytes for a in (*g.node.values(), *g.graph.values(), g.edge_index))
    tracemalloc.start()
    try:
        atoms_statistics(s, chunk_rows=2000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < data / 8, (peak, data)


def test_stores_that_cannot_give_statistics_are_refused_in_one_line(tmp_path, capsys):
    g = atoms_graphs(10, seed=8)
    no_energy = GraphArrays(
        n_node=g.n_node, n_edge=g.n_edge, edge_index=g.edge_index, node=g.node, graph={}
    )
    no_z = GraphArrays(
        n_node=g.n_node,
        n_edge=g.n_edge,
        edge_index=g.edge_index,
        node={"z": g.node["atomic_numbers"]},
        graph=g.graph,
    )
    none_labelled = atoms_graphs(10, seed=8, missing_energy=1.0)
    cases = {
        "energy": write_store(tmp_path / "ne.h5", [no_energy], name="x"),
        "atomic_numbers": write_store(tmp_path / "nz.h5", [no_z], name="x"),
        "no structure has an energy": store_of(
            tmp_path / "nl.h5", none_labelled, complete=False
        ).path,
    }
    for what, path in cases.items():
        with pytest.raises(InputError, match=str(path.name)) as info:
            atoms_statistics(path)
        assert what in str(info.value) and "\n" not in str(info.value)
        assert main(["data", "stats", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(path) in err and what in err, err
    with pytest.raises(InputError, match="chunk_rows"):
        atoms_statistics(cases["energy"], chunk_rows=0)
    with pytest.raises(TypeError, match="GraphStore or a path"):
        atoms_statistics(3)


#: ``graphbatch data stats --json``: keys in this order, JSON types (a public contract).
JSON_KEYS = {
    "atomic_energies": dict,
    "avg_num_neighbors": float,
    "z_table": list,
    "n_graph": int,
    "n_node": int,
    "n_edge": int,
    "n_energy": int,
    "energy_mean": float,
    "energy_rms": float,
    "energy_per_atom_mean": float,
    "energy_per_atom_std": float,
    "n_forces": int,
    "forces_rms": float,
    "forces_mean": list,
    "atoms_per_element": dict,
    "heads": dict,
}


def test_cli_json_and_table(store, capsys):
    stats = atoms_statistics(store)
    assert main(["data", "stats", str(store.path), "--json"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    value = json.loads(out)
    assert json.dumps(value) + "\n" == out
    assert {k: type(v) for k, v in value.items()} == JSON_KEYS
    assert list(value) == list(JSON_KEYS)
    assert value["atomic_energies"] == {str(z): e for z, e in stats.atomic_energies.items()}
    assert value["avg_num_neighbors"] == stats.avg_num_neighbors
    assert value["z_table"] == [1, 6, 8, 29, 79]
    assert main(["data", "stats", str(store.path)]) == 0
    out = capsys.readouterr().out
    assert f"avg_num_neighbors     {stats.avg_num_neighbors:.6f}" in out
    for z in stats.z_table:
        row = next(ln.split() for ln in out.splitlines() if ln.split()[:1] == [str(z)])
        assert float(row[-1]) == pytest.approx(stats.atomic_energies[z], abs=1e-6)
        assert int(row[-2].replace(",", "")) == stats.atoms_per_element[z]


def test_the_result_is_immutable(store):
    stats = atoms_statistics(store)
    with pytest.raises(AttributeError):
        stats.avg_num_neighbors = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        stats.atomic_energies[1] = 0.0  # type: ignore[index]
