"""Weights of the torch reference models as parameters of the Flax models."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..._errors import InputError

__all__ = ["params_from_torch"]


def params_from_torch(state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """Flax ``{"params": ...}`` for `graphbatch.jax.models` from a torch model's ``state_dict``.

    Values may be torch tensors or NumPy arrays (converted with ``np.asarray``; torch is not
    imported here). ``a.0.b.weight`` becomes ``params["a_0_b"]["kernel"] = weight.T`` (``[in,
    out]``), ``bias`` stays ``bias``, ``embedding.weight`` becomes ``["embedding"]["embedding"]``.
    """
    params: dict[str, dict[str, np.ndarray]] = {}
    for key, value in state_dict.items():
        arr = value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
        *path, leaf = key.split(".")
        module = "_".join(path)
        if not path or leaf not in ("weight", "bias"):
            raise InputError(f"state_dict key {key!r} is not a layer's weight or bias")
        if leaf == "weight" and module == "embedding":
            name, arr = "embedding", arr
        elif leaf == "weight":
            if arr.ndim != 2:
                raise InputError(f"{key!r} has shape {arr.shape}; a linear weight is 2-D")
            name, arr = "kernel", arr.T
        else:
            name = "bias"
        params.setdefault(module, {})[name] = np.ascontiguousarray(arr, dtype=np.float32)
    return {"params": params}
