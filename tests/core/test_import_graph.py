"""The import graph of ``src/graphbatch``, read with ``ast`` (nothing is imported): no import
cycles and no imports of another package's private modules.

Every import counts: module level, inside functions, under ``try``, relative and absolute,
and ``importlib.import_module`` calls (a literal argument is resolved; a computed one counts
as importing every module named by a string constant at the importing module's top level, an
over-approximation that cannot miss a lazy import table). A lookup of a module of the tree in
``sys.modules`` by a literal name -- ``sys.modules.get("graphbatch.x")``,
``sys.modules["graphbatch.x"]``, ``"graphbatch.x" in sys.modules`` -- counts as importing it:
the code depends on that module as surely as an import, it just finds it already loaded. A
cycle closed only by an import inside a function is still a cycle: the function just delays it
to the first call. Imports under ``if TYPE_CHECKING:`` never run (they name types for
annotations), so they count for the privacy rule but not for cycles.

The privacy rule: a module is private when a component of its dotted name after
``graphbatch`` starts with one underscore (``graphbatch.datasets._store``); it belongs to the
package that contains that component (``graphbatch.datasets``) and may be imported only from
modules inside that package (``graphbatch.datasets``, ``graphbatch.datasets._x``, and
subpackages such as ``graphbatch.jax.models`` for ``graphbatch.jax._collate``). So the
top-level private modules (``graphbatch._errors``, ``graphbatch._io``, ...) are the core and
every subpackage may import them; a subpackage's private modules are its own. Importing a
private *name* (``from graphbatch.x import _helper``) from another package counts the same.
Tests are outside the rule (they may import internals by path).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
ROOT = "graphbatch"

# TEMPORARY, removed by the lead when branch `kern` (which restructures planners/ and packing/)
# is merged: the private imports that remain at the boundary of src/graphbatch/planners/ and
# packing/, as (importing module, imported module). Every entry has planners or packing on one
# side; nothing else may be listed, and every entry must still occur (`test_allowlist_is_exact`).
ALLOWED_PRIVATE: frozenset[tuple[str, str]] = frozenset()  # none: the restructuring is done
ALLOWED_CYCLES: frozenset[frozenset[str]] = frozenset()
ALLOWLISTED_PACKAGES = ("graphbatch.planners", "graphbatch.packing")


@dataclass(frozen=True)
class Edge:
    """``importer`` imports ``target`` (a module of the tree) at ``line``; ``name`` is a private
    attribute taken from ``target`` (``from target import _name``), else empty."""

    importer: str
    target: str
    line: int
    name: str = ""
    type_only: bool = False  # under ``if TYPE_CHECKING:``: never runs


def _type_checking_lines(tree: ast.AST) -> set[int]:
    """Line numbers of the statements inside ``if TYPE_CHECKING:`` blocks."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (
            (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
            or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")
        ):
            for stmt in node.body:
                lines.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    return lines


