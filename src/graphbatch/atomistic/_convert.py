"""`MACEGraphs`: a view of a graph dataset (a graphbatch store, PyG ``Data`` with ``z``/``pos``)
as MACE's per-graph fields, so MACE trains on graphbatch's own radius graphs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from .._errors import InputError
from .._sizes import GraphSizes

__all__ = ["MACEGraphs"]


class MACEGraphs(Dataset):
    """``dataset[i]`` (PyG ``Data`` or dict with atomic numbers ``z``, positions ``pos`` and an
    ``edge_index`` of radius edges, e.g. a store built with ``graphbatch data build qm9 --cutoff
    R``) as a dict of MACE's fields: ``node_attrs`` (one-hot over ``atomic_numbers``),
    ``positions``, ``edge_index``, zero ``shifts``/``unit_shifts`` (molecules: no periodic
    images), a zero ``cell`` ``[3, 3]``, ``head`` 0, ``weight``/``energy_weight``/
    ``forces_weight``/``stress_weight`` 1, plus ``targets(graph)`` (e.g. ``lambda g:
    {"energy": g.y[0, 10]}``). Floats become ``dtype`` (default: torch's default dtype).
    ``graph_sizes()`` passes through, so `graphbatch.torch.loader` reads sizes without loading.
    An atomic number outside ``atomic_numbers`` raises ``ValueError`` naming it.
    """

    def __init__(
        self,
        dataset: Any,
        atomic_numbers: Sequence[int],
        *,
        targets: Callable[[Any], Mapping[str, torch.Tensor]] | None = None,
        dtype: torch.dtype | None = None,
        z_key: str = "z",
        pos_key: str = "pos",
    ) -> None:
        zs = [int(z) for z in atomic_numbers]
        if not zs or len(set(zs)) != len(zs) or min(zs) < 0:
            raise InputError(f"atomic_numbers must be distinct non-negative ints, got {zs}")
        self.dataset = dataset
        self.atomic_numbers = zs
        self._index = np.full(max(zs) + 1, -1, dtype=np.int64)
        self._index[zs] = np.arange(len(zs))
        self.targets = targets
        self.dtype = dtype
        self.z_key = z_key
        self.pos_key = pos_key

    def __len__(self) -> int:
        return len(self.dataset)

    def graph_sizes(self) -> GraphSizes:
        from ..torch import read_sizes

        return read_sizes(self.dataset)

    def __getitem__(self, i: int) -> dict[str, Any]:
        g = self.dataset[i]
        dtype = self.dtype or torch.get_default_dtype()
        z = torch.as_tensor(g[self.z_key]).reshape(-1).to(torch.int64)
        bad = (z < 0) | (z >= self._index.shape[0])
        idx = torch.from_numpy(self._index)[z.clamp(0, self._index.shape[0] - 1)]
        bad |= idx < 0
        if bool(bad.any()):
            raise InputError(
                f"graph {i}: atomic number {int(z[bad][0])} is not in "
                f"atomic_numbers {self.atomic_numbers}"
            )
        n = int(z.shape[0])
        ei = torch.as_tensor(g["edge_index"]).to(torch.int64)
        e = int(ei.shape[1])
        one = torch.ones((), dtype=dtype)
        out = {
            "num_nodes": n,
            "edge_index": ei,
            "node_attrs": torch.nn.functional.one_hot(idx, len(self.atomic_numbers)).to(dtype),
            "positions": torch.as_tensor(g[self.pos_key]).to(dtype).reshape(n, 3),
            "shifts": torch.zeros(e, 3, dtype=dtype),
            "unit_shifts": torch.zeros(e, 3, dtype=dtype),
            "cell": torch.zeros(3, 3, dtype=dtype),
            "head": torch.zeros((), dtype=torch.int64),
            "weight": one,
            "energy_weight": one,
            "forces_weight": one,
            "stress_weight": one,
        }
        if self.targets is not None:
            for key, value in self.targets(g).items():
                v = torch.as_tensor(value)
                out[key] = v.to(dtype) if v.is_floating_point() else v
        return out
