"""Statistics of learning effects against values worked out by hand / by brute force."""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pytest

pytest.importorskip("scipy")

from graphbatch.bench import bonferroni, pairwise_mannwhitney, pairwise_ttest


def u_statistic(a, b):
    """U of ``a``: pairs (x in a, y in b) with x > y, ties counting 1/2."""
    return sum((x > y) + 0.5 * (x == y) for x in a for y in b)


def exact_two_sided_p(a, b):
    """Exact p by enumerating every split of the pooled values (no ties)."""
    pooled = list(a) + list(b)
    n = len(a)
    u_obs = u_statistic(a, b)
    us = []
    for idx in combinations(range(len(pooled)), n):
        aa = [pooled[i] for i in idx]
        bb = [pooled[i] for i in range(len(pooled)) if i not in idx]
        us.append(u_statistic(aa, bb))
    us = np.array(us)
    return min(1.0, 2 * min(np.mean(us <= u_obs), np.mean(us >= u_obs)))


def test_mannwhitney_hand_checked():
    # x entirely below y: U_x = 0; only 1 of C(6,3) = 20 splits is as extreme on each side,
    # so p = 2/20 = 0.1; three samples -> 3 pairs -> Bonferroni 0.3
    res = pairwise_mannwhitney({"x": [1, 2, 3], "y": [4, 5, 6], "w": [1.5, 4.5, 7]})
    assert res.names == ("x", "y", "w")
    assert res.num_comparisons == 3
    assert res.statistic[0, 1] == 0 and res.statistic[1, 0] == 9
    assert res.pvalue[0, 1] == pytest.approx(0.1)
    assert res.pvalue_adjusted[0, 1] == pytest.approx(0.3)
    # x vs w: pairs x>w: 2>1.5, 3>1.5 -> U = 2
    assert res.statistic[0, 2] == 2
    assert not res.significant.any()
    assert np.isnan(res.pvalue[0, 0])
    rec = res.records()
    assert [(r["a"], r["b"]) for r in rec] == [("x", "y"), ("x", "w"), ("y", "w")]


def test_mannwhitney_equals_brute_force_enumeration():
    rng = np.random.default_rng(0)
    for _ in range(5):
        a = rng.normal(size=4)
        b = rng.normal(size=5) + 0.5
        res = pairwise_mannwhitney({"a": a, "b": b}, method="exact")
        assert res.statistic[0, 1] == u_statistic(a, b)
        assert res.pvalue[0, 1] == pytest.approx(exact_two_sided_p(a, b))
        assert res.pvalue_adjusted[0, 1] == pytest.approx(exact_two_sided_p(a, b))  # 1 pair


def test_mannwhitney_detects_a_clear_difference_after_correction():
    # 10 repeats each, fully separated: exact p = 2 / C(20, 10) = 1.08e-5; x 3 pairs still < 0.05
    a = np.arange(10.0)
    res = pairwise_mannwhitney({"a": a, "b": a + 100, "c": a + 0.5}, method="exact")
    assert res.pvalue[0, 1] == pytest.approx(2 / math.comb(20, 10))
    assert res.significant[0, 1] and res.significant[1, 2]
    assert not res.significant[0, 2]


def test_ttest_hand_checked():
    # means 2 and 5, pooled variance 1, t = -3 / sqrt(2/3) = -3.6742, df = 4
    res = pairwise_ttest({"x": [1, 2, 3], "y": [4, 5, 6]})
    t = -3 / math.sqrt(2 / 3)
    assert res.statistic[0, 1] == pytest.approx(t)
    assert res.statistic[1, 0] == pytest.approx(-t)
    # Student-t CDF with 4 degrees of freedom in closed form: 1/2 + 3/4 a (1 - a^2/3),
    # a = t / sqrt(4 + t^2)
    a = abs(t) / math.sqrt(4 + t * t)
    p = 2 * (1 - (0.5 + 0.75 * a * (1 - a * a / 3)))
    assert res.pvalue[0, 1] == pytest.approx(p)
    assert res.pvalue_adjusted[0, 1] == pytest.approx(p)  # unadjusted by default
    assert res.pvalue[0, 1] == pytest.approx(0.02131, abs=1e-5)


def test_bonferroni_caps_at_one():
    np.testing.assert_allclose(bonferroni([0.01, 0.2, 0.5], 3), [0.03, 0.6, 1.0])
    with pytest.raises(ValueError, match="num_comparisons"):
        bonferroni([0.1], 0)


def test_bad_input():
    with pytest.raises(ValueError, match="at least 2"):
        pairwise_mannwhitney({"a": [1.0]})
    with pytest.raises(ValueError, match="non-finite"):
        pairwise_mannwhitney({"a": [1.0, np.nan], "b": [2.0]})
    with pytest.raises(ValueError, match="need >= 2"):
        pairwise_ttest({"a": [1.0], "b": [2.0, 3.0]})
    with pytest.raises(ValueError, match="correction"):
        pairwise_mannwhitney({"a": [1.0], "b": [2.0]}, correction="holm")
    with pytest.raises(TypeError, match="map names"):
        pairwise_ttest([[1.0, 2.0], [3.0, 4.0]])


def test_statistics_import_without_torch():
    import subprocess
    import sys

    code = (
        "import sys, graphbatch.bench, graphbatch.cli; graphbatch.cli.build_parser(); "
        "sys.exit(1 if 'torch' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
