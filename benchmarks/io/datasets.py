"""Dataset build speed, graph-store random-access speed, and store size on disk.

Measured side by side in one run:

* build speed (graphs/s, end to end: read source, construct graphs, write the HDF5 store) for QM9
  (radius 6 Å, kNN 24, fully connected), MOSES (OGB features; 1 and 2 worker processes) and the
  standard library's function AST graphs;
* random-access reads of single graphs from a QM9 radius-6 Å store: uncached (``read_graph``),
  through the LRU cache when cold and when warm, and as PyG ``Data`` through the torch view;
* bytes on disk per compression vs the raw NumPy arrays (stored dtypes) and vs the tensors once
  materialised in torch (int64 / float32, the store's ``n_bytes``).

    python -m benchmarks.io.datasets [--quick]
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import numpy as np

from graphbatch.datasets import GraphStore, build_store

from benchmarks._harness import finish, parser, start


def _fmt(rows, cols):
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in cols]
    out = ["  ".join(c.rjust(w) for c, w in zip(cols, widths)),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(str(r[c]).rjust(w) for c, w in zip(cols, widths)) for r in rows]
    return "\n".join(out)


def bench_build(tmp: Path, quick: bool) -> list[dict]:
    n_qm9 = 5000 if quick else 30000
    n_moses = 500 if quick else 4000
    n_code = 2000 if quick else 15000
    cases = [
        ("qm9", dict(graph="radius", cutoff=6.0, limit=n_qm9), "radius 6 Å"),
        ("qm9", dict(graph="knn", k=24, limit=n_qm9), "kNN k=24"),
        ("qm9", dict(graph="full", limit=n_qm9), "full"),
        ("moses", dict(limit=n_moses, workers=1), "OGB, 1 worker"),
        ("moses", dict(limit=n_moses, workers=2), "OGB, 2 workers"),
        ("code", dict(limit=n_code), "stdlib functions"),
    ]
    rows = []
    for dataset, kw, label in cases:
        out = tmp / f"{dataset}-{label.split()[0]}.h5"
        rep = build_store(dataset, out, **kw)
        rows.append({"dataset": dataset, "graphs": label, "n": rep.n_graph,
                     "edges/graph": f"{rep.n_edge / rep.n_graph:.1f}",
                     "seconds": f"{rep.seconds:.2f}",
                     "graphs/s": f"{rep.graphs_per_second:,.0f}",
                     "failed": len(rep.failures)})
    return rows


def bench_reads(tmp: Path, quick: bool, store: str | None = None) -> tuple[list[dict], Path]:
    if store is None:
        n = 5000 if quick else 30000
        path = tmp / "qm9-read.h5"
        build_store("qm9", path, graph="radius", cutoff=6.0, limit=n)
    else:
        path = Path(store)
        with GraphStore(path) as s:
            n = len(s)
    reads = 2000 if quick else 10000
    idx = np.random.default_rng(0).integers(0, n, reads)
    rows = []

    def timed(label, fn):
        t = time.perf_counter()
        for i in idx:
            fn(int(i))
        dt = time.perf_counter() - t
        rows.append({"access": label, "reads": reads, "graphs/s": f"{reads / dt:,.0f}",
                     "us/graph": f"{dt / reads * 1e6:.1f}"})

    with GraphStore(path, cache_size=n) as store:
        timed("read_graph (no LRU; memory map)", store.read_graph)
    with GraphStore(path, cache_size=n, in_memory=True) as store:
        timed("read_graph (no LRU; in memory)", store.read_graph)
    with GraphStore(path, cache_size=n) as store:
        timed("get, LRU cold", store.get)
        timed("get, LRU warm (all hits)", store.get)
    try:
        with GraphStore(path, cache_size=n) as store:
            from graphbatch.torch import GraphStoreDataset

            ds = GraphStoreDataset(store)
            timed("torch Data, LRU cold", ds.__getitem__)
            timed("torch Data, LRU warm", ds.__getitem__)
    except ImportError as exc:
        rows.append({"access": f"torch view skipped ({exc})", "reads": 0, "graphs/s": "-",
                     "us/graph": "-"})
    return rows, path


def bench_size(tmp: Path, quick: bool) -> list[dict]:
    n = 5000 if quick else 30000
    rows = []
    for compression in (None,):  # store format 2: contiguous, uncompressed (memory-mapped)
        path = tmp / f"qm9-size-{compression}.h5"
        build_store("qm9", path, graph="radius", cutoff=6.0, limit=n)
        with GraphStore(path) as store:
            arrays = store.arrays()
            raw = arrays.edge_index.nbytes + sum(
                a.nbytes for lvl in ("node", "edge", "graph")
                for a in getattr(arrays, lvl).values())
            raw += store.n_node.nbytes + store.n_edge.nbytes
            torch_bytes = int(store.graph_sizes().n_bytes.sum())
        disk = os.path.getsize(path)
        rows.append({"compression": str(compression), "graphs": n,
                     "disk MB": f"{disk / 2**20:.2f}", "raw arrays MB": f"{raw / 2**20:.2f}",
                     "disk/raw": f"{disk / raw:.3f}",
                     "torch tensors MB": f"{torch_bytes / 2**20:.2f}",
                     "disk/torch": f"{disk / torch_bytes:.3f}"})
    return rows


def main(argv=None) -> int:
    p = parser(__doc__, with_threads=False)
    p.add_argument("--quick", action="store_true", help="smaller subsets (about a minute)")
    p.add_argument("--store", help="also time random reads on this existing store (e.g. the "
                   "full QM9 store from `graphbatch data build qm9 --out qm9.h5`)")
    args = p.parse_args(argv)
    info = start(args)
    results = {}
    with tempfile.TemporaryDirectory(prefix="gb-datasets-") as d:
        tmp = Path(d)
        print("## build speed (end to end: source -> graphs -> HDF5 store)")
        results["build"] = bench_build(tmp, args.quick)
        print(_fmt(results["build"],
                   ["dataset", "graphs", "n", "edges/graph", "seconds", "graphs/s", "failed"]))
        print("\n## random access, QM9 radius 6 Å store (gzip level 4, 4096-row chunks)")
        rows, _ = bench_reads(tmp, args.quick)
        results["reads"] = rows
        print(_fmt(rows, ["access", "reads", "graphs/s", "us/graph"]))
        if args.store:
            print(f"\n## random access, {args.store}")
            rows, _ = bench_reads(tmp, args.quick, args.store)
            results["reads_store"] = rows
            print(_fmt(rows, ["access", "reads", "graphs/s", "us/graph"]))
        print("\n## store size, QM9 radius 6 Å")
        results["size"] = bench_size(tmp, args.quick)
        print(_fmt(results["size"], ["compression", "graphs", "disk MB",
                                                 "raw arrays MB", "disk/raw",
                                                 "torch tensors MB", "disk/torch"]))
    finish(args, info, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
