"""Shared plumbing of the benchmark scripts: common options, the machine line, tables, JSON.

Every script runs as a module from the repository root, against the installed (editable)
graphbatch (this module imports graphbatch, and the modules of the machine line, only when a
helper needs them, so a measuring child process stays lean and an A/B child can import an
older graphbatch), for example ``python -m benchmarks.planning.plan_speed --graphs 100000``; scripts
that re-run themselves in a fresh process use :func:`module_command`, so no script edits
``sys.path``.

- :func:`parser` / :func:`options`: ``--threads``, ``--out`` and ``--quiet`` for every script
  (each script says what its ``--out`` holds; a script whose thread count is fixed, e.g. one
  thread set before NumPy loads, has no ``--threads``); the script adds its own options.
- :func:`start`: applies ``--threads`` and prints the machine line (CPU model from ``lscpu``,
  threads, load average, UTC date, Python/NumPy/torch versions) unless ``--quiet``.
- :func:`print_table` / ``format_table``: graphbatch's plain-text table
  (``graphbatch._tables.format_table``, what the CLI prints when piped).
- :func:`write_json` / :func:`finish`: a result file ``{"machine": {...}, "results": ...}``;
  ``results`` defaults to every table printed through :func:`format_table` (title and rows).
- :func:`qm9_like_sizes` / :func:`describe`: the shipped QM9 radius-6 Å size table, resampled.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np


#: The repository root and the committed size tables (``benchmarks/data``).
ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data"
QM9_TABLE = "qm9_radius6_sizes.npz"
_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
#: Tables printed through :func:`format_table` in this process: what ``--out`` gets by default.
TABLES: list[dict[str, Any]] = []


def options(*, with_threads: bool = True, with_out: bool = True, threads: int | None = None,
            threads_help: str | None = None,
            out: str | None = None, out_help: str = "write the results as JSON to this file",
            out_required: bool = False, out_aliases: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The common options as a parent parser (``parents=[options()]``, also for subcommands).

    ``threads``/``out`` are the defaults; ``out_aliases`` keeps a script's older spelling
    (e.g. ``--json``) working.
    """
    p = argparse.ArgumentParser(add_help=False)
    if with_threads:
        p.add_argument("--threads", type=int, default=threads,
                       help=threads_help or "torch threads, and OMP/MKL/OpenBLAS threads of "
                       "child processes (default: %(default)s = the library's default)")
    if with_out:
        p.add_argument("--out", *out_aliases, dest="out", default=out, required=out_required,
                       help=out_help)
    p.add_argument("--quiet", action="store_true", help="no machine line")
    return p


def parser(doc: str | None, **kw: Any) -> argparse.ArgumentParser:
    """A script's parser: the first line of its docstring as description, the common options."""
    first = next((ln for ln in (doc or "").splitlines() if ln.strip()), "")
    return argparse.ArgumentParser(description=first, parents=[options(**kw)])


