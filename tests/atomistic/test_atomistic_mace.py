"""MACE on padded batches: the `graphbatch.atomistic.mace` preset gives, per real graph, exactly
MACE's unpadded energies, forces, stress, loss and parameter gradients (float64, <= 1e-12), for
MACE and ScaleShiftMACE, QM9 molecules and periodic cells with stress, including batches with
exactly one padding node; MACE's ``AtomicData`` goes through ``gt.collate*`` and ``gt.loader``
with no adapter."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("mace.modules")  # mace-torch, importable (it needs matplotlib)
gt = pytest.importorskip("graphbatch.torch")
ga = pytest.importorskip("graphbatch.atomistic")

from .._mace_graphs import R_MAX, periodic_graphs, qm9_graphs, small_model, unpadded_batch  # noqa: E402

TOL = 1e-12


class _Ref(dict):
    """MACE's losses read the reference batch by attribute and by key."""

    __getattr__ = dict.__getitem__


@pytest.fixture(scope="module")
def molecules():
    return qm9_graphs(7)


@pytest.fixture(scope="module")
def crystals():
    return periodic_graphs(4)


@pytest.fixture(scope="module")
def models():
    return {k: small_model(k) for k in ("MACE", "ScaleShiftMACE")}


def _sizes(graphs):
    return sum(g.num_nodes for g in graphs), sum(int(g.edge_index.shape[1]) for g in graphs)


def _grads(model, loss):
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.autograd.grad(loss, params, allow_unused=True)


@pytest.mark.parametrize("kind", ["MACE", "ScaleShiftMACE"])
@pytest.mark.parametrize("system", ["molecules", "crystals"])
@pytest.mark.parametrize(
    "extra",
    [(1, 0, 1), (1, 9, 3), (6, 5, 2)],
    ids=["one-pad-node-no-pad-edge", "one-pad-node", "six-pad-nodes"],
)
def test_padded_equals_unpadded(kind, system, extra, models, request):
    from mace.modules.loss import WeightedEnergyForcesLoss, WeightedEnergyForcesStressLoss

    graphs = request.getfixturevalue(system)
    stress = system == "crystals"
    model = models[kind]
    n, e = _sizes(graphs)
    g = len(graphs)
    shape = (n + extra[0], e + extra[1], g + extra[2])
    batch = ga.mace(r_max=R_MAX).collate(graphs, shape)
    assert isinstance(batch, dict) and batch["positions"].shape == (shape[0], 3)
    out = model(batch, training=True, compute_stress=stress)
    ref = unpadded_batch(graphs)
    out_ref = model(ref, training=True, compute_stress=stress)
    assert (out["energy"][:g] - out_ref["energy"]).abs().max() <= TOL
    assert (out["forces"][:n] - out_ref["forces"]).abs().max() <= TOL
    assert torch.isfinite(out["forces"]).all() and torch.isfinite(out["energy"]).all()
    if stress:
        assert (out["stress"][:g] - out_ref["stress"]).abs().max() <= TOL
        assert torch.isfinite(out["stress"]).all()
        loss = ga.energy_force_stress_loss(
            out, batch, energy_weight=1.0, forces_weight=10.0, stress_weight=100.0
        )
        loss_ref = WeightedEnergyForcesStressLoss(1.0, 10.0, 100.0)(_Ref(ref), out_ref)
    else:
        loss = ga.energy_force_loss(out, batch, energy_weight=1.0, forces_weight=10.0)
        loss_ref = WeightedEnergyForcesLoss(1.0, 10.0)(_Ref(ref), out_ref)
    assert abs(loss.item() - loss_ref.item()) <= TOL * max(1.0, abs(loss_ref.item()))
    for gp, gr in zip(_grads(model, loss), _grads(model, loss_ref), strict=True):
        if gr is None:
            assert gp is None or (gp == 0).all()
            continue
        assert torch.isfinite(gp).all()
        assert (gp - gr).abs().max() <= TOL * max(1.0, gr.abs().max().item())


def test_default_zero_pads_break_mace_on_one_padding_node(crystals, models):
    """Why the preset exists: with the inferred schema's zero pads, a batch with one padding node
    has a zero-length padding self-loop and zero-volume padding cells, and MACE's stress path
    gives NaN parameter gradients even under the masked loss; the preset's pads do not."""
    graphs = crystals
    model = models["MACE"]
    n, e = _sizes(graphs)
    shape = (n + 1, e + 5, len(graphs) + 2)
    plain = gt.collate_dict(graphs, shape, position_key="positions", cutoff=R_MAX)
    out = model(plain, training=True, compute_stress=True)
    loss = ga.energy_force_stress_loss(out, plain)
    assert not all(torch.isfinite(gp).all() for gp in _grads(model, loss) if gp is not None)
    good = ga.mace(r_max=R_MAX).collate(graphs, shape)
    out = model(good, training=True, compute_stress=True)
    loss = ga.energy_force_stress_loss(out, good)
    assert all(torch.isfinite(gp).all() for gp in _grads(model, loss) if gp is not None)


