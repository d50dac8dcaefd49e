"""One JAX process of a 2-process ``jax.distributed`` job on CPU, for
tests/jax/test_jax_plan_verify.py (run as a script:
``python _jax_multihost_script.py PROCESS_ID PORT OUT``).

For each case it builds `graphbatch.jax.loader` over both processes' devices, iterates, and
writes what happened to ``OUT/{case}{process}.json``: the graph indices of this process's
share of every step, or the text of the `PlanMismatchError` it raised."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

# Run as a script, this folder (tests/) comes first on sys.path, where the test package
# tests/jax would shadow jax: import from the repo root.
HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE.parent))

os.environ["JAX_PLATFORMS"] = "cpu"
import jax  # noqa: E402

pid, port, out = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(
    coordinator_address=f"127.0.0.1:{port}",
    num_processes=2,
    process_id=pid,
    initialization_timeout=120,
)

import numpy as np  # noqa: E402

import graphbatch as gb  # noqa: E402
import graphbatch.jax as gj  # noqa: E402
from tests.jax.test_jax_collate import make_graphs  # noqa: E402

GRAPHS = make_graphs(40, seed=3)
#: case -> this process's loader arguments
CASES = {
    "same": lambda p: dict(seed=5),
    "seed": lambda p: dict(seed=5 + p),
    "sizes": lambda p: dict(seed=5, sizes=_sizes(bump=p == 1)),
    "off": lambda p: dict(seed=5 + p, verify_plan=False),
    "epoch": lambda p: dict(seed=5, start_epoch=p),
}


def _sizes(bump: bool) -> gb.GraphSizes:
    n = np.array([int(g.n_node[0]) for g in GRAPHS])
    e = np.array([int(g.n_edge[0]) for g in GRAPHS])
    if bump:
        n = n.copy()
        n[7] += 1  # another size table (a stale store copy)
    return gb.GraphSizes(n, e)


for case, args in CASES.items():
    kw = args(pid)
    start_epoch = kw.pop("start_epoch", 0)
    ld = gj.loader(
        GRAPHS, strategy="dynamic", batch_size=6, devices=jax.devices(), prefetch=1, **kw
    )
    ld.set_epoch(start_epoch)
    try:
        steps = []
        for _ in range(2):  # two epochs
            for pg in ld:
                shard = pg.graph_index.addressable_shards[0]
                gi = np.asarray(shard.data).reshape(-1)
                steps.append([int(shard.index[0].start), gi[gi >= 0].tolist()])
        result = {"steps": steps, "len": len(steps)}
    except gb.PlanMismatchError as exc:
        result = {"error": str(exc), "type": type(exc).__name__}
    (out / f"{case}{pid}.json").write_text(json.dumps(result))
print("DONE", pid)
jax.distributed.shutdown()
