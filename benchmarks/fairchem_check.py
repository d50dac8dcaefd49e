"""Manual check of `graphbatch.atomistic.fairchem` with fairchem itself: padded == unpadded for a
small eSCN-MD backbone (otf_graph=False) with an energy/force/stress head, float32.

fairchem-core cannot share mace-torch's environment (e3nn 0.6 vs 0.4), so it runs in a separate
one:  python3 -m venv /tmp/fcvenv && /tmp/fcvenv/bin/pip install torch==2.13.0 fairchem-core
      PYTHONPATH=src /tmp/fcvenv/bin/python benchmarks/fairchem_check.py
Prints, per padded shape, the largest differences from fairchem's own unpadded batch
(``atomicdata_list_to_batch``), then loss and parameter gradients, then what happens with
plain zero pads (natoms/nedges padded with 0). Results: benchmarks/RESULTS.md (issue 19).
"""
import numpy as np, torch, ase
from ase.calculators.singlepoint import SinglePointCalculator
from fairchem.core.datasets.atomic_data import AtomicData, atomicdata_list_to_batch
from fairchem.core.models.uma.escn_md import eSCNMDBackbone, MLP_EFS_Head
import graphbatch.atomistic as ga
torch.manual_seed(0)
R = 3.0
rng = np.random.default_rng(0)
graphs = []
for i in range(4):
    k = int(rng.integers(3, 7))
    cell = np.diag(rng.uniform(3.4, 3.9, 3))
    a = ase.Atoms(numbers=rng.choice([1, 6, 8], k), scaled_positions=rng.uniform(0, 1, (k, 3)), cell=cell, pbc=True)
    a.calc = SinglePointCalculator(a, energy=float(rng.normal()), forces=rng.normal(size=(k, 3)), stress=rng.normal(size=6) * 0.01)
    g = AtomicData.from_ase(a, r_edges=False, sid=f"s{i}", task_name="omat")
    from ase.neighborlist import neighbor_list
    ii, jj, S = neighbor_list("ijS", a, R)
    g.edge_index = torch.tensor(np.stack([jj, ii]), dtype=torch.long)  # fairchem: (neighbour, centre)
    g.cell_offsets = torch.tensor(S, dtype=torch.float32)
    g.nedges = torch.tensor([len(ii)])
    graphs.append(g)
bb = eSCNMDBackbone(max_num_elements=10, sphere_channels=16, lmax=1, mmax=1, otf_graph=False, cutoff=R,
                    edge_channels=16, num_distance_basis=16, num_layers=1, hidden_channels=16,
                    direct_forces=False, regress_forces=True, regress_stress=True,
                    dataset_list=["omat"], use_dataset_embedding=False)
head = MLP_EFS_Head(bb, wrap_property=False)
def run(data):
    emb = bb(data)
    return head(data, emb)
n = sum(g.num_nodes for g in graphs); e = sum(g.num_edges for g in graphs); G = len(graphs)
ref_b = atomicdata_list_to_batch([g.clone() for g in graphs])
ref = run(ref_b)
pre = ga.fairchem(r_max=R)
for extra in [(1, 0, 1), (1, 7, 2), (5, 9, 3)]:
    shape = (n + extra[0], e + extra[1], G + extra[2])
    d = pre.collate([g.clone() for g in graphs], shape)
    out = run(ga.to_fairchem(d))
    dE = (out["energy"][:G] - ref["energy"]).abs().max().item()
    dF = (out["forces"][:n] - ref["forces"]).abs().max().item()
    dS = (out["stress"][:G] - ref["stress"]).abs().max().item()
    fin = all(torch.isfinite(out[k]).all().item() for k in ("energy", "forces", "stress"))
    print(f"shape {shape} pad nodes {shape[0]-n}: max|dE| {dE:.2e} max|dF| {dF:.2e} max|dS| {dS:.2e} finite {fin}  |E| {ref['energy'].abs().max().item():.3f} |F| {ref['forces'].abs().max().item():.3f}")
# loss and parameter gradients, padded (graphbatch loss) vs unpadded (same formula by hand)
params = [p for p in list(bb.parameters()) + list(head.parameters()) if p.requires_grad]
def ref_loss(b, o):
    na = b["natoms"].to(o["energy"].dtype)
    return (((b["energy"] - o["energy"]) / na) ** 2).mean() + ((b["forces"] - o["forces"]) ** 2).mean() \
        + ((b["stress"].reshape(o["stress"].shape) - o["stress"]) ** 2).mean()
ref_b = atomicdata_list_to_batch([g.clone() for g in graphs])
lr = ref_loss(ref_b, run(ref_b))
gr = torch.autograd.grad(lr, params, allow_unused=True)
for extra in [(1, 7, 2), (5, 9, 3)]:
    shape = (n + extra[0], e + extra[1], G + extra[2])
    d = pre.collate([g.clone() for g in graphs], shape)
    fd = ga.to_fairchem(d)
    o = run(fd)
    lp = ga.energy_force_stress_loss(o, d)
    gp = torch.autograd.grad(lp, params, allow_unused=True)
    worst = max(((a - b).abs().max() / b.abs().max().clamp(min=1e-12)).item() for a, b in zip(gp, gr) if b is not None)
    fin = all(torch.isfinite(a).all() for a in gp if a is not None)
    print(f"shape {shape}: loss {lp.item():.7f} vs unpadded {lr.item():.7f}; worst relative grad diff {worst:.2e}; grads finite {fin}")
# without the preset (zero pads, natoms/nedges padded with 0)
import graphbatch.torch as gt
shape = (n + 1, e + 7, G + 2)
d0 = gt.collate_dict([g.clone() for g in graphs], shape, schema=gt.infer_schema(graphs).with_pad(sid=[""]))
d0["sid"] = d0["sid"]
try:
    o0 = run(ga.to_fairchem(d0))
    print("zero pads: finite", all(torch.isfinite(o0[k]).all().item() for k in ("energy", "forces", "stress")))
except Exception as exc:
    print("zero pads:", type(exc).__name__, str(exc)[:160])
