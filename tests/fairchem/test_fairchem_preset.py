"""`graphbatch.atomistic.fairchem` with fairchem itself: padded batches of a small eSCN-MD
backbone (``otf_graph=False``) with an energy/force/stress head give fairchem's own unpadded
results per real graph (float32, which fairchem's ``AtomicData`` requires), the same loss and the
same parameter gradients, including a batch with exactly one padding node.

``fairchem-core`` cannot share ``mace-torch``'s environment (e3nn 0.6 vs 0.4), so these tests
skip in the main environment and run in a separate one: ``make test-fairchem`` (a
``.venv-fairchem`` with torch 2.13.0, fairchem-core and this package; CI runs it after
``make test``)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip(
    "fairchem.core",
    reason="fairchem-core is not installed (it cannot share "
    "mace-torch's environment); run `make test-fairchem`",
)
ase = pytest.importorskip("ase")

import graphbatch.atomistic as ga  # noqa: E402
import graphbatch.torch as gt  # noqa: E402

R_MAX = 3.0
#: (padding nodes, padding edges, padding graphs) added to the real graphs' totals
SHAPES = {
    "one padding node, no padding edge": (1, 0, 1),
    "one padding node, padding self-loops": (1, 7, 2),
    "five padding nodes": (5, 9, 3),
}


def _graphs(n: int = 4, seed: int = 0) -> list:
    """``n`` random periodic cells (3-6 H/C/O atoms, ~3.6 Å boxes) with reference energy,
    forces and stress, edges from ASE's neighbour list at `R_MAX` (fairchem's edge order:
    neighbour, centre)."""
    from ase.calculators.singlepoint import SinglePointCalculator
    from ase.neighborlist import neighbor_list
    from fairchem.core.datasets.atomic_data import AtomicData

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
        atoms.calc = SinglePointCalculator(
            atoms,
            energy=float(rng.normal()),
            forces=rng.normal(size=(k, 3)),
            stress=rng.normal(size=6) * 0.01,
        )
        g = AtomicData.from_ase(atoms, r_edges=False, sid=f"s{i}", task_name="omat")
        ii, jj, shifts = neighbor_list("ijS", atoms, R_MAX)
        g.edge_index = torch.tensor(np.stack([jj, ii]), dtype=torch.long)
        g.cell_offsets = torch.tensor(shifts, dtype=torch.float32)
        g.nedges = torch.tensor([len(ii)])
        out.append(g)
    return out


@pytest.fixture(scope="module")
def model():
    from fairchem.core.models.uma.escn_md import MLP_EFS_Head, eSCNMDBackbone

    torch.manual_seed(0)
    backbone = eSCNMDBackbone(
        max_num_elements=10,
        sphere_channels=16,
        lmax=1,
        mmax=1,
        otf_graph=False,
        cutoff=R_MAX,
        edge_channels=16,
        num_distance_basis=16,
        num_layers=1,
        hidden_channels=16,
        direct_forces=False,
        regress_forces=True,
        regress_stress=True,
        dataset_list=["omat"],
        use_dataset_embedding=False,
    )
    head = MLP_EFS_Head(backbone, wrap_property=False)

    def run(data):
        return head(data, backbone(data))

    run.parameters = [
        p for p in list(backbone.parameters()) + list(head.parameters()) if p.requires_grad
    ]
    return run


@pytest.fixture(scope="module")
def graphs():
    return _graphs()


def _unpadded(graphs):
    from fairchem.core.datasets.atomic_data import atomicdata_list_to_batch

    return atomicdata_list_to_batch([g.clone() for g in graphs])


def _padded(graphs, extra):
    n = sum(g.num_nodes for g in graphs)
    e = sum(g.num_edges for g in graphs)
    shape = (n + extra[0], e + extra[1], len(graphs) + extra[2])
    return ga.fairchem(r_max=R_MAX).collate([g.clone() for g in graphs], shape)


@pytest.mark.parametrize("name", list(SHAPES))
def test_padded_equals_unpadded_energy_forces_stress(model, graphs, name):
    ref = model(_unpadded(graphs))
    batch = _padded(graphs, SHAPES[name])
    n, g = sum(x.num_nodes for x in graphs), len(graphs)
    assert int(batch["node_mask"].shape[0]) - n == SHAPES[name][0]
    # count fields follow the padded layout, padding graphs included
    assert torch.equal(batch["natoms"], batch["ptr"].diff())
    assert torch.equal(batch["nedges"], batch["edge_ptr"].diff())
    out = model(ga.to_fairchem(batch))
    for key in ("energy", "forces", "stress"):
        assert torch.isfinite(out[key]).all(), key  # padding rows included
    # float32: fairchem's own batch vs ours differ only by summation order
    torch.testing.assert_close(out["energy"][:g], ref["energy"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out["forces"][:n], ref["forces"], rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(out["stress"][:g], ref["stress"], rtol=1e-4, atol=1e-7)


def _reference_loss(batch, out):
    """fairchem-style energy-per-atom + force + stress MSE on fairchem's unpadded batch,
    written out independently of `graphbatch.atomistic`."""
    na = batch["natoms"].to(out["energy"].dtype)
    return (
        (((batch["energy"] - out["energy"]) / na) ** 2).mean()
        + ((batch["forces"] - out["forces"]) ** 2).mean()
        + ((batch["stress"].reshape(out["stress"].shape) - out["stress"]) ** 2).mean()
    )


@pytest.mark.parametrize("name", list(SHAPES))
def test_padded_loss_and_gradients_equal_unpadded(model, graphs, name):
    ref_batch = _unpadded(graphs)
    ref_loss = _reference_loss(ref_batch, model(ref_batch))
    ref_grads = torch.autograd.grad(ref_loss, model.parameters, allow_unused=True)
    batch = _padded(graphs, SHAPES[name])
    loss = ga.energy_force_stress_loss(model(ga.to_fairchem(batch)), batch)
    grads = torch.autograd.grad(loss, model.parameters, allow_unused=True)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=0.0)
    compared = 0
    for a, b in zip(grads, ref_grads, strict=True):
        assert (a is None) == (b is None)
        if b is None:
            continue
        assert torch.isfinite(a).all()
        scale = float(b.abs().max().clamp(min=1e-12))
        assert float((a - b).abs().max()) <= 1e-4 * scale
        compared += 1
    assert compared > 10


def test_zero_count_pads_are_refused_by_fairchem(graphs):
    """Why the preset derives ``natoms``/``nedges`` from the layout: with the inferred schema's
    plain zero pads the counts disagree with the padded atoms and fairchem refuses the batch."""
    n = sum(g.num_nodes for g in graphs)
    e = sum(g.num_edges for g in graphs)
    shape = (n + 1, e + 7, len(graphs) + 2)
    schema = gt.infer_schema(graphs).with_pad(sid=[""])
    batch = gt.collate_dict([g.clone() for g in graphs], shape, schema=schema)
    assert int(batch["natoms"].sum()) < shape[0]
    with pytest.raises(AssertionError):
        ga.to_fairchem(batch)
