"""CLI output: the shared text tables and JSON (formatting lives here, not in the library)."""

from __future__ import annotations

import json
from typing import Any

from .._io import json_default
from .._tables import format_table, format_value

__all__ = ["format_table", "format_value", "print_json"]


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=None, sort_keys=False, default=json_default))