def machine(threads: int | None = None) -> dict[str, Any]:
    """Where and when a benchmark ran: CPU model, logical CPUs, threads, load, date, versions."""
    import datetime
    import platform
    from importlib import metadata

    import graphbatch as gb

    versions = {"python": platform.python_version(), "numpy": np.__version__,
                "graphbatch": gb.__version__}
    for dist in ("torch", "jax"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return {"cpu": cpu_model(), "cpus": os.cpu_count(),
            "threads": threads if threads is not None else "default",
            "load": [round(x, 2) for x in os.getloadavg()],
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            **versions}


def cpu_model() -> str:
    """``Model name`` from ``lscpu`` (``platform.processor()`` where lscpu is missing)."""
    import platform

    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "unknown CPU"
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def machine_line(info: dict[str, Any]) -> str:
    """One line: ``# machine: CPU (N CPUs), threads T, load a b c, date, versions``."""
    vers = ", ".join(f"{k} {info[k]}" for k in ("python", "numpy", "torch", "jax", "graphbatch")
                     if k in info)
    load = " ".join(f"{x:.2f}" for x in info["load"])
    return (f"# machine: {info['cpu']} ({info['cpus']} CPUs), threads {info['threads']}, "
            f"load {load}, {info['date']}; {vers}")


def start(args: argparse.Namespace) -> dict[str, Any]:
    """Apply ``--threads`` (torch's threads where torch is installed; child processes through
    the OMP/MKL/OpenBLAS variables) and print the machine line unless ``--quiet``."""
    threads = getattr(args, "threads", None)
    if threads:
        for var in _THREAD_VARS:
            os.environ[var] = str(threads)
        try:
            import torch
        except ImportError:
            pass
        else:
            torch.set_num_threads(threads)
    info = machine(threads)
    if not getattr(args, "quiet", False):
        print(machine_line(info), flush=True)
    return info


def format_table(rows: Sequence[dict[str, Any]], columns: Iterable[str] | None = None,
                 title: str | None = None) -> str:
    """Rows of dicts as graphbatch's aligned plain-text table; the rows are kept in
    :data:`TABLES` for ``--out``."""
    from graphbatch._tables import format_table as _format_table

    cols = list(columns) if columns is not None else None
    TABLES.append({"title": title, "rows": [{k: r.get(k) for k in (cols or r)} for r in rows]})
    return _format_table(rows, cols)


def print_table(rows: Sequence[dict[str, Any]], columns: Iterable[str] | None = None,
                title: str | None = None) -> None:
    """Print :func:`format_table`."""
    print(format_table(rows, columns, title), flush=True)


def _jsonable(x: Any) -> Any:
    return x.item() if isinstance(x, np.generic) else x.tolist() if isinstance(
        x, np.ndarray) else str(x)


def write_json(path: str | os.PathLike, results: Any, info: dict[str, Any] | None = None) -> None:
    """``{"machine": info, "results": results}`` to ``path`` (through a temporary file)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"machine": info or machine(), "results": results}, indent=1,
                              default=_jsonable))
    tmp.replace(path)


def finish(args: argparse.Namespace, info: dict[str, Any], results: Any = None) -> None:
    """Write ``results`` (default: the tables printed so far) to ``--out`` if given."""
    if getattr(args, "out", None):
        write_json(args.out, TABLES if results is None else results, info)


def module_command(spec: Any) -> list[str]:
    """``[python, -m, module]`` to re-run a script in a fresh process (pass ``__spec__``); the
    child inherits the working directory, the repository root."""
    if spec is None:
        raise SystemExit("run the benchmarks as modules from the repository root, e.g. "
                         "python -m benchmarks.planning.plan_scale")
    return [sys.executable, "-m", spec.name]


def child_env(src: str | None = None, **extra: str) -> dict[str, str]:
    """The environment of a child process: graphbatch from ``src`` (an A/B baseline's ``src``
    folder) where given, the repository root importable (for ``benchmarks``), ``extra`` set."""
    env = {**os.environ, **extra}
    paths = ([src] if src else []) + [str(ROOT)]
    if src is None:
        paths += [x for x in env.get("PYTHONPATH", "").split(os.pathsep) if x]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def qm9_like_sizes(n: int, seed: int = 0) -> tuple[Any, str]:
    """``n`` graphs drawn with replacement from QM9's radius-6 Å size table (shipped in
    ``graphbatch/data``). Returns the table and a description of its source."""
    import graphbatch as gb

    path = resources.files("graphbatch") / "data" / QM9_TABLE
    base = gb.GraphSizes.load(str(path))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(base), size=n)
    return base.subset(idx), f"QM9 radius-6 Å sizes ({len(base):,} molecules) resampled to {n:,}"


def describe(sizes: Any) -> str:
    """Graph count and node/edge means and maxima, one line."""
    return (f"{len(sizes):,} graphs, nodes mean {sizes.n_node.mean():.1f} "
            f"max {sizes.n_node.max()}, edges mean {sizes.n_edge.mean():.1f} max {sizes.n_edge.max()}")
