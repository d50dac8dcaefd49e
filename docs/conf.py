"""Sphinx configuration: the graphbatch documentation site (`make docs`).

Sphinx + MyST reads the Markdown pages in docs/ as they are (their paths stay, tests and other
pages link to them); autodoc + napoleon document every public name from its docstring (pages
generated from each public module's ``__all__`` by ``_ext/apiref.py``); sphinx-argparse renders
the CLI reference from ``graphbatch.cli.build_parser`` at build time; furo is the theme.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

import graphbatch  # noqa: E402  (the installed package: `make docs` installs it editable)

project = "graphbatch"
author = "the graphbatch developers"
copyright = "the graphbatch developers; Apache-2.0"
release = graphbatch.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinxarg.ext",
    "apiref",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "Thumbs.db", ".DS_Store"]

# MyST: GitHub-style anchors for links to headings (`page.md#a-heading`), ::: fences.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]

# autodoc: members in source order, signatures with their type hints; napoleon reads the
# Google-style Args/Returns/Raises sections some docstrings use.
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"exclude-members": "__init__, __new__"}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

# No network at build time (CI reaches only package registries): no intersphinx.
html_theme = "furo"
html_title = f"graphbatch {release}"
html_static_path: list[str] = []
pygments_style = "sphinx"
