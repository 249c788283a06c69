"""Schema machinery shared by every study: :func:`validate_frame`, the UI's column list, and the
per-generation lineage columns (:class:`GenerationRecord`), declared once.

Each study's tables are declared in ``metamorph/studies/<study>/schemas.py``. Every
``pa.Field`` carries a description (shown in the Dagster UI).
"""

from __future__ import annotations

import pandas as pd
import pandera.errors as pa_errors
import pandera.pandas as pa
from pandera.typing.pandas import Series

__all__ = [
    "PAIRED_TESTS",
    "VERDICTS",
    "GenerationRecord",
    "ModelComparison",
    "ReportCard",
    "SchemaViolation",
    "StrictModel",
    "require_columns",
    "table_schema_metadata",
    "validate_frame",
]


class SchemaViolation(ValueError):
    """A frame failed its schema; the message names the table, the columns and failing rows."""

    def __init__(self, table: str, failure_cases: pd.DataFrame):
        self.table = table
        self.failure_cases = failure_cases
        fc = failure_cases.copy()
        cols = ["column", "check", "index", "failure_case"]
        lines = [f"{table}: {len(fc)} schema failure(s)"]
        for _, r in fc[[c for c in cols if c in fc.columns]].head(20).iterrows():
            lines.append(
                f"  column={r.get('column')!s} check={r.get('check')!s} row={r.get('index')!s} "
                f"value={str(r.get('failure_case'))[:120]}"
            )
        if len(fc) > 20:
            lines.append(f"  ... and {len(fc) - 20} more")
        super().__init__("\n".join(lines))


def validate_frame(model: type[pa.DataFrameModel], df: pd.DataFrame, table: str | None = None) -> pd.DataFrame:
    """Validate ``df`` lazily against ``model`` and return the validated (coerced) frame.

    Raises :class:`SchemaViolation` listing every failing column/check/row (up to 20 shown).
    """
    try:
        return model.validate(df, lazy=True)
    except pa_errors.SchemaErrors as exc:
        raise SchemaViolation(table or model.__name__, exc.failure_cases) from None


def require_columns(df: pd.DataFrame, columns, what: str) -> None:
    """Raise ``ValueError`` naming ``what`` unless ``df`` is a DataFrame holding every column of
    ``columns`` (the message lists the missing ones and the columns present)."""
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"{what}: expected a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what}: missing required column(s) {missing}; has {list(df.columns)}")


def table_schema_metadata(model: type[pa.DataFrameModel]):
    """Columns + descriptions of ``model`` as ``(name, dtype, description)`` triples (for the UI and
    the warehouse's column types). A field whose pandas dtype is ``object`` names what it holds in
    ``metadata={"column_type": ...}`` (``"bytes"`` for a file's bytes); that name is its dtype here."""
    schema = model.to_schema()
    return [
        (name, (col.metadata or {}).get("column_type", str(col.dtype)), col.description or "")
        for name, col in schema.columns.items()
    ]


class StrictModel(pa.DataFrameModel):
    """Base of every table schema: no undeclared column (``strict``), dtypes coerced."""

    class Config:
        strict = True
        coerce = True


class GenerationRecord(StrictModel):
    """The lineage of one generation, shared by every study's generation table (columns of
    :func:`metamorph.runner.generation_frame`): from any metric cell, ``generation_key`` leads to
    the exact request and the raw completion."""

    generation_key: Series[str] = pa.Field(
        str_length={"min_value": 64, "max_value": 64},
        description="Cache key (sha256 of the canonical request) of the generation "
        "that answered this row: its own, or the one its replicates share.",
    )
    shared_generation: Series[bool] = pa.Field(
        description="True: the reply is another replicate's generation "
        "(generation_key), computed once because decoding is deterministic and "
        "greedy (e.g. a local model at temperature 0; metamorph.replicates)."
    )
    request_json: Series[str] = pa.Field(
        description="This row's own request (messages, params incl. its seed, repeat_index, document hash); no secrets."
    )
    response_text: Series[str] = pa.Field(nullable=True, description="Raw completion text; null when the call failed.")
    finish_reason: Series[str] = pa.Field(
        nullable=True, description="stop / length / ... as reported (length = cut at max_tokens)."
    )
    prompt_tokens: Series[pd.Int64Dtype] = pa.Field(
        nullable=True, ge=0, description="Prompt tokens (provider usage, or counted with the model's tokenizer)."
    )
    completion_tokens: Series[pd.Int64Dtype] = pa.Field(
        nullable=True, ge=0, description="Completion tokens reported by the provider."
    )
    latency_s: Series[float] = pa.Field(
        nullable=True, ge=0, description="Latency of the call in seconds (of the original call for cache hits)."
    )
    model_version: Series[str] = pa.Field(nullable=True, description="Provider-reported resolved model version.")
    system_fingerprint: Series[str] = pa.Field(nullable=True, description="OpenAI system_fingerprint when given.")
    cache_hit: Series[bool] = pa.Field(description="Served from the generation cache in this run.")
    error: Series[str] = pa.Field(nullable=True, description="Error of the call (never a completion).")
    extracted_text: Series[str] = pa.Field(
        nullable=True,
        description="The text a workflow under test (http / python entry) reported having extracted from the "
        "uploaded document (its entry's extracted_pointer); null for a model or when not declared.",
    )


#: Verdict of one (metric, slice) row of a model comparison (:mod:`metamorph.comparison`).
VERDICTS: tuple[str, ...] = ("regressed", "improved", "no detectable change", "not comparable")

#: The paired test of a comparison row: exact McNemar on 0/1 values, else a sign-flip permutation test.
PAIRED_TESTS: tuple[str, ...] = ("mcnemar_exact", "paired_permutation")


