"""Static batching: a fixed number of graphs per batch, padded to a constant, a multiple of K,
or a power of two (static-vs-dynamic paper, Section 4 and Algorithm 5)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._budget import round_up
from .._errors import InputError
from .._plan import BatchPlan
from .._validate import MAX_SHAPE, MAX_TOTAL, as_positive_int
from ._assemble import ceil_div, finish_fixed_count_plan, padded_shapes
from ._registry import PlanRequest, register

__all__ = ["plan_static_constant", "plan_static_multiple", "plan_static_pow2", "static_offsets"]


def static_offsets(num_graphs: int, batch_size: int) -> np.ndarray:
    """Boundaries of consecutive batches of ``batch_size - 1`` real graphs (the last may be
    short)."""
    per = batch_size - 1
    return np.append(np.arange(0, num_graphs, per, dtype=np.int64), np.int64(num_graphs))


#: Padded shapes of batches: ``(real nodes, real edges, batch size) -> (nodes, edges)``.
PadFn = Callable[[np.ndarray, np.ndarray, int], tuple[np.ndarray, np.ndarray]]


def _plan_static(req: PlanRequest, pad_fn: PadFn, **meta: Any) -> BatchPlan:
    bs = req.fixed_batch_size("derives padded shapes from batch contents")
    order = req.order()
    return finish_fixed_count_plan(
        req,
        order=order,
        offsets=static_offsets(order.shape[0], bs),
        batch_size=bs,
        pad_fn=lambda real_nodes, real_edges: pad_fn(real_nodes, real_edges, bs),
        lower_bound=ceil_div(order.shape[0], bs - 1),
        **meta,
    )


@register(
    "static-constant",
    description="TF-GNN style: batch_size-1 graphs per batch, one shape from the largest graph "
    "x batch_size (rounded up to `multiple`, default 64)",
    options=("multiple",),
    fixed_shape=True,
    uses_budget=False,
)
def plan_static_constant(req: PlanRequest) -> BatchPlan:
    multiple = as_positive_int(req.option("multiple", 64), "multiple", MAX_SHAPE)
    sizes = req.sizes

    def pad(
        real_nodes: np.ndarray, real_edges: np.ndarray, bs: int
    ) -> tuple[np.ndarray, np.ndarray]:
        for what, largest in (
            ("nodes", int(sizes.n_node.max())),
            ("edges", int(sizes.n_edge.max())),
        ):
            if largest * bs > MAX_TOTAL:
                raise InputError(
                    f"static-constant pads every batch to the largest graph's {largest} {what} x "
                    f"batch_size {bs}, over the limit {MAX_TOTAL} (2**53); use static-64"
                )
        t_v = round_up(int(sizes.n_node.max()) * bs, multiple)
        t_e = round_up(int(sizes.n_edge.max()) * bs, multiple)
        nb = real_nodes.shape[0]
        return np.full(nb, t_v, dtype=np.int64), np.full(nb, t_e, dtype=np.int64)

    return _plan_static(req, pad)


@register(
    "static-64",
    description="batch_size-1 graphs per batch, node/edge totals padded up to the next multiple "
    "of `multiple` (default 64), one node reserved for padding",
    options=("multiple",),
    uses_budget=False,
)
def plan_static_multiple(req: PlanRequest) -> BatchPlan:
    multiple = as_positive_int(req.option("multiple", 64), "multiple", MAX_SHAPE)

    def pad(
        real_nodes: np.ndarray, real_edges: np.ndarray, bs: int
    ) -> tuple[np.ndarray, np.ndarray]:
        return padded_shapes(real_nodes, real_edges, "static-64", multiple)

    return _plan_static(req, pad)


@register(
    "static-pow2",
    description="batch_size-1 graphs per batch, node/edge totals padded up to the next power of "
    "two (Algorithm 5), one node reserved for padding",
    uses_budget=False,
)
def plan_static_pow2(req: PlanRequest) -> BatchPlan:
    def pad(
        real_nodes: np.ndarray, real_edges: np.ndarray, bs: int
    ) -> tuple[np.ndarray, np.ndarray]:
        return padded_shapes(real_nodes, real_edges, "pow2")

    return _plan_static(req, pad)
