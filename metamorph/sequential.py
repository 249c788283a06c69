"""Anytime-valid sequential tests of a paired comparison: stop a run once its verdict is certain.

A fixed-sample test (:mod:`metamorph.comparison`: exact McNemar, the sign-flip permutation test)
is valid at one look: computing its p-value after every batch and stopping at the first p < α
rejects a true "no change" far more often than α. The tests here are **e-processes**: a
nonnegative process ``K_t`` over the items seen, ``K_0 = 1``, whose expectation stays at most 1
at every stopping time under the null. By Ville's inequality ``P(sup_t K_t ≥ 1/α) ≤ α``, so the
**anytime p-value** ``p_t = min(1, 1 / max_{s ≤ t} K_s)`` may be looked at after every item or
batch, and a run may stop whenever it likes, with the error rate held at α (Ramdas, Grünwald,
Vovk & Shafer 2023, "Game-theoretic statistics and safe anytime-valid inference", *Statist.
Sci.* 38:576–601).

**0/1 item values** (per-item correctness or flags; :func:`binary_e_values`) — the mixture
sequential probability ratio test on the discordant pairs, the sequential form of McNemar's test.
Under McNemar's null a discordant item favours either model with probability ½; concordant items
carry no evidence and leave ``K`` unchanged. With a uniform (Beta(1, 1)) mixture over the
probability ``q`` that a discordant item favours the candidate, after ``D`` discordant items of
which ``k`` favour the candidate,
``K = ∫ q^k (1 − q)^(D−k) dq / 2^-D = 2^D · k! (D − k)! / (D + 1)!`` (Robbins 1970, "Statistical
methods related to the law of the iterated logarithm", *Ann. Math. Statist.* 41:1397–1409; Lai
1976, *Ann. Statist.* 4:265–280). Two-sided by construction. ``D`` consecutive discordant items
all one way give ``2^D / (D + 1)``: 8 are needed at α = 0.05 (256/9 ≈ 28.4 ≥ 20; 7 give 16).

**Bounded item values** (rates over repeats, scores in ``[low, high]``;
:func:`betting_e_values`) — testing by betting (Waudby-Smith & Ramdas 2024, "Estimating means of
bounded random variables by betting", *J. R. Statist. Soc. B* 86:1–27, §4 and their "diversified
Kelly" mixture of constant bets). The paired difference ``d_i = c_i − b_i`` lies in ``[−w, w]``,
``w = high − low``; with ``x_i = d_i / w ∈ [−1, 1]`` and a bet fraction ``g ∈ (0, 1)``, the
capital ``∏_i (1 + g x_i)`` is a nonnegative martingale under the null ``E[d_i | past] = 0`` (the
sign-flip test's null, where each difference is symmetric about 0, is a special case). The
e-process is the average over the bets ``±g`` for ``g`` in a fixed grid (:data:`DEFAULT_BETS`):
``K_t = (1 / 2G) Σ_g [∏_{i ≤ t} (1 + g x_i) + ∏_{i ≤ t} (1 − g x_i)]`` — an average of test
martingales is one, and the two signs make it two-sided. The grid spans small bets (good against
small changes) and large ones (fast against large ones).

**Multiplicity** (:func:`holm_rejections`): Holm's step-down procedure on the anytime p-values of
the family (a candidate's blocking cells), re-applied at every look. It holds the family-wise
error rate at α over all looks at once: Holm rejects a true null only if the smallest anytime p
among the ``m0`` true nulls is below ``α / m0`` at some time, and by Ville's inequality and the
union bound that happens with probability at most ``m0 · α / m0 = α``, whatever the dependence
between the cells. (Equivalently, Holm on the e-values ``1/p``: Vovk & Wang 2021, "E-values:
calibration, combination and applications", *Ann. Statist.* 49:1736–1754, §5.) Anytime p-values
only decrease, and Holm is monotone in each p-value, so a cell once decided stays decided.

**Order.** The items are taken in a seeded random order fixed before their values are seen
(:func:`extend_order`): the batches of a run arrive in the order of its sources' seeded sample,
and the items of one batch are shuffled with a seed. The guarantee needs only that the order does
not depend on the outcomes.

Pure library: numpy/scipy, no Dagster.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy.special import gammaln as _gammaln

__all__ = [
    "DEFAULT_BETS",
    "SEQUENTIAL_COLUMNS",
    "SequentialFamily",
    "anytime_p_values",
    "betting_e_values",
    "binary_e_values",
    "e_values",
    "extend_order",
    "holm_rejections",
    "sequential_family",
    "stopping_look",
]

#: Bet fractions ``g`` of the betting e-process (:func:`betting_e_values`): each is bet both ways,
#: ``λ = ±g / w``; the largest, 0.8, loses at most 80 % of its capital on one item.
DEFAULT_BETS: tuple[float, ...] = (0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8)


def _pairs(baseline: ArrayLike, candidate: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    b = np.asarray(baseline, dtype=float)
    c = np.asarray(candidate, dtype=float)
    if b.shape != c.shape or b.ndim < 1:
        raise ValueError(
            f"sequential: baseline and candidate must have the same shape (..., n items), got {b.shape} and {c.shape}"
        )
    if not (np.all(np.isfinite(b)) and np.all(np.isfinite(c))):
        raise ValueError("sequential: values must be finite (found NaN or inf)")
    return b, c


def binary_e_values(baseline: ArrayLike, candidate: ArrayLike) -> np.ndarray:
    """Running e-values of the mixture SPRT on discordant pairs (module docstring), item by item.

    Args:
        baseline: 0/1 values of the baseline, shape ``(..., n)`` (the last axis is the items in
            their order; leading axes are independent replays, vectorised).
        candidate: 0/1 values of the candidate, same shape.

    Returns:
        ``K_1 … K_n``, shape ``(..., n)``: ``2^D · k! (D − k)! / (D + 1)!`` after each item, ``D``
        the discordant items so far and ``k`` those favouring the candidate (1 while ``D = 0``).
        E.g. candidate − baseline ``[-1, -1, 0, -1]`` gives ``[1, 4/3, 4/3, 2]``.

    Raises:
        ValueError: shapes differ, a value is not finite or not 0/1.
    """
    b, c = _pairs(baseline, candidate)
    if not (np.isin(b, (0.0, 1.0)).all() and np.isin(c, (0.0, 1.0)).all()):
        raise ValueError("binary_e_values: values must be 0/1")
    d = c - b
    k = np.cumsum(d > 0, axis=-1)
    j = np.cumsum(d < 0, axis=-1)
    log_e = (k + j) * math.log(2.0) + _gammaln(k + 1) + _gammaln(j + 1) - _gammaln(k + j + 2)
    return np.exp(log_e)


def betting_e_values(
    baseline: ArrayLike, candidate: ArrayLike, low: float = 0.0, high: float = 1.0, bets: Sequence[float] = DEFAULT_BETS
) -> np.ndarray:
    """Running e-values of the two-sided betting e-process on paired differences (module docstring).

    Args:
        baseline: the baseline's item values, shape ``(..., n)``, each in ``[low, high]`` (the
            metric's range: ``[0, 1]`` for rates; fractions, not percent).
        candidate: the candidate's item values, same shape and range.
        low: the smallest value an item can take; differences lie in ``[−w, w]``, ``w = high − low``.
        high: the largest value an item can take.
        bets: the bet fractions ``g``, each in (0, 1), each bet both ways.

    Returns:
        ``K_1 … K_n``, shape ``(..., n)``:
        ``(1 / 2G) Σ_g [∏_{i ≤ t} (1 + g x_i) + ∏_{i ≤ t} (1 − g x_i)]``, ``x_i = d_i / w``.
        E.g. differences ``[1, 1]`` in ``[0, 1]`` with ``bets=(0.5,)``: ``[1, 1.25]``
        (``(1.5 + 0.5) / 2``, ``(1.5² + 0.5²) / 2``).

    Raises:
        ValueError: shapes differ, a value not finite or outside ``[low, high]``, ``low >= high``,
            no bet or a bet outside (0, 1).
    """
    b, c = _pairs(baseline, candidate)
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"betting_e_values: need finite low < high, got [{low}, {high}]")
    if b.size and (min(b.min(), c.min()) < low or max(b.max(), c.max()) > high):
        raise ValueError(f"betting_e_values: values must lie in [{low:g}, {high:g}]")
    g = np.asarray(list(bets), dtype=float)
    if g.size == 0 or not np.all((g > 0) & (g < 1)):
        raise ValueError(f"betting_e_values: bets must be fractions in (0, 1), got {list(bets)}")
    x = (c - b) / (high - low)
    lam = np.concatenate([g, -g])  # (2G,)
    log_cap = np.cumsum(np.log1p(x[..., None, :] * lam[:, None]), axis=-1)  # (..., 2G, n)
    top = log_cap.max(axis=-2, keepdims=True)
    return np.exp(top[..., 0, :]) * np.mean(np.exp(log_cap - top), axis=-2)


def e_values(baseline: ArrayLike, candidate: ArrayLike, low: float = 0.0, high: float = 1.0) -> tuple[np.ndarray, str]:
    """The e-process the comparison's design calls for, as the fixed-sample comparison picks its test:
    :func:`binary_e_values` (``"mixture_mcnemar"``) when every value is 0/1, else
    :func:`betting_e_values` (``"betting"``, values in ``[low, high]``). Returns ``(K_1 … K_n,
    test)``; raises as those functions."""
    b, c = _pairs(baseline, candidate)
    if np.isin(b, (0.0, 1.0)).all() and np.isin(c, (0.0, 1.0)).all():
        return binary_e_values(b, c), "mixture_mcnemar"
    return betting_e_values(b, c, low, high), "betting"


def anytime_p_values(e: np.ndarray) -> np.ndarray:
    """``p_t = min(1, 1 / max_{s ≤ t} K_s)`` along the last axis (same shape as ``e``): a p-value
    valid at any stopping time (Ville's inequality). Raises ``ValueError`` for a negative or
    non-finite e-value."""
    e = np.asarray(e, dtype=float)
    if not np.all(np.isfinite(e)) or np.any(e < 0):
        raise ValueError("anytime_p_values: e-values must be finite and >= 0")
    run = np.maximum.accumulate(e, axis=-1) if e.shape[-1] else e
    with np.errstate(divide="ignore"):
        return np.minimum(1.0, 1.0 / run)


def holm_rejections(p: np.ndarray, alpha: float) -> np.ndarray:
    """Holm's step-down rejections over the last axis (the family), vectorised over leading axes.

    Args:
        p: p-values, shape ``(..., m)``; NaN entries are not in the family (never rejected, and
            not counted in its size).
        alpha: family-wise level in (0, 1).

    Returns:
        Booleans, shape of ``p``: with the family's ``m`` p-values sorted ``p_(1) ≤ … ≤ p_(m)``,
        ``p_(i)`` is rejected when ``p_(j) < α / (m − j + 1)`` for every ``j ≤ i`` (Holm 1979,
        *Scand. J. Statist.* 6:65–70). E.g. ``[0.01, 0.04, 0.03]`` at 0.05: ``[True, False, False]``
        (0.01 < 0.05/3; 0.03 ≥ 0.05/2).

    Raises:
        ValueError: ``alpha`` not in (0, 1).
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"holm_rejections: alpha must be in (0, 1), got {alpha}")
    p = np.asarray(p, dtype=float)
    if p.shape[-1] == 0:
        return np.zeros(p.shape, dtype=bool)
    member = ~np.isnan(p)
    m = member.sum(axis=-1, keepdims=True)
    order = np.argsort(np.where(member, p, np.inf), axis=-1, kind="stable")
    ps = np.take_along_axis(np.where(member, p, np.inf), order, axis=-1)
    rank = np.arange(p.shape[-1])
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = ps < alpha / (m - rank)
    ok &= rank < m
    passed = np.logical_and.accumulate(ok, axis=-1)
    out = np.zeros(p.shape, dtype=bool)
    np.put_along_axis(out, order, passed, axis=-1)
    return out


