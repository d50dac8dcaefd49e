"""Molecules as SMILES in a CSV file (a user's own data set), with optional numeric targets.

`load_smiles_csv` reads the whole table up front (SMILES are short: a million molecules are
tens of MB) and checks every target value, so a build never stops half-way on a bad row. What
RDKit cannot parse is not an error here: the build reports those records by index and stores
them in ``failed_index``, as for MOSES.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._errors import InputError
from .._io import check_regular_file
from .._validate import as_nonnegative_int

__all__ = ["SmilesTable", "load_smiles_csv"]


@dataclass(frozen=True)
class SmilesTable:
    """SMILES strings and their targets: ``targets[i, t]`` (float64; NaN where the CSV cell is
    empty) is target ``target_names[t]`` of ``smiles[i]``, the ``i``-th data row of ``path``."""

    path: str
    smiles: list[str]
    targets: np.ndarray
    target_names: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.smiles)

    def slice(self, start: int, stop: int) -> SmilesTable:
        """Rows ``start:stop`` (a contiguous partition of a sharded build)."""
        return SmilesTable(
            self.path, self.smiles[start:stop], self.targets[start:stop], self.target_names
        )


def _text_lines(raw: io.BufferedIOBase | gzip.GzipFile, path: Path) -> Iterator[str]:
    """The file's lines decoded one at a time, so a byte that is not UTF-8 is named by line."""
    for number, line in enumerate(raw, start=1):
        try:
            yield line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(
                f"{str(path)!r} line {number}: not UTF-8 text ({exc.reason})"
            ) from None


def _number(text: str, where: str) -> float:
    if text.strip() == "":
        return math.nan  # a missing label, as in OGB's tables
    try:
        return float(text)
    except ValueError:
        raise InputError(f"{where} is {text!r}, not a number") from None


def _column(header: list[str], name: str, path: Path, flag: str) -> int:
    if name not in header:
        raise InputError(f"{str(path)!r} has no column {name!r} ({flag}); its columns: {header}")
    return header.index(name)


def load_smiles_csv(
    path: str | os.PathLike[str],
    column: str = "smiles",
    targets: Sequence[str] = (),
    limit: int | None = None,
) -> SmilesTable:
    """The SMILES of ``column`` and the numeric ``targets`` columns of a ``.csv``/``.csv.gz``.

    Raises `InputError` naming the file (and line) for a missing column, a short row, a target
    that is not a number, or text that is not UTF-8; ``FileNotFoundError`` if it does not exist.
    """
    path = check_regular_file(path, "SMILES table")
    if limit is not None:
        limit = as_nonnegative_int(limit, "limit")
    names = tuple(str(t) for t in targets)
    opener = gzip.open if path.suffix == ".gz" else open
    smiles: list[str] = []
    values: list[list[float]] = []
    with opener(path, "rb") as raw:
        reader = csv.reader(_text_lines(raw, path))
        try:
            header = next(reader, None)
            if not header:
                raise InputError(f"{str(path)!r} is empty (expected a header row)")
            col = _column(header, column, path, "--column")
            cols = [_column(header, t, path, "--target") for t in names]
            for row in reader:
                if limit is not None and len(smiles) >= limit:
                    break
                where = f"{str(path)!r} line {reader.line_num}"
                if len(row) < len(header):
                    raise InputError(f"{where} has {len(row)} fields, the header {len(header)}")
                smiles.append(row[col])
                values.append(
                    [
                        _number(row[c], f"{where}, column {t!r},")
                        for c, t in zip(cols, names, strict=True)
                    ]
                )
        except csv.Error as exc:
            raise InputError(f"{str(path)!r} line {reader.line_num}: {exc}") from None
    table = np.asarray(values, dtype=np.float64).reshape(len(smiles), len(names))
    return SmilesTable(str(path), smiles, table, names)
