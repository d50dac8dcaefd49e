"""Low-bandwidth GGNN propagation on CPU: dense band (Algorithm 1) vs scatter-add, side by side.

On Python code graphs (functions of the standard library, RCM-reordered) this measures, in one
run:
  1. bandwidth statistics (the paper's Figure 1) and the coverage of each block size S
     (share of graphs with bandwidth < S, share of edges kept in supergraphs of K·S slots);
  2. GGNN training-step time (forward + backward, T steps, hidden H) and peak memory of the
     dense-band and the scatter backend on the *same* supergraphs and kept edges, for
     S in {32, 64, 128, 256} at a fixed supergraph size N = K·S; each (S, backend) runs in a
     fresh subprocess so that its peak RSS (VmHWM, reset after setup) is its own;
  3. the N/B crossover: time of full densification (one [P·N, N] @ [N, H] matmul) vs the band's
     three batched matmuls as N/S grows at fixed S (theory: band wins from N/B ~ 3).

    python -m benchmarks.training.lowband [--quick] [--graphs 3000] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sysconfig
import tempfile
import time
from pathlib import Path

from graphbatch.lowband import (
    EdgeGraphs, apply_reordering, band_coverage, bandwidth_summary, build_supergraphs,
    default_strategy, reduce_bandwidth,
)

from benchmarks._harness import finish, format_table, module_command, parser, start


def load_code_graphs(limit: int, source: Path) -> tuple[EdgeGraphs, str]:
    """ogbg-code2-style function graphs from ``graphbatch.datasets`` (AST + next-token edges and
    their reverses: 4 edge types)."""
    from graphbatch.lowband._sources import graphs_from_python

    graphs = graphs_from_python(source, limit=limit)
    return graphs, "graphbatch.datasets.code_graphs, reverse_edges=True"


def _vm(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def child(args) -> None:
    """One (backend, S) measurement in a fresh process; prints one JSON line."""
    import torch

    from graphbatch.lowband.nn import GGNN, BandPropagation, ScatterPropagation

    torch.set_num_threads(args.threads)
    graphs = EdgeGraphs.load(args.graphs_file)
    s, k = args.block_size, args.slots // args.block_size
    res = build_supergraphs(graphs, s, k, strategy=args.strategy, seed=0)
    sgs = res.supergraphs[: args.supergraphs]
    torch.manual_seed(0)
    model = GGNN(args.hidden, graphs.num_edge_types, steps=args.steps)
    emb = torch.nn.Embedding(int(graphs.node_data["node_type"].max()) + 1, args.hidden)
    inputs = []
    for sg in sgs:
        if args.backend == "band":
            prop = BandPropagation.from_supergraph(sg)
            prop_bytes = sum(t.numel() * t.element_size() for t in (prop.c, prop.u, prop.lo))
        else:
            prop = ScatterPropagation.from_supergraph(sg)
            prop_bytes = sum(t.numel() * t.element_size()
                             for t in (prop.senders, prop.key))
        types = torch.as_tensor(sg.gather_nodes(graphs.node_data["node_type"])).long()
        inputs.append((prop, types, prop_bytes))
    params = [*model.parameters(), *emb.parameters()]

    def step(prop, types):
        h = model(emb(types), prop)
        loss = h.square().mean()
        return torch.autograd.grad(loss, params)

    step(inputs[0][0], inputs[0][1])  # warm-up
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # reset VmHWM: the peak below belongs to the steps only
    base = _vm("VmRSS")
    times = []
    for _ in range(args.repeats):
        for prop, types, _ in inputs:
            t0 = time.perf_counter()
            step(prop, types)
            times.append(time.perf_counter() - t0)
    peak = _vm("VmHWM") - base
    print(json.dumps({
        "backend": args.backend, "S": s, "K": k,
        "step_ms": 1e3 * statistics.median(times),
        "peak_mb": peak / 2**20,
        "graph_tensors_mb": statistics.mean(b for *_, b in inputs) / 2**20,
        "graphs_per_super": statistics.mean(len(sg.graph_index) for sg in sgs),
        "kept_edges_per_super": statistics.mean(sg.num_kept for sg in sgs),
        "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }))


def crossover(block_size: int, ratios, hidden: int, num_types: int, threads: int, reps: int):
    """Time full densification vs the band's three BMMs for N = K·S, K in ``ratios``."""
    import torch

    from graphbatch.lowband.nn import band_premessages

    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    rows = []
    s = block_size
    for k in ratios:
        n = k * s
        e = torch.randn(n, hidden, generator=g)
        dense = (torch.rand(num_types * n, n, generator=g) < 0.01).float()
        c = torch.rand(k, s * num_types, s, generator=g)
        u = torch.rand(k - 1, s * num_types, s, generator=g)
        lo = torch.rand(k - 1, s * num_types, s, generator=g)

        def t_dense():
            return dense @ e

        def t_band():
            return band_premessages(c, u, lo, e.view(k, s, hidden))

        res = {}
        for name, f in (("dense", t_dense), ("band", t_band)):
            f()
            ts = []
            for _ in range(reps):
                t0 = time.perf_counter()
                f()
                ts.append(time.perf_counter() - t0)
            res[name] = statistics.median(ts)
        rows.append({"N/B": round(n / (s - 1), 2), "K=N/S": k, "N": n,
                     "dense_ms": 1e3 * res["dense"], "band_ms": 1e3 * res["band"],
                     "dense/band": res["dense"] / res["band"],
                     "flops dense/band": (k * k) / (3 * k - 2)})
    return rows


