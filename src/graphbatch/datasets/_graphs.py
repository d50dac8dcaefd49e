"""`GraphArrays`: many graphs as concatenated node/edge/graph arrays with per-graph counts.

This is the in-memory form every dataset builder yields (in chunks) and the store writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from .._errors import InputError, InputTypeError
from .._sizes import GraphSizes
from .._validate import as_count_array

__all__ = ["GraphArrays", "LEVELS"]

#: The three levels a field can live on; the first dimension of its array counts these.
LEVELS = ("node", "edge", "graph")


def _offsets(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


@dataclass(frozen=True)
class GraphArrays:
    """``G`` graphs stored back to back.

    ``n_node[g]``, ``n_edge[g]``: counts. ``edge_index``: int ``[2, sum(n_edge)]`` with *local*
    node indices (0-based within each graph; row 0 = source, row 1 = target), the edges of graph
    ``g`` forming the ``g``-th contiguous block. ``node``/``edge``/``graph``: named arrays whose
    first dimension is ``sum(n_node)``, ``sum(n_edge)`` and ``G``. Field names are unique across
    the three levels and never ``edge_index``.
    """

    n_node: np.ndarray
    n_edge: np.ndarray
    edge_index: np.ndarray
    node: dict = field(default_factory=dict)
    edge: dict = field(default_factory=dict)
    graph: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        nn = as_count_array(self.n_node, "n_node")
        ne = as_count_array(self.n_edge, "n_edge")
        if nn.shape != ne.shape:
            raise InputError(f"n_node has {nn.shape[0]} entries but n_edge has {ne.shape[0]}")
        ei = np.asarray(self.edge_index)
        if ei.ndim != 2 or ei.shape[0] != 2 or ei.dtype.kind not in "iu":
            raise InputError(
                f"edge_index must be an int array of shape [2, E], got {ei.dtype} {ei.shape}"
            )
        if ei.shape[1] != int(ne.sum()):
            raise InputError(f"edge_index has {ei.shape[1]} edges but n_edge sums to {ne.sum()}")
        if ei.size:
            limit = np.repeat(nn, ne)
            bad = (ei < 0).any(axis=0) | (ei >= limit).any(axis=0)
            if bad.any():
                e = int(np.flatnonzero(bad)[0])
                raise InputError(
                    f"edge {e} = {ei[:, e].tolist()} is outside its graph "
                    f"of {limit[e]} nodes (indices are local)"
                )
        object.__setattr__(self, "n_node", nn)
        object.__setattr__(self, "n_edge", ne)
        object.__setattr__(self, "edge_index", ei)
        expected = {"node": int(nn.sum()), "edge": int(ne.sum()), "graph": int(nn.shape[0])}
        seen: set[str] = set()
        for level in LEVELS:
            fields = {k: np.asarray(v) for k, v in getattr(self, level).items()}
            for name, arr in fields.items():
                if name == "edge_index" or name in seen:
                    raise InputError(f"field name {name!r} is reserved or used twice")
                seen.add(name)
                if arr.ndim == 0 or arr.shape[0] != expected[level]:
                    raise InputError(
                        f"{level} field {name!r} has shape {arr.shape}; its first "
                        f"dimension must be {expected[level]}"
                    )
                if arr.dtype.kind not in "biuf":
                    raise InputTypeError(
                        f"field {name!r} has dtype {arr.dtype}; only bool, int and "
                        "float arrays are supported"
                    )
            object.__setattr__(self, level, fields)

    # ----------------------------------------------------------------- views
    def __len__(self) -> int:
        return int(self.n_node.shape[0])

    @property
    def node_offsets(self) -> np.ndarray:
        """int64 ``[G + 1]``: graph ``g``'s nodes are rows ``node_offsets[g]:node_offsets[g+1]``."""
        return _offsets(self.n_node)

    @property
    def edge_offsets(self) -> np.ndarray:
        """int64 ``[G + 1]``: graph ``g``'s edges are columns
        ``edge_offsets[g]:edge_offsets[g+1]``."""
        return _offsets(self.n_edge)

    def sizes(self) -> GraphSizes:
        """The (n_node, n_edge) size table of these graphs."""
        return GraphSizes(self.n_node, self.n_edge)

    def fields(self) -> dict[str, str]:
        """``{field name: level}`` for every stored field (``edge_index`` excluded)."""
        return {k: level for level in LEVELS for k in getattr(self, level)}

    def graph_dict(self, g: int) -> dict[str, np.ndarray]:
        """Graph ``g`` as ``{name: array}``: ``edge_index [2, E]`` local, node and edge fields
        sliced, graph fields with a leading dimension of 1 (PyG's convention for ``y``)."""
        g = int(g)
        if not -len(self) <= g < len(self):
            raise IndexError(f"graph index {g} out of range for {len(self)} graphs")
        g %= len(self)
        no, eo = self.node_offsets, self.edge_offsets
        out = {"edge_index": self.edge_index[:, eo[g] : eo[g + 1]]}
        out.update({k: v[no[g] : no[g + 1]] for k, v in self.node.items()})
        out.update({k: v[eo[g] : eo[g + 1]] for k, v in self.edge.items()})
        out.update({k: v[g : g + 1] for k, v in self.graph.items()})
        return out

    def take(self, index: ArrayLike) -> GraphArrays:
        """The graphs ``index`` (int array), in that order, as a new `GraphArrays`."""
        idx = np.asarray(index, dtype=np.int64).reshape(-1)
        no, eo = self.node_offsets, self.edge_offsets
        node_rows = _ranges(no[idx], self.n_node[idx])
        edge_rows = _ranges(eo[idx], self.n_edge[idx])
        return GraphArrays(
            n_node=self.n_node[idx],
            n_edge=self.n_edge[idx],
            edge_index=self.edge_index[:, edge_rows],
            node={k: v[node_rows] for k, v in self.node.items()},
            edge={k: v[edge_rows] for k, v in self.edge.items()},
            graph={k: v[idx] for k, v in self.graph.items()},
        )

    @staticmethod
    def concat(parts: list[GraphArrays]) -> GraphArrays:
        """Concatenate graph collections with identical fields (dtype of the first part)."""
        if not parts:
            raise InputError("concat needs at least one GraphArrays")
        first = parts[0]
        for p in parts[1:]:
            if p.fields() != first.fields():
                raise InputError(f"cannot concat: fields {p.fields()} differ from {first.fields()}")

        def cat(level: str, name: str) -> np.ndarray:
            return np.concatenate([getattr(p, level)[name] for p in parts], axis=0)

        return GraphArrays(
            n_node=np.concatenate([p.n_node for p in parts]),
            n_edge=np.concatenate([p.n_edge for p in parts]),
            edge_index=np.concatenate([p.edge_index for p in parts], axis=1),
            **{level: {k: cat(level, k) for k in getattr(first, level)} for level in LEVELS},
        )


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + n)`` for each (s, n), vectorised."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    block = np.repeat(np.arange(lengths.shape[0]), lengths)
    first = np.zeros(lengths.shape[0], dtype=np.int64)
    np.cumsum(lengths[:-1], out=first[1:])
    return starts[block] + np.arange(total) - first[block]