def module_names(root: Path, package: str = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file under ``root/package``."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_package(name: str, modules: dict[str, Path]) -> bool:
    return modules[name].name == "__init__.py"


def _resolve_relative(
    importer: str, level: int, module: str | None, modules: dict[str, Path]
) -> str:
    package = importer if _is_package(importer, modules) else importer.rpartition(".")[0]
    for _ in range(level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{module}" if module else package


def _nearest_module(name: str, modules: dict[str, Path]) -> str | None:
    """``name`` itself if it is a module of the tree, else its longest prefix that is."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _string_constants(tree: ast.Module) -> set[str]:
    """String constants in the module's top-level assignments (lazy import tables)."""
    out = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            out.update(
                n.value
                for n in ast.walk(stmt.value)
                if isinstance(n, ast.Constant) and isinstance(n.value, str)
            )
    return out


def _dynamic_targets(
    importer: str, call: ast.Call, constants: set[str], modules: dict[str, Path]
) -> set[str]:
    """Modules an ``importlib.import_module(...)`` call may import."""
    if not call.args:
        return set()
    first = call.args[0]
    candidates = (
        {first.value}
        if isinstance(first, ast.Constant) and isinstance(first.value, str)
        else constants
    )
    package = importer if _is_package(importer, modules) else importer.rpartition(".")[0]
    out = set()
    for text in candidates:
        if text.startswith("."):
            level = len(text) - len(text.lstrip("."))
            name = _resolve_relative(importer, level, text.lstrip(".") or None, modules)
        elif text.split(".")[0] == ROOT:
            name = text
        else:  # f"{__name__}.{name}": a submodule named by a bare string
            name = f"{package}.{text}"
        if name in modules:
            out.add(name)
    return out


def _is_sys_modules(node: ast.AST) -> bool:
    """Whether ``node`` is the expression ``sys.modules``."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "modules"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    )


def _sys_modules_name(node: ast.AST) -> str | None:
    """The literal module name that ``node`` looks up in ``sys.modules`` (``.get(name, ...)``,
    ``[name]``, ``name in``/``not in``), else None."""
    key: ast.AST | None = None
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("get", "pop", "setdefault")
        and _is_sys_modules(node.func.value)
        and node.args
    ):
        key = node.args[0]
    elif isinstance(node, ast.Subscript) and _is_sys_modules(node.value):
        key = node.slice
    elif (
        isinstance(node, ast.Compare)
        and len(node.ops) == 1
        and isinstance(node.ops[0], (ast.In, ast.NotIn))
        and _is_sys_modules(node.comparators[0])
    ):
        key = node.left
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
        return key.value
    return None


def _is_import_module(call: ast.Call) -> bool:
    func = call.func
    return (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
        isinstance(func, ast.Name) and func.id == "import_module"
    )


def import_edges(root: Path, package: str = ROOT) -> list[Edge]:
    """Every import between modules of ``root/package``, with the importer's line."""
    modules = module_names(root, package)
    edges = []
    for importer, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        constants = _string_constants(tree)
        typing_only = _type_checking_lines(tree)
        first = len(edges)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = _nearest_module(alias.name, modules)
                    if target:
                        edges.append(Edge(importer, target, node.lineno))
            elif isinstance(node, ast.ImportFrom):
                base = (
                    _resolve_relative(importer, node.level, node.module, modules)
                    if node.level
                    else node.module or ""
                )
                if base.split(".")[0] != package:
                    continue
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    if sub in modules:
                        edges.append(Edge(importer, sub, node.lineno))
                        continue
                    target = _nearest_module(base, modules)
                    if target:
                        private = alias.name.startswith("_") and not alias.name.startswith("__")
                        edges.append(
                            Edge(importer, target, node.lineno, alias.name if private else "")
                        )
            elif isinstance(node, ast.Call) and _is_import_module(node):
                for target in sorted(_dynamic_targets(importer, node, constants, modules)):
                    edges.append(Edge(importer, target, node.lineno))
            looked_up = _sys_modules_name(node)
            if looked_up is not None and looked_up in modules:
                edges.append(Edge(importer, looked_up, node.lineno))
        edges[first:] = [
            Edge(e.importer, e.target, e.line, e.name, e.line in typing_only) for e in edges[first:]
        ]
    return [e for e in edges if e.importer != e.target]


def private_owner(module: str) -> str | None:
    """The package that owns ``module`` if it is private, else None."""
    parts = module.split(".")
    for i, part in enumerate(parts[1:], start=1):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def packages(root: Path, package: str = ROOT) -> set[str]:
    """The modules of the tree that are packages."""
    modules = module_names(root, package)
    return {m for m in modules if _is_package(m, modules)}


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def private_imports(edges: list[Edge], packages: set[str]) -> list[Edge]:
    """Edges that take another package's private module (or private name); ``packages`` are
    the modules of the tree that are packages (a private name of a public module belongs to
    the package the module is in, or to the package itself)."""
    bad = []
    for e in edges:
        owner = private_owner(e.target)
        if owner is None and e.name:
            owner = e.target if e.target in packages else e.target.rpartition(".")[0]
        if owner is not None and not _inside(e.importer, owner):
            bad.append(e)
    return bad


def cycles(edges: list[Edge]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative), each
    sorted, in sorted order."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        if e.type_only:  # never runs: cannot close a cycle
            continue
        graph.setdefault(e.importer, set()).add(e.target)
        graph.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        comp.append(top)
                        if top == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return sorted(out)


def describe_cycle(component: list[str], edges: list[Edge]) -> str:
    """The component and the imports inside it, as 'importer:line -> target' lines."""
    members = set(component)
    inner = sorted(
        {
            (e.importer, e.line, e.target)
            for e in edges
            if e.importer in members and e.target in members
        }
    )
    lines = [f"  {imp}:{line} imports {tgt}" for imp, line, tgt in inner]
    return "import cycle between " + ", ".join(component) + ":\n" + "\n".join(lines)


def describe_private(e: Edge) -> str:
    what = f"{e.target}.{e.name}" if e.name else e.target
    return f"{e.importer}:{e.line} imports private {what} from outside its package"


def check(
    root: Path,
    package: str = ROOT,
    allowed_private: frozenset[tuple[str, str]] = frozenset(),
    allowed_cycles: frozenset[frozenset[str]] = frozenset(),
) -> list[str]:
    """One message per cycle and per private import not allowlisted."""
    edges = import_edges(root, package)
    messages = [
        describe_cycle(c, edges) for c in cycles(edges) if frozenset(c) not in allowed_cycles
    ]
    bad = {
        e
        for e in private_imports(edges, packages(root, package))
        if (e.importer, e.target) not in allowed_private
    }
    messages += [describe_private(e) for e in sorted(bad, key=lambda e: (e.importer, e.line))]
    return messages


def test_no_import_cycles_and_no_foreign_private_imports():
    messages = check(SRC, ROOT, ALLOWED_PRIVATE, ALLOWED_CYCLES)
    assert not messages, "\n".join(messages)


def test_allowlist_is_exact():
    """The allowlist names only planners/packing modules and only violations that exist."""
    for importer, target in ALLOWED_PRIVATE:
        assert importer.startswith(ALLOWLISTED_PACKAGES) or target.startswith(
            ALLOWLISTED_PACKAGES
        ), (importer, target)
    for comp in ALLOWED_CYCLES:
        assert any(m.startswith(ALLOWLISTED_PACKAGES) for m in comp), sorted(comp)
    edges = import_edges(SRC)
    found_private = {(e.importer, e.target) for e in private_imports(edges, packages(SRC))}
    assert found_private >= ALLOWED_PRIVATE, sorted(ALLOWED_PRIVATE - found_private)
    found_cycles = {frozenset(c) for c in cycles(edges)}
    assert found_cycles >= ALLOWED_CYCLES, [sorted(c) for c in ALLOWED_CYCLES - found_cycles]


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_checker_catches_a_cycle_closed_inside_a_function(tmp_path):
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from .b import f\n",
            "pkg/b.py": "def f():\n    from pkg import a\n    return a\n",
            "pkg/c.py": "import pkg.a\n",
        },
    )
    messages = check(tmp_path, "pkg")
    assert len(messages) == 1, messages
    assert "import cycle between pkg.a, pkg.b" in messages[0]
    assert "pkg.a:1 imports pkg.b" in messages[0]
    assert "pkg.b:2 imports pkg.a" in messages[0]


