"""Real and synthetic graph datasets, geometric graph construction, and the on-disk graph store.

Everything here is NumPy/SciPy (+ h5py for the store, RDKit for MOSES); the PyTorch view of a
store (`GraphStore.to_torch`, ``graphbatch.datasets._torch``) imports torch only when asked for.
"""

from ._atoms import ATOMS_PROPERTIES, AtomsInputError, AtomsKeys
from ._atoms_build import ATOMS_FORMATS, build_atoms_store
from ._build import DATASETS, BuildReport, build_store
from ._chunked import chunk_shuffled_plan, chunk_windows
from ._cluster import ENGINES, ShardBuildError, ShardedBuildReport, build_sharded_store
from ._code import AST_NODE_TYPES, CODE_EDGE_TYPES, code_graphs, function_graph, python_files
from ._construct import GRAPH_METHODS, EdgeSet, build_edges, full_edges, knn_edges, radius_edges
from ._convert import convert_store
from ._emt import EMT_ELEMENTS, emt_structures, write_emt_extxyz
from ._graphs import LEVELS, GraphArrays
from ._manifest import MANIFEST_FORMAT, MANIFEST_VERSION
from ._moses import MOSES_TRAIN_SIZE, load_moses_smiles, moses_graphs, moses_sizes, smiles_graphs
from ._neighbours import neighbour_list
from ._ogb import (
    ATOM_FEATURES,
    BOND_FEATURES,
    atom_feature_dims,
    bond_feature_dims,
    smiles_size,
    smiles_to_graph,
)
from ._qm9 import QM9_NUM_MOLECULES, QM9_TARGETS, QM9Molecules, load_qm9, qm9_graphs
from ._resources import package_data_path
from ._shards import ShardedGraphStore
from ._store import (
    STORE_FORMAT,
    STORE_VERSION,
    GraphStore,
    GraphStoreWriter,
    StoreFormatError,
    StoreFormatWarning,
    remove_stale_temporaries,
    write_store,
)
from ._synthetic import SIZE_DISTRIBUTIONS, synthetic_graphs, synthetic_sizes

__all__ = [
    "ATOMS_FORMATS",
    "ATOMS_PROPERTIES",
    "AtomsInputError",
    "AtomsKeys",
    "EMT_ELEMENTS",
    "build_atoms_store",
    "emt_structures",
    "neighbour_list",
    "write_emt_extxyz",
    "ATOM_FEATURES",
    "AST_NODE_TYPES",
    "BOND_FEATURES",
    "CODE_EDGE_TYPES",
    "DATASETS",
    "ENGINES",
    "MANIFEST_FORMAT",
    "MANIFEST_VERSION",
    "MOSES_TRAIN_SIZE",
    "SIZE_DISTRIBUTIONS",
    "BuildReport",
    "atom_feature_dims",
    "bond_feature_dims",
    "build_sharded_store",
    "build_store",
    "chunk_shuffled_plan",
    "chunk_windows",
    "convert_store",
    "remove_stale_temporaries",
    "code_graphs",
    "function_graph",
    "load_moses_smiles",
    "moses_graphs",
    "moses_sizes",
    "python_files",
    "smiles_graphs",
    "smiles_size",
    "smiles_to_graph",
    "synthetic_graphs",
    "synthetic_sizes",
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
    "ShardBuildError",
    "ShardedBuildReport",
    "ShardedGraphStore",
    "StoreFormatError",
    "StoreFormatWarning",
    "build_edges",
    "full_edges",
    "knn_edges",
    "load_qm9",
    "package_data_path",
    "qm9_graphs",
    "radius_edges",
    "write_store",
]
