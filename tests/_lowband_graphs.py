"""Graph fixtures for the low-bandwidth tests: random banded graphs and a tiny Python-AST builder.

The AST builder is a test stand-in (ogbg-code2 style: AST parent->child edges plus next-token
edges between consecutive leaves, each with a reverse type) used only where
``graphbatch.datasets`` has no code-graph builder; it is not part of the library.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

from graphbatch.lowband import EdgeGraphs


def random_banded(rng: np.random.Generator, n: int, band: int, n_edge: int,
                  num_edge_types: int = 2, shuffle: bool = True):
    """One graph with ``n`` nodes whose edges satisfy ``|i-j| <= band`` before the optional
    random relabelling. Returns ``(n, edge_index, edge_type)``."""
    if n == 0:
        return 0, np.zeros((2, 0), np.int64), np.zeros(0, np.int64)
    s = rng.integers(0, n, n_edge)
    r = np.clip(s + rng.integers(-band, band + 1, n_edge), 0, n - 1)
    if shuffle:
        relabel = rng.permutation(n)
        s, r = relabel[s], relabel[r]
    return n, np.stack([s, r]), rng.integers(0, num_edge_types, n_edge)


def random_collection(seed: int, count: int, max_nodes: int = 80, max_band: int = 12,
                      num_edge_types: int = 2, shuffle: bool = True) -> EdgeGraphs:
    rng = np.random.default_rng(seed)
    graphs = []
    for _ in range(count):
        n = int(rng.integers(1, max_nodes + 1))
        band = int(rng.integers(0, max_band + 1))
        graphs.append(random_banded(rng, n, band, int(rng.integers(0, 3 * n + 1)),
                                    num_edge_types, shuffle))
    g = EdgeGraphs.from_graphs(graphs, num_edge_types=num_edge_types)
    return g.replace(node_data={"x": rng.normal(size=(g.num_nodes, 3)),
                                "label": rng.integers(0, 5, g.num_nodes)})


def _ast_graph(root: ast.AST):
    kinds = sorted(n for n in dir(ast) if isinstance(getattr(ast, n), type)
                   and issubclass(getattr(ast, n), ast.AST))
    kind_id = {k: i for i, k in enumerate(kinds)}
    types, parent_child, leaves = [], [], []

    def visit(node, parent):
        me = len(types)
        types.append(kind_id.get(type(node).__name__, 0))
        if parent >= 0:
            parent_child.append((parent, me))
        children = list(ast.iter_child_nodes(node))
        if not children:
            leaves.append(me)
        for c in children:
            visit(c, me)

    visit(root, -1)
    pc = np.asarray(parent_child, np.int64).reshape(-1, 2).T
    nt = np.asarray(list(zip(leaves[:-1], leaves[1:])), np.int64).reshape(-1, 2).T
    ei = np.concatenate([pc, nt, pc[::-1], nt[::-1]], axis=1)
    et = np.repeat(np.arange(4), [pc.shape[1], nt.shape[1], pc.shape[1], nt.shape[1]])
    return len(types), ei, et, np.asarray(types, np.int64)


def code_graphs(source_dir: str | Path, limit: int = 200, min_nodes: int = 1) -> EdgeGraphs:
    """Function-level AST graphs (4 edge types) of the ``.py`` files under ``source_dir``."""
    graphs, node_types = [], []
    for path in sorted(Path(source_dir).rglob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except (SyntaxError, ValueError, RecursionError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n, ei, et, nt = _ast_graph(node)
                if n >= min_nodes:
                    graphs.append((n, ei, et))
                    node_types.append(nt)
                if len(graphs) >= limit:
                    break
        if len(graphs) >= limit:
            break
    g = EdgeGraphs.from_graphs(graphs, num_edge_types=4)
    return g.replace(node_data={"node_type": np.concatenate(node_types)})
