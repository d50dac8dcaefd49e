"""Real and synthetic graph datasets, geometric graph construction, and the on-disk graph store.

Everything here is NumPy/SciPy (+ h5py for the store, RDKit for MOSES); the PyTorch view of a
store (`GraphStore.to_torch`, ``graphbatch.datasets._torch``) imports torch only when asked for.
"""

from ._construct import GRAPH_METHODS, EdgeSet, build_edges, full_edges, knn_edges, radius_edges
from ._graphs import LEVELS, GraphArrays
from ._qm9 import QM9_NUM_MOLECULES, QM9_TARGETS, QM9Molecules, load_qm9, qm9_graphs
from ._resources import package_data_path
from ._store import (
    STORE_FORMAT,
    STORE_VERSION,
    GraphStore,
    GraphStoreWriter,
    StoreFormatError,
    write_store,
)

__all__ = [
    "GRAPH_METHODS",
    "LEVELS",
    "QM9_NUM_MOLECULES",
    "QM9_TARGETS",
    "STORE_FORMAT",
    "STORE_VERSION",
    "EdgeSet",
    "GraphArrays",
    "GraphStore",
    "GraphStoreWriter",
    "QM9Molecules",
    "StoreFormatError",
    "build_edges",
    "full_edges",
    "knn_edges",
    "load_qm9",
    "package_data_path",
    "qm9_graphs",
    "radius_edges",
    "write_store",
]