def stopping_look(e_at_looks: np.ndarray, alpha: float) -> np.ndarray:
    """The first look at which Holm rejects every cell of the family, vectorised over replays.

    Args:
        e_at_looks: the running maximum ``max_{s ≤ t} K_s`` of each cell at each look, shape
            ``(..., L looks, m cells)``.
        alpha: family-wise level.

    Returns:
        Integer array of shape ``(...)``: the 0-based index of the first look at which every cell is
        rejected (:func:`holm_rejections` on ``min(1, 1/e)``), −1 when none is.
    """
    e = np.asarray(e_at_looks, dtype=float)
    p = anytime_p_values(e[..., None]).squeeze(-1)
    done = holm_rejections(p, alpha).all(axis=-1)  # (..., L)
    first = np.argmax(done, axis=-1)
    return np.where(done.any(axis=-1), first, -1)


def extend_order(order: Sequence[str], new_items: Collection[str], seed: int, look: int) -> list[str]:
    """The item order after a batch: ``order`` unchanged, then the items of ``new_items`` not in it,
    shuffled by ``numpy.random.default_rng([seed, look])`` (sorted first, so the result depends only
    on the sets and the seed). ``look`` is the batch's index (0 for the first)."""
    seen = set(order)
    fresh = sorted(str(i) for i in new_items if str(i) not in seen)
    rng = np.random.default_rng([int(seed), int(look)])
    return [*order, *(fresh[i] for i in rng.permutation(len(fresh)))]