def test_checker_catches_a_cycle_through_import_module(tmp_path):
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "import importlib\n_LAZY = {'f': '.b'}\n"
            "def g(n):\n    return importlib.import_module(_LAZY[n], __package__)\n",
            "pkg/b.py": "from pkg.a import g\n",
        },
    )
    messages = check(tmp_path, "pkg")
    assert len(messages) == 1 and "pkg.a, pkg.b" in messages[0], messages


def test_checker_counts_sys_modules_lookups_as_imports(tmp_path):
    """``sys.modules.get("pkg.x")``, ``sys.modules["pkg.x"]`` and ``"pkg.x" in sys.modules``
    with a literal name are imports of ``pkg.x``: they close cycles and break the privacy
    rule; a name outside the tree (``"torch"``) or a computed one is not an edge."""
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from .b import f\n",
            "pkg/b.py": "import sys\n\ndef f():\n    return sys.modules.get('pkg.a')\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/_impl.py": "Y = 1\n",
            "pkg/c.py": "import sys\n\ndef g():\n    return sys.modules['pkg.sub._impl'].Y\n",
            "pkg/d.py": "import sys\n\ndef h():\n    return 'pkg.sub._impl' in sys.modules\n",
            "pkg/e.py": "import sys\n\ndef k(n):\n"
            "    return sys.modules.get('torch'), sys.modules.get(n), sys.modules\n",
        },
    )
    edges = import_edges(tmp_path, "pkg")
    assert {(e.importer, e.target, e.line) for e in edges} >= {
        ("pkg.b", "pkg.a", 4),
        ("pkg.c", "pkg.sub._impl", 4),
        ("pkg.d", "pkg.sub._impl", 4),
    }
    assert not [e for e in edges if e.importer == "pkg.e"]
    messages = check(tmp_path, "pkg")  # cycles first, then private imports by importer
    assert len(messages) == 3, messages
    assert messages[0].startswith("import cycle between pkg.a, pkg.b")
    assert "pkg.b:4 imports pkg.a" in messages[0]
    assert messages[1:] == [
        "pkg.c:4 imports private pkg.sub._impl from outside its package",
        "pkg.d:4 imports private pkg.sub._impl from outside its package",
    ]


