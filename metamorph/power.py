"""What a paired comparison could have seen: minimum detectable effects and sample sizes.

A model comparison (:mod:`metamorph.comparison`) tests every (metric, slice) with a two-sided
paired test and Holm over the candidate's family of ``m`` cells. This module answers, for the
same design, how large a change has to be for the test to find it with a given power, and how
many items a run needs to find a given change.

**Level.** A cell is tested at ``α_cell = α / m``: Holm rejects the hypothesis with the smallest
p-value when it is below α/m and every other one at a level between α/m and α, so α/m is the one
level every cell is guaranteed (Bonferroni, Holm's first step; Holm 1979, Scand. J. Statist.
6:65–70). An MDE at α/m is therefore an upper bound of what the run can detect.

**Floor.** With ``n`` paired items both tests reach at best ``p = 2 · 2^-n`` (every item moved
in the same direction: the exact binomial tail of McNemar's discordant pairs, or the one sign
pattern of the sign-flip test and its mirror). When ``2 · 2^-n ≥ α`` no verdict is possible at
all (:func:`min_p`, :func:`min_items`): 4 items give 0.125, so no α = 0.05 verdict.

**McNemar** (0/1 item values; :func:`mcnemar_power`, :func:`mcnemar_mde`,
:func:`mcnemar_sample_size`) — computed exactly, no simulation. Items are independent; an item is
*discordant* (the two models differ on it) with probability ψ, and a discordant item moved in the
change's direction with probability ``q = (ψ + δ) / (2ψ)``, so the difference of the means is δ.
Power is the exact sum ``Σ_d Binom(d; n, ψ) · P(reject | d)`` over the number ``d`` of
discordant items, where ``P(reject | d)`` is the probability that the exact two-sided binomial
test on the ``d`` discordant pairs (:func:`metamorph.stats.mcnemar_exact`) gives ``p < α_cell``
when the pairs split ``Binom(d, q)``. The discordance is ``ψ = max(ψ0, δ)``: ``ψ0`` is assumed
(default 0: every discordant item moved in the change's direction — the most favourable case,
so the MDE is the smallest any run of ``n`` items can have) or taken from the data (the observed
fraction of discordant items).

**Sign-flip permutation test** (item values that are not all 0/1: rates over repeats, scores;
:func:`permutation_mde`, :func:`permutation_sample_size`) — a normal approximation of the
permutation distribution, in closed form. The differences are a *shift model*: ``δ`` plus
independent noise of standard deviation σ (taken from the data: the standard deviation of the
observed differences). Conditional on the differences the sign-flip statistic ``Σ d_i`` has mean 0
and variance ``Σ d_i² ≈ n (σ² + δ²)``, so the test rejects when
``|Σ d_i| ≥ z_{1−α/2} · sqrt(n (σ² + δ²))``, and power ``1 − β`` needs
``√n δ − z_{1−α/2} sqrt(σ² + δ²) = z_{1−β} σ``, whose root is
``δ = σ (√n z_{1−β} + z_{1−α/2} sqrt(n + z_{1−β}² − z_{1−α/2}²)) / (n − z_{1−α/2}²)``.
Below the floor the answer is "no verdict possible" whatever σ. The tests of this module check
both forms against a seeded simulation of the paired design.

Effects and MDEs are in the metric's unit (fractions for rates: 0.19 = 19 pp). Pure library.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as _sst

__all__ = [
    "DEFAULT_POWER",
    "PERMUTATION_RESAMPLES",
    "add_plan_arguments",
    "plan_lines",
    "plan_text",
    "Detectable",
    "detectable",
    "mcnemar_mde",
    "mcnemar_power",
    "mcnemar_sample_size",
    "min_items",
    "min_p",
    "no_verdict_text",
    "permutation_mde",
    "permutation_power",
    "permutation_sample_size",
]

#: The power of an MDE unless one is given (80 %).
DEFAULT_POWER = 0.8

#: Resamples of the comparison's sign-flip test (:func:`metamorph.stats.paired_permutation_test`'s
#: default): exact up to 2^n = 9999 sign patterns, else Monte Carlo, whose p is at least 1/10000.
PERMUTATION_RESAMPLES = 9999

_TOL = 1e-4  # resolution of the MDE search (0.01 pp)
_MAX_ITEMS = 10_000_000


def _check(alpha: float, power: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must be in (0, 1), got {power}")


def min_p(n: int) -> float:
    """The smallest two-sided p-value exact McNemar or the sign-flip test can give with ``n``
    paired items: ``min(1, 2 · 2^-n)`` (1 for ``n = 0``)."""
    return 1.0 if n <= 0 else min(1.0, 2.0 * 0.5**n)


def min_items(alpha: float) -> int:
    """The fewest paired items with which a p-value below ``alpha`` is possible: the smallest
    ``n`` with ``2 · 2^-n < alpha`` (6 for 0.05, 7 for 0.025)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    n = 1
    while min_p(n) >= alpha:
        n += 1
    return n