#: Columns of :attr:`SequentialFamily.table`.
SEQUENTIAL_COLUMNS = [
    "candidate_id",
    "baseline_id",
    "metric",
    "slice",
    "higher_is_better",
    "blocks",
    "n_items",
    "difference",
    "test",
    "e_value",
    "e_max",
    "p_anytime",
    "decided",
    "verdict",
]


@dataclass(frozen=True)
class SequentialFamily:
    """One candidate's sequential test at one look.

    Attributes:
        table: :data:`SEQUENTIAL_COLUMNS`, one row per (metric, slice) the two models share an item
            in: ``n_items`` paired items so far, ``difference`` candidate − baseline of their means
            (metric's unit), ``test`` (``mixture_mcnemar`` / ``betting``), ``e_value`` the e-process
            now, ``e_max`` its running maximum, ``p_anytime`` = min(1, 1/e_max), ``decided`` (Holm
            over the blocking rows rejects it; False for a row that does not block), ``verdict``
            (``regressed`` / ``improved`` when decided, else ``undecided``).
        alpha: the family-wise level.
        complete: every blocking row is decided (the candidate may stop); False when no row blocks.
    """

    table: pd.DataFrame
    alpha: float
    complete: bool


def sequential_family(
    scores: pd.DataFrame,
    baseline: str,
    candidate: str,
    higher_is_better: Mapping[str, bool],
    order: Sequence[str],
    *,
    alpha: float = 0.05,
    blocking: Collection[str] | None = None,
    value_range: tuple[float, float] = (0.0, 1.0),
) -> SequentialFamily:
    """The anytime-valid test of ``candidate`` against ``baseline`` on the items seen so far.

    Args:
        scores: item scores (:data:`metamorph.comparison.ITEM_SCORE_COLUMNS`) of both models.
        baseline: the approved model's id.
        candidate: the candidate's id.
        higher_is_better: per metric, whether larger is better (the direction of a decided row).
        order: every item id (``item_id``) of the two models, in the sequence the test takes them
            (:func:`extend_order`); a cell's path is its shared items in this order.
        alpha: family-wise level, in (0, 1).
        blocking: the metrics whose rows form the family (Holm across them) and must all be decided
            for the candidate to stop; None: every metric.
        value_range: the range of one item value for :func:`betting_e_values`.

    Returns:
        :class:`SequentialFamily`.

    Raises:
        ValueError: a shared item missing from ``order``, a metric without a direction, ``alpha``
            outside (0, 1), values as :func:`e_values` refuses.
    """
    from metamorph.schemas import require_columns

    require_columns(scores, ["model_id", "metric", "slice", "item_id", "value"], "sequential_family")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"sequential_family: alpha must be in (0, 1), got {alpha}")
    pos = {str(i): k for k, i in enumerate(order)}
    rows = []
    for (metric, sl), g in scores[scores["model_id"].isin([baseline, candidate])].groupby(["metric", "slice"]):
        if metric not in higher_is_better:
            raise ValueError(f"sequential_family: no direction (higher_is_better) for metric {metric!r}")
        b = g[g["model_id"] == baseline].set_index("item_id")["value"]
        c = g[g["model_id"] == candidate].set_index("item_id")["value"]
        common = [str(i) for i in b.index.intersection(c.index)]
        if not common:
            continue
        missing = [i for i in common if i not in pos]
        if missing:
            raise ValueError(f"sequential_family: item {missing[0]!r} ({metric}, {sl}) is not in the order")
        common.sort(key=pos.__getitem__)
        bv, cv = b.loc[common].to_numpy(float), c.loc[common].to_numpy(float)
        e, test = e_values(bv, cv, *value_range)
        rows.append(
            {
                "candidate_id": candidate,
                "baseline_id": baseline,
                "metric": metric,
                "slice": sl,
                "higher_is_better": bool(higher_is_better[metric]),
                "blocks": blocking is None or metric in blocking,
                "n_items": len(common),
                "difference": float(np.mean(cv - bv)),
                "test": test,
                "e_value": float(e[-1]),
                "e_max": float(e.max()),
            }
        )
    table = pd.DataFrame(rows, columns=SEQUENTIAL_COLUMNS)
    table["p_anytime"] = np.minimum(1.0, 1.0 / table["e_max"].astype(float)) if len(table) else []
    p = np.where(table["blocks"].astype(bool), table["p_anytime"].astype(float), np.nan) if len(table) else []
    table["decided"] = holm_rejections(np.asarray(p, dtype=float), alpha) if len(table) else []
    table["decided"] = table["decided"].astype(bool)
    table["verdict"] = [
        ("improved" if (d > 0) == h else "regressed") if dec and d != 0 else "undecided"
        for d, h, dec in zip(table["difference"], table["higher_is_better"], table["decided"])
    ]
    table["n_items"] = table["n_items"].astype(int)
    blocks = table["blocks"].astype(bool)
    complete = bool(blocks.any() and table.loc[blocks, "decided"].all())
    return SequentialFamily(table[SEQUENTIAL_COLUMNS], alpha, complete)
