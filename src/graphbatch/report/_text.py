"""The strategy comparison as a plain-text table (printed by ``graphbatch compare`` and the
demo)."""

from __future__ import annotations

from .._tables import format_table
from ..analysis import Comparison

__all__ = ["comparison_table"]


def comparison_table(comparison: Comparison) -> str:
    """The comparison as an aligned text table (failed runs show their error below it)."""
    columns = comparison.columns()
    rows = []
    for row in comparison.rows():
        if row["error"] is None:
            rows.append({header: row.get(key) for key, header in columns})
    text = format_table(rows, [h for _, h in columns])
    b = comparison.budget
    text += (
        f"\nshared budget: {b.n_node} nodes / {b.n_edge} edges / {b.n_graph} graphs; "
        f"batch cost unit: {comparison.cost_unit}"
    )
    for r in comparison.results:
        if not r.ok:
            text += f"\nFAILED {r.label}: {r.error}"
    limits = getattr(comparison, "limits", None)
    if limits is not None:
        text += f"\npack limits: {limits.summary or limits.reason}"
    return text
