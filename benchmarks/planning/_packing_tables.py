"""Size tables for the packing benchmark: real tables shipped with the project and seeded
synthetic ones.

Real: QM9 radius-6 A graphs (130,831; ``src/graphbatch/data/qm9_radius6_sizes.npz``), MOSES
training molecules (1,584,663; ``benchmarks/data/moses_train_sizes.npz``), Python standard-library
AST graphs (58,754; ``benchmarks/data/code_stdlib_sizes.npz``); their sources are in
docs/datasets.md. Synthetic, with stated distributions:

* ``pcqm_like`` (3,378,606 graphs, PCQM4Mv2's size): heavy atoms n = clip(round(N(14.1, 3.3)),
  2, 20); rings ~ Poisson(1.4); edges = 2 * (n - 1 + rings) capped at 54 (directed bonds).
* ``ast_like`` (500,000): Python-AST-like trees, heavy-tailed: n = round(54 * exp(1.2 * Z)) for
  99.5% and n = round(2000 * Pareto(1.1) + 2000) for 0.5%, clipped to 190,000; edges = 2(n - 1)
  (parent/child both directions) + Binomial(n, 0.15) next-token edges. Median 54.
* ``distinct_20k``: 20,000 distinct (nodes, edges) pairs, nodes uniform in 5..300, edges uniform
  in n-1 .. 6n, 100,000 graphs (counts 1 + Poisson(4)).
"""

from __future__ import annotations

import numpy as np

from graphbatch import GraphSizes

from benchmarks._harness import DATA, ROOT

REAL = {
    "qm9_radius6": ROOT / "src" / "graphbatch" / "data" / "qm9_radius6_sizes.npz",
    "moses_train": DATA / "moses_train_sizes.npz",
    "code_stdlib": DATA / "code_stdlib_sizes.npz",
}


def real(name: str) -> GraphSizes | None:
    path = REAL[name]
    return GraphSizes.load(path) if path.is_file() else None


def pcqm_like(n: int = 3_378_606, seed: int = 1) -> GraphSizes:
    rng = np.random.default_rng(seed)
    nodes = np.clip(np.rint(rng.normal(14.1, 3.3, n)), 2, 20).astype(np.int64)
    rings = rng.poisson(1.4, n)
    edges = np.minimum(2 * (nodes - 1 + rings), 54)
    return GraphSizes(nodes, edges)


def ast_like(n: int = 500_000, seed: int = 2) -> GraphSizes:
    rng = np.random.default_rng(seed)
    nodes = np.rint(54 * np.exp(1.2 * rng.standard_normal(n)))
    tail = rng.random(n) < 0.005
    nodes[tail] = np.rint(2000 * rng.pareto(1.1, int(tail.sum())) + 2000)
    nodes = np.clip(nodes, 2, 190_000).astype(np.int64)
    edges = 2 * (nodes - 1) + rng.binomial(nodes, 0.15)
    return GraphSizes(nodes, edges)


def distinct_20k(pairs: int = 20_000, seed: int = 3) -> GraphSizes:
    rng = np.random.default_rng(seed)
    seen: set[tuple[int, int]] = set()
    while len(seen) < pairs:
        a = rng.integers(5, 301, 4 * pairs)
        b = rng.integers(a - 1, 6 * a + 1)
        for x, y in zip(a.tolist(), b.tolist()):
            seen.add((x, y))
            if len(seen) == pairs:
                break
    pts = np.array(sorted(seen), dtype=np.int64)
    counts = 1 + rng.poisson(4, pairs)
    counts = np.round(counts * (100_000 / counts.sum())).astype(np.int64).clip(1)
    return GraphSizes(np.repeat(pts[:, 0], counts), np.repeat(pts[:, 1], counts))