class ModelComparison(StrictModel):
    """``model_comparison`` (every study that has one): a candidate against the approved baseline
    per metric and slice (:func:`metamorph.comparison.compare_models`). Values in the metric's
    unit (fractions 0–1 for rates); differences are candidate − baseline."""

    candidate_id: Series[str] = pa.Field(description="Candidate model (registry status candidate).")
    baseline_id: Series[str] = pa.Field(description="The approved baseline model.")
    metric: Series[str] = pa.Field(description="Metric compared (the study's term, e.g. accuracy, M1).")
    slice: Series[str] = pa.Field(
        description="Slice, e.g. 'ingestion=inline, dataset=medqa, format=json'; 'all' = unsliced."
    )
    higher_is_better: Series[bool] = pa.Field(description="Whether a larger value of the metric is better.")
    n_items: Series[int] = pa.Field(ge=0, description="Items scored for both models (the paired sample; count).")
    n_baseline_only: Series[int] = pa.Field(
        ge=0, description="Items only the baseline has in this slice (count; not compared)."
    )
    n_candidate_only: Series[int] = pa.Field(
        ge=0, description="Items only the candidate has in this slice (count; not compared)."
    )
    baseline_mean: Series[float] = pa.Field(
        nullable=True, description="Baseline's mean over the paired items; null when n_items = 0."
    )
    candidate_mean: Series[float] = pa.Field(
        nullable=True, description="Candidate's mean over the paired items; null when n_items = 0."
    )
    difference: Series[float] = pa.Field(
        nullable=True, description="candidate_mean − baseline_mean; null when n_items = 0."
    )
    ci_low: Series[float] = pa.Field(
        nullable=True, description="Paired percentile bootstrap 95% CI of the difference, low; null when n_items < 2."
    )
    ci_high: Series[float] = pa.Field(
        nullable=True, description="Paired percentile bootstrap 95% CI of the difference, high; null when n_items < 2."
    )
    ci_note: Series[str] = pa.Field(
        nullable=True,
        description="Why the CI is special (no items, one item, all differences equal, fewer than 20 items = clusters: "
        "interval unreliable), else null.",
    )
    n_better: Series[int] = pa.Field(ge=0, description="Items on which the candidate is better (count).")
    n_worse: Series[int] = pa.Field(ge=0, description="Items on which the candidate is worse (count).")
    test: Series[str] = pa.Field(
        nullable=True,
        isin=list(PAIRED_TESTS),
        description="mcnemar_exact when every paired value is 0/1, else the paired sign-flip permutation test; null when n_items = 0.",
    )
    statistic: Series[float] = pa.Field(
        nullable=True, description="McNemar: min(n01, n10); permutation: the mean difference."
    )
    p_value: Series[float] = pa.Field(
        nullable=True, ge=0, le=1, description="Two-sided p-value of the test (unadjusted)."
    )
    p_holm: Series[float] = pa.Field(
        nullable=True, ge=0, le=1, description="Holm-adjusted p over all (metric, slice) rows of the candidate."
    )
    alpha: Series[float] = pa.Field(gt=0, lt=1, description="Family-wise level of the verdict.")
    verdict: Series[str] = pa.Field(
        isin=list(VERDICTS),
        description="regressed / improved when p_holm < alpha (direction by sign and higher_is_better); not comparable without shared items.",
    )
    mde: Series[float] = pa.Field(
        nullable=True,
        ge=0,
        description="Minimum detectable effect: the smallest |difference| (metric's unit) the row's test finds with the "
        "run's power at alpha/m (m = the candidate's family; metamorph.power.detectable); null when none is possible.",
    )
    mde_note: Series[str] = pa.Field(
        nullable=True,
        description="How mde was computed (test, level, observed discordance or spread), or why no verdict is possible.",
    )


class ReportCard(StrictModel):
    """``robustness_report_card``: every model's headline numbers across studies with 95% CIs,
    and the change since the previous version of the model (:func:`metamorph.report_card.build_card`)."""

    model_id: Series[str] = pa.Field(description="Registry model id.")
    study: Series[str] = pa.Field(description="Study (asset group) the number comes from.")
    metric: Series[str] = pa.Field(
        description="Headline metric (M1, M2, M3, accuracy, FSI, PSI, parseability, recovery, judge)."
    )
    slice: Series[str] = pa.Field(description="Slice of the number ('all', 'ingestion=inline', 'setting=zero_shot').")
    unit: Series[str] = pa.Field(
        isin=["%", "pp"], description="Unit of value, CI and delta: percent or percentage points."
    )
    value: Series[float] = pa.Field(
        nullable=True, description="The number (unit in 'unit'); null when it has no observations."
    )
    ci_low: Series[float] = pa.Field(
        nullable=True, description="Bootstrap 95% CI low; null when there is no interval (n < 2)."
    )
    ci_high: Series[float] = pa.Field(
        nullable=True, description="Bootstrap 95% CI high; null when there is no interval (n < 2)."
    )
    n: Series[int] = pa.Field(
        ge=0, description="Resampling units behind the number (items, instances or tasks; count)."
    )
    higher_is_better: Series[bool] = pa.Field(description="Whether a larger value is better.")
    version: Series[str] = pa.Field(
        description="Registry fingerprint the study's generations were made with ('unrecorded' if none)."
    )
    recorded_at: Series[pd.Timestamp] = pa.Field(description="When this version's number was computed (UTC).")
    is_current: Series[bool] = pa.Field(
        description="True: the model's current version; False: kept history of an earlier version."
    )
    previous_version: Series[str] = pa.Field(
        nullable=True, description="The latest earlier version of this cell, if any."
    )
    previous_value: Series[float] = pa.Field(nullable=True, description="Value under previous_version.")
    delta: Series[float] = pa.Field(nullable=True, description="value − previous_value (unit in 'unit').")
