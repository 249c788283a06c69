"""pandera schemas of the WorkflowPerturb study's intermediate tables.

Lineage: ``golden_id`` (golden) → ``variant_id`` (perturbation; ``operator`` deterministic / llm,
``model``) → metric row (``variant_id``) → analysis cells.

Metric tables
-------------
pandera schemas of the WorkflowPerturb analysis tables (:mod:`metamorph.studies.workflow_perturb.analysis`).

Paper: "WorkflowPerturb: Calibrated Stress Tests for Evaluating Multi-Agent Workflow Metrics"
(Kanda et al., arXiv 2602.17990), §5–6 and App. C. One
:class:`pandera.pandas.DataFrameModel` for the scores input and one per output table. Every
column has a description with its unit. Metric scores are unitless in [0, 1], except Kendall's τ
in [−1, 1]; severities are fractions of the golden's steps (0.1 / 0.3 / 0.5); percentages are in
percent (0–100). A *null* statistic (NaN in a float column) means "undefined" (no defined value),
never 0. All models are ``strict=True`` (no undeclared column) and ``coerce=True``.
"""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa
from pandera.typing.pandas import Series

from metamorph.schemas import StrictModel
from metamorph.studies.workflow_perturb.vocab import (
    BUNDLE_ROLES,
    GATE_MODES,
    METRICS,
    OPERATORS,
    PERTURBATION_TYPES,
    RECALIBRATION_RULES,
    SEVERITIES,
    STATUSES,
    STRATA,
    THRESHOLD_SETS,
)

__all__ = [
    "FiringMatrix",
    "FiringMatrixTable",
    "Goldens",
    "JudgeScores",
    "JudgeSeverityTable",
    "PerturbationScores",
    "Perturbations",
    "Recalibration",
    "SensitivityMatrix",
    "SeverityTable",
    "StrataTable",
    "WorkflowScores",
]


class Goldens(StrictModel):
    """``goldens``: every loaded golden workflow; rows breaking a §3.1 rule are kept and flagged."""

    golden_id: Series[str] = pa.Field(unique=True, description="Workflow id.")
    task: Series[str] = pa.Field(description="Task text.")
    origin: Series[str] = pa.Field(description="Sub-source (alfworld, wikihow, ..., embedded).")
    source_spec: Series[str] = pa.Field(description="Source spec the golden was loaded from.")
    n_nodes: Series[int] = pa.Field(ge=0, description="|V|: number of steps.")
    stratum: Series[str] = pa.Field(description="Size stratum (5-7, 8-15, 16+; <5 below the minimum).")
    nodes_json: Series[str] = pa.Field(description="Step descriptions in node-id order (JSON list).")
    edges_json: Series[str] = pa.Field(description="Edges incl. START/END (JSON list of pairs).")
    workflow_text: Series[str] = pa.Field(description="The workflow in WorFBench Node:/Edge: format.")
    valid: Series[bool] = pa.Field(description="Passes §3.1 (DAG, >= 5 nodes, edges name existing nodes).")
    rejection_reason: Series[str] = pa.Field(nullable=True, description="Why the golden was rejected, else null.")


class Perturbations(StrictModel):
    """``perturbations`` / ``perturbations_llm``: one row per golden × type × severity variant."""

    variant_id: Series[str] = pa.Field(description="<golden>::<type>@<pct>.")
    golden_id: Series[str] = pa.Field(description="The golden it perturbs.")
    type: Series[str] = pa.Field(isin=list(PERTURBATION_TYPES), description="Perturbation type (§3.1).")
    p: Series[float] = pa.Field(isin=list(SEVERITIES), description="Severity p (fraction of nodes).")
    n_altered: Series[pd.Int64Dtype] = pa.Field(
        nullable=True, ge=1, description="N nodes altered (N = max(1, round-half-up(p·|V|)), capped at |V|−1)."
    )
    altered_node_ids: Series[str] = pa.Field(description="Golden node ids altered (JSON list).")
    target_score: Series[float] = pa.Field(
        ge=0, le=1, description="1 − p for missing/compressed, 1.0 for description (§3.1)."
    )
    operator: Series[str] = pa.Field(isin=list(OPERATORS), description="Who made the variant.")
    method: Series[str] = pa.Field(nullable=True, description="Operator detail (remove/merge/paraphrase, llm, hybrid).")
    model: Series[str] = pa.Field(nullable=True, description="Generator model (llm rows).")
    models_tried: Series[str] = pa.Field(description="Escalation list actually used (JSON list).")
    attempts: Series[int] = pa.Field(ge=0, description="Generator attempts (0 for deterministic).")
    n_call_errors: Series[int] = pa.Field(
        ge=0, description="Attempts that failed at the provider (no reply; 0 for deterministic)."
    )
    status: Series[str] = pa.Field(
        isin=list(STATUSES),
        description="Static validation result (App. A): valid, invalid, or call_error (every attempt failed "
        "at the provider: the generator was never heard).",
    )
    failure: Series[str] = pa.Field(nullable=True, description="Residual validation failure, else null.")
    n_nodes: Series[pd.Int64Dtype] = pa.Field(
        nullable=True, description="Steps of the variant; null when no reply parsed."
    )
    nodes_json: Series[str] = pa.Field(nullable=True, description="Variant steps (JSON list).")
    edges_json: Series[str] = pa.Field(nullable=True, description="Variant edges (JSON list).")
    workflow_text: Series[str] = pa.Field(nullable=True, description="Variant in Node:/Edge: format.")
    raw_output: Series[str] = pa.Field(nullable=True, description="Last raw generator reply (llm rows).")
    model_id: Series[str] = pa.Field(description="Registry model id of the generator ('deterministic' for rules).")


