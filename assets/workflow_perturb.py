"""Study 3 — WorkflowPerturb (asset group ``workflow_perturb``).

goldens → perturbations (deterministic operators) → perturbation_scores → analysis tables;
per model: perturbations_llm (App. A generator) → perturbation_scores_llm, and judge_scores.

Where the logic lives (one hop):

* goldens, Node:/Edge: format, validation: :mod:`metamorph.studies.workflow_perturb.workflows`
* operators and the LLM generator: :mod:`metamorph.studies.workflow_perturb.perturb`; rows and scoring glue: :mod:`metamorph.studies.workflow_perturb.plan`
* metrics (Chain/Graph F1, BLEU, GLEU, BERTScore, τ, judge): :mod:`metamorph.studies.workflow_perturb.metrics`
* analysis (severity tables, sensitivity, strata, thresholds, firing): :mod:`metamorph.studies.workflow_perturb.analysis`
* the CI gate: :mod:`metamorph.studies.workflow_perturb.gate` (``metamorph gate``)
"""

import json

import dagster as dg
import pandas as pd
from dagster_duckdb import DuckDBResource
from pydantic import Field

from assets import plots
from assets._cells import Behind, Cells, ViewPreview
from metamorph.models import check_study_kinds
from metamorph.export import markdown_table
from assets._common import (
    fingerprint_md,
    REPORTED_VERSIONS_KEY,
    BudgetConfig,
    ComparisonConfig,
    LimitConfig,
    comparison_checks,
    comparison_output,
    create_lineage_views,
    effective_budget,
    metric_table,
    plan_and_guard,
    plan_metadata,
    reported_versions_md,
    runner_options,
    study_config,
    validated_output,
)
from metamorph.studies.workflow_perturb import gate
from metamorph.studies.workflow_perturb import plan as wst
from metamorph.studies.workflow_perturb import analysis as wp
from metamorph.studies.workflow_perturb import report as wp_report
from metamorph.studies.workflow_perturb.perturb import PERTURBATION_TYPES, SEVERITIES
from metamorph.studies.workflow_perturb.generate import (
    GeneratorModel,
    generate_perturbation,
    provider_generate,
)
from metamorph.runner import run_requests
from metamorph.studies.workflow_perturb import schemas as S
from assets.partitions import PER_MODEL, model_partitions
from assets.registry import REGISTRY_ENTRY
from metamorph.studies.workflow_perturb.study import STUDY
from resources.llm import EncoderResource, GenerationCacheResource, ModelRegistryResource

GROUP = "workflow_perturb"
PREFIX = [GROUP]
POOL = "duckdb"


def _valid_goldens(goldens: pd.DataFrame) -> dict:
    return {r.golden_id: wst.workflow_from_record(r) for r in goldens[goldens["valid"]].itertuples()}


#: Settings of goldens: ``sources`` and ``limit`` are ``--source`` and ``--limit``.
GoldensConfig = study_config(STUDY, "goldens", LimitConfig, name="GoldensConfig", module=__name__)


@dg.asset(
    key_prefix=PREFIX,
    group_name=GROUP,
    pool=POOL,
    kinds={"duckdb", "python"},
    check_specs=[
        dg.AssetCheckSpec(
            "rejected_goldens", asset=[*PREFIX, "goldens"], description="Goldens that break §3.1 (kept, flagged)."
        )
    ],
)
def goldens(config: GoldensConfig):
    """Golden workflows (metamorph.studies.workflow_perturb.workflows.load_goldens_by_source); invalid rows are kept
    with a reason."""
    rows = []
    for spec, valid, rejected in STUDY.load(config.sources, config.row_limit):
        rows += wst.golden_rows(valid, rejected, spec)
    df = pd.DataFrame(rows)
    yield validated_output(
        S.Goldens,
        df,
        "goldens",
        {
            "valid": dg.MetadataValue.int(int(df["valid"].sum())),
            "strata": dg.MetadataValue.json(df[df["valid"]].groupby("stratum").size().to_dict()),
        },
    )
    bad = df[~df["valid"]][["golden_id", "n_nodes", "rejection_reason"]]
    yield dg.AssetCheckResult(
        check_name="rejected_goldens",
        passed=bad.empty,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={"rejected": len(bad), "rows": dg.MetadataValue.md(markdown_table(bad) if len(bad) else "_none_")},
    )


