"""The package's metadata states the framework versions it supports as ranges (issue 37): an
install of an extra never replaces the user's own torch, PyG or JAX build. Our own set-up
(the Makefile, which CI runs) installs the exact CPU build of torch first; every extra's range
must admit that pin, so the ``pip install -e .[all]`` after it keeps it. The lower bounds are
the oldest versions tested, and docs/installation.md states the same ones."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
#: Frameworks a user brings in a build of their own (CUDA, ROCm, TPU): ranges only.
FRAMEWORKS = frozenset({"torch", "torch-geometric", "jax", "jaxlib", "flax", "optax", "lightning"})


def framework_requirements() -> list[tuple[str, Requirement]]:
    """(extra, requirement) for every framework requirement of every extra in pyproject.toml."""
    with (ROOT / "pyproject.toml").open("rb") as fh:
        extras = tomllib.load(fh)["project"]["optional-dependencies"]
    return [
        (extra, req)
        for extra, reqs in extras.items()
        for req in map(Requirement, reqs)
        if canonicalize_name(req.name) in FRAMEWORKS
    ]


def makefile_pins(name: str) -> list[Version]:
    """Versions the Makefile installs ``name`` at exactly (``name==X``)."""
    text = (ROOT / "Makefile").read_text()
    return [Version(v) for v in re.findall(rf"(?<![\w-]){re.escape(name)}==([\w.+]+)", text)]


def test_the_frameworks_are_found():
    names = {canonicalize_name(req.name) for _, req in framework_requirements()}
    assert {"torch", "torch-geometric", "jax", "jaxlib", "flax"} <= names, names


@pytest.mark.parametrize(
    ("extra", "req"), framework_requirements(), ids=lambda x: x if isinstance(x, str) else str(x)
)
def test_no_framework_is_pinned_or_capped(extra, req):
    ops = {spec.operator for spec in req.specifier}
    assert not ops & {"==", "===", "<", "<="}, (
        f"extra {extra!r}: {req} pins or caps {req.name}; state the supported range "
        f"(>= the oldest tested version) and keep exact pins to the Makefile"
    )
    assert ">=" in ops, f"extra {extra!r}: {req} needs a lower bound (the oldest tested version)"


def test_the_setup_pin_satisfies_every_torch_range():
    pins = makefile_pins("torch")
    assert pins, "the Makefile installs no exact torch (the CPU build, installed first)"
    for extra, req in framework_requirements():
        if canonicalize_name(req.name) == "torch":
            for pin in pins:
                assert req.specifier.contains(pin, prereleases=True), (extra, str(req), pin)


def test_the_setup_installs_torch_before_the_extras():
    recipe = (ROOT / "Makefile").read_text().split("$(VENV)/.all:", 1)[1].split("\n\n", 1)[0]
    pin = recipe.find("torch==")
    extras = recipe.find('-e ".[all]"')
    assert 0 <= pin < extras, recipe


def test_the_installation_page_states_the_same_lower_bounds():
    text = (ROOT / "docs" / "installation.md").read_text()
    for extra, req in framework_requirements():
        for spec in req.specifier:
            if spec.operator == ">=":
                assert f"{req.name}>={spec.version}" in text, (extra, str(req))
