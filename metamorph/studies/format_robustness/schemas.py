"""pandera schemas of the document-format study's intermediate tables.

Lineage ids travel in every row: ``dataset, instance_id`` (source) → ``format, document_sha256``
(rendered) → ``model_id, workflow_id, repeat, generation_key`` (generation; the key is the
generation cache key) → extracted decision → metric cells.

Metric tables
-------------
pandera schemas of the tables produced by :mod:`metamorph.studies.format_robustness.metrics`.

One :class:`pandera.pandas.DataFrameModel` per output table of the document-format study
("Not as Sweet by Another Name", ASE '26). Every column has a description with its unit;
percentages are in percent (0–100), differences of percentages in percentage points (pp).
All models are ``strict=True`` (no undeclared column) and ``coerce=True``.

``⊥`` denotes an unparseable decision (``decision is None`` in the generations frame).
"""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa
from pandera.typing.pandas import Series

from metamorph.providers.base import INGESTION_PATHS
from metamorph.schemas import GenerationRecord, StrictModel
from metamorph.studies.format_robustness.readers import BINARY_FORMATS
from metamorph.studies.format_robustness.vocab import (
    FORMAT_TESTS,
    MITIGATION_STRATEGIES,
    PARSE_STATUSES,
    RELATIONS,
    ROUTING_CRITERIA,
    ROUTING_SELECTIONS,
    TEST_BLOCKS,
)

__all__ = [
    "AccuracyByFormat",
    "DriftCorrelation",
    "EvidenceCategories",
    "EvidenceChangeShare",
    "EvidenceDrift",
    "ExtractedDecisions",
    "FairnessDisparity",
    "FlipErrors",
    "FormatRouting",
    "FormatRoutingSimulated",
    "FormatTests",
    "GenerationOutcomes",
    "MRFlags",
    "MRTable",
    "MRViolations",
    "MitigationTable",
    "RenderedDocuments",
    "RoutedGenerations",
    "RoutedOutcomes",
    "ModelRoutingChoice",
    "RoutingChoice",
    "SilentByDataset",
    "SilentViolations",
    "SourceInstances",
    "StabilityByFormat",
    "VoteAggregation",
    "WorkflowGenerations",
    "WorkflowTests",
]


class SourceInstances(StrictModel):
    """``source_instances``: the canonical representation C_x (§4.2), one row per record."""

    instance_id: Series[str] = pa.Field(description="Record id, unique within the dataset.")
    dataset: Series[str] = pa.Field(description="Dataset name (construct, medqa, discrim_eval, credit_default...).")
    source: Series[str] = pa.Field(
        description="Source spec the record was loaded from (file path, hf:// URI or construct)."
    )
    fields_json: Series[str] = pa.Field(description="Ordered [field, value] pairs as JSON.")
    n_fields: Series[int] = pa.Field(ge=1, description="Number of (field, value) pairs.")
    task_prompt: Series[str] = pa.Field(
        str_length={"min_value": 1}, description="Task prompt P; never inside the document."
    )
    answer_space_json: Series[str] = pa.Field(description="Allowed decisions as a JSON list.")
    gold: Series[str] = pa.Field(nullable=True, description="Gold decision (an answer-space label) or null.")
    favorable_label: Series[str] = pa.Field(
        nullable=True, description="Affirmative/favourable label for fairness rates."
    )
    sensitive_json: Series[str] = pa.Field(description="Sensitive attributes as a JSON object.")

    @pa.dataframe_check(description="(dataset, instance_id) is unique")
    def unique_ids(cls, df):  # noqa: N805
        return ~df.duplicated(["dataset", "instance_id"], keep=False)