class PerturbConfig(dg.Config):
    types: list[str] = Field(default=list(PERTURBATION_TYPES), description="Perturbation types (§3.1).")
    severities: list[float] = Field(default=list(SEVERITIES), description="Severities p.")
    seed: int = Field(default=0, description="Seed of the deterministic operators.")


def _perturbation_frame(perts, model_id: str) -> pd.DataFrame:
    df = pd.DataFrame([{**p.to_row(), "model_id": model_id} for p in perts])
    for c in ("n_altered", "n_nodes"):
        df[c] = df[c].astype("Int64")
    return df[list(S.Perturbations.to_schema().columns)]


@dg.asset(key_prefix=PREFIX, group_name=GROUP, pool=POOL, kinds={"duckdb", "python"})
def perturbations(config: PerturbConfig, goldens: pd.DataFrame) -> dg.Output:
    """Every valid golden × type × severity by the deterministic operators
    (metamorph.studies.workflow_perturb.plan.deterministic_perturbations)."""
    valid = list(_valid_goldens(goldens).values())
    if not valid:
        raise dg.Failure(
            f"no valid golden: all {len(goldens)} were rejected (see workflow_perturb.goldens."
            "rejection_reason); nothing to perturb"
        )
    perts = wst.deterministic_perturbations(valid, config.types, config.severities, config.seed)
    df = _perturbation_frame(perts, "deterministic")
    return validated_output(
        S.Perturbations, df, "perturbations", {"by_type": dg.MetadataValue.json(df.groupby("type").size().to_dict())}
    )


def _score_frame(scores: pd.DataFrame, variants: pd.DataFrame, goldens: pd.DataFrame) -> pd.DataFrame:
    meta = variants[["variant_id", "model_id", "type", "p", "operator", "status", "target_score", "golden_id"]]
    g = goldens[["golden_id", "n_nodes", "stratum"]]
    df = scores.merge(meta, on=["variant_id", "golden_id"]).merge(g, on="golden_id").rename(columns={"p": "severity"})
    df["n_aligned"] = df["n_aligned"].astype("Int64")
    return df[list(S.PerturbationScores.to_schema().columns)]


@dg.asset(key_prefix=PREFIX, group_name=GROUP, pool=POOL, kinds={"duckdb", "python"})
def perturbation_scores(encoder: EncoderResource, goldens: pd.DataFrame, perturbations: pd.DataFrame) -> dg.Output:
    """Chain F1, Graph F1, BLEU, GLEU, BERTScore and Kendall τ of each deterministic variant
    (metamorph.studies.workflow_perturb.plan.score_perturbations)."""
    enc = encoder.load()
    scores = wst.score_perturbations(_valid_goldens(goldens), perturbations, enc)
    df = _score_frame(scores, perturbations, goldens)
    means = df.groupby(["type", "severity"])[list(wst.METRIC_COLUMNS)].mean().round(3).reset_index()
    return validated_output(
        S.PerturbationScores,
        df,
        "perturbation_scores",
        {
            "encoder": dg.MetadataValue.text(str(df["encoder"].iloc[0]) if len(df) else "-"),
            "means_by_type_severity": dg.MetadataValue.md(markdown_table(means)),
        },
    )


#: Settings of perturbations_llm: ``n_goldens``, ``max_tokens`` and ``budget_usd`` are ``--llm-goldens``,
#: ``--max-tokens`` and ``--budget-usd``.
LLMPerturbConfig = study_config(
    STUDY,
    "perturbations_llm",
    BudgetConfig,
    name="LLMPerturbConfig",
    module=__name__,
    types=(list[str], Field(default=list(PERTURBATION_TYPES), description="Perturbation types.")),
    severities=(list[float], Field(default=list(wst.LLM_SEVERITIES), description="Severities p.")),
    max_attempts=(
        int,
        Field(default=wst.MAX_ATTEMPTS, ge=1, description="Attempts per model (refinement loop, App. A.6; N ≥ 1)."),
    ),
    escalation=(
        list[str],
        Field(default=[], description="Registry ids of stronger models to escalate to, in order."),
    ),
    hybrid=(bool, Field(default=True, description="Per-node hybrid fallback for description changes (A.10).")),
)


def _recording_versions(generate, into: list):
    """``generate`` that also appends each result's ``model_version`` (None for a failed call) to ``into``."""

    def recorded(messages):
        res = generate(messages)
        into.append(res.model_version if res.error is None else None)
        return res

    return recorded


