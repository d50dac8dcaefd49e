"""Reading ASE databases for the atomistic build (`graphbatch.datasets._atoms_build`): one
row as an `AtomsFrame`, and one-line errors for a database ASE cannot open and for a row it
cannot decode, naming the file and the row's id."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._errors import AtomsInputError
from ._extxyz import AtomsFrame, frame_from_atoms

__all__ = ["bad_row", "exc_text", "not_a_database", "row_frame"]


def not_a_database(path: str, exc: BaseException) -> AtomsInputError:
    """One line for an ASE database that ASE cannot open or count: the missing backend of an
    ``.aselmdb`` file, the first row ASE cannot read where the file's row ids can be read
    (ASE's JSON backend reads every row to count them), else the file."""
    if isinstance(exc, ImportError) and path.lower().endswith(".aselmdb"):
        return AtomsInputError(
            f"{path}: an .aselmdb database needs the ase-db-backends package "
            "(pip install ase-db-backends), which is not installed"
        )
    bad = bad_row(path, 0, exc)
    if bad is not None:
        return bad
    return AtomsInputError(f"{path}: not a readable ASE database ({exc_text(exc)})")


def bad_row(path: str, position: int, exc: BaseException) -> AtomsInputError | None:
    """The error naming the row ASE could not read -- for SQLite, the one at ``position`` in
    id order (ASE decodes a row as it yields it); for JSON, the first that fails in the file's
    own order (ASE decodes every row before it sorts them) -- or ``None`` where the file's row
    ids cannot be read (then the file is no database)."""
    import ase.db

    if path.lower().endswith(".json"):
        position = 0
        try:
            with ase.db.connect(path) as db:
                for _ in db.select():
                    position += 1
            return None
        except Exception as again:
            exc = again
    row = _row_id(path, position)
    if row is None:
        return None
    return AtomsInputError(f"{path}: row {row}: not a readable structure ({exc_text(exc)})")


def exc_text(exc: BaseException) -> str:
    """``Type: message`` of a third-party error on one line (the type alone when it says
    nothing, e.g. a bare ``AssertionError``)."""
    msg = " ".join(str(exc).split())[:200]
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def row_frame(row: Any) -> AtomsFrame:
    """The `AtomsFrame` of one ASE database row (key-value pairs to ``info``; ``data``
    arrays with one row per atom to ``arrays``, the rest to ``info``)."""
    atoms = row.toatoms()
    atoms.info.update(row.key_value_pairs)
    n = len(atoms)
    for key, value in (row.get("data") or {}).items():
        arr = np.asarray(value)
        if arr.ndim >= 1 and arr.shape[0] == n and arr.dtype.kind in "biuf":
            atoms.arrays[key] = arr
        else:
            atoms.info[key] = value
    return frame_from_atoms(int(row.id), atoms)


def _row_id(path: str, position: int) -> int | None:
    """The id of the row at ``position`` (0-based; SQLite: in id order, JSON: in the file's
    ``ids`` order) of the ASE database ``path``, read from its id table alone (no row is
    decoded); ``None`` where that cannot be read."""
    try:
        if path.lower().endswith(".json"):
            import json

            with open(path, encoding="utf-8") as fh:
                table = json.load(fh)
            return int(table["ids"][position])  # the order ASE's JSON backend reads rows
        import sqlite3

        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            got = con.execute(
                "SELECT id FROM systems ORDER BY id LIMIT 1 OFFSET ?", (position,)
            ).fetchone()
        finally:
            con.close()
        return int(got[0])
    except Exception:
        return None
