"""pandera schemas of the WorkflowPerturb analysis tables (:mod:`metamorph.metrics.workflow_perturb`).

Paper: "WorkflowPerturb: Calibrated Stress Tests for Evaluating Multi-Agent Workflow Metrics"
(Kanda et al., arXiv 2602.17990), §5–6 and App. C; issue #4. One
:class:`pandera.pandas.DataFrameModel` for the scores input and one per output table. Every
column has a description with its unit. Metric scores are unitless in [0, 1], except Kendall's τ
in [−1, 1]; severities are fractions of the golden's steps (0.1 / 0.3 / 0.5); percentages are in
percent (0–100). A *null* statistic (NaN in a float column) means "undefined" (no defined value),
never 0. All models are ``strict=True`` (no undeclared column) and ``coerce=True``.
"""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

__all__ = [
    "FiringMatrix",
    "Recalibration",
    "SensitivityMatrix",
    "SeverityTable",
    "StrataTable",
    "WorkflowScores",
]

METRIC_NAMES = ["chain_f1", "graph_f1", "bleu", "gleu", "bertscore_f1", "kendall_tau", "judge"]
TYPES = ["missing", "compressed", "description"]
SEVERITY_LEVELS = [0.1, 0.3, 0.5]
STRATA = ["5-7", "8-15", "16+"]
OPERATORS = ["deterministic", "llm"]

_UNIT = {"ge": 0.0, "le": 1.0}
_SIGNED = {"ge": -1.0, "le": 1.0}
_PCT = {"ge": 0.0, "le": 100.0}


class _Strict(pa.DataFrameModel):
    class Config:
        strict = True
        coerce = True


class WorkflowScores(_Strict):
    """The scores input: one row per golden × perturbation (× operator). Validated on the
    contract columns only (extra columns such as ``*_reason`` are dropped before validation)."""

    golden_id: Series[str] = pa.Field(description="Id of the golden workflow.")
    variant_id: Series[str] = pa.Field(description="Id of the perturbed variant (<golden>::<type>@<percent>).")
    type: Series[str] = pa.Field(isin=TYPES, description="Perturbation type: missing, compressed or description (§3.1).")
    severity: Series[float] = pa.Field(isin=SEVERITY_LEVELS, description="Severity p: fraction of steps altered (0.1, 0.3, 0.5).")
    n_nodes: Series[int] = pa.Field(ge=1, description="Steps of the golden workflow (count).")
    stratum: Series[str] = pa.Field(isin=STRATA, description="Size stratum of the golden: 5-7, 8-15 or 16+ steps (App. C).")
    operator: Series[str] = pa.Field(isin=OPERATORS, description="Perturbation generator: deterministic operators or the LLM (App. A).")
    status: Series[str] = pa.Field(isin=["valid", "invalid"], description="Whether the variant passed validation.")
    target_score: Series[float] = pa.Field(**_UNIT, description="§3.1 target: 1 − p for missing/compressed, 1.0 for description (unitless).")
    chain_f1: Series[float] = pa.Field(nullable=True, **_UNIT, description="Chain F1 (unitless, 0–1); null = undefined.")
    graph_f1: Series[float] = pa.Field(nullable=True, **_UNIT, description="Graph F1 (unitless, 0–1); null = undefined.")
    bleu: Series[float] = pa.Field(nullable=True, **_UNIT, description="Sentence BLEU (unitless, 0–1); null = undefined.")
    gleu: Series[float] = pa.Field(nullable=True, **_UNIT, description="Sentence GLEU (unitless, 0–1); null = undefined.")
    bertscore_f1: Series[float] = pa.Field(nullable=True, **_UNIT, description="BERTScore F1, not rescaled (unitless, 0–1); null = undefined.")
    kendall_tau: Series[float] = pa.Field(nullable=True, **_SIGNED, description="Kendall's τ-b of aligned steps (unitless, −1–1); null = undefined.")
    judge: Series[float] = pa.Field(nullable=True, **_UNIT, description="LLM-as-judge score / 5 (unitless, 0–1); null = not judged or no valid reply.")


