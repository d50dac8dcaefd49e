"""Atomistic stores (issue 27) measured: build speed, edges against MACE on every structure,
store-fed MACE batches against MACE's own loader, and memory over an epoch of a big store.

    python -m benchmarks.io.atoms_store subset BIG.xyz OUT.xyz [--max-atoms 64] [--periodic]
    python -m benchmarks.io.atoms_store build FILE.xyz --cutoff 5 [--workers 2] [--repeats 2]
    python -m benchmarks.io.atoms_store reader FILE.xyz
    python -m benchmarks.io.atoms_store edges FILE.xyz STORE.h5
    python -m benchmarks.io.atoms_store loader STORE.h5 [--structures 4000] [--batch-size 32]
    python -m benchmarks.io.atoms_store memory STORE.h5 [--structures 5000]
    python -m benchmarks.io.atoms_store replicate STORE.h5 OUT.h5 --copies 10
    python -m benchmarks.io.atoms_store rss STORE.h5 [--batch-size 32]

Every command prints the date, CPU model, threads and load with its numbers; ratios are
measured side by side in one run (results: benchmarks/RESULTS.md).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time

import numpy as np

from benchmarks._harness import cpu_model, options, start


def header(what: str) -> None:
    model = cpu_model()
    import torch

    print(f"# {what} | {time.strftime('%Y-%m-%d %H:%M')} | {model} | {os.cpu_count()} CPUs | "
          f"torch threads {torch.get_num_threads()} | load {tuple(round(x, 2) for x in os.getloadavg())}")


def cmd_subset(args) -> None:
    """The frames of BIG with at most --max-atoms atoms (and pbc T T T with --periodic)."""
    import ase.io

    n = 0
    with open(args.out, "w") as fh:
        for a in ase.io.iread(args.source, index=":", format="extxyz"):
            if len(a) <= args.max_atoms and (not args.periodic or a.pbc.all()):
                ase.io.write(fh, a, format="extxyz")
                n += 1
    print(f"wrote {n} frames to {args.out}")


def cmd_build(args) -> None:
    """Structures/s of the build (one process, and ``--workers``), where the time goes --
    reading extxyz (graphbatch's reader; ASE's ``iread`` beside it), the neighbour list
    (vesin, as the build calls it) and graphbatch's own work (the rest: scanning, checks,
    labels, edge assembly, writing) -- and the same build through the plain forms (ASE's
    reader + the frame-by-frame conversion) side by side."""
    import ase.io

    import graphbatch.datasets._atoms_build as build_mod
    from graphbatch.datasets import GraphStore, build_atoms_store
    from graphbatch.datasets._atoms_build import _extxyz_frames, extxyz_blocks
    from graphbatch.datasets._extxyz import frame_from_atoms
    from graphbatch.datasets._neighbours import _box, half_pairs
    from tests.datasets._atoms_reference import convert_frames_reference

    header(f"build {args.source} cutoff {args.cutoff}")
    out = args.source + ".bench.h5"
    timings: dict[str, list[float]] = {}

    def timed(name, fn):
        t = time.perf_counter()
        result = fn()
        timings.setdefault(name, []).append(time.perf_counter() - t)
        return result

    for _ in range(args.repeats):
        blocks = timed("scan", lambda: list(extxyz_blocks(args.source, 0, 512)))
        frames = timed("read", lambda: [f for b in blocks for f in _extxyz_frames(b)])
        ase_frames = timed("ase", lambda: list(ase.io.iread(args.source, index=":",
                                                            format="extxyz")))

        def neighbours():
            edges = 0
            for f in frames:
                box = _box(np.asarray(f.cell, dtype=np.float64), f.pbc)
                edges += 2 * half_pairs(f.positions, box, f.pbc, args.cutoff)[0].shape[0]
            return edges

        edges = timed("neighbours", neighbours)
        timed("build", lambda: build_atoms_store(args.source, out, cutoff=args.cutoff))
        GraphStore(out, verify=True)
        os.unlink(out)
        plain = build_mod.convert_frames
        try:  # the plain forms: ASE's reader, conversion frame by frame
            fast_reader = build_mod._extxyz_frames

            def ase_reader(block):
                text = open(block.path, "rb").read()[block.start:block.stop].decode()
                return [frame_from_atoms(block.first + k, a) for k, a in enumerate(
                    ase.io.iread(io.StringIO(text), index=":", format="extxyz"))]

            build_mod._extxyz_frames = ase_reader
            build_mod.convert_frames = convert_frames_reference
            timed("plain build", lambda: build_atoms_store(args.source, out,
                                                           cutoff=args.cutoff))
        finally:
            build_mod.convert_frames = plain
            build_mod._extxyz_frames = fast_reader
        os.unlink(out)
        if args.workers > 1:
            timed("workers", lambda: build_atoms_store(args.source, out, cutoff=args.cutoff,
                                                       workers=args.workers))
            os.unlink(out)
    n = len(frames)
    assert len(ase_frames) == n
    best = {k: min(v) for k, v in timings.items()}
    atoms = sum(len(f) for f in frames)
    print(f"{n} structures, {atoms / n:.1f} atoms and {edges / n:.0f} edges each on average; "
          f"best of {args.repeats}")

    def row(name, secs, note=""):
        print(f"  {name:44s} {n / secs:9.0f} structures/s {1e6 * secs / n:7.1f} us each{note}")

    row("read extxyz, ASE's ase.io.iread", best["ase"])
    row("read extxyz, graphbatch (scan + read)", best["scan"] + best["read"])
    row("neighbour list alone (vesin half list)", best["neighbours"])
    total = best["build"]
    own = total - best["scan"] - best["read"] - best["neighbours"]
    row("whole build, 1 process", total,
        f": reading {100 * best['read'] / total:.0f}%, neighbour list "
        f"{100 * best['neighbours'] / total:.0f}%, own work {100 * own / total:.0f}% "
        f"(scan {100 * best['scan'] / total:.0f}%)")
    row("plain forms (ASE reader, frame by frame)", best["plain build"],
        f": {best['plain build'] / total:.2f}x the time")
    if "workers" in best:
        row(f"whole build, {args.workers} processes", best["workers"],
            " (worker start-up included)")


def cmd_reader(args) -> None:
    """Every frame of FILE read by graphbatch's extxyz reader against ``ase.io.iread``
    (numbers, positions, cell, pbc, info, arrays, calculator results: values, types and
    dtypes), and both timed."""
    import ase.io

    from graphbatch.datasets._atoms_build import _extxyz_frames, extxyz_blocks
    from graphbatch.datasets._extxyz import frame_from_atoms

    header(f"reader {args.source}")
    t = time.perf_counter()
    mine = [f for b in extxyz_blocks(args.source, 0, 512) for f in _extxyz_frames(b)]
    fast = time.perf_counter() - t
    t = time.perf_counter()
    theirs = list(ase.io.iread(args.source, index=":", format="extxyz"))
    slow = time.perf_counter() - t
    assert len(mine) == len(theirs)
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
    from test_extxyz_reader import _same

    differ = 0
    for k, (m, a) in enumerate(zip(mine, theirs)):
        want = frame_from_atoms(k, a)
        if not all(_same(getattr(m, f), getattr(want, f)) for f in
                   ("numbers", "positions", "cell", "pbc", "info", "arrays", "results")):
            differ += 1
    n = len(mine)
    print(f"{n} frames: {differ} differ from ase.io.iread; graphbatch {1e6 * fast / n:.1f} us "
          f"per frame, ASE {1e6 * slow / n:.1f} us ({slow / fast:.1f}x)")


def cmd_edges(args) -> None:
    """Every structure's store edges against MACE's get_neighborhood at the store's cutoff."""
    import ase.io
    from mace.data.neighborhood import get_neighborhood

    from graphbatch.datasets import GraphStore

    header(f"edges {args.source} vs {args.store}")
    store = GraphStore(args.store)
    cut = float(store.meta["cutoff_angstrom"])
    packed = store.packed()
    eo = store.edge_offsets
    bad, n, kinds = 0, 0, {}
    for g, a in enumerate(ase.io.iread(args.source, index=":", format="extxyz")):
        ei, _, us, _ = get_neighborhood(a.positions, cut, pbc=tuple(bool(p) for p in a.pbc),
                                        cell=np.array(a.cell))
        ref = np.concatenate([ei.T, us], 1).astype(np.int64)
        mine = np.concatenate([packed.edge_index[:, eo[g]:eo[g + 1]].T,
                               packed.edge["unit_shifts"][eo[g]:eo[g + 1]]], 1).astype(np.int64)
        ref = ref[np.lexsort(ref.T[::-1])]
        mine = mine[np.lexsort(mine.T[::-1])]
        same = ref.shape == mine.shape and bool((ref == mine).all())
        bad += not same
        key = ("".join("T" if p else "F" for p in a.pbc), "1 atom" if len(a) == 1 else "")
        kinds[key] = kinds.get(key, 0) + 1
        n += 1
    assert n == len(store), (n, len(store))
    print(f"{n} structures at cutoff {cut}: {bad} differ from MACE's get_neighborhood; "
          f"by pbc: {sorted(kinds.items())}")