class RenderedDocuments(StrictModel):
    """``rendered_documents``: T(C_x, f) for every record and format (one row per record × format).

    A text format (txt, md, json, csv, html, yaml) keeps its document in ``document_text``; a binary
    format (pdf, docx, xlsx) keeps its file in ``document_bytes`` and, in ``document_text``, the text
    its named ``extraction`` reads back (what a text-only model reads). A document that could not
    be written (a character the PDF font has no glyph for) is an error row: ``error`` names the
    character, the document columns are null and ``round_trip_ok`` is false."""

    dataset: Series[str] = pa.Field(description="Dataset of the record.")
    instance_id: Series[str] = pa.Field(description="Record id.")
    format: Series[str] = pa.Field(
        description="Document format (txt, md, json, csv, html, yaml, pdf, docx, xlsx, or a registered one)."
    )
    media_type: Series[str] = pa.Field(description="IANA media type of the document bytes.")
    filename: Series[str] = pa.Field(
        description="The document's file name, <instance_id>.<extension>: the name a file-ingestion path "
        "(openai_file, anthropic_document, upload) sends it under."
    )
    renderer_version: Series[str] = pa.Field(description="Renderer version; part of every cache key.")
    document_text: Series[str] = pa.Field(
        nullable=True,
        description="The document (UTF-8 text of the bytes sent), or for a binary format the text its extraction "
        "reads back; null on an error row.",
    )
    document_bytes: Series[object] = pa.Field(
        nullable=True,
        metadata={"column_type": "bytes"},
        description="The file of a binary format (pdf, docx, xlsx); null for a text format.",
    )
    extraction: Series[str] = pa.Field(
        nullable=True,
        description="Named extraction of a binary format's text (extract:pypdf, extract:docx, extract:openpyxl); "
        "null for a text format.",
    )
    document_sha256: Series[str] = pa.Field(
        nullable=True,
        str_length={"min_value": 64, "max_value": 64},
        description="sha256 of the document bytes; null on an error row.",
    )
    n_bytes: Series[int] = pa.Field(ge=0, description="Size of the document in bytes (0 on an error row).")
    round_trip_ok: Series[bool] = pa.Field(
        description="The format's independent reader recovered exactly the record's pairs (false on an error row)."
    )
    error: Series[str] = pa.Field(
        nullable=True, description="Why the document could not be written (names the character); null otherwise."
    )

    @pa.dataframe_check(description="one document per (dataset, instance_id, format)")
    def unique_docs(cls, df):  # noqa: N805
        return ~df.duplicated(["dataset", "instance_id", "format"], keep=False)

    @pa.dataframe_check(description="a row is a document (text, sha256, bytes ≥ 1, round trip ok) or an error")
    def document_or_error(cls, df):  # noqa: N805
        ok = df["error"].isna()
        is_doc = (
            df["document_text"].notna() & df["document_sha256"].notna() & (df["n_bytes"] >= 1) & df["round_trip_ok"]
        )
        is_err = df["document_text"].isna() & df["document_bytes"].isna() & (df["n_bytes"] == 0) & ~df["round_trip_ok"]
        return (ok & is_doc) | (~ok & is_err)

    @pa.dataframe_check(description="bytes and an extraction exactly for the documents of a binary format")
    def binary_has_bytes(cls, df):  # noqa: N805
        has = df["document_bytes"].notna()
        return df["error"].notna() | ((has == df["extraction"].notna()) & (has == df["format"].isin(BINARY_FORMATS)))


class WorkflowGenerations(GenerationRecord):
    """``workflow_generations``: one row per workflow × document × repeat (partition = model_id)."""

    model_id: Series[str] = pa.Field(description="Registry model id (the dynamic partition key).")
    workflow_id: Series[str] = pa.Field(description="<model_id>/<ingestion path>.")
    provider: Series[str] = pa.Field(description="Provider kind.")
    ingestion: Series[str] = pa.Field(isin=list(INGESTION_PATHS), description="Ingestion path.")
    dataset: Series[str] = pa.Field(description="Dataset of the record.")
    instance_id: Series[str] = pa.Field(description="Record id.")
    format: Series[str] = pa.Field(description="Document format.")
    repeat: Series[int] = pa.Field(ge=1, description="Repeat index r (1..k).")
    document_sha256: Series[str] = pa.Field(description="sha256 of the document given to the model.")
    base_seed: Series[pd.Int64Dtype] = pa.Field(
        nullable=True,
        description="The run's base seed; a sampled "
        "replicate's own seed (in request_json) is derived from it, the "
        "repeat and the request (metamorph.replicates.seeded). Null: no seed sent.",
    )

    @pa.dataframe_check(description="one row per (workflow, dataset, instance, format, repeat)")
    def unique_cells(cls, df):  # noqa: N805
        return ~df.duplicated(["workflow_id", "dataset", "instance_id", "format", "repeat"], keep=False)


class _PerGeneration(StrictModel):
    """Lineage columns shared by every per-generation table of the study."""

    model_id: Series[str] = pa.Field(description="Registry model id (the dynamic partition key).")
    workflow_id: Series[str] = pa.Field(description="<model_id>/<ingestion path>.")
    dataset: Series[str] = pa.Field(description="Dataset of the record.")
    instance_id: Series[str] = pa.Field(description="Record id.")
    format: Series[str] = pa.Field(description="Document format.")
    repeat: Series[int] = pa.Field(ge=1, description="Repeat index r.")
    generation_key: Series[str] = pa.Field(description="Generation cache key (lineage to the raw completion).")