@dg.asset(
    key_prefix=PREFIX,
    group_name=GROUP,
    pool=POOL,
    partitions_def=model_partitions,
    deps=[REGISTRY_ENTRY],  # its registry entry: a changed one makes the partition stale
    metadata=PER_MODEL,
    kinds={"duckdb", "llm"},
)
def perturbations_llm(
    context: dg.AssetExecutionContext,
    config: LLMPerturbConfig,
    model_registry: ModelRegistryResource,
    generation_cache: GenerationCacheResource,
    goldens: pd.DataFrame,
) -> dg.Output:
    """Variants written by the partition's model through the App. A generator
    (metamorph.studies.workflow_perturb.generate.generate_perturbation); failing rows are kept and flagged.
    Before any call, the cost plan of every call the generator can make (first attempts exact;
    retries, the per-node fallback and escalation models an upper bound:
    metamorph.studies.workflow_perturb.plan.generator_requests) is checked against budget_usd — per
    model and, with escalation models, their sum — and the partition model's plan is kept as metadata."""
    from metamorph.costplan import check_budget_sum

    cache = generation_cache.open()
    chosen = list(_valid_goldens(goldens).values())[: config.n_goldens]
    budget = effective_budget(config.budget_usd, model_registry.budget_usd)
    models, plans = [], []
    reported: list[str | None] = []  # model_version of every reply of the partition's own model
    for mid in [context.partition_key, *config.escalation]:
        spec = model_registry.get(mid)
        check_study_kinds("workflow_perturb", False, [spec])  # a workflow under test answers documents
        provider = model_registry.provider(spec)
        first, more = wst.generator_requests(
            chosen,
            config.types,
            config.severities,
            spec,
            max_attempts=config.max_attempts,
            max_tokens=config.max_tokens,
            hybrid=config.hybrid,
        )
        label = (
            "perturbations_llm"
            if mid == context.partition_key
            else f"perturbations_llm (escalation of {context.partition_key})"
        )
        plans.append(
            plan_and_guard(
                context,
                first + more,
                spec,
                provider,
                cache,
                budget,
                label,
                upper_bound=bool(more) or mid != context.partition_key,
            )
        )
        generate = provider_generate(
            provider,
            spec.model,
            cache=cache,
            params=wst.generator_params(spec, config.max_tokens),
            base_url=spec.base_url,
            stale_before=runner_options(context)["stale_before"],
        )
        if mid == context.partition_key:
            generate = _recording_versions(generate, reported)
        models.append(GeneratorModel(mid, generate))
    check_budget_sum(plans, budget)
    perts = []
    for w in chosen:
        for t in config.types:
            for p in config.severities:
                perts.append(
                    generate_perturbation(w, t, p, models, max_attempts=config.max_attempts, hybrid=config.hybrid)
                )
                context.log.info(f"{w.workflow_id} {t}@{p}: {perts[-1].status} after {perts[-1].attempts} attempts")
    df = _perturbation_frame(perts, context.partition_key)
    return validated_output(
        S.Perturbations,
        df,
        "perturbations_llm",
        {
            "status": dg.MetadataValue.json(df["status"].value_counts().to_dict()),
            "attempts_mean": dg.MetadataValue.float(round(float(df["attempts"].mean()), 2)),
            REPORTED_VERSIONS_KEY: reported_versions_md(reported),
            "registry_fingerprint": fingerprint_md(model_registry.get(context.partition_key).fingerprint()),
            **plan_metadata(plans[0]),
        },
    )


@dg.asset(
    key_prefix=PREFIX,
    group_name=GROUP,
    pool=POOL,
    partitions_def=model_partitions,
    metadata=PER_MODEL,
    kinds={"duckdb", "python"},
)
def perturbation_scores_llm(
    encoder: EncoderResource, goldens: pd.DataFrame, perturbations_llm: pd.DataFrame
) -> dg.Output:
    """Non-judge metrics of every LLM variant that parsed (valid or flagged invalid; the status
    travels with the row): metamorph.studies.workflow_perturb.plan.score_perturbations."""
    scores = wst.score_perturbations(_valid_goldens(goldens), perturbations_llm, encoder.load())
    df = _score_frame(scores, perturbations_llm, goldens)
    return validated_output(
        S.PerturbationScores,
        df,
        "perturbation_scores_llm",
        {"unscored_no_workflow": dg.MetadataValue.int(int(perturbations_llm["nodes_json"].isna().sum()))},
    )