def cmd_loader(args) -> None:
    """graphs/s of store-fed MACE batches (`gt.loader(store, preset=ga.mace(...))`) against
    MACE's own DataLoader over an in-memory AtomicData list of the same structures, batch size
    32, epochs interleaved; the AtomicData list is built by MACE's from_config first."""
    import torch
    from mace.data import AtomicData, Configuration
    from mace.tools import AtomicNumberTable, torch_geometric

    import graphbatch.atomistic as ga
    import graphbatch.torch as gt
    from graphbatch.datasets import GraphStore

    torch.set_num_threads(1)
    store = GraphStore(args.store)
    header(f"loader {args.store}")
    n = min(args.structures, len(store))
    cut = float(store.meta["cutoff_angstrom"])
    table = AtomicNumberTable(store.meta["elements"])
    p, no = store.packed(), store.node_offsets
    t = time.perf_counter()
    data = []
    for i in range(n):
        a, b = int(no[i]), int(no[i + 1])
        conf = Configuration(atomic_numbers=p.node["atomic_numbers"][a:b].astype(np.int64),
                             positions=np.array(p.node["positions"][a:b]),
                             pbc=tuple(bool(x) for x in p.graph["pbc"][i]),
                             cell=np.array(p.graph["cell"][i]),
                             properties={"energy": float(p.graph["energy"][i]),
                                         "forces": np.array(p.node["forces"][a:b]),
                                         "stress": np.array(p.graph["stress"][i])},
                             property_weights={})
        data.append(AtomicData.from_config(conf, z_table=table, cutoff=cut))
    build_s = time.perf_counter() - t
    if n < len(store):  # the store path reads the same structures: a store of the first n
        from graphbatch.datasets import write_store

        sub = args.store + f".first{n}.h5"
        write_store(sub, [store.arrays(0, n)], name="first", meta=store.meta)
        store = GraphStore(sub)
    mace_loader = torch_geometric.dataloader.DataLoader(
        data, batch_size=args.batch_size, shuffle=True, drop_last=False,
        generator=torch.Generator().manual_seed(0))
    ours = gt.loader(store, strategy=args.strategy, batch_size=args.batch_size, seed=0,
                     preset=ga.mace(r_max=cut, z_table=table))
    times = {"mace": [], "store": []}
    for epoch in range(args.epochs):
        for name, ld in (("mace", mace_loader), ("store", ours)):
            t = time.perf_counter()
            k = 0
            for batch in ld:
                if name == "mace":
                    batch = batch.to_dict()   # what MACE's training step does with a batch
                k += 1
            times[name].append(time.perf_counter() - t)
    print(f"{n} structures, cutoff {cut}, batch size {args.batch_size}, {args.epochs} epochs "
          f"interleaved (building the AtomicData list took {build_s:.1f} s = "
          f"{n / build_s:.0f} structures/s)")
    for name in times:
        best = min(times[name])
        print(f"  {name:6s}: {n / best:9.0f} graphs/s (best epoch {best:.3f} s; all "
              f"{[round(x, 3) for x in times[name]]})")
    ratio = [m / s for m, s in zip(times["mace"], times["store"])]
    print(f"  store-fed / MACE's loader, epoch by epoch: {[round(r, 2) for r in ratio]} "
          f"(median {float(np.median(ratio)):.2f}x)")


