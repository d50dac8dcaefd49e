"""A representative set of planning requests, run in a child process: every strategy family,
explicit and estimated budgets, world sizes 1/8/64, both oversize policies, float cost models,
on subsamples of QM9, MOSES and the heavy-tailed code AST table, plus limit searches.

``python tests/_plan_matrix.py OUT.json`` writes ``{case: sha256 of the plan file}`` (the
whole file, written without ``meta``'s timing keys), ``{case/stats: every field of
`BatchPlan.stats`, floats by their bits}`` (the ``plan --json`` statistics: the n_bytes cost
fit, means, imbalances), and ``{search: sha256 of the records}``.
`tests/planners/test_plan_machine_independence.py` runs it under several SIMD and thread
settings and requires equal results.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from importlib import resources
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def tables() -> dict:
    import graphbatch as gb

    paths = {
        "qm9": resources.files("graphbatch") / "data" / "qm9_radius6_sizes.npz",
        "moses": ROOT / "benchmarks" / "data" / "moses_train_sizes.npz",
        "code": ROOT / "benchmarks" / "data" / "code_stdlib_sizes.npz",
    }
    out = {}
    for name, path in paths.items():
        d = np.load(str(path))
        n, e = d["n_node"].astype(np.int64), d["n_edge"].astype(np.int64)
        rng = np.random.default_rng(26)
        idx = rng.choice(n.shape[0], 3000, replace=False)
        if name == "code":  # keep the tail: the 40 largest graphs are always in
            idx = np.union1d(idx[:2960], np.argsort(n + e, kind="stable")[-40:])
        out[name] = gb.GraphSizes(n[idx], e[idx])
    # a size table with n_bytes (the balancing strategies' default cost source)
    q = out["qm9"]
    out["qm9-bytes"] = gb.GraphSizes(q.n_node, q.n_edge, 37 * q.n_node + 11 * q.n_edge + 96)
    return out


def requests(name: str, sizes):
    """``(case, strategy, kwargs)`` for one table."""
    mean_n = float(sizes.n_node.mean())
    mean_e = float(sizes.n_edge.mean())
    # an explicit budget a few of the largest graphs overflow (the oversize policies act)
    big = (int(np.percentile(sizes.n_node, 99.5)) + 1, int(np.percentile(sizes.n_edge, 99.5)), 24)
    tight = (int(mean_n * 20) + 1, int(mean_e * 20), 40)
    for ws in (1, 8, 64):
        for s in ("dynamic", "pack-lpf"):
            yield (
                f"{s}-est-{ws}",
                s,
                dict(batch_size=32, seed=1, epoch=2, world_size=ws, on_oversize="own_batch"),
            )
        for s in ("kk", "stratified", "static-64"):
            yield f"{s}-{ws}", s, dict(batch_size=17, seed=1, epoch=2, world_size=ws)
    for pol in ("skip", "own_batch"):
        for ws in (1, 8):
            for s in ("dynamic", "pack-lpf", "pack-spf"):
                yield (
                    f"{s}-budget-{pol}-{ws}",
                    s,
                    dict(budget=big, seed=3, world_size=ws, on_oversize=pol),
                )
        yield (
            f"buckets-budget-{pol}",
            "buckets",
            dict(budget=tight, seed=3, on_oversize=pol, num_shapes=4),
        )
        yield (f"pack-lpf-1d-{pol}", "pack-lpf-1d", dict(budget=big, seed=3, on_oversize=pol))
    yield (
        "buckets-budget-own-shapes",
        "buckets",
        dict(budget=tight, seed=3, on_oversize="own_batch", num_shapes=4, oversize_shapes="own"),
    )
    yield (
        "pack-lpf-1d-free",
        "pack-lpf-1d",
        dict(budget=big, seed=3, on_oversize="skip", edge_limit=False),
    )
    for h in ("sum", "max", "min", "node"):
        yield (
            f"pack-lpf-{h}",
            "pack-lpf",
            dict(batch_size=32, seed=4, heuristic=h, on_oversize="skip"),
        )
    yield (
        "pack-lpf-balanced",
        "pack-lpf",
        dict(budget=tight, seed=4, method="balanced", on_oversize="skip"),
    )
    yield (
        "pack-lpf-histogram",
        "pack-lpf",
        dict(budget=tight, seed=4, method="histogram", on_oversize="own_batch"),
    )
    yield "pack-nnls", "pack-nnls", dict(batch_size=32, seed=4, on_oversize="skip")
    yield (
        "pack-spf-est-8",
        "pack-spf",
        dict(batch_size=32, seed=4, world_size=8, on_oversize="skip"),
    )
    yield "buckets-est", "buckets", dict(batch_size=32, seed=5, num_shapes=3)
    yield "buckets-est-8", "buckets", dict(batch_size=32, seed=5, num_shapes=2, world_size=8)
    yield (
        "dynamic-noshuffle-8",
        "dynamic",
        dict(batch_size=32, seed=6, world_size=8, shuffle=False, on_oversize="own_batch"),
    )
    yield "static-constant", "static-constant", dict(batch_size=17, seed=6)
    yield "static-pow2-8", "static-pow2", dict(batch_size=17, seed=6, world_size=8)
    # balancing strategies, default and float cost models
    models = {
        "default": {},
        "float": dict(cost_nodes=0.3, cost_edges=1.7),
        "node": dict(cost_nodes=2.5, cost_edges=0),
    }
    for mname, model in models.items():
        for s in ("random", "balance", "zscore", "iqr", "kk", "stratified"):
            for ws in (1, 8):
                yield f"{s}-{mname}-{ws}", s, dict(batch_size=17, seed=7, world_size=ws, **model)
    yield "zscore-low", "zscore", dict(batch_size=17, seed=7, threshold=0.5, cost_nodes=0.1)
    yield "iqr-low", "iqr", dict(batch_size=17, seed=7, multiplier=0.25, cost_edges=0.7)
    yield (
        "stratified-tight",
        "stratified",
        dict(batch_size=9, seed=7, tolerance=0.001, cost_nodes=1.1, passes=20),
    )
    yield "balance-half", "balance", dict(batch_size=9, seed=7, fraction=0.5, cost_edges=1.3)


def plan_file_digest(plan, path: Path) -> str:
    """sha256 of the plan file's bytes, written without the timing keys of ``meta`` (the only
    part of a plan file that differs between two runs of one request)."""
    import graphbatch as gb

    for key in gb.BatchPlan.TIMING_META_KEYS:
        plan.meta.pop(key, None)
    plan.save(path)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def stats_record(plan) -> str:
    """Every field of ``plan.stats()`` (what ``graphbatch plan --json`` reports), floats by
    their exact bits (``float.hex``): the n_bytes cost fit, means, imbalances."""
    from dataclasses import asdict

    return json.dumps(
        {k: v.hex() if isinstance(v, float) else v for k, v in asdict(plan.stats()).items()},
        sort_keys=True,
    )


def run() -> dict:
    import graphbatch as gb
    from graphbatch.packing import search_limits

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for tname, sizes in tables().items():
            for case, strategy, kw in requests(tname, sizes):
                plan = gb.plan(sizes, strategy, **kw)
                out[f"{tname}/{case}"] = plan_file_digest(plan, Path(tmp) / "plan.npz")
                out[f"{tname}/{case}/stats"] = stats_record(plan)
            recs = search_limits(sizes, sample_graphs=800, exact_points=2, grid=4)
            out[f"{tname}/limits"] = hashlib.sha256(
                json.dumps([list(recs), recs.summary()], sort_keys=True).encode()
            ).hexdigest()
    return out


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(json.dumps(run(), indent=0, sort_keys=True))
