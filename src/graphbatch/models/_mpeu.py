"""MPEU: message passing with edge updates (Jørgensen et al. 2018), equations 2-5 of the
static-vs-dynamic paper, on padded batches."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .._errors import InputError
from ._base import GraphRegressor
from ._ops import (
    GaussianRBF,
    edge_vectors,
    gather_rows,
    masked_graph_sum,
    scatter_sum,
    shifted_softplus,
)

__all__ = ["MPEU"]


class _MPEUStep(nn.Module):
    def __init__(self, hidden: int, edge_dim: int) -> None:
        super().__init__()
        # edge update e_ij <- ssp(W_E2 ssp(W_E1 [h_i, h_j, e_ij]))
        self.edge1 = nn.Linear(2 * hidden + edge_dim, 2 * edge_dim)
        self.edge2 = nn.Linear(2 * edge_dim, edge_dim)
        self.w1 = nn.Linear(hidden, hidden, bias=False)  # eq. 4: W1 h_j
        self.w2 = nn.Linear(edge_dim, hidden)  # eq. 4: sigma(W3 sigma(W2 e_ij))
        self.w3 = nn.Linear(hidden, hidden)
        self.w4 = nn.Linear(hidden, hidden)  # eq. 5: h + W5 sigma(W4 m)
        self.w5 = nn.Linear(hidden, hidden)

    def forward(
        self, h: Tensor, e: Tensor, src: Tensor, dst: Tensor, emask: Tensor
    ) -> tuple[Tensor, Tensor]:
        hi, hj = gather_rows(h, dst), gather_rows(h, src)
        e = shifted_softplus(self.edge2(shifted_softplus(self.edge1(torch.cat([hi, hj, e], -1)))))
        gate = shifted_softplus(self.w3(shifted_softplus(self.w2(e))))
        msg = gather_rows(self.w1(h), src) * gate  # eq. 4
        msg = torch.where(emask, msg, torch.zeros_like(msg))  # padding edges send nothing
        m = scatter_sum(msg, dst, h.shape[0])  # eq. 3
        h = h + self.w5(shifted_softplus(self.w4(m)))  # eq. 5
        return h, e


class MPEU(GraphRegressor):
    """Message passing with edge updates: ``h_i += W5 σ(W4 Σ_j (W1 h_j) ⊙ σ(W3 σ(W2 e_ij)))``.

    Edges start as a Gaussian expansion of the interatomic distance (``num_gaussians`` on
    ``[0, cutoff]`` Å) and are updated before each message step from ``(h_i, h_j, e_ij)``;
    σ is the shifted softplus. Readout: a two-layer MLP per atom, masked sum per graph.
    """

    def __init__(
        self,
        hidden: int = 64,
        edge_dim: int = 64,
        num_steps: int = 3,
        num_gaussians: int = 32,
        cutoff: float = 6.0,
        num_embeddings: int = 100,
    ) -> None:
        super().__init__()
        for name, v in (
            ("hidden", hidden),
            ("edge_dim", edge_dim),
            ("num_steps", num_steps),
            ("num_gaussians", num_gaussians),
        ):
            if int(v) < 1:
                raise InputError(f"MPEU {name} must be >= 1, got {v}")
        if not cutoff > 0:
            raise InputError(f"MPEU cutoff must be > 0 Å, got {cutoff}")
        self.embedding = nn.Embedding(num_embeddings, hidden)
        self.rbf = GaussianRBF(0.0, cutoff, num_gaussians)
        self.edge_in = nn.Linear(num_gaussians, edge_dim)
        self.steps = nn.ModuleList(_MPEUStep(hidden, edge_dim) for _ in range(num_steps))
        self.out1 = nn.Linear(hidden, hidden // 2)
        self.out2 = nn.Linear(hidden // 2, 1)

    def forward(
        self,
        z: Tensor,
        pos: Tensor,
        edge_index: Tensor,
        batch: Tensor,
        node_mask: Tensor,
        edge_mask: Tensor,
        num_graphs: int,
    ) -> Tensor:
        src, dst = edge_index[0], edge_index[1]
        _, d = edge_vectors(pos, edge_index, edge_mask)
        e = self.edge_in(self.rbf(d))
        emask = edge_mask.unsqueeze(-1)
        h = self.embedding(z)
        for step in self.steps:
            h, e = step(h, e, src, dst, emask)
        out = self.out2(shifted_softplus(self.out1(h))).squeeze(-1)
        return masked_graph_sum(out, batch, node_mask, num_graphs)
