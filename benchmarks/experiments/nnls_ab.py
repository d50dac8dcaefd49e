"""pack-nnls A/B: this checkout against an older source tree (e.g. the SciPy-nnls version before
issue 26's exact solver), side by side in one run.

Each (table, batch size) is planned in a fresh subprocess per source tree, the two trees
alternating, and the table shows batches, the lower bound, node/edge/graph efficiency and the
planning time (wall and CPU seconds of ``graphbatch.plan`` alone), with the time ratio.

    git archive OLD src | tar -x -C /tmp/old
    python -m benchmarks.experiments.nnls_ab --baseline-src /tmp/old/src [--rounds 2]

Tables: QM9 (radius-6 graphs, shipped) and MOSES in full; the code AST table as seeded
subsamples (the full table's pattern matrix is over pack-nnls's 40M-entry limit).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from benchmarks._harness import DATA, ROOT, finish, parser, start

CHILD = r"""
import json, sys, time
from importlib import resources
import numpy as np
import graphbatch as gb
name, k, bs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
path = (resources.files("graphbatch") / "data" / "qm9_radius6_sizes.npz" if name == "qm9"
        else sys.argv[4])
d = np.load(str(path))
n, e = d["n_node"].astype(np.int64), d["n_edge"].astype(np.int64)
if k:
    idx = np.random.default_rng(26).choice(n.shape[0], k, replace=False)
    n, e = n[idx], e[idx]
sizes = gb.GraphSizes(n, e)
w, c = time.perf_counter(), time.process_time()
p = gb.plan(sizes, "pack-nnls", batch_size=bs, seed=4, on_oversize="skip")
w, c = time.perf_counter() - w, time.process_time() - c
s = p.stats()
print(json.dumps(dict(batches=len(p), lower_bound=s.lower_bound, wall=w, cpu=c,
                      eff=[s.node_efficiency, s.edge_efficiency, s.graph_efficiency])))
"""


def _run(src: str, table: str, k: int, bs: int) -> dict:
    data = {"moses": DATA / "moses_train_sizes.npz",
            "code": DATA / "code_stdlib_sizes.npz"}.get(table, "")
    env = {**os.environ, "PYTHONPATH": src}
    out = subprocess.run([sys.executable, "-c", CHILD, table, str(k), str(bs), str(data)],
                         env=env, capture_output=True, text=True, check=True, cwd="/")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    ap = parser(__doc__, with_threads=False)
    ap.add_argument("--baseline-src", required=True, help="the older tree's src folder")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 128])
    ap.add_argument("--code-graphs", type=int, nargs="+", default=[3000, 12000])
    args = ap.parse_args(argv)
    info = start(args)
    here = str(ROOT / "src")
    results = []
    cases = [("qm9", 0), ("moses", 0)] + [("code", k) for k in args.code_graphs]
    print("| table | bs | batches new / base | lower bound | node eff new / base "
          "| edge eff new / base | graph eff new / base | wall s new / base | CPU s new / base "
          "| CPU new/base |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for table, k in cases:
        for bs in args.batch_sizes:
            runs: dict[str, list[dict]] = {"new": [], "base": []}
            for r in range(args.rounds):  # alternate, the first tree swapping each round
                trees = [("new", here), ("base", args.baseline_src)]
                for key, src in trees if r % 2 == 0 else trees[::-1]:
                    runs[key].append(_run(src, table, k, bs))
            a, b = runs["new"][0], runs["base"][0]
            cpu_a = min(x["cpu"] for x in runs["new"])
            cpu_b = min(x["cpu"] for x in runs["base"])
            wall_a = min(x["wall"] for x in runs["new"])
            wall_b = min(x["wall"] for x in runs["base"])
            eff = " | ".join(f"{a['eff'][i]:.4f} / {b['eff'][i]:.4f}" for i in range(3))
            label = f"{table} ({k} graphs)" if k else table
            print(f"| {label} | {bs} | {a['batches']} / {b['batches']} | {a['lower_bound']} "
                  f"| {eff} | {wall_a:.2f} / {wall_b:.2f} | {cpu_a:.2f} / {cpu_b:.2f} "
                  f"| {cpu_a / cpu_b:.2f} |", flush=True)
            results.append({"table": label, "batch_size": bs, "new": runs["new"],
                            "base": runs["base"]})
    finish(args, info, results)


if __name__ == "__main__":
    main()