def test_preset_padding_values(crystals):
    n, e = _sizes(crystals)
    g = len(crystals)
    b = ga.mace(r_max=R_MAX).collate(crystals, (n + 1, e + 4, g + 2))
    cells = b["cell"].view(-1, 3, 3)
    assert cells.shape[0] == g + 2
    assert torch.equal(cells[g:], (R_MAX * torch.eye(3, dtype=cells.dtype)).expand(2, 3, 3))
    assert torch.allclose(
        b["rcell"].view(-1, 3, 3)[g:], 2 * math.pi / R_MAX * torch.eye(3, dtype=cells.dtype)
    )
    assert (b["volume"][g:] == R_MAX**3).all()
    # every padding edge (here self-loops of the single padding node) is longer than r_max
    src, dst = b["edge_index"][:, e:]
    vec = b["positions"][dst] - b["positions"][src] + b["shifts"][e:]
    assert (vec.norm(dim=1) > R_MAX).all()
    assert torch.equal(
        b["shifts"][e:], torch.einsum("ej,ejk->ek", b["unit_shifts"][e:], cells[b["batch"][src]])
    )
    assert (b["weight"][g:] == 0).all() and (b["weight"][:g] == 1).all()


def test_collate_accepts_atomic_data(molecules):
    n, e = _sizes(molecules)
    g = len(molecules)
    schema = gt.infer_schema(molecules)
    assert schema["cell"].level == "graph" and schema["cell"].rows == 3
    assert schema["positions"].level == "node" and schema["shifts"].level == "edge"
    b = gt.collate(molecules, (n + 2, e + 3, g + 2), position_key="positions")
    assert b.num_graphs == g + 2 and b.cell.shape == ((g + 2) * 3, 3)
    ex = b.get_example(2)
    assert torch.equal(ex.positions, molecules[2].positions)
    assert torch.equal(ex.edge_index, molecules[2].edge_index)
    assert torch.equal(ex.cell, molecules[2].cell)


def test_loader_with_mace_preset(molecules, models):
    model = models["MACE"]
    loader = gt.loader(
        molecules, strategy="dynamic", batch_size=3, seed=0, preset=ga.mace(r_max=R_MAX)
    )
    assert loader.collater.position_key == "positions" and loader.collater.as_dict
    seen = []
    shapes = set()
    for batch in loader:
        shapes.add(tuple(batch["positions"].shape) + tuple(batch["edge_index"].shape))
        real = batch["graph_index"][batch["graph_mask"]].tolist()
        seen += real
        out = model(batch, training=True)
        ref = model(unpadded_batch([molecules[i] for i in real]), training=True)
        assert (out["energy"][: len(real)] - ref["energy"]).abs().max() <= TOL
        n_real = int(batch["node_mask"].sum())
        assert (out["forces"][:n_real] - ref["forces"]).abs().max() <= TOL
    assert sorted(seen) == list(range(len(molecules)))
    assert len(shapes) == 1  # a fixed-shape plan: one padded shape for the epoch


@pytest.mark.requires("h5py", "qm9pack")
def test_mace_graphs_view_of_a_graphbatch_store(models, tmp_path):
    """A graphbatch store of QM9 radius graphs built with MACE's cutoff, through
    `ga.MACEGraphs` and the loader, gives MACE's energies and forces on its own AtomicData
    (same positions, MACE's neighbour list)."""
    from mace.data import AtomicData, Configuration
    from mace.tools import torch_geometric

    from graphbatch.datasets import GraphStore, build_store

    from .._mace_graphs import ZS, _float64, z_table

    build_store("qm9", tmp_path / "qm9.h5", graph="radius", cutoff=R_MAX, limit=6)
    store = gt.GraphStoreDataset(GraphStore(tmp_path / "qm9.h5"))
    data = [store[i] for i in range(len(store))]
    view = ga.MACEGraphs(store, ZS, dtype=torch.float64, targets=lambda g: {"energy": g.y[0, 10]})
    assert view.graph_sizes().n_node.tolist() == [g.num_nodes for g in data]
    model = models["MACE"]
    loader = gt.loader(view, strategy="dynamic", batch_size=3, seed=1, preset=ga.mace(r_max=R_MAX))
    with _float64():
        for batch in loader:
            real = batch["graph_index"][batch["graph_mask"]].tolist()
            out = model(batch, training=False)
            atoms = []
            for i in real:
                g = data[i]
                conf = Configuration(
                    atomic_numbers=g.z.numpy().astype(int),
                    positions=g.pos.double().numpy(),
                    properties={},
                    property_weights={},
                    cell=None,
                    pbc=(False,) * 3,
                )
                atoms.append(AtomicData.from_config(conf, z_table(), R_MAX))
            ref_batch = torch_geometric.Batch.from_data_list(atoms)
            assert ref_batch.edge_index.shape[1] == int(batch["edge_mask"].sum())
            ref = model(ref_batch.to_dict(), training=False)
            assert (out["energy"][: len(real)] - ref["energy"]).abs().max() <= 1e-10
            n = int(batch["node_mask"].sum())
            assert (out["forces"][:n] - ref["forces"]).abs().max() <= 1e-10
            assert torch.equal(
                batch["energy"][: len(real)], torch.stack([data[i].y[0, 10].double() for i in real])
            )
    with pytest.raises(ValueError, match="atomic number 6 is not in atomic_numbers"):
        ga.MACEGraphs(data, [1, 7, 8])[0]