class PerturbationScores(StrictModel):
    """``perturbation_scores``: every non-judge metric of each variant against its golden (§4, App. B)."""

    model_id: Series[str] = pa.Field(description="Generator ('deterministic' or a registry model id).")
    variant_id: Series[str] = pa.Field(description="Variant id.")
    golden_id: Series[str] = pa.Field(description="Golden id.")
    type: Series[str] = pa.Field(description="Perturbation type.")
    severity: Series[float] = pa.Field(description="Severity p.")
    n_nodes: Series[int] = pa.Field(description="Golden |V|.")
    stratum: Series[str] = pa.Field(description="Golden size stratum.")
    operator: Series[str] = pa.Field(description="deterministic / llm.")
    status: Series[str] = pa.Field(description="Variant validation status.")
    target_score: Series[float] = pa.Field(description="Calibrated target score (§3.1).")
    chain_f1: Series[float] = pa.Field(nullable=True, ge=0, le=1, description="Chain F1 (LIS of aligned gold indices).")
    graph_f1: Series[float] = pa.Field(
        nullable=True, ge=0, le=1, description="Graph F1 (App. B.2 common induced subgraph)."
    )
    bleu: Series[float] = pa.Field(nullable=True, ge=0, le=1, description="BLEU (nltk, smoothing method1).")
    gleu: Series[float] = pa.Field(nullable=True, ge=0, le=1, description="GLEU (nltk sentence_gleu).")
    bertscore_f1: Series[float] = pa.Field(
        nullable=True,
        le=1,
        description="BERTScore F1 over order-aligned pairs, rescaled with the encoder's baseline when bertscore_rescaled (may then be negative).",
    )
    kendall_tau: Series[float] = pa.Field(
        nullable=True,
        ge=-1,
        le=1,
        description="Kendall τ-b over the gold step order (unmatched gold steps tied last); null when undefined.",
    )
    kendall_tau_reason: Series[str] = pa.Field(
        nullable=True, description="Why τ is null (< 2 gold steps, empty candidate, constant ranks)."
    )
    n_aligned: Series[pd.Int64Dtype] = pa.Field(nullable=True, description="Aligned step pairs (similarity >= 0.8).")
    encoder: Series[str] = pa.Field(nullable=True, description="Sentence encoder used for alignment.")
    bertscore_model: Series[str] = pa.Field(nullable=True, description="BERTScore model (local path or name).")
    bertscore_rescaled: Series[bool] = pa.Field(
        description="Whether bertscore_f1 was rescaled with a baseline (App. B.4)."
    )
    bertscore_baseline: Series[str] = pa.Field(
        nullable=True, description="Baseline used: packaged:<file> or runtime:embedded_goldens; null when not rescaled."
    )


