"""`atoms_statistics` on a store built from an extxyz file equals MACE's own functions on the
same file read as MACE users read it (``load_from_xyz`` -> ``AtomicData.from_config`` ->
MACE's ``torch_geometric`` DataLoader, float64): ``compute_average_E0s``,
``compute_avg_num_neighbors``, ``compute_mean_std_atomic_inter_energy`` and
``compute_mean_rms_energy_forces``, within 1e-8 relative; per head as MACE fits each head."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("mace")
pytest.importorskip("vesin")
import ase.io  # noqa: E402

from graphbatch.datasets import (  # noqa: E402
    AtomsKeys,
    atoms_statistics,
    build_atoms_store,
    emt_structures,
)

from ..datasets.test_atoms_store import special_structures  # noqa: E402

R_MAX = 4.0
REL = 1e-8
HEADS = ("bulk", "surface")


def _mace_statistics(configs: list, batch_size: int = 7) -> dict:
    """MACE's functions on ``configs`` with MACE's own z table, graphs and loader."""
    from mace.data import AtomicData
    from mace.data.utils import compute_average_E0s
    from mace.modules.utils import (
        compute_avg_num_neighbors,
        compute_mean_rms_energy_forces,
        compute_mean_std_atomic_inter_energy,
    )
    from mace.tools import get_atomic_number_table_from_zs, torch_geometric

    table = get_atomic_number_table_from_zs(z for c in configs for z in c.atomic_numbers)
    e0 = compute_average_E0s(configs, table)
    graphs = [AtomicData.from_config(c, z_table=table, cutoff=R_MAX) for c in configs]
    loader = torch_geometric.dataloader.DataLoader(graphs, batch_size=batch_size, shuffle=False)
    energies = np.array([e0[z] for z in table.zs])
    mean, std = compute_mean_std_atomic_inter_energy(loader, energies)
    mean_f, rms = compute_mean_rms_energy_forces(loader, energies)
    return {
        "z_table": [int(z) for z in table.zs],
        "atomic_energies": {int(z): float(e) for z, e in e0.items()},
        "avg_num_neighbors": compute_avg_num_neighbors(loader),
        "energy_per_atom_mean": float(np.squeeze(mean)),
        "energy_per_atom_std": float(np.squeeze(std)),
        "mean_again": float(np.squeeze(mean_f)),
        "forces_rms": float(np.squeeze(rms)),
    }


def _load(xyz) -> list:
    from mace.data.utils import KeySpecification, load_from_xyz

    keys = KeySpecification(
        info_keys={"energy": "REF_energy", "stress": "REF_stress", "head": "head"},
        arrays_keys={"forces": "REF_forces"},
    )
    return load_from_xyz(str(xyz), keys)[1]


def _assert_equal_to_mace(stats, mace: dict) -> None:
    assert list(stats.z_table) == mace["z_table"]
    scale = max(abs(e) for e in mace["atomic_energies"].values())
    for z, e in mace["atomic_energies"].items():
        assert abs(stats.atomic_energies[z] - e) <= REL * scale, (z, stats.atomic_energies[z], e)
    assert stats.avg_num_neighbors == pytest.approx(mace["avg_num_neighbors"], rel=REL)
    assert stats.energy_per_atom_mean == pytest.approx(mace["energy_per_atom_mean"], rel=REL)
    assert stats.energy_per_atom_mean == pytest.approx(mace["mean_again"], rel=REL)
    assert stats.energy_per_atom_std == pytest.approx(mace["energy_per_atom_std"], rel=REL)
    assert stats.forces_rms == pytest.approx(mace["forces_rms"], rel=REL)


@pytest.fixture(scope="module")
def float64():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # MACE's default_dtype for training statistics
    yield
    torch.set_default_dtype(old)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """EMT structures of seven metals and their alloys (bulk, slabs, clusters, one-atom cells),
    plus the cases a neighbour list gets wrong first."""
    d = tmp_path_factory.mktemp("stats_mace")
    frames = list(emt_structures(80, seed=11, max_atoms=24)) + special_structures()
    for k, a in enumerate(frames):
        a.info["head"] = HEADS[k % 2]
    xyz = d / "set.xyz"
    ase.io.write(xyz, frames, format="extxyz")
    h5 = d / "set.h5"
    build_atoms_store(xyz, h5, cutoff=R_MAX)
    heads = d / "heads.h5"
    build_atoms_store(xyz, heads, cutoff=R_MAX, keys=AtomsKeys(head_key="head"))
    return xyz, h5, heads


def test_statistics_equal_mace_functions(files, float64):
    xyz, h5, _ = files
    stats = atoms_statistics(h5, chunk_rows=3000)  # several chunks
    assert len(stats.z_table) == 7 and stats.n_graph == 80 + len(special_structures())
    _assert_equal_to_mace(stats, _mace_statistics(_load(xyz)))


def test_each_head_equals_mace_on_that_heads_structures(files, float64):
    """MACE fits E0s per head on the head's own training configurations and elements (a
    MACE user has one file per head: here, frame ``k`` belongs to head ``k % 2``)."""
    xyz, _, h5 = files
    stats = atoms_statistics(h5, chunk_rows=2000)
    configs = _load(xyz)
    assert sorted(stats.heads) == ["bulk", "surface"]
    for name, head in stats.heads.items():
        own = [c for k, c in enumerate(configs) if HEADS[k % 2] == name]
        assert head.n_graph == len(own)
        _assert_equal_to_mace(head, _mace_statistics(own, batch_size=5))