#: Settings of judge_scores: ``n_variants``, ``constrained`` and ``budget_usd`` are ``--judge-variants``,
#: ``--judge-constrained`` and ``--budget-usd``; ``max_tokens`` is the judge's own.
JudgeConfig = study_config(
    STUDY,
    "judge_scores",
    BudgetConfig,
    name="JudgeConfig",
    module=__name__,
    max_tokens=(
        int,
        Field(
            default=wst.JUDGE_MAX_TOKENS,
            ge=8,
            description="Completion limit of a judge reply (the B.6.4 JSON object; N ≥ 8).",
        ),
    ),
)


@dg.asset(
    key_prefix=PREFIX,
    group_name=GROUP,
    pool=POOL,
    partitions_def=model_partitions,
    metadata=PER_MODEL,
    kinds={"duckdb", "llm"},
)
def judge_scores(
    context: dg.AssetExecutionContext,
    config: JudgeConfig,
    model_registry: ModelRegistryResource,
    generation_cache: GenerationCacheResource,
    goldens: pd.DataFrame,
    perturbations: pd.DataFrame,
) -> dg.Output:
    """LLM-as-judge (App. B.6 rubric, 0–5, three calls averaged, normalised to [0,1]; invalid or
    truncated replies excluded and counted): metamorph.studies.workflow_perturb.plan.judge_row."""
    spec = model_registry.get(context.partition_key)
    check_study_kinds("workflow_perturb", False, [spec])  # a workflow under test answers documents
    provider = model_registry.provider(spec)
    gold = _valid_goldens(goldens)
    chosen = perturbations.head(config.n_variants)
    params = {"temperature": 0.0, "max_tokens": config.max_tokens, "seed": 0}
    per_variant = [
        wst.judge_requests(
            gold[r.golden_id],
            wst.workflow_from_record(r, "variant_id"),
            spec.provider,
            spec.model,
            params,
            spec.base_url,
            constrained=config.constrained,
        )
        for r in chosen.itertuples()
    ]
    cache = generation_cache.open()
    plan = plan_and_guard(
        context,
        [q for qs in per_variant for q in qs],
        spec,
        provider,
        cache,
        effective_budget(config.budget_usd, model_registry.budget_usd),
        "judge_scores",
    )
    outcomes, stats = run_requests([q for qs in per_variant for q in qs], provider, cache, **runner_options(context))
    rows, i = [], 0
    for r, qs in zip(chosen.itertuples(), per_variant):
        outs = outcomes[i : i + len(qs)]
        i += len(qs)
        rows.append(
            {
                "model_id": context.partition_key,
                "variant_id": r.variant_id,
                "golden_id": r.golden_id,
                "type": r.type,
                "severity": r.p,
                **wst.judge_row([o.result for o in outs], [o.key for o in outs]),
                "generation_keys": json.dumps([o.key for o in outs]),
            }
        )
    df = pd.DataFrame(rows)
    return validated_output(
        S.JudgeScores,
        df,
        "judge_scores",
        {
            "model_calls": dg.MetadataValue.int(stats.calls),
            "invalid_replies": dg.MetadataValue.int(int(df["judge_invalid"].sum())),
            **plan_metadata(plan),
        },
    )


# ------------------------------------------------------------------------------------------
# Analysis of the deterministic variants (§5–6, App. C)


def _analysis_input(perturbation_scores: pd.DataFrame) -> pd.DataFrame:
    # the judge is a per-model partition; the calibrated analysis runs on the non-judge metrics
    return perturbation_scores.assign(judge=float("nan"))


# How the analysis tables read in the UI (assets._cells): the rows behind a severity cell are the
# variants scored lowest on the cell's metric (their steps: perturbations.workflow_text by variant_id).
_SCORE_RANGE = (-1.0, 1.0)  # Kendall τ reaches −1; every other metric is in [0, 1]


def _lowest_scores(rows: pd.DataFrame, cell) -> pd.DataFrame:
    scored = rows.assign(score=rows[cell["metric"]]).dropna(subset=["score"])
    return scored.sort_values(["score", "variant_id"], kind="stable")