class ExtractedDecisions(_PerGeneration):
    """``extracted_decisions``: decision D and evidence E per generation, with parse status."""

    decision: Series[str] = pa.Field(
        nullable=True, description="Answer-space label, or null when unparseable (never guessed)."
    )
    evidence_json: Series[str] = pa.Field(
        description="Evidence items as a JSON list of strings (<= 10), echoed items excluded."
    )
    n_evidence: Series[int] = pa.Field(
        ge=0, le=10, description="Number of evidence items (count; echoed items excluded)."
    )
    echoed_json: Series[str] = pa.Field(
        description="Items of the reply's evidence list that copy the prompt's instructions "
        "(JSON list; rule in metamorph.studies.format_robustness.echo); not used by MR2."
    )
    n_echoed: Series[int] = pa.Field(ge=0, le=10, description="Number of echoed items (count).")
    parse_status: Series[str] = pa.Field(isin=list(PARSE_STATUSES), description="ok / repaired / unparseable.")
    parse_reason: Series[str] = pa.Field(description="Why the status (e.g. json_in_code_fence, truncated, call_error).")
    truncated: Series[bool] = pa.Field(
        description="The reply was cut at max_tokens (finish_reason length); scored with its "
        "label when one is readable, else unparseable with reason 'truncated'."
    )
    gold: Series[str] = pa.Field(nullable=True, description="Gold label of the record, null if none.")
    is_correct: Series[bool] = pa.Field(
        nullable=True,
        description="decision == gold (unparseable = incorrect); null without gold or when the call failed.",
    )
    favorable: Series[bool] = pa.Field(
        nullable=True, description="decision == favourable label; null when unparseable or no favourable label."
    )
    not_sent: Series[bool] = pa.Field(
        description="The request was never sent (its ingestion path cannot take the format; parse_reason "
        "call_error): not a reply, and not a call that failed."
    )

    @pa.dataframe_check(description="unparseable rows carry no decision")
    def unparseable_has_no_decision(cls, df):  # noqa: N805
        return (df["parse_status"] != "unparseable") | df["decision"].isna()


class EvidenceCategories(_PerGeneration):
    """``evidence_categories``: one row per evidence item, mapped by the dataset's lexicon."""

    item_index: Series[int] = pa.Field(ge=0, description="0-based position of the item in the evidence list.")
    item_text: Series[str] = pa.Field(description="The evidence item as the model wrote it.")
    categories_json: Series[str] = pa.Field(description="Semantic categories (JSON list, sorted); [] when unmapped.")
    mapped: Series[bool] = pa.Field(description="At least one category matched.")
    lexicon_version: Series[str] = pa.Field(description="Dataset lexicon and version used.")


class GenerationOutcomes(_PerGeneration):
    """``generation_outcomes``: one row per generation of every model — the metric input."""

    decision: Series[str] = pa.Field(nullable=True, description="Answer-space label; null = unparseable (⊥).")
    gold: Series[str] = pa.Field(nullable=True, description="Gold label or null.")
    is_correct: Series[pd.BooleanDtype] = pa.Field(nullable=True, description="decision == gold; null without gold.")
    favorable: Series[pd.BooleanDtype] = pa.Field(
        nullable=True, description="decision == favourable label; null when unparseable."
    )
    parse_status: Series[str] = pa.Field(isin=list(PARSE_STATUSES), description="Extraction status.")
    categories_json: Series[str] = pa.Field(
        description="Sorted union of the generation's evidence categories (JSON list)."
    )
    call_error: Series[bool] = pa.Field(
        description="The call failed at the provider (parse_reason call_error): not a reply, left out of every "
        "metric and its n."
    )
    not_sent: Series[bool] = pa.Field(
        description="The request was never sent (its ingestion path cannot take the format; a call_error too): a "
        "value with nothing else to measure is 'not measurable: not sent', never 'every call failed'."
    )


# ------------------------------------------------------------------------------------------
# Metric tables
_PCT = dict(ge=0.0, le=100.0)


class _WorkflowDataset(pa.DataFrameModel):
    workflow_id: Series[str] = pa.Field(description="Workflow id: provider + model + ingestion path.")
    dataset: Series[str] = pa.Field(description="Dataset name.")


class MRFlags(_WorkflowDataset):
    """Metamorphic-relation flags (§4.1) per group (instance, repeat) — the unit of §5.2. A flag
    is null when the instance has fewer than 2 formats (no pair to compare)."""

    instance_id: Series[str] = pa.Field(description="Record (instance) id within the dataset.")
    repeat: Series[int] = pa.Field(
        ge=1, description="Repeat r of the group (instance, r) (§5.2 unit); 1 only with unit instance_repeat1."
    )
    mr1: Series[pd.BooleanDtype] = pa.Field(
        nullable=True,
        description="MR1 (decision invariance) violated in the group: the r-th decisions differ between two formats "
        "(⊥ is its own outcome). Boolean; null when n_formats < 2.",
    )
    mr2: Series[pd.BooleanDtype] = pa.Field(
        nullable=True,
        description="MR2 (evidence consistency) violated in the group: Jaccard of the r-th evidence-category sets "
        "< θ = 0.3 for some pair of formats. Boolean; null when n_formats < 2.",
    )
    mr3: Series[pd.BooleanDtype] = pa.Field(
        nullable=True,
        description="MR3 (execution consistency) violated by the instance (same on each of its groups): S_f "
        "(all k repeats agree, ⊥ a value) differs between two formats. Boolean; null when n_formats < 2, or not "
        "measurable (mr3_note).",
    )
    mr3_note: Series[str] = pa.Field(
        nullable=True,
        description="Why mr3 is null by construction (deterministic "
        "decoding: the k repeats are one shared computation); else null.",
    )
    n_formats: Series[int] = pa.Field(ge=1, description="Number of formats the instance was rendered in (count).")
    k: Series[int] = pa.Field(ge=1, description="Repeats per format for this instance (count).")
    n_call_errors: Series[int] = pa.Field(
        ge=0,
        description="Generations of the group whose call failed (count); a group with one has null mr1/mr2 and an "
        "instance with one a null mr3 (a failed call is not a reply).",
    )
    n_parsed: Series[int] = pa.Field(ge=0, description="Generations of the group with a parseable decision (count).")
    n_with_evidence: Series[int] = pa.Field(
        ge=0, description="Generations of the group with at least one evidence category (count)."
    )
    n_not_sent: Series[int] = pa.Field(
        ge=0,
        description="Of n_call_errors, requests never sent (their ingestion path cannot take the format; count): "
        "not calls that failed.",
    )

    class Config:
        strict = True
        coerce = True


