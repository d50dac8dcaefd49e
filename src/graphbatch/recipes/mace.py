"""The small MACE (mace-torch) of the reference recipe: its hyperparameters, QM9's elements,
the energy/force loss weights and the builder (eager, or with MACE's compile recipe)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["ENERGY_WEIGHT", "FORCES_WEIGHT", "MACE_ELEMENTS", "SMALL_MACE", "small_mace"]

#: QM9's elements (H, C, N, O, F), the one-hot order of ``node_attrs``.
MACE_ELEMENTS = (1, 6, 7, 8, 9)

#: The small MACE's hyperparameters (any key can be overridden).
SMALL_MACE = {
    "hidden_irreps": "16x0e + 16x1o",
    "MLP_irreps": "16x0e",
    "max_ell": 2,
    "num_bessel": 8,
    "num_polynomial_cutoff": 5,
    "num_interactions": 2,
    "correlation": 2,
}
#: Loss weights (MACE's ``WeightedEnergyForcesLoss`` and `energy_force_loss` alike).
ENERGY_WEIGHT, FORCES_WEIGHT = 1.0, 10.0


def small_mace(
    *,
    r_max: float,
    avg_num_neighbors: float,
    compiled: bool,
    seed: int,
    elements: Sequence[int] = MACE_ELEMENTS,
    atomic_energies: Any = None,
    **options: Any,
) -> Any:
    """The small MACE (`SMALL_MACE` updated by ``options``) at cutoff ``r_max`` (Å) over
    ``elements`` with per-element ``atomic_energies`` E0 (eV; None: zeros), weights from
    ``torch.manual_seed(seed)``; built with ``mace.tools.compile.prepare`` when ``compiled``
    (the same parameters either way for the same ``seed``)."""
    import torch
    from e3nn import o3
    from mace import modules

    cfg = {**SMALL_MACE, **options}
    elements = list(elements)
    e0 = (
        np.zeros(len(elements))
        if atomic_energies is None
        else np.asarray(atomic_energies, dtype=np.float64)
    )
    block = modules.interaction_classes["RealAgnosticResidualInteractionBlock"]
    torch.manual_seed(seed)
    kw = dict(
        r_max=r_max,
        num_bessel=int(cfg["num_bessel"]),
        num_polynomial_cutoff=int(cfg["num_polynomial_cutoff"]),
        max_ell=int(cfg["max_ell"]),
        interaction_cls=block,
        interaction_cls_first=block,
        num_interactions=int(cfg["num_interactions"]),
        num_elements=len(elements),
        hidden_irreps=o3.Irreps(cfg["hidden_irreps"]),
        MLP_irreps=o3.Irreps(cfg["MLP_irreps"]),
        atomic_energies=e0,
        avg_num_neighbors=avg_num_neighbors,
        atomic_numbers=elements,
        correlation=int(cfg["correlation"]),
        gate=torch.nn.functional.silu,
    )
    if compiled:
        from mace.tools.compile import prepare

        return prepare(modules.MACE)(**kw)
    return modules.MACE(**kw)