class _Cell(_Strict):
    operator: Series[str] = pa.Field(isin=OPERATORS, description="Perturbation generator the rows come from.")
    metric: Series[str] = pa.Field(isin=METRIC_NAMES, description="Metric name.")
    type: Series[str] = pa.Field(isin=TYPES, description="Perturbation type.")


class _Stats(pa.DataFrameModel):
    mean: Series[float] = pa.Field(
        nullable=True, **_SIGNED,
        description="Mean of the defined (non-null) scores (metric units); null when n = 0. Nulls are excluded, never read as 0.",
    )
    sd: Series[float] = pa.Field(
        nullable=True, ge=0.0, description="Sample standard deviation (ddof = 1) of the defined scores (metric units); null when n < 2."
    )
    n: Series[int] = pa.Field(ge=0, description="Defined scores used for mean and sd (count).")
    n_null: Series[int] = pa.Field(ge=0, description="Rows of the cell whose score is null (undefined), excluded (count).")


class SeverityTable(_Cell, _Stats):
    """Mean ± sd of each metric per perturbation type and severity (§5, Tables 2–4), long format."""

    severity: Series[float] = pa.Field(isin=SEVERITY_LEVELS, description="Severity p (fraction of steps altered).")
    target_score: Series[float] = pa.Field(**_UNIT, description="§3.1 target score of the cell (unitless).")
    mean_residual: Series[float] = pa.Field(
        nullable=True, ge=-2.0, le=1.0, description="mean − target_score (metric units); > 0 = the metric scores above target. Null when n = 0."
    )


class SensitivityMatrix(_Cell):
    """Severity sensitivity per metric × type (§5, Table 5), from the unpaired severity means."""

    mean_10: Series[float] = pa.Field(nullable=True, **_SIGNED, description="s̄(10%): mean score at p = 0.1 (metric units); null when n_10 = 0.")
    mean_30: Series[float] = pa.Field(nullable=True, **_SIGNED, description="s̄(30%): mean score at p = 0.3 (metric units); null when n_30 = 0.")
    mean_50: Series[float] = pa.Field(nullable=True, **_SIGNED, description="s̄(50%): mean score at p = 0.5 (metric units); null when n_50 = 0.")
    n_10: Series[int] = pa.Field(ge=0, description="Defined scores at p = 0.1 (count).")
    n_30: Series[int] = pa.Field(ge=0, description="Defined scores at p = 0.3 (count).")
    n_50: Series[int] = pa.Field(ge=0, description="Defined scores at p = 0.5 (count).")
    delta_avg: Series[float] = pa.Field(
        nullable=True,
        description="Δ_avg = 2.5·[s̄(10%) − s̄(50%)]: average score drop per unit severity (per 100 pp); 1.0 for a metric "
        "that follows 1 − p exactly. Null when a mean is null.",
    )
    delta_1: Series[float] = pa.Field(
        nullable=True, description="Δ¹ = s̄(10%) − s̄(30%): raw score drop over the 20-pp step 10%→30% (metric units, not normalised)."
    )
    delta_2: Series[float] = pa.Field(
        nullable=True, description="Δ² = s̄(30%) − s̄(50%): raw score drop over the 20-pp step 30%→50% (metric units, not normalised)."
    )
    delta_1_per_unit: Series[float] = pa.Field(
        nullable=True, description="5·Δ¹: Δ¹ on Δ_avg's per-unit-severity scale (drop per 100 pp)."
    )
    delta_2_per_unit: Series[float] = pa.Field(
        nullable=True, description="5·Δ²: Δ² on Δ_avg's per-unit-severity scale; Δ_avg = (5Δ¹ + 5Δ²)/2."
    )
    target_delta_avg: Series[float] = pa.Field(
        description="Δ_avg of the §3.1 target scores: 1.0 for missing/compressed (1 − p), 0.0 for description (unitless)."
    )


class StrataTable(_Cell, _Stats):
    """Mean ± sd per metric × type × severity × golden size stratum (App. C, Table 7)."""

    severity: Series[float] = pa.Field(isin=SEVERITY_LEVELS, description="Severity p (fraction of steps altered).")
    stratum: Series[str] = pa.Field(isin=STRATA, description="Golden size stratum: 5-7, 8-15 or 16+ steps.")


