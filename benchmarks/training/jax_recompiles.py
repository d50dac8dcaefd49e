"""Recompilations of a jitted JAX train step under static-64, static-2^N, static-constant and
dynamic batching on QM9 (fully connected and radius-6 Å graphs): the static-vs-dynamic paper's
Figure 3, reproduced with graphbatch's planners and JAX's own jit cache.

For every (graphs, batch size, strategy): plan epochs ``(seed, epoch)`` until ``--steps`` steps
and count the distinct padded shapes met (a jitted step compiles once per new shape), with the
step of the last new one. The count is checked against JAX itself on the first ``--verify-steps``
steps: a jitted function fed arrays of each step's padded shape, its ``_cache_size()`` read at
the end. Compile seconds: the MPEU train step (the paper's Fig. 4 model, Adam) lowered and
compiled for the strategy's median shape, timed with ``jax.monitoring`` compile events; the
total is that time times the count (an estimate: one compile timed per configuration).

    python -m benchmarks.training.jax_recompiles --steps 100000 --out /tmp/recompiles.json
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

import graphbatch as gb

from benchmarks._harness import parser, start, write_json

PAPER_BS32_2M = {"static-64": 89, "static-pow2": 4, "dynamic": 1, "static-constant": 1}
STRATEGIES = ("static-64", "static-pow2", "static-constant", "dynamic")


def qm9_sizes(kind: str) -> gb.GraphSizes:
    path = Path(gb.__file__).parent / "data" / "qm9_radius6_sizes.npz"
    with np.load(path) as d:
        n = d["n_node"].astype(np.int64)
        e = d["n_edge"].astype(np.int64)
    return gb.GraphSizes(n, n * (n - 1) if kind == "fully-connected" else e)


def shapes_over_steps(sizes, strategy: str, batch_size: int, steps: int, seed: int):
    """``[steps, 3]`` padded shapes of the first ``steps`` training steps, epoch after epoch."""
    out, total, epoch = [], 0, 0
    while total < steps:
        p = gb.plan(sizes, strategy, batch_size=batch_size, seed=seed, epoch=epoch)
        s = np.stack([p.pad_nodes, p.pad_edges, p.pad_graphs], axis=1)[: steps - total]
        out.append(s)
        total += s.shape[0]
        epoch += 1
    return np.concatenate(out), epoch


def count_new_shapes(shapes: np.ndarray) -> tuple[int, int]:
    """Distinct shapes and the (0-based) step at which the last new one appeared."""
    _, first = np.unique(shapes, axis=0, return_index=True)
    return int(first.shape[0]), int(first.max())


def jax_cache_count(shapes: np.ndarray) -> int:
    """Compilations JAX makes for a jitted function fed arrays of these shapes in order."""
    import jax
    import jax.numpy as jnp

    f = jax.jit(lambda a, b, c: jnp.sum(a) + jnp.sum(b) + jnp.sum(c))
    zeros = {}
    for n, e, g in shapes.tolist():
        key = (n, e, g)
        if key not in zeros:
            zeros[key] = (np.zeros(n, np.float32), np.zeros(e, np.float32),
                          np.zeros(g, np.float32))
        f(*zeros[key])
    return f._cache_size()


def mpeu_compile_seconds(shape) -> float:
    """Seconds to trace, lower and compile MPEU's jitted Adam train step for ``shape``."""
    import jax
    import jax.numpy as jnp
    import optax

    from graphbatch.bench._jax_runner import compile_seconds
    from graphbatch.jax.models import MPEU

    n, e, g = (int(x) for x in shape)
    model = MPEU()
    opt = optax.adam(1e-3)
    args = dict(z=jnp.zeros(n, jnp.int32), pos=jnp.zeros((n, 3)), senders=jnp.zeros(e, jnp.int32),
                receivers=jnp.zeros(e, jnp.int32), node_graph=jnp.zeros(n, jnp.int32),
                node_mask=jnp.ones(n, bool), edge_mask=jnp.ones(e, bool))
    params = jax.eval_shape(lambda k, a: model.init(k, **a, num_graphs=g),
                            jax.random.PRNGKey(0), args)
    state = jax.eval_shape(opt.init, params)
    y = jax.ShapeDtypeStruct((g,), jnp.float32)

    def step(p, s, a, y):
        def loss(p):
            return jnp.mean((model.apply(p, **a, num_graphs=g) - y) ** 2)

        val, grads = jax.value_and_grad(loss)(p)
        upd, s = opt.update(grads, s, p)
        return optax.apply_updates(p, upd), s, val

    abstract = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), args)
    c0 = compile_seconds()
    t0 = time.perf_counter()
    jax.jit(step).lower(params, state, abstract, y).compile()
    wall = time.perf_counter() - t0
    return max(compile_seconds() - c0, 0.0) or wall


