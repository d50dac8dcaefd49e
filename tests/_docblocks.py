"""The doc-test harness: every ```` ```python ```` block of README.md and docs/**/*.md, as written.

A block runs on its own in a fresh interpreter in an empty folder, with the environment the test
session started with (nothing a library set in the pytest process, such as mace-torch's
``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD``, leaks into it; under pytest-xdist it includes the worker's
share of the cores for the thread pools, `tests._threads`), twice: as a script (``python block.py``)
and pasted into the interactive console line by line (``code.InteractiveConsole`` in
``__main__``, as a user pastes it into ``python``: a statement right after an indented block
needs a blank line first, and a blank line inside a class or function ends it). Every block,
fragments too, must at least compile when pasted (`paste_error`).

A block that is not meant to run says so **visibly** (the built site and GitHub show it): the
line right before its fence (after any ``doc-test`` comments) is one of::

    *Fragment: `dataset` and `model` are yours.*                    not run (reason required)
    *Not run by the doc test: builds 100,000 molecules (minutes).*   not run (reason required)

An HTML comment on the lines right before the fence (hidden on the site) tells the test how
to run a block::

    <!-- doc-test: continues -->     run after the blocks before it in the same file (one session)
    <!-- doc-test: env XLA_FLAGS=--xla_force_host_platform_device_count=2 -->   environment
    <!-- doc-test: requires mace, h5py -->   skipped (not failed) without these modules
    <!-- doc-test: timeout 900 -->   seconds per run (default 600)
    <!-- doc-test: file my_models.py -->   the block is a module the page asks you to save: it
                                     is written as that file beside the later blocks of the page,
                                     and runs through the later block that imports it (a file
                                     is saved, not pasted: it is not run or paste-checked alone)

Directives combine with ``;``. ``fragment``/``not run`` in a comment are refused: they must be
visible. The modules a block imports are required too (found with ``ast``;
``graphbatch.torch``/``.jax``/``.atomistic`` count as their frameworks): a missing optional
dependency skips the block, any other missing module (``my_models`` without its ``file``
block) fails it.
"""

from __future__ import annotations

import ast
import code
import importlib.util
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The environment of the test session when this module was imported (conftest imports it
#: first), with relative ``PYTHONPATH`` entries made absolute: blocks run in another folder and
#: must import the graphbatch the session imports (``PYTHONPATH=src`` in a worktree).
START_ENV = dict(os.environ)
if START_ENV.get("PYTHONPATH"):
    START_ENV["PYTHONPATH"] = os.pathsep.join(
        os.path.abspath(p) if p else p for p in START_ENV["PYTHONPATH"].split(os.pathsep)
    )
#: README.md and every page of docs/ (getting-started/ too), not the built site.
DOCS = (
    "README.md",
    *sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "docs").rglob("*.md")
        if not {"_build", "api"} & set(p.relative_to(ROOT / "docs").parts[:-1])
    ),
)
_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
_MARK = re.compile(r"^<!--\s*doc-test:(.*?)-->\s*$", re.S)
#: The visible line before a block that is not run: ``*Fragment: reason*`` or
#: ``*Not run by the doc test: reason*``.
_CAPTION = re.compile(r"^\*(Fragment|Not run by the doc test): (\S.*?)\*\s*$")
#: Modules a block needs when it imports these graphbatch subpackages.
_SUBPACKAGE_NEEDS = {
    "graphbatch.torch": ("torch", "torch_geometric"),
    "graphbatch.jax": ("jax", "jraph"),
    "graphbatch.atomistic": ("torch", "torch_geometric"),
    "graphbatch.lowband.nn": ("torch",),
}
_KEYWORDS = ("fragment", "not run", "continues", "env", "requires", "timeout", "file")
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
        "ase",
        "vesin",
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
    file: str | None = None  # the block is this module file (``my_models.py``)

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.fragment is None and self.not_run is None