def cmd_memory(args) -> None:
    """Anonymous memory of MACE's in-memory path: the first ``--structures`` structures of
    STORE as an ``AtomicData`` list (MACE's from_config), per structure, beside the store's
    bytes for the same structures."""
    import torch
    from mace.data import AtomicData, Configuration
    from mace.tools import AtomicNumberTable

    from graphbatch.datasets import GraphStore

    torch.set_num_threads(1)
    header(f"memory {args.store}")
    store = GraphStore(args.store)
    p, no = store.packed(), store.node_offsets
    cut = float(store.meta["cutoff_angstrom"])
    table = AtomicNumberTable(store.meta["elements"])
    n = min(args.structures, len(store))
    before = _mem()["RssAnon"]
    data = []
    for i in range(n):
        a, b = int(no[i]), int(no[i + 1])
        conf = Configuration(atomic_numbers=p.node["atomic_numbers"][a:b].astype(np.int64),
                             positions=np.array(p.node["positions"][a:b]),
                             pbc=tuple(bool(x) for x in p.graph["pbc"][i]),
                             cell=np.array(p.graph["cell"][i]),
                             properties={"energy": float(p.graph["energy"][i]),
                                         "forces": np.array(p.node["forces"][a:b])},
                             property_weights={})
        data.append(AtomicData.from_config(conf, z_table=table, cutoff=cut))
    used = _mem()["RssAnon"] - before
    row_bytes = sum(int(np.prod(s["shape"], dtype=np.int64)) * np.dtype(s["dtype"]).itemsize
                    for s in store.fields.values() if s["level"] == "edge")
    edge = int(store.edge_offsets[n]) * (2 * np.dtype(store.packed().edge_index.dtype).itemsize
                                         + row_bytes)
    node = int(no[n]) * sum(int(np.prod(s["shape"], dtype=np.int64)) * np.dtype(s["dtype"]).itemsize
                            for s in store.fields.values() if s["level"] == "node")
    print(f"{n} structures at cutoff {cut}: MACE's AtomicData list {used:.1f} MiB = "
          f"{used * 1024 / n:.1f} KiB per structure; the store's node and edge arrays for them "
          f"{(edge + node) / n / 1024:.1f} KiB per structure (on disk, memory-mapped)")


