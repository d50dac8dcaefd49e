"""The HTML report (matplotlib figures embedded in one self-contained page) and the text table
of a strategy comparison.

Optional extra: the HTML report needs matplotlib (``graphbatch[bench]``), imported when
``build_report``/``write_report`` are first used, so that
``comparison_table`` works without it. Import explicitly:
``from graphbatch.report import build_report, write_report``.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._text import comparison_table

__all__ = ["build_report", "comparison_table", "write_report"]

_LAZY = {"build_report": "._build", "write_report": "._build"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
