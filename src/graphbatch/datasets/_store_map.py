"""Opening a store file: its header (format 3 read directly, format 2 through the time-limited
child process of `graphbatch.datasets._h5probe`), its arrays as read-only memory maps checked
for consistency, and the guard against reading a file truncated while open (`MappedFile`).
`graphbatch.datasets.GraphStore` reads through these; the layout is described in
`graphbatch.datasets._store`.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import IO

import numpy as np

from .._errors import InputError, StoreFormatError
from .._io import open_regular
from ._chunkcheck import ChunkChecker
from ._header import SMALL_ARRAYS, StoreHeader, read_header_v3, sniff, streamed_crc32

__all__ = ["MappedFile", "StoreFormatWarning", "map_store", "read_header", "warn_unchecked"]

_WARNED: set[str] = set()


class StoreFormatWarning(UserWarning):
    """A store opens, but with less protection than the current format gives (e.g. a
    format-2 store has no per-chunk checksums)."""


def read_header(path: Path) -> StoreHeader:
    """Parse and check the header of the store at ``path`` (no data array is read): a
    format-3 store with plain file reads (`graphbatch.datasets._header`), a format-2 one
    through h5py in a child process with a time limit (`graphbatch.datasets._h5probe`).
    Raises ``FileNotFoundError``, `graphbatch.InputError` (not a regular file) or
    `StoreFormatError`, each naming the file (a sharded store's manifest: naming
    `graphbatch.datasets.open_store`)."""
    path = Path(path)
    kind = sniff(path)
    if kind == "v3":
        try:
            return read_header_v3(path)
        except (ValueError, TypeError) as exc:
            raise StoreFormatError(f"{str(path)!r} is not a readable graph store: {exc}") from exc
    if kind == "hdf5":
        from ._h5probe import probe_header

        return probe_header(path)
    if kind == "json":
        raise StoreFormatError(
            f"{str(path)!r} is a JSON file (a sharded store's manifest?), not a store file: "
            "open a manifest with graphbatch.datasets.open_store(path)"
        )
    raise StoreFormatError(
        f"{str(path)!r} is not a graphbatch graph store (it starts with "
        "neither a graph store prefix nor an HDF5 signature)"
    )


def warn_unchecked(path: Path, version: int) -> None:
    """Say once per process and file that a format-2 store has no per-chunk checksums."""
    key = str(path.resolve())
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(
            f"{str(path)!r} is a format-{version} graph store: it has no per-chunk checksums, "
            "so damaged arrays are detected only by verify() (`graphbatch data verify`), not "
            f"when read; convert it once with `graphbatch data convert {path} --out NEW.h5`",
            StoreFormatWarning,
            stacklevel=3,
        )


class MappedFile:
    """The open file behind a store's memory maps, and the bytes they span (``span``): reading
    a mapped page past the end of a file truncated since kills the process with SIGBUS, so
    every read first checks the size on this descriptor (`check`, one ``fstat``). Forked
    processes share it; a pickled copy of the store opens its own."""

    def __init__(self, path: Path, fh: IO[bytes], span: int) -> None:
        self.path = path
        self.fh = fh
        self.span = span

    def check(self) -> None:
        """Raise `StoreFormatError` naming the file if it is now shorter than the maps."""
        size = os.fstat(self.fh.fileno()).st_size
        if size < self.span:
            raise StoreFormatError(
                f"{str(self.path)!r} was truncated while open: it holds {size:,} bytes, its "
                f"arrays span {self.span:,} (damaged or being rewritten in place); open it "
                "again once it is whole"
            )

    def close(self) -> None:
        self.fh.close()


def map_store(
    path: Path, header: StoreHeader, in_memory: bool, check_chunks: bool
) -> tuple[dict[str, np.ndarray], ChunkChecker | None, MappedFile | None]:
    """The arrays of the store at ``path`` as read-only memory maps (copied into RAM when
    ``in_memory``; the small arrays always, after checking their CRC-32), checked for
    consistency (offsets against sizes and totals, increasing check-chunk bounds), the
    store's `ChunkChecker` (``None`` without check chunks or ``check_chunks``) and the
    `MappedFile` all maps come from (``None`` when nothing stays mapped). Returns
    ``(maps, checker, file)``; raises `StoreFormatError` naming the file."""
    try:
        fh = open_regular(path, "graph store")
    except (OSError, InputError) as exc:
        raise StoreFormatError(f"{str(path)!r}: cannot open: {exc}") from exc
    try:
        maps, span = _map_arrays(path, fh, header, in_memory)
        _check_sizes(path, maps, header)
        checker = _chunk_checker(path, maps, header, check_chunks)
    except BaseException:
        fh.close()
        raise
    if not span:
        fh.close()
        return maps, checker, None
    return maps, checker, MappedFile(path, fh, span)


def _map_arrays(
    path: Path, fh: IO[bytes], header: StoreHeader, in_memory: bool
) -> tuple[dict[str, np.ndarray], int]:
    """Every array of ``header.layout`` on the open file ``fh`` (read-only; the small ones
    copied and CRC-checked) and the bytes the maps that stay open span (0: none)."""
    maps = {}
    span = 0
    for where, (offset, shape, dtype) in header.layout.items():
        if offset is None:
            arr = np.zeros(shape, dtype=dtype)
        else:
            try:
                arr = np.memmap(fh, dtype=dtype, mode="r", offset=offset, shape=shape)
            except (OSError, ValueError) as exc:
                raise StoreFormatError(f"{str(path)!r}: cannot map {where}: {exc}") from exc
            if in_memory or where in SMALL_ARRAYS:
                arr = np.array(arr)
            else:
                span = max(span, offset + arr.nbytes)
        arr.flags.writeable = False
        maps[where] = arr
    for where in SMALL_ARRAYS:
        if where in maps and streamed_crc32(maps[where]) != header.checksums[where]:
            raise StoreFormatError(
                f"{str(path)!r}: checksum of {where} does not match (damaged file)"
            )
    return maps, span


def _check_sizes(path: Path, maps: dict[str, np.ndarray], header: StoreHeader) -> None:
    """Raise `StoreFormatError` unless the sizes are non-negative and the offsets are their
    cumulative sums, ending at the header's totals."""
    nn, ne = maps["sizes/n_node"], maps["sizes/n_edge"]
    no, eo = maps["offsets/node"], maps["offsets/edge"]
    if (
        (nn < 0).any()
        or (ne < 0).any()
        or not (
            no[0] == 0
            and eo[0] == 0
            and np.array_equal(np.diff(no), nn)
            and np.array_equal(np.diff(eo), ne)
            and no[-1] == header.totals["node"]
            and eo[-1] == header.totals["edge"]
        )
    ):
        raise StoreFormatError(
            f"{str(path)!r} is inconsistent: offsets disagree with sizes or totals"
        )


def _chunk_checker(
    path: Path, maps: dict[str, np.ndarray], header: StoreHeader, check_chunks: bool
) -> ChunkChecker | None:
    """The store's `ChunkChecker` (``None`` without ``check_chunks`` or for a store without
    check chunks: format 2), after checking that the chunk boundaries increase from 0 to the
    graph count (also without ``check_chunks``)."""
    if not header.chunk_arrays:
        return None
    bounds = maps["checks/chunk_graphs"]
    if not (bounds[0] == 0 and bounds[-1] == header.n_graph and (np.diff(bounds) > 0).all()):
        raise StoreFormatError(
            f"{str(path)!r} is inconsistent: the check chunk boundaries "
            "are not increasing from 0 to the graph count"
        )
    if not check_chunks:
        return None
    return ChunkChecker(
        path, maps, list(header.chunk_arrays), bounds, maps["checks/chunk_crc32"], StoreFormatError
    )
