"""Metrics of the prompt-wrapper sensitivity study (issue #3).

Paper: "Format Sensitivity Index: Token-Controlled Prompt Wrapper Robustness and Schema
Compliance in LLM Benchmarking" (arXiv 2607.09665), §4 (indices) and §5 (analyses), and a
published review of it whose objections are answered here: **major 1** (decompose FSI into
a compliance part and a conditional-accuracy part, :func:`decomposition`), **major 3**
(item-level model with cluster-robust SEs, :func:`item_level_model`) and **minor 2** (a
bounded, chance-adjusted nFSI, ``nfsi_chance`` in :func:`fsi_psi`).

Input: the scored-generations frame
-----------------------------------
One row per generation × extraction mode, columns :data:`SCORED_COLUMNS`:
``model_id`` str, ``task`` str, ``answer_type`` (choice / boolean / numeric), ``wrapper``
str (plain / json / structured / structured_delim / deliberate, or another arm such as a
constrained-decoding one), ``item_id`` str, ``seed`` int, ``mode`` (strict / normalized /
lenient), ``parseable`` bool, ``correct`` bool (False when unparseable), ``finish_reason``
str or None, ``prompt_tokens`` int or None, ``n_choices`` int or None (choice tasks; the
chance level is 1/n_choices for choice, 0.5 for boolean, 0 for numeric).

:func:`validate_scored` checks it (every function taking ``scored`` calls it): missing
columns (named), null keys, unknown modes / answer types, non-boolean ``parseable`` /
``correct``, ``correct`` without ``parseable``, duplicate generation keys
``(model_id, task, wrapper, item_id, seed, mode)``, a task with several answer types and
``n_choices < 2`` raise :class:`ValueError`. Functions take a ``mode`` argument (default
``"normalized"``) and use only that slice; a mode absent from the frame is an error.

Conventions shared by all functions
-----------------------------------
* Percentages are in percent (0–100); differences of percentages in percentage points (pp).
* An index over wrappers needs a pair: a (model, task) with a single wrapper has null
  FSI / PSI / nFSI and a ``note``; it never counts as "FSI = 0".
* Items are identified by ``(task, item_id)`` (item ids may repeat across tasks).
* Ties between wrappers (equal to :data:`TIE_TOL` pp) are broken by the canonical order
  :data:`WRAPPER_ORDER`, then alphabetically; output rows are sorted by model_id, task,
  then wrapper in that order.
* Every output is validated by its schema in :mod:`metamorph.schemas.wrapper_metrics`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd
import statsmodels.api as sm

from metamorph import stats
from metamorph.metrics._order import canonical_key, ordered, sort_frame
from metamorph.schemas.wrapper_metrics import (
    WrapperCells,
    WrapperCorrelation,
    WrapperDecomposition,
    WrapperFERegression,
    WrapperFSI,
    WrapperItemModel,
    WrapperMatchedFSI,
    WrapperMeanIndices,
    WrapperWins,
)

__all__ = [
    "SCORED_COLUMNS",
    "WRAPPER_ORDER",
    "MODES",
    "ANSWER_TYPES",
    "DEFAULT_MODE",
    "NFSI_EPS",
    "TIE_TOL",
    "validate_scored",
    "cell_metrics",
    "fsi_psi",
    "mean_indices",
    "pearson_acc_parse",
    "fixed_effects_regression",
    "item_level_model",
    "decomposition",
    "win_counts",
    "matched_fsi",
]

#: Columns of the scored-generations frame (the input contract).
SCORED_COLUMNS = (
    "model_id", "task", "answer_type", "wrapper", "item_id", "seed", "mode",
    "parseable", "correct", "finish_reason", "prompt_tokens", "n_choices",
)
#: Canonical wrapper order (paper §3.2): sorting, tie-breaking, reference level (plain).
WRAPPER_ORDER = ("plain", "json", "structured", "structured_delim", "deliberate")
#: Extraction modes (§3.5 strict / normalized, plus lenient).
MODES = ("strict", "normalized", "lenient")
#: Answer types and their chance level (percent; choice = 100 / n_choices).
ANSWER_TYPES = ("choice", "boolean", "numeric")
DEFAULT_MODE = "normalized"
#: ε of nFSI = FSI / (mean accuracy + ε) (§4).
NFSI_EPS = 1e-6
#: Two accuracies closer than this (pp) are a tie (best/worst wrapper, win counts).
TIE_TOL = 1e-9

_MT = ["model_id", "task"]
_CELL = ["model_id", "task", "wrapper"]
_GEN_KEY = ["model_id", "task", "wrapper", "item_id", "seed", "mode"]
_CHANCE_FIXED = {"boolean": 50.0, "numeric": 0.0}


# =========================================================================== validation


def _require_columns(df: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"{what}: expected a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what}: missing required column(s) {missing}; has {list(df.columns)}")


def _wrapper_key(w: str) -> tuple[int, str]:
    return canonical_key(w, WRAPPER_ORDER)


def _ordered_wrappers(values: Iterable[str]) -> list[str]:
    return ordered(values, WRAPPER_ORDER)


def _sort(df: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    return sort_frame(df, by, "wrapper", WRAPPER_ORDER)


def _as_bool(series: pd.Series, col: str) -> pd.Series:
    def conv(v: object) -> bool:
        if isinstance(v, (bool, np.bool_)):
            return bool(v)
        if isinstance(v, (int, np.integer, float, np.floating)) and v in (0, 1):
            return bool(v)
        raise ValueError(f"scored: column '{col}' must be boolean, found {v!r}")
    return series.map(conv).astype(bool)


def validate_scored(scored: pd.DataFrame, mode: str | None = None) -> pd.DataFrame:
    """Check the scored-generations frame and return a normalised copy (input not modified).

    With ``mode`` given, only that extraction mode's rows are returned (after validating
    the whole frame). Ids become ``str``, ``seed`` int, ``parseable``/``correct`` bool,
    ``n_choices`` a nullable integer; an internal column ``_chance`` holds each
    generation's chance accuracy in percent (NaN when a choice row lacks ``n_choices``).

    Raises:
        ValueError: missing columns (named); null ``model_id, task, answer_type, wrapper,
            item_id, seed, mode, parseable, correct``; non-integer seeds; an unknown mode or
            answer type; non-boolean ``parseable``/``correct``; ``correct`` True on an
            unparseable row; duplicate ``(model_id, task, wrapper, item_id, seed, mode)``;
            a task with several answer types; ``n_choices`` < 2 or non-integer on a
            choice row; ``mode`` not in :data:`MODES` or absent from the frame.
    """
    _require_columns(scored, SCORED_COLUMNS, "scored")
    if mode is not None and mode not in MODES:
        raise ValueError(f"scored: mode must be one of {list(MODES)}, got {mode!r}")
    s = scored.copy()
    for col in ("model_id", "task", "answer_type", "wrapper", "item_id", "seed", "mode", "parseable", "correct"):
        n_null = int(s[col].isna().sum())
        if n_null:
            raise ValueError(f"scored: column '{col}' has {n_null} null value(s)")
    for col in ("model_id", "task", "answer_type", "wrapper", "item_id", "mode"):
        s[col] = s[col].astype(str)
    seed = pd.to_numeric(s["seed"], errors="coerce")
    if seed.isna().any() or (seed != np.floor(seed)).any():
        raise ValueError("scored: 'seed' must be integers")
    s["seed"] = seed.astype(int)
    bad_mode = sorted(set(s["mode"]) - set(MODES))
    if bad_mode:
        raise ValueError(f"scored: unknown mode(s) {bad_mode}; expected {list(MODES)}")
    bad_at = sorted(set(s["answer_type"]) - set(ANSWER_TYPES))
    if bad_at:
        raise ValueError(f"scored: unknown answer_type(s) {bad_at}; expected {list(ANSWER_TYPES)}")
    s["parseable"] = _as_bool(s["parseable"], "parseable")
    s["correct"] = _as_bool(s["correct"], "correct")
    bad = s["correct"] & ~s["parseable"]
    if bad.any():
        raise ValueError(f"scored: {int(bad.sum())} row(s) are correct but not parseable (correct must be False when unparseable)")
    dup = s.duplicated(_GEN_KEY, keep=False)
    if dup.any():
        first = s.loc[dup, _GEN_KEY].iloc[0].to_dict()
        raise ValueError(f"scored: {int(dup.sum())} rows share a generation key, e.g. {first}")
    n_types = s.groupby("task")["answer_type"].nunique()
    if (n_types > 1).any():
        raise ValueError(f"scored: task(s) {sorted(n_types[n_types > 1].index)} have several answer types")
    nc = pd.to_numeric(s["n_choices"], errors="coerce")
    if (s["n_choices"].notna() & nc.isna()).any():
        raise ValueError("scored: 'n_choices' must be integers or null")
    choice = s["answer_type"] == "choice"
    if ((nc != np.floor(nc)) & nc.notna()).any() or (choice & nc.notna() & (nc < 2)).any():
        raise ValueError("scored: 'n_choices' must be an integer >= 2 on choice rows")
    s["n_choices"] = nc.astype("Int64")
    chance = s["answer_type"].map(_CHANCE_FIXED).astype(float)
    s["_chance"] = chance.where(~choice, 100.0 / nc.astype(float))
    if mode is not None:
        if len(s) and mode not in set(s["mode"]):
            raise ValueError(f"scored: no row with mode {mode!r}; modes present {sorted(set(s['mode']))}")
        s = s[s["mode"] == mode].reset_index(drop=True)
    return s


def _pct(num: float, den: float) -> float:
    return math.nan if den == 0 else 100.0 * num / den


# =========================================================================== §4 cells


def _cells(s: pd.DataFrame, mode: str) -> pd.DataFrame:
    cols = ["model_id", "task", "answer_type", "wrapper", "mode", "accuracy_pct", "parseability_pct",
            "acc_given_parse_pct", "truncation_rate_pct", "chance_pct", "n", "n_correct", "n_parseable",
            "n_truncated", "n_items", "n_seeds"]
    if len(s) == 0:
        return pd.DataFrame(columns=cols)
    s = s.assign(_trunc=s["finish_reason"].eq("length").fillna(False).astype(bool))
    agg = s.groupby(_CELL, sort=False).agg(
        answer_type=("answer_type", "first"),
        n=("correct", "size"),
        n_correct=("correct", "sum"),
        n_parseable=("parseable", "sum"),
        n_truncated=("_trunc", "sum"),
        n_items=("item_id", "nunique"),
        n_seeds=("seed", "nunique"),
        chance_pct=("_chance", "mean"),
        _chance_missing=("_chance", lambda x: bool(x.isna().any())),
    ).reset_index()
    agg["mode"] = mode
    agg["accuracy_pct"] = 100.0 * agg["n_correct"] / agg["n"]
    agg["parseability_pct"] = 100.0 * agg["n_parseable"] / agg["n"]
    agg["acc_given_parse_pct"] = [_pct(c, p) for c, p in zip(agg["n_correct"], agg["n_parseable"])]
    agg["truncation_rate_pct"] = 100.0 * agg["n_truncated"] / agg["n"]
    agg["chance_pct"] = agg["chance_pct"].where(~agg["_chance_missing"], math.nan)
    out = agg[cols].copy()
    for c in ("accuracy_pct", "parseability_pct", "acc_given_parse_pct", "truncation_rate_pct", "chance_pct"):
        out[c] = out[c].astype(float)
    return out


def cell_metrics(scored: pd.DataFrame, mode: str = DEFAULT_MODE) -> pd.DataFrame:
    """Per (model, task, wrapper) cell: A, P, Acc | parseable and the truncation rate (§4).

    Over all generations of the cell (all items × seeds) in extraction mode ``mode``:

    * ``accuracy_pct`` A = 100 · #correct / n (an unparseable generation is incorrect);
    * ``parseability_pct`` P = 100 · #parseable / n;
    * ``acc_given_parse_pct`` C = 100 · #correct / #parseable — null when nothing is
      parseable; A = P · C / 100 exactly (review major 1: this is the Acc | parse table by
      model / wrapper / task);
    * ``truncation_rate_pct`` = 100 · #(finish_reason == "length") / n; a null
      finish_reason counts as *not* truncated (the review's 24-token concern, mainly for
      ``deliberate``);
    * ``chance_pct`` = mean over the cell's generations of the chance accuracy
      (100/n_choices, 50, 0); null when a choice generation lacks ``n_choices``.

    Returns:
        :class:`~metamorph.schemas.wrapper_metrics.WrapperCells`: ``model_id, task,
        answer_type, wrapper, mode, accuracy_pct, parseability_pct, acc_given_parse_pct,
        truncation_rate_pct, chance_pct, n, n_correct, n_parseable, n_truncated, n_items,
        n_seeds``.
    """
    s = validate_scored(scored, mode)
    return WrapperCells.validate(_sort(_cells(s, mode), _CELL))


def _validate_cells(cells: pd.DataFrame, columns: Sequence[str], what: str) -> pd.DataFrame:
    _require_columns(cells, list(_CELL) + list(columns), what)
    c = cells.copy()
    for col in _CELL:
        if c[col].isna().any():
            raise ValueError(f"{what}: column '{col}' has null value(s)")
        c[col] = c[col].astype(str)
    dup = c.duplicated(_CELL, keep=False)
    if dup.any():
        first = c.loc[dup, _CELL].iloc[0].to_dict()
        raise ValueError(f"{what}: several rows for one (model_id, task, wrapper) cell, e.g. {first} "
                         "(pass the cells of a single extraction mode)")
    return c


def _best_worst(grp: pd.DataFrame, col: str = "accuracy_pct") -> tuple[pd.Series, pd.Series]:
    """Rows of the best and worst wrapper of one (model, task); ties -> canonical order."""
    g = grp.assign(_wk=grp["wrapper"].map(_wrapper_key)).sort_values("_wk", kind="mergesort")
    top, bottom = g[col].max(), g[col].min()
    best = g[g[col] >= top - TIE_TOL].iloc[0]
    worst = g[g[col] <= bottom + TIE_TOL].iloc[0]
    return best, worst


# =========================================================================== §4 indices


def fsi_psi(cells: pd.DataFrame, eps: float = NFSI_EPS) -> pd.DataFrame:
    """FSI, PSI, nFSI and the bounded chance-adjusted nFSI per (model, task) (§4; review minor 2).

    Over the wrappers w of a (model, task), with A_w, P_w the cell accuracy and
    parseability in percent (:func:`cell_metrics`):

    * ``fsi_pp`` FSI = max_w A_w − min_w A_w (pp); ``psi_pp`` PSI = max_w P_w − min_w P_w.
    * ``nfsi`` = FSI / (Ā + ε), Ā the unweighted mean of A_w over the wrappers, ε = 1e-6
      (paper §4). Unitless; the ratio is the same whether A is in percent or a fraction
      (ε is negligible except at Ā = 0, where FSI = 0 too and nFSI = 0). nFSI is unbounded
      above (at most k, the number of wrappers, when one wrapper is right and the others
      score 0), ignores chance and explodes for models near 0 — the review's minor 2.
    * ``nfsi_chance`` — the bounded chance-adjusted variant. With c the task's chance
      accuracy (percent; n-weighted mean of the cells' ``chance_pct``):

          κ⁺_w = clip((A_w − c) / (100 − c), 0, 1),     nFSI_chance = max_w κ⁺_w − min_w κ⁺_w.

      κ = (A − c)/(100 − c) is the share of the above-chance headroom a wrapper attains
      (Cohen's-κ form; c = 0 for numeric, so κ = A/100); flooring it at 0 treats a
      below-chance wrapper (typically unparseable output scored as wrong) as "no skill",
      the normalisation of e.g. the Open LLM Leaderboard v2. The index is then *bounded in
      [0, 1] by construction* (no division by the mean accuracy, so no blow-up near 0 and
      no dependence on k), comparable across boolean (c = 50), k-way choice (c = 100/k)
      and numeric (c = 0) tasks, and 1 only when one wrapper is perfect and another is at
      or below chance. When every wrapper is at or above chance it equals
      FSI / (100 − c), the range of chance-adjusted accuracies; when the worst wrapper is
      below chance it is (A_max − c)/(100 − c) (clipped) instead of exceeding 1.
      ``n_below_chance`` counts the floored wrappers.
    * ``best_wrapper`` / ``worst_wrapper``: highest / lowest accuracy; ties (within
      :data:`TIE_TOL`) go to the first wrapper in :data:`WRAPPER_ORDER`.

    A (model, task) with a single wrapper has null indices and best/worst and a note; an
    unknown chance level gives a null ``nfsi_chance`` and a note.

    Returns:
        :class:`~metamorph.schemas.wrapper_metrics.WrapperFSI`: ``model_id, task,
        n_wrappers, fsi_pp, psi_pp, mean_accuracy_pct, nfsi, chance_pct, nfsi_chance,
        n_below_chance, best_wrapper, worst_wrapper, best_accuracy_pct,
        worst_accuracy_pct, note``.
    """
    c = _validate_cells(cells, ["accuracy_pct", "parseability_pct", "chance_pct", "n"], "cells")
    rows = []
    for (m, t), grp in c.groupby(_MT, sort=True):
        k = len(grp)
        acc = grp["accuracy_pct"].astype(float).to_numpy()
        par = grp["parseability_pct"].astype(float).to_numpy()
        ch = grp["chance_pct"].astype(float).to_numpy()
        w = grp["n"].astype(float).to_numpy()
        mean_acc = float(acc.mean())
        chance = math.nan if np.isnan(ch).any() else float(np.average(ch, weights=w))
        notes = []
        row = dict(model_id=m, task=t, n_wrappers=k, mean_accuracy_pct=mean_acc, chance_pct=chance,
                   fsi_pp=math.nan, psi_pp=math.nan, nfsi=math.nan, nfsi_chance=math.nan,
                   n_below_chance=int(0 if math.isnan(chance) else (acc < chance - TIE_TOL).sum()),
                   best_wrapper=None, worst_wrapper=None, best_accuracy_pct=math.nan, worst_accuracy_pct=math.nan)
        if k < 2:
            notes.append(f"1 wrapper ({grp['wrapper'].iloc[0]}): no pair, indices undefined")
        else:
            fsi = float(acc.max() - acc.min())
            best, worst = _best_worst(grp)
            row.update(fsi_pp=fsi, psi_pp=float(par.max() - par.min()), nfsi=fsi / (mean_acc + eps),
                       best_wrapper=best["wrapper"], worst_wrapper=worst["wrapper"],
                       best_accuracy_pct=float(best["accuracy_pct"]), worst_accuracy_pct=float(worst["accuracy_pct"]))
            if math.isnan(chance):
                notes.append("chance level unknown (a choice item lacks n_choices): nfsi_chance undefined")
            else:
                kappa = np.clip((acc - chance) / (100.0 - chance), 0.0, 1.0)
                row["nfsi_chance"] = float(kappa.max() - kappa.min())
        row["note"] = "; ".join(notes) or None
        rows.append(row)
    cols = ["model_id", "task", "n_wrappers", "fsi_pp", "psi_pp", "mean_accuracy_pct", "nfsi", "chance_pct",
            "nfsi_chance", "n_below_chance", "best_wrapper", "worst_wrapper", "best_accuracy_pct",
            "worst_accuracy_pct", "note"]
    out = pd.DataFrame(rows, columns=cols)
    for col in ("fsi_pp", "psi_pp", "mean_accuracy_pct", "nfsi", "chance_pct", "nfsi_chance",
                "best_accuracy_pct", "worst_accuracy_pct"):
        out[col] = out[col].astype(float)
    return WrapperFSI.validate(out)


_INDICES = (("FSI", "fsi_pp", "pp"), ("PSI", "psi_pp", "pp"), ("nFSI", "nfsi", "ratio"), ("nFSI_chance", "nfsi_chance", "ratio"))


def mean_indices(fsi: pd.DataFrame, n_resamples: int = 10_000, seed: int = 0) -> pd.DataFrame:
    """Mean FSI / PSI / nFSI / nFSI_chance per model with percentile bootstrap 95% CIs over tasks.

    The unit resampled is the task (with replacement, ``n_resamples`` resamples,
    :func:`metamorph.stats.bootstrap_mean_ci`, percentile, ``numpy.random.default_rng(seed)``).
    Every (model, index) uses the same seed, so for a given model the four indices are
    resampled with the same task draws whenever they have the same tasks (a joint
    bootstrap) and every result is reproducible. Tasks with a null index (single wrapper,
    unknown chance) are left out and counted in ``n_undefined``.

    Boundary cases (never a silent NaN): no task -> null mean, no interval; one task -> the
    value, no interval (``n=1`` note); all tasks equal to v -> interval [v, v] with the
    "all values equal" note.

    Returns:
        :class:`~metamorph.schemas.wrapper_metrics.WrapperMeanIndices`: ``model_id, index,
        unit, mean, ci_low, ci_high, n_tasks, n_undefined, n_resamples, seed, ci_note``
        (one row per model × index, indices in the order FSI, PSI, nFSI, nFSI_chance).
    """
    _require_columns(fsi, ["model_id", "task"] + [col for _, col, _ in _INDICES], "fsi")
    rows = []
    for m, grp in fsi.groupby("model_id", sort=True):
        for name, col, unit in _INDICES:
            vals = pd.to_numeric(grp[col], errors="coerce")
            ci = stats.bootstrap_mean_ci(vals.dropna().to_numpy(dtype=float), n_resamples=n_resamples, seed=seed)
            rows.append(dict(model_id=str(m), index=name, unit=unit, mean=ci.mean, ci_low=ci.low, ci_high=ci.high,
                             n_tasks=ci.n, n_undefined=int(vals.isna().sum()), n_resamples=n_resamples, seed=seed,
                             ci_note=ci.note))
    cols = ["model_id", "index", "unit", "mean", "ci_low", "ci_high", "n_tasks", "n_undefined", "n_resamples", "seed", "ci_note"]
    out = pd.DataFrame(rows, columns=cols)
    for col in ("mean", "ci_low", "ci_high"):
        out[col] = out[col].astype(float)
    return WrapperMeanIndices.validate(out)


# =========================================================================== §5 association


def pearson_acc_parse(cells: pd.DataFrame) -> pd.DataFrame:
    """Pearson r(accuracy, parseability) over cells (§5), pooled and per model.

    :func:`metamorph.stats.pearson` (scipy ``pearsonr``, two-sided p). Each cell is one
    point, unweighted. Fewer than 3 cells or a constant A or P give a null r with a note.
    The pooled r mixes between-model/task and within variation (an ecological
    correlation) and is partly mechanical (A = P · C); :func:`fixed_effects_regression`
    and :func:`item_level_model` are the adjusted analyses.

    Returns:
        :class:`~metamorph.schemas.wrapper_metrics.WrapperCorrelation`: ``scope, model_id,
        r, p_value, n, note`` (pooled first, then models in sorted order).
    """
    c = _validate_cells(cells, ["accuracy_pct", "parseability_pct"], "cells")
    rows = []
    scopes = [("pooled", None, c)] + [("model", str(m), g) for m, g in c.groupby("model_id", sort=True)]
    for scope, m, g in scopes:
        res = stats.pearson(g["accuracy_pct"].astype(float).tolist(), g["parseability_pct"].astype(float).tolist())
        rows.append(dict(scope=scope, model_id=m, r=res.rho, p_value=res.p_value, n=res.n, note=res.note))
    out = pd.DataFrame(rows, columns=["scope", "model_id", "r", "p_value", "n", "note"])
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
        levels = _ordered_wrappers(df[f]) if f == "wrapper" else sorted(set(df[f]))
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
                "so its coefficient is not identified")
        raise ValueError(f"{what}: rank-deficient design (rank {rank} < {X.shape[1]} columns): the fixed effects "
                         "are collinear (e.g. a wrapper present for one model only); the coefficients are not identified")
    if X.shape[0] - X.shape[1] < 1:
        raise ValueError(f"{what}: no residual degrees of freedom ({X.shape[0]} observations, {X.shape[1]} "
                         "coefficients): the design is saturated, no standard error")


_FE_WEIGHTS = "n: generations per cell (inverse-variance weights for a mean of n Bernoulli outcomes, assuming equal p(1-p))"


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
    t²/(t² + df_resid) for the classical SE), weighted R², residual df, and the weights.

    Identification: a factor with a single level (e.g. one model) has no identified effect
    — it is absorbed in the intercept, dropped and named in ``note``.

    Raises:
        ValueError: missing columns; a cell with n < 1; P constant; a rank-deficient design
            (P collinear with the effects, or collinear effects); no residual df.

    Returns:
        :class:`~metamorph.schemas.wrapper_metrics.WrapperFERegression` (one row):
        ``beta, se, t_value, p_value, ci_low, ci_high, partial_r2, r2, n_cells, n_params,
        df_resid, weights, weight_min, weight_max, weight_sum, cov_type, effects, note``.
    """
    what = "fixed_effects_regression"
    c = _validate_cells(cells, ["accuracy_pct", "parseability_pct", "n"], "cells").reset_index(drop=True)
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
    row = dict(beta=float(full.params["P"]), se=se, t_value=t, p_value=p,
               ci_low=float(ci.iloc[0]), ci_high=float(ci.iloc[1]), partial_r2=partial,
               r2=float(full.rsquared) if math.isfinite(float(full.rsquared)) else math.nan,
               n_cells=len(c), n_params=X.shape[1], df_resid=int(round(full.df_resid)),
               weights=_FE_WEIGHTS, weight_min=float(w.min()), weight_max=float(w.max()), weight_sum=float(w.sum()),
               cov_type=cov_type, effects=", ".join(used) if used else "(none)", note="; ".join(notes) or None)
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
        :class:`~metamorph.schemas.wrapper_metrics.WrapperItemModel`: ``term, coef, se,
        se_nonrobust, t_value, p_value, ci_low, ci_high, n_obs, n_clusters, df_inference,
        reference_wrapper, mode, note`` — one row for ``parseable``, then one per
        non-reference wrapper.
    """
    what = "item_level_model"
    s = validate_scored(scored, mode)
    if len(s) == 0:
        raise ValueError(f"{what}: no generation in mode {mode!r}")
    y = s["correct"].astype(float)
    dummies, _used, dropped, refs = _fe_dummies(s, ["model_id", "task", "wrapper"])
    X = pd.concat([pd.Series(1.0, index=s.index, name="const"), s["parseable"].astype(float).rename("parseable"), dummies], axis=1)
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
        rows.append(dict(term=term, coef=float(robust.params[term]), se=se, se_nonrobust=float(classical.bse[term]),
                         t_value=float(robust.tvalues[term]) if se > 0 else math.nan,
                         p_value=float(robust.pvalues[term]) if se > 0 else math.nan,
                         ci_low=float(ci.loc[term].iloc[0]), ci_high=float(ci.loc[term].iloc[1]),
                         n_obs=len(s), n_clusters=n_clusters, df_inference=n_clusters - 1,
                         reference_wrapper=refs.get("wrapper"), mode=mode, note="; ".join(notes) or None))
    cols = ["term", "coef", "se", "se_nonrobust", "t_value", "p_value", "ci_low", "ci_high", "n_obs", "n_clusters",
            "df_inference", "reference_wrapper", "mode", "note"]
    out = pd.DataFrame(rows, columns=cols)
    for col in ("t_value", "p_value"):
        out[col] = out[col].astype(float)
    return WrapperItemModel.validate(out)


# =========================================================================== review major 1


def decomposition(cells: pd.DataFrame, undefined_conditional: str = "match") -> pd.DataFrame:
    """Split each FSI into a compliance-driven and a conditional-accuracy-driven part (review major 1).

    Per (model, task), b = best and w = worst wrapper (as in :func:`fsi_psi`). With
    fractions P (parseability), C (Acc | parseable) and A = P · C:

        FSI = A_b − A_w = ΔP · C̄ + ΔC · P̄,     ΔX = X_b − X_w,  X̄ = (X_b + X_w)/2,

    the symmetric (Shapley) two-factor split: the average of the two one-at-a-time paths
    (change P first, then C; or C first, then P). It is exact — ``compliance_pp`` (ΔP·C̄)
    + ``conditional_pp`` (ΔC·P̄) = ``fsi_pp`` — and has no order or residual term. Parts
    are in pp (×100); ``compliance_share`` = compliance / FSI (null when FSI = 0; outside
    [0, 1] when the parts have opposite signs, e.g. a wrapper that parses more often but
    is less accurate when it parses). P and C come from the counts (n, n_parseable,
    n_correct), FSI from ``accuracy_pct``.

    A wrapper with **no parseable generation** has C undefined (A = 0 = 0 · C for any C):

    * ``undefined_conditional="match"`` (default): C := the other wrapper's C (ΔC = 0, the
      whole difference is compliance) — the split that only uses what was observed.
    * ``undefined_conditional="zero"``: C := 0, with a note. Beware: if the worst wrapper has
      P_w = 0, this attributes half of the FSI to conditional accuracy (ΔP·C̄ = ΔC·P̄ =
      P_b·C_b/2) although only compliance differs.

    Both wrappers unparseable gives C = 0 for both (FSI = 0, parts 0). A (model, task)
    with a single wrapper has null values and a note.

    Raises:
        ValueError: missing columns; an unknown ``undefined_conditional``; counts that do
            not reproduce ``accuracy_pct`` (cells of another computation).

    Returns:
        :class:`~metamorph.schemas.wrapper_metrics.WrapperDecomposition`: ``model_id,
        task, best_wrapper, worst_wrapper, fsi_pp, delta_parse_pp,
        delta_acc_given_parse_pp, mean_parse_pct, mean_acc_given_parse_pct,
        compliance_pp, conditional_pp, compliance_share, note``.
    """
    if undefined_conditional not in ("zero", "match"):
        raise ValueError(f"decomposition: undefined_conditional must be 'zero' or 'match', got {undefined_conditional!r}")
    c = _validate_cells(cells, ["accuracy_pct", "n", "n_correct", "n_parseable"], "cells")
    n = c["n"].astype(float)
    if (n < 1).any():
        raise ValueError("decomposition: every cell needs n >= 1")
    if (np.abs(100.0 * c["n_correct"].astype(float) / n - c["accuracy_pct"].astype(float)) > 1e-6).any():
        raise ValueError("decomposition: accuracy_pct differs from 100 * n_correct / n in some cell")
    rows = []
    for (m, t), grp in c.groupby(_MT, sort=True):
        row = dict(model_id=m, task=t)
        if len(grp) < 2:
            row["note"] = f"1 wrapper ({grp['wrapper'].iloc[0]}): no pair, FSI undefined"
            rows.append(row)
            continue
        b, w = _best_worst(grp)
        pb, pw = b["n_parseable"] / b["n"], w["n_parseable"] / w["n"]
        cb = b["n_correct"] / b["n_parseable"] if b["n_parseable"] > 0 else None
        cw = w["n_correct"] / w["n_parseable"] if w["n_parseable"] > 0 else None
        notes = []
        for name, val, other in (("best", cb, cw), ("worst", cw, cb)):
            if val is None:
                wr = b["wrapper"] if name == "best" else w["wrapper"]
                if undefined_conditional == "match" and other is not None:
                    notes.append(f"{name} wrapper {wr!r} has no parseable generation: Acc|parse undefined, set to the other wrapper's")
                else:
                    notes.append(f"{name} wrapper {wr!r} has no parseable generation: Acc|parse undefined, set to 0")
        if undefined_conditional == "match":
            cb, cw = (cw if cb is None else cb), (cb if cw is None else cw)
        cb = 0.0 if cb is None else float(cb)
        cw = 0.0 if cw is None else float(cw)
        pb, pw = float(pb), float(pw)
        fsi = float(b["accuracy_pct"]) - float(w["accuracy_pct"])
        dp, dc = pb - pw, cb - cw
        pbar, cbar = (pb + pw) / 2.0, (cb + cw) / 2.0
        comp, cond = 100.0 * dp * cbar, 100.0 * dc * pbar
        row.update(best_wrapper=b["wrapper"], worst_wrapper=w["wrapper"], fsi_pp=fsi,
                   delta_parse_pp=100.0 * dp, delta_acc_given_parse_pp=100.0 * dc,
                   mean_parse_pct=100.0 * pbar, mean_acc_given_parse_pct=100.0 * cbar,
                   compliance_pp=comp, conditional_pp=cond,
                   compliance_share=comp / fsi if fsi > TIE_TOL else math.nan,
                   note="; ".join(notes) or None)
        rows.append(row)
    cols = ["model_id", "task", "best_wrapper", "worst_wrapper", "fsi_pp", "delta_parse_pp", "delta_acc_given_parse_pp",
            "mean_parse_pct", "mean_acc_given_parse_pct", "compliance_pp", "conditional_pp", "compliance_share", "note"]
    out = pd.DataFrame(rows, columns=cols)
    for col in cols[4:12]:
        out[col] = out[col].astype(float)
    return WrapperDecomposition.validate(out)


# =========================================================================== §5 wins, matched subset


def win_counts(cells: pd.DataFrame) -> pd.DataFrame:
    """Per wrapper, the number of (model, task) combinations where it has the highest accuracy (§5).

    Ties (accuracies within :data:`TIE_TOL` pp of the maximum) give **every** tied wrapper
    a win, so the wins can sum to more than the number of combinations; ``tied_wins``
    counts the shared ones. Only combinations with ≥ 2 wrappers count (a lone wrapper wins
    nothing by default). ``win_pct`` = wins / combinations in which the wrapper has a cell.

    Returns:
        :class:`~metamorph.schemas.wrapper_metrics.WrapperWins`: ``wrapper, wins,
        tied_wins, n_combinations, win_pct`` (every wrapper seen, canonical order).
    """
    c = _validate_cells(cells, ["accuracy_pct"], "cells")
    wrappers = _ordered_wrappers(c["wrapper"])
    wins = dict.fromkeys(wrappers, 0)
    tied = dict.fromkeys(wrappers, 0)
    combos = dict.fromkeys(wrappers, 0)
    for _, grp in c.groupby(_MT, sort=True):
        if len(grp) < 2:
            continue
        acc = grp["accuracy_pct"].astype(float)
        top = grp.loc[acc >= acc.max() - TIE_TOL, "wrapper"].tolist()
        for wr in grp["wrapper"]:
            combos[wr] += 1
        for wr in top:
            wins[wr] += 1
            if len(top) > 1:
                tied[wr] += 1
    out = pd.DataFrame(
        [dict(wrapper=wr, wins=wins[wr], tied_wins=tied[wr], n_combinations=combos[wr],
              win_pct=_pct(wins[wr], combos[wr])) for wr in wrappers],
        columns=["wrapper", "wins", "tied_wins", "n_combinations", "win_pct"],
    )
    out["win_pct"] = out["win_pct"].astype(float)
    return WrapperWins.validate(out)


def _matched_keys(matched_items: pd.DataFrame | Iterable[tuple]) -> tuple[pd.DataFrame, list[str]]:
    if isinstance(matched_items, pd.DataFrame):
        keys = ["model_id", "task", "item_id"] if "model_id" in matched_items.columns else ["task", "item_id"]
        _require_columns(matched_items, keys, "matched_items")
        m = matched_items[keys].astype(str).drop_duplicates()
    else:
        tuples = [tuple(t) for t in matched_items]
        lengths = {len(t) for t in tuples}
        if len(lengths) > 1 or (lengths and lengths.pop() not in (2, 3)):
            raise ValueError("matched_items: give (task, item_id) or (model_id, task, item_id) tuples, all of one length")
        keys = ["model_id", "task", "item_id"] if tuples and len(tuples[0]) == 3 else ["task", "item_id"]
        m = pd.DataFrame(tuples, columns=keys).astype(str).drop_duplicates()
    return m, keys


def matched_fsi(scored: pd.DataFrame, matched_items: pd.DataFrame | Iterable[tuple],
                mode: str = DEFAULT_MODE) -> pd.DataFrame:
    """FSI / PSI on the token-matched subset next to the full FSI / PSI (§3.3, §5).

    ``matched_items`` are the items whose prompt-token spread over wrappers is small
    (Δtok = (max − min)/mean ≤ 5%): a set of ``(task, item_id)`` tuples, or of
    ``(model_id, task, item_id)`` tuples when Δtok is per model (it is: each model counts
    tokens with its own tokenizer), or a DataFrame with those columns. The matched FSI
    recomputes :func:`cell_metrics` and :func:`fsi_psi` on the generations of the matched
    items only (every wrapper and seed of a matched item is kept). ``delta_fsi_pp`` =
    matched − full; a (model, task) without a matched item has null matched indices and a
    note.

    Returns:
        :class:`~metamorph.schemas.wrapper_metrics.WrapperMatchedFSI`: ``model_id, task,
        fsi_full_pp, fsi_matched_pp, delta_fsi_pp, psi_full_pp, psi_matched_pp,
        n_items_full, n_items_matched, note``.
    """
    s = validate_scored(scored, mode)
    m, keys = _matched_keys(matched_items)
    sub = s.merge(m, on=keys, how="inner")
    full = fsi_psi(_cells(s, mode)).set_index(_MT)
    matched = fsi_psi(_cells(sub, mode)).set_index(_MT) if len(sub) else None
    n_full = s.groupby(_MT)["item_id"].nunique()
    n_matched = sub.groupby(_MT)["item_id"].nunique()
    rows = []
    for key, fr in full.iterrows():
        nm = int(n_matched.get(key, 0))
        row = dict(model_id=key[0], task=key[1], fsi_full_pp=fr["fsi_pp"], psi_full_pp=fr["psi_pp"],
                   fsi_matched_pp=math.nan, psi_matched_pp=math.nan,
                   n_items_full=int(n_full[key]), n_items_matched=nm)
        notes = []
        if fr["n_wrappers"] < 2:
            notes.append(f"full: {fr['note']}")
        if nm == 0:
            notes.append("no matched item")
        else:
            mr = matched.loc[key]
            row.update(fsi_matched_pp=mr["fsi_pp"], psi_matched_pp=mr["psi_pp"])
            if mr["n_wrappers"] < 2:
                notes.append(f"matched: {mr['note']}")
        row["delta_fsi_pp"] = row["fsi_matched_pp"] - row["fsi_full_pp"]
        row["note"] = "; ".join(notes) or None
        rows.append(row)
    cols = ["model_id", "task", "fsi_full_pp", "fsi_matched_pp", "delta_fsi_pp", "psi_full_pp", "psi_matched_pp",
            "n_items_full", "n_items_matched", "note"]
    out = pd.DataFrame(rows, columns=cols)
    for col in cols[2:7]:
        out[col] = out[col].astype(float)
    return WrapperMatchedFSI.validate(out)


def constrained_falsifier(scored: pd.DataFrame, mode: str = DEFAULT_MODE) -> pd.DataFrame:
    """The review's proposed falsifier: does FSI collapse when parseability is forced?

    Compares FSI/PSI over the five standard wrappers with FSI/PSI when the ``json`` wrapper's
    free generations are replaced by the constrained-decoding arm ``json_constrained`` (same
    prompts, JSON-schema constrained decoding). Rows only for (model, task) with the arm.

    Returns:
        ``model_id, task, fsi_free_pp, fsi_constrained_pp, delta_fsi_pp, psi_free_pp,
        psi_constrained_pp, json_parse_free_pct, json_parse_constrained_pct`` (pp / %).
    """
    cols = ["model_id", "task", "fsi_free_pp", "fsi_constrained_pp", "delta_fsi_pp", "psi_free_pp",
            "psi_constrained_pp", "json_parse_free_pct", "json_parse_constrained_pct"]
    arm = scored[scored["wrapper"] == "json_constrained"]
    if arm.empty:
        return pd.DataFrame(columns=cols)
    pairs = arm[["model_id", "task"]].drop_duplicates()
    sub = scored.merge(pairs, on=["model_id", "task"])
    free = sub[sub["wrapper"] != "json_constrained"]
    forced = sub[sub["wrapper"] != "json"].assign(
        wrapper=lambda d: d["wrapper"].replace({"json_constrained": "json"}))
    cf, cc = cell_metrics(free, mode), cell_metrics(forced, mode)
    ff, fc = fsi_psi(cf), fsi_psi(cc)
    out = ff[["model_id", "task", "fsi_pp", "psi_pp"]].merge(
        fc[["model_id", "task", "fsi_pp", "psi_pp"]], on=["model_id", "task"], suffixes=("_free", "_c"))
    jf = cf[cf["wrapper"] == "json"].set_index(["model_id", "task"])["parseability_pct"]
    jc = cc[cc["wrapper"] == "json"].set_index(["model_id", "task"])["parseability_pct"]
    out = pd.DataFrame({
        "model_id": out["model_id"], "task": out["task"], "fsi_free_pp": out["fsi_pp_free"],
        "fsi_constrained_pp": out["fsi_pp_c"], "delta_fsi_pp": out["fsi_pp_c"] - out["fsi_pp_free"],
        "psi_free_pp": out["psi_pp_free"], "psi_constrained_pp": out["psi_pp_c"],
        "json_parse_free_pct": [jf.get((m, t)) for m, t in zip(out["model_id"], out["task"])],
        "json_parse_constrained_pct": [jc.get((m, t)) for m, t in zip(out["model_id"], out["task"])],
    })
    return out[cols].reset_index(drop=True)
