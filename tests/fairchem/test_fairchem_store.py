"""`ga.fairchem` over an atomistic store (`graphbatch data build extxyz`): padded batches read
from the store's arrays give fairchem's own results on its unpadded batch of the same
structures (a small eSCN-MD backbone, ``otf_graph=False``, float32). Runs in fairchem's own
environment (`make test-fairchem`)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("ase")
pytest.importorskip(
    "fairchem.core",
    reason="fairchem-core is not installed (it cannot share "
    "mace-torch's environment); run `make test-fairchem`",
)
pytest.importorskip("vesin")
pytest.importorskip("h5py")

import ase.io  # noqa: E402

import graphbatch.atomistic as ga  # noqa: E402
import graphbatch.torch as gt  # noqa: E402
from graphbatch.datasets import GraphStore, build_atoms_store  # noqa: E402

from .test_fairchem_preset import R_MAX, model  # noqa: E402,F401  (the fixture)


def _structures(n: int = 6, seed: int = 1) -> list:
    """Periodic H/C/O cells and one slab (pbc T T F), labelled through a calculator (as ASE's
    extxyz reader gives them: keys energy/forces/stress)."""
    from ase.calculators.singlepoint import SinglePointCalculator

    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        k = int(rng.integers(3, 7))
        atoms = ase.Atoms(
            numbers=rng.choice([1, 6, 8], k),
            scaled_positions=rng.uniform(0, 1, (k, 3)),
            cell=np.diag(rng.uniform(3.4, 3.9, 3)),
            pbc=True,
        )
        if i == n - 1:
            atoms.pbc = (True, True, False)
        atoms.calc = SinglePointCalculator(
            atoms,
            energy=float(rng.normal()),
            forces=rng.normal(size=(k, 3)),
            stress=rng.normal(size=6) * 0.01,
        )
        out.append(atoms)
    return out


def _fairchem_own(atoms_list):
    """fairchem's AtomicData of each structure with ASE's neighbour list at `R_MAX` (fairchem's
    edge order: neighbour, centre), batched by fairchem."""
    from ase.neighborlist import neighbor_list
    from fairchem.core.datasets.atomic_data import AtomicData, atomicdata_list_to_batch

    graphs = []
    for i, atoms in enumerate(atoms_list):
        g = AtomicData.from_ase(atoms, r_edges=False, sid=f"s{i}", task_name="omat")
        ii, jj, shifts = neighbor_list("ijS", atoms, R_MAX)
        g.pos = torch.tensor(atoms.positions, dtype=torch.float32)  # as stored (unwrapped)
        g.edge_index = torch.tensor(np.stack([jj, ii]), dtype=torch.long)
        g.cell_offsets = torch.tensor(shifts, dtype=torch.float32)
        g.nedges = torch.tensor([len(ii)])
        graphs.append(g)
    return atomicdata_list_to_batch(graphs)


def test_store_fed_fairchem_batches_equal_fairchem_on_its_own_batch(model, tmp_path):  # noqa: F811
    atoms = _structures()
    path = tmp_path / "set.xyz"
    ase.io.write(path, atoms, format="extxyz")
    from graphbatch.datasets import AtomsKeys

    keys = AtomsKeys(energy="energy", forces="forces", stress="stress", virials=None, charges=None)
    build_atoms_store(path, tmp_path / "set.h5", cutoff=R_MAX, keys=keys)
    store = GraphStore(tmp_path / "set.h5")
    loader = gt.loader(
        store,
        strategy="dynamic",
        batch_size=4,
        seed=0,
        preset=ga.fairchem(r_max=R_MAX, dataset="omat"),
    )
    seen = 0
    for batch in loader:
        assert torch.equal(batch["natoms"], batch["ptr"].diff())
        assert torch.equal(batch["nedges"], batch["edge_ptr"].diff())
        real = batch["graph_index"][batch["graph_mask"]].tolist()
        out = model(ga.to_fairchem(batch))
        ref = model(_fairchem_own([atoms[i] for i in real]))
        g, n = len(real), int(batch["node_mask"].sum())
        for key in ("energy", "forces", "stress"):
            assert torch.isfinite(out[key]).all(), key
        torch.testing.assert_close(out["energy"][:g], ref["energy"], rtol=0, atol=2e-5)
        torch.testing.assert_close(out["forces"][:n], ref["forces"], rtol=0, atol=2e-5)
        torch.testing.assert_close(out["stress"][:g], ref["stress"], rtol=0, atol=2e-6)
        for key in ("energy", "forces", "stress"):
            want = {"energy": [float(atoms[i].get_potential_energy()) for i in real]}.get(key)
            if want is not None:
                np.testing.assert_allclose(batch[key][:g].numpy(), want, rtol=1e-6)
        seen += g
    assert seen == len(atoms)


def test_a_store_without_atomistic_fields_is_refused(tmp_path):
    from graphbatch.datasets import GraphArrays, write_store

    plain = GraphArrays(
        n_node=[2], n_edge=[1], edge_index=[[0], [1]], node={"pos": np.zeros((2, 3))}
    )
    write_store(tmp_path / "plain.h5", [plain], name="plain")
    with pytest.raises(ValueError, match=r"ga\.fairchem needs"):
        gt.loader(
            GraphStore(tmp_path / "plain.h5"),
            strategy="dynamic",
            batch_size=2,
            preset=ga.fairchem(r_max=R_MAX),
        )
