"""Message aggregation in PyTorch: dense band blocks (the paper's Algorithm 1) and scatter-add.

Both backends compute the same *pre-messages*: for every receiving node ``i`` and edge type
``p`` the sum of the embeddings of the senders of its type-``p`` edges,
``pre[i, p, :] = sum_{j -> i of type p} E[j, :]``, laid out ``[N, P·H]`` so that one matmul with
the stacked edge weights ``W [P·H, H]`` gives the incoming messages. Importing this module
imports torch (it is reached only through ``graphbatch.lowband.nn``).
"""

from __future__ import annotations

import numpy as np
import torch
from numpy.typing import ArrayLike

from .._errors import InputError
from ._graphs import EdgeGraphs
from ._supergraph import BLOCK_C, BLOCK_L, BLOCK_U, Supergraph

__all__ = ["BandPropagation", "ScatterPropagation", "band_blocks", "band_premessages"]


def band_blocks(
    sg: Supergraph,
    num_edge_types: int | None = None,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Dense blocks ``C [K, S·P, S]``, ``U [K-1, S·P, S]``, ``L [K-1, S·P, S]`` of a supergraph.

    Row ``s·P + p`` of block ``k`` is receiver slot ``k·S + s`` and edge type ``p``; column ``t``
    is the sender's slot within the block itself (``C``), the next block (``U[k]``, feeding row
    block ``k`` from block ``k+1``) or the previous block (``L[k]``, feeding row block ``k+1``
    from block ``k``). Entries count edges (multi-edges add up). This row layout makes the
    reshape ``[K, S·P, H] -> [K, S, P·H]`` of Algorithm 1 free (no transpose).
    """
    p = sg.num_edge_types if num_edge_types is None else int(num_edge_types)
    if p < sg.num_edge_types:
        raise InputError(f"num_edge_types = {p} is below the supergraph's {sg.num_edge_types}")
    s, k = sg.block_size, sg.num_blocks
    r = sg.receivers
    t_local = sg.senders % s
    row = (r % s) * p + sg.edge_type
    blk = r // s
    out = []
    for cls, nblocks, shift in ((BLOCK_C, k, 0), (BLOCK_U, k - 1, 0), (BLOCK_L, k - 1, 1)):
        m = sg.edge_class == cls
        flat = ((blk[m] - shift) * (s * p) + row[m]) * s + t_local[m]
        counts = np.bincount(flat, minlength=nblocks * s * p * s) if nblocks else np.zeros(0)
        out.append(torch.as_tensor(counts.reshape(nblocks, s * p, s), dtype=dtype, device=device))
    c, u, lo = out
    return c, u, lo


def band_premessages(
    c: torch.Tensor, u: torch.Tensor, lo: torch.Tensor, e: torch.Tensor
) -> torch.Tensor:
    """Algorithm 1, lines 1-3: ``pre [K, S·P, H]`` from blocks and embeddings ``E [K, S, H]``.

    ``pre = C·E``; ``pre[0:K-1] += U·E[1:K]``; ``pre[1:K] += L·E[0:K-1]``: three batched
    matmuls, the last two accumulated in place (``baddbmm_``). The paper's listing writes
    ``Eks[0:K-1]`` in line 2; Equation 3 needs ``E[1:K]`` there, which is what is done here.
    """
    pre = torch.bmm(c, e)
    if c.shape[0] > 1:
        pre[:-1].baddbmm_(u, e[1:])
        pre[1:].baddbmm_(lo, e[:-1])
    return pre


class BandPropagation:
    """Dense low-bandwidth aggregation over one supergraph of ``K·S`` node slots.

    Holds the blocks ``C, U, L`` and the per-type in-degree of each slot (for the per-type
    message bias). ``premessages(h [K·S, H]) -> [K·S, P·H]``.
    """

    def __init__(self, c: torch.Tensor, u: torch.Tensor, lo: torch.Tensor) -> None:
        if c.dim() != 3 or c.shape[1] % c.shape[2]:
            raise InputError(f"C must have shape [K, S*P, S], got {tuple(c.shape)}")
        k, sp, s = c.shape
        want = (max(k - 1, 0), sp, s)
        for name, t in (("U", u), ("L", lo)):
            if tuple(t.shape) != want:
                raise InputError(f"{name} must have shape {list(want)}, got {list(t.shape)}")
        self.c, self.u, self.lo = c, u, lo
        self.num_blocks, self.block_size, self.num_edge_types = k, s, sp // s
        deg = c.sum(-1)
        if k > 1:
            deg = (
                deg
                + torch.nn.functional.pad(u.sum(-1), (0, 0, 0, 1))
                + torch.nn.functional.pad(lo.sum(-1), (0, 0, 1, 0))
            )
        self.in_degree = deg.reshape(k * s, self.num_edge_types)

    @classmethod
    def from_supergraph(
        cls,
        sg: Supergraph,
        num_edge_types: int | None = None,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> BandPropagation:
        return cls(*band_blocks(sg, num_edge_types, dtype=dtype, device=device))

    @property
    def num_nodes(self) -> int:
        return self.num_blocks * self.block_size

    def premessages(self, h: torch.Tensor) -> torch.Tensor:
        """Sum of sender embeddings per (receiver, edge type): ``[K·S, H] -> [K·S, P·H]``."""
        k, s = self.num_blocks, self.block_size
        if h.dim() != 2 or h.shape[0] != k * s:
            raise InputError(f"h must have shape [{k * s}, H], got {list(h.shape)}")
        pre = band_premessages(self.c, self.u, self.lo, h.reshape(k, s, h.shape[1]))
        return pre.reshape(k * s, self.num_edge_types * h.shape[1])  # a view: no transpose


class ScatterPropagation:
    """Sparse aggregation by scatter-add over an edge list (the GPU baseline's pre-aggregation).

    ``premessages(h [N, H]) -> [N, P·H]`` via one ``index_add_`` keyed by
    ``receiver·P + edge_type``.
    """

    def __init__(
        self,
        senders: ArrayLike,
        receivers: ArrayLike,
        edge_type: ArrayLike,
        num_nodes: int,
        num_edge_types: int,
        *,
        device: torch.device | str | None = None,
    ) -> None:
        def as_long(x: ArrayLike) -> torch.Tensor:
            return torch.as_tensor(np.array(x, dtype=np.int64), device=device)

        self.senders = as_long(senders)
        self.receivers = as_long(receivers)
        self.edge_type = as_long(edge_type)
        self.num_nodes = int(num_nodes)
        self.num_edge_types = int(num_edge_types)
        n_e = self.senders.shape[0]
        if self.receivers.shape[0] != n_e or self.edge_type.shape[0] != n_e:
            raise InputError("senders, receivers and edge_type must have equal lengths")
        if n_e and (
            int(torch.maximum(self.senders.max(), self.receivers.max())) >= num_nodes
            or int(torch.minimum(self.senders.min(), self.receivers.min())) < 0
        ):
            raise InputError(f"edge endpoints must lie in [0, {num_nodes})")
        if n_e and (int(self.edge_type.max()) >= num_edge_types or int(self.edge_type.min()) < 0):
            raise InputError(f"edge types must lie in [0, {num_edge_types})")
        self.key = self.receivers * self.num_edge_types + self.edge_type
        self.in_degree = torch.bincount(
            self.key, minlength=self.num_nodes * self.num_edge_types
        ).reshape(self.num_nodes, self.num_edge_types)

    @classmethod
    def from_supergraph(
        cls,
        sg: Supergraph,
        num_edge_types: int | None = None,
        *,
        device: torch.device | str | None = None,
    ) -> ScatterPropagation:
        """The kept edges of a supergraph, in slot positions (same nodes as the band form)."""
        p = sg.num_edge_types if num_edge_types is None else int(num_edge_types)
        return cls(sg.senders, sg.receivers, sg.edge_type, sg.num_nodes, p, device=device)

    @classmethod
    def from_graphs(
        cls, graphs: EdgeGraphs, *, device: torch.device | str | None = None
    ) -> ScatterPropagation:
        """All edges of an `EdgeGraphs` collection, nodes numbered by concatenation."""
        s, r = graphs.global_edges()
        return cls(s, r, graphs.edge_type, graphs.num_nodes, graphs.num_edge_types, device=device)

    def premessages(self, h: torch.Tensor) -> torch.Tensor:
        """Sum of sender embeddings per (receiver, edge type): ``[N, H] -> [N, P·H]``."""
        if h.dim() != 2 or h.shape[0] != self.num_nodes:
            raise InputError(f"h must have shape [{self.num_nodes}, H], got {list(h.shape)}")
        hdim = h.shape[1]
        out = h.new_zeros(self.num_nodes * self.num_edge_types, hdim)
        out.index_add_(0, self.key, h.index_select(0, self.senders))
        return out.reshape(self.num_nodes, self.num_edge_types * hdim)
