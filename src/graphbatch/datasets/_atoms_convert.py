"""Atomistic frames -> graphs of the atomistic store schema (`convert_frames`).

A block of `AtomsFrame` records becomes one `AtomsChunk`: the labels are read frame by frame
(`graphbatch.datasets._atoms_labels`), the geometry and MACE's edge lists vectorised over the
block (`graphbatch.datasets._atoms_geometry`), and both assembled into `GraphArrays` with the
fields, dtypes and order of the schema (`graphbatch.datasets._atoms`). Errors name the first
bad frame of the block, and in it the first bad field in the order geometry (atoms, atomic
numbers, positions, cell, neighbour list), then labels (each property in use, its weight,
the config type, the configuration weight, the kept keys).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .._errors import AtomsInputError
from ._atoms import ATOMS_PROPERTIES, AtomsKeys
from ._atoms_geometry import BlockGeometry, block_geometry
from ._atoms_labels import BlockLabels, LabelsRefused, read_labels
from ._extxyz import AtomsFrame
from ._graphs import GraphArrays

__all__ = ["AtomsChunk", "convert_frames", "remap_codes"]


@dataclass
class AtomsChunk:
    """Converted frames: their graphs, with ``config_type``/``head`` codes indexing this chunk's
    own ``config_types``/``heads`` tables, and how many frames had each optional property."""

    graphs: GraphArrays
    config_types: list[str]
    heads: list[str]
    present: dict[str, int]


def _node_fields(geometry: BlockGeometry, labels: BlockLabels) -> dict[str, np.ndarray]:
    """The node fields of the schema in store order: positions, atomic numbers, the per-atom
    properties in use (`ATOMS_PROPERTIES` order), then the per-atom kept keys."""
    node = {
        "positions": geometry.positions,
        "atomic_numbers": geometry.numbers.astype(np.uint8),
    }
    for prop, values in labels.values.items():
        if ATOMS_PROPERTIES[prop][0] == "node":
            node[prop] = np.concatenate(values).astype(np.float64)
    for key, parts in labels.kept.items():
        if labels.kept_level[key] == "node":
            node[key] = np.concatenate(parts)
    return node


def _graph_fields(
    geometry: BlockGeometry, labels: BlockLabels, frames: Sequence[AtomsFrame], source: int
) -> dict[str, np.ndarray]:
    """The graph fields of the schema in store order: cell, pbc, the graph-level properties in
    use, ``weight``, each property's weight, head, config type, source, frame, then the
    graph-level kept keys."""
    graph = {"cell": geometry.cells, "pbc": geometry.pbcs}
    for prop, values in labels.values.items():
        if ATOMS_PROPERTIES[prop][0] == "graph":
            graph[prop] = np.stack(values).astype(np.float64)
    graph["weight"] = np.asarray(labels.weights, dtype=np.float64)
    for prop, weights in labels.property_weights.items():
        graph[f"{prop}_weight"] = np.asarray(weights, dtype=np.float64)
    graph["head"] = np.asarray(labels.head_codes, dtype=np.int16)
    graph["config_type"] = np.asarray(labels.config_type_codes, dtype=np.int32)
    graph["source"] = np.full(len(frames), int(source), dtype=np.int32)
    graph["frame"] = np.asarray([f.frame for f in frames], dtype=np.int64)
    for key, parts in labels.kept.items():
        if labels.kept_level[key] == "graph":
            graph[key] = np.concatenate(parts)
    return graph


def convert_frames(
    frames: Iterable[AtomsFrame], *, cutoff: float, keys: AtomsKeys, source: int, where: str
) -> AtomsChunk:
    """Convert the `AtomsFrame` records ``frames`` of input ``source`` (named ``where`` in
    errors) to one `AtomsChunk` of graphs with the store schema (`graphbatch.datasets._atoms`)
    and edges shorter than ``cutoff`` (Å), or raise `AtomsInputError` naming ``where``, the
    first bad frame and its first bad field (module docstring)."""
    frames = list(frames)
    if not frames:
        raise AtomsInputError(f"{where}: no frames")
    try:
        labels = read_labels(frames, keys, where)
    except LabelsRefused as refused:
        # the geometry of that frame and of the frames before it is checked first
        block_geometry(frames[: refused.position + 1], cutoff, where)
        raise refused.error from None
    geometry = block_geometry(frames, cutoff, where)
    graphs = GraphArrays(
        n_node=geometry.atom_counts,
        n_edge=geometry.edge_counts,
        edge_index=np.stack([geometry.senders, geometry.receivers]).astype(np.int32),
        node=_node_fields(geometry, labels),
        edge={"unit_shifts": geometry.unit_shifts.astype(np.int16)},
        graph=_graph_fields(geometry, labels, frames, source),
    )
    return AtomsChunk(graphs, labels.config_types.names, labels.heads.names, labels.present)


def remap_codes(codes: np.ndarray, local: Sequence[str], table: list[str]) -> np.ndarray:
    """``codes`` into ``local`` names as codes into the growing global ``table``."""
    index = {name: k for k, name in enumerate(table)}
    lut = np.empty(len(local), dtype=np.int64)
    for k, name in enumerate(local):
        if name not in index:
            index[name] = len(table)
            table.append(name)
        lut[k] = index[name]
    return lut[codes].astype(codes.dtype) if len(local) else codes
