"""Gated graph neural network (Li et al. 2016) with interchangeable propagation backends.

``E(t+1) = GRU(sum_p A_p E(t) W_p + deg_p b_p, E(t))`` for ``t < T`` — messages are summed, one
weight matrix and bias per edge type. The module holds only parameters; the graph comes in as a
propagation object (`BandPropagation` or `ScatterPropagation`), so weights trained with one
backend evaluate unchanged with the other (the paper evaluates with all edges).
"""

from __future__ import annotations

import math

import torch

from .._errors import InputError
from ._propagate import BandPropagation, ScatterPropagation

#: Either aggregation form: ``premessages(h [N, H]) -> [N, P·H]`` over the same nodes.
Propagation = BandPropagation | ScatterPropagation

__all__ = ["GGNN"]


class GGNN(torch.nn.Module):
    """GGNN encoder: hidden size ``H``, ``P`` edge types, ``T`` steps, GRU update, sum messages.

    ``weight`` is ``W_ps [P·H, H]`` (the ``W_p`` stacked, Algorithm 1's layout); ``bias`` is
    ``[P, H]`` (the per-edge-type message bias, Appendix D), applied once per incoming edge.
    """

    def __init__(
        self, hidden: int, num_edge_types: int, steps: int = 8, *, bias: bool = True
    ) -> None:
        super().__init__()
        for name, v in (("hidden", hidden), ("num_edge_types", num_edge_types), ("steps", steps)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InputError(f"{name} must be an integer >= 1, got {v!r}")
        self.hidden, self.num_edge_types, self.steps = hidden, num_edge_types, steps
        self.weight = torch.nn.Parameter(torch.empty(num_edge_types * hidden, hidden))
        self.bias = torch.nn.Parameter(torch.zeros(num_edge_types, hidden)) if bias else None
        self.gru = torch.nn.GRUCell(hidden, hidden)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden)
        torch.nn.init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)
        self.gru.reset_parameters()

    def step(self, h: torch.Tensor, propagation: Propagation) -> torch.Tensor:
        """One propagation step: ``[N, H] -> [N, H]``."""
        msg = propagation.premessages(h) @ self.weight
        if self.bias is not None:
            msg = msg + propagation.in_degree.to(h.dtype) @ self.bias
        return self.gru(msg, h)

    def forward(self, h: torch.Tensor, propagation: Propagation) -> torch.Tensor:
        """``T`` steps from initial embeddings ``h [N, H]`` over ``propagation``'s graph."""
        if h.dim() != 2 or h.shape[1] != self.hidden:
            raise InputError(f"h must have shape [N, {self.hidden}], got {list(h.shape)}")
        if propagation.num_edge_types != self.num_edge_types:
            raise InputError(
                f"propagation has {propagation.num_edge_types} edge types, the "
                f"model {self.num_edge_types}"
            )
        for _ in range(self.steps):
            h = self.step(h, propagation)
        return h
