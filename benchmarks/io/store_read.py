"""Input pipeline from the graph store (issue 15): padded PyG batches per second, side by side.

For each store given (QM9 radius 6 Å, MOSES, ...), one run measures real graphs per second
delivered as padded PyG ``Batch``es under the same plan (``--strategy``, ``--batch-size``,
seed 0, epoch 0), one process and ``torch.set_num_threads(1)`` unless stated:

- ``store batch``: ``graphbatch.torch.loader(GraphStore(path), ...)`` -- the batch path (memory
  maps, one vectorised gather per array straight into the padded layout);
- ``store batch, in_memory``: the same with ``GraphStore(path, in_memory=True)``;
- ``store per-graph``: ``graphbatch.torch.loader(GraphStoreDataset(GraphStore(path)), ...)`` -- one
  PyG ``Data`` per graph, then ``collate`` (the path issue 15 measured), on the first batches only;
- ``gt.loader, list``: ``graphbatch.torch.loader`` over a Python list of the same graphs as
  ``Data`` held in memory (the first ``--baseline-graphs`` graphs, re-planned on that subset);
- ``PyG DataLoader, list``: ``torch_geometric.loader.DataLoader(list, batch_size, shuffle=True)``
  over that list (no padding: the baseline users have);
- ``store batch, N workers``: DataLoader workers (``num_workers`` 0, 1, 2, persistent), A/B in
  interleaved rounds: the slot-ring hand-off (``graphbatch.torch._slots``) against the previous
  one (one shared storage per batch, with torch's default and the ``file_system`` sharing
  strategy), with the main process's CPU per batch -- what workers cost the training process;
- ``[interleaved]``: store batch (memory map, in memory) and the PyG baseline in alternating
  rounds, so that each ratio compares throughputs measured in the same minute;
- ``kernel only``: the NumPy gather (`graphbatch._padbatch.pad_batch`) without torch, for the
  store layouts: memory map, in memory, and a version-1 store (chunked gzip HDF5, read per graph
  through h5py) when ``--v1`` is given -- the layout choice;
- cold cache: in a fresh process that has never mapped the file (run before this process
  opens it: ``posix_fadvise DONTNEED`` cannot drop pages a process maps), the file is dropped
  from the page cache and the first ``--cold-batches`` batches are read (cold), then the same
  batches again (warm), with ``shuffle=True`` and with ``shuffle="chunks"`` (chunk-aware); the
  share of the file resident in the page cache (``mincore``) is printed before and after;
- memory: a child process opens the store and iterates one full epoch on the batch path; its
  RSS split into anonymous and file-backed pages (``/proc/self/status``) before and after;
- ``--chunk-check-only``: the cost of the per-chunk CRC checks (``GraphStore(check_chunks=)``,
  on by default): in interleaved rounds, one full epoch through ``gt.loader`` on a freshly
  opened store with the checks (every chunk checked once, by the batch that first touches it)
  and without, plus one on a store whose chunks are all checked already (later epochs).

    python -m benchmarks.io.store_read --store qm9.h5 [--store moses.h5] \\
        [--v1 qm9-v1.h5] [--baseline-graphs 100000] [--epoch-batches 0]

Each store's header gives the CPU count and the 1-minute load average at the start (and the
table's last line at the end): on 2 cores, a load average near or above 2 means no free core.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import torch

import graphbatch as gb
import graphbatch.torch as gt
from graphbatch._padbatch import pad_batch
from graphbatch.datasets import GraphStore

from benchmarks._harness import finish, module_command, parser
from benchmarks._harness import start as start_run


def _real(batch) -> int:
    return int(batch.graph_mask.sum())


def _timed(it, limit: int | None = None) -> tuple[float, int, int, float]:
    """Wall seconds, real graphs, batches and this process's CPU seconds of iterating ``it``
    (at most ``limit`` batches)."""
    t0, c0 = time.perf_counter(), time.process_time()
    graphs = batches = 0
    for b in it:
        graphs += _real(b) if hasattr(b, "graph_mask") else int(b.num_graphs)
        batches += 1
        if limit and batches >= limit:
            break
    return time.perf_counter() - t0, graphs, batches, time.process_time() - c0


def _row(name, secs, graphs, batches, cpu=None, note=""):
    """``graphs/s`` is wall-clock; ``cpu graphs/s`` divides by this process's CPU time (what one
    free core would give; meaningless with workers, which run in other processes)."""
    return {"path": name, "graphs": graphs, "batches": batches, "seconds": round(secs, 3),
            "graphs/s": round(graphs / secs) if secs > 0 else float("inf"),
            "cpu graphs/s": round(graphs / cpu) if cpu else None, "note": note}


def _status() -> dict[str, int]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        k, _, v = line.partition(":")
        if k in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
            out[k] = int(v.split()[0]) * 1024
    return out


def rss_child(path: str, strategy: str, batch_size: int) -> None:
    """One full epoch on the batch path; prints RSS figures as JSON (run in a fresh process)."""
    torch.set_num_threads(1)
    import torch_geometric.data  # noqa: F401 - imported by the first batch anyway

    before = _status()
    store = GraphStore(path)
    opened = _status()
    ld = gt.loader(store, strategy=strategy, batch_size=batch_size, seed=0)
    planned = _status()
    secs, graphs, batches, _ = _timed(ld)
    after = _status()
    import psutil

    wl = gt.loader(store, strategy=strategy, batch_size=batch_size, seed=0,
                   dataloader_kwargs={"num_workers": 2, "persistent_workers": True})
    _timed(wl)
    workers = []
    for child in psutil.Process().children():
        mem = child.memory_full_info()
        workers.append({"rss": mem.rss, "uss": mem.uss, "shared": mem.shared})
    size_table = sum(a.nbytes for a in (store.n_node, store.n_edge, store.node_offsets,
                                        store.edge_offsets))
    print(json.dumps({"before": before, "opened": opened, "planned": planned, "after": after,
                      "file_bytes": os.path.getsize(path), "size_table_bytes": size_table,
                      "graphs": graphs, "seconds": secs, "workers": workers}))


def resident_share(path: str) -> float:
    """Share of the file's pages in the page cache (``mincore`` on a fresh map of it)."""
    import ctypes
    import mmap

    size = os.path.getsize(path)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr is None or addr == ctypes.c_void_p(-1).value:
            return float("nan")
        vec = (ctypes.c_ubyte * -(-size // mmap.PAGESIZE))()
        ok = libc.mincore(ctypes.c_void_p(addr), size, vec) == 0
        libc.munmap(ctypes.c_void_p(addr), size)
    finally:
        os.close(fd)
    return float((np.frombuffer(vec, dtype=np.uint8) & 1).mean()) if ok else float("nan")


def cold_child(path: str, mode: str, args) -> None:
    """Cold, then warm, reads of the first ``--cold-batches`` batches of ``gt.loader`` with
    ``shuffle=True`` (``mode="shuffled"``) or ``"chunks"``; prints JSON. Run in a fresh process
    (nothing maps the file yet, so dropping it from the page cache works)."""
    torch.set_num_threads(1)
    import torch_geometric.data  # noqa: F401 - imported by the first batch anyway

    kw = dict(strategy=args.strategy, batch_size=args.batch_size, seed=0)
    if mode == "chunks":
        kw.update(shuffle="chunks", chunk_graphs=args.chunk_graphs,
                  window_chunks=args.window_chunks)
    drop_cache(path)
    out = {"mode": mode, "resident_before": resident_share(path)}
    for when in ("cold", "warm"):
        out[when] = _timed(gt.loader(GraphStore(path), **kw), args.cold_batches)
        out[f"resident_after_{when}"] = resident_share(path)
    print(json.dumps(out))


def drop_cache(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def v1_batch(f, fields, no, eo, idx) -> int:
    """Read the graphs ``idx`` of a version-1 store per graph through h5py (the old layout)."""
    n = 0
    for i in idx.tolist():
        f["edge_index"][:, eo[i]:eo[i + 1]]
        for name, spec in fields.items():
            lo, hi = {"node": (no[i], no[i + 1]), "edge": (eo[i], eo[i + 1]),
                      "graph": (i, i + 1)}[spec["level"]]
            f[f"{spec['level']}/{name}"][lo:hi]
        n += 1
    return n


def _child(args, *extra: str) -> dict:
    cmd = [*module_command(__spec__), "--strategy", args.strategy, "--batch-size",
           str(args.batch_size), "--cold-batches", str(args.cold_batches), "--chunk-graphs",
           str(args.chunk_graphs), "--window-chunks", str(args.window_chunks), *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_store(path: str, args) -> list[dict]:
    rows = []
    torch.set_num_threads(1)
    print(f"\n## {path}: {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f} at start",
          flush=True)
    if args.chunk_check_only:
        kw = dict(strategy=args.strategy, batch_size=args.batch_size, seed=0)
        rows, summary = chunk_check_ab(path, kw, args.rounds)
        print_rows(rows)
        print("\n".join(summary))
        print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
              f"(1, 5, 15 min) on {os.cpu_count()} CPUs")
        return rows
    if args.workers_only:
        kw = dict(strategy=args.strategy, batch_size=args.batch_size, seed=0)
        rows, summary = workers_ab(GraphStore(path), kw, args.worker_rounds, args.round_batches)
        print_rows(rows)
        print("\n".join(summary))
        print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
              f"(1, 5, 15 min) on {os.cpu_count()} CPUs")
        return rows
    # cold cache first, in fresh processes, while this process does not map the file
    cold = [_child(args, "--cold-child", path, "--cold-mode", mode)
            for mode in ("shuffled", "chunks")]
    t0 = time.perf_counter()
    store = GraphStore(path)
    open_s = time.perf_counter() - t0
    sizes = store.graph_sizes()
    kw = dict(strategy=args.strategy, batch_size=args.batch_size, seed=0)
    print(f"\n## {path}: {len(store):,} graphs, {int(sizes.n_node.sum()):,} nodes, "
          f"{int(sizes.n_edge.sum()):,} edges, file {os.path.getsize(path) / 2**20:,.0f} MiB, "
          f"opened in {open_s * 1e3:.0f} ms", flush=True)
    limit = args.epoch_batches or None

    ld = gt.loader(store, **kw)
    plan = ld.plan
    rows.append(_row("store batch", *_timed(ld, limit), note="memory map, 0 workers, epoch 0"))
    rows.append(_row("store batch, next epoch", *_timed(ld, limit),
                     note="same maps: pages already mapped"))
    mem = GraphStore(path, in_memory=True)
    rows.append(_row("store batch, in_memory", *_timed(gt.loader(mem, **kw), limit),
                     note="arrays read into RAM once"))
    rows.append(_row("store per-graph", *_timed(gt.loader(gt.GraphStoreDataset(store), **kw),
                                                args.per_graph_batches),
                     note=f"first {args.per_graph_batches} batches"))
    wrows, worker_summary = workers_ab(store, kw, args.worker_rounds, args.round_batches)
    rows += wrows

    # baselines over the same graphs held in memory as Data
    n_base = min(len(store), args.baseline_graphs)
    ds = gt.GraphStoreDataset(store)
    t0 = time.perf_counter()
    data = [ds[i] for i in range(n_base)]
    make_s = time.perf_counter() - t0
    sub = gb.GraphSizes(sizes.n_node[:n_base], sizes.n_edge[:n_base])
    note = f"first {n_base:,} graphs as Data (made in {make_s:.0f} s)"
    rows.append(_row("gt.loader, list", *_timed(gt.loader(data, sizes=sub, **kw)), note=note))
    from torch_geometric.loader import DataLoader as PygLoader

    pyg = PygLoader(data, batch_size=args.batch_size, shuffle=True,
                    generator=torch.Generator().manual_seed(0))
    rows.append(_row("PyG DataLoader, list", *_timed(pyg), note=note + ", unpadded"))

    # interleaved rounds: the same moment for every path (other jobs share the cores)
    rows += interleaved({
        "store batch": gt.loader(store, **kw),
        "store batch, in_memory": gt.loader(mem, **kw),
        "PyG DataLoader, list": pyg,
    }, args.rounds, args.round_batches)
    del data, pyg

    # kernel only: the layouts
    idx_batches = list(plan.batches())[: args.kernel_batches]
    shapes = [plan.shape(b) for b in range(len(idx_batches))]
    for name, src in (("kernel, memory map", store.packed()), ("kernel, in_memory", mem.packed())):
        t0, c0 = time.perf_counter(), time.process_time()
        g = 0
        for idx, shape in zip(idx_batches, shapes):
            g += pad_batch(src, idx, shape).num_real[0]
        rows.append(_row(name, time.perf_counter() - t0, g, len(idx_batches),
                         time.process_time() - c0, "NumPy only"))
    if args.v1 and Path(args.v1).is_file() and Path(args.v1).stat().st_size:
        import h5py

        with h5py.File(args.v1, "r") as f:
            fields = json.loads(f.attrs["fields"])
            no, eo = store.node_offsets, store.edge_offsets
            t0, c0 = time.perf_counter(), time.process_time()
            g = sum(v1_batch(f, fields, no, eo, idx) for idx in idx_batches[:20])
            rows.append(_row("kernel, v1 gzip chunks", time.perf_counter() - t0, g,
                             min(20, len(idx_batches)), time.process_time() - c0,
                             "h5py per graph (no padding)"))

    # cold cache (measured first, above): shuffle=True vs shuffle="chunks"
    for c in cold:
        label = "chunk-aware" if c["mode"] == "chunks" else "shuffled"
        for when, start in (("cold", "resident_before"), ("warm", "resident_after_cold")):
            secs, g, nb, cpu = c[when]
            rows.append(_row(f"{when} cache, {label}", secs, g, nb, cpu,
                             f"first {args.cold_batches} batches; file in page cache "
                             f"{c[start]:.0%} -> {c['resident_after_' + when]:.0%}"))

    # memory of one full epoch, in a fresh process
    out = subprocess.run([*module_command(__spec__), "--rss-child", path, "--strategy",
                          args.strategy, "--batch-size", str(args.batch_size)],
                         capture_output=True, text=True, check=True)
    rss = json.loads(out.stdout.strip().splitlines()[-1])
    print_rows(rows)
    print("\n".join(worker_summary))
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"(1, 5, 15 min) on {os.cpu_count()} CPUs")
    a, b = rss["before"], rss["after"]
    mib = 2**20
    print(f"\nmemory, one full epoch on the batch path ({rss['graphs']:,} graphs in "
          f"{rss['seconds']:.1f} s): RSS {a['VmRSS'] / mib:,.0f} -> {b['VmRSS'] / mib:,.0f} MiB "
          f"(anonymous {a['RssAnon'] / mib:,.0f} -> {b['RssAnon'] / mib:,.0f}, file-backed "
          f"{a['RssFile'] / mib:,.0f} -> {b['RssFile'] / mib:,.0f}); peak {b['VmHWM'] / mib:,.0f} "
          f"MiB; store file {rss['file_bytes'] / mib:,.0f} MiB, size table "
          f"{rss['size_table_bytes'] / mib:,.1f} MiB")
    for k, w in enumerate(rss["workers"]):
        print(f"worker {k} after a full epoch with 2 workers: RSS {w['rss'] / mib:,.0f} MiB, of "
              f"which shared {w['shared'] / mib:,.0f} MiB; private (USS) {w['uss'] / mib:,.0f} MiB")
    growth = b["VmRSS"] - a["VmRSS"]
    budget = 1.5 * (rss["file_bytes"] + rss["size_table_bytes"])
    print(f"RSS growth {growth / mib:,.0f} MiB (after imports, before opening the store) vs "
          f"1.5 x (one epoch's working set = the whole file + size table) = "
          f"{budget / mib:,.0f} MiB: {'PASS' if growth < budget else 'FAIL'}")
    return rows


def _previous_hand_off(loader):
    """``loader`` with the hand-off before the slot ring: each worker batch crosses as one
    shared storage (torch's per-storage IPC), for the A/B. (An instance attribute hides
    `StoreCollater.start_pass`, so `PlanLoader` starts its workers without a ring.)"""
    loader.collate_fn.start_pass = None
    return loader


def workers_ab(store, kw: dict, rounds: int, n: int) -> tuple[list[dict], list[str]]:
    """DataLoader workers on the batch path, A/B in one run: 0 workers, and 1 and 2
    persistent workers with the slot-ring hand-off (new) and with the previous one (one
    shared storage per batch, with torch's default sharing strategy and ``file_system``), in
    ``rounds`` interleaved rounds of ``n`` batches per configuration (after 20 warm-up
    batches; workers start before the first round). Rows: median round of each; lines: the
    2/0 and 2/1 worker ratios and the main process's CPU per batch (``time.process_time``:
    what the workers cost the training process)."""
    import torch.multiprocessing as tmp

    default = tmp.get_sharing_strategy()
    configs = {"store batch, 0 workers": (0, None, default)}
    for workers in (1, 2):
        name = f"store batch, {workers} worker{'s' * (workers > 1)}"
        configs[name] = (workers, "new", default)
        configs[name + ", previous hand-off"] = (workers, "old", default)
        configs[name + ", previous hand-off, fs"] = (workers, "old", "file_system")
    its = {}
    for name, (workers, hand_off, sharing) in configs.items():
        tmp.set_sharing_strategy(sharing)
        ld = gt.loader(store, dataloader_kwargs={"num_workers": workers,
                                                 "persistent_workers": workers > 0}, **kw)
        if hand_off == "old":
            _previous_hand_off(ld)
        its[name] = _cycle(ld)
        _timed(its[name], 20)
    wall = {k: [] for k in configs}
    cpu = {k: [] for k in configs}
    graphs = {k: 0 for k in configs}
    for _ in range(rounds):
        for name, it in its.items():
            tmp.set_sharing_strategy(configs[name][2])  # the main unpickles with it too
            secs, g, nb, c = _timed(it, n)
            wall[name].append(g / secs)
            cpu[name].append(c / nb)
            graphs[name] += g
    tmp.set_sharing_strategy(default)
    rows = []
    for name, (workers, hand_off, sharing) in configs.items():
        note = "0 workers (one process)" if not workers else (
            f"{'slot ring' if hand_off == 'new' else 'one shared storage per batch'}, "
            f"sharing {sharing}")
        rows.append({"path": name, "graphs": graphs[name], "batches": n * rounds,
                     "seconds": float("nan"), "graphs/s": round(float(np.median(wall[name]))),
                     "cpu graphs/s": None,
                     "note": f"median of {rounds} rounds of {n}; main-process CPU "
                             f"{np.median(cpu[name]) * 1e3:.3f} ms/batch; {note}"})
    med = {k: float(np.median(v)) for k, v in wall.items()}
    zero = "store batch, 0 workers"
    lines = []
    for suffix, label in (("", "slot ring (new)"), (", previous hand-off", "previous, "
                          + default), (", previous hand-off, fs", "previous, file_system")):
        one, two = med["store batch, 1 worker" + suffix], med["store batch, 2 workers" + suffix]
        lines.append(f"{label}: 2 workers / 0 workers {two / med[zero]:.2f}x, 2 workers / 1 "
                     f"worker {two / one:.2f}x, 1 worker / 0 workers {one / med[zero]:.2f}x")
    lines.append(receive_cost(store, kw))
    per = {k: np.array(v) for k, v in cpu.items()}
    for workers in (1, 2):
        name = f"store batch, {workers} worker{'s' * (workers > 1)}"
        new, old = per[name], per[name + ", previous hand-off"]
        fs = per[name + ", previous hand-off, fs"]
        lines.append(f"main-process CPU per batch, {workers} worker{'s' * (workers > 1)}: "
                     f"slot ring {np.median(new) * 1e3:.3f} ms, previous {np.median(old) * 1e3:.3f}"
                     f" ms ({default}) / {np.median(fs) * 1e3:.3f} ms (file_system); same-round "
                     f"ratio previous / slot ring {np.median(old / new):.1f}x / "
                     f"{np.median(fs / new):.1f}x; 0 workers: "
                     f"{np.median(per[zero]) * 1e3:.3f} ms")
    return rows, lines


def receive_cost(store, kw: dict, batches: int = 50, repeat: int = 20) -> str:
    """CPU per batch, in this process, of what the main does for a worker batch (copy its slot
    out and build the ``Batch``: `SlotReceiver`) next to reading the batch here (0 workers),
    over the first ``batches`` batches of the plan, written into a ring as a worker would."""
    from graphbatch.torch._slots import SlotBatch, SlotReceiver, SlotRing

    ld = gt.loader(store, **kw)
    col, plan = ld.collate_fn, ld.plan
    extra = ld.plan_sampler.extra_padding_nodes
    ring = SlotRing(1, batches, col.slot_bytes(ld))
    receiver = SlotReceiver(ring, col.batcher.from_buffer)
    msgs, work = [], []
    for b in range(min(batches, len(plan))):
        n, e, g = plan.shape(b)
        shape, idx = (n + extra, e, g), plan.batch(b)
        slot, ticket, buf = ring.claim(0, col.batcher.buffer_bytes(shape))
        pad = store.read_batch(idx, shape, dtypes=col.batcher._dtypes, pad=col.batcher._pads,
                               allocate=lambda nbytes, buf=buf: buf)
        msgs.append(SlotBatch(ring.token, slot, ticket, col.batcher.buffer_bytes(shape),
                              pad.shape, pad.num_real[0]))
        work.append((idx, shape))
    c0 = time.process_time()
    for _ in range(repeat):
        for m in msgs:
            receiver(m)
    recv = (time.process_time() - c0) / (repeat * len(msgs))
    c0 = time.process_time()
    for _ in range(max(1, repeat // 4)):
        for idx, shape in work:
            col.batcher(idx, shape)
    read = (time.process_time() - c0) / (max(1, repeat // 4) * len(work))
    return (f"main-process CPU of one batch, in-process loop: receive from a slot "
            f"{recv * 1e6:.0f} µs vs read here (0 workers) {read * 1e6:.0f} µs "
            f"({read / recv:.0f}x)")


def _cycle(loader):
    while True:
        yield from loader


def chunk_check_ab(path: str, kw: dict, rounds: int) -> tuple[list[dict], list[str]]:
    """Store-fed throughput with and without the per-chunk CRC checks, side by side: in each of
    ``rounds`` rounds, one full epoch of ``gt.loader`` on a freshly opened store with checks
    (first epoch: each check chunk is checked by the batch that first touches it), on a freshly
    opened store without, and on a store whose chunks were all checked before (what every later
    epoch in the process costs). Rows: the median round of each; lines: same-round ratios."""
    warm = GraphStore(path)
    for _ in gt.loader(warm, **kw):
        pass
    assert warm._checker is None or warm._checker.remaining == 0
    paths = {"checks on, first epoch": lambda: GraphStore(path),
             "checks on, later epoch": lambda: warm,
             "checks off": lambda: GraphStore(path, check_chunks=False)}
    wall: dict[str, list] = {k: [] for k in paths}
    cpu: dict[str, list] = {k: [] for k in paths}
    graphs = {k: 0 for k in paths}
    batches = 0
    for _ in range(rounds):
        for k, make in paths.items():
            store = make()
            secs, g, nb, c = _timed(gt.loader(store, **kw))
            wall[k].append(g / secs)
            cpu[k].append(g / c)
            graphs[k] += g
            batches = nb
    rows = [{"path": k, "graphs": graphs[k], "batches": batches * rounds,
             "seconds": float("nan"), "graphs/s": round(float(np.median(wall[k]))),
             "cpu graphs/s": round(float(np.median(cpu[k]))),
             "note": f"median of {rounds} rounds of one epoch"} for k in paths]
    lines = []
    for what, per in (("wall", wall), ("cpu", cpu)):
        base = np.array(per["checks off"])
        for k in ("checks on, first epoch", "checks on, later epoch"):
            r = np.array(per[k]) / base
            lines.append(f"{k} / checks off, same round, {what} graphs/s: median "
                         f"{np.median(r):.3f} (min {r.min():.3f}, max {r.max():.3f}): cost "
                         f"{100 * (1 - np.median(r)):.1f}% of store-fed throughput")
    t0 = time.perf_counter()
    GraphStore(path).verify()
    lines.append(f"verify() of the whole file (the CRC work a first epoch does, once per "
                 f"process): {time.perf_counter() - t0:.3f} s for "
                 f"{os.path.getsize(path) / 2**20:,.0f} MiB")
    return rows, lines


def interleaved(loaders: dict, rounds: int, n: int) -> list[dict]:
    """``rounds`` rounds; in each, ``n`` batches from every loader in turn. Rows: the median
    round of each path, and the median over rounds of each path's ratio to the last loader
    (measured in the same round, so a busy minute slows both sides)."""
    its = {k: _cycle(v) for k, v in loaders.items()}
    wall = {k: [] for k in loaders}
    cpu = {k: [] for k in loaders}
    graphs = {k: 0 for k in loaders}
    for _ in range(rounds):
        for k, it in its.items():
            secs, g, _, c = _timed(it, n)
            wall[k].append(g / secs)
            cpu[k].append(g / c)
            graphs[k] += g
    base = list(loaders)[-1]
    out = []
    for k in loaders:
        rw = np.median(np.array(wall[k]) / np.array(wall[base]))
        rc = np.median(np.array(cpu[k]) / np.array(cpu[base]))
        out.append({"path": f"{k} [interleaved]", "graphs": graphs[k], "batches": n * rounds,
                    "seconds": float("nan"), "graphs/s": round(float(np.median(wall[k]))),
                    "cpu graphs/s": round(float(np.median(cpu[k]))),
                    "note": f"median of {rounds} rounds of {n} batches; same-round ratio to "
                            f"{base}: wall {rw:.1f}x, cpu {rc:.1f}x"})
    return out


def print_rows(rows: list[dict]) -> None:
    ref = {r["path"]: r["graphs/s"] for r in rows}
    base = ref.get("PyG DataLoader, list")
    cbase = {r["path"]: r["cpu graphs/s"] for r in rows}.get("PyG DataLoader, list")
    w = max([30] + [len(r["path"]) for r in rows])
    print(f"\n{'path':<{w - 2}} {'graphs':>10} {'batches':>7} {'seconds':>8} {'graphs/s':>9} "
          f"{'x PyG':>6} {'cpu graphs/s':>12} {'x PyG':>6}  note")
    for r in rows:
        x = f"{r['graphs/s'] / base:6.1f}" if base else ""
        c = r["cpu graphs/s"]
        cx = f"{c / cbase:6.1f}" if c and cbase else ""
        print(f"{r['path']:<{w}} {r['graphs']:>10,} {r['batches']:>7,} {r['seconds']:>8.2f} "
              f"{r['graphs/s']:>9,} {x:>6} {(f'{c:,}' if c else '-'):>12} {cx:>6}  {r['note']}")


def main(argv=None) -> None:
    p = parser(__doc__, with_threads=False, out_help="write each store's rows as JSON to this file")
    p.add_argument("--store", action="append", default=[], help="graph store (repeatable)")
    p.add_argument("--v1", help="a version-1 store of the first --store's graphs (layout bench)")
    p.add_argument("--strategy", default="pack-lpf")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--baseline-graphs", type=int, default=10**9,
                   help="graphs held as Data for the in-memory baselines (default all)")
    p.add_argument("--epoch-batches", type=int, default=0, help="0 = full epochs")
    p.add_argument("--per-graph-batches", type=int, default=100)
    p.add_argument("--kernel-batches", type=int, default=300)
    p.add_argument("--cold-batches", type=int, default=200)
    p.add_argument("--chunk-graphs", type=int, default=4096)
    p.add_argument("--window-chunks", type=int, default=8)
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    p.add_argument("--round-batches", type=int, default=150, help="batches per path per round")
    p.add_argument("--worker-rounds", type=int, default=5, help="interleaved worker rounds")
    p.add_argument("--chunk-check-only", action="store_true",
                   help="only the A/B of the per-chunk CRC checks (first and later epochs)")
    p.add_argument("--workers-only", action="store_true",
                   help="only the DataLoader worker A/B (0/1/2 workers, both hand-offs)")
    p.add_argument("--rss-child", help=argparse.SUPPRESS)
    p.add_argument("--cold-child", help=argparse.SUPPRESS)
    p.add_argument("--cold-mode", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.cold_child:
        cold_child(args.cold_child, args.cold_mode, args)
        return
    if args.rss_child:
        rss_child(args.rss_child, args.strategy, args.batch_size)
        return
    info = start_run(args)
    results = {path: bench_store(path, args) for path in args.store}
    finish(args, info, results)


if __name__ == "__main__":
    main()