class MRViolations(_WorkflowDataset):
    """Violation rates M1/M2/M3 (§5.1, Table 1) over groups (instance, repeat), with percentile
    bootstrap 95% CIs that resample instances (clusters)."""

    relation: Series[str] = pa.Field(isin=list(RELATIONS), description="Metamorphic relation: MR1, MR2 or MR3.")
    violation_pct: Series[float] = pa.Field(
        nullable=True,
        **_PCT,
        description="M_i: % of groups violating the relation (percent, 0–100); null when n_groups = 0.",
    )
    ci_low_pct: Series[float] = pa.Field(
        nullable=True,
        **_PCT,
        description="Lower bound of the percentile bootstrap 95% CI of M_i (percent); null when n_instances < 2.",
    )
    ci_high_pct: Series[float] = pa.Field(
        nullable=True,
        **_PCT,
        description="Upper bound of the percentile bootstrap 95% CI of M_i (percent); null when n_instances < 2.",
    )
    n_groups: Series[int] = pa.Field(
        ge=0, description="Groups (instance, repeat) with a defined flag: the denominator of M_i (count)."
    )
    n_instances: Series[int] = pa.Field(
        ge=0, description="Distinct instances among those groups; the bootstrap resamples them (count)."
    )
    n_undefined: Series[int] = pa.Field(
        ge=0,
        description="Instances whose flag is undefined (fewer than 2 formats, or not measurable), not in M_i (count).",
    )
    n_calls: Series[int] = pa.Field(ge=0, description="Generations of the series in the relation's unit (count).")
    n_call_errors: Series[int] = pa.Field(
        ge=0,
        description="Of n_calls, calls that failed at the provider (count): not replies; their groups (MR1, MR2) or "
        "instances (MR3) are not in M_i.",
    )
    not_measurable: Series[str] = pa.Field(
        nullable=True,
        description="Why M_i is null: every call failed, no reply parsed, no reply gave evidence (M2), or M3 "
        "under deterministic decoding (the k repeats are one computation); else null.",
    )
    ci_note: Series[str] = pa.Field(
        nullable=True,
        description="Why the CI is special (n=0, n=1: no interval; all values equal: CI = [v, v]); null otherwise.",
    )

    class Config:
        strict = True
        coerce = True


class AccuracyByFormat(_WorkflowDataset):
    """Accuracy per format over all generations with gold (§5.1); unparseable counts as incorrect."""

    format: Series[str] = pa.Field(description="Document format (txt, md, json, csv).")
    accuracy_pct: Series[float] = pa.Field(
        nullable=True,
        **_PCT,
        description="Acc_f: % correct generations among those with gold (percent); null when not measurable.",
    )
    majority_baseline_pct: Series[float] = pa.Field(
        nullable=True,
        **_PCT,
        description="Accuracy of always answering the most frequent gold label of the same generations (percent).",
    )
    n: Series[int] = pa.Field(ge=0, description="Replies with gold, all repeats; failed calls not counted (count).")
    n_correct: Series[int] = pa.Field(ge=0, description="Correct generations (count).")
    n_unparseable: Series[int] = pa.Field(ge=0, description="Unparseable (⊥) generations among the n (count).")
    n_call_errors: Series[int] = pa.Field(ge=0, description="Calls with gold that failed at the provider, not in n.")
    not_measurable: Series[str] = pa.Field(
        nullable=True, description="Why accuracy_pct is null (every call failed); else null."
    )

    class Config:
        strict = True
        coerce = True


