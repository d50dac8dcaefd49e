"""Benchmark data: a QM9 subset from `graphbatch.datasets` as PyG ``Data``, split and scaled."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import InputError

if TYPE_CHECKING:
    from .._sizes import GraphSizes
    from ..datasets import GraphArrays

__all__ = [
    "BenchArrays",
    "BenchData",
    "load_bench_arrays",
    "load_bench_data",
    "load_store_data",
    "TARGET",
]

#: The regression target (the paper's QM9 target: internal energy at 0 K).
TARGET = "U0"


@dataclass
class BenchData:
    """Train/test lists of PyG ``Data`` (fields ``z``, ``pos``, ``edge_index``, ``y``).

    ``y`` is the standardised residual of ``TARGET`` after a per-element linear baseline fitted
    on the training graphs (atom reference energies): ``y = (U0 - counts @ ref) / scale``;
    errors are reported back in the target's unit (``unit``) by multiplying with ``scale``.
    """

    train: list
    test: list
    train_sizes: GraphSizes
    scale: float
    unit: str
    num_graphs: int
    #: ``--data store``: the open GraphStore, the store indices of the training graphs (the
    #: plan's index i is store graph ``train_index[i]``) and the target of every store graph
    store: Any = None
    train_index: Any = None
    target: Any = None


def _element_counts(z: np.ndarray, n_node: np.ndarray) -> np.ndarray:
    graph = np.repeat(np.arange(n_node.shape[0]), n_node)
    counts = np.zeros((n_node.shape[0], 128))
    np.add.at(counts, (graph, z.astype(np.int64)), 1.0)
    return counts


def _split_and_standardise(
    z: np.ndarray, n_node: np.ndarray, y: np.ndarray, test_fraction: float, seed: int
):
    """Random train/test split (``seed``) and the target as the standardised residual of a
    per-element linear baseline fitted on the training graphs: ``(train_idx, test_idx,
    target, scale)`` (indices sorted, int64)."""
    g = n_node.shape[0]
    perm = np.random.default_rng(seed).permutation(g)
    n_test = max(1, int(round(g * test_fraction)))
    test_idx, train_idx = np.sort(perm[:n_test]), np.sort(perm[n_test:])
    counts = _element_counts(z, n_node)
    ref, *_ = np.linalg.lstsq(counts[train_idx], y[train_idx], rcond=None)
    resid = y - counts @ ref
    scale = float(resid[train_idx].std()) or 1.0
    return train_idx, test_idx, resid / scale, scale


@dataclass
class BenchArrays:
    """The bench split as NumPy: all graphs (``graphs``, a `GraphArrays`), the standardised
    target per graph, train/test indices, the target scale and unit (framework-neutral)."""

    graphs: GraphArrays
    target: np.ndarray
    train_idx: np.ndarray
    test_idx: np.ndarray
    scale: float
    unit: str


def load_bench_arrays(
    dataset: str = "qm9",
    *,
    subset: int | None = 2000,
    test_fraction: float = 0.1,
    cutoff: float = 6.0,
    seed: int = 0,
) -> BenchArrays:
    """The first ``subset`` QM9 molecules (all with ``None``) as radius-``cutoff`` graphs (Å),
    split at random (``seed``) into train and test, target as in `BenchData`. NumPy only."""
    if dataset != "qm9":
        raise InputError(f"unknown bench dataset {dataset!r}; available: qm9")
    if not 0.0 < test_fraction < 1.0:
        raise InputError(f"test_fraction must be in (0, 1), got {test_fraction}")
    from ..datasets import QM9_TARGETS, GraphArrays, qm9_graphs

    ga = GraphArrays.concat(list(qm9_graphs("radius", cutoff=cutoff, limit=subset)))
    g = len(ga)
    if g < 10:
        raise InputError(f"subset={subset} gives {g} molecules; the bench needs >= 10")
    names = [t[0] for t in QM9_TARGETS]
    col = names.index(TARGET)
    unit = QM9_TARGETS[col][2]
    y = ga.graph["y"][:, col].astype(np.float64)
    z = ga.node["z"].astype(np.int64)
    train_idx, test_idx, target, scale = _split_and_standardise(
        z, ga.n_node, y, test_fraction, seed
    )
    return BenchArrays(ga, target, train_idx, test_idx, scale, unit)


def load_bench_data(
    dataset: str = "qm9",
    *,
    subset: int | None = 2000,
    test_fraction: float = 0.1,
    cutoff: float = 6.0,
    seed: int = 0,
) -> BenchData:
    """`load_bench_arrays` as PyG ``Data`` lists."""
    import torch
    from torch_geometric.data import Data

    arrays = load_bench_arrays(
        dataset, subset=subset, test_fraction=test_fraction, cutoff=cutoff, seed=seed
    )
    ga, target, train_idx, test_idx = (
        arrays.graphs,
        arrays.target,
        arrays.train_idx,
        arrays.test_idx,
    )
    z = ga.node["z"].astype(np.int64)
    no, eo = ga.node_offsets, ga.edge_offsets
    zt = torch.from_numpy(z)
    pos = torch.from_numpy(np.ascontiguousarray(ga.node["pos"], dtype=np.float32))
    ei = torch.from_numpy(ga.edge_index.astype(np.int64))
    yt = torch.from_numpy(target.astype(np.float32))

    def data(i: int):
        a, b, c, d = int(no[i]), int(no[i + 1]), int(eo[i]), int(eo[i + 1])
        return Data(
            z=zt[a:b],
            pos=pos[a:b],
            edge_index=ei[:, c:d].contiguous(),
            y=yt[i : i + 1],
            num_nodes=b - a,
        )

    train = [data(int(i)) for i in train_idx]
    test = [data(int(i)) for i in test_idx]
    return BenchData(train, test, ga.sizes().subset(train_idx), arrays.scale, arrays.unit, len(ga))


def load_store_data(
    path: str, *, subset: int | None = None, test_fraction: float = 0.1, seed: int = 0
) -> BenchData:
    """`BenchData` read from a QM9 graph store (``graphbatch data build qm9``): the first
    ``subset`` graphs (all with ``None``), split at random (``seed``). Training batches are read
    by the store batch path (``data.store``, ``data.train_index``, ``data.target``); only the
    test graphs are materialised as ``Data``. Targets as in `load_bench_data`."""
    if not 0.0 < test_fraction < 1.0:
        raise InputError(f"test_fraction must be in (0, 1), got {test_fraction}")
    import torch

    from ..datasets import QM9_TARGETS, GraphStore
    from ..torch import GraphStoreDataset

    store = GraphStore(path)
    missing = {"z", "pos", "y"} - set(store.fields)
    if missing:
        raise InputError(
            f"store {path!r} lacks the QM9 fields {sorted(missing)} the bench needs "
            "(build it with `graphbatch data build qm9`)"
        )
    g = len(store) if subset is None else min(int(subset), len(store))
    if g < 10:
        raise InputError(f"subset={subset} gives {g} graphs; the bench needs >= 10")
    names = [t[0] for t in QM9_TARGETS]
    col = names.index(TARGET)
    unit = QM9_TARGETS[col][2]
    y = np.asarray(store.graph_field("y")[:g, col], dtype=np.float64)
    n_node = store.n_node[:g]
    z = np.asarray(store.packed().node["z"][: int(store.node_offsets[g])], dtype=np.int64)
    train_idx, test_idx, resid, scale = _split_and_standardise(z, n_node, y, test_fraction, seed)
    target = torch.from_numpy(resid.astype(np.float32))
    ds = GraphStoreDataset(store)
    test = []
    for i in test_idx.tolist():
        d = ds[i]
        test.append(
            type(d)(
                z=d.z,
                pos=d.pos,
                edge_index=d.edge_index,
                y=target[i : i + 1],
                num_nodes=d.num_nodes,
            )
        )
    return BenchData(
        train=[],
        test=test,
        train_sizes=store.graph_sizes().subset(train_idx),
        scale=scale,
        unit=unit,
        num_graphs=g,
        store=store,
        train_index=train_idx.astype(np.int64),
        target=target,
    )
