"""``buckets`` on heavy-tailed AST graphs: the scaled family, tight shapes, and the bound.

    python -m benchmarks.experiments.buckets_bound [--data DIR] [--site-packages PATH]
        [--batch-size 128] [--shapes 1,2,3,4,8]

Builds (when missing, into ``--data``) the code-graph stores of the Python standard library and
of ``--site-packages`` (default: the base interpreter's ``site-packages``) with ``graphbatch data
build code``, joins their size tables, and for every K prints the node and edge efficiency of
``buckets`` with the scaled family (default), with graphs above the budget in batches of their
own outside the K shapes (``on_oversize="own_batch", oversize_shapes="own"``) and with tight
shapes (``tight_shape=True``), the
bound of `graphbatch.packing.shape_padding_bound` on the tight plan's packs, and the trivial
bound of one padding node per batch. Nothing large is committed: the stores are rebuilt.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np

import graphbatch as gb
from graphbatch.analysis import load_sizes

from benchmarks._harness import DATA, finish, format_table, parser, start


def build(out: Path, source: str | None) -> Path:
    if not out.exists():
        cmd = [sys.executable, "-m", "graphbatch.cli", "data", "build", "code", "--no-progress",
               "--out", str(out)]
        if source:
            cmd += ["--source", source]
        print(f"building {out} from {source or 'the standard library'} ...", flush=True)
        subprocess.run(cmd, check=True)
    return out


def main(argv=None) -> int:
    ap = parser(__doc__, with_threads=False)
    ap.add_argument("--data", default=str(DATA / "tune"))
    ap.add_argument("--site-packages",
                    default=sysconfig.get_paths(vars={"base": sys.base_prefix,
                                                      "platbase": sys.base_prefix})["purelib"])
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--shapes", default="1,2,3,4,8")
    args = ap.parse_args(argv)
    info = start(args)
    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    std = load_sizes(build(data / "code_stdlib.h5", None))
    site = load_sizes(build(data / "code_base_site.h5", args.site_packages))
    sizes = gb.GraphSizes(np.concatenate([std.n_node, site.n_node]),
                          np.concatenate([std.n_edge, site.n_edge]))
    n, e = sizes.n_node, sizes.n_edge
    print(f"{len(sizes):,} graphs (stdlib {len(std):,} + {args.site_packages} {len(site):,}); "
          f"largest {int(n.max()):,} nodes / {int(e.max()):,} edges; mean {n.mean():.1f} / "
          f"{e.mean():.1f}; load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    rows = []
    for k in (int(x) for x in args.shapes.split(",")):
        row = {"K": k}
        for name, kw in (
            ("family", {}),
            ("own", {"on_oversize": "own_batch", "oversize_shapes": "own"}),
            ("tight", {"tight_shape": True}),
        ):
            t0 = time.perf_counter()
            p = gb.plan(sizes, "buckets", batch_size=args.batch_size, num_shapes=k, **kw)
            st = p.stats()
            row[f"{name}_node"] = round(100 * st.node_efficiency, 2)
            row[f"{name}_edge"] = round(100 * st.edge_efficiency, 2)
            row[f"{name}_s"] = round(time.perf_counter() - t0, 1)
            if name == "own":
                row["own_batches"] = p.meta["own_batches"]
                row["own_shapes"] = st.distinct_shapes
            if name == "tight":
                b = p.meta["shape_bound"]
                row["bound_node"] = round(100 * b["node_efficiency_max"], 2)
                row["bound_edge"] = round(100 * b["edge_efficiency_max"], 2)
                real_n = int(n.sum())
                row["one_pad_node_bound"] = round(100 * real_n / (real_n + len(p)), 3)
                row["shapes"] = " ".join(f"{a}x{b_}x{g}" for a, b_, g in p.meta["shapes"])
        rows.append(row)
    print(format_table(rows))
    finish(args, info, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
