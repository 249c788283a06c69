"""Regressions of the wrapper study: accuracy on parseability (FSI paper §5; review major 3).

* :func:`pearson_acc_parse` — Pearson r between cell accuracy and parseability.
* :func:`fixed_effects_regression` — WLS ``A = βP + γ_task + δ_format`` (+ model effects when
  identified), weights n, with partial R² of parseability (statsmodels).
* :func:`partial_r2_from_t` — the partial R² of a regressor from its t and the residual df.
* :func:`item_level_model` — item-level linear probability model of correctness with
  cluster-robust standard errors by item (statsmodels).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import statsmodels.api as sm

from metamorph import stats
from metamorph.measurability import every_call_failed
from metamorph.studies.wrapper_sensitivity.metrics import (
    DEFAULT_MODE,
    ordered_wrappers,
    validate_cells,
    validate_scored,
)
from metamorph.studies.wrapper_sensitivity.schemas import (
    WrapperCorrelation,
    WrapperFERegression,
    WrapperItemModel,
)
from metamorph.studies.wrapper_sensitivity.vocab import CORRELATION_SCOPES

__all__ = [
    "fixed_effects_regression",
    "item_level_model",
    "partial_r2_from_t",
    "pearson_acc_parse",
]


def pearson_acc_parse(cells: pd.DataFrame) -> pd.DataFrame:
    """Pearson r(accuracy, parseability) over cells (§5), pooled and per model.

    :func:`metamorph.stats.pearson` (scipy ``pearsonr``, two-sided p). Each cell is one
    point, unweighted. Fewer than 3 cells or a constant A or P give a null r with a note.
    The pooled r mixes between-model/task and within variation (an ecological
    correlation) and is partly mechanical (A = P · C); :func:`fixed_effects_regression`
    and :func:`item_level_model` are the adjusted analyses.

    A cell with no reply (every call failed: null A and P) is not a point; ``n_call_errors``
    sums the failed calls of the scope's cells.

    Returns:
        :class:`~metamorph.studies.wrapper_sensitivity.schemas.WrapperCorrelation`: ``scope, model_id,
        r, p_value, n, note, n_call_errors`` (pooled first, then models in sorted order).
    """
    c = validate_cells(cells, ["accuracy_pct", "parseability_pct", "n_call_errors"], "cells")
    rows = []
    pooled, per_model = CORRELATION_SCOPES
    scopes = [(pooled, None, c)] + [(per_model, str(m), g) for m, g in c.groupby("model_id", sort=True)]
    for scope, m, g in scopes:
        errors = int(g["n_call_errors"].sum())
        g = g[g["accuracy_pct"].notna()]
        res = stats.pearson(g["accuracy_pct"].astype(float).tolist(), g["parseability_pct"].astype(float).tolist())
        rows.append(
            dict(scope=scope, model_id=m, r=res.rho, p_value=res.p_value, n=res.n, note=res.note, n_call_errors=errors)
        )
    out = pd.DataFrame(rows, columns=["scope", "model_id", "r", "p_value", "n", "note", "n_call_errors"])
    for col in ("r", "p_value"):
        out[col] = out[col].astype(float)
    return WrapperCorrelation.validate(out)


def _fe_dummies(df: pd.DataFrame, factors: Sequence[str]) -> tuple[pd.DataFrame, list[str], list[str], dict[str, str]]:
    """Treatment dummies (first level = reference) of the factors that have ≥ 2 levels.

    Levels are sorted (wrappers in canonical order, so ``plain`` is the reference).
    Returns (dummies, included factors, dropped factors, reference level per factor).
    """
    parts, used, dropped, refs = [], [], [], {}
    for f in factors:
        levels = ordered_wrappers(df[f]) if f == "wrapper" else sorted(set(df[f]))
        if len(levels) < 2:
            dropped.append(f)
            continue
        used.append(f)
        refs[f] = levels[0]
        cat = pd.Categorical(df[f], categories=levels)
        d = pd.get_dummies(cat, prefix=f, prefix_sep="[", dtype=float).iloc[:, 1:]
        d.columns = [f"{c}]" for c in d.columns]
        d.index = df.index
        parts.append(d)
    dummies = pd.concat(parts, axis=1) if parts else pd.DataFrame(index=df.index)
    return dummies, used, dropped, refs


def _check_design(X: pd.DataFrame, sqrt_w: np.ndarray, regressor: str, what: str) -> None:
    if X[regressor].nunique() < 2:
        raise ValueError(f"{what}: '{regressor}' is constant over the observations; its coefficient is not identified")
    Xw = X.to_numpy(dtype=float) * sqrt_w[:, None]
    rank = int(np.linalg.matrix_rank(Xw))
    if rank < X.shape[1]:
        Xr = X.drop(columns=[regressor]).to_numpy(dtype=float) * sqrt_w[:, None]
        if int(np.linalg.matrix_rank(Xr)) == rank:
            raise ValueError(
                f"{what}: rank-deficient design (rank {rank} < {X.shape[1]} columns): '{regressor}' is a linear "
                "combination of the fixed effects (e.g. it varies only between models, tasks or wrappers), "
                "so its coefficient is not identified"
            )
        raise ValueError(
            f"{what}: rank-deficient design (rank {rank} < {X.shape[1]} columns): the fixed effects "
            "are collinear (e.g. a wrapper present for one model only); the coefficients are not identified"
        )
    if X.shape[0] - X.shape[1] < 1:
        raise ValueError(
            f"{what}: no residual degrees of freedom ({X.shape[0]} observations, {X.shape[1]} "
            "coefficients): the design is saturated, no standard error"
        )


def partial_r2_from_t(t: float, df_resid: float) -> float:
    """Partial R² of one regressor from its t statistic: t² / (t² + df_resid) (unitless, [0, 1]).

    The identity holds for the classical (non-robust) OLS / WLS standard error, where
    t² = (SSR_reduced − SSR_full) / (SSR_full / df_resid) is the F statistic of dropping the
    regressor; :func:`fixed_effects_regression` computes the partial R² from the two SSRs and
    agrees with this to rounding. Source: the paper's §5.2 reports β̂ = 0.819 ± 0.034 with
    partial R² = 0.82 for 140 cells and 15 coefficients (df = 125): (0.819/0.034)² / ((0.819/0.034)²
    + 125) = 0.8228, consistent with the reported 0.82.

    Raises:
        ValueError: ``df_resid`` < 1 or a non-finite ``t``.
    """
    if not math.isfinite(t) or not df_resid >= 1:
        raise ValueError(f"partial_r2_from_t: need a finite t and df_resid >= 1, got t={t!r}, df_resid={df_resid!r}")
    return t * t / (t * t + df_resid)


_FE_WEIGHTS = (
    "n: generations per cell (inverse-variance weights for a mean of n Bernoulli outcomes, assuming equal p(1-p))"
)


def fixed_effects_regression(cells: pd.DataFrame, cov_type: str = "nonrobust") -> pd.DataFrame:
    """Cell-level fixed-effects regression A = βP + α_m + γ_t + δ_f (§5), by WLS.

    ``accuracy_pct`` on ``parseability_pct`` with intercept and treatment dummies for
    model, task and wrapper (reference levels: the first model / task alphabetically and
    ``plain``), fitted by :class:`statsmodels.regression.linear_model.WLS` with weights
    w = n (generations per cell): a cell accuracy is a mean of n Bernoulli outcomes, so its
    variance is p(1−p)/n and w = n is the inverse-variance weight under a common p(1−p).
    β̂ is a unitless slope (pp of accuracy per pp of parseability) identified from the
    within-model, within-task, within-wrapper variation of P.

    Reported: β̂, its SE (``cov_type``, default the classical one; any statsmodels
    ``cov_type`` without extra arguments, e.g. ``"HC3"``), t, p (t with ``df_resid``
    for the classical SE), 95% CI, the **partial R² of P** = (SSR_r − SSR_f)/SSR_r with
    weighted SSRs of the full model and of the fixed-effects-only model (equal to
    t²/(t² + df_resid) for the classical SE, :func:`partial_r2_from_t`), weighted R², residual
    df, and the weights.

    Identification: a factor with a single level (e.g. one model) has no identified effect
    — it is absorbed in the intercept, dropped and named in ``note``.

    Raises:
        ValueError: missing columns; a cell with n < 1; P constant; a rank-deficient design
            (P collinear with the effects, or collinear effects); no residual df.

    Returns:
        :class:`~metamorph.studies.wrapper_sensitivity.schemas.WrapperFERegression` (one row):
        ``beta, se, t_value, p_value, ci_low, ci_high, partial_r2, r2, n_cells, n_params,
        df_resid, weights, weight_min, weight_max, weight_sum, cov_type, effects, note``.
    """
    what = "fixed_effects_regression"
    c = validate_cells(cells, ["accuracy_pct", "parseability_pct", "n", "n_call_errors"], "cells")
    n_errors = int(c["n_call_errors"].sum())
    c = c[c["n"] > 0].reset_index(drop=True)  # a cell with no reply (every call failed) is no observation
    if len(c) == 0:
        raise ValueError(f"{what}: no cells")
    w = pd.to_numeric(c["n"], errors="coerce").astype(float).to_numpy()
    if np.isnan(w).any() or (w < 1).any():
        raise ValueError(f"{what}: every cell needs n >= 1 (the WLS weight)")
    y = c["accuracy_pct"].astype(float)
    dummies, used, dropped, _ = _fe_dummies(c, ["model_id", "task", "wrapper"])
    X_red = pd.concat([pd.Series(1.0, index=c.index, name="const"), dummies], axis=1)
    X = pd.concat([X_red[["const"]], c["parseability_pct"].astype(float).rename("P"), dummies], axis=1)
    _check_design(X, np.sqrt(w), "P", what)
    full = sm.WLS(y, X, weights=w).fit(cov_type=cov_type)
    red = sm.WLS(y, X_red, weights=w).fit()
    notes = [f"{f} has a single level: its effect is not identified, absorbed in the intercept" for f in dropped]
    ssr_f, ssr_r = float(full.ssr), float(red.ssr)
    if ssr_r <= 0.0:
        partial = math.nan
        notes.append("the fixed effects alone fit A exactly: partial R² undefined")
    else:
        partial = min(max((ssr_r - ssr_f) / ssr_r, 0.0), 1.0)
    se = float(full.bse["P"])
    ci = full.conf_int(alpha=0.05).loc["P"]
    t = float(full.tvalues["P"]) if se > 0 else math.nan
    p = float(full.pvalues["P"]) if se > 0 else math.nan
    if se == 0:
        notes.append("perfect fit: SE = 0, no test")
    row = dict(
        beta=float(full.params["P"]),
        se=se,
        t_value=t,
        p_value=p,
        ci_low=float(ci.iloc[0]),
        ci_high=float(ci.iloc[1]),
        partial_r2=partial,
        r2=float(full.rsquared) if math.isfinite(float(full.rsquared)) else math.nan,
        n_cells=len(c),
        n_params=X.shape[1],
        df_resid=int(round(full.df_resid)),
        weights=_FE_WEIGHTS,
        weight_min=float(w.min()),
        weight_max=float(w.max()),
        weight_sum=float(w.sum()),
        cov_type=cov_type,
        effects=", ".join(used) if used else "(none)",
        note="; ".join(notes) or None,
        n_call_errors=n_errors,
    )
    return WrapperFERegression.validate(pd.DataFrame([row]))


def item_level_model(scored: pd.DataFrame, mode: str = DEFAULT_MODE) -> pd.DataFrame:
    """Item-level linear probability model with cluster-robust SEs by item (review major 3).

    ``correct ~ parseable + C(model_id) + C(task) + C(wrapper)`` fitted by OLS on every
    generation of mode ``mode`` (outcome and regressor 0/1), with the CRV1 cluster-robust
    covariance of statsmodels (``cov_type="cluster"``, groups = items ``(task, item_id)``,
    small-sample correction G/(G−1)·(N−1)/(N−K), t reference with G − 1 df, G = number of
    clusters): generations of one item (across models, wrappers and seeds) share the item's
    difficulty, so they are not independent and the classical SE (``se_nonrobust``,
    reported alongside) is too small.

    Why a linear probability model and not a logit: ``correct`` is False whenever
    ``parseable`` is False, so ``parseable`` quasi-completely separates the outcome and the
    logit MLE of its coefficient is +∞. The LPM coefficient is the adjusted difference in
    P(correct) between parseable and unparseable generations; since unparseable ones are
    wrong by construction it estimates the (adjusted) mean Acc | parseable and is largely
    mechanical, which is the review's point — the wrapper rows (``wrapper[w]``: effect
    of w vs the reference ``plain`` *holding parseability fixed*) are the conditional-
    accuracy effects of the wrappers.

    Factors with a single level are dropped and named in ``note``.

    Raises:
        ValueError: invalid input (see :func:`validate_scored`); ``parseable`` constant;
            fewer than 2 clusters; a rank-deficient design; no residual df.

    Returns:
        :class:`~metamorph.studies.wrapper_sensitivity.schemas.WrapperItemModel`: ``term, coef, se,
        se_nonrobust, t_value, p_value, ci_low, ci_high, n_obs, n_clusters, df_inference,
        reference_wrapper, mode, note`` — one row for ``parseable``, then one per
        non-reference wrapper.
    """
    what = "item_level_model"
    s = validate_scored(scored, mode)
    n_errors = int(s["_call_error"].sum())
    s = s[~s["_call_error"]].reset_index(drop=True)  # a failed call is no observation
    if len(s) == 0:
        raise ValueError(
            f"{what}: no reply in mode {mode!r}" + (f" ({every_call_failed(n_errors)})" if n_errors else "")
        )
    y = s["correct"].astype(float)
    dummies, _used, dropped, refs = _fe_dummies(s, ["model_id", "task", "wrapper"])
    X = pd.concat(
        [pd.Series(1.0, index=s.index, name="const"), s["parseable"].astype(float).rename("parseable"), dummies], axis=1
    )
    groups = pd.factorize(pd.MultiIndex.from_frame(s[["task", "item_id"]]))[0]
    n_clusters = int(groups.max()) + 1
    if n_clusters < 2:
        raise ValueError(f"{what}: cluster-robust SEs need at least 2 items (clusters); got {n_clusters}")
    _check_design(X, np.ones(len(X)), "parseable", what)
    model = sm.OLS(y, X)
    robust = model.fit(cov_type="cluster", cov_kwds={"groups": groups}, use_t=True)
    classical = model.fit()
    notes = [f"{f} has a single level: its effect is not identified, absorbed in the intercept" for f in dropped]
    ci = robust.conf_int(alpha=0.05)
    terms = ["parseable"] + [col for col in dummies.columns if col.startswith("wrapper[")]
    rows = []
    for term in terms:
        se = float(robust.bse[term])
        rows.append(
            dict(
                term=term,
                coef=float(robust.params[term]),
                se=se,
                se_nonrobust=float(classical.bse[term]),
                t_value=float(robust.tvalues[term]) if se > 0 else math.nan,
                p_value=float(robust.pvalues[term]) if se > 0 else math.nan,
                ci_low=float(ci.loc[term].iloc[0]),
                ci_high=float(ci.loc[term].iloc[1]),
                n_obs=len(s),
                n_clusters=n_clusters,
                df_inference=n_clusters - 1,
                reference_wrapper=refs.get("wrapper"),
                mode=mode,
                note="; ".join(notes) or None,
                n_call_errors=n_errors,
            )
        )
    cols = [
        "term",
        "coef",
        "se",
        "se_nonrobust",
        "t_value",
        "p_value",
        "ci_low",
        "ci_high",
        "n_obs",
        "n_clusters",
        "df_inference",
        "reference_wrapper",
        "mode",
        "note",
        "n_call_errors",
    ]
    out = pd.DataFrame(rows, columns=cols)
    for col in ("t_value", "p_value"):
        out[col] = out[col].astype(float)
    return WrapperItemModel.validate(out)
