"""Real and synthetic graph datasets, geometric graph construction, and the on-disk graph store.

Everything here is NumPy/SciPy (+ h5py for the store, RDKit for MOSES). Open a store of either
kind with `open_store`; its PyTorch view is `graphbatch.torch.GraphStoreDataset(store)`.
"""

from .._errors import AtomsInputError, BuildCancelled, ShardBuildError, StoreFormatError
from ._atoms import AtomsKeys
from ._atoms_build import build_atoms_store
from ._atoms_stats import AtomsStatistics, atoms_statistics
from ._build import BuildReport, build_store
from ._chunked import chunk_shuffled_plan
from ._cluster import ENGINES, ShardedBuildReport, build_sharded_store
from ._code import AST_NODE_TYPES, CODE_EDGE_TYPES, code_graphs, function_graph, python_files
from ._construct import EdgeSet, build_edges, full_edges, knn_edges, radius_edges
from ._convert import convert_store
from ._emt import emt_structures, write_emt_extxyz
from ._from_pyg import to_store
from ._graphs import GraphArrays
from ._header import STORE_FORMAT, STORE_VERSION
from ._moses import load_moses_smiles, moses_graphs, moses_sizes, smiles_graphs

# import_vesin: re-exported for the CLI (a redundant alias), not in __all__
from ._neighbours import import_vesin as import_vesin
from ._neighbours import neighbour_list
from ._ogb import ATOM_FEATURES, BOND_FEATURES, smiles_to_graph
from ._qm9 import QM9_NUM_MOLECULES, QM9_TARGETS, QM9Molecules, load_qm9, qm9_graphs
from ._shards import ShardedGraphStore
from ._smiles_csv import SmilesTable, load_smiles_csv
from ._store import GraphStore
from ._store_map import StoreFormatWarning
from ._store_open import open_store
from ._store_write import STORE_SUFFIXES, GraphStoreWriter, remove_stale_temporaries, write_store
from ._synthetic import SIZE_DISTRIBUTIONS, synthetic_graphs, synthetic_sizes

__all__ = [
    "AST_NODE_TYPES",
    "ATOM_FEATURES",
    "BOND_FEATURES",
    "CODE_EDGE_TYPES",
    "ENGINES",
    "QM9_NUM_MOLECULES",
    "QM9_TARGETS",
    "SIZE_DISTRIBUTIONS",
    "STORE_FORMAT",
    "STORE_SUFFIXES",
    "STORE_VERSION",
    "AtomsInputError",
    "AtomsKeys",
    "AtomsStatistics",
    "BuildCancelled",
    "BuildReport",
    "EdgeSet",
    "GraphArrays",
    "GraphStore",
    "GraphStoreWriter",
    "QM9Molecules",
    "ShardBuildError",
    "SmilesTable",
    "ShardedBuildReport",
    "ShardedGraphStore",
    "StoreFormatError",
    "StoreFormatWarning",
    "atoms_statistics",
    "build_atoms_store",
    "build_edges",
    "build_sharded_store",
    "build_store",
    "chunk_shuffled_plan",
    "code_graphs",
    "convert_store",
    "emt_structures",
    "full_edges",
    "function_graph",
    "knn_edges",
    "load_moses_smiles",
    "load_smiles_csv",
    "to_store",
    "load_qm9",
    "moses_graphs",
    "moses_sizes",
    "neighbour_list",
    "open_store",
    "python_files",
    "qm9_graphs",
    "radius_edges",
    "remove_stale_temporaries",
    "smiles_graphs",
    "smiles_to_graph",
    "synthetic_graphs",
    "synthetic_sizes",
    "write_emt_extxyz",
    "write_store",
]
