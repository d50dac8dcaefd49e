"""How a field written from PyG is read back: the store metadata `graphbatch.datasets.to_store`
writes and the torch view of a store (`graphbatch.torch.GraphStoreDataset`) reads.

Framework-free (torch dtypes by name), so the writer in ``datasets`` and the reader in the torch
adapter share one definition without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["TORCH_FIELDS_KEY", "TorchField"]

#: Store metadata key holding each field's `TorchField` (as JSON), keyed by field name.
TORCH_FIELDS_KEY = "torch_fields"


@dataclass(frozen=True)
class TorchField:
    """One field as PyG gave it: ``level`` (``node``/``edge``/``graph``), the torch ``dtype``
    by name (``"float32"``, ``"bfloat16"``, ...), ``shape`` (trailing dims of a node/edge field;
    a graph field's whole per-graph shape) and ``python`` (a Python scalar, read back as one)."""

    level: str
    dtype: str
    shape: tuple[int, ...]
    python: bool = False

    def stored_row(self) -> tuple[int, ...]:
        """Trailing shape of the stored array: a graph field drops a leading 1, as PyG batches
        a ``[1, T]`` target into ``[B, T]``."""
        if self.level == "graph" and self.shape[:1] == (1,):
            return self.shape[1:]
        return self.shape

    def as_json(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "python": self.python,
        }

    @classmethod
    def from_json(cls, spec: dict[str, Any]) -> TorchField:
        return cls(
            str(spec["level"]),
            str(spec["dtype"]),
            tuple(int(d) for d in spec["shape"]),
            bool(spec.get("python", False)),
        )
