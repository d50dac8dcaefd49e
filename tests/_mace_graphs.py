"""Small MACE models and MACE ``AtomicData`` graphs (QM9 molecules, a periodic crystal) for the
atomistic tests. Needs ``mace-torch`` (the ``atomistic`` extra)."""

from __future__ import annotations

import numpy as np
import torch

R_MAX = 3.0
ZS = (1, 6, 7, 8, 9)


def z_table():
    from mace.tools import AtomicNumberTable

    return AtomicNumberTable(list(ZS))


def small_model(kind: str = "MACE", seed: int = 0):
    """A tiny float64 MACE / ScaleShiftMACE (8 channels, max_ell 1, 2 interactions).
    ``kind="compiled"`` builds the same MACE through `mace.tools.compile.prepare`."""
    from e3nn import o3
    from mace import modules

    torch.manual_seed(seed)
    kw = dict(
        r_max=R_MAX,
        num_bessel=4,
        num_polynomial_cutoff=5,
        max_ell=1,
        interaction_cls=modules.interaction_classes["RealAgnosticResidualInteractionBlock"],
        interaction_cls_first=modules.interaction_classes["RealAgnosticResidualInteractionBlock"],
        num_interactions=2,
        num_elements=len(ZS),
        hidden_irreps=o3.Irreps("8x0e + 8x1o"),
        MLP_irreps=o3.Irreps("8x0e"),
        atomic_energies=np.array([-0.5, -38.0, -54.6, -75.1, -99.7]),
        avg_num_neighbors=6.0,
        atomic_numbers=list(ZS),
        correlation=2,
        gate=torch.nn.functional.silu,
    )
    if kind == "ScaleShiftMACE":
        model = modules.ScaleShiftMACE(atomic_inter_scale=1.3, atomic_inter_shift=-0.4, **kw)
    elif kind == "compiled":
        from mace.tools.compile import prepare

        model = prepare(modules.MACE)(**kw)
    else:
        model = modules.MACE(**kw)
    return model.double()


def qm9_graphs(n: int, seed: int = 0) -> list:
    """The first ``n`` QM9 molecules as MACE ``AtomicData`` (cutoff `R_MAX`, float64), with
    random reference forces and energies from a fixed generator."""
    from mace.data import AtomicData, Configuration

    from graphbatch.datasets import load_qm9

    mols = load_qm9(limit=n)
    rng = np.random.default_rng(seed)
    ptr = np.concatenate([[0], np.cumsum(mols.n_node)])
    out = []
    with _float64():
        for i in range(n):
            z = mols.z[ptr[i] : ptr[i + 1]]
            conf = Configuration(
                atomic_numbers=z,
                positions=mols.pos[ptr[i] : ptr[i + 1]],
                properties={"energy": float(mols.y[i, 10]), "forces": rng.normal(size=(len(z), 3))},
                property_weights={},
                cell=None,
                pbc=(False,) * 3,
            )
            out.append(AtomicData.from_config(conf, z_table(), R_MAX))
    return out


def periodic_graphs(n: int, seed: int = 1) -> list:
    """``n`` small periodic cells (3-6 atoms in a slightly sheared ~3.6 Å box) with reference
    energy, forces and stress, as MACE ``AtomicData``."""
    from mace.data import AtomicData, Configuration

    rng = np.random.default_rng(seed)
    out = []
    with _float64():
        for _ in range(n):
            k = int(rng.integers(3, 7))
            cell = np.diag(rng.uniform(3.4, 3.9, size=3)) + rng.uniform(-0.2, 0.2, size=(3, 3))
            frac = rng.uniform(0, 1, size=(k, 3))
            conf = Configuration(
                atomic_numbers=rng.choice(ZS, size=k),
                positions=frac @ cell,
                properties={
                    "energy": float(rng.normal()),
                    "forces": rng.normal(size=(k, 3)),
                    "stress": rng.normal(size=6) * 0.01,
                },
                property_weights={},
                cell=cell,
                pbc=(True,) * 3,
            )
            out.append(AtomicData.from_config(conf, z_table(), R_MAX))
    return out


class _float64:
    def __enter__(self):
        self.old = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)

    def __exit__(self, *exc):
        torch.set_default_dtype(self.old)


def unpadded_batch(graphs):
    """MACE's own batch of ``graphs`` (its vendored PyG ``Batch``), as a dict."""
    from mace.tools import torch_geometric

    b = torch_geometric.Batch.from_data_list(graphs)
    return {k: v for k, v in b.to_dict().items()}