class StabilityByFormat(_WorkflowDataset):
    """Stb_f: % of instances whose k repeats of format f all agree (⊥ is a value) (§5.1)."""

    format: Series[str] = pa.Field(description="Document format (txt, md, json, csv).")
    stability_pct: Series[float] = pa.Field(
        nullable=True,
        **_PCT,
        description="Stb_f: % of instances whose k repeats all agree (percent); null when not measurable.",
    )
    n_instances: Series[int] = pa.Field(
        ge=0, description="Instances rendered in this format whose k calls all returned a reply (count)."
    )
    n_call_errors: Series[int] = pa.Field(
        ge=0, description="Instances left out because one of their k calls in this format failed (count)."
    )
    not_measurable: Series[str] = pa.Field(
        nullable=True, description="Why stability_pct is null (every call failed); else null."
    )
    k_min: Series[int] = pa.Field(
        ge=1, description="Smallest number of repeats of an instance (count); k = 1 is trivially stable."
    )
    k_max: Series[int] = pa.Field(ge=1, description="Largest number of repeats of an instance (count).")

    class Config:
        strict = True
        coerce = True


class EvidenceDrift(_WorkflowDataset):
    """Per non-baseline format: evidence drift JS, ΔAcc and flip rate against the baseline (§5.1)."""

    format: Series[str] = pa.Field(description="Document format f (≠ baseline).")
    baseline: Series[str] = pa.Field(description="Baseline format (TXT by default).")
    js_divergence: Series[float] = pa.Field(
        ge=0.0,
        le=1.0,
        description="JS: Jensen–Shannon divergence, base 2 (unitless, 0–1), of evidence-category count "
        "distributions of f vs baseline over all generations.",
    )
    delta_acc_pct: Series[float] = pa.Field(
        nullable=True,
        ge=-100.0,
        le=100.0,
        description="ΔAcc = Acc_f − Acc_baseline (percentage points); null without gold.",
    )
    flip_rate_pct: Series[float] = pa.Field(
        nullable=True,
        **_PCT,
        description="Flip rate: % of groups (instance, repeat r) whose r-th decision in f differs from the baseline's "
        "r-th decision (⊥ its own outcome) (percent).",
    )
    flip_ci_low_pct: Series[float] = pa.Field(
        nullable=True, **_PCT, description="Flip rate 95% CI low, bootstrap over instances (percent)."
    )
    flip_ci_high_pct: Series[float] = pa.Field(
        nullable=True, **_PCT, description="Flip rate 95% CI high, bootstrap over instances (percent)."
    )
    flip_ci_note: Series[str] = pa.Field(
        nullable=True, description="Why the flip-rate CI is degenerate or null, else null."
    )
    n_groups: Series[int] = pa.Field(
        ge=0,
        description="Groups (instance, repeat) rendered in both f and the baseline: flip-rate denominator (count).",
    )
    n_instances: Series[int] = pa.Field(
        ge=0, description="Distinct instances of those groups: the bootstrap clusters (count)."
    )
    n_category_items: Series[int] = pa.Field(
        ge=0, description="Evidence-category occurrences of f, all generations (count)."
    )
    n_category_items_baseline: Series[int] = pa.Field(
        ge=0, description="Evidence-category occurrences of the baseline (count)."
    )

    class Config:
        strict = True
        coerce = True


class FairnessDisparity(_WorkflowDataset):
    """Sen_f(g) and FDS_f(g) per sensitive factor g and format (§5.1)."""

    factor: Series[str] = pa.Field(
        description="Sensitive factor g: an attribute, or two attributes joined by ':' (interaction)."
    )
    format: Series[str] = pa.Field(description="Document format f.")
    sen_pp: Series[float] = pa.Field(
        nullable=True,
        **_PCT,
        description="Sen_f(g): max − min affirmative rate over the groups of g (percentage points); null when n_groups < 2.",
    )
    fds: Series[float] = pa.Field(
        nullable=True,
        description="FDS_f(g) = (Sen_f(g) − μ_g)/(σ_g + ε), μ_g mean and σ_g dispersion of Sen over formats: mean absolute "
        "deviation by default (max n/2 = 2.00 with 4 formats, §5.3), or population/sample std (unitless).",
    )
    n_groups: Series[int] = pa.Field(
        ge=0, description="Groups of the factor g (its values) with at least one parseable response (count)."
    )
    min_group_n: Series[int] = pa.Field(
        ge=0, description="Smallest group of g in parseable responses (count); 0 when no group."
    )
    n_responses: Series[int] = pa.Field(
        ge=0, description="Parseable responses of f behind the rates, one per (instance, repeat) group of §5.2 (count)."
    )
    n_instances: Series[int] = pa.Field(ge=0, description="Distinct instances among those responses (count).")

    class Config:
        strict = True
        coerce = True


