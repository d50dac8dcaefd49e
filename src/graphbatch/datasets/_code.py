"""Python code graphs in the ogbg-code2 style: one AST graph per function of a source tree.

Every ``def`` / ``async def`` (methods and nested functions included; a nested function also stays
part of its parent's graph) becomes a graph whose nodes are the function's AST nodes in DFS
pre-order (the order of `ast.iter_child_nodes`, which is ``ast.NodeVisitor``'s order; context
nodes such as ``Load`` included, as in OGB). Edges, in this order:

* type 0 -- AST edges parent -> child;
* type 1 -- next-token edges between consecutive *token* nodes in DFS order. A token node carries
  a source token: a ``name`` / ``arg`` / ``id`` / ``attr`` attribute or a non-``None`` constant
  (OGB's "attributed" nodes);
* with ``reverse_edges=True`` also types 2 and 3, the reversed AST and next-token edges
  (what OGB's code2 example adds with ``augment_edge``).

Node fields: ``node_type`` (index into `AST_NODE_TYPES`), ``node_depth`` (0 at the ``def``),
``is_token`` (0/1). Graph fields: ``file_index`` (into the sorted file list) and ``lineno``.
Sizes are heavy-tailed: most functions are small, a few are thousands of nodes.
"""

from __future__ import annotations

import ast
import os
import sysconfig
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from .._validate import as_nonnegative_int, as_positive_int
from ._graphs import GraphArrays

__all__ = [
    "AST_NODE_TYPES",
    "CODE_EDGE_TYPES",
    "code_graphs",
    "function_graph",
    "python_files",
    "source_graphs",
]

#: Names of all AST node classes of this Python, sorted; ``node_type`` indexes this tuple.
AST_NODE_TYPES: tuple[str, ...] = tuple(
    sorted(
        name
        for name, obj in vars(ast).items()
        if isinstance(obj, type) and issubclass(obj, ast.AST) and obj is not ast.AST
    )
)
_TYPE_INDEX = {name: i for i, name in enumerate(AST_NODE_TYPES)}

#: Edge types (``edge_type`` values index this tuple).
CODE_EDGE_TYPES = ("ast", "next_token", "ast_reverse", "next_token_reverse")

_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__"}
#: One parse at a time per process: CPython 3.11's ``ast.parse`` is not safe in concurrent
#: threads (a sharded build's thread workers raised "SystemError: AST constructor recursion
#: depth mismatch"), and ``warnings.catch_warnings`` changes process-wide state. Parsing holds
#: the GIL anyway, so threads lose no parallelism.
_PARSE_LOCK = threading.Lock()
_TOKEN_ATTRS = ("name", "arg", "id", "attr")