def main(argv=None) -> int:
    ap = parser(__doc__, with_threads=False, out_required=True,
                out_help="JSON file of the rows and the bs-32 comparison with the paper")
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--verify-steps", type=int, default=20_000)
    ap.add_argument("--batch-sizes", default="16,32,64,128")
    ap.add_argument("--graphs", default="fully-connected,radius-6")
    ap.add_argument("--paper-steps", type=int, default=2_000_000,
                    help="steps of the extra bs-32 fully connected run compared with the paper")
    ap.add_argument("--no-compile-timing", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    info = start(args)
    out = Path(args.out)
    if out.exists() and out.is_dir():
        print(f"--out {out} is a directory", file=sys.stderr)
        return 2
    rows = []
    for kind in args.graphs.split(","):
        sizes = qm9_sizes(kind)
        for bs in (int(b) for b in args.batch_sizes.split(",")):
            for strategy in STRATEGIES:
                t0 = time.perf_counter()
                shapes, epochs = shapes_over_steps(sizes, strategy, bs, args.steps, args.seed)
                plan_s = time.perf_counter() - t0
                count, last = count_new_shapes(shapes)
                v = min(args.verify_steps, shapes.shape[0])
                jax_count = jax_cache_count(shapes[:v])
                expect, _ = count_new_shapes(shapes[:v])
                if jax_count != expect:
                    raise SystemExit(f"JAX compiled {jax_count} times for {expect} shapes")
                row = {"graphs": kind, "batch_size": bs, "strategy": strategy,
                       "steps": int(shapes.shape[0]), "epochs": epochs, "compiles": count,
                       "last_new_shape_step": last, "jax_cache_count_first_steps": jax_count,
                       "verify_steps": v, "plan_seconds": round(plan_s, 2)}
                if not args.no_compile_timing:
                    med = shapes[np.argsort(shapes[:, 0] * 10**9 + shapes[:, 1])[len(shapes) // 2]]
                    cs = mpeu_compile_seconds(med)
                    row.update(mpeu_compile_s=round(cs, 2), median_shape=med.tolist(),
                               est_total_compile_s=round(cs * count, 1))
                rows.append(row)
                print(json.dumps(row), flush=True)
    paper = {}
    if args.paper_steps and "fully-connected" in args.graphs.split(","):
        sizes = qm9_sizes("fully-connected")
        for strategy in ("static-64", "static-pow2"):
            shapes, _ = shapes_over_steps(sizes, strategy, 32, args.paper_steps, args.seed)
            paper[strategy] = count_new_shapes(shapes)[0]
        print(json.dumps({"bs32_fully_connected_steps": args.paper_steps, "here": paper,
                          "paper": PAPER_BS32_2M}), flush=True)
    result = {"rows": rows, "bs32_fully_connected": {"steps": args.paper_steps, "here": paper,
                                                     "paper_figure3": PAPER_BS32_2M},
              "cpu_count": os.cpu_count()}
    write_json(out, result, info)
    print(f"{'graphs':16} {'bs':>4} {'strategy':16} {'compiles':>8} {'last new':>9} "
          f"{'MPEU compile s':>14} {'est. total s':>12}")
    for r in rows:
        print(f"{r['graphs']:16} {r['batch_size']:>4} {r['strategy']:16} {r['compiles']:>8} "
              f"{r['last_new_shape_step']:>9} {r.get('mpeu_compile_s', float('nan')):>14} "
              f"{r.get('est_total_compile_s', float('nan')):>12}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