SEVERITY_CELLS = Cells(
    "mean",
    ("operator", "metric", "type", "severity"),
    worse="low",
    bounds=_SCORE_RANGE,
    digits=3,
    behind=Behind(
        lambda i: i["perturbation_scores"],
        _lowest_scores,
        limit=10,
        show=("variant_id", "golden_id", "severity", "score", "n_nodes", "status"),
        table="perturbations",
        key="variant_id",
        text=("method", "workflow_text"),
        first=("variant_id", "golden_id", "severity", "score", "workflow_text"),
    ),
    # severity_table reads perturbation_scores: the deterministic variants
    trace=lambda c: (
        c["metric"],
        "deterministic",
        {"type": c["type"], "severity": c["severity"], "operator": c["operator"]},
    ),
)
SENSITIVITY_CELLS = Cells("delta_avg", ("operator", "metric", "type"), worse=None, digits=3)
STRATA_CELLS = Cells(
    "mean", ("operator", "metric", "type", "severity", "stratum"), worse=None, bounds=_SCORE_RANGE, digits=3
)
RECALIBRATION_CELLS = Cells("threshold", ("failure_mode", "metric", "role"), worse=None, bounds=_SCORE_RANGE, digits=3)
FIRING_CELLS = Cells(
    "firing_pct",
    ("thresholds", "mode", "failure_mode", "type", "severity", "operator"),
    worse=None,
    bounds=(0.0, 100.0),
    select=lambda df: df["on_target"] & (df["mode"] == gate.DEFAULT_MODE),
    headline="firing_pct/{thresholds}/{operator}/{failure_mode}@{severity:g}",
)


_ANALYSIS = {"perturbation_scores": _analysis_input}
severity_table = metric_table(
    GROUP,
    "severity_table",
    wp.severity_table,
    S.SeverityTable,
    ins=["perturbation_scores"],
    prepare=_ANALYSIS,
    cells=SEVERITY_CELLS,
    metadata=lambda df: {"plot": plots.metric_vs_severity(df)},
    row="One row per operator × metric × perturbation type × severity: mean ± sd and n of the metric over the "
    "variants; the lowest cells list their lowest-scored variants with their steps.",
    source="Tables 2–4",
)
sensitivity_matrix = metric_table(
    GROUP,
    "sensitivity_matrix",
    wp.sensitivity_matrix,
    S.SensitivityMatrix,
    ins=["perturbation_scores"],
    prepare=_ANALYSIS,
    cells=SENSITIVITY_CELLS,
    metadata=lambda df: {"plot": plots.sensitivity_heatmap(df)},
    row="One row per operator × metric × perturbation type: the sensitivity Δ_avg = 2.5·[s̄(10%) − s̄(50%)] and the "
    "steps Δ¹, Δ².",
    source="Table 5",
)


JUDGE_CELLS = Cells(
    "mean",
    ("model_id", "type", "severity"),
    worse=None,
    bounds=(0.0, 1.0),
    digits=3,
    headline="judge_mean/{model_id}/{type}@{severity:g}",
)


def _judge_sensitivity(inputs: dict) -> dict:
    """The judge's Δ row (Table 5) as metadata."""
    sens = wp.judge_sensitivity(inputs["perturbation_scores"], inputs["judge_scores"])
    return {"judge_sensitivity": dg.MetadataValue.md(markdown_table(sens))}


severity_table_judge = metric_table(
    GROUP,
    "severity_table_judge",
    wp.judge_severity_table,
    S.JudgeSeverityTable,
    ins=["perturbation_scores", "judge_scores"],
    partition_arg="model_id",
    cells=JUDGE_CELLS,
    inputs_metadata=_judge_sensitivity,
    row="One row per perturbation type × severity for one judge model: the LLM judge's mean score of the judged "
    "deterministic variants (null where no reply was valid, never 0); its Δ row is in the metadata.",
    source="App. B.6, the judge's rows of Tables 2–5",
)
strata_table = metric_table(
    GROUP,
    "strata_table",
    wp.strata_table,
    S.StrataTable,
    ins=["perturbation_scores"],
    prepare=_ANALYSIS,
    cells=STRATA_CELLS,
    row="One row per operator × metric × type × severity × golden size stratum (5–7, 8–15, 16+ steps): the metric's "
    "mean ± sd.",
    source="Table 7",
)


class RecalibrationConfig(dg.Config):
    percentile: float = Field(
        default=10.0, ge=0, le=50, description="q: lower percentile of the mild (10%) scores, 0 to 50."
    )
    rule: str = Field(default="midpoint", description="'midpoint' between mild Q(q) and moderate Q(100−q), or 'mild'.")


