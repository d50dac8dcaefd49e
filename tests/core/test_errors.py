"""One error hierarchy: every exception class graphbatch defines derives from `GraphbatchError`
(keeping the built-in base users catch: ``ValueError``, ``TypeError``, ``RuntimeError``), the
public ones are exported from ``graphbatch`` itself, and library code outside planners/ and
packing/ raises its own errors, never a bare ``ValueError``/``TypeError``.

Warnings (``StoreFormatWarning``, a ``UserWarning``) are not errors and stay outside the
hierarchy, and so does control flow that must pass ``except Exception`` (the CLI's SIGTERM
unwinding, a ``SystemExit``): the rule covers the subclasses of ``Exception``. Every module is
imported, so this needs the whole environment (``make test``).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import graphbatch as gb

pytest.importorskip("torch")
pytest.importorskip("torch_geometric")
pytest.importorskip("jax")

SRC = Path(gb.__file__).resolve().parent

# TEMPORARY, removed by the lead when branch `kern` (restructuring planners/ and packing/) is
# merged: those two packages still raise bare ValueError/TypeError there.
BARE_RAISES_ALLOWED_IN: tuple[str, ...] = ()  # none


def all_modules() -> list[str]:
    """Every module of the package except ``__main__`` entry points (they run on import)."""
    names = ["graphbatch"]
    for info in pkgutil.walk_packages(gb.__path__, "graphbatch."):
        if info.name.rsplit(".", 1)[-1] != "__main__":
            names.append(info.name)
    return names


def exception_classes() -> dict[str, type]:
    """``module.Class`` -> class, for every ``Exception`` subclass defined in the package."""
    found = {}
    for name in all_modules():
        module = importlib.import_module(name)
        for attr, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, Exception) and obj.__module__ == name:
                found[f"{name}.{attr}"] = obj
    return found


def public_names() -> dict[str, object]:
    """``module.name`` -> object for every name of every public module's ``__all__``."""
    out = {}
    for name in all_modules():
        if any(part.startswith("_") for part in name.split(".")):
            continue
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", ()):
            out[f"{name}.{attr}"] = getattr(module, attr)
    return out


def test_every_exception_class_derives_from_graphbatch_error():
    classes = exception_classes()
    assert "graphbatch._errors.StoreFormatError" in classes  # the walk found the package's own
    assert len(classes) >= 10, sorted(classes)
    outside = [
        name for name, cls in classes.items() if not issubclass(cls, (gb.GraphbatchError, Warning))
    ]
    assert not outside, f"exception classes outside the GraphbatchError hierarchy: {outside}"


@pytest.mark.parametrize(
    "cls, builtin",
    [
        (gb.InputError, ValueError),
        (gb.InputTypeError, TypeError),
        (gb.UnknownNameError, ValueError),
        (gb.StoreFormatError, ValueError),
        (gb.AtomsInputError, ValueError),
        (gb.PlanMismatchError, RuntimeError),
        (gb.ShardBuildError, RuntimeError),
        (gb.BuildCancelled, RuntimeError),
    ],
)
def test_errors_keep_their_builtin_base(cls, builtin):
    assert issubclass(cls, gb.GraphbatchError) and issubclass(cls, builtin)


def test_public_errors_are_exported_from_graphbatch():
    public_errors = {
        name: obj
        for name, obj in public_names().items()
        if inspect.isclass(obj) and issubclass(obj, gb.GraphbatchError)
    }
    assert "graphbatch.datasets.StoreFormatError" in public_errors
    missing = [
        name
        for name, obj in public_errors.items()
        if getattr(gb, obj.__name__, None) is not obj or obj.__name__ not in gb.__all__
    ]
    assert not missing, f"public errors not exported from graphbatch: {missing}"


def bare_raises(root: Path) -> list[str]:
    """``file:line`` of every ``raise ValueError(...)``/``raise TypeError(...)`` under ``root``."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] in BARE_RAISES_ALLOWED_IN:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            exc = node.exc if isinstance(node, ast.Raise) else None
            if isinstance(exc, ast.Call):
                exc = exc.func
            if isinstance(exc, ast.Name) and exc.id in ("ValueError", "TypeError"):
                out.append(f"{rel}:{node.lineno} raises {exc.id}")
    return out


def test_library_raises_its_own_errors():
    bad = bare_raises(SRC)
    assert not bad, "bare ValueError/TypeError (use InputError/InputTypeError):\n" + "\n".join(bad)


def test_bare_raise_check_finds_one(tmp_path):
    (tmp_path / "mod.py").write_text("def f(x):\n    if x:\n        raise ValueError(x)\n")
    (tmp_path / "ok.py").write_text("from e import InputError\nraise InputError('x')\n")
    assert bare_raises(tmp_path) == ["mod.py:3 raises ValueError"]
