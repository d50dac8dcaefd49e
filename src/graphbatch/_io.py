"""File helpers of the core: one atomic writer for every output file, the one check that an
output is none of its inputs, bounded reading of input files (regular files only, sizes and JSON
nesting bounded before anything is allocated), `.npz` reading without unpickling, and JSON
conversion of NumPy values."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import stat
import zipfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np

from ._errors import InputError, InputTypeError

__all__ = [
    "MAX_JSON_DEPTH",
    "atomic_savez",
    "atomic_write",
    "atomic_write_text",
    "check_output_path",
    "check_regular_file",
    "json_default",
    "open_regular",
    "parse_json",
    "read_npz",
    "same_file",
]

#: Deepest nesting of arrays/objects accepted in any JSON input (plan ``meta``, manifests,
#: store headers): what graphbatch writes nests at most a few levels.
MAX_JSON_DEPTH = 64


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], object]) -> Path:
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
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
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
    # (NumPy's stubs type savez's **kwds as its allow_pickle flag)
    return atomic_write(path, lambda fh: np.savez(fh, **arrays))  # type: ignore[arg-type]


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether paths ``a`` and ``b`` name the same file: the same ``(st_dev, st_ino)`` when both
    exist (which catches hard links and symlinks), else equal resolved paths (symlinks and
    ``..`` followed)."""
    pa, pb = Path(a), Path(b)
    try:
        sa, sb = os.stat(pa), os.stat(pb)
    except OSError:
        return pa.resolve() == pb.resolve()
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def check_output_path(
    out: str | os.PathLike,
    inputs: Iterable,
    flag: str = "--out",
    *,
    suffixes: tuple[str, ...] | None = None,
    what: str = "output",
) -> None:
    """The one check of an output path, made before anything is read or written: raise
    `InputError` when ``out`` names one of the ``inputs`` (paths, compared by `same_file`:
    through symlinks and hard links; ``None`` entries are ignored; a sharded store's caller
    passes the manifest and every shard it names), or when ``suffixes`` are given and ``out``
    ends in none of them (case-insensitive), or when ``out`` exists and is not a regular file
    (a folder, FIFO or device is never replaced). An output must never replace what it is
    computed from."""
    text = str(out)
    for src in inputs:
        if src is not None and same_file(out, src):
            raise InputError(
                f"{flag} {text!r} is the input file {str(src)!r}; write to another path"
            )
    if suffixes is not None and not text.lower().endswith(tuple(s.lower() for s in suffixes)):
        raise InputError(f"{flag} {text!r}: the {what} must end in {' or '.join(suffixes)}")
    try:
        st = os.stat(out)
    except OSError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise InputError(f"{flag} {text!r} exists and is not a regular file; write to another path")


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def check_regular_file(path: str | os.PathLike, what: str) -> Path:
    """``path`` as a `Path` if it names a regular file (symlinks followed); else
    ``FileNotFoundError`` or `InputError` naming it. Call before a library that opens the file
    itself (h5py) sees it: a FIFO or device would block or never end."""
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{what} {str(path)!r} does not exist") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{what} {str(path)!r} is {_kind(st.st_mode)}, not a regular file")
    return path


