"""ogbg-code2-style AST graphs: a tiny function checked by hand, and a folder walk."""

from __future__ import annotations

import ast

import numpy as np

from graphbatch.datasets import AST_NODE_TYPES, code_graphs, function_graph, python_files

SOURCE = "def f(x):\n    return x + 1\n"


def test_tiny_function_by_hand():
    g = function_graph(ast.parse(SOURCE).body[0])
    names = [AST_NODE_TYPES[t] for t in g["node_type"]]
    assert names == [
        "FunctionDef",
        "arguments",
        "arg",
        "Return",
        "BinOp",
        "Name",
        "Load",
        "Add",
        "Constant",
    ]
    assert g["node_depth"].tolist() == [0, 1, 2, 1, 2, 3, 4, 3, 3]
    assert g["is_token"].tolist() == [1, 0, 1, 0, 0, 1, 0, 0, 1]  # f, x, x, 1
    ast_edges = [(0, 1), (1, 2), (0, 3), (3, 4), (4, 5), (5, 6), (4, 7), (4, 8)]
    next_token = [(0, 2), (2, 5), (5, 8)]
    assert list(map(tuple, g["edge_index"].T.tolist())) == ast_edges + next_token
    assert g["edge_type"].tolist() == [0] * 8 + [1] * 3


def test_reverse_edges_mirror_forward_edges():
    fwd = function_graph(ast.parse(SOURCE).body[0])
    both = function_graph(ast.parse(SOURCE).body[0], reverse_edges=True)
    e = fwd["edge_index"].shape[1]
    np.testing.assert_array_equal(both["edge_index"][:, :e], fwd["edge_index"])
    np.testing.assert_array_equal(both["edge_index"][:, e:], fwd["edge_index"][::-1])
    assert both["edge_type"][e:].tolist() == (fwd["edge_type"] + 2).tolist()


def test_folder_walk_counts_functions_and_reports_failures(tmp_path):
    (tmp_path / "a.py").write_text(
        "class C:\n    def m(self):\n        def inner():\n            pass\n        return 1\n"
        "async def g():\n    await h()\n"
    )
    (tmp_path / "broken.py").write_text("def oops(:\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "b.py").write_text("x = 1\n\ndef k(a, b=2):\n    return a * b\n")
    (tmp_path / "site-packages").mkdir()
    (tmp_path / "site-packages" / "skip.py").write_text("def no(): pass\n")
    _, files = python_files(tmp_path)
    assert [f.relative_to(tmp_path).as_posix() for f in files] == ["a.py", "broken.py", "pkg/b.py"]
    failures: list = []
    parts = list(code_graphs(files=files, failures=failures, chunk_size=2))
    assert [i for i, _ in failures] == [1] and "broken.py" in failures[0][1]
    lineno = np.concatenate([p.graph["lineno"] for p in parts]).tolist()
    file_index = np.concatenate([p.graph["file_index"] for p in parts]).tolist()
    # m, inner, g, k
    assert list(zip(file_index, lineno, strict=True)) == [(0, 2), (0, 3), (0, 6), (2, 3)]
    n_node = np.concatenate([p.n_node for p in parts])
    # each graph's node count equals ast.walk over that def (an independent traversal)
    tree = ast.parse((tmp_path / "a.py").read_text())
    defs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    by_line = {d.lineno: sum(1 for _ in ast.walk(d)) for d in defs}
    assert n_node[:3].tolist() == [by_line[2], by_line[3], by_line[6]]
    limited = list(code_graphs(files=files, limit=2))
    assert sum(len(p) for p in limited) == 2
