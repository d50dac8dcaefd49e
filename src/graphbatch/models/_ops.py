"""Building blocks shared by the reference models: activations, radial bases, masked scatter.

Every function works on fixed-shape tensors (no data-dependent shapes, no ``.item()``), so the
models compile with ``torch.compile(dynamic=False, fullgraph=True)`` once per padded shape.
Edge convention (PyG's ``source_to_target``): ``edge_index[0]`` is the sender ``j``,
``edge_index[1]`` the receiver ``i``; messages flow ``j -> i``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .._errors import InputError

__all__ = [
    "LOG2",
    "RBF_MIN_EXPONENT",
    "GaussianRBF",
    "ShiftedSoftplus",
    "cosine_cutoff",
    "edge_vectors",
    "gather_rows",
    "masked_graph_sum",
    "pair_reverse_edges",
    "scatter_sum",
    "shifted_softplus",
]

LOG2 = math.log(2.0)
#: Exponents below this give Gaussian features of exactly 0 (``exp(-87) = 1.6e-38`` is the
#: smallest value kept: float32's smallest normal number is 1.18e-38).
RBF_MIN_EXPONENT = -87.0


def shifted_softplus(x: Tensor) -> Tensor:
    """``softplus(x) - log 2`` in the stable branch-free form of the IPU paper (eq. 2, 4.3.2).

    ``log(1 + exp(-|x|)) + max(x, 0) - log 2``; equals ``F.softplus(x) - log 2`` for all finite
    ``x`` without a threshold branch, and is 0 at ``x = 0``. Under ``torch.compile`` this form is
    fused into one loop; in eager mode, where each of its five operations would be a separate pass
    over memory, the same function is evaluated as ``F.softplus(x) - log 2`` (one kernel; equal up
    to float rounding, PyTorch's threshold branch returning ``x`` only where ``exp(-x) < 2e-9``).
    """
    if torch.compiler.is_compiling():
        return torch.log1p(torch.exp(-x.abs())) + x.clamp_min(0.0) - LOG2
    return F.softplus(x) - LOG2


class ShiftedSoftplus(nn.Module):
    """Module form of `shifted_softplus`."""

    def forward(self, x: Tensor) -> Tensor:
        return shifted_softplus(x)


class GaussianRBF(nn.Module):
    """``num`` Gaussians with centres evenly spaced on ``[start, stop]`` (Å); width = spacing.

    ``rbf_k(d) = exp(-0.5 / spacing**2 * (d - mu_k)**2)`` (SchNet's expansion), set to exactly 0
    where the exponent is below `RBF_MIN_EXPONENT`.

    Why the floor: float32 ``exp`` of exponents in (-103.3, -87.3) gives subnormal numbers
    (< 1.2e-38), and x86 CPUs take a microcode assist for every multiply that touches one. With
    spacing 0.25 Å a few of the 25 features of every edge fall there (centres 3.3-3.6 Å away), and
    the weight gradient of the first filter layer -- a matrix product over all edges of these
    features -- ran 20x slower than on normal numbers (measured: 126 ms instead of 6 ms per step
    at batch size 128 on 2 cores). The floor changes features by < 1.7e-38.
    """

    centres: Tensor

    def __init__(self, start: float = 0.0, stop: float = 6.0, num: int = 25) -> None:
        super().__init__()
        if num < 2:
            raise InputError(f"GaussianRBF needs num >= 2 centres, got {num}")
        if not stop > start:
            raise InputError(f"GaussianRBF needs stop > start, got start={start}, stop={stop}")
        centres = torch.linspace(start, stop, num)
        self.coeff = -0.5 / float(centres[1] - centres[0]) ** 2
        self.register_buffer("centres", centres, persistent=False)

    def forward(self, d: Tensor) -> Tensor:
        diff = d.unsqueeze(-1) - self.centres
        arg = self.coeff * diff * diff
        keep = arg > RBF_MIN_EXPONENT
        # clamp first so that exp never produces a subnormal, even in the discarded branch
        return torch.where(keep, torch.exp(arg.clamp_min(RBF_MIN_EXPONENT)), torch.zeros_like(arg))


def cosine_cutoff(d: Tensor, cutoff: float, edge_mask: Tensor) -> Tensor:
    """``0.5 (cos(pi d / cutoff) + 1)`` for real edges with ``d < cutoff``, else exactly 0.

    Padding edges (``edge_mask`` False) get weight 0, so they carry no message and no gradient,
    wherever the collation placed their nodes.
    """
    c = 0.5 * (torch.cos(d * (math.pi / cutoff)) + 1.0)
    keep = edge_mask & (d < cutoff)
    return torch.where(keep, c, torch.zeros_like(c))


def edge_vectors(pos: Tensor, edge_index: Tensor, edge_mask: Tensor) -> tuple[Tensor, Tensor]:
    """Per edge: vector ``pos[i] - pos[j]`` (receiver minus sender, Å) and its length.

    Padding edges get length 1 and a zero vector, so ``sqrt`` never sees 0 (its gradient there is
    infinite, and ``0 * inf`` would put NaN into the gradients of real parameters).
    """
    vec = gather_rows(pos, edge_index[1]) - gather_rows(pos, edge_index[0])
    vec = torch.where(edge_mask.unsqueeze(-1), vec, torch.zeros_like(vec))
    d2 = (vec * vec).sum(-1)
    d = torch.sqrt(torch.where(edge_mask, d2, torch.ones_like(d2)))
    return vec, d


# ---------------------------------------------------------------- gather / scatter
# Under torch.compile on CPU, Inductor turns index_add / index_select (and their gradients) into
# generated loops with atomic adds that ran slower than eager PyTorch (SchNet at batch size 128 on
# 2 cores: 207 ms per step compiled vs 184-209 ms eager). As opaque operators -- ATen's kernels,
# with each other as gradients -- the compiled step took 133 ms (benchmarks/RESULTS.md). Eager
# calls and CUDA tensors use the plain ATen calls (on CUDA Inductor's fused kernels are good).


@torch.library.custom_op("graphbatch::scatter_sum", mutates_args=())
def _scatter_sum_op(src: Tensor, index: Tensor, dim_size: int) -> Tensor:
    return src.new_zeros((dim_size, *src.shape[1:])).index_add_(0, index, src)


@torch.library.custom_op("graphbatch::gather_rows", mutates_args=())
def _gather_rows_op(x: Tensor, index: Tensor) -> Tensor:
    return x.index_select(0, index)


@_scatter_sum_op.register_fake
def _scatter_sum_fake(src: Tensor, index: Tensor, dim_size: int) -> Tensor:
    return src.new_empty((dim_size, *src.shape[1:]))


@_gather_rows_op.register_fake
def _gather_rows_fake(x: Tensor, index: Tensor) -> Tensor:
    return x.new_empty((index.shape[0], *x.shape[1:]))


def _scatter_setup(ctx: Any, inputs: tuple, output: Tensor) -> None:
    ctx.save_for_backward(inputs[1])


def _scatter_backward(ctx: Any, grad: Tensor) -> tuple:
    (index,) = ctx.saved_tensors
    return _gather_rows_op(grad, index), None, None


def _gather_setup(ctx: Any, inputs: tuple, output: Tensor) -> None:
    ctx.save_for_backward(inputs[1])
    ctx.rows = inputs[0].shape[0]


def _gather_backward(ctx: Any, grad: Tensor) -> tuple:
    (index,) = ctx.saved_tensors
    return _scatter_sum_op(grad, index, ctx.rows), None


_scatter_sum_op.register_autograd(_scatter_backward, setup_context=_scatter_setup)
_gather_rows_op.register_autograd(_gather_backward, setup_context=_gather_setup)


def _opaque(t: Tensor) -> bool:
    return torch.compiler.is_compiling() and t.device.type == "cpu"


def scatter_sum(src: Tensor, index: Tensor, dim_size: int) -> Tensor:
    """``out[index[k]] += src[k]`` along dim 0 with a static output length ``dim_size``."""
    if _opaque(src):
        return _scatter_sum_op(src, index, int(dim_size))
    out = src.new_zeros((dim_size, *src.shape[1:]))
    return out.index_add_(0, index, src)


def gather_rows(x: Tensor, index: Tensor) -> Tensor:
    """``x[index]`` along dim 0 (``x.index_select(0, index)``)."""
    if _opaque(x):
        return _gather_rows_op(x, index)
    return x.index_select(0, index)


def masked_graph_sum(x: Tensor, batch: Tensor, node_mask: Tensor, num_graphs: int) -> Tensor:
    """Sum of node values per graph, padding nodes excluded: ``[num_graphs, *x.shape[1:]]``."""
    mask = node_mask.view((-1,) + (1,) * (x.dim() - 1))
    return scatter_sum(torch.where(mask, x, torch.zeros_like(x)), batch, num_graphs)


def _capturing() -> bool:
    """Whether a CUDA graph is being captured on the current stream (the check above copies to
    the host, which a capture cannot hold; the eager warm-up steps before it still check)."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def pair_reverse_edges(
    edge_index: Tensor, edge_mask: Tensor, num_nodes: int
) -> tuple[Tensor, Tensor]:
    """Reorder edges so that each real edge ``j->i`` sits next to its reverse ``i->j``.

    Returns ``(edge_index, edge_mask)`` permuted (and extended by one padding edge when ``E`` is
    odd) so that edges ``2k`` and ``2k+1`` are reverses of each other for all real edges, and
    padding edges come last. Requires every real edge to have exactly one real reverse edge (true
    for radius and fully connected graphs, not for k-nearest-neighbour graphs); in eager mode a
    violation raises ``ValueError`` (not checked while compiling or capturing a CUDA graph).
    Cost: one sort of ``E`` integer keys.
    """
    src, dst = edge_index[0], edge_index[1]
    lo, hi = torch.minimum(src, dst), torch.maximum(src, dst)
    n = int(num_nodes)
    key = torch.where(edge_mask, lo * n + hi, torch.full_like(lo, n * n))
    perm = torch.argsort(key, stable=True)
    edge_index = edge_index.index_select(1, perm)
    edge_mask = edge_mask.index_select(0, perm)
    if edge_index.shape[1] % 2:
        edge_index = torch.cat([edge_index, edge_index.new_zeros((2, 1))], dim=1)
        edge_mask = torch.cat([edge_mask, edge_mask.new_zeros((1,))])
    if not torch.compiler.is_compiling() and not _capturing():
        a, b = edge_index[:, 0::2], edge_index[:, 1::2]
        real = edge_mask[0::2]
        reverse = (a[0] == b[1]) & (a[1] == b[0]) & (a[0] != a[1])
        if bool((real != edge_mask[1::2]).any()) or not bool((reverse | ~real).all()):
            raise InputError(
                "pair_edges=True needs every real edge j->i to come with exactly one real reverse "
                "edge i->j and no self loops (radius / fully connected graphs); this edge_index "
                "is not symmetric"
            )
    return edge_index, edge_mask