class Recalibration(_Strict):
    """Per failure mode × bundle metric: a threshold recalibrated on the user's own goldens, between
    the mild (p = 0.1) and moderate (p = 0.3) score distributions of that perturbation type (§6)."""

    failure_mode: Series[str] = pa.Field(description="Failure mode (= perturbation type whose scores are used).")
    metric: Series[str] = pa.Field(isin=METRIC_NAMES, description="Metric of the bundle.")
    role: Series[str] = pa.Field(isin=["primary", "secondary"], description="Role of the metric in the bundle.")
    rule: Series[str] = pa.Field(
        isin=["midpoint", "mild"],
        description="midpoint: (Q_mild(q) + Q_moderate(100 − q))/2; mild: Q_mild(q). Q = linear-interpolated percentile.",
    )
    percentile: Series[float] = pa.Field(ge=0.0, le=50.0, description="q: the lower percentile of the mild distribution (percent).")
    operators: Series[str] = pa.Field(description="Operators whose rows were pooled (comma-separated).")
    mild_quantile: Series[float] = pa.Field(nullable=True, **_SIGNED, description="Q_mild(q): q-th percentile of the p = 0.1 scores (metric units).")
    moderate_quantile: Series[float] = pa.Field(
        nullable=True, **_SIGNED, description="Q_moderate(100 − q): (100 − q)-th percentile of the p = 0.3 scores (metric units)."
    )
    threshold: Series[float] = pa.Field(nullable=True, **_SIGNED, description="Recalibrated threshold (breach iff value < threshold); null when undefined.")
    default_threshold: Series[float] = pa.Field(nullable=True, **_SIGNED, description="Threshold of the base thresholds (Table 1 by default); null = none.")
    separated: Series[pd.BooleanDtype] = pa.Field(
        nullable=True, description="Q_mild(q) > Q_moderate(100 − q): the two tails do not overlap; null when either is undefined."
    )
    n_mild: Series[int] = pa.Field(ge=0, description="Defined scores at p = 0.1 (count).")
    n_moderate: Series[int] = pa.Field(ge=0, description="Defined scores at p = 0.3 (count).")
    mild_breach_pct: Series[float] = pa.Field(
        nullable=True, **_PCT, description="% of the p = 0.1 scores below the new threshold (percent): false alarms on mild changes."
    )
    moderate_breach_pct: Series[float] = pa.Field(
        nullable=True, **_PCT, description="% of the p = 0.3 scores below the new threshold (percent): detected moderate changes."
    )
    note: Series[str] = pa.Field(nullable=True, description="Why the threshold is null or caveats; else null.")


class FiringMatrix(_Strict):
    """Instance-level firing rate of each failure-mode bundle by perturbation type × severity
    (§6, Table 8); rows with failure_mode ≠ type are the cross-firing (off-diagonal) cells."""

    operator: Series[str] = pa.Field(isin=OPERATORS, description="Perturbation generator the rows come from.")
    mode: Series[str] = pa.Field(isin=["any", "joint"], description="Bundle firing mode: any = some primary breaches; joint = every defined primary breaches.")
    failure_mode: Series[str] = pa.Field(description="Bundle (failure mode) evaluated.")
    type: Series[str] = pa.Field(isin=TYPES, description="Perturbation type of the instances.")
    severity: Series[float] = pa.Field(isin=SEVERITY_LEVELS, description="Severity p of the instances.")
    on_target: Series[bool] = pa.Field(description="failure_mode == type (diagonal cell).")
    n_instances: Series[int] = pa.Field(ge=0, description="Instances (rows) of the cell (count).")
    n_evaluable: Series[int] = pa.Field(ge=0, description="Instances with at least one defined primary metric (count): the denominator.")
    n_fired: Series[int] = pa.Field(ge=0, description="Instances whose bundle fires (count).")
    firing_pct: Series[float] = pa.Field(nullable=True, **_PCT, description="100 · n_fired / n_evaluable (percent); null when n_evaluable = 0.")
