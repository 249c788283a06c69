"""Tests of metamorph.stats: exact, hand-computed values and agreement with scipy/statsmodels."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sst
from statsmodels.stats.contingency_tables import cochrans_q as sm_cochrans_q
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
from statsmodels.stats.multitest import multipletests

from metamorph import stats

# --------------------------------------------------------------------------- bootstrap


def test_bootstrap_seeded_reproducible_and_matches_scipy():
    vals = [0, 1, 1, 0, 1, 1, 1, 0, 0, 1]
    a = stats.bootstrap_mean_ci(vals, n_resamples=500, seed=7)
    b = stats.bootstrap_mean_ci(vals, n_resamples=500, seed=7)
    assert a == b
    assert a.mean == pytest.approx(0.6)
    assert a.n == 10 and a.note == "n=10 clusters (< 20): interval unreliable"
    assert a.low <= a.mean <= a.high
    assert a.low < a.high
    # Skewed data tells the percentile interval apart from e.g. the "basic" one.
    skew = [0.0, 0.0, 0.1, 0.1, 0.2, 0.3, 0.5, 1.0, 4.0, 9.0]
    c = stats.bootstrap_mean_ci(skew, n_resamples=500, seed=7)
    ref = sst.bootstrap(
        (np.array(skew),),
        np.mean,
        n_resamples=500,
        method="percentile",
        confidence_level=0.95,
        rng=np.random.default_rng(7),
    )
    assert c.low == pytest.approx(float(ref.confidence_interval.low))
    assert c.high == pytest.approx(float(ref.confidence_interval.high))
    basic = sst.bootstrap(
        (np.array(skew),), np.mean, n_resamples=500, method="basic", confidence_level=0.95, rng=np.random.default_rng(7)
    )
    assert c.low != pytest.approx(float(basic.confidence_interval.low))
    # A different seed gives a (generally) different interval: the seed is really used.
    cont = [0.1, 2.3, 0.7, 5.9, 3.3, 1.4, 2.8, 0.2, 4.4, 3.1]
    others = {(c.low, c.high) for c in (stats.bootstrap_mean_ci(cont, 500, seed=s) for s in range(4))}
    assert len(others) > 1


def test_bootstrap_all_equal_is_boundary_not_nan():
    ci = stats.bootstrap_mean_ci([1.0, 1.0, 1.0, 1.0], n_resamples=100, seed=0)
    assert (ci.mean, ci.low, ci.high, ci.n) == (1.0, 1.0, 1.0, 4)
    assert ci.note == stats.NOTE_ALL_EQUAL
    zero = stats.bootstrap_mean_ci([0, 0], n_resamples=100, seed=0)
    assert (zero.low, zero.high) == (0.0, 0.0)


def test_bootstrap_single_and_empty():
    one = stats.bootstrap_mean_ci([0.25], n_resamples=100, seed=0)
    assert one.mean == 0.25 and one.low is None and one.high is None and one.n == 1
    assert one.note.startswith("n=1")
    empty = stats.bootstrap_mean_ci([], n_resamples=100, seed=0)
    assert math.isnan(empty.mean) and empty.low is None and empty.n == 0 and empty.note.startswith("n=0")


def test_bootstrap_rejects_bad_input():
    with pytest.raises(ValueError):
        stats.bootstrap_mean_ci([1.0, float("nan")])
    with pytest.raises(ValueError):
        stats.bootstrap_mean_ci([1.0, 2.0], confidence=1.5)


# --------------------------------------------------------------------------- Cochran's Q


def test_cochrans_q_hand_computed_and_statsmodels():
    x = np.array([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 1, 0]])
    # k=3; column sums C=(3,3,1): sum C^2 = 19; N = 7; row sums R=(2,1,3,1): sum R^2 = 15
    # Q = (k-1)(k*sum C^2 - N^2)/(k*N - sum R^2) = 2*(57-49)/(21-15) = 16/6 = 8/3
    res = stats.cochrans_q(x)
    assert res.statistic == pytest.approx(8 / 3)
    assert res.df == 2 and res.n == 4 and res.note is None
    assert res.p_value == pytest.approx(sst.chi2.sf(8 / 3, 2))
    ref = sm_cochrans_q(x)
    assert res.statistic == pytest.approx(float(ref.statistic))
    assert res.p_value == pytest.approx(float(ref.pvalue))


def test_cochrans_q_degenerate_is_null_with_note():
    res = stats.cochrans_q([[1, 1, 1], [0, 0, 0]])
    assert res.statistic is None and res.p_value is None and "discordant" in res.note
    assert stats.cochrans_q(np.zeros((0, 3))).note.startswith("no complete")
    assert stats.cochrans_q([[1], [0]]).statistic is None
    with pytest.raises(ValueError):
        stats.cochrans_q([[1, np.nan]])


# --------------------------------------------------------------------------- McNemar / Holm


def _mcnemar_matrix() -> pd.DataFrame:
    rows = [(1, 0, 0)] * 3 + [(1, 0, 1)] * 2 + [(0, 0, 1)] + [(1, 1, 1)] * 2 + [(0, 0, 0)]
    return pd.DataFrame(rows, columns=["A", "B", "C"]).astype(bool)


def test_mcnemar_holm_hand_computed():
    out = stats.mcnemar_holm(_mcnemar_matrix())
    assert list(zip(out["a"], out["b"])) == [("A", "B"), ("A", "C"), ("B", "C")]
    # A vs B: A-only 5, B-only 0 -> exact p = 2 * 0.5^5 = 0.0625, statistic min(5,0) = 0
    # A vs C: A-only 3, C-only 1 -> p = 2 * P(Bin(4, .5) <= 1) = 2 * 5/16 = 0.625, statistic 1
    # B vs C: B-only 0, C-only 3 -> p = 2 * 0.5^3 = 0.25, statistic 0
    assert out["p_value"].tolist() == pytest.approx([0.0625, 0.625, 0.25])
    assert out["statistic"].tolist() == [0.0, 1.0, 0.0]
    assert out["n_a_only"].tolist() == [5, 3, 0] and out["n_b_only"].tolist() == [0, 1, 3]
    assert out["n"].tolist() == [9, 9, 9]
    # Holm: sorted 0.0625, 0.25, 0.625 -> 3*0.0625 = 0.1875, max(0.1875, 2*0.25) = 0.5,
    # max(0.5, 1*0.625) = 0.625
    assert out["p_holm"].tolist() == pytest.approx([0.1875, 0.625, 0.5])


def test_mcnemar_holm_agrees_with_statsmodels():
    m = _mcnemar_matrix()
    out = stats.mcnemar_holm(m)
    direct = []
    for a, b in [("A", "B"), ("A", "C"), ("B", "C")]:
        x, y = m[a], m[b]
        table = [[(x & y).sum(), (x & ~y).sum()], [(~x & y).sum(), (~x & ~y).sum()]]
        direct.append(sm_mcnemar(np.array(table), exact=True).pvalue)
    assert out["p_value"].tolist() == pytest.approx(direct)
    assert out["p_holm"].tolist() == pytest.approx(list(multipletests(direct, method="holm")[1]))


def test_mcnemar_pairwise_complete_and_holm_skips_nan():
    m = pd.DataFrame({"A": [True, True, None], "B": [False, None, True]})
    out = stats.mcnemar_holm(m)
    assert out["n"].tolist() == [1]
    assert stats.holm([0.01, None, 0.04])[0] == pytest.approx(0.02)
    assert math.isnan(stats.holm([0.01, None, 0.04])[1])


# --------------------------------------------------------------------------- Spearman


def test_spearman_hand_computed_and_undefined():
    # d = (0, -1, 1, 0): rho = 1 - 6*2/(4*15) = 0.8
    r = stats.spearman([1, 2, 3, 4], [1, 3, 2, 4])
    assert r.rho == pytest.approx(0.8) and r.n == 4 and r.note is None
    assert r.p_value == pytest.approx(sst.spearmanr([1, 2, 3, 4], [1, 3, 2, 4]).pvalue)
    few = stats.spearman([1, 2], [2, 1])
    assert few.rho is None and "fewer than 3" in few.note
    const = stats.spearman([1, 2, 3], [5, 5, 5])
    assert const.rho is None and "constant" in const.note
    with_nan = stats.spearman([1, 2, None, 4], [1, 2, 3, 4])
    assert with_nan.n == 3 and with_nan.rho == pytest.approx(1.0)


def test_pearson_hand_computed_and_undefined():
    # x = (1, 2, 3), y = (2, 4, 7): dx = (-1, 0, 1), dy = (-7/3, -1/3, 8/3)
    # Sxy = 7/3 + 8/3 = 5, Sxx = 2, Syy = (49 + 1 + 64)/9 = 114/9 -> r = 5 / sqrt(2 * 114/9) = 15 / sqrt(228)
    r = stats.pearson([1, 2, 3, None], [2, 4, 7, 1])
    assert r.rho == pytest.approx(15 / math.sqrt(228)) and r.n == 3 and r.note is None
    assert r.p_value == pytest.approx(sst.pearsonr([1, 2, 3], [2, 4, 7]).pvalue)
    few = stats.pearson([1, 2], [2, 1])
    assert few.rho is None and "fewer than 3" in few.note
    const = stats.pearson([1, 2, 3], [5, 5, 5])
    assert const.rho is None and const.p_value is None and "constant" in const.note


# --------------------------------------------------------------------------- Jaccard / JS


@pytest.mark.parametrize(
    "a, b, expected",
    [
        (set(), set(), 1.0),  # convention: nothing to disagree on
        (set(), {"a"}, 0.0),
        ({"a", "b"}, {"b", "c"}, 1 / 3),
        ({"a", "b", "c", "d"}, {"d"}, 0.25),
        (["a", "a", "b"], ["b", "a"], 1.0),  # lists are read as sets
    ],
)
def test_jaccard(a, b, expected):
    assert stats.jaccard(a, b) == pytest.approx(expected)


def test_jaccard_against_theta():
    assert not stats.jaccard({"a", "b"}, {"b", "c"}) < 0.3  # 0.333 >= 0.3: not violated
    assert stats.jaccard({"a", "b", "c", "d"}, {"d"}) < 0.3  # 0.25 < 0.3: violated


def test_js_divergence_exact():
    assert stats.js_divergence({"a": 2, "b": 1}, {"a": 4, "b": 2}) == pytest.approx(0.0, abs=1e-12)
    assert stats.js_divergence({"a": 3}, {"b": 5}) == pytest.approx(1.0)
    # P = (1/2, 1/2), Q = (1, 0), M = (3/4, 1/4)
    # KL(P||M) = 1/2 log2(2/3) + 1/2 log2(2) ; KL(Q||M) = log2(4/3)
    # JS = 1/2 (KL(P||M) + KL(Q||M)) = 3/2 - 3/4 log2(3) = 0.311278...
    expected = 1.5 - 0.75 * math.log2(3)
    assert stats.js_divergence({"a": 1, "b": 1}, {"a": 2}) == pytest.approx(expected)
    assert stats.js_divergence([1, 1], [2, 0]) == pytest.approx(expected)
    assert stats.js_divergence(Counter(a=1, b=1), Counter(a=2)) == pytest.approx(0.3112781244591328)


def test_js_divergence_empty_conventions_and_errors():
    assert stats.js_divergence({}, {}) == 0.0
    assert stats.js_divergence({}, {"a": 1}) == 1.0
    with pytest.raises(ValueError):
        stats.js_divergence({"a": -1}, {"a": 1})
    with pytest.raises(ValueError):
        stats.js_divergence([1, 2], [1])


def test_clustered_cochrans_q_moves_an_instance_blocks_together():
    # 2 instances x 3 repeats, formats (4): every block correct in format 0 only.
    # Q over the 6 blocks: C = (6,0,0,0), N = 6, R_i = 1: Q = 3 * (4*36 - 36) / (4*6 - 6) = 18.
    # Blocks as independent: chi2.sf(18, 3) = 0.00044. Clustered: each instance's sum (3,0,0,0)
    # lands on one of 4 formats; Q* >= 18 only when both land on the same one -> p = 4/16 = 0.25.
    mat = [[1, 0, 0, 0]] * 6
    res = stats.clustered_cochrans_q(mat, ["a", "a", "a", "b", "b", "b"])
    assert (res.statistic, res.p_value, res.df, res.n) == (pytest.approx(18.0), pytest.approx(0.25), 3, 6)
    # one block per cluster: the statistic is Cochran's Q, the p-value the exact permutation one
    one = stats.clustered_cochrans_q([[1, 0], [1, 0], [0, 0]], ["a", "b", "c"])
    assert (one.statistic, one.p_value) == (pytest.approx(2.0), pytest.approx(0.5))
    with pytest.raises(ValueError, match="2 cluster labels for 3 blocks"):
        stats.clustered_cochrans_q([[1, 0], [1, 0], [0, 0]], ["a", "b"])
    assert stats.clustered_cochrans_q([[1, 1]], ["a"]).statistic is None


def test_mcnemar_holm_clustered_flips_an_instance_discordant_rows_together():
    # 3 instances x 3 repeats; format x right and y wrong in every block: b = 9, c = 0.
    # Rows as independent: exact p = 2 * 0.5^9 = 0.00390625. Clustered: instance differences (3, 3, 3),
    # 8 sign patterns, |sum| >= 9 only for all-plus and all-minus -> p = 2/8 = 0.25.
    idx = pd.MultiIndex.from_product([["i1", "i2", "i3"], [1, 2, 3]], names=["instance_id", "repeat"])
    mat = pd.DataFrame({"x": [True] * 9, "y": [False] * 9}, index=idx)
    assert stats.mcnemar_holm(mat)["p_value"].tolist() == pytest.approx([0.00390625])
    out = stats.mcnemar_holm(mat, cluster_level="instance_id")
    assert out["p_value"].tolist() == pytest.approx([0.25]) and out["statistic"].tolist() == [0.0]
    assert out["n"].tolist() == [9]


def test_one_item_or_one_cluster_has_p_1_instead_of_failing_the_step():
    # One item: its two sign patterns (+d, -d) are equally extreme -> exact two-sided p = 2/2 = 1.
    # One instance x 3 repeats (a run with --limit 1): the clustered McNemar test has that one item.
    assert stats.paired_permutation_test([0.0], [2.0]) == (2.0, 1.0, 1)
    assert stats.paired_permutation_test([1.0], [1.0]) == (0.0, 1.0, 1)
    idx = pd.MultiIndex.from_product([["i1"], [1, 2, 3]], names=["instance_id", "repeat"])
    mat = pd.DataFrame({"x": [True, True, False], "y": [False, False, False]}, index=idx)
    out = stats.mcnemar_holm(mat, cluster_level="instance_id")
    assert out[["p_value", "p_holm", "n", "n_a_only"]].values.tolist() == [[1.0, 1.0, 3, 2]]


def test_an_interval_on_fewer_than_20_clusters_keeps_its_bounds_and_says_it_is_unreliable():
    # 19 clusters: the interval is printed with the note; 20: no note. Ratio and paired forms alike.
    few = stats.bootstrap_mean_ci([0, 1] * 9 + [1], seed=0)
    assert few.low is not None and few.low < few.mean < few.high
    assert few.note == "n=19 clusters (< 20): interval unreliable"
    assert stats.bootstrap_mean_ci([0, 1] * 10, seed=0).note is None
    assert stats.bootstrap_ratio_ci([0, 1, 2], [1, 2, 2]).note == "n=3 clusters (< 20): interval unreliable"
    assert stats.paired_bootstrap_diff_ci([0, 0, 1], [1, 0, 0]).note == "n=3 clusters (< 20): interval unreliable"
    assert stats.few_clusters_note(20) is None
