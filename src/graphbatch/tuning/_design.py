"""Which padded shapes to probe: a small designed set spanning the candidates' shapes.

The candidates' distinct step shapes form a cloud in (nodes, edges, graphs); `tune` designs over
the shapes that carry at least 2% of some candidate's steps (a leftover batch met once an epoch
costs a compilation to probe and tells little). Each dimension is mapped to an integer grid
``0 .. 2**20`` between the eligible shapes' extremes; the design starts at the
shape the most candidate steps use and then adds, one at a time, the shape farthest (squared
grid distance, exact int64) from every shape already chosen -- a greedy maximin design, so the
probes span the extremes first and then fill the middle. Ties go to the more used shape, then
the smaller one. `targeted_probes` adds the shapes a ranking's leaders use most, so the
configurations most likely to be chosen are measured where they run.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["design_probes", "targeted_probes"]

_GRID = 1 << 20


def _grid(shapes: np.ndarray) -> np.ndarray:
    lo = shapes.min(axis=0)
    span = np.maximum(shapes.max(axis=0) - lo, 1)
    return ((shapes - lo) * _GRID) // span  # int64: shapes <= 2**40, products <= 2**60


def design_probes(
    shapes: np.ndarray,
    weights: ArrayLike,
    count: int,
    *,
    chosen: Sequence[int] = (),
    eligible: ArrayLike | None = None,
) -> list[int]:
    """Indices into ``shapes`` (``[M, 3]`` int64) of up to ``count`` probes (including the
    already ``chosen`` ones, which come first), by greedy maximin from the most used shape
    (``weights``: candidate steps per shape). ``eligible`` (bool ``[M]``): the shapes the design
    may pick (default all; the grid spans the eligible ones). Stops early when every eligible
    shape is chosen."""
    shapes = np.asarray(shapes, np.int64).reshape(-1, 3)
    w = np.asarray(weights, np.int64).reshape(-1)
    m = shapes.shape[0]
    if m == 0 or count <= 0:
        return []
    ok = np.ones(m, bool) if eligible is None else np.asarray(eligible, bool).reshape(-1)
    if not ok.any():
        ok = np.ones(m, bool)
    u = np.zeros_like(shapes)
    u[ok] = _grid(shapes[ok])
    out = [int(i) for i in chosen]
    if not out:
        # the most used eligible shape; ties: the smallest (shapes are sorted)
        wmax = w[ok].max()
        out.append(int(np.flatnonzero(ok & (w == wmax))[0]))
    d = np.full(m, np.iinfo(np.int64).max, np.int64)
    d[~ok] = -1  # never picked
    for i in out:
        d = np.minimum(d, ((u - u[i]) ** 2).sum(axis=1))
        d[~ok] = -1
    while len(out) < min(count, int(ok.sum())):
        far = d.max()
        if far <= 0:
            break
        tied = np.flatnonzero(d == far)
        i = int(tied[np.argmax(w[tied])])  # first maximum: the smallest shape among the tied
        out.append(i)
        d = np.minimum(d, ((u - u[i]) ** 2).sum(axis=1))
        d[~ok] = -1
    return out


def targeted_probes(
    shapes: np.ndarray,
    leaders: Sequence[tuple[np.ndarray, np.ndarray]],
    chosen: Sequence[int],
    count: int,
    *,
    min_gap_per_mille: int = 20,
) -> list[int]:
    """Indices of up to ``count`` further probes: the shapes ``leaders`` use most (each a pair
    ``(shapes [S, 3], steps [S])`` of a leading candidate, best first), round robin: every
    leader's most used shape, then every leader's second, ..., skipping shapes within
    ``min_gap_per_mille`` per mille of an already chosen
    probe in every dimension."""
    shapes = np.asarray(shapes, np.int64).reshape(-1, 3)
    index = {tuple(r): i for i, r in enumerate(shapes.tolist())}
    picked = [int(i) for i in chosen]
    new: list[int] = []

    def near(i: int) -> bool:
        a = shapes[i]
        for j in picked:
            b = shapes[j]
            if all(
                abs(int(x) - int(y)) * 1000 <= min_gap_per_mille * max(int(x), int(y), 1)
                for x, y in zip(a, b, strict=True)
            ):
                return True
        return False

    per_leader: list[list[int]] = []
    for sh, st in leaders:
        order = np.lexsort((np.arange(len(st)), -np.asarray(st, np.int64)))
        per_leader.append(
            [index[tuple(r)] for r in np.asarray(sh, np.int64)[order].tolist() if tuple(r) in index]
        )
    # round robin over the leaders: each one's most used shape before anyone's second
    queue = [
        lst[k]
        for k in range(max((len(x) for x in per_leader), default=0))
        for lst in per_leader
        if k < len(lst)
    ]
    for i in queue:
        if len(new) >= count:
            break
        if i in picked or near(i):
            continue
        picked.append(i)
        new.append(i)
    return new
