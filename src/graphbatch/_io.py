"""Atomic file writing for the `.npz` files of the public contracts."""

from __future__ import annotations

import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np

__all__ = ["atomic_savez", "read_npz"]


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


def read_npz(path: str | os.PathLike, what: str, required: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Read every array of an ``.npz`` file without unpickling; clear errors name the file.

    ``what`` names the file's role in messages (e.g. "size table"); ``required`` keys must exist.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} {str(path)!r} does not exist")
    if not zipfile.is_zipfile(path):
        raise ValueError(f"cannot read {what} {str(path)!r}: not an .npz (zip) file")
    try:
        with np.load(path, allow_pickle=False) as data:
            missing = [k for k in required if k not in data.files]
            if missing:
                found = ", ".join(sorted(data.files)) or "none"
                raise KeyError(f"{what} {str(path)!r} lacks key(s) {', '.join(missing)} "
                               f"(found: {found})")
            return {k: data[k] for k in data.files}
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"cannot read {what} {str(path)!r}: {exc}") from exc
    except ValueError as exc:  # object arrays: numpy refuses to unpickle
        raise ValueError(f"cannot read {what} {str(path)!r}: {exc}") from exc
