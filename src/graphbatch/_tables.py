"""Plain-text tables shared by the CLI, the demo and the benchmark scripts (no dependencies)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["format_table", "format_value"]


def format_value(v: Any) -> str:
    """One table cell: floats with 4 decimals (1 and thousands separators from 1000 up), ints
    with thousands separators, anything else as ``str``."""
    if isinstance(v, float):
        return f"{v:.4f}" if abs(v) < 1000 else f"{v:,.1f}"
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def format_table(rows: Sequence[dict[str, Any]], columns: Iterable[str] | None = None) -> str:
    """Rows of dicts as an aligned text table (columns default to the first row's keys)."""
    if not rows:
        return "(no rows)"
    cols = list(columns) if columns is not None else list(rows[0])
    cells = [[format_value(r.get(c, "")) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    numeric = [all(isinstance(r.get(c), (int, float)) for r in rows) for c in cols]
    for row in cells:
        lines.append(
            "  ".join(
                v.rjust(w) if num else v.ljust(w)
                for v, w, num in zip(row, widths, numeric, strict=True)
            )
        )
    return "\n".join(lines)
