"""`EdgeGraphs` from the datasets layer: an ``.h5`` graph store or Python sources (code graphs).

Both go through ``graphbatch.datasets`` (its store reader and its ogbg-code2-style AST graphs);
this module only converts their arrays, it builds no graphs of its own.
"""

from __future__ import annotations

from pathlib import Path

from ._graphs import EdgeGraphs

__all__ = ["graphs_from_python", "graphs_from_store"]


def _datasets():
    try:
        from .. import datasets
    except ImportError as exc:
        raise ValueError("reading .h5 stores and .py sources needs graphbatch.datasets, which "
                         "this installation lacks; give an EdgeGraphs .npz instead") from exc
    return datasets


def graphs_from_store(path: str | Path) -> EdgeGraphs:
    """All graphs of an HDF5 store written by ``graphbatch data build``."""
    _datasets()
    raise ValueError("this graphbatch.datasets has no graph store reader")


def graphs_from_python(path: str | Path, limit: int | None = None) -> EdgeGraphs:
    """Function-level code graphs of the ``.py`` files under ``path``."""
    _datasets()
    raise ValueError("this graphbatch.datasets has no Python code-graph builder")
