"""Energy/force(/stress) losses on padded batches, equal to MACE's weighted losses unpadded.

``energy_force_loss`` = ``energy_weight * E + forces_weight * F`` (``+ stress_weight * S``) with

- ``E`` = mean over real graphs of ``w_g * ew_g * ((E_ref - E_pred) / n_atoms)^2``,
- ``F`` = mean over real atoms and the 3 components of ``w * fw * (F_ref - F_pred)^2``,
- ``S`` = mean over real graphs and the 9 components of ``w_g * sw_g * (S_ref - S_pred)^2``,

where ``w``, ``ew``, ``fw``, ``sw`` are the batch's ``weight``, ``energy_weight``, ...
fields when present (MACE's), else 1 -- exactly MACE's ``WeightedEnergyForcesLoss`` /
``WeightedEnergyForcesStressLoss`` on the unpadded batch. Padding rows of predictions and references
are replaced by 0 with ``torch.where`` before any arithmetic and padding graphs' atom counts by 1,
so NaN/inf on padding reach neither the loss nor any gradient; the means are
`graphbatch.torch.masked_mean` (global counts under ``torch.distributed``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ..torch import masked_mean

__all__ = ["energy_force_loss", "energy_force_stress_loss"]


def _get(batch: Any, key: str) -> Any:
    if isinstance(batch, Mapping):
        return batch.get(key)
    return batch[key] if key in batch else None  # noqa: SIM401 (a PyG Batch has no .get)


def _weights(batch: Any, name: str, like: torch.Tensor) -> torch.Tensor:
    """Per-graph ``weight * name`` (1 where the batch lacks them)."""
    out = torch.ones_like(like)
    for key in ("weight", name):
        w = _get(batch, key)
        if w is not None:
            out = out * w.reshape(-1).to(like.dtype)
    return out


def _real_only(
    pred: torch.Tensor, ref: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``pred`` and ``ref`` with padding rows set to 0 *before* any arithmetic: ``torch.where``
    passes a zero gradient to the rows it drops, so NaN/inf predictions on padding (a model's
    padding graphs) never meet a multiplication in the backward pass."""
    ref = ref.to(pred.dtype)
    m = mask.view(-1, *([1] * (pred.dim() - 1)))
    zero = torch.zeros((), dtype=pred.dtype, device=pred.device)
    return torch.where(m, pred, zero), torch.where(m, ref, zero)


def _energy_term(pred: Mapping[str, Any], batch: Any, key: str) -> torch.Tensor:
    graph_mask = batch["graph_mask"]
    ptr = batch["ptr"]
    n_atoms = (ptr[1:] - ptr[:-1]).to(pred[key].dtype)
    n_atoms = torch.where(graph_mask, n_atoms, torch.ones_like(n_atoms))
    e_pred, e_ref = _real_only(pred[key].reshape(-1), batch[key].reshape(-1), graph_mask)
    per_graph = _weights(batch, "energy_weight", e_pred) * ((e_ref - e_pred) / n_atoms) ** 2
    return masked_mean(per_graph, graph_mask)


def _forces_term(pred: Mapping[str, Any], batch: Any, key: str) -> torch.Tensor:
    f_pred, f_ref = _real_only(pred[key], batch[key], batch["node_mask"])
    w = _weights(batch, "forces_weight", f_pred.new_ones(batch["graph_mask"].shape[0]))
    per_atom = w[batch["batch"]].unsqueeze(-1) * (f_ref - f_pred) ** 2
    return masked_mean(per_atom, batch["node_mask"])


def _stress_term(pred: Mapping[str, Any], batch: Any, key: str) -> torch.Tensor:
    graph_mask = batch["graph_mask"]
    s_pred, s_ref = _real_only(pred[key], batch[key].reshape(pred[key].shape), graph_mask)
    w = _weights(batch, "stress_weight", s_pred.new_ones(graph_mask.shape[0]))
    per_graph = w.view(-1, *([1] * (s_pred.dim() - 1))) * (s_ref - s_pred) ** 2
    return masked_mean(per_graph, graph_mask)


def energy_force_loss(
    pred: Mapping[str, Any],
    batch: Any,
    *,
    energy_weight: float = 1.0,
    forces_weight: float = 1.0,
    energy_key: str = "energy",
    forces_key: str = "forces",
) -> torch.Tensor:
    """``energy_weight * E + forces_weight * F`` over the real graphs of a padded batch (see the
    module docstring); ``pred`` holds ``[n_graph]`` energies and ``[n_node, 3]`` forces."""
    return energy_weight * _energy_term(pred, batch, energy_key) + forces_weight * _forces_term(
        pred, batch, forces_key
    )


def energy_force_stress_loss(
    pred: Mapping[str, Any],
    batch: Any,
    *,
    energy_weight: float = 1.0,
    forces_weight: float = 1.0,
    stress_weight: float = 1.0,
    energy_key: str = "energy",
    forces_key: str = "forces",
    stress_key: str = "stress",
) -> torch.Tensor:
    """`energy_force_loss` ``+ stress_weight * S`` (``[n_graph, 3, 3]`` stress)."""
    return energy_force_loss(
        pred,
        batch,
        energy_weight=energy_weight,
        forces_weight=forces_weight,
        energy_key=energy_key,
        forces_key=forces_key,
    ) + stress_weight * _stress_term(pred, batch, stress_key)
