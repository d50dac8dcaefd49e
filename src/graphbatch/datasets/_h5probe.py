"""Read the HDF5 metadata of format-1/2 stores in a child process with a time limit.

Format 1 and 2 keep their header in HDF5 attributes, whose string values HDF5 stores in its
global heap. That heap has no checksum, and HDF5's parser of it
(``H5HG__cache_heap_deserialize``, still so in HDF5 2.0) advances by each object's stored
size: a damaged size that makes the next object header fall on zero bytes reads an object 0
("free space") of size 0, and the loop never advances -- ``GraphStore(path)`` hung in an
attribute read, beyond the reach of signals (the loop holds the GIL in C). Format 3 reads no
HDF5 (`graphbatch.datasets._header`). For the older formats, this module runs the h5py parse
in a child process (``python -m graphbatch.datasets._h5probe_child TASK PATH``), which prints its
result as JSON; the parent waits at most `PROBE_TIMEOUT_S` seconds and then kills it and
raises `StoreFormatError` naming the file. A parse that finishes in the child finishes the
same way in the parent (same bytes, same deterministic parser), which is what
`graphbatch.datasets.convert_store` relies on when it then reads a format-1 store in process;
the file's identity (device, inode, size, mtime) must not change in between.

Costs one interpreter start (about 0.3-1 s) per open of a format-1/2 store; format-3 stores
never pay it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from .._errors import StoreFormatError
from ._header import StoreHeader

__all__ = ["PROBE_TIMEOUT_S", "probe_header", "probe_v1"]

#: Seconds a child process may take to parse a store's HDF5 metadata (a healthy store takes
#: well under a second, interpreter start included; the limit leaves room for loaded machines).
PROBE_TIMEOUT_S = 30.0
#: The prefix of the child's result line on its stdout.
MARK = "graphbatch-h5probe:"


def _identity(path: Path) -> tuple:
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _run(task: str, path: Path) -> dict:
    root = str(Path(__file__).resolve().parents[2])  # the folder holding graphbatch/
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    before = _identity(path)
    try:
        out = subprocess.run(
            [sys.executable, "-m", "graphbatch.datasets._h5probe_child", task, str(path)],
            capture_output=True,
            env=env,
            timeout=PROBE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise StoreFormatError(
            f"{str(path)!r}: reading its HDF5 metadata did not finish within "
            f"{PROBE_TIMEOUT_S:g} s (damaged file: HDF5 loops forever on some damaged "
            "metadata)"
        ) from None
    lines = [ln for ln in out.stdout.decode("utf-8", "replace").splitlines() if ln.startswith(MARK)]
    if out.returncode != 0 or not lines:
        err = " ".join(out.stderr.decode("utf-8", "replace").split()[-30:])
        raise StoreFormatError(
            f"{str(path)!r}: reading its HDF5 metadata failed (exit status "
            f"{out.returncode}; damaged file?): {err}"
        )
    result = json.loads(lines[-1][len(MARK) :])
    if "error" in result:
        raise StoreFormatError(result["error"])
    if _identity(path) != before:
        raise StoreFormatError(f"{str(path)!r} changed on disk while it was opened")
    return result["ok"]


def probe_header(path: Path) -> StoreHeader:
    """The `graphbatch.datasets._header.StoreHeader` of the format-2 store at ``path``, parsed
    by ``_store_legacy.read_header_h5`` in a child process (a format-1 store raises the error naming
    ``graphbatch data convert``)."""
    h = _run("header", Path(path))
    layout = {w: (o, tuple(s), np.dtype(d)) for w, (o, s, d) in h["layout"].items()}
    return StoreHeader(
        uuid=h["uuid"],
        name=h["name"],
        n_graph=h["n_graph"],
        totals=h["totals"],
        fields=h["fields"],
        meta=h["meta"],
        checksums=h["checksums"],
        edge_dtype=np.dtype(h["edge_dtype"]),
        layout=layout,
        header_crc=h["header_crc"],
        format_version=h["format_version"],
    )


def probe_v1(path: Path) -> dict:
    """What `graphbatch.datasets._convert` needs of the format-1 store at ``path`` (name,
    meta, fields, graph count), after its attributes were read and the chunk index of every
    dataset was checked (`graphbatch.datasets._convert.check_v1`) in a child process."""
    return _run("v1", Path(path))
