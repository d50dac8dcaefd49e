"""Test helper: the modules a source file imports, read with ``ast`` (nothing is imported)."""

from __future__ import annotations

import ast
from pathlib import Path


def imports_of(path: Path) -> set[str]:
    """Names after ``import`` and ``from`` in ``path`` (relative ones keep their leading dots)."""
    out = set()
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if isinstance(node, ast.ImportFrom):
            out.add("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out