def open_regular(path: str | os.PathLike, what: str) -> IO[bytes]:
    """Open ``path`` for binary reading if it is a regular file, without ever blocking: the
    file is opened non-blocking (a FIFO without writer would block a plain ``open``) and its
    type checked on the open descriptor (no race with a file swapped in between). Raises
    ``FileNotFoundError`` or `InputError` naming the file."""
    path = Path(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise FileNotFoundError(f"{what} {str(path)!r} does not exist") from None
    except IsADirectoryError:
        raise InputError(f"{what} {str(path)!r} is a directory, not a regular file") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise InputError(f"{what} {str(path)!r} is {_kind(mode)}, not a regular file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bounded(path: str | os.PathLike, what: str, limit: int) -> bytes:
    """The whole regular file ``path`` (`open_regular`) if it holds at most ``limit`` bytes;
    else `InputError` naming the file and the limit (never more than ``limit + 1`` bytes are
    read, whatever the file's size claims)."""
    with open_regular(path, what) as fh:
        size = os.fstat(fh.fileno()).st_size  # no buffer larger than the file
        data = fh.read(min(limit, size) + 1)
        if len(data) > size:  # it grew while read: read on, bounded
            data += fh.read(limit + 1 - len(data))
    if len(data) > limit:
        raise InputError(f"{what} {str(path)!r} is larger than the limit of {limit:,} bytes")
    return data


_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


def json_depth(data: bytes) -> int:
    """The deepest nesting of arrays/objects in the JSON text ``data`` (strings ignored):
    one regular expression, then a running sum over blocks of 16 MiB, no recursion."""
    bare = np.frombuffer(_JSON_STRING.sub(b'""', data), dtype=np.uint8)
    depth = deepest = 0
    for a in range(0, bare.shape[0], 1 << 24):
        block = bare[a : a + (1 << 24)]
        step = ((block == ord("[")) | (block == ord("{"))).astype(np.int32) - (
            (block == ord("]")) | (block == ord("}"))
        ).astype(np.int32)
        run = np.cumsum(step, dtype=np.int64) + depth
        if run.shape[0]:
            deepest, depth = max(deepest, int(run.max())), int(run[-1])
    return deepest


def parse_json(
    data: bytes | str, what: str, *, max_bytes: int, max_depth: int = MAX_JSON_DEPTH
) -> Any:
    """Parse JSON from an input file with its size and nesting bounded first: `InputError`
    naming ``what`` and the limit for text over ``max_bytes`` bytes, nesting deeper than
    ``max_depth`` (which would exhaust Python's recursion), invalid UTF-8 or invalid JSON."""
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    if len(raw) > max_bytes:
        raise InputError(f"{what}: {len(raw):,} bytes of JSON, over the limit of {max_bytes:,}")
    depth = json_depth(raw)
    if depth > max_depth:
        raise InputError(f"{what}: JSON nested {depth} levels deep, over the limit of {max_depth}")
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise InputError(f"{what}: not valid JSON ({exc})") from None


#: Reads up to this many bytes of a member to find its ``.npy`` header (NumPy's own cap).
_NPY_HEADER_LIMIT = 10000


def _npy_header(member: IO[bytes], key: str, where: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    """``(shape, fortran_order, dtype)`` from the ``.npy`` header at the start of ``member``
    (nothing after the header is read or decompressed)."""
    try:
        version = np.lib.format.read_magic(member)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(
                member, max_header_size=_NPY_HEADER_LIMIT
            )
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(
                member, max_header_size=_NPY_HEADER_LIMIT
            )
        else:
            raise InputError(f"unsupported .npy format version {version}")
    except (ValueError, EOFError, OSError, zipfile.BadZipFile, SyntaxError) as exc:
        raise InputError(f"{where}: array {key!r} has no valid .npy header ({exc})") from None
    if dtype.hasobject:
        raise InputError(
            f"{where}: array {key!r} holds Python objects (dtype {dtype}); they "
            "would have to be unpickled, which graphbatch never does"
        )
    return shape, fortran, dtype


def read_npz(
    path: str | os.PathLike,
    what: str,
    required: tuple[str, ...],
    optional: tuple[str, ...] = (),
    *,
    lengths: Mapping[str, Callable[[dict], int | None]] | None = None,
    max_bytes: Mapping[str, int] | None = None,
) -> dict[str, np.ndarray]:
    """Read the arrays ``required`` and (where present) ``optional`` of an ``.npz`` file, in that
    order, without unpickling and with every size bounded before it is allocated or
    decompressed; other members are not read. Errors name the file (``what``: its role, e.g.
    "size table") and the limit.

    A name that occurs twice in the zip directory is refused (``np.load`` reads the last
    copy, ``zipfile`` the first). For each member the ``.npy`` header is read first: object
    dtypes are refused, and the shape it declares must match the member's size in the zip
    directory exactly (a header claiming ``(2**40,)`` in a small member is refused, not
    allocated); ``lengths[key](arrays read so far)`` gives the first-dimension length the
    member must have (``None``: no constraint), ``max_bytes[key]`` a cap on its data. Only
    then is the data read -- at most the declared bytes, whose CRC-32 the zip reader checks.
    """
    where = f"{what} {str(path)!r}"
    lengths = dict(lengths or {})
    max_bytes = dict(max_bytes or {})
    with open_regular(path, what) as fh:
        try:
            zf = zipfile.ZipFile(fh)
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
            raise InputError(f"cannot read {where}: not an .npz (zip) file ({exc})") from None
        with zf:
            members: dict[str, zipfile.ZipInfo] = {}
            for info in zf.infolist():
                if info.filename.endswith(".npy"):
                    key = info.filename[:-4]
                    if key in members:  # np.load reads the last copy, zipfile the first
                        copies = sum(i.filename == info.filename for i in zf.infolist())
                        raise InputError(
                            f"{where} holds array {key!r} {copies} times; a file with "
                            "duplicated members is damaged or forged (which copy counts?)"
                        )
                    members[key] = info
            missing = [k for k in required if k not in members]
            if missing:
                found = ", ".join(sorted(members)) or "none"
                raise InputError(f"{where} lacks key(s) {', '.join(missing)} (found: {found})")
            out: dict[str, np.ndarray] = {}
            for key in (*required, *(k for k in optional if k in members)):
                out[key] = _read_member(
                    zf, members[key], key, where, out, lengths.get(key), max_bytes.get(key)
                )
    return out


def _read_member(
    zf: zipfile.ZipFile,
    info: zipfile.ZipInfo,
    key: str,
    where: str,
    done: dict,
    length: Callable[[dict], int | None] | None,
    cap: int | None,
) -> np.ndarray:
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise InputError(
            f"{where}: array {key!r} uses zip compression method "
            f"{info.compress_type}; only stored and deflated members are read"
        )
    try:
        with zf.open(info) as member:
            shape, fortran, dtype = _npy_header(member, key, where)
            header = member.tell()
            n = 1
            for d in shape:
                n *= int(d)
            nbytes = n * dtype.itemsize
            if nbytes != info.file_size - header:
                raise InputError(
                    f"{where}: array {key!r} declares shape {shape} of {dtype} "
                    f"({nbytes:,} bytes) but the file holds "
                    f"{max(0, info.file_size - header):,} bytes of it"
                )
            want = None if length is None else length(done)
            if want is not None and shape[:1] != (want,):
                raise InputError(
                    f"{where}: array {key!r} has shape {shape}; its first "
                    f"dimension must be {want} to match the other arrays"
                )
            if cap is not None and nbytes > cap:
                raise InputError(
                    f"{where}: array {key!r} holds {nbytes:,} bytes, over the limit of {cap:,}"
                )
            arr = np.empty(shape, dtype=dtype, order="F" if fortran else "C")
            # (ignores: NumPy declares arrays as buffers to type checkers on Python >= 3.12
            # only; zipfile's members are ZipExtFile objects, which typeshed calls IO[bytes])
            view = (
                memoryview(arr.reshape(-1, order="A").view(np.uint8))  # type: ignore[arg-type]
                if nbytes
                else None
            )
            got = 0
            while view is not None and got < nbytes:
                k = member.readinto(view[got:])  # type: ignore[attr-defined]
                if not k:
                    break
                got += k
            if got != nbytes:
                raise InputError(
                    f"{where}: array {key!r} is truncated ({got:,} of {nbytes:,} bytes)"
                )
            member.read(1)  # at the end: lets the zip reader check the member's CRC-32
    except InputError:
        raise
    except (OSError, EOFError, zipfile.BadZipFile, ValueError, RuntimeError) as exc:
        raise InputError(f"cannot read {where}: array {key!r}: {exc}") from None
    return arr


def json_default(o: object) -> Any:
    """``json.dumps(default=...)`` for NumPy scalars and arrays."""
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise InputTypeError(f"cannot store {type(o).__name__} as JSON")
