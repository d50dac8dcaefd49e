"""The documentation site's generated references (docs/_ext): the API reference has an entry
for every name of every public module's ``__all__`` (modules and names found here from the
source files, independently of the generator), and the CLI reference renders the real parser.
`make docs` builds the site with warnings as errors and checks its object inventory too."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("sphinx")

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "graphbatch"
sys.path.insert(0, str(ROOT / "docs" / "_ext"))

import apiref  # noqa: E402


def public_modules_from_files() -> dict[str, Path]:
    """Dotted name -> file of every module or package without a ``_``-prefixed component."""
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if not any(p.startswith("_") for p in parts):
            found[".".join(parts)] = path
    return found


def all_from_source(path: Path) -> list[str] | None:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", None) == "__all__" for t in node.targets
        ):
            return list(ast.literal_eval(node.value))
    return None


def test_every_public_module_is_found_and_has_all():
    files = public_modules_from_files()
    assert set(apiref.public_modules()) == set(files)
    assert {"graphbatch", "graphbatch.torch", "graphbatch.lightning"} <= set(files)
    for name, path in files.items():
        assert all_from_source(path) is not None, f"{name} has no __all__"


def test_every_public_name_has_an_entry(tmp_path):
    apiref.write_pages(tmp_path)
    entry = re.compile(r"^\.\. (?:auto\w+|py:\w+):: (\S+)$", re.M)
    for module, path in public_modules_from_files().items():
        text = (tmp_path / f"{module}.rst").read_text()
        entries = {
            n if n.startswith(module + ".") else f"{module}.{n}" for n in entry.findall(text)
        }
        for name in all_from_source(path):
            assert f"{module}.{name}" in entries, f"{module}.{name} has no API entry"
            assert f"<{module}.{name}>`" in text, f"{module}.{name} is not in the summary"
    index = (tmp_path / "index.rst").read_text()
    assert all(f"   {m}\n" in index for m in public_modules_from_files())


def test_the_reference_follows_all(tmp_path, monkeypatch):
    import graphbatch.lightning as gl

    monkeypatch.setattr(gl, "__all__", [])  # a trimmed __all__: its name leaves the reference
    apiref.write_pages(tmp_path)
    assert (
        "graphbatch.lightning.GraphDataModule"
        not in (tmp_path / "graphbatch.lightning.rst").read_text()
    )


def test_cli_reference_renders_the_real_parser():
    import cli_parser

    from graphbatch.cli import build_parser

    def unescape(text: str) -> str:  # and unwrapped: escapes change where lines wrap
        return " ".join(re.sub(r"\\([\\*`|_])", r"\1", text).split())

    real, shown = build_parser(), cli_parser.parser()
    assert unescape(shown.format_help()) == " ".join(real.format_help().split())
    sub = next(a for a in real._actions if a.dest == "command")
    shown_sub = next(a for a in shown._actions if a.dest == "command")
    assert list(shown_sub.choices) == list(sub.choices)
    for name, parser in sub.choices.items():
        assert unescape(shown_sub.choices[name].format_help()) == " ".join(
            parser.format_help().split()
        )