def _is_token(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value is not None
    return any(getattr(node, a, None) is not None for a in _TOKEN_ATTRS)


def function_graph(func: ast.AST, *, reverse_edges: bool = False) -> dict[str, np.ndarray]:
    """The AST graph of one node (normally a ``FunctionDef``): ``node_type``, ``node_depth``,
    ``is_token`` (``[n]``), ``edge_index`` (int64 ``[2, E]``) and ``edge_type`` (``[E]``)."""
    types: list[int] = []
    depth: list[int] = []
    parent: list[int] = []
    token: list[bool] = []
    stack = [(func, -1, 0)]
    while stack:
        node, up, d = stack.pop()
        types.append(_TYPE_INDEX.get(type(node).__name__, len(AST_NODE_TYPES)))
        parent.append(up)
        depth.append(d)
        token.append(_is_token(node))
        me = len(types) - 1
        stack.extend((c, me, d + 1) for c in reversed(list(ast.iter_child_nodes(node))))
    n = len(types)
    par = np.asarray(parent, dtype=np.int64)
    child = np.arange(1, n, dtype=np.int64)
    tok = np.flatnonzero(np.asarray(token, dtype=bool))
    src = [par[1:], tok[:-1]]
    dst = [child, tok[1:]]
    etype = [np.zeros(n - 1, np.int64), np.ones(max(tok.shape[0] - 1, 0), np.int64)]
    if reverse_edges:
        src, dst = src + dst, dst + src
        etype = [*etype, etype[0] + 2, etype[1] + 2]
    return {
        "node_type": np.asarray(types, dtype=np.int64),
        "node_depth": np.asarray(depth, dtype=np.int64),
        "is_token": np.asarray(token, dtype=np.int64),
        "edge_index": np.stack([np.concatenate(src), np.concatenate(dst)]),
        "edge_type": np.concatenate(etype),
    }


def python_files(root: str | os.PathLike | None = None) -> tuple[Path, list[Path]]:
    """``(root, files)``: every ``.py`` file under ``root`` (default: this Python's standard
    library), sorted, skipping ``site-packages``, ``dist-packages`` and ``__pycache__`` folders
    and anything that is not a regular file (a FIFO named ``x.py`` would block the build)."""
    root = Path(root) if root is not None else Path(sysconfig.get_path("stdlib"))
    if not root.is_dir():
        raise FileNotFoundError(f"source folder {str(root)!r} does not exist")
    files: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        files.extend(
            Path(dirpath) / f
            for f in sorted(filenames)  # regular files only: a
            # FIFO blocks
            if f.endswith(".py") and os.path.isfile(os.path.join(dirpath, f))
        )
    return root, sorted(files)


def source_graphs(source: str | bytes, *, reverse_edges: bool = False) -> list[tuple[int, dict]]:
    """``[(lineno, graph)]`` for every function in Python source (file order, DFS). Bytes are
    decoded by the parser (coding cookie, BOM)."""
    with _PARSE_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escape sequences etc. in old files
        tree = ast.parse(source)
    out = []
    for node in _walk_preorder(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append((node.lineno, function_graph(node, reverse_edges=reverse_edges)))
    return out


def _walk_preorder(tree: ast.AST) -> Iterator[ast.AST]:
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _pack(graphs: list[tuple[int, int, dict]]) -> GraphArrays:
    def cat(key: str, axis: int = 0) -> np.ndarray:
        return np.concatenate([g[key] for _, _, g in graphs], axis=axis)

    return GraphArrays(
        n_node=np.asarray([g["node_type"].shape[0] for _, _, g in graphs], np.int64),
        n_edge=np.asarray([g["edge_type"].shape[0] for _, _, g in graphs], np.int64),
        edge_index=cat("edge_index", axis=1).astype(np.int32),
        node={
            "node_type": cat("node_type").astype(np.int16),
            "node_depth": cat("node_depth").astype(np.int32),
            "is_token": cat("is_token").astype(np.uint8),
        },
        edge={"edge_type": cat("edge_type").astype(np.uint8)},
        graph={
            "file_index": np.asarray([f for f, _, _ in graphs], np.int32),
            "lineno": np.asarray([ln for _, ln, _ in graphs], np.int32),
        },
    )


def code_graphs(
    root: str | os.PathLike | None = None,
    *,
    limit: int | None = None,
    reverse_edges: bool = False,
    chunk_size: int = 4096,
    progress: bool = False,
    failures: list | None = None,
    files: list[Path] | None = None,
) -> Iterator[GraphArrays]:
    """Function AST graphs of every ``.py`` file under ``root`` (default: the standard library),
    in `GraphArrays` chunks of about ``chunk_size`` graphs, stopping after ``limit`` graphs.

    A file that cannot be read or parsed is skipped and ``(file_index, message)`` appended to
    ``failures``. Pass ``files`` (from `python_files`) to fix the file list.
    """
    chunk_size = as_positive_int(chunk_size, "chunk_size")
    if limit is not None:
        limit = as_nonnegative_int(limit, "limit")
    if files is None:
        _, files = python_files(root)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(files), unit="file", desc="functions -> AST graphs")
    pending: list[tuple[int, int, dict]] = []
    produced = 0
    try:
        for fi, path in enumerate(files):
            if limit is not None and produced >= limit:
                break
            try:
                found = source_graphs(path.read_bytes(), reverse_edges=reverse_edges)
            except (SyntaxError, ValueError, UnicodeDecodeError, RecursionError, OSError) as exc:
                if failures is not None:
                    failures.append((fi, f"{path}: {type(exc).__name__}: {exc}"))
                found = []
            if limit is not None:
                found = found[: limit - produced]
            produced += len(found)
            pending.extend((fi, ln, g) for ln, g in found)
            if bar is not None:
                bar.update(1)
            if len(pending) >= chunk_size:
                yield _pack(pending)
                pending = []
        if pending:
            yield _pack(pending)
    finally:
        if bar is not None:
            bar.close()