def test_checker_catches_private_imports(tmp_path):
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/_core.py": "X = 1\n",
            "pkg/sub/__init__.py": "from ._impl import Y\n",
            "pkg/sub/_impl.py": "from .._core import X\nY = X\n",
            "pkg/sub/inner/__init__.py": "from .._impl import Y\n",
            "pkg/other/__init__.py": "",
            "pkg/other/_use.py": "import os\n\ndef f():\n"
            "    from pkg.sub._impl import Y\n    return Y\n",
            "pkg/other/_rel.py": "from ..sub import _impl\n",
            "pkg/other/_name.py": "from pkg.sub import _hidden\n",
        },
    )
    messages = check(tmp_path, "pkg")
    assert sorted(messages) == [
        "pkg.other._name:1 imports private pkg.sub._hidden from outside its package",
        "pkg.other._rel:1 imports private pkg.sub._impl from outside its package",
        "pkg.other._use:4 imports private pkg.sub._impl from outside its package",
    ]
    # the allowlist silences exactly what it names
    assert len(check(tmp_path, "pkg", frozenset({("pkg.other._use", "pkg.sub._impl")}))) == 2


@pytest.mark.parametrize(
    "module, owner",
    [
        ("graphbatch._io", "graphbatch"),
        ("graphbatch.datasets._store", "graphbatch.datasets"),
        ("graphbatch.jax.models._ops", "graphbatch.jax.models"),
        ("graphbatch.torch", None),
        ("graphbatch.cli.__main__", None),
    ],
)
def test_private_owner(module, owner):
    assert private_owner(module) == owner


def test_type_checking_imports_close_no_cycle_but_stay_private(tmp_path):
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from .b import f\n",
            "pkg/b.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                "    from pkg.a import g\ndef f():\n    return 1\n"
            ),
            "pkg/sub/__init__.py": "",
            "pkg/sub/_impl.py": "Y = 1\n",
            "pkg/c.py": (
                "import typing\nif typing.TYPE_CHECKING:\n    from pkg.sub._impl import Y\n"
            ),
        },
    )
    messages = check(tmp_path, "pkg")
    assert len(messages) == 1, messages
    assert "pkg.c:3 imports private pkg.sub._impl" in messages[0]
