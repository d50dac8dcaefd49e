"""File helpers of the core: one atomic writer for every output file, `.npz` reading without
unpickling, and JSON conversion of NumPy values."""

from __future__ import annotations

import os
import secrets
import zipfile
from pathlib import Path
from typing import IO, Callable

import numpy as np

from ._errors import InputError

__all__ = ["atomic_savez", "atomic_write", "atomic_write_text", "check_output_path", "json_default",
           "read_npz", "same_file"]


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> Path:
    """Create or replace ``path`` with what ``write(binary file)`` writes, atomically.

    The data goes to a temp file next to ``path`` (same folder, so the final ``os.replace`` is
    atomic): a reader sees the old file or the complete new one, never a half-written one, and
    on any error (or interrupt) the temp file is removed and the target left untouched. The file
    gets mode ``0o666`` less the process umask, like any file ``open(path, "w")`` creates.
    Parent folders are created.
    """
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    directory.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        tmp = directory / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(tmp, flags, 0o666)  # the kernel applies the umask
            break
        except FileExistsError:  # pragma: no cover - 48 random bits collided
            continue
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (see `atomic_write`)."""
    data = text.encode(encoding)
    return atomic_write(path, lambda fh: fh.write(data))


def atomic_savez(path: str | os.PathLike, arrays: dict[str, np.ndarray]) -> Path:
    """Write ``arrays`` to ``path`` as an uncompressed ``.npz``, atomically (`atomic_write`)."""
    path = Path(path)
    if path.suffix != ".npz":
        raise InputError(f"expected a path ending in .npz, got {str(path)!r}")
    return atomic_write(path, lambda fh: np.savez(fh, **arrays))


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether paths ``a`` and ``b`` name the same file: equal resolved paths, or (when both
    exist) the same inode, which also catches hard links and symlinks."""
    pa, pb = Path(a), Path(b)
    try:
        if pa.exists() and pb.exists():
            return os.path.samefile(pa, pb)
    except OSError:
        pass
    return pa.resolve() == pb.resolve()


def check_output_path(out: str | os.PathLike, inputs, flag: str = "--out") -> None:
    """Raise `InputError` when the output path ``out`` names one of the ``inputs`` (paths; ``None``
    entries are ignored): an output file must never replace what it was computed from."""
    for src in inputs:
        if src is not None and same_file(out, src):
            raise InputError(f"{flag} {str(out)!r} is the input file {str(src)!r}; "
                             "write to another path")


def read_npz(path: str | os.PathLike, what: str, required: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Read every array of an ``.npz`` file without unpickling; clear errors name the file.

    ``what`` names the file's role in messages (e.g. "size table"); ``required`` keys must exist.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} {str(path)!r} does not exist")
    if not zipfile.is_zipfile(path):
        raise InputError(f"cannot read {what} {str(path)!r}: not an .npz (zip) file")
    try:
        with np.load(path, allow_pickle=False) as data:
            files = list(data.files)
            missing = [k for k in required if k not in files]
            if not missing:
                return {k: data[k] for k in files}
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise InputError(f"cannot read {what} {str(path)!r}: {exc}") from exc
    except ValueError as exc:  # object arrays: numpy refuses to unpickle
        raise InputError(f"cannot read {what} {str(path)!r}: {exc}") from exc
    found = ", ".join(sorted(files)) or "none"
    raise InputError(f"{what} {str(path)!r} lacks key(s) {', '.join(missing)} (found: {found})")


def json_default(o):
    """``json.dumps(default=...)`` for NumPy scalars and arrays."""
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"cannot store {type(o).__name__} as JSON")