def no_verdict_text(n: int, alpha: float, alpha_cell: float | None = None) -> str | None:
    """Why no verdict is possible with ``n`` items, or None when one is: ``no α = 0.05 verdict is
    possible with 4 items (smallest two-sided p 0.125)``; with a Holm family (``alpha_cell`` =
    α/m below α) also when the floor is between α/m and α."""
    p = min_p(n)
    if p >= alpha:
        return (
            f"no α = {alpha:g} verdict is possible with {n} item{'s' if n != 1 else ''} (smallest two-sided p {p:.3g})"
        )
    if alpha_cell is not None and p >= alpha_cell:
        return (
            f"no verdict at Holm's guaranteed level α/m = {alpha_cell:.3g} is possible with {n} items "
            f"(smallest two-sided p {p:.3g})"
        )
    return None


# ------------------------------------------------------------------ McNemar (exact)


def _reject_k(d: np.ndarray, alpha: float) -> np.ndarray:
    """Per number of discordant pairs ``d``: the largest ``k`` with ``2 · P(Binom(d, ½) ≤ k) < alpha``
    (the exact two-sided test rejects when the smaller side has ``k`` or fewer pairs), −1 if none:
    one less than the ½-binomial quantile of ``alpha / 2``."""
    return _sst.binom.ppf(alpha / 2, d, 0.5).astype(int) - 1


def mcnemar_power(n: int, delta: float, alpha: float, discordance: float = 0.0) -> float:
    """Exact power of the two-sided exact McNemar test at level ``alpha`` (reject when ``p <
    alpha``) with ``n`` independent paired 0/1 items, when the difference of the two models' means
    is ``delta`` (either sign) and a fraction ``ψ = max(discordance, |delta|)`` of items is
    discordant (module docstring). Raises ``ValueError`` for ``|delta| > 1`` or a discordance
    outside [0, 1]."""
    delta = abs(float(delta))
    if delta > 1.0 or not 0.0 <= discordance <= 1.0:
        raise ValueError(f"mcnemar_power: need |delta| <= 1 and 0 <= discordance <= 1, got {delta}, {discordance}")
    if n <= 0:
        return 0.0
    psi = max(float(discordance), delta)
    if psi == 0.0:
        return 0.0
    q = min(1.0, (psi + delta) / (2.0 * psi))
    # the discordant counts outside mean ± 12 sd (+ 10) carry less than 1e-30 of Binom(n, ψ)'s mass:
    # summing only the window keeps a step of the sample-size search cheap at millions of items
    spread = 12.0 * math.sqrt(n * psi * (1.0 - psi)) + 10.0
    d = np.arange(max(0, math.floor(n * psi - spread)), min(n, math.ceil(n * psi + spread)) + 1)
    k = _reject_k(d, alpha)
    # P(reject | d): the moved-in-direction count X ~ Binom(d, q) has X <= k or X >= d - k
    low = np.where(k >= 0, _sst.binom.cdf(k, d, q), 0.0)
    high = np.where(k >= 0, _sst.binom.sf(d - k - 1, d, q), 0.0)
    return float(np.sum(_sst.binom.pmf(d, n, psi) * (low + high)))


