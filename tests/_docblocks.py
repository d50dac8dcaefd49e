"""The doc-test harness: every ```` ```python ```` block of README.md and docs/*.md, run as written.

A block runs on its own in a fresh interpreter (``python block.py`` in an empty folder, with the
environment the test session started with -- nothing a library set in the pytest process, such
as mace-torch's ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD``, leaks into it). An HTML comment on the line
before a block's fence changes that (the convention README.md states)::

    <!-- doc-test: fragment: `dataset` and `model` are yours -->   not run (a reason is required)
    <!-- doc-test: not run: builds 100,000 molecules (minutes) -->  not run (a reason is required)
    <!-- doc-test: continues -->     run after the blocks before it in the same file (one script)
    <!-- doc-test: env XLA_FLAGS=--xla_force_host_platform_device_count=2 -->   environment
    <!-- doc-test: requires mace, h5py -->   skipped (not failed) without these modules

Directives combine with ``;`` (a ``fragment``/``not run`` reason, which may hold ``;``, comes
last). The modules a block imports are required too (found with ``ast``,
``graphbatch.torch``/``.jax``/``.atomistic``/``.datasets`` count as their frameworks).
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The environment of the test session when this module was imported (conftest imports it first).
START_ENV = dict(os.environ)
DOCS = ("README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))
_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
_MARK = re.compile(r"<!--\s*doc-test:(.*?)-->\s*$", re.S)
#: Modules a block needs when it imports these graphbatch subpackages.
_SUBPACKAGE_NEEDS = {
    "graphbatch.torch": ("torch", "torch_geometric"),
    "graphbatch.jax": ("jax", "jraph"),
    "graphbatch.atomistic": ("torch", "torch_geometric"),
    "graphbatch.lowband.nn": ("torch",),
}
_KEYWORDS = ("fragment", "not run", "continues", "env", "requires", "timeout")
#: graphbatch's optional dependencies (its extras and what they pull in): a block that fails
#: because one of these cannot be imported is skipped, not failed (any other missing module,
#: e.g. a misspelt one, fails).
OPTIONAL = frozenset(
    {
        "torch",
        "torch_geometric",
        "jax",
        "jaxlib",
        "jraph",
        "flax",
        "optax",
        "h5py",
        "tqdm",
        "rdkit",
        "matplotlib",
        "psutil",
        "lightning",
        "ogb",
        "mace",
        "e3nn",
        "dask",
        "distributed",
        "qm9pack",
        "moses",
        "fairchem",
    }
)
_MISSING = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")


@dataclass
class Block:
    """One python block: ``doc`` (path relative to the repository), 1-based ``line`` of its
    fence, ``index`` among the doc's python blocks, ``code`` as written, and its directives."""

    doc: str
    line: int
    index: int
    code: str
    fragment: str | None = None  # reason: not meant to run alone
    not_run: str | None = None  # reason: complete, but not run by the tests
    continues: bool = False
    env: dict[str, str] = field(default_factory=dict)
    requires: tuple[str, ...] = ()
    timeout: int = 600

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.fragment is None and self.not_run is None


def _parts(text: str) -> list[str]:
    """Directives separated by ``;``; a ``fragment``/``not run`` reason runs to the end."""
    parts = []
    text = text.strip()
    while text:
        if text.startswith(("fragment", "not run")):
            parts.append(text)
            break
        head, _, text = text.partition(";")
        parts.append(head.strip())
        text = text.strip()
    return parts


def _directives(block: Block, text: str) -> None:
    for part in _parts(text):
        if not part:
            continue
        key = next((k for k in _KEYWORDS if part.startswith(k)), None)
        rest = part[len(key) :].strip(" :") if key else ""
        if key == "fragment" and rest:
            block.fragment = rest
        elif key == "not run" and rest:
            block.not_run = rest
        elif key == "continues" and not rest:
            block.continues = True
        elif key == "env" and "=" in rest:
            name, value = rest.split("=", 1)
            block.env[name.strip()] = value.strip()
        elif key == "requires" and rest:
            block.requires += tuple(m.strip() for m in rest.split(",") if m.strip())
        elif key == "timeout" and rest.isdigit():
            block.timeout = int(rest)
        else:
            raise ValueError(
                f"{block.id}: bad doc-test directive {part!r} (known: "
                f"{', '.join(_KEYWORDS)}; fragment/not run need a reason)"
            )


def python_blocks(doc: str | Path) -> list[Block]:
    """The python blocks of ``doc`` (a path, or relative to the repository) with directives."""
    path = Path(doc) if Path(doc).is_absolute() else ROOT / doc
    text = path.read_text()
    out = []
    for i, m in enumerate(_FENCE.finditer(text)):
        line = text.count("\n", 0, m.start()) + 1
        block = Block(str(path.relative_to(ROOT)), line, i, m.group(1))
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = _MARK.search(before)
        if mark:
            _directives(block, mark.group(1))
        if block.continues and not out:
            raise ValueError(f"{block.id}: 'continues' but no block comes before it")
        out.append(block)
    return out


def all_blocks() -> list[Block]:
    return [b for doc in DOCS for b in python_blocks(doc)]


def program(block: Block) -> str:
    """The script a block runs as: the block, after the blocks it continues (in doc order)."""
    blocks = python_blocks(block.doc)
    chain = [block]
    i = block.index
    while blocks[i].continues:
        i -= 1
        chain.insert(0, blocks[i])
    return "\n".join(b.code for b in chain)


def needed_modules(block: Block) -> list[str]:
    """Top-level modules the block's program imports (third-party) plus its ``requires``."""
    need: list[str] = list(block.requires)
    for node in ast.walk(ast.parse(program(block))):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module]
            if isinstance(node, ast.ImportFrom) and node.module and not node.level
            else []
        )
        for name in names:
            for sub, mods in _SUBPACKAGE_NEEDS.items():
                if name == sub or name.startswith(sub + "."):
                    need.extend(mods)
            top = name.split(".")[0]
            if top != "graphbatch" and top not in sys.stdlib_module_names:
                need.append(top)
    return list(dict.fromkeys(need))


def missing_modules(block: Block) -> list[str]:
    return [m for m in needed_modules(block) if importlib.util.find_spec(m) is None]


def missing_optional(res: subprocess.CompletedProcess) -> str | None:
    """The optional package whose import failed a block's run, if that is why it failed."""
    if res.returncode == 0:
        return None
    found = _MISSING.findall(res.stderr)
    top = found[-1].split(".")[0] if found else None
    return top if top in OPTIONAL else None


def run_block(
    block: Block, folder: Path, *, check: str | None = None
) -> subprocess.CompletedProcess:
    """Run ``block`` (its `program`) as ``python block.py`` in ``folder`` with the session's
    starting environment plus the block's ``env``. With ``check`` (Python source), run instead
    ``python check.py``, which runs ``block.py`` as ``__main__`` (``runpy.run_path``), then the
    check with the block's globals as ``ns``: the block itself runs exactly as written."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "block.py").write_text(program(block))
    script = "block.py"
    if check is not None:
        (folder / "check.py").write_text(
            "import runpy\nns = runpy.run_path('block.py', run_name='__main__')\n" + check
        )
        script = "check.py"
    env = dict(START_ENV, **block.env)
    return subprocess.run(
        [sys.executable, script],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=block.timeout,
    )


def block_module(doc: str, index: int, folder: Path, name: str) -> Path:
    """Write python block ``index`` of ``doc`` (as written) to ``folder/name.py`` for a test
    script to import as a module."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text(python_blocks(doc)[index].code)
    return path
