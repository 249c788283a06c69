"""pandera schemas of the document-format study's intermediate tables (issue #2 §3).

Lineage ids travel in every row: ``dataset, instance_id`` (source) → ``format, document_sha256``
(rendered) → ``model_id, workflow_id, repeat, generation_key`` (generation; the key is the
generation cache key) → extracted decision → metric cells.
"""

from __future__ import annotations


import pandas as pd
import pandera.pandas as pa
from pandera.typing.pandas import Series

FORMATS = ["txt", "md", "json", "csv"]


class _Strict(pa.DataFrameModel):
    class Config:
        strict = True
        coerce = True


class SourceInstances(_Strict):
    """``source_instances``: the canonical representation C_x (§4.2), one row per record."""

    instance_id: Series[str] = pa.Field(description="Record id, unique within the dataset.")
    dataset: Series[str] = pa.Field(description="Dataset name (construct, medqa, discrim_eval, credit_default...).")
    source: Series[str] = pa.Field(description="Source spec the record was loaded from (file path, hf:// URI or construct).")
    fields_json: Series[str] = pa.Field(description="Ordered [field, value] pairs as JSON.")
    n_fields: Series[int] = pa.Field(ge=1, description="Number of (field, value) pairs.")
    task_prompt: Series[str] = pa.Field(str_length={"min_value": 1}, description="Task prompt P; never inside the document.")
    answer_space_json: Series[str] = pa.Field(description="Allowed decisions as a JSON list.")
    gold: Series[str] = pa.Field(nullable=True, description="Gold decision (an answer-space label) or null.")
    favorable_label: Series[str] = pa.Field(nullable=True, description="Affirmative/favourable label for fairness rates.")
    sensitive_json: Series[str] = pa.Field(description="Sensitive attributes as a JSON object.")

    @pa.dataframe_check(description="(dataset, instance_id) is unique")
    def unique_ids(cls, df):  # noqa: N805
        return ~df.duplicated(["dataset", "instance_id"], keep=False)


class RenderedDocuments(_Strict):
    """``rendered_documents``: T(C_x, f) for every record and format."""

    dataset: Series[str] = pa.Field(description="Dataset of the record.")
    instance_id: Series[str] = pa.Field(description="Record id.")
    format: Series[str] = pa.Field(description="Document format (txt, md, json, csv, or a registered extension).")
    media_type: Series[str] = pa.Field(description="IANA media type of the document bytes.")
    renderer_version: Series[str] = pa.Field(description="Renderer version; part of every cache key.")
    document_text: Series[str] = pa.Field(description="The document (UTF-8 text of the bytes sent).")
    document_sha256: Series[str] = pa.Field(str_length={"min_value": 64, "max_value": 64}, description="sha256 of the document bytes.")
    n_bytes: Series[int] = pa.Field(ge=1, description="Size of the document in bytes.")
    round_trip_ok: Series[bool] = pa.Field(description="The format's parser recovered exactly the record's pairs.")

    @pa.dataframe_check(description="one document per (dataset, instance_id, format)")
    def unique_docs(cls, df):  # noqa: N805
        return ~df.duplicated(["dataset", "instance_id", "format"], keep=False)


class WorkflowGenerations(_Strict):
    """``workflow_generations``: one row per workflow × document × repeat (partition = model_id)."""

    model_id: Series[str] = pa.Field(description="Registry model id (the dynamic partition key).")
    workflow_id: Series[str] = pa.Field(description="<model_id>/<ingestion path>.")
    provider: Series[str] = pa.Field(description="Provider kind.")
    ingestion: Series[str] = pa.Field(isin=["inline", "openai_file", "anthropic_document"], description="Ingestion path.")
    dataset: Series[str] = pa.Field(description="Dataset of the record.")
    instance_id: Series[str] = pa.Field(description="Record id.")
    format: Series[str] = pa.Field(description="Document format.")
    repeat: Series[int] = pa.Field(ge=1, description="Repeat index r (1..k).")
    document_sha256: Series[str] = pa.Field(description="sha256 of the document given to the model.")
    generation_key: Series[str] = pa.Field(str_length={"min_value": 64, "max_value": 64}, description="Generation cache key (sha256 of the canonical request).")
    request_json: Series[str] = pa.Field(description="The exact request (messages, params, document hash); no secrets.")
    response_text: Series[str] = pa.Field(nullable=True, description="Raw completion text; null when the call failed.")
    finish_reason: Series[str] = pa.Field(nullable=True, description="stop / length / ... as reported.")
    prompt_tokens: Series[pa.typing.Int64] = pa.Field(nullable=True, description="Prompt tokens reported by the provider.")
    completion_tokens: Series[pa.typing.Int64] = pa.Field(nullable=True, description="Completion tokens reported by the provider.")
    latency_s: Series[float] = pa.Field(nullable=True, ge=0, description="Latency of the call in seconds (of the original call for cache hits).")
    model_version: Series[str] = pa.Field(nullable=True, description="Provider-reported resolved model version.")
    system_fingerprint: Series[str] = pa.Field(nullable=True, description="OpenAI system_fingerprint when given.")
    cache_hit: Series[bool] = pa.Field(description="Served from the generation cache in this run.")
    error: Series[str] = pa.Field(nullable=True, description="Error of the call (never a completion).")

    @pa.dataframe_check(description="one row per (workflow, dataset, instance, format, repeat)")
    def unique_cells(cls, df):  # noqa: N805
        return ~df.duplicated(["workflow_id", "dataset", "instance_id", "format", "repeat"], keep=False)


class _PerGeneration(_Strict):
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

    decision: Series[str] = pa.Field(nullable=True, description="Answer-space label, or null when unparseable (never guessed).")
    evidence_json: Series[str] = pa.Field(description="Evidence items as a JSON list of strings (<= 10).")
    n_evidence: Series[int] = pa.Field(ge=0, le=10, description="Number of evidence items.")
    parse_status: Series[str] = pa.Field(isin=["ok", "repaired", "unparseable"], description="ok / repaired / unparseable.")
    parse_reason: Series[str] = pa.Field(description="Why the status (e.g. json_in_code_fence, truncated, call_error).")
    gold: Series[str] = pa.Field(nullable=True, description="Gold label of the record, null if none.")
    is_correct: Series[bool] = pa.Field(nullable=True, description="decision == gold (unparseable = incorrect); null without gold.")
    favorable: Series[bool] = pa.Field(nullable=True, description="decision == favourable label; null when unparseable or no favourable label.")

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
    favorable: Series[pd.BooleanDtype] = pa.Field(nullable=True, description="decision == favourable label; null when unparseable.")
    parse_status: Series[str] = pa.Field(isin=["ok", "repaired", "unparseable"], description="Extraction status.")
    categories_json: Series[str] = pa.Field(description="Sorted union of the generation's evidence categories (JSON list).")
