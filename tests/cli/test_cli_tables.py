"""CLI tables: plain aligned text whenever standard output is not a terminal (pipes, files,
scripts) or rich is absent; drawn by rich on a terminal when rich is installed, with the same
cells. ``--json`` output is the same either way."""

from __future__ import annotations

import re
import sys

import pytest

from graphbatch._tables import format_table as plain_table
from graphbatch.cli import _format

ROWS = [
    {"strategy": "dynamic", "batches": 1234, "node eff": 0.91234},
    {"strategy": "pack-lpf", "batches": 1201, "node eff": 0.99871},
]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_piped_output_is_the_plain_table(capsys):
    assert not sys.stdout.isatty()
    assert _format.format_table(ROWS) == plain_table(ROWS)
    assert _format.format_table([]) == plain_table([]) == "(no rows)"


def test_a_terminal_gets_a_rich_table_with_the_same_cells(monkeypatch):
    pytest.importorskip("rich")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    drawn = _format.format_table(ROWS, ["strategy", "node eff", "batches"])
    assert "\x1b[1m" in drawn  # a bold header
    text = ANSI.sub("", drawn)
    lines = [line.rstrip() for line in text.splitlines()]
    assert lines[0].split() == ["strategy", "node", "eff", "batches"]
    assert lines[2].split() == ["dynamic", "0.9123", "1,234"]  # cells as in the plain table
    assert lines[3].split() == ["pack-lpf", "0.9987", "1,201"]
    assert lines[2].endswith("1,234") and lines[3].endswith("1,201")  # numbers right-aligned


def test_a_terminal_without_rich_gets_the_plain_table(monkeypatch):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setitem(sys.modules, "rich", None)  # as if not installed
    assert _format.format_table(ROWS) == plain_table(ROWS)


def test_json_is_unchanged_on_a_terminal(monkeypatch, capsys):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    _format.print_json({"a": 1, "b": [0.5, None]})
    assert capsys.readouterr().out == '{"a": 1, "b": [0.5, null]}\n'