class SilentViolations(_WorkflowDataset):
    """Silent violations: MR2 violated while MR1 holds (§5.1)."""

    silent_pct: Series[float] = pa.Field(
        nullable=True,
        **_PCT,
        description="% of MR2 violations without an MR1 violation (percent); null when n_mr2 = 0.",
    )
    n_silent: Series[int] = pa.Field(ge=0, description="Groups with MR2 violated and MR1 not violated (count).")
    n_mr2: Series[int] = pa.Field(ge=0, description="Groups with MR2 violated (count).")
    n_groups: Series[int] = pa.Field(ge=0, description="Groups (instance, repeat) with defined flags (count).")
    n_instances: Series[int] = pa.Field(ge=0, description="Distinct instances among them (count).")

    class Config:
        strict = True
        coerce = True


class FormatTests(_WorkflowDataset):
    """Significance tests across formats (long format): Cochran's Q, pairwise exact McNemar with
    Holm correction, Spearman ρ(JS, ΔAcc)."""

    test: Series[str] = pa.Field(isin=list(FORMAT_TESTS), description="Test name.")
    comparison: Series[str] = pa.Field(
        description="What is compared: 'txt,md,json,csv' (Q), 'txt vs md' (McNemar), 'js_divergence~delta_acc_pct' (Spearman)."
    )
    statistic: Series[float] = pa.Field(
        nullable=True,
        description="Q (chi-square), McNemar exact statistic min(b, c) (count), or Spearman ρ (unitless); null with a note when undefined.",
    )
    p_value: Series[float] = pa.Field(nullable=True, ge=0.0, le=1.0, description="Unadjusted p-value (probability).")
    p_holm: Series[float] = pa.Field(
        nullable=True,
        ge=0.0,
        le=1.0,
        description="Holm-adjusted p-value over the McNemar pairs of this workflow × dataset (probability); null for other tests.",
    )
    n: Series[int] = pa.Field(
        ge=0,
        description="Groups (instance, repeat) used (Q: complete blocks; McNemar: pairs) or points (Spearman: formats) (count).",
    )
    n_instances: Series[pd.Int64Dtype] = pa.Field(
        nullable=True, ge=0, description="Distinct instances of those groups (count); null for Spearman."
    )
    note: Series[str] = pa.Field(nullable=True, description="Why a statistic is null, else null.")

    class Config:
        strict = True
        coerce = True


class VoteAggregation(_WorkflowDataset):
    """Mitigation (§5.5 "Vot."): majority vote over the k repeats; one row per relation."""

    relation: Series[str] = pa.Field(isin=list(RELATIONS), description="Relation.")
    before_pct: Series[float] = pa.Field(nullable=True, **_PCT, description="M_i before, over groups (percent).")
    after_pct: Series[float] = pa.Field(
        nullable=True,
        **_PCT,
        description="M_i after voting, over instances; M2 unchanged, M3 = 0 by construction (percent).",
    )
    delta_pp: Series[float] = pa.Field(
        nullable=True, ge=-100.0, le=100.0, description="ΔM_i = before − after (percentage points; > 0 = improvement)."
    )
    n_before: Series[int] = pa.Field(
        ge=0,
        description="Units of the before rate: groups (MR1/MR2) or groups carrying the instance flag (MR3) (count).",
    )
    n_after: Series[int] = pa.Field(ge=0, description="Instances with ≥ 2 formats after voting (count).")
    n_ties: Series[int] = pa.Field(
        ge=0, description="(instance, format) cells whose vote tied, resolved by the tie rule (count)."
    )
    not_measurable: Series[str] = pa.Field(
        nullable=True,
        description="Why after/Δ are null by construction (a vote "
        "over k repeats that are one computation changes nothing); else null.",
    )

    class Config:
        strict = True
        coerce = True


class FormatRouting(_WorkflowDataset):
    """Mitigation (§5.5 "Rte."): every input converted to the best format and re-run; one row per relation."""

    relation: Series[str] = pa.Field(isin=list(RELATIONS), description="Relation.")
    best_format: Series[str] = pa.Field(description="Format the inputs were converted to.")
    before_pct: Series[float] = pa.Field(
        nullable=True, **_PCT, description="M_i of the original run over the routed instances (percent)."
    )
    after_pct: Series[float] = pa.Field(nullable=True, **_PCT, description="M_i of the routed run (percent).")
    delta_pp: Series[float] = pa.Field(
        nullable=True, ge=-100.0, le=100.0, description="ΔM_i = before − after (percentage points)."
    )
    n_before: Series[int] = pa.Field(ge=0, description="Groups of the before rate (count).")
    n_after: Series[int] = pa.Field(ge=0, description="Groups of the after rate (count).")
    n_instances: Series[int] = pa.Field(ge=0, description="Routed instances (count).")
    selection: Series[str] = pa.Field(isin=list(ROUTING_SELECTIONS), description="How the best format was learnt.")
    note: Series[str] = pa.Field(
        nullable=True,
        description="What the after value is by construction (deterministic "
        "decoding: every routed input is one computation, the original call in the best "
        "format, so M1/M2 after are 0 and M3 after is not measurable); else null.",
    )

    class Config:
        strict = True
        coerce = True


