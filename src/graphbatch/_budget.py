"""`Budget`: the padded shape of one batch, and its estimation from a batch size (Algorithm 1)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, overload

import numpy as np

from ._errors import InputError, InputTypeError
from ._sizes import GraphSizes
from ._validate import MAX_SHAPE, as_nonnegative_int, as_positive_int

__all__ = ["Budget", "estimate_budget", "round_up", "next_pow2"]


@overload
def round_up(x: int | np.integer, multiple: int) -> int: ...
@overload
def round_up(x: np.ndarray, multiple: int) -> np.ndarray: ...
def round_up(x: int | np.integer | np.ndarray, multiple: int) -> int | np.ndarray:
    """Smallest multiple of ``multiple`` that is >= ``max(x, 1)`` (scalar or int array)."""
    x = np.maximum(np.asarray(x, dtype=np.int64), 1)
    out = -(-x // multiple) * multiple
    return int(out) if out.ndim == 0 else out


@overload
def next_pow2(x: int | np.integer) -> int: ...
@overload
def next_pow2(x: np.ndarray) -> np.ndarray: ...
def next_pow2(x: int | np.integer | np.ndarray) -> int | np.ndarray:
    """Smallest power of two that is >= ``max(x, 1)`` (scalar or int array)."""
    x = np.maximum(np.asarray(x, dtype=np.int64), 1)
    # frexp(x - 1) returns the bit length of x - 1 as its exponent (exact below 2**53)
    _, bits = np.frexp((x - 1).astype(np.float64))
    out = np.left_shift(np.int64(1), bits.astype(np.int64))
    return int(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class Budget:
    """Padded shape of a batch: ``n_node`` nodes, ``n_edge`` edges, ``n_graph`` graphs.

    The shape includes the padding reservation (jraph's ``pad_with_graphs`` rule): every padded
    batch holds at least one padding graph owning at least one padding node, to which padding
    edges attach. Real content therefore fits when
    ``nodes <= n_node - 1``, ``edges <= n_edge`` and ``graphs <= n_graph - 1``. Each field is
    at most ``MAX_SHAPE`` (2**40).
    """

    n_node: int
    n_edge: int
    n_graph: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "n_node", as_positive_int(self.n_node, "Budget.n_node", MAX_SHAPE))
        object.__setattr__(
            self, "n_edge", as_nonnegative_int(self.n_edge, "Budget.n_edge", MAX_SHAPE)
        )
        n_graph = as_positive_int(self.n_graph, "Budget.n_graph", MAX_SHAPE)
        if n_graph < 2:
            raise InputError(
                f"Budget.n_graph = {n_graph} leaves no room for a real graph beside the padding "
                "graph; it must be >= 2"
            )
        object.__setattr__(self, "n_graph", n_graph)

    @classmethod
    def coerce(cls, value: Any) -> Budget:
        """A `Budget` from a `Budget`, a 3-sequence ``(n_node, n_edge, n_graph)`` or a mapping."""
        if isinstance(value, Budget):
            return value
        if isinstance(value, Mapping):
            fields = ("n_node", "n_edge", "n_graph")
            missing = [k for k in fields if k not in value]
            if missing:
                raise InputError(
                    f"budget {dict(value)!r} lacks {', '.join(missing)} (a budget mapping has "
                    "n_node, n_edge and n_graph)"
                )
            unknown = sorted(str(k) for k in value if k not in fields)
            if unknown:
                raise InputError(
                    f"budget {dict(value)!r} has unknown field(s) {', '.join(unknown)} (a budget "
                    "mapping has n_node, n_edge and n_graph)"
                )
            return cls(value["n_node"], value["n_edge"], value["n_graph"])
        try:
            n_node, n_edge, n_graph = value
        except (TypeError, ValueError):
            raise InputTypeError(
                f"budget must be a Budget or (n_node, n_edge, n_graph), got {value!r}"
            ) from None
        return cls(n_node, n_edge, n_graph)

    @property
    def node_capacity(self) -> int:
        """Real nodes that fit (one node is reserved for the padding graph)."""
        return self.n_node - 1

    @property
    def edge_capacity(self) -> int:
        """Real edges that fit."""
        return self.n_edge

    @property
    def graph_capacity(self) -> int:
        """Real graphs that fit (one graph is reserved for padding)."""
        return self.n_graph - 1

    def fits(self, nodes: int, edges: int, graphs: int = 1) -> bool:
        """Whether real content of that size fits in this shape with its reservation."""
        return (
            nodes <= self.node_capacity
            and edges <= self.edge_capacity
            and graphs <= self.graph_capacity
        )

    def as_tuple(self) -> tuple[int, int, int]:
        return (self.n_node, self.n_edge, self.n_graph)

    def __str__(self) -> str:
        return f"{self.n_node} nodes / {self.n_edge} edges / {self.n_graph} graphs"


def estimate_budget(
    sizes: GraphSizes,
    batch_size: int,
    *,
    rng: np.random.Generator,
    sample_size: int | None = 1000,
    multiple: int = 64,
) -> Budget:
    """Padding target from the mean graph size (the paper's Algorithm 1, as in Jraph/TF-GNN).

    Samples ``sample_size`` graphs uniformly without replacement (all graphs when ``None`` or
    larger than the dataset), takes mean nodes/edges per graph, multiplies by ``batch_size`` and
    rounds up to ``multiple`` (in integers: ``ceil(sum * batch_size / count)``, exact).
    ``n_graph = batch_size``: ``batch_size - 1`` real graphs plus one padding graph.
    """
    batch_size = as_positive_int(batch_size, "batch_size", MAX_SHAPE)
    if batch_size < 2:
        raise InputError(
            f"batch_size = {batch_size} leaves no room for the padding graph; it must be >= 2"
        )
    multiple = as_positive_int(multiple, "multiple", MAX_SHAPE)
    n = len(sizes)
    if sample_size is None or sample_size >= n:
        nodes, edges = sizes.n_node, sizes.n_edge
    else:
        k = as_positive_int(sample_size, "sample_size")
        pick = rng.choice(n, size=k, replace=False)
        nodes, edges = sizes.n_node[pick], sizes.n_edge[pick]
    count = int(nodes.shape[0])
    shape = []
    for what, col in (("nodes", nodes), ("edges", edges)):
        total_sum = int(col.sum(dtype=np.int64))  # column sums are <= 2**53: exact
        total = max(-(-total_sum * batch_size // count), 1)  # ceil(mean * batch_size)
        rounded = -(-total // multiple) * multiple  # Python ints: no overflow
        if rounded > MAX_SHAPE:
            raise InputError(
                f"batch_size = {batch_size} times the mean {total_sum / count:.6g} {what} per "
                f"graph, rounded to {multiple}, is {rounded}: over the padded-shape limit "
                f"{MAX_SHAPE} (2**40)"
            )
        shape.append(rounded)
    n_node, n_edge = shape
    return Budget(n_node, n_edge, batch_size)
