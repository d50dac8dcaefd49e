"""Chunk-aware shuffling for stores bigger than RAM (implemented in `graphbatch._chunkplan`,
which the loaders use for ``shuffle="chunks"``; re-exported here next to the store)."""

from __future__ import annotations

from .._chunkplan import chunk_shuffled_plan, chunk_windows

__all__ = ["chunk_shuffled_plan", "chunk_windows"]