class JudgeScores(StrictModel):
    """``judge_scores``: LLM-as-judge (App. B.6), three calls per variant, invalid replies excluded."""

    model_id: Series[str] = pa.Field(description="Judge model (registry id; the partition).")
    variant_id: Series[str] = pa.Field(description="Variant judged.")
    golden_id: Series[str] = pa.Field(description="Golden id.")
    type: Series[str] = pa.Field(description="Perturbation type.")
    severity: Series[float] = pa.Field(description="Severity p.")
    judge: Series[float] = pa.Field(
        nullable=True, ge=0, le=1, description="Mean valid score / 5; null when no reply was valid."
    )
    n_calls: Series[int] = pa.Field(
        ge=0, description="Judge calls made for the variant (judge_valid + judge_invalid + n_call_errors)."
    )
    judge_valid: Series[int] = pa.Field(ge=0, description="Valid replies.")
    judge_invalid: Series[int] = pa.Field(
        ge=0, description="Invalid or truncated replies (excluded, never 0); a failed call is no reply (count)."
    )
    n_call_errors: Series[int] = pa.Field(
        ge=0, description="Judge calls that failed at the provider: no reply, left out of judge (count)."
    )
    not_measurable: Series[str] = pa.Field(
        nullable=True,
        description="Why judge is null: 'not measurable: every call failed (N of N)' or 'not measurable: no reply "
        "parsed (N of N unparseable)'; null when judged.",
    )
    judge_reasons: Series[str] = pa.Field(description="Parse reason of each reply (JSON list).")
    judge_spread: Series[float] = pa.Field(
        nullable=True,
        ge=0,
        le=1,
        description="Call-to-call spread: max − min "
        "of the valid calls' scores / 5; null with < 2 valid replies or when the "
        "calls are one computation (judge_spread_note).",
    )
    judge_spread_note: Series[str] = pa.Field(
        nullable=True,
        description="Why judge_spread is null by construction "
        "(deterministic decoding: the calls share one generation); else null.",
    )
    generation_keys: Series[str] = pa.Field(
        description="Cache keys of the generations that answered the three calls "
        "(JSON list; one key three times when they share a deterministic "
        "computation)."
    )


# ------------------------------------------------------------------------------------------
# Metric tables

_UNIT = {"ge": 0.0, "le": 1.0}
_SIGNED = {"ge": -1.0, "le": 1.0}
_PCT = {"ge": 0.0, "le": 100.0}


class WorkflowScores(StrictModel):
    """The scores input: one row per golden × perturbation (× operator). Validated on the
    contract columns only (extra columns such as ``*_reason`` are dropped before validation)."""

    golden_id: Series[str] = pa.Field(description="Id of the golden workflow.")
    variant_id: Series[str] = pa.Field(description="Id of the perturbed variant (<golden>::<type>@<percent>).")
    type: Series[str] = pa.Field(
        isin=list(PERTURBATION_TYPES), description="Perturbation type: missing, compressed or description (§3.1)."
    )
    severity: Series[float] = pa.Field(
        isin=list(SEVERITIES), description="Severity p: fraction of steps altered (0.1, 0.3, 0.5)."
    )
    n_nodes: Series[int] = pa.Field(ge=1, description="Steps of the golden workflow (count).")
    stratum: Series[str] = pa.Field(
        isin=list(STRATA), description="Size stratum of the golden: 5-7, 8-15 or 16+ steps (App. C)."
    )
    operator: Series[str] = pa.Field(
        isin=list(OPERATORS), description="Perturbation generator: deterministic operators or the LLM (App. A)."
    )
    status: Series[str] = pa.Field(isin=list(STATUSES), description="Whether the variant passed validation.")
    target_score: Series[float] = pa.Field(
        **_UNIT, description="§3.1 target: 1 − p for missing/compressed, 1.0 for description (unitless)."
    )
    chain_f1: Series[float] = pa.Field(
        nullable=True, **_UNIT, description="Chain F1 (unitless, 0–1); null = undefined."
    )
    graph_f1: Series[float] = pa.Field(
        nullable=True, **_UNIT, description="Graph F1 (unitless, 0–1); null = undefined."
    )
    bleu: Series[float] = pa.Field(
        nullable=True, **_UNIT, description="Sentence BLEU (unitless, 0–1); null = undefined."
    )
    gleu: Series[float] = pa.Field(
        nullable=True, **_UNIT, description="Sentence GLEU (unitless, 0–1); null = undefined."
    )
    bertscore_f1: Series[float] = pa.Field(
        nullable=True,
        le=1,
        description="BERTScore F1 (unitless, ≤ 1; rescaled with a baseline by default, App. B.4, so it may be negative); null = undefined.",
    )
    kendall_tau: Series[float] = pa.Field(
        nullable=True,
        **_SIGNED,
        description="Kendall's τ-b over the gold step order (unitless, −1–1); null = undefined.",
    )
    judge: Series[float] = pa.Field(
        nullable=True,
        **_UNIT,
        description="LLM-as-judge score / 5 (unitless, 0–1); null = not judged or no valid reply.",
    )