def cmd_replicate(args) -> None:
    """A store of ``--copies`` copies of STORE's graphs (for memory at scale)."""
    from graphbatch.datasets import GraphStore, GraphStoreWriter

    store = GraphStore(args.store)
    step = 20_000
    with GraphStoreWriter(args.out, name="replicated", meta=store.meta) as w:
        for _ in range(args.copies):
            for s in range(0, len(store), step):
                w.append(store.arrays(s, min(len(store), s + step)))
    print(f"wrote {args.copies * len(store)} structures to {args.out} "
          f"({os.path.getsize(args.out) / 2**30:.2f} GiB)")


def _mem() -> dict:
    out = {}
    with open("/proc/self/status") as fh:
        for ln in fh:
            if ln.startswith(("RssAnon", "RssFile", "VmRSS")):
                k, v = ln.split(":")
                out[k] = int(v.split()[0]) / 1024
    return out


def cmd_rss(args) -> None:
    """Memory over one epoch of store-fed MACE batches: anonymous RSS (what the process owns)
    and file-backed RSS (the page cache mapped from the store) at points of the epoch."""
    import torch

    import graphbatch.atomistic as ga
    import graphbatch.torch as gt
    from graphbatch.datasets import GraphStore

    torch.set_num_threads(1)
    header(f"rss {args.store}")
    store = GraphStore(args.store)
    cut = float(store.meta["cutoff_angstrom"])
    before = _mem()
    ld = gt.loader(store, strategy=args.strategy, batch_size=args.batch_size, seed=0,
                   preset=ga.mace(r_max=cut, z_table=store.meta["elements"]))
    made = _mem()
    n = len(ld)
    marks = {int(n * f) for f in (0.01, 0.25, 0.5, 0.75)} | {n - 1}
    t = time.perf_counter()
    seen = 0
    print(f"{len(store)} structures ({os.path.getsize(args.store) / 2**30:.2f} GiB), {n} "
          f"batches; before loader: {before}; after loader (plan made): {made}")
    for k, batch in enumerate(ld):
        seen += int(batch["graph_mask"].sum())
        if k in marks:
            m = _mem()
            print(f"  batch {k + 1:8d}/{n}: RssAnon {m['RssAnon']:8.1f} MiB, RssFile "
                  f"{m['RssFile']:8.1f} MiB, {seen / (time.perf_counter() - t):8.0f} graphs/s")
    assert seen == len(store)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    common = [options(with_out=False)]  # each command prints its own header line
    s = sub.add_parser("subset", parents=common)
    s.add_argument("source")
    s.add_argument("out")
    s.add_argument("--max-atoms", type=int, default=64)
    s.add_argument("--periodic", action="store_true")
    b = sub.add_parser("build", parents=common)
    b.add_argument("source")
    b.add_argument("--cutoff", type=float, default=5.0)
    b.add_argument("--workers", type=int, default=1)
    b.add_argument("--repeats", type=int, default=2)
    rd = sub.add_parser("reader", parents=common)
    rd.add_argument("source")
    e = sub.add_parser("edges", parents=common)
    e.add_argument("source")
    e.add_argument("store")
    lo = sub.add_parser("loader", parents=common)
    lo.add_argument("store")
    lo.add_argument("--structures", type=int, default=4000)
    lo.add_argument("--batch-size", type=int, default=32)
    lo.add_argument("--epochs", type=int, default=3)
    lo.add_argument("--strategy", default="dynamic")
    me = sub.add_parser("memory", parents=common)
    me.add_argument("store")
    me.add_argument("--structures", type=int, default=5000)
    r = sub.add_parser("replicate", parents=common)
    r.add_argument("store")
    r.add_argument("out")
    r.add_argument("--copies", type=int, default=10)
    m = sub.add_parser("rss", parents=common)
    m.add_argument("store")
    m.add_argument("--batch-size", type=int, default=32)
    m.add_argument("--strategy", default="dynamic")
    args = ap.parse_args(argv)
    start(args)
    globals()[f"cmd_{args.cmd}"](args)


if __name__ == "__main__":
    sys.exit(main())