threshold_recalibration = metric_table(
    GROUP,
    "threshold_recalibration",
    wp.recalibrate,
    S.Recalibration,
    ins=["perturbation_scores"],
    config=RecalibrationConfig,
    config_args=("percentile", "rule"),
    prepare={"perturbation_scores": lambda scores, _config: _analysis_input(scores)},
    cells=RECALIBRATION_CELLS,
    metadata=lambda df: {"thresholds_json": dg.MetadataValue.json(wp.recalibrated_thresholds(df))},
    row="One row per failure mode × metric × role: the gate threshold recalibrated on these goldens between the "
    "mild (10%) and moderate (30%) severity distributions, next to Table 1's default; the metadata holds the "
    "thresholds file for metamorph gate --thresholds.",
    source="§6, Table 1",
)


def _on_target_firing(df: pd.DataFrame) -> dict:
    """The on-target firing rates of the default mode, severities side by side (metadata)."""
    diag = (
        df[df["on_target"] & (df["mode"] == gate.DEFAULT_MODE)]
        .pivot_table(index=["thresholds", "failure_mode"], columns="severity", values="firing_pct")
        .round(1)
        .reset_index()
    )
    return {"on_target_firing_pct": dg.MetadataValue.md(markdown_table(diag))}


firing_matrix = metric_table(
    GROUP,
    "firing_matrix",
    wp.firing_matrix_table,
    S.FiringMatrixTable,
    ins=["perturbation_scores", "threshold_recalibration"],
    prepare=_ANALYSIS,
    cells=FIRING_CELLS,
    metadata=_on_target_firing,
    row="One row per thresholds (Table 1 defaults or recalibrated) × gate mode × failure mode × perturbation type × "
    "severity: the % of variants on which the failure-mode bundle fires (default mode primary_and_secondary; any "
    "and joint are primary-only); the on-target rates are float metadata.",
    source="Table 8",
)


@dg.asset(
    key_prefix=PREFIX,
    group_name=GROUP,
    pool=POOL,
    kinds={"duckdb", "sql"},
    deps=[
        goldens,
        perturbations,
        perturbations_llm,
        perturbation_scores,
        perturbation_scores_llm,
        judge_scores,
        severity_table,
    ],
)
def lineage_views(warehouse: DuckDBResource) -> dg.MaterializeResult:
    """Views variant_lineage and judge_lineage (sql/workflow_perturb/lineage_views.sql): from a
    per-variant metric to the golden, the variant's text and the LLM generator's raw reply, and from
    a judge score to each judge call's key and parse reason (``metamorph trace --study
    workflow_perturb``). The metadata shows the variants of the worst cell of severity_table,
    lowest-scored first, and the SQL selecting them."""
    return create_lineage_views(
        warehouse,
        GROUP,
        "variant_lineage",
        preview=ViewPreview(
            "variant_lineage",
            "severity_table",
            SEVERITY_CELLS,
            where=lambda cell: '"' + cell["metric"] + '" IS NOT NULL',
            columns=(
                "model_id",
                "variant_id",
                "golden_id",
                "type",
                "severity",
                "status",
                *wst.METRIC_COLUMNS,
                "variant_text",
                "golden_text",
            ),
            order=("variant_id",),
        ),
    )


# ------------------------------------------------------------------------------------------
# Model upgrades


@dg.asset(
    key_prefix=PREFIX,
    group_name=GROUP,
    pool=POOL,
    kinds={"duckdb"},
    check_specs=comparison_checks(GROUP),
    ins={"judge_scores": dg.AssetIn(key=[*PREFIX, "judge_scores"])},
)
def model_comparison(
    context: dg.AssetExecutionContext,
    config: ComparisonConfig,
    model_registry: ModelRegistryResource,
    judge_scores: pd.DataFrame,
):
    """One row per candidate model × metric × slice: the candidate as LLM judge against the
    registry's approved baseline, on its score of each deterministic variant per perturbation
    type × severity and per type, paired over variants (lower is better: the variants are
    degraded workflows) — difference with a paired bootstrap 95% CI, paired permutation test,
    Holm, verdict. Code: metamorph.studies.workflow_perturb.report.comparison_scores,
    metamorph.comparison.compare_models."""
    yield from comparison_output(
        GROUP,
        model_registry.models(),
        wp_report.comparison_scores(judge_scores),
        wp_report.COMPARED_METRICS,
        config,
        instance=context.instance,
    )