class _Cell(StrictModel):
    operator: Series[str] = pa.Field(isin=list(OPERATORS), description="Perturbation generator the rows come from.")
    metric: Series[str] = pa.Field(isin=list(METRICS), description="Metric name.")
    type: Series[str] = pa.Field(isin=list(PERTURBATION_TYPES), description="Perturbation type.")


class _Stats(pa.DataFrameModel):
    mean: Series[float] = pa.Field(
        nullable=True,
        **_SIGNED,
        description="Mean of the defined (non-null) scores (metric units); null when n = 0. Nulls are excluded, never read as 0.",
    )
    sd: Series[float] = pa.Field(
        nullable=True,
        ge=0.0,
        description="Sample standard deviation (ddof = 1) of the defined scores (metric units); null when n < 2.",
    )
    n: Series[int] = pa.Field(ge=0, description="Defined scores used for mean and sd (count).")
    n_null: Series[int] = pa.Field(
        ge=0, description="Rows of the cell whose score is null (undefined), excluded (count)."
    )


class SeverityTable(_Cell, _Stats):
    """Mean ± sd of each metric per perturbation type and severity (§5, Tables 2–4), long format."""

    severity: Series[float] = pa.Field(isin=list(SEVERITIES), description="Severity p (fraction of steps altered).")
    target_score: Series[float] = pa.Field(**_UNIT, description="§3.1 target score of the cell (unitless).")
    mean_residual: Series[float] = pa.Field(
        nullable=True,
        ge=-2.0,
        le=1.0,
        description="mean − target_score (metric units); > 0 = the metric scores above target. Null when n = 0.",
    )


class JudgeSeverityTable(SeverityTable):
    """``severity_table_judge``: the LLM judge's rows of :class:`SeverityTable` (metric = judge)
    for one judge model (App. B.6); null judge values (no valid reply) are excluded, never 0."""

    model_id: Series[str] = pa.Field(description="Judge model (registry id; the partition).")
    n_call_errors: Series[int] = pa.Field(
        ge=0, description="Judge calls of the cell's judged variants that failed at the provider, left out (count)."
    )
    not_measurable: Series[str] = pa.Field(
        nullable=True,
        description="Why mean is null: 'not measurable: every call failed (N of N)', 'not measurable: no reply "
        "parsed (N of N unparseable)' or 'not measurable: no variant of the cell judged'; null when measured.",
    )


