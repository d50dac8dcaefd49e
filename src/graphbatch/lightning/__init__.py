"""Lightning adapter: `GraphDataModule`, planned and padded batches for every Lightning strategy.

Import explicitly (``import graphbatch.lightning``); it needs Lightning (``lightning`` 2.x, or
the ``pytorch_lightning`` package) and the PyTorch/PyG adapter: ``pip install
'graphbatch[lightning]'``.
"""

from __future__ import annotations

try:
    import lightning.pytorch  # noqa: F401
except ImportError:
    try:
        import pytorch_lightning  # noqa: F401
    except ImportError:
        raise ImportError(
            "graphbatch.lightning needs Lightning: pip install 'graphbatch[lightning]' "
            "(or: pip install lightning)"
        ) from None

from ._datamodule import GraphDataModule

__all__ = ["GraphDataModule"]
