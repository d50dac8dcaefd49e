"""`EdgeGraphs`: many small directed, typed graphs as concatenated NumPy arrays.

This is the input format of the low-bandwidth tools: graphs come in as
``(num_nodes, edge_index, edge_type)`` triples (PyG convention: ``edge_index[0]`` is the source
``j``, ``edge_index[1]`` the target ``i``; a message flows ``j -> i``), stored concatenated with
per-graph counts, the same layout an on-disk store uses. Node-level arrays (features, labels) ride
along in ``node_data`` so that a reordering permutes them together with the edges.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import NoReturn

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._errors import InputError, InputTypeError
from .._io import atomic_savez, open_regular, read_npz
from .._sizes import GraphSizes
from .._validate import as_count_array, as_positive_int

__all__ = ["EdgeGraphs"]

_NODE_PREFIX = "node__"


def _offsets(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def _frozen(arr: np.ndarray) -> np.ndarray:
    arr = np.array(arr, copy=True)
    arr.flags.writeable = False
    return arr


class EdgeGraphs:
    """``G`` graphs with ``n_node[g]`` nodes and ``n_edge[g]`` directed typed edges each.

    ``senders``/``receivers`` hold *local* node ids (``0 <= id < n_node[g]`` of the edge's own
    graph), graph after graph; ``edge_type`` is in ``[0, num_edge_types)``. ``node_data`` maps a
    name to an array whose first axis runs over all ``n_node.sum()`` nodes, graph after graph.
    Self loops, multi-edges and isolated nodes are allowed. Immutable; arrays are read-only.
    """

    __slots__ = (
        "n_node",
        "n_edge",
        "senders",
        "receivers",
        "edge_type",
        "num_edge_types",
        "node_data",
        "node_offsets",
        "edge_offsets",
    )
    n_node: NDArray[np.int64]
    n_edge: NDArray[np.int64]
    senders: NDArray[np.int64]
    receivers: NDArray[np.int64]
    edge_type: NDArray[np.int64]
    num_edge_types: int
    node_data: dict[str, np.ndarray]
    node_offsets: NDArray[np.int64]
    edge_offsets: NDArray[np.int64]

    def __init__(
        self,
        n_node: ArrayLike,
        n_edge: ArrayLike,
        senders: ArrayLike,
        receivers: ArrayLike,
        edge_type: ArrayLike | None = None,
        *,
        num_edge_types: int | None = None,
        node_data: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        nn = as_count_array(n_node, "n_node")
        ne = as_count_array(n_edge, "n_edge")
        if nn.shape != ne.shape:
            raise InputError(f"n_node has {nn.shape[0]} entries but n_edge has {ne.shape[0]}")
        s = as_count_array(senders, "senders")
        r = as_count_array(receivers, "receivers")
        e_total = int(ne.sum())
        if s.shape[0] != e_total or r.shape[0] != e_total:
            raise InputError(
                f"n_edge sums to {e_total} but senders has {s.shape[0]} and receivers "
                f"{r.shape[0]} entries"
            )
        t = (
            np.zeros(e_total, np.int64)
            if edge_type is None
            else as_count_array(edge_type, "edge_type")
        )
        if t.shape[0] != e_total:
            raise InputError(f"edge_type has {t.shape[0]} entries, expected {e_total}")
        max_t = int(t.max()) + 1 if e_total else 1
        if num_edge_types is None:
            num_edge_types = max_t
        num_edge_types = as_positive_int(num_edge_types, "num_edge_types")
        if max_t > num_edge_types:
            i = int(np.flatnonzero(t >= num_edge_types)[0])
            raise InputError(
                f"edge_type[{i}] = {t[i]} is not below num_edge_types = {num_edge_types}"
            )
        limit = np.repeat(nn, ne)  # each edge's own graph size
        for name, ids in (("senders", s), ("receivers", r)):
            bad = ids >= limit
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                g = int(np.searchsorted(_offsets(ne), i, side="right") - 1)
                raise InputError(
                    f"{name}[{i}] = {ids[i]} is not a node of graph {g}, which has "
                    f"{limit[i]} nodes (ids are local to each graph)"
                )
        n_total = int(nn.sum())
        data = {}
        for name, arr in (node_data or {}).items():
            arr = np.asarray(arr)
            if arr.ndim == 0 or arr.shape[0] != n_total:
                raise InputError(
                    f"node_data[{name!r}] has shape {arr.shape}; its first axis must "
                    f"run over all {n_total} nodes"
                )
            if arr.dtype == object:
                raise InputTypeError(f"node_data[{name!r}] is an object array; use numeric arrays")
            data[str(name)] = _frozen(arr)
        set_ = object.__setattr__
        set_(self, "n_node", _frozen(nn))
        set_(self, "n_edge", _frozen(ne))
        set_(self, "senders", _frozen(s))
        set_(self, "receivers", _frozen(r))
        set_(self, "edge_type", _frozen(t))
        set_(self, "num_edge_types", num_edge_types)
        set_(self, "node_data", data)
        set_(self, "node_offsets", _frozen(_offsets(nn)))
        set_(self, "edge_offsets", _frozen(_offsets(ne)))

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError("EdgeGraphs is immutable")

    # ------------------------------------------------------------- building
    @classmethod
    def from_graphs(
        cls,
        graphs: Iterable[tuple],
        *,
        num_edge_types: int | None = None,
    ) -> EdgeGraphs:
        """From ``(num_nodes, edge_index[2, E], edge_type[E] or None)`` triples, one per graph."""
        nn, ne, ss, rr, tt = [], [], [], [], []
        for k, item in enumerate(graphs):
            if len(item) == 2:
                n, ei = item
                et = None
            elif len(item) == 3:
                n, ei, et = item
            else:
                raise InputTypeError(
                    f"graph {k}: expected (num_nodes, edge_index[, edge_type]), "
                    f"got {len(item)} items"
                )
            ei = np.asarray(ei)
            if ei.size == 0:
                ei = np.zeros((2, 0), np.int64)
            elif ei.ndim != 2 or ei.shape[0] != 2:
                raise InputError(f"graph {k}: edge_index must have shape [2, E], got {ei.shape}")
            if ei.dtype.kind not in "iu":
                raise InputTypeError(f"graph {k}: edge_index must hold integers, got {ei.dtype}")
            nn.append(int(n))
            ne.append(ei.shape[1])
            ss.append(ei[0])
            rr.append(ei[1])
            tt.append(
                np.zeros(ei.shape[1], np.int64)
                if et is None
                else np.asarray(et, dtype=np.int64).reshape(-1)
            )
        if not nn:
            raise InputError("no graphs given")
        return cls(
            nn,
            ne,
            np.concatenate(ss),
            np.concatenate(rr),
            np.concatenate(tt),
            num_edge_types=num_edge_types,
        )

    @classmethod
    def concatenate(cls, parts: Iterable[EdgeGraphs]) -> EdgeGraphs:
        """The graphs of ``parts`` one after another (node data keys must agree)."""
        parts = list(parts)
        if not parts:
            raise InputError("nothing to concatenate")
        keys = set(parts[0].node_data)
        for i, p in enumerate(parts):
            if set(p.node_data) != keys:
                raise InputError(
                    f"part {i} has node data {sorted(p.node_data)}, part 0 has {sorted(keys)}"
                )
        return cls(
            np.concatenate([p.n_node for p in parts]),
            np.concatenate([p.n_edge for p in parts]),
            np.concatenate([p.senders for p in parts]),
            np.concatenate([p.receivers for p in parts]),
            np.concatenate([p.edge_type for p in parts]),
            num_edge_types=max(p.num_edge_types for p in parts),
            node_data={k: np.concatenate([p.node_data[k] for p in parts]) for k in keys},
        )

    # ------------------------------------------------------------- access
    def __len__(self) -> int:
        return int(self.n_node.shape[0])

    @property
    def num_nodes(self) -> int:
        """Total nodes over all graphs."""
        return int(self.node_offsets[-1])

    @property
    def num_edges(self) -> int:
        return int(self.edge_offsets[-1])

    def edge_graph(self) -> np.ndarray:
        """Graph id of every edge, int64 ``[E]``."""
        return np.repeat(np.arange(len(self), dtype=np.int64), self.n_edge)

    def node_graph(self) -> np.ndarray:
        """Graph id of every node, int64 ``[N]``."""
        return np.repeat(np.arange(len(self), dtype=np.int64), self.n_node)

    def graph(self, g: int) -> tuple[int, np.ndarray, np.ndarray]:
        """Graph ``g`` as ``(num_nodes, edge_index[2, E], edge_type[E])`` with local ids."""
        if not -len(self) <= g < len(self):
            raise IndexError(f"graph {g} out of range for {len(self)} graphs")
        g = g % len(self)
        a, b = self.edge_offsets[g], self.edge_offsets[g + 1]
        return (
            int(self.n_node[g]),
            np.stack([self.senders[a:b], self.receivers[a:b]]),
            self.edge_type[a:b].copy(),
        )

    def sizes(self) -> GraphSizes:
        """The size table the planners read."""
        return GraphSizes(self.n_node, self.n_edge)

    def global_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """``(senders, receivers)`` as ids into the concatenation of all nodes."""
        base = np.repeat(self.node_offsets[:-1], self.n_edge)
        return self.senders + base, self.receivers + base

    def subset(self, index: ArrayLike) -> EdgeGraphs:
        """The graphs ``index`` (int array or boolean mask), in that order, with their node data."""
        idx = np.asarray(index)
        if idx.dtype == bool:
            if idx.shape != (len(self),):
                raise InputError(f"mask has shape {idx.shape}, expected ({len(self)},)")
            idx = np.flatnonzero(idx)
        idx = idx.astype(np.int64, copy=False).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= len(self)):
            raise IndexError(f"graph index out of range for {len(self)} graphs")
        e_sel = _ranges(self.edge_offsets[idx], self.n_edge[idx])
        n_sel = _ranges(self.node_offsets[idx], self.n_node[idx])
        return EdgeGraphs(
            self.n_node[idx],
            self.n_edge[idx],
            self.senders[e_sel],
            self.receivers[e_sel],
            self.edge_type[e_sel],
            num_edge_types=self.num_edge_types,
            node_data={k: v[n_sel] for k, v in self.node_data.items()},
        )

    def replace(
        self,
        *,
        senders: ArrayLike | None = None,
        receivers: ArrayLike | None = None,
        edge_type: ArrayLike | None = None,
        node_data: Mapping[str, np.ndarray] | None = None,
    ) -> EdgeGraphs:
        """A copy with some edge arrays or the node data replaced (same counts)."""
        return EdgeGraphs(
            self.n_node,
            self.n_edge,
            self.senders if senders is None else senders,
            self.receivers if receivers is None else receivers,
            self.edge_type if edge_type is None else edge_type,
            num_edge_types=self.num_edge_types,
            node_data=self.node_data if node_data is None else node_data,
        )

    def __repr__(self) -> str:
        extra = f", node_data={sorted(self.node_data)}" if self.node_data else ""
        return (
            f"EdgeGraphs(G={len(self)}, nodes={self.num_nodes}, edges={self.num_edges}, "
            f"edge_types={self.num_edge_types}{extra})"
        )

    # ------------------------------------------------------------- files
    def save(self, path: str | os.PathLike) -> Path:
        """Write an ``.npz`` (no pickle): ``n_node, n_edge, senders, receivers, edge_type,
        num_edge_types`` and ``node__<name>`` per node array."""
        arrays: dict[str, np.ndarray] = {
            "n_node": self.n_node,
            "n_edge": self.n_edge,
            "senders": self.senders,
            "receivers": self.receivers,
            "edge_type": self.edge_type,
            "num_edge_types": np.array(self.num_edge_types, dtype=np.int64),
        }
        arrays.update({_NODE_PREFIX + k: v for k, v in self.node_data.items()})
        return atomic_savez(path, arrays)

    @classmethod
    def load(cls, path: str | os.PathLike) -> EdgeGraphs:
        """Read a file written by :meth:`save`; a size table without edges gives a clear error."""
        path = Path(path)
        try:
            with open_regular(path, "graph file") as fh, zipfile.ZipFile(fh) as zf:
                names = [n[:-4] for n in zf.namelist() if n.endswith(".npy")]
        except (OSError, EOFError, zipfile.BadZipFile) as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            raise InputError(f"cannot read graph file {str(path)!r}: {exc}") from exc
        need = ("n_node", "n_edge", "senders", "receivers")
        missing = [k for k in need if k not in names]
        if missing:
            raise InputError(
                f"{str(path)!r} lacks {', '.join(missing)}: it is not an EdgeGraphs file "
                "(a size table has no edges, so no bandwidth can be computed from it)"
            )

        def graphs(a: dict) -> int | None:
            return int(a["n_node"].shape[0]) if a["n_node"].ndim == 1 else None

        def total(key: str) -> Callable[[dict], int | None]:
            def length(a: dict) -> int | None:
                v = a[key]
                if v.ndim != 1 or v.dtype.kind not in "iu" or (v.size and v.min() < 0):
                    return None  # refused by the constructor's checks
                return int(v.sum(dtype=np.uint64)) if v.size else 0

            return length

        node_keys = tuple(k for k in names if k.startswith(_NODE_PREFIX))
        data = read_npz(
            path,
            "graph file",
            need,
            ("edge_type", "num_edge_types", *node_keys),
            lengths={
                "n_edge": graphs,
                "senders": total("n_edge"),
                "receivers": total("n_edge"),
                "edge_type": total("n_edge"),
                **{k: total("n_node") for k in node_keys},
            },
            max_bytes={"num_edge_types": 8},
        )
        return cls(
            data["n_node"],
            data["n_edge"],
            data["senders"],
            data["receivers"],
            data.get("edge_type"),
            num_edge_types=int(data["num_edge_types"]) if "num_edge_types" in data else None,
            node_data={k[len(_NODE_PREFIX) :]: data[k] for k in node_keys},
        )


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + l)`` for each pair, vectorised."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    ends = np.cumsum(lengths)
    shift = np.repeat(np.asarray(starts, np.int64) - (ends - lengths), lengths)
    return np.arange(total, dtype=np.int64) + shift
