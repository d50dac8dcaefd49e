"""PaiNN (Schütt, Unke, Gastegger 2021): equivariant scalar and vector features, equations 6-7
of the static-vs-dynamic paper, on padded batches."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .._errors import InputError
from ._base import GraphRegressor
from ._ops import (
    GaussianRBF,
    cosine_cutoff,
    edge_vectors,
    gather_rows,
    masked_graph_sum,
    scatter_sum,
)

__all__ = ["PaiNN"]

_EPS = 1e-8  # inside sqrt(|Vv|^2 + eps): vectors start at 0, where sqrt has no gradient


class _Message(nn.Module):
    def __init__(self, f: int, num_rbf: int) -> None:
        super().__init__()
        self.phi = nn.Sequential(nn.Linear(f, f), nn.SiLU(), nn.Linear(f, 3 * f))
        self.filt = nn.Linear(num_rbf, 3 * f)
        self.f = f

    def forward(
        self, s: Tensor, v: Tensor, rbf: Tensor, cut: Tensor, unit: Tensor, src: Tensor, dst: Tensor
    ) -> tuple[Tensor, Tensor]:
        x = gather_rows(self.phi(s), src) * (self.filt(rbf) * cut.unsqueeze(-1))
        ds, dvv, dvs = x.split(self.f, dim=-1)
        dv = gather_rows(v, src) * dvv.unsqueeze(1) + dvs.unsqueeze(1) * unit.unsqueeze(-1)
        n = s.shape[0]
        return s + scatter_sum(ds, dst, n), v + scatter_sum(dv, dst, n)


class _Update(nn.Module):
    def __init__(self, f: int) -> None:
        super().__init__()
        self.u = nn.Linear(f, f, bias=False)
        self.v = nn.Linear(f, f, bias=False)
        self.mlp = nn.Sequential(nn.Linear(2 * f, f), nn.SiLU(), nn.Linear(f, 3 * f))
        self.f = f

    def forward(self, s: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        uv, vv = self.u(v), self.v(v)  # [N, 3, F]
        norm = torch.sqrt((vv * vv).sum(1) + _EPS)
        a_vv, a_sv, a_ss = self.mlp(torch.cat([s, norm], -1)).split(self.f, dim=-1)
        ds = a_ss + a_sv * (uv * vv).sum(1)  # eq. 6
        dv = a_vv.unsqueeze(1) * uv  # eq. 7
        return s + ds, v + dv


class PaiNN(GraphRegressor):
    """PaiNN: ``num_layers`` message and update blocks on scalars ``s [N, F]`` and vectors
    ``v [N, 3, F]``; filters from ``num_rbf`` Gaussians times a cosine cutoff (Å); scalar readout
    (two-layer MLP per atom, masked sum per graph). Outputs are rotation invariant.
    """

    def __init__(
        self,
        features: int = 64,
        num_layers: int = 3,
        num_rbf: int = 20,
        cutoff: float = 6.0,
        num_embeddings: int = 100,
    ) -> None:
        super().__init__()
        for name, val in (("features", features), ("num_layers", num_layers), ("num_rbf", num_rbf)):
            if int(val) < 1:
                raise InputError(f"PaiNN {name} must be >= 1, got {val}")
        if not cutoff > 0:
            raise InputError(f"PaiNN cutoff must be > 0 Å, got {cutoff}")
        self.features, self.cutoff = int(features), float(cutoff)
        self.embedding = nn.Embedding(num_embeddings, features)
        self.rbf = GaussianRBF(0.0, cutoff, num_rbf)
        self.messages = nn.ModuleList(_Message(features, num_rbf) for _ in range(num_layers))
        self.updates = nn.ModuleList(_Update(features) for _ in range(num_layers))
        self.out1 = nn.Linear(features, features // 2)
        self.out2 = nn.Linear(features // 2, 1)

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
        vec, d = edge_vectors(pos, edge_index, edge_mask)
        cut = cosine_cutoff(d, self.cutoff, edge_mask)
        unit = vec / d.unsqueeze(-1)  # padding edges: zero vector / 1
        rbf = self.rbf(d)
        s = self.embedding(z)
        v = s.new_zeros((s.shape[0], 3, self.features))
        for msg, upd in zip(self.messages, self.updates, strict=True):
            s, v = msg(s, v, rbf, cut, unit, src, dst)
            s, v = upd(s, v)
        out = self.out2(F.silu(self.out1(s))).squeeze(-1)
        return masked_graph_sum(out, batch, node_mask, num_graphs)
