"""The API reference, generated from the public modules' ``__all__`` when Sphinx starts.

A public module is ``graphbatch`` or any module or package below it with no path component
starting with ``_``; each must define ``__all__``. Its page, ``api/<module>.rst``, has the
module docstring, a summary table and one entry per name of ``__all__``: autodoc for classes,
exceptions and functions, a ``py:data`` entry (value and ``#:`` comment) for other objects.
An object already documented under another public name (a re-export, e.g.
``graphbatch.get_strategy`` and ``graphbatch.planners.get_strategy``) gets a short entry that
points to its first one. Pages are rewritten on every build, so trimming or growing an
``__all__`` changes the reference with no edit here.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
from pathlib import Path
from typing import Any

PACKAGE = "graphbatch"
#: Longest ``repr`` shown as a data entry's value.
MAX_VALUE = 100


def public_modules(package: str = PACKAGE) -> list[str]:
    """``package`` and every module below it whose dotted path has no ``_`` component, in
    walk order (packages before their contents)."""
    root = importlib.import_module(package)
    names = [package]
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.append(info.name)
    return names


def public_names(module: str) -> list[str]:
    """The module's ``__all__`` (a ``ValueError`` when it has none)."""
    mod = importlib.import_module(module)
    names = getattr(mod, "__all__", None)
    if names is None:
        raise ValueError(f"public module {module} has no __all__")
    return list(names)


def _kind(obj: Any) -> str:
    if inspect.isclass(obj):
        return "exception" if issubclass(obj, BaseException) else "class"
    if inspect.ismodule(obj):
        return "module"
    if callable(obj):
        return "function"
    return "data"


def _attribute_docs() -> dict[tuple[str, str], list[str]]:
    """``(module, name) -> lines`` of every ``#:`` comment (or docstring after an assignment)
    in the package's modules."""
    from sphinx.pycode import ModuleAnalyzer

    docs: dict[tuple[str, str], list[str]] = {}
    for name, mod in list(sys.modules.items()):
        if not (name == PACKAGE or name.startswith(PACKAGE + ".")) or mod is None:
            continue
        try:
            found = ModuleAnalyzer.for_module(name).find_attr_docs()
        except Exception:  # a module without source (none today): no comments to read
            continue
        for (scope, attr), lines in found.items():
            if scope == "":
                docs[(name, attr)] = list(lines)
    return docs


def _data_doc(obj: Any, name: str, docs: dict[tuple[str, str], list[str]]) -> list[str]:
    """The ``#:`` comment of the module that defines ``name`` as ``obj``."""
    for (modname, attr), lines in docs.items():
        if attr == name and getattr(sys.modules.get(modname), name, None) is obj:
            return lines
    return []


def _summary(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.strip().split("\n\n")[0].replace("\n", " ") if doc else ""


def page(module: str, first_seen: dict[int, str], docs: dict[tuple[str, str], list[str]]) -> str:
    """The reST page of ``module``; ``first_seen`` maps ``id(obj)`` to the public name that
    documents it (updated)."""
    mod = importlib.import_module(module)
    names = public_names(module)
    title = f"``{module}``"
    # manual entries (py:data, re-exports) take names relative to this py:module; autodoc
    # directives take full names
    out = [f".. _api-{module}:", "", title, "=" * len(title), "", f".. py:module:: {module}", ""]
    doc = inspect.getdoc(mod)
    if doc:
        out += [doc, ""]
    out += [".. list-table::", "   :widths: 30 70", ""]
    for name in names:
        summary = _summary(getattr(mod, name)) if _kind(getattr(mod, name)) != "data" else ""
        out += [f"   * - :py:obj:`{name} <{module}.{name}>`", f"     - {summary}".rstrip()]
    out.append("")
    for name in names:
        obj = getattr(mod, name)
        full = f"{module}.{name}"
        kind = _kind(obj)
        seen = first_seen.get(id(obj)) if kind != "data" else None
        if kind == "module":
            out += [f".. py:data:: {name}", "", f"   The module :py:mod:`{obj.__name__}`.", ""]
        elif seen is not None:
            directive = {"exception": "py:exception", "class": "py:class"}.get(kind, "py:function")
            out += [f".. {directive}:: {name}", "", f"   The same object as :py:obj:`{seen}`."]
            summary = _summary(obj)
            out += ([f"   {summary}"] if summary else []) + [""]
        elif kind in ("class", "exception"):
            out += [f".. auto{kind}:: {full}", "   :members:", "   :show-inheritance:", ""]
            first_seen[id(obj)] = full
        elif kind == "function":
            out += [f".. autofunction:: {full}", ""]
            first_seen[id(obj)] = full
        else:
            value = repr(obj)
            out += [f".. py:data:: {name}"]
            if len(value) <= MAX_VALUE and "\n" not in value:
                out += [f"   :value: {value}"]
            else:
                out += [
                    f"   :type: {type(obj).__module__}.{type(obj).__qualname__}".replace(
                        "builtins.", ""
                    )
                ]
            out.append("")
            out += [f"   {line}" if line else "" for line in _data_doc(obj, name, docs)]
            out.append("")
    return "\n".join(out) + "\n"


def write_pages(outdir: Path) -> list[str]:
    """Write ``api/<module>.rst`` for every public module and ``api/index.rst``; returns the
    modules."""
    outdir.mkdir(parents=True, exist_ok=True)
    modules = public_modules()
    for m in modules:
        importlib.import_module(m)
    docs = _attribute_docs()
    first_seen: dict[int, str] = {}
    for m in modules:
        _write_if_changed(outdir / f"{m}.rst", page(m, first_seen, docs))
    index = [
        "API reference",
        "=============",
        "",
        "Every public name: each public module's ``__all__``, documented from its "
        "docstrings. Modules and names that start with ``_`` are internal.",
        "",
        ".. toctree::",
        "   :maxdepth: 1",
        "",
    ]
    index += [f"   {m}" for m in modules]
    _write_if_changed(outdir / "index.rst", "\n".join(index) + "\n")
    for stale in outdir.glob("*.rst"):
        if stale.stem not in modules and stale.name != "index.rst":
            stale.unlink()
    return modules


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def _generate(app: Any) -> None:
    write_pages(Path(app.srcdir) / "api")


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", _generate)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":  # python docs/_ext/apiref.py OUTDIR
    print("\n".join(write_pages(Path(sys.argv[1]))))
