"""Generic statistics shared by every metamorph study.

Thin, documented wrappers over scipy / statsmodels so that every study computes a
bootstrap interval, a Cochran's Q, a McNemar test, a Holm correction, a Jaccard index or a
Jensen–Shannon divergence with *one* implementation and the same edge-case conventions.

Conventions (all deliberate; each wrapper documents its own):

* Degenerate inputs never produce a silent ``NaN``: a wrapper either returns the boundary
  value that is mathematically implied (e.g. an all-equal bootstrap sample has the interval
  ``[v, v]``) or returns ``None``/``NaN`` *together with* a ``note`` saying why.
* Randomness is always seeded (``seed`` argument -> :func:`numpy.random.default_rng`).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as _sst
from scipy.spatial.distance import jensenshannon as _jensenshannon
from statsmodels.stats.contingency_tables import cochrans_q as _sm_cochrans_q
from statsmodels.stats.contingency_tables import mcnemar as _sm_mcnemar
from statsmodels.stats.multitest import multipletests as _sm_multipletests

__all__ = [
    "BootstrapCI",
    "CochranQResult",
    "CorrelationResult",
    "bootstrap_mean_ci",
    "bootstrap_ratio_ci",
    "paired_bootstrap_diff_ci",
    "paired_permutation_test",
    "clustered_cochrans_q",
    "cochrans_q",
    "mcnemar_exact",
    "mcnemar_holm",
    "holm",
    "spearman",
    "spearman_exact",
    "pearson",
    "jaccard",
    "js_divergence",
    "category_counts",
    "NOTE_ALL_EQUAL",
    "MIN_RELIABLE_CLUSTERS",
    "few_clusters_note",
]


# --------------------------------------------------------------------------- bootstrap


@dataclass(frozen=True)
class BootstrapCI:
    """A mean with its percentile bootstrap confidence interval.

    Attributes:
        mean: sample mean (``NaN`` when ``n == 0``).
        low, high: interval bounds; ``None`` when no interval exists (``n < 2``).
        n: number of values.
        note: ``None`` for an ordinary interval, otherwise why the interval is special
            (``"n=0: ..."``, ``"n=1: ..."``, ``"all values equal: ..."``).
    """

    mean: float
    low: float | None
    high: float | None
    n: int
    note: str | None = None


NOTE_EMPTY = "n=0: no values, no estimate"
NOTE_SINGLE = "n=1: a single value gives no bootstrap interval"
NOTE_ALL_EQUAL = "all values equal: degenerate bootstrap distribution, CI = [v, v]"

#: Fewest clusters (resampled units) behind a bootstrap interval that is not flagged: with fewer,
#: the percentile bootstrap is too narrow (it cannot see the between-cluster spread it has no
#: draws of; Cameron, Gelbach & Miller 2008, *Rev. Econ. Stat.* 90:414, on few clusters).
MIN_RELIABLE_CLUSTERS = 20


def few_clusters_note(n: int) -> str | None:
    """The note of an interval that rests on ``n`` clusters: ``None`` from
    :data:`MIN_RELIABLE_CLUSTERS` on, otherwise ``"n=<n> clusters (< 20): interval unreliable"``.

    The interval is still shown, with this note: it is the right computation on the right unit,
    and a reader comparing runs needs the number; leaving it out would hide the estimate's spread
    altogether, while the note keeps it from reading as a reliable bound."""
    return None if n >= MIN_RELIABLE_CLUSTERS else f"n={n} clusters (< {MIN_RELIABLE_CLUSTERS}): interval unreliable"


def bootstrap_mean_ci(
    values: Iterable[float],
    n_resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> BootstrapCI:
    """Percentile bootstrap confidence interval of the mean of ``values``.

    Uses :func:`scipy.stats.bootstrap` (``method="percentile"``, ``rng=default_rng(seed)``),
    so the same ``values``/``n_resamples``/``seed`` always give the same interval. If scipy
    rejects the data, a seeded numpy resample (same percentile definition) is used instead.

    Boundary cases:
        * ``n == 0``: mean ``NaN``, no interval, note :data:`NOTE_EMPTY`.
        * ``n == 1``: the value is the mean; no interval (``low = high = None``),
          note :data:`NOTE_SINGLE`.
        * all values equal to ``v``: every resample has mean ``v``, so the interval is
          ``[v, v]`` (not ``NaN``), note :data:`NOTE_ALL_EQUAL`.
        * otherwise fewer than :data:`MIN_RELIABLE_CLUSTERS` values (each value being a
          cluster): the interval with the note of :func:`few_clusters_note`.

    Raises:
        ValueError: a value is not finite, ``n_resamples < 1`` or ``confidence`` not in (0, 1).
    """
    arr = np.asarray(list(values), dtype=float)
    if arr.ndim != 1:
        raise ValueError("bootstrap_mean_ci: values must be one-dimensional")
    if not np.all(np.isfinite(arr)):
        raise ValueError("bootstrap_mean_ci: values must be finite (found NaN or inf)")
    if n_resamples < 1:
        raise ValueError(f"bootstrap_mean_ci: n_resamples must be >= 1, got {n_resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"bootstrap_mean_ci: confidence must be in (0, 1), got {confidence}")
    n = int(arr.size)
    if n == 0:
        return BootstrapCI(math.nan, None, None, 0, NOTE_EMPTY)
    mean = float(arr.mean())
    if n == 1:
        return BootstrapCI(mean, None, None, 1, NOTE_SINGLE)
    if np.all(arr == arr[0]):
        v = float(arr[0])
        return BootstrapCI(v, v, v, n, NOTE_ALL_EQUAL)
    try:
        res = _sst.bootstrap(
            (arr,),
            np.mean,
            n_resamples=n_resamples,
            confidence_level=confidence,
            method="percentile",
            vectorized=True,
            rng=np.random.default_rng(seed),
        )
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if not (math.isfinite(low) and math.isfinite(high)):
            raise ValueError("non-finite interval")
    except ValueError:
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, n, size=(n_resamples, n))
        means = arr[idx].mean(axis=1)
        alpha = (1.0 - confidence) / 2.0
        low, high = (float(x) for x in np.percentile(means, [100 * alpha, 100 * (1 - alpha)]))
    return BootstrapCI(mean, low, high, n, few_clusters_note(n))


def bootstrap_ratio_ci(
    numerators: Iterable[float],
    denominators: Iterable[float],
    n_resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> BootstrapCI:
    """Cluster (percentile) bootstrap CI of the ratio ``sum(numerators) / sum(denominators)``.

    One entry per cluster (e.g. an instance with ``denominators[i]`` groups of which
    ``numerators[i]`` violate): clusters are resampled with replacement, so units of one
    cluster (the k repeats of an instance) are never treated as independent. With equal
    denominators the ratio is the mean of the per-cluster rates and this is exactly
    :func:`bootstrap_mean_ci` of ``numerators / denominators`` (same seed, same interval);
    otherwise a seeded numpy resample of clusters (``default_rng(seed)``) with the percentile
    interval. ``n`` of the result counts clusters; the boundary cases are those of
    :func:`bootstrap_mean_ci`.

    Raises:
        ValueError: different lengths, a non-finite value, a denominator <= 0.
    """
    num = np.asarray(list(numerators), dtype=float)
    den = np.asarray(list(denominators), dtype=float)
    if num.shape != den.shape or num.ndim != 1:
        raise ValueError("bootstrap_ratio_ci: numerators and denominators must be 1-D of the same length")
    if not (np.all(np.isfinite(num)) and np.all(np.isfinite(den))):
        raise ValueError("bootstrap_ratio_ci: values must be finite")
    if np.any(den <= 0):
        raise ValueError("bootstrap_ratio_ci: every denominator must be > 0")
    n = int(num.size)
    if n == 0 or np.all(den == den[0]):
        return bootstrap_mean_ci(num / den if n else num, n_resamples, seed, confidence)
    ratio = float(num.sum() / den.sum())
    if n == 1:
        return BootstrapCI(ratio, None, None, 1, NOTE_SINGLE)
    rates = num / den
    if np.all(rates == rates[0]):
        return BootstrapCI(ratio, ratio, ratio, n, NOTE_ALL_EQUAL)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_resamples, n))
    ratios = num[idx].sum(axis=1) / den[idx].sum(axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = (float(x) for x in np.percentile(ratios, [100 * alpha, 100 * (1 - alpha)]))
    return BootstrapCI(ratio, low, high, n, few_clusters_note(n))


def _paired_arrays(name: str, baseline: Iterable[float], candidate: Iterable[float]) -> tuple[np.ndarray, np.ndarray]:
    b = np.asarray(list(baseline), dtype=float)
    c = np.asarray(list(candidate), dtype=float)
    if b.shape != c.shape or b.ndim != 1:
        raise ValueError(f"{name}: baseline and candidate must be 1-D and of equal length (one value per item)")
    if not (np.all(np.isfinite(b)) and np.all(np.isfinite(c))):
        raise ValueError(f"{name}: values must be finite (found NaN or inf)")
    return b, c


def _mean_difference(b: np.ndarray, c: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(c - b, axis=axis)


def paired_bootstrap_diff_ci(
    baseline: Iterable[float],
    candidate: Iterable[float],
    n_resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> BootstrapCI:
    """Paired percentile bootstrap CI of ``mean(candidate - baseline)`` over items.

    ``baseline[i]`` and ``candidate[i]`` are the two models' values on item i. Items are
    resampled with replacement and both values of an item travel together
    (:func:`scipy.stats.bootstrap` with ``paired=True``, ``method="percentile"``,
    ``rng=default_rng(seed)``), so the interval reflects the item-to-item variation of the
    *difference*, which is what makes paired comparisons of two models on the same items far
    tighter than two independent intervals (Efron & Tibshirani 1993, *An Introduction to the
    Bootstrap*, ch. 13; Miller 2024, "Adding Error Bars to Evals", arXiv 2411.00640, §4 paired
    differences).

    Boundary cases as :func:`bootstrap_mean_ci`: no items -> mean ``NaN`` without interval
    (:data:`NOTE_EMPTY`); one item -> no interval (:data:`NOTE_SINGLE`); every difference equal
    to ``d`` -> ``[d, d]`` (:data:`NOTE_ALL_EQUAL`).

    Raises:
        ValueError: different lengths, a non-finite value (naming this function), ``n_resamples < 1``
            or ``confidence`` not in (0, 1) (as :func:`bootstrap_mean_ci`).
    """
    b, c = _paired_arrays("paired_bootstrap_diff_ci", baseline, candidate)
    # Resampling items and taking mean(c - b) of the resample is resampling the differences:
    # the same interval as bootstrap_mean_ci of c - b (same seed, same draws; tested).
    return bootstrap_mean_ci(c - b, n_resamples, seed, confidence)


def paired_permutation_test(
    baseline: Iterable[float],
    candidate: Iterable[float],
    n_resamples: int = 9999,
    seed: int = 0,
) -> tuple[float, float, int]:
    """Two-sided paired permutation (sign-flip) test of ``mean(candidate - baseline) = 0``.

    Under H0 the two values of an item are exchangeable, so each item's difference keeps or
    flips its sign with probability ½ (Fisher–Pitman paired permutation test; Good 2005,
    *Permutation, Parametric and Bootstrap Tests of Hypotheses*, §3.1).
    :func:`scipy.stats.permutation_test` with ``permutation_type="samples"`` swaps values within
    items; it is exact (all ``2**n`` sign patterns) when ``2**n <= n_resamples``, otherwise a
    seeded Monte Carlo test. On 0/1 values it coincides with the exact McNemar test (both count
    only the discordant items, each a fair coin under H0). All differences 0 give ``p = 1``, and so
    does one item (its two sign patterns are equally extreme; scipy refuses fewer than two).

    Returns:
        ``(mean difference, p_value, n)``.

    Raises:
        ValueError: different lengths, a non-finite value, no items.
    """
    b, c = _paired_arrays("paired_permutation_test", baseline, candidate)
    if b.size == 0:
        raise ValueError("paired_permutation_test: no items")
    if b.size == 1:
        return float(c[0] - b[0]), 1.0, 1
    res = _sst.permutation_test(
        (b, c),
        _mean_difference,
        permutation_type="samples",
        vectorized=True,
        n_resamples=n_resamples,
        alternative="two-sided",
        rng=np.random.default_rng(seed),
    )
    return float(res.statistic), float(min(1.0, res.pvalue)), int(b.size)


# --------------------------------------------------------------------------- Cochran's Q


@dataclass(frozen=True)
class CochranQResult:
    """Cochran's Q test of k related binary samples.

    Attributes:
        statistic: Q (``None`` when undefined, see ``note``).
        p_value: chi-square(df) upper tail (``None`` when undefined).
        df: k - 1.
        n: number of blocks (rows) used.
        note: why the statistic is undefined, else ``None``.
    """

    statistic: float | None
    p_value: float | None
    df: int
    n: int
    note: str | None = None


def cochrans_q(matrix: Sequence[Sequence[float]] | np.ndarray | pd.DataFrame) -> CochranQResult:
    """Cochran's Q over a blocks x treatments 0/1 matrix (rows = instances, columns = formats).

    Wraps :func:`statsmodels.stats.contingency_tables.cochrans_q`, which computes
    ``Q = (k-1) * (k * sum_j C_j^2 - N^2) / (k * N - sum_i R_i^2)`` with ``C_j`` column sums,
    ``R_i`` row sums and ``N`` the grand total; Q ~ chi-square(k-1) under H0.

    Undefined cases return ``statistic = p_value = None`` with a note instead of a NaN or a
    division warning: fewer than 2 columns, no rows, or no discordant row (every row all-0
    or all-1 makes the denominator 0; there is no evidence of any difference).

    Raises:
        ValueError: the matrix is not 2-D, contains missing values or values other than 0/1.
    """
    arr = np.asarray(matrix, dtype=float)
    if arr.ndim != 2:
        raise ValueError("cochrans_q: matrix must be 2-D (blocks x treatments)")
    if np.isnan(arr).any():
        raise ValueError("cochrans_q: matrix contains missing values; pass complete blocks only")
    if not np.isin(arr, (0.0, 1.0)).all():
        raise ValueError("cochrans_q: matrix values must be 0/1 (or booleans)")
    n, k = arr.shape
    df = max(k - 1, 0)
    if k < 2:
        return CochranQResult(None, None, df, n, "fewer than 2 treatments: Q undefined")
    if n == 0:
        return CochranQResult(None, None, df, 0, "no complete blocks: Q undefined")
    rows = arr.sum(axis=1)
    if np.all((rows == 0) | (rows == k)):
        return CochranQResult(None, None, df, n, "no discordant blocks (all rows constant): Q undefined")
    res = _sm_cochrans_q(arr)  # CochransQResult (statistic, pvalue, df)
    return CochranQResult(float(res.statistic), float(res.pvalue), int(res.df), n, None)


def clustered_cochrans_q(
    matrix: Sequence[Sequence[float]] | np.ndarray | pd.DataFrame,
    clusters: Sequence[object],
    n_resamples: int = 9999,
    seed: int = 0,
    max_exact: int = 200_000,
) -> CochranQResult:
    """Cochran's Q over blocks that are clustered (e.g. the k repeats of one instance, each a block
    of its formats), with the p-value of a within-cluster permutation test.

    The statistic is :func:`cochrans_q`'s Q over all the blocks. Under H0 (treatments
    exchangeable) the treatment labels of one cluster are permuted together — one permutation of
    the columns applied to every block of the cluster — so the blocks of a cluster count as one
    unit of evidence, not as independent blocks. Row sums and the grand total do not move, so Q
    of a permutation needs only its column sums. The p-value is the share of permutations with
    Q* >= Q: exact over all ``(k!) ** n_clusters`` permutations when that is at most
    ``max_exact``, otherwise ``(1 + #{Q* >= Q}) / (1 + n_resamples)`` over seeded random
    permutations. Undefined cases return :func:`cochrans_q`'s null result and note.

    Raises:
        ValueError: as :func:`cochrans_q`; ``clusters`` not one label per block.
    """
    base = cochrans_q(matrix)
    arr = np.asarray(matrix, dtype=float)
    labels = list(clusters)
    if len(labels) != arr.shape[0]:
        raise ValueError(f"clustered_cochrans_q: {len(labels)} cluster labels for {arr.shape[0]} blocks")
    if base.statistic is None:
        return base
    n, k = arr.shape
    ids = pd.factorize(pd.Series(labels, dtype=object))[0]
    n_cl = int(ids.max()) + 1
    sums = np.zeros((n_cl, k))
    np.add.at(sums, ids, arr)
    total = arr.sum()
    denom = k * total - float((arr.sum(axis=1) ** 2).sum())

    def q_of(colsums: np.ndarray) -> np.ndarray:
        return (k - 1) * (k * (colsums**2).sum(axis=-1) - total**2) / denom

    observed = float(q_of(arr.sum(axis=0)))
    tol = 1e-9 * max(1.0, abs(observed))
    orders = np.array(list(itertools.permutations(range(k))))
    if len(orders) ** n_cl <= max_exact:
        hits = 0
        count = 0
        for combo in itertools.product(range(len(orders)), repeat=n_cl):
            perm = sums[np.arange(n_cl)[:, None], orders[list(combo)]]
            hits += int(q_of(perm.sum(axis=0)) >= observed - tol)
            count += 1
        p = hits / count
    else:
        rng = np.random.default_rng(seed)
        hits = 0
        done = 0
        while done < n_resamples:
            b = min(1000, n_resamples - done)
            idx = rng.permuted(np.tile(np.arange(k), (b, n_cl, 1)), axis=-1)
            perm = np.take_along_axis(np.broadcast_to(sums, (b, n_cl, k)), idx, axis=-1).sum(axis=1)
            hits += int((q_of(perm) >= observed - tol).sum())
            done += b
        p = (1 + hits) / (1 + n_resamples)
    return CochranQResult(observed, float(min(1.0, p)), base.df, n, None)


# --------------------------------------------------------------------------- McNemar + Holm


def mcnemar_exact(a: Sequence[bool], b: Sequence[bool]) -> tuple[float, float, int, int, int]:
    """Exact McNemar test of two paired binary samples.

    Builds the 2x2 table ``[[a&b, a&~b], [~a&b, ~a&~b]]`` and calls
    :func:`statsmodels.stats.contingency_tables.mcnemar` with ``exact=True`` (binomial test
    on the discordant pairs; ``statistic`` = min(n01, n10)). No discordant pair gives
    ``p = 1.0``.

    Returns:
        ``(statistic, p_value, n, n_a_only, n_b_only)`` with ``n`` the number of pairs.
    """
    x = np.asarray(a, dtype=bool)
    y = np.asarray(b, dtype=bool)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError("mcnemar_exact: a and b must be 1-D and of equal length")
    table = np.array([[np.sum(x & y), np.sum(x & ~y)], [np.sum(~x & y), np.sum(~x & ~y)]], dtype=float)
    res = _sm_mcnemar(table, exact=True)
    return float(res.statistic), float(res.pvalue), int(x.size), int(table[0, 1]), int(table[1, 0])


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values (:func:`statsmodels.stats.multitest.multipletests`,
    ``method="holm"``). ``NaN``/``None`` entries are left out of the family and stay ``NaN``."""
    p = np.asarray([math.nan if v is None else float(v) for v in p_values], dtype=float)
    out = np.full(p.shape, math.nan)
    ok = ~np.isnan(p)
    if ok.any():
        out[ok] = _sm_multipletests(p[ok], method="holm")[1]
    return [float(v) for v in out]


def mcnemar_holm(matrix: pd.DataFrame, cluster_level: str | None = None, seed: int = 0) -> pd.DataFrame:
    """Pairwise exact McNemar tests between the columns of a boolean matrix, Holm-corrected.

    Args:
        matrix: rows = paired units (instances), columns = conditions (formats), values
            True/False or missing. Each pair of columns uses the rows where both are present
            (pairwise-complete). Pairs follow column order (``itertools.combinations``).
        cluster_level: an index level of ``matrix`` naming the cluster of each row (e.g.
            ``instance_id`` when rows are (instance, repeat) groups). Where a pair's rows put
            more than one row in some cluster, its p-value is the clustered McNemar test: the
            paired sign-flip test (:func:`paired_permutation_test`, ``seed``) on each cluster's
            counts of correct rows in the two columns, so a cluster's discordant rows flip
            together (Durkalski et al. 2003, *Stat. Med.* 22:2417, with an exact/permutation
            reference). With one row per cluster it is the exact McNemar test unchanged.
            ``statistic`` stays min(b, c) over the rows.

    Returns:
        DataFrame with columns ``a, b, statistic, p_value, p_holm, n, n_a_only, n_b_only``;
        ``p_holm`` is Holm-adjusted over all the pairs of this call (one family). A pair with
        no common row has ``statistic``/``p_value``/``p_holm`` NaN and ``n = 0``.
    """
    cols = list(matrix.columns)
    rows = []
    for ca, cb in itertools.combinations(cols, 2):
        both = matrix[[ca, cb]].dropna()
        if len(both) == 0:
            rows.append(dict(a=ca, b=cb, statistic=math.nan, p_value=math.nan, n=0, n_a_only=0, n_b_only=0))
            continue
        stat, p, n, na, nb = mcnemar_exact(both[ca].astype(bool).to_numpy(), both[cb].astype(bool).to_numpy())
        if cluster_level is not None:
            cl = both.index.get_level_values(cluster_level)
            if cl.nunique() < len(both):
                per = both.astype(bool).astype(float).groupby(cl, sort=True).sum()
                p = paired_permutation_test(per[ca].to_numpy(), per[cb].to_numpy(), seed=seed)[1]
        rows.append(dict(a=ca, b=cb, statistic=stat, p_value=p, n=n, n_a_only=na, n_b_only=nb))
    out = pd.DataFrame(rows, columns=["a", "b", "statistic", "p_value", "n", "n_a_only", "n_b_only"])
    out.insert(4, "p_holm", holm(out["p_value"].tolist()) if len(out) else [])
    return out


# --------------------------------------------------------------------------- correlation


@dataclass(frozen=True)
class CorrelationResult:
    """A correlation coefficient (Spearman's rho from :func:`spearman`, Pearson's r from
    :func:`pearson`, both in the ``rho`` field); ``rho``/``p_value`` are ``None`` with a
    ``note`` when undefined."""

    rho: float | None
    p_value: float | None
    n: int
    note: str | None = None


def spearman(x: Sequence[float], y: Sequence[float], min_points: int = 3) -> CorrelationResult:
    """Spearman's rho (:func:`scipy.stats.spearmanr`) with explicit undefined cases.

    Pairs with a missing value are left out (``n`` counts the pairs used). Fewer than
    ``min_points`` pairs, or a constant ``x`` or ``y``, return ``None`` with a reason.
    """
    return _correlation(_sst.spearmanr, "spearman", x, y, min_points)


def _correlation(fn, name: str, x: Sequence[float], y: Sequence[float], min_points: int) -> CorrelationResult:
    xa = np.asarray([math.nan if v is None else v for v in x], dtype=float)
    ya = np.asarray([math.nan if v is None else v for v in y], dtype=float)
    if xa.shape != ya.shape:
        raise ValueError(f"{name}: x and y must have the same length")
    ok = ~(np.isnan(xa) | np.isnan(ya))
    xa, ya = xa[ok], ya[ok]
    n = int(xa.size)
    if n < min_points:
        return CorrelationResult(None, None, n, f"fewer than {min_points} points (n={n})")
    if np.all(xa == xa[0]) or np.all(ya == ya[0]):
        return CorrelationResult(None, None, n, "constant input: correlation undefined")
    res = fn(xa, ya)
    r = float(min(max(float(res.statistic), -1.0), 1.0))  # float rounding can leave |r| a hair above 1
    return CorrelationResult(r, float(res.pvalue), n, None)


#: Up to this many points :func:`spearman_exact` enumerates every permutation (9! = 362,880).
EXACT_PERMUTATION_MAX_N = 9


def spearman_exact(x: Sequence[float], y: Sequence[float], min_points: int = 3) -> CorrelationResult:
    """Spearman's rho with an exact two-sided permutation p-value for small samples.

    ``rho`` is :func:`scipy.stats.spearmanr`'s. For ``n <= EXACT_PERMUTATION_MAX_N`` the p-value
    is exact: :func:`scipy.stats.permutation_test` over all ``n!`` pairings (``y`` held fixed, the
    ranks of ``x`` permuted; ``permutation_type="pairings"``, ``n_resamples=inf``), two-sided — e.g. n = 3 with
    rho = -1 gives p = 2/6 = 1/3 (the t approximation of ``spearmanr`` gives p = 0 there).
    For larger n it is ``spearmanr``'s (t distribution with n - 2 df). Undefined cases as
    :func:`spearman` (fewer than ``min_points`` pairs, constant input -> ``None`` + note).
    """
    base = _correlation(_sst.spearmanr, "spearman", x, y, min_points)
    if base.rho is None or base.n > EXACT_PERMUTATION_MAX_N:
        return base
    xa = np.asarray(
        [
            v
            for v, w in zip(x, y)
            if v is not None
            and w is not None
            and not (isinstance(v, float) and math.isnan(v))
            and not (isinstance(w, float) and math.isnan(w))
        ],
        dtype=float,
    )
    ya = np.asarray(
        [
            w
            for v, w in zip(x, y)
            if v is not None
            and w is not None
            and not (isinstance(v, float) and math.isnan(v))
            and not (isinstance(w, float) and math.isnan(w))
        ],
        dtype=float,
    )
    # One sample permuted against the fixed other: the n! pairings. Passing both samples would
    # permute each of them, (n!)^2 arrangements (n = 6: 518,400; n = 9: 1.3e11).
    ry = _sst.rankdata(ya)
    ry = ry - ry.mean()

    def rank_corr(a: np.ndarray, axis: int = -1) -> np.ndarray:
        ra = _sst.rankdata(a, axis=axis)
        ra = ra - ra.mean(axis=axis, keepdims=True)
        return (ra * ry).sum(axis=axis) / np.sqrt((ra**2).sum(axis=axis) * (ry**2).sum())

    res = _sst.permutation_test(
        (xa,),
        rank_corr,
        permutation_type="pairings",
        n_resamples=np.inf,
        vectorized=True,
        alternative="two-sided",
    )
    return CorrelationResult(base.rho, float(min(1.0, res.pvalue)), base.n, None)


def pearson(x: Sequence[float], y: Sequence[float], min_points: int = 3) -> CorrelationResult:
    """Pearson's r (:func:`scipy.stats.pearsonr`, two-sided p) with explicit undefined cases.

    Same conventions as :func:`spearman`: pairs with a missing value are left out (``n``
    counts the pairs used); fewer than ``min_points`` pairs, or a constant ``x`` or ``y``,
    return ``None`` with a reason. The coefficient is in the ``rho`` field of
    :class:`CorrelationResult`.
    """
    return _correlation(_sst.pearsonr, "pearson", x, y, min_points)


# --------------------------------------------------------------------------- set / distribution


def jaccard(a: Iterable[str], b: Iterable[str]) -> float:
    """Jaccard similarity ``|A ∩ B| / |A ∪ B|`` of two sets (inputs are turned into sets).

    Convention: two empty sets have similarity **1.0** (nothing to disagree on); an empty
    set against a non-empty one has similarity 0.0 (follows from the formula).
    """
    sa, sb = set(a), set(b)
    union = sa | sb
    if not union:
        return 1.0
    return len(sa & sb) / len(union)


def _as_count_vectors(
    p_counts: Mapping[str, float] | Sequence[float], q_counts: Mapping[str, float] | Sequence[float]
) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(p_counts, Mapping) or isinstance(q_counts, Mapping):
        if not (isinstance(p_counts, Mapping) and isinstance(q_counts, Mapping)):
            raise ValueError("js_divergence: pass two mappings or two aligned sequences")
        keys = sorted(set(p_counts) | set(q_counts))
        p = np.array([float(p_counts.get(k, 0)) for k in keys])
        q = np.array([float(q_counts.get(k, 0)) for k in keys])
    else:
        p = np.asarray(p_counts, dtype=float)
        q = np.asarray(q_counts, dtype=float)
        if p.shape != q.shape or p.ndim != 1:
            raise ValueError("js_divergence: aligned sequences must be 1-D and of equal length")
    if (p < 0).any() or (q < 0).any() or not (np.isfinite(p).all() and np.isfinite(q).all()):
        raise ValueError("js_divergence: counts must be finite and non-negative")
    return p, q


def js_divergence(
    p_counts: Mapping[str, float] | Sequence[float], q_counts: Mapping[str, float] | Sequence[float]
) -> float:
    """Jensen–Shannon divergence, base 2, in [0, 1], between two count distributions.

    ``JS(P, Q) = ½ KL(P‖M) + ½ KL(Q‖M)``, ``M = ½(P + Q)``, computed as
    ``scipy.spatial.distance.jensenshannon(p, q, base=2) ** 2`` (scipy returns the JS
    *distance*, the square root). Counts are normalised to probabilities by scipy.

    Args:
        p_counts: a mapping category -> count (aligned with ``q_counts`` on the union of keys,
            missing = 0; e.g. :class:`collections.Counter`) or a count sequence aligned with ``q_counts``.
        q_counts: the other distribution, of the same kind as ``p_counts``.

    Conventions: identical distributions -> 0; disjoint supports -> 1. Both distributions
    empty (total count 0) -> 0.0 (nothing to disagree on, as for :func:`jaccard`); exactly
    one empty -> 1.0 (maximal divergence: one side has evidence, the other none). The
    result is clipped to [0, 1] against floating-point round-off.
    """
    p, q = _as_count_vectors(p_counts, q_counts)
    sp, sq = p.sum(), q.sum()
    if sp == 0 and sq == 0:
        return 0.0
    if sp == 0 or sq == 0:
        return 1.0
    d = float(_jensenshannon(p, q, base=2)) ** 2
    return float(min(max(d, 0.0), 1.0))


def category_counts(lists: Iterable[Iterable[str] | None]) -> Counter:
    """Count category occurrences over many generations (``None`` counts as empty)."""
    c: Counter = Counter()
    for items in lists:
        if items is None:
            continue
        c.update(items)
    return c
