"""Atomistic models out of the box: presets for MACE and fairchem, and their padded losses.

``import graphbatch.atomistic as ga`` (needs torch; MACE itself only to run MACE models)::

    loader = gt.loader(dataset_of_mace_atomic_data, strategy="dynamic", batch_size=32,
                       preset=ga.mace(r_max=5.0))
    for batch in loader:                   # a dict MACE's models take as they are
        out = model(batch, training=True)
        loss = ga.energy_force_loss(out, batch)   # = MACE's loss on the unpadded batch

See docs/atomistic.md.
"""

from ._convert import MACEGraphs
from ._loss import energy_force_loss, energy_force_stress_loss
from ._presets import fairchem, mace, to_fairchem

__all__ = [
    "MACEGraphs",
    "energy_force_loss",
    "energy_force_stress_loss",
    "fairchem",
    "mace",
    "to_fairchem",
]