class FormatRoutingSimulated(_WorkflowDataset):
    """Mitigation (§5.5): route every held-out input to the best calibration format."""

    best_format: Series[str] = pa.Field(description="Format chosen on the calibration split.")
    criterion: Series[str] = pa.Field(
        isin=list(ROUTING_CRITERIA),
        description="How best_format was chosen: accuracy (gold), stability (Stb_f) or default (no calibration data → baseline).",
    )
    calibration_score_pct: Series[float] = pa.Field(
        nullable=True, **_PCT, description="best_format's calibration accuracy or Stb_f (percent)."
    )
    mrv_before_pct: Series[float] = pa.Field(
        nullable=True, **_PCT, description="Held-out MR1 violation rate across formats, repeat 1 (percent)."
    )
    mrv_after_pct: Series[float] = pa.Field(
        nullable=True,
        **_PCT,
        description="Held-out MR1 after routing: % of held-out instances whose k repeats of best_format disagree (percent).",
    )
    delta_mrv_pp: Series[float] = pa.Field(
        nullable=True, ge=-100.0, le=100.0, description="ΔMRV = before − after (percentage points)."
    )
    n_calibration: Series[int] = pa.Field(ge=0, description="Calibration instances (count).")
    n_heldout: Series[int] = pa.Field(ge=0, description="Held-out instances (count).")
    note: Series[str] = pa.Field(
        nullable=True, description="Caveats (no calibration data, held-out instances lacking best_format), else null."
    )

    class Config:
        strict = True
        coerce = True


class SilentByDataset(pa.DataFrameModel):
    """Silent-violation rate per dataset pooled over workflows (§5.3); dataset "*" pools all."""

    dataset: Series[str] = pa.Field(description="Dataset name, or '*' for all datasets pooled.")
    silent_pct: Series[float] = pa.Field(
        nullable=True,
        **_PCT,
        description="% of MR2-violating groups without an MR1 violation (percent); null when n_mr2 = 0.",
    )
    cooccur_pct: Series[float] = pa.Field(
        nullable=True,
        **_PCT,
        description="% of MR2-violating groups that also violate MR1 = 100 − silent_pct (percent).",
    )
    n_silent: Series[int] = pa.Field(ge=0, description="Groups with MR2 and not MR1, summed over workflows (count).")
    n_mr2: Series[int] = pa.Field(ge=0, description="Groups with MR2 violated, summed over workflows (count).")
    n_groups: Series[int] = pa.Field(ge=0, description="Groups with defined flags, summed over workflows (count).")
    n_workflows: Series[int] = pa.Field(ge=0, description="Workflows pooled (count).")

    class Config:
        strict = True
        coerce = True


class WorkflowTests(pa.DataFrameModel):
    """Cochran's Q across workflows per dataset × relation (§5.3 M2, §5.4 M3)."""

    dataset: Series[str] = pa.Field(description="Dataset name.")
    relation: Series[str] = pa.Field(isin=list(RELATIONS), description="Relation whose flags are compared.")
    unit: Series[str] = pa.Field(
        isin=list(TEST_BLOCKS), description="Blocks: groups (instance, repeat) for MR1/MR2, instances for MR3."
    )
    workflows: Series[str] = pa.Field(description="Workflows compared (treatments), comma-separated.")
    statistic: Series[float] = pa.Field(
        nullable=True, description="Cochran's Q (chi-square, df = workflows − 1); null with a note when undefined."
    )
    p_value: Series[float] = pa.Field(nullable=True, ge=0.0, le=1.0, description="p-value (probability).")
    n: Series[int] = pa.Field(ge=0, description="Blocks aligned across every workflow (count).")
    note: Series[str] = pa.Field(nullable=True, description="Why Q is undefined, else null.")

    class Config:
        strict = True
        coerce = True


class FlipErrors(_WorkflowDataset):
    """Errors of correctness-flip groups by format (§5.2, Figure 3)."""

    format: Series[str] = pa.Field(description="Document format.")
    n_errors: Series[int] = pa.Field(
        ge=0, description="Flip groups in which this format is incorrect (⊥ incorrect) (count)."
    )
    n_flip_groups: Series[int] = pa.Field(
        ge=0, description="Groups correct in some format and incorrect in another (count)."
    )
    error_pct: Series[float] = pa.Field(
        nullable=True, **_PCT, description="100 · n_errors / n_flip_groups (percent); null when no flip group."
    )

    class Config:
        strict = True
        coerce = True