def _directives(block: Block, text: str) -> None:
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        key = next((k for k in _KEYWORDS if part.startswith(k)), None)
        rest = part[len(key) :].strip(" :") if key else ""
        if key in ("fragment", "not run"):
            raise ValueError(
                f"{block.id}: mark a block that is not run visibly, on the line before its "
                f"fence: '*Fragment: reason*' or '*Not run by the doc test: reason*' "
                f"(not in an HTML comment, which the built site hides)"
            )
        if key == "continues" and not rest:
            block.continues = True
        elif key == "env" and "=" in rest:
            name, value = rest.split("=", 1)
            block.env[name.strip()] = value.strip()
        elif key == "requires" and rest:
            block.requires += tuple(m.strip() for m in rest.split(",") if m.strip())
        elif key == "timeout" and rest.isdigit():
            block.timeout = int(rest)
        elif key == "file" and re.fullmatch(r"\w+\.py", rest):
            block.file = rest
        else:
            raise ValueError(
                f"{block.id}: bad doc-test directive {part!r} (known: continues, env NAME=VALUE, "
                f"requires MODULES, timeout SECONDS, file NAME.py)"
            )


def _header(block: Block, lines: list[str]) -> None:
    """Read the directives and the visible caption in the non-blank lines right before a fence
    (``lines``, nearest last)."""
    for line in reversed(lines):
        if not line.strip():
            break
        mark = _MARK.match(line.strip())
        if mark:
            _directives(block, mark.group(1))
            continue
        caption = _CAPTION.match(line.strip())
        if caption:
            kind, reason = caption.groups()
            if kind == "Fragment":
                block.fragment = reason
            else:
                block.not_run = reason
        break


def python_blocks(doc: str | Path) -> list[Block]:
    """The python blocks of ``doc`` (a path, or relative to the repository) with directives."""
    path = Path(doc) if Path(doc).is_absolute() else ROOT / doc
    text = path.read_text()
    out = []
    for i, m in enumerate(_FENCE.finditer(text)):
        line = text.count("\n", 0, m.start()) + 1
        block = Block(str(path.relative_to(ROOT)), line, i, m.group(1))
        _header(block, text[: m.start()].rstrip("\n").split("\n")[-8:])
        if block.continues and not out:
            raise ValueError(f"{block.id}: 'continues' but no block comes before it")
        out.append(block)
    return out


def all_blocks() -> list[Block]:
    return [b for doc in DOCS for b in python_blocks(doc)]


def chain(block: Block) -> list[Block]:
    """The blocks a block runs as, in doc order: the block after the blocks it continues."""
    blocks = python_blocks(block.doc)
    out = [block]
    i = block.index
    while blocks[i].continues:
        i -= 1
        out.insert(0, blocks[i])
    return out


def program(block: Block) -> str:
    """The script a block runs as: the block, after the blocks it continues (in doc order)."""
    return "\n".join(b.code for b in chain(block))


def files(block: Block) -> dict[str, str]:
    """The module files (``file`` blocks) of the block's doc before it: name -> source."""
    return {b.file: b.code for b in python_blocks(block.doc)[: block.index] if b.file}


def needed_modules(block: Block) -> list[str]:
    """Top-level modules the block's program imports (third-party) plus its ``requires``,
    less the module files the page asked to save (``file`` blocks)."""
    need: list[str] = list(block.requires)
    own = {Path(name).stem for name in files(block)}
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
            if top != "graphbatch" and top not in sys.stdlib_module_names and top not in own:
                need.append(top)
    return list(dict.fromkeys(need))


def missing_modules(block: Block) -> list[str]:
    """Needed modules that cannot be found here (optional or not: see `missing_required`)."""
    return [m for m in needed_modules(block) if importlib.util.find_spec(m) is None]


def missing_optional(res: subprocess.CompletedProcess) -> str | None:
    """The optional package whose import failed a block's run, if that is why it failed."""
    if res.returncode == 0:
        return None
    found = _MISSING.findall(res.stderr)
    top = found[-1].split(".")[0] if found else None
    return top if top in OPTIONAL else None


