"""Regenerate the size tables shipped for demos and benchmarks (real data, no graphs stored).

    python -m benchmarks.io.make_size_tables [qm9] [moses] [code] [--workers N]

* qm9   -> src/graphbatch/data/qm9_radius6_sizes.npz  (130,831 molecules, radius 6 Å, qm9pack)
* moses -> benchmarks/data/moses_train_sizes.npz       (OGB graphs of MOSES train, molsets)
* code  -> benchmarks/data/code_stdlib_sizes.npz       (function AST graphs of this Python's stdlib)

Tables hold int arrays ``n_node``, ``n_edge`` (compressed, smallest int dtype that fits), readable
with ``graphbatch.GraphSizes.load``.
"""

from __future__ import annotations

import platform
import sys
import time
from pathlib import Path

import numpy as np

from graphbatch.datasets import code_graphs, moses_sizes, python_files, qm9_graphs

from benchmarks._harness import ROOT, parser, start



def _save(path: Path, n_node: np.ndarray, n_edge: np.ndarray) -> None:
    dtype = np.int16 if max(n_node.max(), n_edge.max()) < 2**15 else np.int32
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, n_node=n_node.astype(dtype), n_edge=n_edge.astype(dtype))
    tmp.replace(path)
    print(f"{path.relative_to(ROOT)}: {len(n_node):,} graphs, {int(n_node.sum()):,} nodes, "
          f"{int(n_edge.sum()):,} edges", flush=True)


def qm9() -> None:
    parts = list(qm9_graphs("radius", cutoff=6.0))
    _save(ROOT / "src/graphbatch/data/qm9_radius6_sizes.npz",
          np.concatenate([p.n_node for p in parts]), np.concatenate([p.n_edge for p in parts]))


def moses(workers: int | None) -> None:
    failures: list = []
    sizes, _ = moses_sizes("train", workers=workers, progress=True, failures=failures)
    if failures:
        print(f"{len(failures)} SMILES failed: {[i for i, _ in failures[:20]]}")
    _save(ROOT / "benchmarks/data/moses_train_sizes.npz", sizes.n_node, sizes.n_edge)


def code() -> None:
    root, files = python_files()
    failures: list = []
    parts = list(code_graphs(files=files, progress=True, failures=failures))
    print(f"stdlib {root} (Python {platform.python_version()}): {len(files)} files, "
          f"{len(failures)} unparsable: {[m for _, m in failures]}")
    _save(ROOT / "benchmarks/data/code_stdlib_sizes.npz",
          np.concatenate([p.n_node for p in parts]), np.concatenate([p.n_edge for p in parts]))


def main(argv=None) -> int:
    p = parser(__doc__, with_threads=False, with_out=False)
    p.add_argument("tables", nargs="*", default=["qm9", "moses", "code"],
                   choices=["qm9", "moses", "code"])
    p.add_argument("--workers", type=int, default=None)
    args = p.parse_args(argv)
    start(args)
    for name in args.tables:
        t = time.perf_counter()
        moses(args.workers) if name == "moses" else globals()[name]()
        print(f"{name}: {time.perf_counter() - t:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