def main(argv=None) -> None:
    ap = parser(__doc__, threads=1, threads_help="torch threads (shared machine: 1)")
    ap.add_argument("--quick", action="store_true", help="small run (~1 min)")
    ap.add_argument("--graphs", type=int, default=3000, help="code graphs to build")
    ap.add_argument("--source", default=sysconfig.get_paths()["stdlib"],
                    help="directory of .py files (default: the standard library)")
    ap.add_argument("--block-sizes", type=int, nargs="+", default=[32, 64, 128, 256])
    ap.add_argument("--slots", type=int, default=4096, help="supergraph size N = K·S")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--steps", type=int, default=4, help="GGNN propagation steps T")
    ap.add_argument("--supergraphs", type=int, default=3, help="supergraphs timed per config")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2,
                    help="interleaved rounds over all configs; the fastest round is kept")
    ap.add_argument("--strategy", default=None,
                    help="packing strategy for supergraphs (default: lowband.default_strategy())")
    # child mode (internal)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--backend", help=argparse.SUPPRESS)
    ap.add_argument("--block-size", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--graphs-file", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args)
        return
    info = start(args)
    if args.strategy is None:
        args.strategy = default_strategy()
    if args.quick:
        args.graphs, args.slots, args.supergraphs, args.repeats, args.rounds = 600, 2048, 2, 2, 1

    t0 = time.perf_counter()
    graphs, source = load_code_graphs(args.graphs, Path(args.source))
    t_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    reorder = reduce_bandwidth(graphs)
    t_rcm = time.perf_counter() - t0
    reordered = apply_reordering(graphs, reorder)
    summ = bandwidth_summary(graphs.n_node, reorder.before, reorder.after,
                             bounds=(32, 64, 128, 256, 512, 1024))
    print(f"# {len(graphs):,} code graphs from {args.source} ({source}); "
          f"{graphs.num_nodes:,} nodes, {graphs.num_edges:,} edges, "
          f"{graphs.num_edge_types} edge types; built in {t_build:.1f} s, RCM for all graphs "
          f"in {t_rcm:.2f} s")
    print(f"# nodes max {summ.max_nodes}; bandwidth max {summ.max_bandwidth_before} -> "
          f"{summ.max_bandwidth_after}, mean {summ.mean_bandwidth_before:.1f} -> "
          f"{summ.mean_bandwidth_after:.1f}; RCM narrower for {summ.share_rcm_narrower:.1%}; "
          f"N/B >= 3 for {summ.share_ratio_at_least_3:.1%}; N/B quantiles "
          + ", ".join(f"{k} {v:.2f}" for k, v in summ.ratio_quantiles.items()))
    print("\n## Share of graphs with bandwidth < B (Figure 1, middle)")
    print(format_table([{"B": b, "RCM": summ.share_below[b], "original": summ.share_below_before[b],
                         "nodes < B": summ.share_nodes_below[b]} for b in summ.share_below]))

    print(f"\n## Coverage per block size (supergraphs of N = {args.slots} slots, packed by "
          f"{args.strategy!r})")
    cov = []
    for s in args.block_sizes:
        cov += band_coverage(reordered, [s], args.slots // s, strategy=args.strategy)
    print(format_table(cov, ["block_size", "num_blocks", "graphs_bw_below_S",
                             "graphs_lossless_share", "graphs_oversize", "edges_kept_share",
                             "supergraphs", "node_slot_efficiency"]))

    print(f"\n## GGNN step (forward+backward), H={args.hidden}, T={args.steps}, "
          f"{args.threads} torch thread(s), same supergraphs and kept edges per S; median of "
          f"{args.supergraphs} supergraphs x {args.repeats} repeats, best of {args.rounds} "
          "interleaved rounds")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        gfile = os.path.join(tmp, "reordered.npz")
        reordered.save(gfile)
        results: dict[tuple[int, str], dict] = {}
        for _ in range(args.rounds):  # interleaved rounds; keep each config's fastest round
            for s in args.block_sizes:
                for backend in ("band", "scatter"):
                    cmd = [*module_command(__spec__), "--child", "--backend", backend,
                           "--block-size", str(s), "--graphs-file", gfile,
                           "--slots", str(args.slots), "--hidden", str(args.hidden),
                           "--steps", str(args.steps), "--supergraphs", str(args.supergraphs),
                           "--repeats", str(args.repeats), "--threads", str(args.threads),
                           "--strategy", args.strategy]
                    # fixed mmap threshold: large tensors are mmapped and returned to the OS on
                    # free, so RSS follows live tensor memory (no glibc heap reuse hiding a peak)
                    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536",
                           "MALLOC_TRIM_THRESHOLD_": "65536"}
                    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                                         env=env)
                    res = json.loads(out.stdout.strip().splitlines()[-1])
                    old = results.get((s, backend))
                    if old is not None:
                        res["peak_mb"] = max(res["peak_mb"], old["peak_mb"])
                        if old["step_ms"] < res["step_ms"]:
                            res["step_ms"] = old["step_ms"]
                    results[(s, backend)] = res
        for s in args.block_sizes:
            b, sc = results[(s, "band")], results[(s, "scatter")]
            rows.append({"S": s, "K": b["K"], "graphs/super": b["graphs_per_super"],
                         "band_ms": b["step_ms"], "scatter_ms": sc["step_ms"],
                         "band/scatter time": b["step_ms"] / sc["step_ms"],
                         "band_step_peak_MB": b["peak_mb"],
                         "scatter_step_peak_MB": sc["peak_mb"],
                         "band_blocks_MB": b["graph_tensors_mb"],
                         "scatter_index_MB": sc["graph_tensors_mb"],
                         "band/scatter memory": (b["peak_mb"] + b["graph_tensors_mb"])
                         / (sc["peak_mb"] + sc["graph_tensors_mb"])})
    print(format_table(rows))
    print("step peak = VmHWM rise during the timed steps (reset after warm-up); blocks/index = "
          "graph tensors per supergraph held before the steps; memory ratio = (peak + graph "
          "tensors) band / scatter")

    s_cross = 64
    ratios = [1, 2, 3, 4, 6, 8] if args.quick else [1, 2, 3, 4, 5, 6, 8, 12, 16]
    print(f"\n## N/B crossover: full densification vs band (S = {s_cross}, B = S-1, "
          f"H = {args.hidden}, P = {graphs.num_edge_types})")
    cr = crossover(s_cross, ratios, args.hidden, graphs.num_edge_types, args.threads,
                   reps=5 if args.quick else 10)
    print(format_table(cr))
    first = None  # smallest N/B from which the band stays faster for every larger ratio
    for r in reversed(cr):
        if r["dense/band"] <= 1.0:
            break
        first = r
    print("measured crossover: band faster from N/B = "
          + (f"{first['N/B']} (K = {first['K=N/S']}) on" if first else "never in this range")
          + "  (theory: 3)")
    finish(args, info)


if __name__ == "__main__":
    main()