class SensitivityMatrix(_Cell):
    """Severity sensitivity per metric × type (§5, Table 5), from the unpaired severity means."""

    mean_10: Series[float] = pa.Field(
        nullable=True, **_SIGNED, description="s̄(10%): mean score at p = 0.1 (metric units); null when n_10 = 0."
    )
    mean_30: Series[float] = pa.Field(
        nullable=True, **_SIGNED, description="s̄(30%): mean score at p = 0.3 (metric units); null when n_30 = 0."
    )
    mean_50: Series[float] = pa.Field(
        nullable=True, **_SIGNED, description="s̄(50%): mean score at p = 0.5 (metric units); null when n_50 = 0."
    )
    n_10: Series[int] = pa.Field(ge=0, description="Defined scores at p = 0.1 (count).")
    n_30: Series[int] = pa.Field(ge=0, description="Defined scores at p = 0.3 (count).")
    n_50: Series[int] = pa.Field(ge=0, description="Defined scores at p = 0.5 (count).")
    delta_avg: Series[float] = pa.Field(
        nullable=True,
        description="Δ_avg = 2.5·[s̄(10%) − s̄(50%)]: average score drop per unit severity (per 100 pp); 1.0 for a metric "
        "that follows 1 − p exactly. Null when a mean is null.",
    )
    delta_1: Series[float] = pa.Field(
        nullable=True,
        description="Δ¹ = s̄(10%) − s̄(30%): raw score drop over the 20-pp step 10%→30% (metric units, not normalised).",
    )
    delta_2: Series[float] = pa.Field(
        nullable=True,
        description="Δ² = s̄(30%) − s̄(50%): raw score drop over the 20-pp step 30%→50% (metric units, not normalised).",
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

    severity: Series[float] = pa.Field(isin=list(SEVERITIES), description="Severity p (fraction of steps altered).")
    stratum: Series[str] = pa.Field(isin=list(STRATA), description="Golden size stratum: 5-7, 8-15 or 16+ steps.")


class Recalibration(StrictModel):
    """Per failure mode × bundle metric: a threshold recalibrated on the user's own goldens, between
    the mild (p = 0.1) and moderate (p = 0.3) score distributions of that perturbation type (§6)."""

    failure_mode: Series[str] = pa.Field(description="Failure mode (= perturbation type whose scores are used).")
    metric: Series[str] = pa.Field(isin=list(METRICS), description="Metric of the bundle.")
    role: Series[str] = pa.Field(isin=list(BUNDLE_ROLES), description="Role of the metric in the bundle.")
    rule: Series[str] = pa.Field(
        isin=list(RECALIBRATION_RULES),
        description="midpoint: (Q_mild(q) + Q_moderate(100 − q))/2; mild: Q_mild(q). Q = linear-interpolated percentile.",
    )
    percentile: Series[float] = pa.Field(
        ge=0.0, le=50.0, description="q: the lower percentile of the mild distribution (percent)."
    )
    operators: Series[str] = pa.Field(description="Operators whose rows were pooled (comma-separated).")
    mild_quantile: Series[float] = pa.Field(
        nullable=True, **_SIGNED, description="Q_mild(q): q-th percentile of the p = 0.1 scores (metric units)."
    )
    moderate_quantile: Series[float] = pa.Field(
        nullable=True,
        **_SIGNED,
        description="Q_moderate(100 − q): (100 − q)-th percentile of the p = 0.3 scores (metric units).",
    )
    threshold: Series[float] = pa.Field(
        nullable=True,
        **_SIGNED,
        description="Recalibrated threshold (breach iff value < threshold); null when undefined.",
    )
    default_threshold: Series[float] = pa.Field(
        nullable=True, **_SIGNED, description="Threshold of the base thresholds (Table 1 by default); null = none."
    )
    separated: Series[pd.BooleanDtype] = pa.Field(
        nullable=True,
        description="Q_mild(q) > Q_moderate(100 − q): the two tails do not overlap; null when either is undefined.",
    )
    n_mild: Series[int] = pa.Field(ge=0, description="Defined scores at p = 0.1 (count).")
    n_moderate: Series[int] = pa.Field(ge=0, description="Defined scores at p = 0.3 (count).")
    mild_breach_pct: Series[float] = pa.Field(
        nullable=True,
        **_PCT,
        description="% of the p = 0.1 scores below the new threshold (percent): false alarms on mild changes.",
    )
    moderate_breach_pct: Series[float] = pa.Field(
        nullable=True,
        **_PCT,
        description="% of the p = 0.3 scores below the new threshold (percent): detected moderate changes.",
    )
    note: Series[str] = pa.Field(nullable=True, description="Why the threshold is null or caveats; else null.")


class FiringMatrix(StrictModel):
    """Instance-level firing rate of each failure-mode bundle by perturbation type × severity
    (§6, Table 8); rows with failure_mode ≠ type are the cross-firing (off-diagonal) cells."""

    operator: Series[str] = pa.Field(isin=list(OPERATORS), description="Perturbation generator the rows come from.")
    mode: Series[str] = pa.Field(
        isin=list(GATE_MODES),
        description="Bundle firing mode: primary_and_secondary = some primary and some secondary breach (primary alone when no secondary is defined); any = some primary breaches; joint = every defined primary breaches.",
    )
    failure_mode: Series[str] = pa.Field(description="Bundle (failure mode) evaluated.")
    type: Series[str] = pa.Field(isin=list(PERTURBATION_TYPES), description="Perturbation type of the instances.")
    severity: Series[float] = pa.Field(isin=list(SEVERITIES), description="Severity p of the instances.")
    on_target: Series[bool] = pa.Field(description="failure_mode == type (diagonal cell).")
    n_instances: Series[int] = pa.Field(ge=0, description="Instances (rows) of the cell (count).")
    n_evaluable: Series[int] = pa.Field(
        ge=0, description="Instances with at least one defined primary metric (count): the denominator."
    )
    n_fired: Series[int] = pa.Field(ge=0, description="Instances whose bundle fires (count).")
    firing_pct: Series[float] = pa.Field(
        nullable=True, **_PCT, description="100 · n_fired / n_evaluable (percent); null when n_evaluable = 0."
    )


class FiringMatrixTable(FiringMatrix):
    """``firing_matrix``: :class:`FiringMatrix` rows for each threshold set (Table 1 defaults and
    the recalibrated ones)."""

    thresholds: Series[str] = pa.Field(isin=list(THRESHOLD_SETS), description="Which thresholds the bundles used.")