class _CompileOnly(code.InteractiveConsole):
    """A console that compiles what is pasted, runs nothing and keeps the first error."""

    error: str | None = None

    def runcode(self, code_obj) -> None:
        """Compiling is the check: nothing runs."""

    def showsyntaxerror(self, *args, **kwargs) -> None:
        err = sys.exc_info()[1]
        self.error = self.error or f"{type(err).__name__}: {err}"


def paste_error(block: Block) -> str | None:
    """The first error the interactive console reports when the block's lines are pasted one
    by one (``file:line: SyntaxError: ...``), compiled only (nothing runs, so fragments too);
    None for a block that pastes, and for a module file (``file``: saved, not pasted)."""
    if block.file:
        return None
    console = _CompileOnly()
    for n, line in enumerate(block.code.splitlines(), start=block.line + 1):
        console.push(line)
        if console.error:
            return f"{block.doc}:{n}: {console.error}: {line.strip()!r}"
    console.push("")
    if console.error:
        return f"{block.doc}:{block.line}: at the end of the block: {console.error}"
    return None


#: ``python -c PASTE`` pastes the blocks of ``paste.json`` (a list of sources) into an
#: interactive console running in ``__main__`` (no ``__file__``, as in the REPL), one line at
#: a time and a blank line after each block (the user presses Enter at a ``...`` prompt); the
#: first error ends it with status 1. A ``check.py`` beside it then runs in the same
#: interpreter, with ``ns`` the session's globals.
PASTE = r"""
import code as _code, json as _json, os as _os, sys as _sys
class _Paste(_code.InteractiveConsole):
    where = "the start"
    def showsyntaxerror(self, *args, **kwargs):
        super().showsyntaxerror(*args, **kwargs)
        self._stop()
    def showtraceback(self):
        super().showtraceback()
        self._stop()
    def _stop(self):
        print(f"doc-test: the console failed at {self.where}", file=_sys.stderr, flush=True)
        raise SystemExit(1)
_sys.ps1, _sys.ps2 = ">>> ", "... "
_console = _Paste(vars(_sys.modules["__main__"]))
with open("paste.json") as _f:
    _blocks = _json.load(_f)
for _b, _source in enumerate(_blocks, start=1):
    for _n, _line in enumerate(_source.splitlines(), start=1):
        _console.where = f"line {_n} of block {_b} of {len(_blocks)}: {_line!r}"
        _console.push(_line)
    _console.where = f"the end of block {_b} of {len(_blocks)}"
    _console.push("")
if _os.path.exists("check.py"):
    ns = vars(_sys.modules["__main__"])
    with open("check.py") as _f:
        exec(compile(_f.read(), "check.py", "exec"), ns)
"""


def run_block(
    block: Block, folder: Path, *, check: str | None = None, console: bool = False
) -> subprocess.CompletedProcess:
    """Run ``block`` (its `program`) in a fresh interpreter in ``folder`` with the session's
    starting environment plus the block's ``env``, and the page's module files beside it:
    ``python block.py``, or with ``console`` pasted into an interactive console (`PASTE`).
    With ``check`` (Python source), the check runs after the block, in the same interpreter,
    with the block's globals as ``ns`` (the block itself runs exactly as written)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, source in files(block).items():
        (folder / name).write_text(source)
    parts = [b.code for b in chain(block)]
    if console:
        (folder / "paste.json").write_text(json.dumps(parts))
        if check is not None:
            (folder / "check.py").write_text(check)
        argv = [sys.executable, "-c", PASTE]
    else:
        (folder / "block.py").write_text("\n".join(parts))
        argv = [sys.executable, "block.py"]
        if check is not None:
            (folder / "check.py").write_text(
                "import runpy\nns = runpy.run_path('block.py', run_name='__main__')\n" + check
            )
            argv = [sys.executable, "check.py"]
    return subprocess.run(
        argv,
        cwd=folder,
        env=dict(START_ENV, **block.env),
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
