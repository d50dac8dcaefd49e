"""Learning effects across repeats: pairwise Mann-Whitney U (Bonferroni) and Student's t-tests.

The static-vs-dynamic paper (section 8, appendices I-J) compares the final test RMSE of the
repeats of each batching algorithm pairwise: Mann-Whitney U with the p-values Bonferroni-adjusted
within a (model, dataset, batch size) family, and unadjusted Student's t-tests as a secondary
table. Pure NumPy/SciPy; plotting lives in `graphbatch.bench._plots`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np
from scipy import stats

from .._errors import InputError, InputTypeError

__all__ = ["PairwiseTests", "bonferroni", "pairwise_mannwhitney", "pairwise_ttest"]


@dataclass(frozen=True)
class PairwiseTests:
    """Symmetric ``[k, k]`` tables over ``names`` (diagonal NaN).

    ``statistic[a, b]`` is the test statistic of sample ``a`` against sample ``b`` (U of ``a``
    for Mann-Whitney, so ``U[a, b] + U[b, a] = n_a n_b``; ``t`` of ``a - b`` for the t-test),
    ``pvalue`` the raw two-sided p-value, ``pvalue_adjusted`` after the correction
    (``num_comparisons`` = k(k-1)/2 pairs), ``significant`` = adjusted p < ``alpha``.
    """

    method: str
    correction: str
    alpha: float
    names: tuple[str, ...]
    statistic: np.ndarray
    pvalue: np.ndarray
    pvalue_adjusted: np.ndarray
    num_comparisons: int

    @property
    def significant(self) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            return self.pvalue_adjusted < self.alpha

    def records(self) -> list[dict[str, Any]]:
        """One row per unordered pair ``(a, b)``, ``a`` before ``b`` in ``names``."""
        out = []
        for i, j in combinations(range(len(self.names)), 2):
            out.append(
                {
                    "a": self.names[i],
                    "b": self.names[j],
                    "statistic": float(self.statistic[i, j]),
                    "pvalue": float(self.pvalue[i, j]),
                    "pvalue_adjusted": float(self.pvalue_adjusted[i, j]),
                    "significant": bool(self.significant[i, j]),
                }
            )
        return out


def bonferroni(pvalues, num_comparisons: int) -> np.ndarray:
    """Bonferroni-adjusted p-values: ``min(1, p * num_comparisons)`` (NaN stays NaN)."""
    if int(num_comparisons) < 1:
        raise InputError(f"num_comparisons must be >= 1, got {num_comparisons}")
    return np.minimum(np.asarray(pvalues, dtype=np.float64) * int(num_comparisons), 1.0)


def _prepare(samples: Mapping[str, Sequence[float]], min_size: int):
    if not isinstance(samples, Mapping):
        raise InputTypeError(f"samples must map names to sequences, got {type(samples).__name__}")
    names = tuple(str(k) for k in samples)
    if len(names) < 2:
        raise InputError(f"pairwise tests need at least 2 samples, got {len(names)}: {names}")
    arrays = []
    for name, v in samples.items():
        a = np.asarray(v, dtype=np.float64).reshape(-1)
        if a.shape[0] < min_size:
            raise InputError(f"sample {name!r} has {a.shape[0]} values; need >= {min_size}")
        if not np.isfinite(a).all():
            raise InputError(f"sample {name!r} holds non-finite values: {a.tolist()}")
        arrays.append(a)
    return names, arrays


def _pairwise(method, names, arrays, fn, correction: str, alpha: float) -> PairwiseTests:
    if correction not in ("bonferroni", "none"):
        raise InputError(f"correction must be 'bonferroni' or 'none', got {correction!r}")
    k = len(names)
    stat = np.full((k, k), np.nan)
    p = np.full((k, k), np.nan)
    for i, j in combinations(range(k), 2):
        s_ij, s_ji, p_ij = fn(arrays[i], arrays[j])
        stat[i, j], stat[j, i] = s_ij, s_ji
        p[i, j] = p[j, i] = p_ij
    m = k * (k - 1) // 2
    adj = bonferroni(p, m) if correction == "bonferroni" else p.copy()
    return PairwiseTests(method, correction, float(alpha), names, stat, p, adj, m)


def pairwise_mannwhitney(
    samples: Mapping[str, Sequence[float]],
    *,
    correction: str = "bonferroni",
    alpha: float = 0.05,
    method: str = "auto",
) -> PairwiseTests:
    """Two-sided Mann-Whitney U test for every pair of samples (``scipy.stats.mannwhitneyu``).

    ``method`` passes to SciPy (``"auto"``: exact distribution for small samples without ties).
    p-values are Bonferroni-adjusted over the k(k-1)/2 pairs by default, as in the paper.
    """
    names, arrays = _prepare(samples, 1)

    def fn(a, b):
        r = stats.mannwhitneyu(a, b, alternative="two-sided", method=method)
        return float(r.statistic), float(a.shape[0] * b.shape[0] - r.statistic), float(r.pvalue)

    return _pairwise("mann-whitney-u", names, arrays, fn, correction, alpha)


def pairwise_ttest(
    samples: Mapping[str, Sequence[float]],
    *,
    correction: str = "none",
    alpha: float = 0.05,
    equal_var: bool = True,
) -> PairwiseTests:
    """Two-sided Student's t-test (``scipy.stats.ttest_ind``) for every pair; unadjusted by
    default (the paper's appendix I). ``equal_var=False`` gives Welch's test."""
    names, arrays = _prepare(samples, 2)

    def fn(a, b):
        r = stats.ttest_ind(a, b, equal_var=equal_var)
        return float(r.statistic), -float(r.statistic), float(r.pvalue)

    return _pairwise("student-t" if equal_var else "welch-t", names, arrays, fn, correction, alpha)
