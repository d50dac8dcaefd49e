"""The child side of `graphbatch.datasets._h5probe`: ``python -m
graphbatch.datasets._h5probe_child TASK PATH`` parses a format-1/2 store's HDF5 metadata with
h5py (``header``: `_store_legacy.read_header_h5`; ``v1``: `_convert.check_v1`) and prints the
result, or the error as one line, as JSON after `_h5probe.MARK`. Run only in that child
process."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from .._errors import InputError, StoreFormatError
from ._convert import check_v1
from ._h5probe import MARK
from ._store_legacy import read_header_h5

__all__ = ["main"]


def _child(task: str, path: Path) -> dict:
    if task == "header":
        h = read_header_h5(path)
        return {
            "uuid": h.uuid,
            "name": h.name,
            "n_graph": h.n_graph,
            "totals": h.totals,
            "fields": h.fields,
            "meta": h.meta,
            "checksums": h.checksums,
            "edge_dtype": h.edge_dtype.str,
            "header_crc": h.header_crc,
            "format_version": h.format_version,
            "layout": {w: [o, list(s), d.str] for w, (o, s, d) in h.layout.items()},
        }
    if task == "v1":
        return check_v1(path)
    raise InputError(f"unknown probe task {task!r}")


def main(argv: list[str]) -> int:
    task, path = argv
    try:
        result: dict[str, Any] = {"ok": _child(task, Path(path))}
    except Exception as exc:
        msg = (
            str(exc)
            if isinstance(exc, StoreFormatError)
            else (f"{path!r} is not a readable graph store (damaged?): {type(exc).__name__}: {exc}")
        )
        result = {"error": " ".join(msg.split())}
    sys.stdout.write(MARK + json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
