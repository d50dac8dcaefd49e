"""The efficiency-vs-limits grid (tuple-packing paper, Figure 5), when the packing search exists.

The search itself belongs to ``graphbatch.packing.search_limits``; this module only calls it when
it is present and says why not otherwise, so a report never shows a made-up grid.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Any

from .._errors import InputError
from .._sizes import GraphSizes

__all__ = ["LIMIT_RECORD_KEYS", "LimitSearch", "search_limits_if_available"]

#: Keys every record of ``graphbatch.packing.search_limits`` carries (efficiencies are 0-1).
LIMIT_RECORD_KEYS = (
    "max_nodes",
    "max_edges",
    "max_graphs",
    "node_eff",
    "edge_eff",
    "harmonic_mean",
)


@dataclass(frozen=True)
class LimitSearch:
    """Records of a limit search, best first, or ``None`` with the ``reason`` it is unavailable."""

    records: list[dict[str, Any]] | None
    reason: str | None = None
    #: One line from the search (`LimitRecords.summary`): the optimum, whether it is interior,
    #: the ranges searched and the efficiency of the exact packing at the optimum.
    summary: str | None = None
    interior: bool | None = None
    node_range: tuple[int, int] | None = None
    edge_range: tuple[int, int] | None = None

    @property
    def available(self) -> bool:
        return self.records is not None

    def as_dict(self) -> dict[str, Any]:
        """The optimum (``records[0]``) and the search summary, for JSON output."""
        return {
            "available": self.available,
            "reason": self.reason,
            "summary": self.summary,
            "interior": self.interior,
            "node_range": None if self.node_range is None else list(self.node_range),
            "edge_range": None if self.edge_range is None else list(self.edge_range),
            "optimum": self.records[0] if self.records else None,
        }


def search_limits_if_available(sizes: GraphSizes, **kwargs: Any) -> LimitSearch:
    """Run ``graphbatch.packing.search_limits(sizes, **kwargs)`` if that function exists.

    Keyword arguments the function does not take are dropped. Records are checked for the keys in
    `LIMIT_RECORD_KEYS`; an empty result or missing keys raise ``ValueError``.
    """
    try:
        packing = importlib.import_module("graphbatch.packing")
    except ImportError:
        return LimitSearch(None, "graphbatch.packing is not part of this build")
    func = getattr(packing, "search_limits", None)
    if func is None:
        return LimitSearch(None, "graphbatch.packing has no search_limits in this build")
    params = inspect.signature(func).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    accepted = {k: v for k, v in kwargs.items() if takes_any or k in params}
    found = func(sizes, **accepted)
    records = [dict(r) for r in found]
    if not records:
        raise InputError("search_limits returned no records")
    missing = [k for k in LIMIT_RECORD_KEYS if k not in records[0]]
    if missing:
        raise InputError(f"search_limits records lack key(s) {', '.join(missing)}")
    summary = found.summary() if hasattr(found, "summary") else None
    return LimitSearch(
        records,
        summary=summary,
        interior=getattr(found, "interior", None),
        node_range=getattr(found, "node_range", None),
        edge_range=getattr(found, "edge_range", None),
    )
