"""Atomic file writing for the `.npz` files of the public contracts."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

__all__ = ["atomic_savez"]


def atomic_savez(path: str | os.PathLike, arrays: dict[str, np.ndarray]) -> Path:
    """Write ``arrays`` to ``path`` as an uncompressed ``.npz`` via a temp file and a rename.

    A reader never sees a half-written file; on error the target is left untouched.
    """
    path = Path(path)
    if path.suffix != ".npz":
        raise ValueError(f"expected a path ending in .npz, got {str(path)!r}")
    directory = path.parent if str(path.parent) else Path(".")
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **arrays)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path
