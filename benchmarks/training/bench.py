"""Issue-7 targets side by side in one run: compilations, padding cost, end-to-end speedup.

    python -m benchmarks.training.bench [--quick] [--out DIR] [--threads T]

Runs `graphbatch bench` on QM9 (radius 6 Å), SchNet, batch size 128: pack-lpf (eager and
compiled), dynamic, static-pow2, static-constant eager; our SchNet unpadded eager; PyG
DataLoader + PyG SchNet eager. Then a compile-count run at batch size 32 (static-64, dynamic,
pack-lpf compiled). Prints the ratios; the full records land in DIR.
"""

from __future__ import annotations

import dataclasses
import sys

from graphbatch.bench import BenchConfig, run_bench, summarize, targets, write_results

from benchmarks._harness import format_table, parser, start


def main(argv=None) -> int:
    ap = parser(__doc__, out="bench-targets",
                out_help="folder for the records (graphbatch bench's files)",
                threads_help="torch threads of the runs (default: the bench's)")
    ap.add_argument("--quick", action="store_true", help="fewer steps and molecules")
    args = ap.parse_args(argv)
    start(args)
    steps = 8 if args.quick else 25
    timing = BenchConfig(models=("schnet",), batch_sizes=(128,), steps=steps, repeats=1,
                         strategies=("pack-lpf", "dynamic", "static-pow2", "static-constant",
                                     "unpadded", "pyg-eager"),
                         subset=600 if args.quick else 2000, compile="auto", eval_every=steps,
                         threads=args.threads)
    compiles = dataclasses.replace(timing, batch_sizes=(32,), steps=4 if args.quick else 6,
                                   strategies=("static-64", "dynamic", "pack-lpf"),
                                   compile="on", eval_every=4 if args.quick else 6)
    records = run_bench(timing) + run_bench(compiles)
    write_results(args.out, records, {"timing": timing.as_dict(), "compiles": compiles.as_dict()})
    print(format_table(summarize(records), ["model", "batch_size", "strategy", "compiles",
                                            "compile_s", "batching_ms", "update_ms",
                                            "step_ms_median", "graphs_per_s",
                                            "update_us_per_graph"]))
    for t in targets(records):
        print(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
