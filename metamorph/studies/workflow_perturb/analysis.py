"""Analysis of the WorkflowPerturb study: severity tables, sensitivity, size strata,
threshold recalibration and bundle firing.

Paper: "WorkflowPerturb: Calibrated Stress Tests for Evaluating Multi-Agent Workflow Metrics"
(Kanda et al., arXiv 2602.17990), §5–6 and App. C. Pure pandas; no Dagster.

Input: the scores frame
-----------------------
One row per golden × perturbation (× generator), columns :data:`SCORE_COLUMNS`:
``golden_id``, ``variant_id``, ``type`` (missing / compressed / description), ``severity``
(0.1 / 0.3 / 0.5), ``n_nodes`` (steps of the golden), ``stratum`` (``5-7``, ``8-15``, ``16+``;
must equal :func:`metamorph.studies.workflow_perturb.workflows.size_stratum` of ``n_nodes``), ``operator``
(deterministic / llm), ``status`` (valid / invalid), ``target_score`` (must equal
:func:`metamorph.studies.workflow_perturb.perturb.target_score`), and the metrics :data:`METRICS` — floats in [0, 1]
except Kendall's τ in [−1, 1] and the rescaled BERTScore (≤ 1, may be negative), each nullable. Extra columns are ignored.

:func:`validate_scores` checks it (every public function calls it) and raises ``ValueError``
naming the missing columns, the column with a bad value, or the duplicated key
``(golden_id, variant_id, operator)``.

Conventions shared by all functions
-----------------------------------
* **Nulls are undefined**: a null (None/NaN) score is excluded from every mean, sd, quantile
  and breach decision — never counted as 0, never a NaN in a mean. Each statistic reports the
  number of defined values it used (``n``) and, where it applies, how many were null
  (``n_null``).
* **Invalid variants** (``status == "invalid"``) are excluded by default
  (``include_invalid=False``): their scores describe a failed perturbation, not the intended one.
  ``call_error`` rows (every generator call failed at the provider) are never scored.
* **Operators are never pooled in the tables**: every table has an ``operator`` column;
  :func:`recalibrate` pools the operators it is given (``operator=None`` = all) and says which.
* sd is the sample standard deviation (ddof = 1), null when n < 2.
* Rows are sorted by operator (deterministic, llm), metric (:data:`METRICS` order), type
  (missing, compressed, description), severity, stratum (5-7, 8-15, 16+).
* Every output is validated by its model in :mod:`metamorph.studies.workflow_perturb.schemas`.

Sensitivity (Table 5) — exact definitions
-----------------------------------------
With s̄(p) the mean of the defined scores at severity p (unpaired: each severity's own rows):

* ``delta_avg`` = Δ_avg = 2.5·[s̄(10%) − s̄(50%)] — the average drop **per unit severity**
  (the 40-pp span scaled to 100 pp); a metric that follows the target 1 − p exactly has
  Δ_avg = 1.0, a severity-blind metric 0.
* ``delta_1`` = Δ¹ = s̄(10%) − s̄(30%) and ``delta_2`` = Δ² = s̄(30%) − s̄(50%) — the **raw**
  drops over each 20-pp step, not normalised (0.2 each for a metric following 1 − p).
* ``delta_1_per_unit`` = 5·Δ¹ and ``delta_2_per_unit`` = 5·Δ² put the two steps on Δ_avg's
  per-unit scale (the 20-pp step scaled to 100 pp, the same normalisation as Δ_avg's factor 2.5
  for 40 pp), so that Δ_avg = (5Δ¹ + 5Δ²)/2 exactly. If the paper's Table 5 reports normalised
  step deltas, compare them with the ``*_per_unit`` columns; the raw ones otherwise.
* ``target_delta_avg`` = Δ_avg of :func:`~metamorph.studies.workflow_perturb.perturb.target_score` (1.0 for missing and
  compressed, 0.0 for description).

Bundles and firing (§6, Tables 1 and 8)
---------------------------------------
Thresholds and the firing rule are :mod:`metamorph.studies.workflow_perturb.gate`'s: a metric breaches iff
``value < threshold`` after rounding to 10 decimals (equality does not breach); mode
``primary_and_secondary`` (default) fires a failure mode when a defined primary and a defined
secondary breach (the primary alone when no secondary is defined), mode ``any`` when at least one
defined primary metric breaches, mode ``joint`` when every defined primary breaches (at least one
defined). :func:`firing_matrix` applies
:func:`metamorph.studies.workflow_perturb.gate.bundle_decision` to every instance.

Recalibration (§6) — exact definition
-------------------------------------
For each failure mode m (a perturbation type) and each metric of m's bundle (primary and
secondary), with X = defined scores of type m at p = 0.1 (mild) and Y = those at p = 0.3
(moderate), and Q(·, q) numpy's linear-interpolation percentile (Hyndman–Fan type 7):

* ``rule="midpoint"`` (default): threshold = [Q(X, q) + Q(Y, 100 − q)] / 2 — halfway between the
  lower q-tail of the mild scores and the upper q-tail of the moderate scores. When the tails do
  not overlap (``separated``) the threshold lies in the gap, so at most q% of mild scores breach
  and at least (100 − q)% of moderate scores do.
* ``rule="mild"``: threshold = Q(X, q) — about q% of mild changes breach (false alarms), whatever
  the moderate scores.

Quantiles and thresholds are rounded to :data:`THRESHOLD_DECIMALS` (10) decimals, so float noise
never decides a breach. The output row names the rule, q, both quantiles, n of each distribution and the breach rates the
new threshold gives on X and Y. :func:`recalibrated_thresholds` turns it into the gate's JSON
format (``metamorph gate --thresholds``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from metamorph.measurability import every_call_failed, no_reply_parsed
from metamorph.schemas import require_columns
from metamorph.studies.workflow_perturb import gate
from metamorph.studies.workflow_perturb.perturb import target_score
from metamorph.studies.workflow_perturb.schemas import (
    FiringMatrix,
    Recalibration,
    SensitivityMatrix,
    SeverityTable,
    StrataTable,
    WorkflowScores,
)
from metamorph.studies.workflow_perturb.vocab import (
    METRICS,
    OPERATORS,
    PERTURBATION_TYPES,
    RECALIBRATION_RULES,
    SEVERITIES,
    STATUSES,
    STRATA,
)
from metamorph.studies.workflow_perturb.workflows import size_stratum

__all__ = [
    "DELTA_AVG_FACTOR",
    "DELTA_STEP_FACTOR",
    "KEY_COLUMNS",
    "METRICS",
    "OPERATORS",
    "RECALIBRATION_RULES",
    "SCORE_COLUMNS",
    "STRATA",
    "THRESHOLD_DECIMALS",
    "attach_judge",
    "firing_matrix",
    "firing_matrix_table",
    "judge_sensitivity",
    "judge_severity_table",
    "recalibrate",
    "recalibrated_thresholds",
    "sensitivity_matrix",
    "severity_table",
    "strata_table",
    "validate_scores",
    "SEVERITIES",
]

#: Columns of the scores frame (the input contract).
SCORE_COLUMNS = (
    "golden_id",
    "variant_id",
    "type",
    "severity",
    "n_nodes",
    "stratum",
    "operator",
    "status",
    "target_score",
    *METRICS,
)
#: Unique key of a scores row.
KEY_COLUMNS = ("golden_id", "variant_id", "operator")
#: Δ_avg = DELTA_AVG_FACTOR · [s̄(10%) − s̄(50%)] (40 pp → per unit severity).
DELTA_AVG_FACTOR = 2.5
#: Δ¹, Δ² on the per-unit scale = DELTA_STEP_FACTOR · raw step drop (20 pp → per unit severity).
DELTA_STEP_FACTOR = 5.0
#: Recalibrated quantiles and thresholds are rounded to this many decimals (removes float noise
#: such as (0.64 + 0.56)/2 = 0.6000000000000001, which would make a score of 0.6 breach).
THRESHOLD_DECIMALS = 10
MILD, MODERATE, SEVERE = SEVERITIES

# rescaled BERTScore (App. B.4) is below 0 for a pair less similar than the baseline's unrelated pairs
_RANGES = {m: (0.0, 1.0) for m in METRICS} | {"kendall_tau": (-1.0, 1.0), "bertscore_f1": (-math.inf, 1.0)}


# =========================================================================== validation


def _bad_rows(mask: pd.Series, df: pd.DataFrame, col: str) -> str:
    i = int(np.flatnonzero(mask.to_numpy())[0])
    return f"{int(mask.sum())} row(s), e.g. row {i} ({col}={df[col].iloc[i]!r})"


def validate_scores(scores: pd.DataFrame, *, include_invalid: bool = False) -> pd.DataFrame:
    """Check the scores frame; return a normalised copy of its contract columns.

    ``severity`` is rounded to 10 decimals, metric columns become float with NaN for null,
    ``n_nodes`` int. Rows with ``status == "invalid"`` are dropped unless ``include_invalid``;
    ``call_error`` rows (the generator was never heard) are always dropped.

    Raises:
        ValueError: not a DataFrame; missing columns (named); a null key/label; an unknown
            type, severity, operator, status or stratum; a stratum that is not
            ``size_stratum(n_nodes)``; a target_score that is not ``target_score(type,
            severity)``; a non-numeric or out-of-range metric value (named with a row);
            a duplicated ``(golden_id, variant_id, operator)``.
    """
    require_columns(scores, SCORE_COLUMNS, "scores")
    g = scores.loc[:, list(SCORE_COLUMNS)].copy().reset_index(drop=True)
    for col in (
        "golden_id",
        "variant_id",
        "type",
        "severity",
        "n_nodes",
        "stratum",
        "operator",
        "status",
        "target_score",
    ):
        n_null = int(g[col].isna().sum())
        if n_null:
            raise ValueError(f"scores: column '{col}' has {n_null} null value(s)")
    for col in ("golden_id", "variant_id", "type", "stratum", "operator", "status"):
        g[col] = g[col].astype(str)
    for col, allowed in (
        ("type", PERTURBATION_TYPES),
        ("operator", OPERATORS),
        ("status", STATUSES),
        ("stratum", STRATA),
    ):
        bad = ~g[col].isin(allowed)
        if bad.any():
            raise ValueError(f"scores: column '{col}' must be one of {list(allowed)}; {_bad_rows(bad, g, col)}")
    for col in ("severity", "n_nodes", "target_score", *METRICS):
        num = pd.to_numeric(g[col], errors="coerce")
        bad = num.isna() & g[col].notna()
        if bad.any():
            raise ValueError(f"scores: column '{col}' must be numeric; {_bad_rows(bad, g, col)}")
        g[col] = num.astype(float)
    g["severity"] = g["severity"].round(10)
    bad = ~g["severity"].isin(SEVERITIES)
    if bad.any():
        raise ValueError(
            f"scores: column 'severity' must be one of {list(SEVERITIES)} (fractions); {_bad_rows(bad, g, 'severity')}"
        )
    bad = (g["n_nodes"] != np.floor(g["n_nodes"])) | (g["n_nodes"] < 1)
    if bad.any():
        raise ValueError(f"scores: column 'n_nodes' must be integers >= 1; {_bad_rows(bad, g, 'n_nodes')}")
    g["n_nodes"] = g["n_nodes"].astype(int)
    bad = g["stratum"] != g["n_nodes"].map(size_stratum)
    if bad.any():
        raise ValueError(
            f"scores: column 'stratum' must be size_stratum(n_nodes) (5-7, 8-15, 16+); "
            f"{_bad_rows(bad, g, 'stratum')} with n_nodes={g['n_nodes'][bad].iloc[0]}"
        )
    want = [target_score(t, p) for t, p in zip(g["type"], g["severity"])]
    bad = (g["target_score"] - np.asarray(want, dtype=float)).abs() > 1e-9
    if bad.any():
        raise ValueError(
            "scores: column 'target_score' must be target_score(type, severity) (1 - p for "
            f"missing/compressed, 1.0 for description); {_bad_rows(bad, g, 'target_score')}"
        )
    for m in METRICS:
        lo, hi = _RANGES[m]
        v = g[m]
        bad = v.notna() & ((v < lo) | (v > hi) | ~np.isfinite(v.fillna(0.0)))
        if bad.any():
            raise ValueError(f"scores: metric column '{m}' must be in [{lo:g}, {hi:g}] or null; {_bad_rows(bad, g, m)}")
    dup = g.duplicated(list(KEY_COLUMNS), keep=False)
    if dup.any():
        first = g.loc[dup, list(KEY_COLUMNS)].iloc[0].to_dict()
        raise ValueError(f"scores: {int(dup.sum())} rows share a (golden_id, variant_id, operator) key, e.g. {first}")
    g = WorkflowScores.validate(g)
    # STATUSES is (valid, invalid, call_error): a call_error row is never scored
    keep = STATUSES[:2] if include_invalid else STATUSES[:1]
    return g[g["status"].isin(keep)].reset_index(drop=True)


# =========================================================================== helpers


_ORDER = {
    "operator": {v: i for i, v in enumerate(OPERATORS)},
    "metric": {v: i for i, v in enumerate(METRICS)},
    "type": {v: i for i, v in enumerate(PERTURBATION_TYPES)},
    "failure_mode": {v: i for i, v in enumerate(gate.FAILURE_MODES)},
    "stratum": {v: i for i, v in enumerate(STRATA)},
}


def _sort(df: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    keys = {}
    for c in by:
        if c in _ORDER:
            keys[f"_k_{c}"] = df[c].map(lambda v, o=_ORDER[c]: o.get(v, len(o)))
    tmp = df.assign(**keys)
    cols = []
    for c in by:
        cols += [f"_k_{c}", c] if c in _ORDER else [c]
    return tmp.sort_values(cols, kind="mergesort").drop(columns=list(keys)).reset_index(drop=True)


def _long(g: pd.DataFrame, ids: Sequence[str]) -> pd.DataFrame:
    return g.melt(id_vars=list(ids), value_vars=list(METRICS), var_name="metric", value_name="value")


def _cell_stats(long: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """mean / sd (ddof 1) / n over defined values and n_null, per group (groups = rows present)."""
    grp = long.groupby(by, sort=False, dropna=False)["value"]
    out = grp.agg(mean="mean", sd="std", n="count", size="size").reset_index()
    out["n_null"] = out["size"] - out["n"]
    out = out.drop(columns="size")
    out.loc[out["n"] == 0, "mean"] = np.nan
    out.loc[out["n"] < 2, "sd"] = np.nan
    return out


def _empty(model, columns: Sequence[str]) -> pd.DataFrame:
    return model.validate(pd.DataFrame({c: pd.Series(dtype=object) for c in columns}))


# =========================================================================== tables


_SEVERITY_COLUMNS = [
    "operator",
    "metric",
    "type",
    "severity",
    "target_score",
    "mean",
    "sd",
    "n",
    "n_null",
    "mean_residual",
]


def attach_judge(scores: pd.DataFrame, judge_scores: pd.DataFrame) -> pd.DataFrame:
    """The scores frame with its ``judge`` column taken from one judge model's ``judge_scores``
    (App. B.6): matched on ``variant_id``; a variant the judge did not see, or for which no reply
    was valid, gets null (never 0), so :func:`severity_table` and :func:`sensitivity_matrix` give
    the judge's row over the judged variants only (``n`` / ``n_null`` say how many).

    ``judge_scores`` needs ``variant_id`` and ``judge`` (null or in [0, 1]).

    Raises:
        ValueError: a missing column; a ``variant_id`` judged twice; a judged ``variant_id`` that
            is not in ``scores`` (named; never dropped silently).
    source: §5, App. B.6.
    """
    for col in ("variant_id", "judge"):
        if col not in judge_scores.columns:
            raise ValueError(f"judge_scores: missing column {col!r}")
    dup = judge_scores["variant_id"][judge_scores["variant_id"].duplicated()].tolist()
    if dup:
        raise ValueError(f"judge_scores: variant(s) judged twice: {dup[:5]}")
    unknown = sorted(set(judge_scores["variant_id"]) - set(scores["variant_id"]))
    if unknown:
        raise ValueError(f"judge_scores: {len(unknown)} judged variant(s) not in the scores frame, e.g. {unknown[:3]}")
    judge = dict(zip(judge_scores["variant_id"], pd.to_numeric(judge_scores["judge"], errors="raise")))
    return scores.assign(judge=[judge.get(v, np.nan) for v in scores["variant_id"]]).astype({"judge": float})


def severity_table(scores: pd.DataFrame, *, include_invalid: bool = False) -> pd.DataFrame:
    """Mean ± sd and n of every metric per operator × type × severity (§5, Tables 2–4), long format.

    A cell exists for every (operator, type, severity) with at least one row; ``n`` counts the
    defined scores used, ``n_null`` the null ones excluded. ``mean_residual`` = mean −
    target_score of the cell.

    Returns:
        :class:`~metamorph.studies.workflow_perturb.schemas.SeverityTable`: ``operator, metric, type,
        severity, target_score, mean, sd, n, n_null, mean_residual``.
    """
    g = validate_scores(scores, include_invalid=include_invalid)
    if g.empty:
        return _empty(SeverityTable, _SEVERITY_COLUMNS)
    out = _cell_stats(_long(g, ["operator", "type", "severity"]), ["operator", "metric", "type", "severity"])
    out["target_score"] = [target_score(t, p) for t, p in zip(out["type"], out["severity"])]
    out["mean_residual"] = out["mean"] - out["target_score"]
    out = _sort(out[_SEVERITY_COLUMNS], ["operator", "metric", "type", "severity"])
    return SeverityTable.validate(out)


_SENSITIVITY_COLUMNS = [
    "operator",
    "metric",
    "type",
    "mean_10",
    "mean_30",
    "mean_50",
    "n_10",
    "n_30",
    "n_50",
    "delta_avg",
    "delta_1",
    "delta_2",
    "delta_1_per_unit",
    "delta_2_per_unit",
    "target_delta_avg",
]


def sensitivity_matrix(scores: pd.DataFrame, *, include_invalid: bool = False) -> pd.DataFrame:
    """Δ_avg, Δ¹, Δ² per operator × metric × type (§5, Table 5); definitions in the module docstring.

    Uses the unpaired severity means of :func:`severity_table` (each severity's own defined
    scores). A delta is null when a mean it needs is null (no defined score at that severity,
    or the severity is absent).

    Returns:
        :class:`~metamorph.studies.workflow_perturb.schemas.SensitivityMatrix`.
    """
    sev = severity_table(scores, include_invalid=include_invalid)
    if sev.empty:
        return _empty(SensitivityMatrix, _SENSITIVITY_COLUMNS)
    rows = []
    for (op, metric, ptype), cell in sev.groupby(["operator", "metric", "type"], sort=False):
        by_p = {round(float(p), 10): r for p, r in zip(cell["severity"], cell.itertuples(index=False))}

        def stat(p: float, what: str, by_p: dict = by_p) -> Any:
            r = by_p.get(p)
            if r is None:
                return 0 if what == "n" else np.nan
            return getattr(r, what)

        m10, m30, m50 = (stat(p, "mean") for p in SEVERITIES)
        d1, d2 = m10 - m30, m30 - m50
        t = [target_score(ptype, p) for p in SEVERITIES]
        rows.append(
            {
                "operator": op,
                "metric": metric,
                "type": ptype,
                "mean_10": m10,
                "mean_30": m30,
                "mean_50": m50,
                "n_10": stat(MILD, "n"),
                "n_30": stat(MODERATE, "n"),
                "n_50": stat(SEVERE, "n"),
                "delta_avg": DELTA_AVG_FACTOR * (m10 - m50),
                "delta_1": d1,
                "delta_2": d2,
                "delta_1_per_unit": DELTA_STEP_FACTOR * d1,
                "delta_2_per_unit": DELTA_STEP_FACTOR * d2,
                "target_delta_avg": DELTA_AVG_FACTOR * (t[0] - t[2]),
            }
        )
    out = _sort(pd.DataFrame(rows, columns=_SENSITIVITY_COLUMNS), ["operator", "metric", "type"])
    return SensitivityMatrix.validate(out)


_STRATA_COLUMNS = ["operator", "metric", "type", "severity", "stratum", "mean", "sd", "n", "n_null"]


def strata_table(scores: pd.DataFrame, *, include_invalid: bool = False) -> pd.DataFrame:
    """Mean ± sd and n per operator × metric × type × severity × golden size stratum
    (5-7, 8-15, 16+ steps; App. C, Table 7). Cells exist where rows exist.

    Returns:
        :class:`~metamorph.studies.workflow_perturb.schemas.StrataTable`.
    """
    g = validate_scores(scores, include_invalid=include_invalid)
    if g.empty:
        return _empty(StrataTable, _STRATA_COLUMNS)
    out = _cell_stats(
        _long(g, ["operator", "type", "severity", "stratum"]), ["operator", "metric", "type", "severity", "stratum"]
    )
    out = _sort(out[_STRATA_COLUMNS], ["operator", "metric", "type", "severity", "stratum"])
    return StrataTable.validate(out)


# =========================================================================== recalibration


_RECAL_COLUMNS = [
    "failure_mode",
    "metric",
    "role",
    "rule",
    "percentile",
    "operators",
    "mild_quantile",
    "moderate_quantile",
    "threshold",
    "default_threshold",
    "separated",
    "n_mild",
    "n_moderate",
    "mild_breach_pct",
    "moderate_breach_pct",
    "note",
]


def _pct_below(values: np.ndarray, threshold: float) -> float:
    return float(100.0 * np.mean(values < threshold)) if len(values) and not math.isnan(threshold) else np.nan


def recalibrate(
    scores: pd.DataFrame,
    thresholds: gate.Thresholds | None = None,
    *,
    percentile: float = 10.0,
    rule: str = "midpoint",
    operator: str | None = None,
    include_invalid: bool = False,
) -> pd.DataFrame:
    """Recalibrate each bundle metric's threshold on the user's own goldens (§6).

    For each failure mode of ``thresholds`` (default: the Table-1 defaults) and each metric of
    its bundle, the threshold is placed between the mild (p = 0.1) and moderate (p = 0.3)
    distributions of that perturbation type — ``rule`` and ``percentile`` q as defined in the
    module docstring (``midpoint``: [Q_mild(q) + Q_moderate(100 − q)]/2; ``mild``: Q_mild(q)).
    Rows of every operator are pooled unless ``operator`` names one.

    A threshold is null (with a ``note``) when a distribution it needs has no defined score;
    ``recalibrated_thresholds`` then keeps the base value.

    Raises:
        ValueError: unknown ``rule`` or ``operator``; ``percentile`` outside [0, 50]; a failure
            mode of ``thresholds`` that is not a perturbation type (no distribution to use).

    Returns:
        :class:`~metamorph.studies.workflow_perturb.schemas.Recalibration`, one row per failure mode ×
        bundle metric (primary first, in bundle order).
    """
    if rule not in RECALIBRATION_RULES:
        raise ValueError(f"rule must be one of {RECALIBRATION_RULES}, not {rule!r}")
    q = float(percentile)
    if not 0.0 <= q <= 50.0:
        raise ValueError(f"percentile must be in [0, 50] (the lower tail of the mild scores), got {percentile}")
    if operator is not None and operator not in OPERATORS:
        raise ValueError(f"operator must be one of {OPERATORS} or None, not {operator!r}")
    th = thresholds if thresholds is not None else gate.default_thresholds()
    for b in th.bundles:
        if b.failure_mode not in PERTURBATION_TYPES:
            raise ValueError(
                f"failure mode {b.failure_mode!r} is not a perturbation type {list(PERTURBATION_TYPES)}; "
                "its scores cannot be recalibrated"
            )
    g = validate_scores(scores, include_invalid=include_invalid)
    if operator is not None:
        g = g[g["operator"] == operator]
    ops = ",".join(o for o in OPERATORS if o in set(g["operator"])) or (operator or "")
    rows = []
    for b in th.bundles:
        sub = g[g["type"] == b.failure_mode]
        for role, pairs in (("primary", b.primary), ("secondary", b.secondary)):
            for metric, default in pairs:
                x = sub.loc[sub["severity"] == MILD, metric].dropna().to_numpy(dtype=float)
                y = sub.loc[sub["severity"] == MODERATE, metric].dropna().to_numpy(dtype=float)
                qx = round(float(np.percentile(x, q, method="linear")), THRESHOLD_DECIMALS) if len(x) else np.nan
                qy = (
                    round(float(np.percentile(y, 100.0 - q, method="linear")), THRESHOLD_DECIMALS) if len(y) else np.nan
                )
                notes = []
                if not len(x):
                    notes.append("no defined mild (p=0.1) score")
                if not len(y):
                    notes.append("no defined moderate (p=0.3) score")
                thr = round((qx + qy) / 2.0 if rule == "midpoint" else qx, THRESHOLD_DECIMALS)
                separated = pd.NA if math.isnan(qx) or math.isnan(qy) else bool(qx > qy)
                if separated is False:
                    notes.append("mild and moderate tails overlap")
                rows.append(
                    {
                        "failure_mode": b.failure_mode,
                        "metric": metric,
                        "role": role,
                        "rule": rule,
                        "percentile": q,
                        "operators": ops,
                        "mild_quantile": qx,
                        "moderate_quantile": qy,
                        "threshold": thr,
                        "default_threshold": np.nan if default is None else default,
                        "separated": separated,
                        "n_mild": len(x),
                        "n_moderate": len(y),
                        "mild_breach_pct": _pct_below(x, thr),
                        "moderate_breach_pct": _pct_below(y, thr),
                        "note": "; ".join(notes) or None,
                    }
                )
    out = pd.DataFrame(rows, columns=_RECAL_COLUMNS)
    out["separated"] = pd.array(out["separated"].tolist(), dtype="boolean")
    return Recalibration.validate(out)


def recalibrated_thresholds(table: pd.DataFrame, base: gate.Thresholds | None = None) -> dict[str, Any]:
    """The gate's thresholds JSON (a dict) with the thresholds of a :func:`recalibrate` table.

    Starts from ``base`` (default: the Table-1 defaults); every (failure mode, role, metric) of
    ``table`` with a non-null threshold replaces the base value; the others keep it and are
    listed under ``calibration.kept_default``. ``calibration`` also records the rule, the
    percentile, the operators and, per metric, the quantiles, n and breach rates used. The result
    passes :func:`metamorph.studies.workflow_perturb.gate.thresholds_from_dict` (raises if it would not).
    """
    Recalibration.validate(table)
    th = base if base is not None else gate.default_thresholds()
    out = th.to_dict()
    modes = out["failure_modes"]
    values, kept = [], []
    for r in table.itertuples(index=False):
        bundle = modes.get(r.failure_mode)
        if bundle is None or r.metric not in bundle.get(r.role, {}):
            raise ValueError(
                f"recalibration row ({r.failure_mode}, {r.role}, {r.metric}) is not in the base thresholds"
            )
        if pd.isna(r.threshold):
            kept.append({"failure_mode": r.failure_mode, "role": r.role, "metric": r.metric, "reason": r.note})
            continue
        bundle[r.role][r.metric] = float(r.threshold)
        values.append(
            {
                "failure_mode": r.failure_mode,
                "role": r.role,
                "metric": r.metric,
                "threshold": float(r.threshold),
                "default_threshold": None if pd.isna(r.default_threshold) else float(r.default_threshold),
                "mild_quantile": None if pd.isna(r.mild_quantile) else float(r.mild_quantile),
                "moderate_quantile": None if pd.isna(r.moderate_quantile) else float(r.moderate_quantile),
                "n_mild": int(r.n_mild),
                "n_moderate": int(r.n_moderate),
                "mild_breach_pct": None if pd.isna(r.mild_breach_pct) else float(r.mild_breach_pct),
                "moderate_breach_pct": None if pd.isna(r.moderate_breach_pct) else float(r.moderate_breach_pct),
            }
        )
    rules = sorted(set(table["rule"]))
    pcts = sorted({float(p) for p in table["percentile"]})
    out["description"] = (
        "Thresholds recalibrated on the user's goldens by metamorph.studies.workflow_perturb.analysis.recalibrate "
        "(breach iff value < threshold)."
    )
    out["source"] = f"recalibrated from {th.source}"
    out["calibration"] = {
        "rule": rules[0] if len(rules) == 1 else rules,
        "definition": (
            "midpoint: (Q_mild(q) + Q_moderate(100-q)) / 2; mild: Q_mild(q); Q = numpy linear percentile; "
            "mild = p 0.1 scores, moderate = p 0.3 scores of the failure mode's perturbation type"
        ),
        "percentile": pcts[0] if len(pcts) == 1 else pcts,
        "operators": sorted(set(table["operators"])),
        "values": values,
        "kept_default": kept,
    }
    gate.thresholds_from_dict(out, "<recalibrated>")
    return out


# =========================================================================== firing


_FIRING_COLUMNS = [
    "operator",
    "mode",
    "failure_mode",
    "type",
    "severity",
    "on_target",
    "n_instances",
    "n_evaluable",
    "n_fired",
    "firing_pct",
]


def firing_matrix(
    scores: pd.DataFrame,
    thresholds: gate.Thresholds | None = None,
    mode: str = gate.DEFAULT_MODE,
    *,
    include_invalid: bool = False,
) -> pd.DataFrame:
    """Instance-level firing rate of every failure-mode bundle by type × severity (§6, Table 8).

    Each instance (scores row) is evaluated with :func:`metamorph.studies.workflow_perturb.gate.bundle_decision`
    (vectorised: :func:`~metamorph.studies.workflow_perturb.gate.bundle_decisions`) for every
    bundle of ``thresholds`` (default: Table 1): ``n_evaluable`` instances have at least one
    defined primary metric, ``n_fired`` fire, ``firing_pct`` = 100·n_fired/n_evaluable. Rows
    with ``failure_mode != type`` show cross-firing (a bundle firing on another failure mode's
    perturbations). One row per operator × bundle × (type, severity) present in the input.

    Returns:
        :class:`~metamorph.studies.workflow_perturb.schemas.FiringMatrix`.
    """
    if mode not in gate.MODES:
        raise ValueError(f"mode must be one of {gate.MODES}, not {mode!r}")
    th = thresholds if thresholds is not None else gate.default_thresholds()
    g = validate_scores(scores, include_invalid=include_invalid)
    if g.empty:
        return _empty(FiringMatrix, _FIRING_COLUMNS)
    parts = []
    for b in th.bundles:
        defined, fired = gate.bundle_decisions(g[list(METRICS)], b, mode)
        f = g[["operator", "type", "severity"]].assign(_defined=defined, _fired=fired)
        agg = (
            f.groupby(["operator", "type", "severity"], sort=False)
            .agg(n_instances=("_defined", "size"), n_evaluable=("_defined", "sum"), n_fired=("_fired", "sum"))
            .reset_index()
        )
        agg["failure_mode"] = b.failure_mode
        parts.append(agg)
    out = pd.concat(parts, ignore_index=True)
    out["mode"] = mode
    out["on_target"] = out["failure_mode"] == out["type"]
    out["firing_pct"] = np.where(
        out["n_evaluable"] > 0, 100.0 * out["n_fired"] / out["n_evaluable"].clip(lower=1), np.nan
    )
    out = _sort(out[_FIRING_COLUMNS], ["operator", "failure_mode", "type", "severity"])
    return FiringMatrix.validate(out)


def firing_matrix_table(scores: pd.DataFrame, recalibration: pd.DataFrame) -> pd.DataFrame:
    """Table 8 for both threshold sets and every gate mode (§6): :func:`firing_matrix` with the
    Table-1 defaults (``thresholds = "table1_default"``) and with the thresholds recalibrated in
    ``recalibration`` (a :func:`recalibrate` table, read through :func:`recalibrated_thresholds`;
    ``thresholds = "recalibrated"``), each in every mode of
    :data:`~metamorph.studies.workflow_perturb.gate.MODES`, stacked in that order.

    Raises:
        ValueError: as :func:`firing_matrix` and :func:`recalibrated_thresholds`.

    Returns:
        :class:`~metamorph.studies.workflow_perturb.schemas.FiringMatrix` rows with the extra
        column ``thresholds``.
    """
    recalibrated = gate.thresholds_from_dict(recalibrated_thresholds(recalibration))
    parts = []
    for label, thresholds in (("table1_default", None), ("recalibrated", recalibrated)):
        for mode in gate.MODES:
            parts.append(firing_matrix(scores, thresholds, mode).assign(thresholds=label))
    return pd.concat(parts, ignore_index=True)


def judge_severity_table(scores: pd.DataFrame, judge_scores: pd.DataFrame, *, model_id: str) -> pd.DataFrame:
    """The judge's rows of Tables 2–4 for one judge model (App. B.6): :func:`severity_table` of
    ``scores`` with the judge's scores attached (:func:`attach_judge`), its ``metric == "judge"``
    rows only, with ``model_id`` (the judge) added. A variant without a valid reply has a null
    judge score (never 0), so a cell with no valid reply has a null mean. A judge call that failed
    at the provider is no reply: ``n_call_errors`` counts those of the cell's judged variants
    (``judge_scores.n_call_errors``), and a null mean says why in ``not_measurable`` ("not
    measurable: every call failed (N of N)" when every call of the cell failed, "not measurable:
    no reply parsed (N of N unparseable)" when replies came and none parsed, "not measurable: no
    variant of the cell judged").

    Raises:
        ValueError: as :func:`attach_judge` and :func:`severity_table`.

    Returns:
        :func:`severity_table` rows (``metric = "judge"``), ``model_id``, ``n_call_errors`` and
        ``not_measurable``.
    """
    for col in ("judge_valid", "judge_invalid", "n_call_errors"):
        if col not in judge_scores.columns:
            raise ValueError(f"judge_scores: missing column {col!r}")
    attached = attach_judge(scores, judge_scores)
    sev = severity_table(attached)
    sev = sev[sev["metric"] == "judge"].reset_index(drop=True).assign(model_id=model_id)
    g = validate_scores(attached)[["variant_id", "operator", "type", "severity"]]
    calls = g.merge(judge_scores[["variant_id", "judge_valid", "judge_invalid", "n_call_errors"]], on="variant_id")
    per_cell = calls.groupby(["operator", "type", "severity"])[["judge_valid", "judge_invalid", "n_call_errors"]].sum()
    errors, reasons = [], []
    for r in sev.itertuples():
        c = (
            per_cell.loc[(r.operator, r.type, r.severity)]
            if (r.operator, r.type, r.severity) in per_cell.index
            else None
        )
        n_err = 0 if c is None else int(c["n_call_errors"])
        errors.append(n_err)
        if not pd.isna(r.mean):
            reasons.append(None)
        elif c is None:
            reasons.append("not measurable: no variant of the cell judged")
        elif int(c["judge_valid"]) + int(c["judge_invalid"]) == 0:
            reasons.append(every_call_failed(n_err))
        else:
            reasons.append(no_reply_parsed(int(c["judge_invalid"])))
    return sev.assign(n_call_errors=errors, not_measurable=reasons)


def judge_sensitivity(scores: pd.DataFrame, judge_scores: pd.DataFrame) -> pd.DataFrame:
    """The judge's rows of Table 5 (App. B.6): :func:`sensitivity_matrix` of ``scores`` with the
    judge's scores attached (:func:`attach_judge`), its ``metric == "judge"`` rows only.

    Raises:
        ValueError: as :func:`attach_judge` and :func:`sensitivity_matrix`.
    """
    sens = sensitivity_matrix(attach_judge(scores, judge_scores))
    return sens[sens["metric"] == "judge"].reset_index(drop=True)
