"""Same-process A/B of the padded-batch kernel: an older revision against the working tree.

Loads ``src/graphbatch/_padbatch.py`` (and, for ``--path batcher``, ``torch/_store_batch.py``)
of ``--old REV`` from git as extra modules beside the current ones, checks on the first batches
that both give the same arrays, then alternates rounds of ``--round-batches`` batches of a
``pack-lpf`` plan (batch size 128, seed 0): in each round each side reads its own chunk of
not-yet-read batches (cold caches for both), the order of the two sides alternating between
rounds. Prints the median CPU time (``time.process_time``) per batch of each side and the median
of the per-round ratios old / new (same minute, same load).

    python -m benchmarks.experiments.kernel_ab --store /work/data/moses_full.h5 \\
        [--old bdc780f] [--path kernel|batcher] [--in-memory] [--rounds 8]

``kernel``: `graphbatch._padbatch.pad_batch` with the options `graphbatch.torch.StoreBatcher`
passes (torch dtypes, int64 edge index); ``batcher``: the whole store batch path to a PyG
``Batch`` (the old `StoreBatcher` reading through the old kernel).
"""

from __future__ import annotations

import gc
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import graphbatch as gb
import graphbatch._padbatch as new_kernel
from graphbatch.datasets import GraphStore
from graphbatch.torch._store_batch import StoreBatcher

from benchmarks._harness import ROOT, finish, parser, start


def load_revision(rev: str, rel: str, name: str, tmp: Path):
    """Module ``name`` (inside the graphbatch package, so relative imports resolve) from
    ``src/graphbatch/<rel>`` at git revision ``rev``."""
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:src/graphbatch/{rel}"],
                          capture_output=True, text=True, check=True).stdout
    path = tmp / rel.replace("/", "_")
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


STRUCT = ("node_counts", "edge_counts", "node_ptr", "edge_ptr", "batch", "node_mask",
          "edge_mask", "graph_mask", "graph_index", "edge_inc", "graph_ptr")


def main(argv=None) -> None:
    p = parser(__doc__, with_threads=False)  # one torch thread
    p.add_argument("--store", required=True)
    p.add_argument("--old", default="bdc780f", help="git revision of the old kernel")
    p.add_argument("--path", choices=("kernel", "batcher"), default="kernel")
    p.add_argument("--in-memory", action="store_true")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--round-batches", type=int, default=300)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    info = start(args)
    tmp = Path(tempfile.mkdtemp(prefix="kernel_ab_"))
    old_kernel = load_revision(args.old, "_padbatch.py", "graphbatch._padbatch_old", tmp)

    store = GraphStore(args.store, in_memory=args.in_memory)
    plan = gb.plan(store.graph_sizes(), "pack-lpf", batch_size=128, seed=0)
    n = min(len(plan), 2 * args.rounds * args.round_batches)
    batches = [np.asarray(b, dtype=np.int64) for _, b in zip(range(n), plan.batches())]
    shapes = [plan.shape(b) for b in range(n)]
    pk = store.packed()
    old_pk = old_kernel.PackedGraphs(
        n_node=pk.n_node, n_edge=pk.n_edge, node_offsets=pk.node_offsets,
        edge_offsets=pk.edge_offsets, edge_index=pk.edge_index, node=pk.node, edge=pk.edge,
        graph=pk.graph)
    batcher = StoreBatcher(store)
    kw = dict(layout="torch", cutoff=None, position_key="pos", dtypes=batcher._dtypes,
              index_dtype=np.int64, pad=batcher._pads)
    for idx, shape in zip(batches[:50], shapes):
        a = old_kernel.pad_batch(old_pk, idx, shape, **kw)
        b = new_kernel.pad_batch(pk, idx, shape, **kw)
        for k in a.fields:
            assert a.fields[k].dtype == b.fields[k].dtype, k
            assert np.array_equal(a.fields[k], b.fields[k]), k
        for k in STRUCT:
            assert np.array_equal(getattr(a, k), getattr(b, k)), k
    if args.path == "kernel":
        sides = {"old": lambda i, s: old_kernel.pad_batch(old_pk, i, s, **kw),
                 "new": lambda i, s: new_kernel.pad_batch(pk, i, s, **kw)}
    else:
        old_sb = load_revision(args.old, "torch/_store_batch.py",
                               "graphbatch.torch._store_batch_old", tmp)

        class OldStore:
            fields = store.fields

            def read_batch(self, index, shape, **options):
                return old_kernel.pad_batch(old_pk, index, shape, **options)

        old_batcher = old_sb.StoreBatcher(OldStore())
        sides = {"old": old_batcher, "new": batcher}
    for idx, shape in zip(batches, shapes):   # map every page once (both sides find them mapped)
        sides["new"](idx, shape)
    chunks = max(1, n // args.round_batches)
    cpu = {"old": [], "new": []}
    gc.disable()
    for r in range(args.rounds):
        order = ("old", "new") if r % 2 == 0 else ("new", "old")
        for j, name in enumerate(order):
            c = (2 * r + j) % chunks
            lo, hi = c * args.round_batches, (c + 1) * args.round_batches
            t0 = time.process_time()
            for idx, shape in zip(batches[lo:hi], shapes[lo:hi]):
                sides[name](idx, shape)
            cpu[name].append((time.process_time() - t0) / (hi - lo) * 1e6)
        gc.collect()
    gc.enable()
    o, w = np.array(cpu["old"]), np.array(cpu["new"])
    print(f"{Path(args.store).name}, {'in_memory' if args.in_memory else 'memory map'}, "
          f"{args.path}, old={args.old}: old {np.median(o):.0f} us/batch, new {np.median(w):.0f} "
          f"us/batch (CPU); per-round old/new median {np.median(o / w):.2f}x "
          f"[{(o / w).min():.2f}, {(o / w).max():.2f}], {args.rounds} rounds of "
          f"{args.round_batches}; CPU per batch {1 - np.median(w) / np.median(o):.0%} less; "
          f"load {os.getloadavg()[0]:.2f}", flush=True)
    print("  old", np.round(o).astype(int).tolist())
    print("  new", np.round(w).astype(int).tolist())
    finish(args, info, {"old_us_per_batch": o.tolist(), "new_us_per_batch": w.tolist()})


if __name__ == "__main__":
    main()
