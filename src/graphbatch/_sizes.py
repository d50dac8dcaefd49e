"""`GraphSizes`: the per-graph size table every planner reads (nodes, edges, optional bytes)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._errors import InputError
from ._io import atomic_savez, read_npz
from ._validate import MAX_COUNT, MAX_TOTAL, as_count_array, check_total

__all__ = ["GraphSizes", "SizeHistogram", "MAX_COUNT", "MAX_TOTAL"]


#: Largest key range `GraphSizes.histogram` counts densely (else it sorts).
_DENSE_HISTOGRAM = 1 << 24


@dataclass(frozen=True)
class SizeHistogram:
    """The (nodes, edges) -> count table of a dataset.

    ``n_node[k]``, ``n_edge[k]`` is the k-th distinct size pair (sorted by nodes, then edges) and
    ``count[k]`` how many graphs have it. ``inverse`` (when requested) maps each graph to its bin.
    """

    n_node: np.ndarray
    n_edge: np.ndarray
    count: np.ndarray
    inverse: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.count.shape[0])


class GraphSizes:
    """Sizes of ``N`` graphs: ``n_node[i]``, ``n_edge[i]`` (counts) and optional ``n_bytes[i]``.

    Invariants: 1-D int64 arrays of equal length ``N >= 1``, all values in ``[0, MAX_COUNT]``
    (2**36 per graph) with each column summing to at most ``MAX_TOTAL`` (2**53), and a graph
    with edges has at least one node. The limits keep every sum a planner forms far from int64
    overflow. Arrays are read-only views; the object is immutable.
    """

    __slots__ = ("n_node", "n_edge", "n_bytes")
    n_node: NDArray[np.int64]
    n_edge: NDArray[np.int64]
    n_bytes: NDArray[np.int64] | None

    def __init__(
        self,
        n_node: ArrayLike,
        n_edge: ArrayLike,
        n_bytes: ArrayLike | None = None,
    ) -> None:
        nn = as_count_array(n_node, "n_node")
        ne = as_count_array(n_edge, "n_edge")
        if nn.shape[0] != ne.shape[0]:
            raise InputError(
                f"n_node has {nn.shape[0]} entries but n_edge has {ne.shape[0]}; "
                "they must have one entry per graph"
            )
        if nn.shape[0] == 0:
            raise InputError("empty dataset: GraphSizes needs at least one graph")
        bad = (nn == 0) & (ne > 0)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(f"graph {i} has {ne[i]} edges but no nodes")
        nb = None
        if n_bytes is not None:
            nb = as_count_array(n_bytes, "n_bytes")
            if nb.shape[0] != nn.shape[0]:
                raise InputError(f"n_bytes has {nb.shape[0]} entries but n_node has {nn.shape[0]}")
        for name, arr in (("n_node", nn), ("n_edge", ne), ("n_bytes", nb)):
            if arr is not None:
                check_total(arr, name, MAX_TOTAL)
                arr = np.array(arr, dtype=np.int64, copy=True)
                arr.flags.writeable = False
            object.__setattr__(self, name, arr)

    def __setattr__(self, name: str, value: object) -> NoReturn:  # immutability
        raise AttributeError("GraphSizes is immutable")

    # pickle, copy and deepcopy rebuild through __init__ (validated)
    def __reduce__(
        self,
    ) -> tuple[type[GraphSizes], tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
        return (GraphSizes, (self.n_node, self.n_edge, self.n_bytes))

    def __len__(self) -> int:
        return int(self.n_node.shape[0])

    def __repr__(self) -> str:
        extra = ", n_bytes" if self.n_bytes is not None else ""
        return (
            f"GraphSizes(N={len(self)}, nodes={int(self.n_node.sum())}, "
            f"edges={int(self.n_edge.sum())}{extra})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GraphSizes):
            return NotImplemented
        a, b = self.n_bytes, other.n_bytes
        same_bytes = (a is None and b is None) or (
            a is not None and b is not None and np.array_equal(a, b)
        )
        return (
            np.array_equal(self.n_node, other.n_node)
            and np.array_equal(self.n_edge, other.n_edge)
            and same_bytes
        )

    __hash__ = None  # type: ignore[assignment]  # mutable-array contents: not hashable

    def subset(self, index: ArrayLike) -> GraphSizes:
        """The sizes of the graphs ``index`` (an int array or mask), in that order."""
        idx = np.asarray(index)
        return GraphSizes(
            self.n_node[idx],
            self.n_edge[idx],
            None if self.n_bytes is None else self.n_bytes[idx],
        )

    def histogram(self, return_inverse: bool = False) -> SizeHistogram:
        """The distinct (nodes, edges) pairs with their counts, sorted by nodes then edges.

        Counting in O(N) when ``(max nodes + 1) * (max edges + 1)`` is at most 2**24, else a
        sort; pairs whose combined key would overflow int64 are sorted as pairs."""
        n, e = self.n_node, self.n_edge
        max_e = int(e.max()) + 1
        span = (int(n.max()) + 1) * max_e  # Python int: no overflow
        if span <= _DENSE_HISTOGRAM:
            key = n * max_e + e
            counts = np.bincount(key, minlength=span)
            uniq = np.flatnonzero(counts)
            inverse = None
            if return_inverse:
                rank = np.zeros(span, np.int64)
                rank[uniq] = np.arange(uniq.shape[0])
                inverse = rank[key]
            return SizeHistogram(
                n_node=uniq // max_e,
                n_edge=uniq % max_e,
                count=counts[uniq].astype(np.int64),
                inverse=inverse,
            )
        if span < 2**63:
            key = n * max_e + e
            uniq, inverse, count = np.unique(key, return_inverse=True, return_counts=True)
            un, ue = uniq // max_e, uniq % max_e
        else:
            pairs, inverse, count = np.unique(
                np.stack([n, e], axis=1), axis=0, return_inverse=True, return_counts=True
            )
            un, ue = pairs[:, 0], pairs[:, 1]
        return SizeHistogram(
            n_node=un.astype(np.int64),
            n_edge=ue.astype(np.int64),
            count=count.astype(np.int64),
            inverse=inverse.astype(np.int64).reshape(-1) if return_inverse else None,
        )

    # ------------------------------------------------------------------ files
    def save(self, path: str | os.PathLike) -> Path:
        """Write an ``.npz`` with int64 keys ``n_node``, ``n_edge`` (and ``n_bytes``),
        atomically."""
        arrays = {"n_node": self.n_node, "n_edge": self.n_edge}
        if self.n_bytes is not None:
            arrays["n_bytes"] = self.n_bytes
        return atomic_savez(path, arrays)

    @classmethod
    def load(cls, path: str | os.PathLike) -> GraphSizes:
        """Read a size table written by :meth:`save` (or any ``.npz`` with those keys).

        Never unpickles: object arrays are refused.
        """

        def same(a: dict) -> int | None:
            return int(a["n_node"].shape[0]) if a["n_node"].ndim == 1 else None

        data = read_npz(
            path,
            "size table",
            ("n_node", "n_edge"),
            ("n_bytes",),
            lengths={"n_edge": same, "n_bytes": same},
        )
        return cls(data["n_node"], data["n_edge"], data.get("n_bytes"))
