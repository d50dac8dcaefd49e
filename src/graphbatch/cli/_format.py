"""CLI output: the shared text tables and JSON (formatting lives here, not in the library).

Tables go to a terminal drawn by ``rich`` when it is installed (the ``cli`` extra): the same
cells (`graphbatch._tables.format_value`), numbers right-aligned, a bold header. Without rich,
and whenever standard output is not a terminal (a pipe, a file, a test), they are the plain
aligned text of `graphbatch._tables.format_table`, so scripts reading them see no change.
``--json`` output never changes with either.
"""

from __future__ import annotations

import io
import json
import shutil
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from .._io import json_default
from .._tables import format_table as plain_table
from .._tables import format_value

__all__ = ["format_table", "format_value", "print_json"]


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=None, sort_keys=False, default=json_default))


def format_table(rows: Sequence[dict[str, Any]], columns: Iterable[str] | None = None) -> str:
    """Rows of dicts as a table for standard output: drawn by rich on a terminal when rich is
    installed, else plain aligned text (columns default to the first row's keys)."""
    cols = list(columns) if columns is not None else None
    if rows and sys.stdout.isatty():
        drawn = _rich_table(rows, cols)
        if drawn is not None:
            return drawn
    return plain_table(rows, cols)


def _rich_table(rows: Sequence[dict[str, Any]], cols: list[str] | None) -> str | None:
    """The table drawn by rich for this terminal's width, or ``None`` without rich."""
    try:
        from rich import box
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        return None
    cols = cols if cols is not None else list(rows[0])
    table = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False, show_edge=False)
    for c in cols:
        numeric = all(isinstance(r.get(c), (int, float)) for r in rows)
        table.add_column(c, justify="right" if numeric else "left", no_wrap=numeric)
    for r in rows:
        table.add_row(*(format_value(r.get(c, "")) for c in cols))
    buffer = io.StringIO()
    width = shutil.get_terminal_size().columns
    Console(file=buffer, force_terminal=True, width=width).print(table)
    return buffer.getvalue().rstrip("\n")