class EvidenceChangeShare(_WorkflowDataset):
    """Share of evidence changes (Jaccard vs baseline < θ) by format (§5.3); '*' rows pool."""

    format: Series[str] = pa.Field(description="Document format f (≠ baseline).")
    baseline: Series[str] = pa.Field(description="Baseline format (TXT).")
    n_changes: Series[int] = pa.Field(
        ge=0, description="Groups whose evidence sets of f and baseline have Jaccard < θ (count)."
    )
    n_groups: Series[int] = pa.Field(ge=0, description="Groups with both f and the baseline (count).")
    share_pct: Series[float] = pa.Field(
        nullable=True,
        **_PCT,
        description="100 · n_changes / all changes of the row's scope (percent); null when no change.",
    )

    class Config:
        strict = True
        coerce = True


class DriftCorrelation(pa.DataFrameModel):
    """Spearman ρ(JS, ΔAcc) pooled over (workflow, dataset, format ≠ TXT) settings (§5.3)."""

    scope: Series[str] = pa.Field(description="'all' or 'dataset:<name>'.")
    rho: Series[float] = pa.Field(
        nullable=True, ge=-1.0, le=1.0, description="Spearman ρ (unitless); null with a note when undefined."
    )
    p_value: Series[float] = pa.Field(
        nullable=True, ge=0.0, le=1.0, description="Two-sided p; exact permutation for n ≤ 9 (probability)."
    )
    n: Series[int] = pa.Field(ge=0, description="Settings (points) used (count).")
    n_left_out: Series[int] = pa.Field(ge=0, description="Settings without ΔAcc (no gold) left out (count).")
    note: Series[str] = pa.Field(nullable=True, description="Why ρ is undefined, else null.")

    class Config:
        strict = True
        coerce = True


class MRTable(pa.DataFrameModel):
    """Table 1 layout: M1/M2/M3 per dataset × workflow, with 'Avg.' margins (unweighted means)."""

    relation: Series[str] = pa.Field(isin=list(RELATIONS), description="Relation.")
    dataset: Series[str] = pa.Field(description="Dataset, or 'Avg.' (mean over datasets).")
    workflow_id: Series[str] = pa.Field(description="Workflow, or 'Avg.' (mean over workflows).")
    violation_pct: Series[float] = pa.Field(nullable=True, **_PCT, description="M_i or its unweighted mean (percent).")

    class Config:
        strict = True
        coerce = True


class RoutingChoice(_WorkflowDataset):
    """Empirically best format per workflow × dataset (§5.5 format routing)."""

    best_format: Series[str] = pa.Field(description="Format every input is converted to.")
    criterion: Series[str] = pa.Field(
        isin=list(ROUTING_CRITERIA),
        description="accuracy (gold), stability (Stb_f) or default (no data -> baseline).",
    )
    score_pct: Series[float] = pa.Field(
        nullable=True, **_PCT, description="best_format's accuracy or Stb_f on the instances used (percent)."
    )
    n_instances: Series[int] = pa.Field(ge=0, description="Instances the choice was learnt from (count).")
    selection: Series[str] = pa.Field(
        isin=list(ROUTING_SELECTIONS), description="all instances (paper) or a calibration split."
    )
    calibration_fraction: Series[float] = pa.Field(
        nullable=True,
        ge=0.0,
        le=1.0,
        description="Calibration share (fraction) when selection = calibration, else null.",
    )
    split_seed: Series[pd.Int64Dtype] = pa.Field(
        nullable=True, description="Seed of the calibration split when selection = calibration, else null."
    )

    class Config:
        strict = True
        coerce = True


class ModelRoutingChoice(RoutingChoice):
    """``routing_choice_per_model``: :class:`RoutingChoice` of one model partition's workflows."""

    model_id: Series[str] = pa.Field(description="Registry model id (the dynamic partition key).")


class MitigationTable(pa.DataFrameModel):
    """Table 3 layout: Δ per strategy × relation × dataset × workflow with 'Avg.' margins."""

    strategy: Series[str] = pa.Field(isin=list(MITIGATION_STRATEGIES), description="Vot. or Rte.")
    relation: Series[str] = pa.Field(isin=list(RELATIONS), description="Relation.")
    dataset: Series[str] = pa.Field(description="Dataset, or 'Avg.'.")
    workflow_id: Series[str] = pa.Field(description="Workflow, or 'Avg.'.")
    delta_pp: Series[float] = pa.Field(
        nullable=True,
        ge=-100.0,
        le=100.0,
        description="ΔM_i = before − after or its unweighted mean (percentage points).",
    )

    class Config:
        strict = True
        coerce = True


class RoutedGenerations(WorkflowGenerations):
    """``routed_generations``: format routing's new calls (§5.5), one row per workflow × instance ×
    source format × repeat; ``format`` is the input's own format, the document sent is in
    ``routed_format``."""

    routed_format: Series[str] = pa.Field(description="Format the input was converted to (the workflow's best format).")


class RoutedOutcomes(GenerationOutcomes):
    """``routed_outcomes``: decision, evidence categories and parse status of every routed generation."""

    routed_format: Series[str] = pa.Field(description="Format the input was converted to.")
    truncated: Series[bool] = pa.Field(description="The reply was cut at max_tokens.")
