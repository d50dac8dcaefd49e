"""PyTorch part of `graphbatch.lowband` (needs the ``torch`` extra): dense band propagation
(Algorithm 1), the scatter-add reference backend, and the GGNN that runs on either."""

from ._ggnn import GGNN
from ._propagate import BandPropagation, ScatterPropagation, band_blocks, band_premessages

__all__ = ["BandPropagation", "GGNN", "ScatterPropagation", "band_blocks", "band_premessages"]