def mcnemar_mde(n: int, alpha: float, power: float = DEFAULT_POWER, discordance: float = 0.0) -> float:
    """The smallest difference δ in (0, 1] that exact McNemar on ``n`` items detects at level
    ``alpha`` with probability at least ``power`` (:func:`mcnemar_power`, bisection to 1e-4,
    rounded up); NaN when none does (``n`` below :func:`min_items`)."""
    _check(alpha, power)
    if min_p(n) >= alpha or mcnemar_power(n, 1.0, alpha, discordance) < power:
        return math.nan
    lo, hi = 0.0, 1.0
    while hi - lo > _TOL:
        mid = (lo + hi) / 2
        if mcnemar_power(n, mid, alpha, discordance) >= power:
            hi = mid
        else:
            lo = mid
    return hi


def _search_n(ok, start: int) -> int | None:
    """Smallest n >= start with ok(n), by doubling then bisection (ok taken as monotone)."""
    hi = start
    while not ok(hi):
        if hi >= _MAX_ITEMS:
            return None
        hi = min(_MAX_ITEMS, hi * 2)
    lo = max(start, hi // 2)
    if ok(lo):
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def mcnemar_sample_size(
    delta: float, alpha: float, power: float = DEFAULT_POWER, discordance: float = 0.0
) -> int | None:
    """The fewest items with which exact McNemar at level ``alpha`` detects a difference
    ``delta`` with probability ``power`` (:func:`mcnemar_power`; found by doubling and bisection:
    the exact power has small saw-teeth in ``n``, so a count a few items smaller may also reach
    it). None when no count up to 10 000 000 does."""
    _check(alpha, power)
    if not 0.0 < abs(delta) <= 1.0:
        raise ValueError(f"mcnemar_sample_size: delta must be in (0, 1], got {delta}")
    return _search_n(lambda n: mcnemar_power(n, delta, alpha, discordance) >= power, min_items(alpha))


# ------------------------------------------------------------------ sign-flip permutation (normal approximation)


def permutation_power(n: int, delta: float, sd: float, alpha: float) -> float:
    """Approximate power of the two-sided sign-flip permutation test at level ``alpha`` with
    ``n`` items whose differences are ``delta`` plus noise of standard deviation ``sd`` (module
    docstring): ``Φ((√n |δ| − z_{1−α/2} sqrt(sd² + δ²)) / sd)``; 0 below the floor."""
    if min_p(n) >= alpha:
        return 0.0
    delta = abs(float(delta))
    za = _sst.norm.ppf(1 - alpha / 2)
    if sd == 0.0:
        return 1.0 if delta > 0 else 0.0
    return float(_sst.norm.cdf((math.sqrt(n) * delta - za * math.sqrt(sd**2 + delta**2)) / sd))


def permutation_mde(n: int, sd: float, alpha: float, power: float = DEFAULT_POWER) -> float:
    """The difference the sign-flip test detects with ``power`` at ``alpha`` with ``n`` items of
    difference spread ``sd`` (closed form, module docstring); NaN below the floor, when ``n ≤
    z_{1−α/2}²``, or when ``sd`` is 0 or not finite (the shift model gives no effect size)."""
    _check(alpha, power)
    if min_p(n) >= alpha or not math.isfinite(sd) or sd <= 0.0:
        return math.nan
    za, zb = _sst.norm.ppf(1 - alpha / 2), _sst.norm.ppf(power)
    if n <= za**2:
        return math.nan
    return float(sd * (math.sqrt(n) * zb + za * math.sqrt(n + zb**2 - za**2)) / (n - za**2))


def permutation_sample_size(delta: float, sd: float, alpha: float, power: float = DEFAULT_POWER) -> int:
    """The fewest items with which the sign-flip test detects ``delta`` with ``power`` at ``alpha``
    when the differences spread with ``sd`` (the closed form solved for ``n``:
    ``ceil(((z_{1−β} sd + z_{1−α/2} sqrt(sd² + δ²)) / δ)²)``, and at least :func:`min_items`)."""
    _check(alpha, power)
    if delta == 0 or not math.isfinite(sd) or sd < 0:
        raise ValueError(f"permutation_sample_size: need delta != 0 and a finite sd >= 0, got {delta}, {sd}")
    za, zb = _sst.norm.ppf(1 - alpha / 2), _sst.norm.ppf(power)
    n = math.ceil(((zb * sd + za * math.sqrt(sd**2 + delta**2)) / abs(delta)) ** 2 - 1e-9)
    return max(n, min_items(alpha))


# ------------------------------------------------------------------ one comparison cell


@dataclass(frozen=True)
class Detectable:
    """What one comparison cell could detect.

    Attributes:
        mde: the minimum detectable difference (metric's unit); NaN when none (see ``note``).
        alpha_cell: the level it was computed at (α / m).
        note: how it was computed, or why there is no MDE.
    """

    mde: float
    alpha_cell: float
    note: str


def detectable(
    baseline: np.ndarray,
    candidate: np.ndarray,
    test: str,
    alpha: float,
    family: int,
    power: float = DEFAULT_POWER,
) -> Detectable:
    """The MDE of one compared cell from its paired values, for the test the comparison used
    (``mcnemar_exact``: exact power with the observed discordance; ``paired_permutation``: the
    closed form with the observed standard deviation of the differences), at ``alpha / family``
    and ``power``. NaN with a note when no verdict is possible: too few items for the floor
    (:func:`no_verdict_text`), or a Monte Carlo sign-flip test (more than 13 items) whose smallest
    p, 1/10000, is not below α/m; or when every difference is equal (no spread)."""
    _check(alpha, power)
    n = int(len(baseline))
    a = alpha / max(1, family)
    why = no_verdict_text(n, alpha, a)
    if why:
        return Detectable(math.nan, a, why)
    d = np.asarray(candidate, dtype=float) - np.asarray(baseline, dtype=float)
    if test == "mcnemar_exact":
        psi = float(np.mean(d != 0))
        return Detectable(
            mcnemar_mde(n, a, power, psi),
            a,
            f"exact McNemar power {power:g} at α/m = {a:.3g} (m = {family}), observed discordance {psi:.3g}",
        )
    if 2**n > PERMUTATION_RESAMPLES and 1 / (PERMUTATION_RESAMPLES + 1) >= a:
        return Detectable(
            math.nan,
            a,
            f"no verdict at α/m = {a:.3g} is possible: the Monte Carlo sign-flip test's smallest p is "
            f"1/{PERMUTATION_RESAMPLES + 1}",
        )
    sd = float(np.std(d, ddof=1)) if n > 1 else math.nan
    if not sd > 0:
        return Detectable(math.nan, a, "every difference equal: no spread, no effect size under the shift model")
    return Detectable(
        permutation_mde(n, sd, a, power),
        a,
        f"sign-flip test, normal approximation, power {power:g} at α/m = {a:.3g} (m = {family}), "
        f"observed sd of differences {sd:.3g}",
    )


# ------------------------------------------------------------------ before any call: `metamorph plan`


def _effect(text: str) -> float:
    """``3pp`` / ``3`` -> 0.03 (percentage points, above 0 and at most 100)."""
    body = text.strip().removesuffix("pp").strip()
    try:
        value = float(body)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected percentage points such as 3pp, got {text!r}") from None
    if not 0.0 < value <= 100.0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected percentage points in (0, 100], got {text!r}")
    return value / 100.0


def _open_unit(name: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number in (0, 1), got {text!r}") from None
        if not 0.0 < value < 1.0:
            raise argparse.ArgumentTypeError(f"{name} must be a number in (0, 1), got {text!r}")
        return value

    return parse


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"discordance must be a number in [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"discordance must be a number in [0, 1], got {text!r}")
    return value


def add_plan_arguments(group) -> None:
    """``metamorph plan``'s options of the detectable effects: ``--detect``, ``--alpha``,
    ``--power``, ``--discordance`` (added to ``group``, an argparse group)."""
    group.add_argument(
        "--detect",
        type=_effect,
        default=None,
        metavar="PP",
        help="print the items (and requests and cost) needed to detect a change of PP percentage points "
        "(e.g. 3pp) on every compared metric",
    )
    group.add_argument(
        "--alpha", type=_open_unit("alpha"), default=0.05, help="family-wise level of the verdicts (default 0.05)"
    )
    group.add_argument(
        "--power", type=_open_unit("power"), default=DEFAULT_POWER, help="power of the detectable effects (default 0.8)"
    )
    group.add_argument(
        "--discordance",
        type=_fraction,
        default=0.0,
        help="assumed fraction of items on which the two models differ (default 0: every item that changes "
        "moves the same way, the most favourable case)",
    )


def _pp(x: float) -> str:
    return f"{100 * x:.1f} pp"


def _pp_fine(x: float) -> str:
    """``_pp``, with two significant digits below 0.1 pp (a ``--detect`` of 0.001pp is not "0.0 pp")."""
    return _pp(x) if 100 * x >= 0.1 else f"{100 * x:.2g} pp"


def plan_text(
    cells: pd.DataFrame,
    plans: dict,
    *,
    alpha: float = 0.05,
    power: float = DEFAULT_POWER,
    discordance: float = 0.0,
    detect: float | None = None,
) -> list[str]:
    """The lines ``metamorph plan`` prints about what the run's verdicts can detect, before any call.

    Args:
        cells: the (metric, slice) cells the study's comparison will hold: a DataFrame ``metric,
            slice, n_items, outcomes`` (the study report's ``planned_cells``; ``outcomes``: the 0/1
            outcomes an item's value averages, 0 for a score; without the column every value is 0/1).
        plans: model id -> that model's :class:`~metamorph.costplan.CostPlan` steps (for the
            requests and cost that ``detect`` needs).
        alpha: the verdicts' family-wise level; each cell is taken at α/m, m = len(cells).
        power: the power of the detectable effects.
        discordance: the assumed fraction ψ0 of items the two models differ on (0: every changed
            item moved in the change's direction, the most favourable case).
        detect: a change (fraction) to size the run for, or None.

    Per metric and distinct item count of its slices: the MDE of exact McNemar on 0/1 item values
    (:func:`mcnemar_mde`), or why no verdict is possible at all (both tests); where an item's value
    averages several outcomes (or is a score) the comparison uses the sign-flip test, whose MDE
    needs the spread of the differences, which only the run gives: the line says so and shows the
    0/1 figure for reference;
    with ``detect``, the items per slice :func:`mcnemar_sample_size` needs, and each model's requests
    and cost scaled linearly from its plan (requests per item of the metric's smallest slice; cost per
    call of the calls left).
    """
    _check(alpha, power)
    if len(cells) == 0:
        return ["Detectable effects: no compared cell (the sources give no item)."]
    m = len(cells)
    a = alpha / m
    assumed = (
        "every item that changes moves the same way (the most favourable case)"
        if discordance == 0
        else f"{discordance:g} of items differ between the models"
    )
    out = [
        f"Detectable effects (before any call): two-sided paired tests on 0/1 item values, Holm over the {m} "
        f"compared cells of a candidate (guaranteed level α/m = {alpha:g}/{m} = {a:.3g}), power {power:g}, "
        f"assuming {assumed}:"
    ]
    for metric, g in cells.groupby("metric", sort=False):
        binary = g["outcomes"] == 1 if "outcomes" in g else pd.Series(True, index=g.index)
        for (n, one), gg in g.groupby([g["n_items"], binary], sort=True):
            n = int(n)
            where = f"{len(gg)} slice{'s' if len(gg) > 1 else ''}, e.g. {gg['slice'].iloc[0]}"
            why = no_verdict_text(n, alpha, a)
            if why:
                out.append(f"  {metric}: {why} ({where})")
            elif one:
                mde = mcnemar_mde(n, a, power, discordance)
                out.append(
                    f"  {metric}: with {n} items the smallest regression of {metric} this run can detect is "
                    f"{_pp_fine(mde)} ({where})"
                )
            else:
                mde = mcnemar_mde(n, a, power, discordance)
                out.append(
                    f"  {metric}: with {n} items {_pp_fine(mde)} if each item's value were one 0/1 outcome; here an "
                    f"item's value is {_averaged(gg)}, tested with the sign-flip test, whose detectable effect "
                    f"depends on the spread of the differences: model_comparison's mde gives it after the run "
                    f"({where})"
                )
        if detect is not None:
            need = mcnemar_sample_size(detect, a, power, discordance)
            n_min = int(g["n_items"].min())
            if need is None:
                out.append(f"  {metric}: no count of items up to {_MAX_ITEMS:,} detects {_pp_fine(detect)}")
                continue
            caveat = "" if bool(binary.all()) else " (for 0/1 item values)"
            costs = "; ".join(_scaled(p, need, n_min) for p in plans.items())
            have = f"this plan has {n_min}" if n_min else "this plan has none"
            out.append(
                f"  {metric}: detecting a change of {_pp_fine(detect)} needs {need:,} items per slice{caveat} ({have}): "
                f"{costs}"
            )
    if detect is not None:
        out.append(
            "  (requests and cost scaled linearly from this plan: its requests per item of the metric's "
            "smallest slice, its cost per call left to make)"
        )
    return out


def _averaged(cells) -> str:
    """``the mean of 5 0/1 outcomes`` / ``a score`` (``outcomes`` 0) for the cells' largest count."""
    k = int(cells["outcomes"].max())
    return "a score, not a 0/1 outcome" if k == 0 else f"the mean of up to {k} 0/1 outcomes"


def _scaled(item, need: int, n_min: int) -> str:
    model_id, steps = item
    if not steps or n_min == 0:
        return f"{model_id} not estimable (no item planned)"
    requests = sum(p.requests for p in steps)
    calls = sum(p.calls for p in steps)
    up = "up to " if any(p.upper_bound for p in steps) else ""
    n_req = math.ceil(requests * need / n_min)
    if all(p.local for p in steps):
        cost = "$0 (local model)"
    elif any(p.cost_usd is None for p in steps):
        cost = "cost unknown (no price_per_mtok)"
    elif calls == 0:
        cost = "cost not estimable (every request of this plan is cached)"
    else:
        from metamorph.costplan import usd

        cost = f"est. cost {up}{usd(sum(p.cost_usd for p in steps) / calls * n_req)}"
    return f"{model_id} ≈ {up}{n_req:,} requests, {cost}"


def plan_lines(study: str, args, options, specs, plans) -> list[str]:
    """:func:`plan_text` for ``metamorph plan <study>``: the cells from the study report's
    ``planned_cells(options, specs)``, ``plans`` the :class:`~metamorph.costplan.CostPlan` steps of
    every model (grouped by ``model_id``) and the settings ``--alpha``, ``--power``,
    ``--discordance``, ``--detect`` of ``args``; no lines for a study without
    :attr:`metamorph.study.Comparison.planned_cells`. Raises the loaders' :class:`~metamorph.errors.InputError`."""
    from metamorph.study import get

    by_model: dict = {}
    for p in plans:
        by_model.setdefault(p.model_id, []).append(p)

    comparison = get(study).comparison
    if comparison is None or comparison.planned_cells is None:
        return []
    return plan_text(
        comparison.planned_cells(options, list(specs)),
        by_model,
        alpha=getattr(args, "alpha", 0.05),
        power=getattr(args, "power", DEFAULT_POWER),
        discordance=getattr(args, "discordance", 0.0),
        detect=getattr(args, "detect", None),
    )
