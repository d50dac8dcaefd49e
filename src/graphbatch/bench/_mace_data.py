"""The data of ``graphbatch bench --models mace``: `MaceData` (train/test MACE ``AtomicData``,
sizes, target scale and unit, ``avg_num_neighbors``, ``r_max``) from QM9 (`load_mace_data`) or
from an atomistic graph store (`load_mace_store_data`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import InputError
from ..recipes.mace import MACE_ELEMENTS

if TYPE_CHECKING:
    from .._sizes import GraphSizes

__all__ = ["MaceData", "load_mace_data", "load_mace_store_data"]


@dataclass
class MaceData:
    """Train/test lists of MACE ``AtomicData`` (float: torch's default dtype) and what the runs
    need: the training graphs' sizes (`GraphSizes`, for plans and budgets), the target scale
    and unit, ``avg_num_neighbors`` (edges per atom over the training graphs), ``r_max``."""

    train: list
    test: list
    train_sizes: GraphSizes
    scale: float
    unit: str
    num_graphs: int
    avg_num_neighbors: float
    r_max: float
    store: Any = None  # an atomistic store (``--store``): padded runs read it directly
    elements: tuple = MACE_ELEMENTS
    atomic_energies: Any = None  # per element (eV); None: zeros
    train_index: Any = None  # store indices of the training graphs


def load_mace_data(*, subset: int | None, r_max: float, seed: int) -> MaceData:
    """The bench split of the first ``subset`` QM9 molecules as MACE ``AtomicData`` built by
    MACE's own neighbour list at ``r_max`` Å (``AtomicData.from_config``)."""
    from mace.data import AtomicData, Configuration
    from mace.tools import AtomicNumberTable

    from .._sizes import GraphSizes
    from ._data import load_bench_arrays

    arrays = load_bench_arrays("qm9", subset=subset, cutoff=r_max, seed=seed)
    ga = arrays.graphs
    z = ga.node["z"].astype(np.int64)
    pos = np.asarray(ga.node["pos"], dtype=np.float64)
    no = ga.node_offsets
    table = AtomicNumberTable(list(MACE_ELEMENTS))

    def atomic(i: int):
        a, b = int(no[i]), int(no[i + 1])
        conf = Configuration(
            atomic_numbers=z[a:b],
            positions=pos[a:b],
            pbc=(False,) * 3,
            cell=None,
            properties={"energy": float(arrays.target[i]), "forces": np.zeros((b - a, 3))},
            property_weights={},
        )
        return AtomicData.from_config(conf, z_table=table, cutoff=float(r_max))

    train = [atomic(int(i)) for i in arrays.train_idx]
    test = [atomic(int(i)) for i in arrays.test_idx]
    n_node = np.array([int(d.positions.shape[0]) for d in train])
    n_edge = np.array([int(d.edge_index.shape[1]) for d in train])
    return MaceData(
        train,
        test,
        GraphSizes(n_node, n_edge),
        arrays.scale,
        arrays.unit,
        len(ga),
        float(n_edge.sum() / max(n_node.sum(), 1)),
        float(r_max),
    )


def _fit_atomic_energies(
    atomic_numbers: np.ndarray,
    node_offsets: np.ndarray,
    energy: np.ndarray,
    train_idx: np.ndarray,
    elements: tuple[int, ...],
) -> np.ndarray:
    """Per-element energies E0 (eV, in ``elements``' order): the least-squares fit of the
    training structures' energies to their element counts (as MACE's
    ``compute_average_E0s``)."""
    counts = np.zeros((len(train_idx), len(elements)))
    col = {z: k for k, z in enumerate(elements)}
    for r, i in enumerate(train_idx.tolist()):
        z = atomic_numbers[node_offsets[i] : node_offsets[i + 1]]
        for zz, c in zip(*np.unique(z, return_counts=True), strict=True):
            counts[r, col[int(zz)]] = c
    return np.linalg.lstsq(counts, energy[train_idx], rcond=None)[0]


def load_mace_store_data(
    path: str, *, subset: int | None, seed: int, test_fraction: float = 0.1
) -> MaceData:
    """The first ``subset`` structures of an atomistic store (``graphbatch data build
    extxyz``), split at random (``seed``): the padded runs read the training graphs from the
    store; MACE's baselines and the test set get MACE's own ``AtomicData.from_config`` of the
    same structures (its own neighbour list); ``r_max`` is the store's cutoff (so both train
    on the same edges). Targets: the stored energy (eV) and forces
    (eV/Å), atomic energies E0 fitted by least squares on the training energies (as MACE's
    ``compute_average_E0s``); elements: the store's."""
    from mace.data import AtomicData, Configuration
    from mace.tools import AtomicNumberTable

    from ..datasets import GraphStore

    store = GraphStore(path)
    missing = {"positions", "atomic_numbers", "cell", "pbc", "energy", "forces"} - set(store.fields)
    if missing:
        raise InputError(
            f"store {path!r} lacks the fields {sorted(missing)} MACE's bench needs "
            "(build it with `graphbatch data build extxyz FILE --cutoff R`)"
        )
    if "cutoff_angstrom" not in store.meta:
        raise InputError(f"store {path!r} does not state its cutoff (meta cutoff_angstrom)")
    r_max = float(store.meta["cutoff_angstrom"])
    g = len(store) if subset is None else min(int(subset), len(store))
    if g < 10:
        raise InputError(f"subset={subset} gives {g} structures; the bench needs >= 10")
    rng = np.random.default_rng(seed)
    order = rng.permutation(g)
    n_test = max(1, int(round(test_fraction * g)))
    test_idx, train_idx = np.sort(order[:n_test]), np.sort(order[n_test:])
    elements = tuple(int(z) for z in store.meta["elements"])
    table = AtomicNumberTable(list(elements))
    packed = store.packed()
    no = store.node_offsets
    energy = store.graph_field("energy")
    e0 = _fit_atomic_energies(packed.node["atomic_numbers"], no, energy, train_idx, elements)

    def atomic(i: int):
        a, b = int(no[i]), int(no[i + 1])
        conf = Configuration(
            atomic_numbers=packed.node["atomic_numbers"][a:b].astype(np.int64),
            positions=np.array(packed.node["positions"][a:b]),
            pbc=tuple(bool(p) for p in store.graph_field("pbc")[i]),
            cell=np.array(store.graph_field("cell")[i]),
            properties={"energy": float(energy[i]), "forces": np.array(packed.node["forces"][a:b])},
            property_weights={},
        )
        return AtomicData.from_config(conf, z_table=table, cutoff=float(r_max))

    train = [atomic(int(i)) for i in train_idx]
    test = [atomic(int(i)) for i in test_idx]
    sizes = store.graph_sizes().subset(train_idx)
    nn, ne = sizes.n_node, sizes.n_edge
    return MaceData(
        train,
        test,
        sizes,
        1.0,
        "eV",
        g,
        float(ne.sum() / max(nn.sum(), 1)),
        float(r_max),
        store=store,
        elements=elements,
        atomic_energies=e0,
        train_index=train_idx.astype(np.int64),
    )
