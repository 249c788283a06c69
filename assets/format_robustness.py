"""Study 1 — document-format robustness (asset group ``format_robustness``).

source_instances → rendered_documents → workflow_generations (per model) → extracted_decisions
(per model) → evidence_categories (per model) → metric tables (all models).

Each asset loads its inputs, calls ``metamorph`` and attaches metadata; the logic lives in:

* loaders / construct: :mod:`metamorph.studies.format_robustness.sources`
* renderers and the §4.2 constraints: :mod:`metamorph.studies.format_robustness.renderers`
* requests: :mod:`metamorph.studies.format_robustness.plan`; calls + cache: :mod:`metamorph.runner`, :mod:`metamorph.cache`
* decision/evidence extraction: :mod:`metamorph.studies.format_robustness.extract`; categories: :mod:`metamorph.studies.format_robustness.evidence`
* metrics: :mod:`metamorph.studies.format_robustness.metrics`; set-based SQL: ``sql/format_robustness/``
* schemas: :mod:`metamorph.studies.format_robustness.schemas`, :mod:`metamorph.studies.format_robustness.schemas`
"""

import json

import dagster as dg
import pandas as pd
from pydantic import Field

from dagster_duckdb import DuckDBResource

from assets import plots
from assets._cells import Behind, Cells, ViewPreview
from metamorph.export import markdown_table
from assets._common import (
    preview_md,
    BudgetConfig,
    ComparisonConfig,
    LimitConfig,
    comparison_checks,
    comparison_output,
    create_lineage_views,
    effective_budget,
    generation_metadata,
    plan_and_guard,
    plan_metadata,
    metric_table,
    study_config,
    runner_options,
    validated_output,
)
from metamorph.studies.format_robustness import evidence as ev
from metamorph.studies.format_robustness import plan as fs
from metamorph.studies.format_robustness import metrics as fr
from metamorph.studies.format_robustness import analysis as fan
from metamorph.studies.format_robustness import fairness as ffair
from metamorph.studies.format_robustness import mitigations as mit
from metamorph.studies.format_robustness import report as fmt_report
from metamorph.studies.format_robustness.plan import plan_generations
from metamorph.studies.format_robustness.records import SourceInstance
from metamorph.studies.format_robustness.study import STUDY
from metamorph.studies.format_robustness.vocab import FORMATS
from metamorph.studies.format_robustness.renderers import (
    RENDERERS,
    RenderedDocument,
    UnwritableCharacter,
    render,
)
from metamorph.runner import generation_frame, run_requests
from metamorph.measurability import NOT_SENT
from metamorph.studies.format_robustness import schemas as S
from assets.partitions import PER_MODEL, model_partitions
from assets.registry import REGISTRY_ENTRY
from resources.llm import GenerationCacheResource, ModelRegistryResource

GROUP = "format_robustness"
PREFIX = [GROUP]
POOL = "duckdb"


def instances_from_frame(df: pd.DataFrame) -> list[SourceInstance]:
    return [SourceInstance.from_row(r) for r in df.to_dict(orient="records")]


#: Settings of source_instances: ``sources``, ``limit`` and ``sample_seed`` are ``--source``, ``--limit`` and
#: ``--sample-seed``.
SourceConfig = study_config(
    STUDY,
    "source_instances",
    LimitConfig,
    name="SourceConfig",
    module=__name__,
)


@dg.asset(key_prefix=PREFIX, group_name=GROUP, pool=POOL, kinds={"duckdb", "python"})
def source_instances(config: SourceConfig) -> dg.Output:
    """The canonical intermediate representation C_x (§4.2), one row per record."""
    # the rows the launch check validated (InputError names file, row, field)
    loaded = STUDY.load(config.sources, config.row_limit, sample_seed=config.sample_seed)
    df = pd.DataFrame([{**x.to_row(), "source": spec, "n_fields": len(x.fields)} for spec, x in loaded])
    counts = df.groupby("dataset").size().to_dict()
    return validated_output(
        S.SourceInstances, df, "source_instances", {"instances_per_dataset": dg.MetadataValue.json(counts)}
    )


#: Settings of rendered_documents: ``formats`` is ``--formats``.
RenderConfig = study_config(STUDY, "rendered_documents", name="RenderConfig", module=__name__)


def _preview_value(r) -> str:
    """A document as the preview shows it: its text, or for a binary format what its extraction read back."""
    if isinstance(r.error, str):
        return f"(not written: {r.error})"
    return r.document_text


@dg.asset(
    key_prefix=PREFIX,
    group_name=GROUP,
    pool=POOL,
    kinds={"duckdb", "python"},
    check_specs=[
        dg.AssetCheckSpec(
            "unwritable_documents",
            asset=[*PREFIX, "rendered_documents"],
            description="Documents that could not be written in their format (a character the PDF font has no "
            "glyph for): error rows, not generated.",
        )
    ],
)
def rendered_documents(config: RenderConfig, source_instances: pd.DataFrame):
    """T(C_x, f) for every record and format; every document passes the round-trip check of its
    format's independent reader (metamorph.studies.format_robustness.readers). Binary formats
    (pdf, docx, xlsx) are stored as bytes with their media type, sha256 and the text their named
    extraction reads back; a document with a character its format cannot write is an error row
    naming it. Code: metamorph.studies.format_robustness.renderers.render."""
    rows = []
    for x in instances_from_frame(source_instances):
        for fmt in config.formats:
            try:
                d = render(x, fmt, check=True)  # raises InputError naming the instance on failure
            except UnwritableCharacter as exc:
                rows.append(
                    {
                        "dataset": x.dataset,
                        "instance_id": x.instance_id,
                        "format": fmt,
                        "media_type": RENDERERS[fmt].media_type,
                        "filename": f"{x.instance_id}.{RENDERERS[fmt].extension}",
                        "renderer_version": RENDERERS[fmt].version,
                        "document_text": None,
                        "document_bytes": None,
                        "extraction": RENDERERS[fmt].extraction,
                        "document_sha256": None,
                        "n_bytes": 0,
                        "round_trip_ok": False,
                        "error": str(exc),
                    }
                )
                continue
            rows.append(
                {
                    "dataset": d.dataset,
                    "instance_id": d.instance_id,
                    "format": d.format,
                    "media_type": d.media_type,
                    "filename": d.filename,
                    "renderer_version": d.renderer_version,
                    "document_text": d.text,
                    "document_bytes": d.data,
                    "extraction": d.extraction,
                    "document_sha256": d.sha256,
                    "n_bytes": len(d.content),
                    "round_trip_ok": True,
                    "error": None,
                }
            )
    df = pd.DataFrame(rows)
    shown = df.assign(
        document_text=[_preview_value(r) for r in df.itertuples()],
        document_bytes=[None if b is None else f"({len(b)} bytes)" for b in df["document_bytes"]],
    )
    example = df.iloc[0]
    sample = "\n\n".join(
        f"**{r.format}**"
        + (f" (text read back by {r.extraction})" if isinstance(r.extraction, str) else "")
        + f"\n```\n{r.document_text[:600]}\n```"
        for r in shown[shown.instance_id == example.instance_id].itertuples()
    )
    errors = df[df["error"].notna()]
    yield validated_output(
        S.RenderedDocuments,
        df,
        "rendered_documents",
        {
            # the columns a reader reads first: the preview leaves out the last ones that do not fit the pane
            "preview": preview_md(
                shown[
                    ["format", "document_bytes", "document_text", "instance_id", "error"]
                    + [
                        c
                        for c in shown.columns
                        if c not in ("instance_id", "format", "document_bytes", "document_text", "error")
                    ]
                ]
            ),
            "example_documents": dg.MetadataValue.md(sample),
            "documents_by_format": dg.MetadataValue.json(df.groupby("format").size().to_dict()),
            "unwritable_documents": dg.MetadataValue.int(len(errors)),
        },
    )
    yield dg.AssetCheckResult(
        check_name="unwritable_documents",
        passed=errors.empty,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "error_rows": len(errors),
            "errors": dg.MetadataValue.md(
                markdown_table(errors[["dataset", "instance_id", "format", "error"]].head(30))
                if len(errors)
                else "_none_"
            ),
        },
    )


def documents_from_frame(df: pd.DataFrame) -> list[RenderedDocument]:
    """The written documents of ``rendered_documents`` (its error rows have no document to send:
    they stay in that table and its ``unwritable_documents`` check)."""
    return [
        RenderedDocument(
            r.instance_id,
            r.dataset,
            r.format,
            r.media_type,
            r.renderer_version,
            r.document_text,
            None if r.document_bytes is None or pd.isna(r.document_bytes) else bytes(r.document_bytes),
            None if r.extraction is None or pd.isna(r.extraction) else r.extraction,
        )
        for r in df.itertuples()
        if r.error is None or pd.isna(r.error)
    ]


def _generation_ids(planned: list[fs.PlannedGeneration], spec) -> list[dict]:
    """The lineage ids of each planned generation's row (workflow_generations, routed_generations)."""
    return [
        {
            "model_id": p.model_id,
            "workflow_id": p.workflow_id,
            "provider": spec.provider,
            "ingestion": p.request.ingestion,
            "dataset": p.dataset,
            "instance_id": p.instance_id,
            "format": p.format,
            "repeat": p.repeat,
            "document_sha256": p.document_sha256,
            "base_seed": p.base_seed,
        }
        for p in planned
    ]


#: Settings of workflow_generations: ``k``, ``max_tokens`` and ``budget_usd`` are ``--k``,
#: ``--max-tokens`` and ``--budget-usd``.
GenerationConfig = study_config(
    STUDY,
    "workflow_generations",
    BudgetConfig,
    name="GenerationConfig",
    module=__name__,
    temperature=(
        float,
        Field(
            default=fs.DEFAULT_PARAMS["temperature"],
            description="Sampling temperature (0 = greedy, §5.1); a registry entry's "
            "own temperature wins (the embedded default samples at 0.7).",
        ),
    ),
    seed=(
        int,
        Field(
            default=fs.DEFAULT_PARAMS["seed"],
            description="Base sampling seed: when decoding samples, repeat r of a request is sent "
            "with its own seed derived from it, r and the request (metamorph.replicates.seeded).",
        ),
    ),
)


@dg.asset(
    key_prefix=PREFIX,
    group_name=GROUP,
    pool=POOL,
    partitions_def=model_partitions,
    deps=[REGISTRY_ENTRY],  # its registry entry: a changed one makes the partition stale
    metadata=PER_MODEL,
    kinds={"duckdb", "llm"},
    code_version="1",
)
def workflow_generations(
    context: dg.AssetExecutionContext,
    config: GenerationConfig,
    model_registry: ModelRegistryResource,
    generation_cache: GenerationCacheResource,
    source_instances: pd.DataFrame,
    rendered_documents: pd.DataFrame,
) -> dg.Output:
    """One row per workflow × document × repeat: the model's completion through the generation
    cache, with its exact request, raw reply, tokens and finish reason. Source: §4.3, §5.2 (k
    repeats). Before any call the cost plan (calls, cache hits, tokens, est. cost:
    metamorph.costplan) is checked against budget_usd and kept as metadata. Code:
    metamorph.studies.format_robustness.plan.plan_generations, metamorph.runner.run_requests."""
    # No DuckDB connection is open while the model runs: inputs are loaded before the body and the
    # output is written after it.
    spec = model_registry.get(context.partition_key)
    provider = model_registry.provider(spec)
    planned = plan_generations(
        instances_from_frame(source_instances),
        documents_from_frame(rendered_documents),
        spec,
        k=config.k,
        params={"temperature": config.temperature, "max_tokens": config.max_tokens, "seed": config.seed},
    )
    # a document the ingestion path cannot send as a file is not sent: its row is an error (not measurable)
    sent = [p.request for p in planned if not p.not_sent]
    cache = generation_cache.open()
    plan = plan_and_guard(
        context,
        sent,
        spec,
        provider,
        cache,
        effective_budget(config.budget_usd, model_registry.budget_usd),
        "workflow_generations",
    )
    outcomes, stats = run_requests(sent, provider, cache, **runner_options(context))
    df = generation_frame(_generation_ids(planned, spec), fs.with_not_sent(planned, outcomes))
    return validated_output(
        S.WorkflowGenerations, df, "workflow_generations", generation_metadata(df, stats, spec, by="format", plan=plan)
    )


@dg.asset(
    key_prefix=PREFIX,
    group_name=GROUP,
    pool=POOL,
    partitions_def=model_partitions,
    metadata=PER_MODEL,
    kinds={"duckdb"},
    check_specs=[
        dg.AssetCheckSpec(
            "parse_failures",
            asset=[*PREFIX, "extracted_decisions"],
            description="Share of unparseable outputs (warns above 20%).",
        ),
        dg.AssetCheckSpec(
            "call_errors",
            asset=[*PREFIX, "extracted_decisions"],
            description="Generations that ended in a provider error (not_sent_rows: those the ingestion path "
            "could not send, not measurable but no error).",
        ),
    ],
)
def extracted_decisions(workflow_generations: pd.DataFrame, source_instances: pd.DataFrame):
    """Decision D and evidence E per generation (parse status ok / repaired / unparseable); evidence
    items that copy the instructions are kept apart as echoed (not in E)."""
    inst = {(x.dataset, x.instance_id): x for x in instances_from_frame(source_instances)}
    rows = []
    for g in workflow_generations.itertuples():
        x = inst[(g.dataset, g.instance_id)]
        unsent = g.error is not None and not pd.isna(g.error) and str(g.error).startswith(NOT_SENT)
        if g.error is not None and not pd.isna(g.error):
            decision, evidence, echoed, status, reason, truncated = None, (), (), "unparseable", "call_error", False
        else:
            e = fs.extract_reply(x, g.response_text, g.finish_reason)
            decision, evidence, echoed, status, reason, truncated = (
                e.decision,
                e.evidence,
                e.echoed,
                e.parse_status,
                e.reason,
                e.truncated,
            )
        rows.append(
            {
                "model_id": g.model_id,
                "workflow_id": g.workflow_id,
                "dataset": g.dataset,
                "instance_id": g.instance_id,
                "format": g.format,
                "repeat": g.repeat,
                "generation_key": g.generation_key,
                "decision": decision,
                "evidence_json": json.dumps(list(evidence), ensure_ascii=False),
                "n_evidence": len(evidence),
                "echoed_json": json.dumps(list(echoed), ensure_ascii=False),
                "n_echoed": len(echoed),
                "parse_status": status,
                "parse_reason": reason,
                "truncated": truncated,
                "gold": x.gold,
                "is_correct": None if x.gold is None or reason == "call_error" else decision == x.gold,
                "favorable": None if decision is None or x.favorable_label is None else decision == x.favorable_label,
                "not_sent": unsent,
            }
        )
    df = pd.DataFrame(rows)
    df["is_correct"] = df["is_correct"].astype("boolean")
    df["favorable"] = df["favorable"].astype("boolean")
    n = len(df)
    unparseable = int((df.parse_status == "unparseable").sum())
    errors = int((df.parse_reason == "call_error").sum())
    # of them, requests the ingestion path could not send (not measurable, but no provider error)
    not_sent = int(workflow_generations["error"].fillna("").astype(str).str.startswith(NOT_SENT).sum())
    by_reason = df[df.parse_status != "ok"].groupby("parse_reason").size().to_dict()
    out = validated_output(
        S.ExtractedDecisions,
        df,
        "extracted_decisions",
        {
            "parse_failures": dg.MetadataValue.int(unparseable),
            "parse_status_counts": dg.MetadataValue.json(df.parse_status.value_counts().to_dict()),
            "truncated_scored": dg.MetadataValue.int(int((df.truncated & df.decision.notna()).sum())),
            "truncated_unparseable": dg.MetadataValue.int(int((df.truncated & df.decision.isna()).sum())),
            "echoed_items": dg.MetadataValue.int(int(df.n_echoed.sum())),
        },
    )
    yield out
    fail_rows = df[df.parse_status == "unparseable"][
        ["workflow_id", "instance_id", "format", "repeat", "parse_reason", "generation_key"]
    ]
    yield dg.AssetCheckResult(
        check_name="parse_failures",
        passed=unparseable <= 0.2 * n,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "unparseable": unparseable,
            "rows": n,
            "share_pct": round(100 * unparseable / max(n, 1), 2),
            "by_reason": dg.MetadataValue.json(by_reason),
            "failing_rows": dg.MetadataValue.md(markdown_table(fail_rows.head(30)) if len(fail_rows) else "_none_"),
        },
    )
    yield dg.AssetCheckResult(
        check_name="call_errors",
        passed=errors - not_sent == 0,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={"error_rows": errors - not_sent, "not_sent_rows": not_sent},
    )


@dg.asset(
    key_prefix=PREFIX,
    group_name=GROUP,
    pool=POOL,
    partitions_def=model_partitions,
    metadata=PER_MODEL,
    kinds={"duckdb"},
    check_specs=[
        dg.AssetCheckSpec(
            "mapping_rate",
            asset=[*PREFIX, "evidence_categories"],
            description="Share of evidence items mapped to ≥ 1 category (paper: > 90%).",
        )
    ],
)
def evidence_categories(extracted_decisions: pd.DataFrame):
    """Each evidence item mapped to semantic categories by its dataset's keyword lexicon."""
    rows = []
    lexicons: dict[str, ev.Lexicon] = {}
    for d in extracted_decisions.itertuples():
        if d.dataset not in lexicons:  # once per dataset (setdefault would load it on every row)
            lexicons[d.dataset] = ev.load_lexicon(d.dataset)
        lex = lexicons[d.dataset]
        for i, item in enumerate(json.loads(d.evidence_json)):
            cats = list(lex.categories_for(item))
            rows.append(
                {
                    "model_id": d.model_id,
                    "workflow_id": d.workflow_id,
                    "dataset": d.dataset,
                    "instance_id": d.instance_id,
                    "format": d.format,
                    "repeat": d.repeat,
                    "generation_key": d.generation_key,
                    "item_index": i,
                    "item_text": item,
                    "categories_json": json.dumps(sorted(cats)),
                    "mapped": bool(cats),
                    "lexicon_version": lex.tag,
                }
            )
    cols = list(S.EvidenceCategories.to_schema().columns)
    df = pd.DataFrame(rows, columns=cols)
    rate = round(float(df["mapped"].mean()), 4) if len(df) else None
    per_dataset = df.groupby("dataset")["mapped"].mean().round(4).to_dict() if len(df) else {}
    yield validated_output(
        S.EvidenceCategories,
        df,
        "evidence_categories",
        {
            "mapping_rate": dg.MetadataValue.float(rate) if rate is not None else dg.MetadataValue.text("no items"),
            "mapping_rate_by_dataset": dg.MetadataValue.json(per_dataset),
        },
    )
    unmapped = df[~df["mapped"]][["dataset", "instance_id", "format", "item_text"]] if len(df) else df
    yield dg.AssetCheckResult(
        check_name="mapping_rate",
        passed=rate is None or rate >= 0.9,
        severity=dg.AssetCheckSeverity.WARN,
        description=None if rate is not None else "no evidence items to map",
        metadata={
            "mapping_rate": rate if rate is not None else -1.0,
            "items": len(df),
            "unmapped_examples": dg.MetadataValue.md(markdown_table(unmapped.head(20)) if len(unmapped) else "_none_"),
        },
    )


# ------------------------------------------------------------------------------------------
# Cross-model tables: read every model partition.

generation_outcomes = metric_table(
    GROUP,
    "generation_outcomes",
    fs.generation_outcomes,
    S.GenerationOutcomes,
    ins=["extracted_decisions", "evidence_categories"],
    checks=False,
    metadata=lambda df: {"workflows": dg.MetadataValue.json(sorted(df["workflow_id"].unique().tolist()))},
    row="One row per generation of every model with its decision, correctness and evidence-category set: the "
    "input of every metric table.",
    source="§4.1",
)


# How the metric tables read in the UI (assets._cells): the rows behind a cell are generations of
# generation_outcomes (raw completion: workflow_generations by generation_key), with their MR flags.
_SHOWN = ("instance_id", "format", "repeat", "decision", "gold", "parse_status")
_GROUP = ["workflow_id", "dataset", "instance_id", "repeat"]


def _generations(inputs: dict) -> pd.DataFrame:
    return inputs["generation_outcomes"]


def _flagged(inputs: dict) -> pd.DataFrame:
    """Generations with the MR1/MR2/MR3 flags of their (instance, repeat) group."""
    return inputs["generation_outcomes"].merge(inputs["mr_flags"][[*_GROUP, "mr1", "mr2", "mr3"]], on=_GROUP)


def _by_group(rows: pd.DataFrame) -> pd.DataFrame:
    return rows.sort_values(["instance_id", "repeat", "format"], kind="stable")


def _violating(rows: pd.DataFrame, cell) -> pd.DataFrame:
    return _by_group(rows[rows[cell["relation"].lower()].fillna(False).astype(bool)])


def _silent(rows: pd.DataFrame, cell) -> pd.DataFrame:
    return _by_group(rows[rows["mr2"].fillna(False).astype(bool) & ~rows["mr1"].fillna(False).astype(bool)])


def _wrong(rows: pd.DataFrame, cell) -> pd.DataFrame:
    return _by_group(rows[rows["is_correct"].eq(False)])


def _unstable(rows: pd.DataFrame, cell) -> pd.DataFrame:
    """Instances whose k repeats disagree in the cell's format (the unstable ones of fr.instance_stability)."""
    replies = rows[~rows["call_error"].astype(bool)] if "call_error" in rows.columns else rows
    stability = fr.instance_stability(replies)
    unstable = stability.loc[~stability["stable"].astype(bool), ["workflow_id", "dataset", "instance_id", "format"]]
    return _by_group(rows.merge(unstable, on=["workflow_id", "dataset", "instance_id", "format"]))


def _flipped(rows: pd.DataFrame, cell) -> pd.DataFrame:
    """The cell's format and baseline generations of the (instance, repeat) groups that flip
    (:func:`metamorph.studies.format_robustness.metrics.flipped_groups`, the flip rate's numerator)."""
    groups = fr.flipped_groups(fs.metric_input(rows), cell["format"], cell["baseline"])
    both = rows[rows["format"].isin([cell["format"], cell["baseline"]])]
    return _by_group(both.merge(groups, on=[*groups.columns]))


#: what a reader of a worst cell's rows reads first: the row's ids, its decision, the gold label, the raw reply
_FIRST = ("instance_id", "format", "repeat", "decision", "gold", "response_text")


def _evidence(text: str, cell) -> str:
    """The reply from its evidence on (``…"evidence": […]``) — what an MR2 or silent-violation cell
    is about — else the whole reply."""
    at = text.find('"evidence"')
    return "…" + text[at:] if at > 0 else text


def _evidence_if_mr2(text: str, cell) -> str:
    """:func:`_evidence` for a cell of relation MR2 (evidence), the reply from its start otherwise."""
    return _evidence(text, cell) if cell.get("relation") == "MR2" else text


def _behind(rows, pick, show=_SHOWN, **kw) -> Behind:
    return Behind(rows, pick, show=show, table="workflow_generations", first=_FIRST, varying=("repeat",), **kw)


def _trace(metric, keys=("workflow_id", "dataset")):
    """Cells.trace of a table keyed by workflow_id (= <model id>/<ingestion>): ``metamorph trace``'s
    metric (a name, or a function of the cell), model and slice (the cell's ``keys``) for one cell."""

    def cell_trace(cell):
        where = {k: cell[k] for k in keys}
        return (metric(cell) if callable(metric) else metric), cell["workflow_id"].rsplit("/", 1)[0], where

    return cell_trace


_PCT = (0.0, 100.0)
MR_CELLS = Cells(
    "violation_pct",
    ("workflow_id", "dataset", "relation"),
    ci=("ci_low_pct", "ci_high_pct"),
    bounds=_PCT,
    headline="M{relation[2]}_pct/{workflow_id}/{dataset}",
    behind=_behind(_flagged, _violating, show=(*_SHOWN, "categories_json"), excerpt=_evidence_if_mr2),
    trace=_trace(lambda cell: f"M{cell['relation'][2]}"),
    trace_each="relation",
)


# Metric tables that are one library call each: what a row is, the paper section, the function.
_GEN = {"generation_outcomes": fs.metric_input}
mr_flags = metric_table(
    GROUP,
    "mr_flags",
    fr.mr_flags,
    S.MRFlags,
    ins=["generation_outcomes"],
    prepare=_GEN,
    row="One row per (workflow, dataset, instance, repeat) group with its MR1 (decision), MR2 (evidence) and "
    "MR3 (stability) violation flags.",
    source="§4.1; the group unit of §5.2",
)
accuracy_by_format = metric_table(
    GROUP,
    "accuracy_by_format",
    fr.accuracy_by_format,
    S.AccuracyByFormat,
    ins=["generation_outcomes"],
    prepare=_GEN,
    sql=["accuracy_by_format"],
    metadata=lambda df: {"plot": plots.bars_by_format(df, "accuracy_pct", "Accuracy by format (%)", FORMATS)},
    cells=Cells(
        "accuracy_pct",
        ("workflow_id", "dataset", "format"),
        worse="low",
        bounds=_PCT,
        headline="accuracy_pct/{workflow_id}/{dataset}/{format}",
        behind=_behind(_generations, _wrong),
        trace=_trace("accuracy", ("workflow_id", "dataset", "format")),
    ),
    row="One row per workflow × dataset × format: accuracy Acc_f in % over all generations with a gold label "
    "(an unparseable reply counts as wrong).",
    source="§5.1",
)
stability_by_format = metric_table(
    GROUP,
    "stability_by_format",
    fr.stability_by_format,
    S.StabilityByFormat,
    ins=["generation_outcomes"],
    prepare=_GEN,
    sql=["instance_stability", "stability_by_format"],
    metadata=lambda df: {"plot": plots.bars_by_format(df, "stability_pct", "Stability Stb_f by format (%)", FORMATS)},
    cells=Cells(
        "stability_pct",
        ("workflow_id", "dataset", "format"),
        worse="low",
        bounds=_PCT,
        headline="stability_pct/{workflow_id}/{dataset}/{format}",
        behind=_behind(_generations, _unstable),
        trace=_trace("stability", ("workflow_id", "dataset", "format")),
    ),
    row="One row per workflow × dataset × format: Stb_f, the % of instances whose k repeats all agree.",
    source="§5.1",
)
evidence_drift = metric_table(
    GROUP,
    "evidence_drift",
    fr.evidence_drift,
    S.EvidenceDrift,
    ins=["generation_outcomes"],
    prepare=_GEN,
    cells=Cells(
        "flip_rate_pct",
        ("workflow_id", "dataset", "format"),
        bounds=_PCT,
        behind=_behind(_generations, _flipped, match=(("format", ""),)),
        trace=_trace("flip", ("workflow_id", "dataset", "format")),
    ),
    row="One row per workflow × dataset × non-TXT format: evidence drift JS, ΔAcc and flip rate against TXT.",
    source="§5.1, Table 2",
)
silent_violations = metric_table(
    GROUP,
    "silent_violations",
    fr.silent_violations,
    S.SilentViolations,
    ins=["mr_flags"],
    sql=["silent_violations"],
    behind_ins=["generation_outcomes"],
    cells=Cells(
        "silent_pct",
        ("workflow_id", "dataset"),
        bounds=_PCT,
        behind=_behind(_flagged, _silent, excerpt=_evidence),
        trace=_trace("silent"),
    ),
    row="One row per workflow × dataset: how many MR2 violations hold MR1 (silent violations) and their share.",
    source="§5.1",
)
format_tests = metric_table(
    GROUP,
    "format_tests",
    fan.format_tests,
    S.FormatTests,
    ins=["generation_outcomes"],
    prepare=_GEN,
    cells=Cells("p_value", ("workflow_id", "dataset", "test", "comparison"), worse=None, bounds=(0.0, 1.0), digits=4),
    row="One row per test and comparison: Cochran's Q across formats, pairwise exact McNemar with Holm, "
    "Spearman ρ(JS, ΔAcc) per setting.",
    source="§5.3",
)
vote_aggregation = metric_table(
    GROUP,
    "vote_aggregation",
    mit.vote_aggregation,
    S.VoteAggregation,
    ins=["generation_outcomes"],
    prepare=_GEN,
    cells=Cells(
        "after_pct",
        ("workflow_id", "dataset", "relation"),
        bounds=_PCT,
        trace=_trace(lambda cell: f"M{cell['relation'][2]}"),
        trace_each="relation",
    ),
    row="One row per workflow × dataset × relation: M before and after a majority vote over the k repeats and "
    "ΔM (tie rule in the function's docstring).",
    source="§5.5 'Vot.', Table 3",
)
mr_table = metric_table(
    GROUP,
    "mr_table",
    fan.mr_table,
    S.MRTable,
    ins=["mr_violations"],
    cells=Cells("violation_pct", ("relation", "dataset", "workflow_id"), worse=None, bounds=_PCT),
    row="Table 1's layout: one row per dataset × workflow (and the Avg. margins) with M1/M2/M3 in %.",
    source="Table 1",
)
silent_by_dataset = metric_table(
    GROUP,
    "silent_by_dataset",
    fan.silent_violations_by_dataset,
    S.SilentByDataset,
    ins=["mr_flags"],
    cells=Cells("silent_pct", ("dataset",), worse=None, bounds=_PCT),
    row='One row per dataset ("*" pools all): the silent-violation rate pooled over workflows.',
    source="§5.3",
)
workflow_tests = metric_table(
    GROUP,
    "workflow_tests",
    fan.workflow_tests,
    S.WorkflowTests,
    ins=["mr_flags"],
    cells=Cells("p_value", ("dataset", "relation"), worse=None, bounds=(0.0, 1.0), digits=4),
    row="One row per dataset × relation: Cochran's Q across workflows (M1/M2 over groups, M3 over instances).",
    source="§5.3, §5.4",
)
flip_errors = metric_table(
    GROUP,
    "flip_errors",
    fan.flip_error_distribution,
    S.FlipErrors,
    ins=["generation_outcomes"],
    prepare=_GEN,
    cells=Cells(
        "error_pct",
        ("workflow_id", "dataset", "format"),
        bounds=_PCT,
        trace=_trace("flip", ("workflow_id", "dataset", "format")),
    ),
    row="One row per format × error kind: how the replies of correctness-flip groups err.",
    source="§5.2, Figure 3",
)
evidence_change_share = metric_table(
    GROUP,
    "evidence_change_share",
    fan.evidence_change_share,
    S.EvidenceChangeShare,
    ins=["generation_outcomes"],
    cells=Cells("share_pct", ("workflow_id", "dataset", "format"), worse=None, bounds=_PCT),
    prepare=_GEN,
    row='One row per format ("*" pools): the share of groups whose evidence changed against TXT (Jaccard below θ).',
    source="§5.3",
)
drift_correlation = metric_table(
    GROUP,
    "drift_correlation",
    fan.drift_correlation,
    S.DriftCorrelation,
    ins=["evidence_drift"],
    cells=Cells("rho", ("scope",), worse=None, bounds=(-1.0, 1.0), digits=3),
    row="One row: Spearman ρ(JS, ΔAcc) pooled over every (workflow, dataset, format ≠ TXT) setting, with its p-value.",
    source="§5.3",
)


def _mr_wide(df: pd.DataFrame) -> dict:
    """M1/M2/M3 side by side per workflow × dataset (metadata)."""
    wide = df.pivot_table(index=["workflow_id", "dataset"], columns="relation", values="violation_pct").reset_index()
    return {"M1_M2_M3_pct": dg.MetadataValue.md(markdown_table(wide.round(1)))}


mr_violations = metric_table(
    GROUP,
    "mr_violations",
    fr.mr_violations,
    S.MRViolations,
    ins=["mr_flags"],
    behind_ins=["generation_outcomes"],
    kwargs={"n_resamples": 1000, "seed": 0},
    cells=MR_CELLS,
    metadata=_mr_wide,
    row="One row per workflow × dataset × relation: M1, M2 or M3, the % of (instance, repeat) groups violating MR1 "
    "(decision), MR2 (evidence) or MR3 (stability), with a bootstrap 95% CI that resamples instances. The worst "
    "cells list the generations behind them with their raw replies.",
    source="§5.1, Table 1",
)


FAIRNESS_CELLS = Cells(
    "sen_pp",
    ("workflow_id", "dataset", "factor", "format"),
    bounds=_PCT,
    trace=_trace("accuracy", ("workflow_id", "dataset", "format")),
)


fairness_disparity = metric_table(
    GROUP,
    "fairness_disparity",
    ffair.fairness_disparity,
    S.FairnessDisparity,
    ins=["generation_outcomes", "source_instances"],
    prepare={"generation_outcomes": fs.metric_input, "source_instances": fs.sensitive_frame},
    cells=FAIRNESS_CELLS,
    metadata=lambda df: {"plot": plots.fds_heatmap(df, FORMATS)},
    row="One row per workflow × dataset × sensitive factor (an attribute or a pair) × format: Sen_f(g), the spread "
    "of affirmative rates over the factor's groups, and its disparity score FDS_f(g).",
    source="§5.1, §5.3",
)


class RoutingConfig(dg.Config):
    selection: str = Field(
        default="all",
        description="Instances the best format is learnt from: 'all' (the paper's "
        "offline results) or 'calibration' (a seeded split; the metric is then on the rest).",
    )
    calibration_fraction: float = Field(
        default=0.3, gt=0, lt=1, description="Share of instances in the calibration split (0 < fraction < 1)."
    )
    seed: int = Field(default=0, description="Seed of the instance split.")


ROUTING_CHOICE_CELLS = Cells("score_pct", ("workflow_id", "dataset"), worse=None, bounds=_PCT)


routing_choice_per_model = metric_table(
    GROUP,
    "routing_choice_per_model",
    mit.routing_choice_per_model,
    S.ModelRoutingChoice,
    ins=["extracted_decisions", "evidence_categories"],
    config=RoutingConfig,
    config_args=("selection", "calibration_fraction", "seed"),
    partition_arg="model_id",
    checks=False,
    row="One row per workflow × dataset of one model: the format format routing converts every input to, learnt "
    "from that model's own generations (a workflow is one model's ingestion path).",
    source='§5.5 "Rte."',
)


routing_choice = metric_table(
    GROUP,
    "routing_choice",
    mit.pooled_routing_choice,
    S.RoutingChoice,
    ins=["routing_choice_per_model"],
    cells=ROUTING_CHOICE_CELLS,
    row="One row per workflow × dataset: the format every input is converted to by format routing (the most "
    "accurate one, or the most stable without gold), every model's choice (routing_choice_per_model) in one table.",
    source='§5.5 "Rte."',
)


#: Settings of routed_generations: ``budget_usd`` (k and decoding come from workflow_generations' requests).
RoutedGenerationConfig = study_config(
    STUDY, "routed_generations", BudgetConfig, name="RoutedGenerationConfig", module=__name__
)


@dg.asset(
    key_prefix=PREFIX,
    group_name=GROUP,
    pool=POOL,
    partitions_def=model_partitions,
    metadata=PER_MODEL,
    kinds={"duckdb", "llm"},
    code_version="1",
)
def routed_generations(
    context: dg.AssetExecutionContext,
    config: RoutedGenerationConfig,
    model_registry: ModelRegistryResource,
    generation_cache: GenerationCacheResource,
    source_instances: pd.DataFrame,
    rendered_documents: pd.DataFrame,
    routing_choice_per_model: pd.DataFrame,
    workflow_generations: pd.DataFrame,
) -> dg.Output:
    """Format routing's new calls (§5.5): every input converted to the workflow's best format (this
    model's routing_choice_per_model) and
    re-run through the same run_requests path and cache as workflow_generations (the input
    already in the best format is the original call, served by the cache). k and the decoding parameters are
    those of this model's workflow_generations (read from its requests), so before and
    after routing differ only in the document. Code: metamorph.studies.format_robustness.plan.plan_routing."""
    spec = model_registry.get(context.partition_key)
    provider = model_registry.provider(spec)
    best = {(r.workflow_id, r.dataset): r.best_format for r in routing_choice_per_model.itertuples()}
    k, params = fs.routing_params(workflow_generations, spec)
    keep = set(mit.routed_instance_ids(source_instances["instance_id"], routing_choice_per_model))
    xs = [x for x in instances_from_frame(source_instances) if x.instance_id in keep]
    planned = fs.plan_routing(xs, documents_from_frame(rendered_documents), spec, best, k=k, params=params)
    cache = generation_cache.open()
    plan = plan_and_guard(
        context,
        [p.request for p in planned],
        spec,
        provider,
        cache,
        effective_budget(config.budget_usd, model_registry.budget_usd),
        "routed_generations",
    )
    outcomes, stats = run_requests([p.request for p in planned], provider, cache, **runner_options(context))
    df = generation_frame(_generation_ids(planned, spec), outcomes).assign(
        routed_format=[p.routed_format for p in planned]
    )
    return validated_output(
        S.RoutedGenerations,
        df,
        "routed_generations",
        {
            "model_calls": dg.MetadataValue.int(stats.calls),
            "cache_hits": dg.MetadataValue.int(stats.cache_hits),
            "error_rows": dg.MetadataValue.int(int(df["error"].notna().sum())),
            **plan_metadata(plan),
        },
    )


@dg.asset(
    key_prefix=PREFIX,
    group_name=GROUP,
    pool=POOL,
    partitions_def=model_partitions,
    metadata=PER_MODEL,
    kinds={"duckdb"},
)
def routed_outcomes(routed_generations: pd.DataFrame, source_instances: pd.DataFrame) -> dg.Output:
    """One row per routed generation: its decision, evidence categories and parse status, with the
    same extraction and lexicons as extracted_decisions and evidence_categories. Source: §5.5
    'Rte.'. Code: metamorph.studies.format_robustness.plan.extract_reply."""
    inst = {(x.dataset, x.instance_id): x for x in instances_from_frame(source_instances)}
    lexicons: dict[str, ev.Lexicon] = {}
    rows = []
    for g in routed_generations.itertuples():
        x = inst[(g.dataset, g.instance_id)]
        failed = g.error is not None and not pd.isna(g.error)
        if failed:
            decision, evidence, status, truncated = None, (), "unparseable", False
        else:
            e = fs.extract_reply(x, g.response_text, g.finish_reason)
            decision, evidence, status, truncated = e.decision, e.evidence, e.parse_status, e.truncated
        if g.dataset not in lexicons:  # once per dataset (setdefault would load it on every row)
            lexicons[g.dataset] = ev.load_lexicon(g.dataset)
        lex = lexicons[g.dataset]
        cats = sorted({c for item in evidence for c in lex.categories_for(item)})
        rows.append(
            {
                "model_id": g.model_id,
                "workflow_id": g.workflow_id,
                "dataset": g.dataset,
                "instance_id": g.instance_id,
                "format": g.format,
                "repeat": g.repeat,
                "generation_key": g.generation_key,
                "decision": decision,
                "gold": x.gold,
                "is_correct": None if x.gold is None or failed else decision == x.gold,
                "favorable": None if decision is None or x.favorable_label is None else decision == x.favorable_label,
                "parse_status": status,
                "categories_json": json.dumps(cats),
                "call_error": failed,
                "not_sent": False,  # routing routes only to a format the path can take
                "routed_format": g.routed_format,
                "truncated": truncated,
            }
        )
    df = pd.DataFrame(rows, columns=list(S.RoutedOutcomes.to_schema().columns))
    df["is_correct"] = df["is_correct"].astype("boolean")
    df["favorable"] = df["favorable"].astype("boolean")
    return validated_output(S.RoutedOutcomes, df, "routed_outcomes")


ROUTING_CELLS = Cells(
    "after_pct",
    ("workflow_id", "dataset", "relation"),
    bounds=_PCT,
    trace=_trace(lambda cell: f"M{cell['relation'][2]}"),
    trace_each="relation",
)


format_routing = metric_table(
    GROUP,
    "format_routing",
    mit.format_routing,
    S.FormatRouting,
    ins=["generation_outcomes", "routed_outcomes", "routing_choice"],
    prepare={"generation_outcomes": fs.metric_input, "routed_outcomes": fs.metric_input},
    cells=ROUTING_CELLS,
    row="One row per workflow × dataset × relation: M before and after format routing on the re-run inputs and ΔM.",
    source='§5.5 "Rte.", Table 3',
)


mitigation_table = metric_table(
    GROUP,
    "mitigation_table",
    mit.mitigation_table,
    S.MitigationTable,
    ins=["vote_aggregation", "format_routing"],
    cells=Cells("delta_pp", ("strategy", "relation", "dataset", "workflow_id"), worse=None, bounds=(-100.0, 100.0)),
    row="Table 3's layout: one row per strategy × relation × dataset × workflow (and Avg. margins) with ΔM in pp.",
    source="Table 3",
)


@dg.asset(
    key_prefix=PREFIX,
    group_name=GROUP,
    pool=POOL,
    kinds={"duckdb", "sql"},
    deps=[
        mr_flags,
        mr_violations,
        generation_outcomes,
        source_instances,
        rendered_documents,
        workflow_generations,
        extracted_decisions,
    ],
)
def lineage_views(warehouse: DuckDBResource) -> dg.MaterializeResult:
    """Views decision_lineage and mr_violation_lineage (sql/format_robustness/lineage_views.sql): from
    a metric cell to the exact request, raw completion, document and record. The metadata shows the
    rows of mr_violation_lineage for the worst cell of mr_violations and the SQL selecting them."""
    return create_lineage_views(
        warehouse,
        GROUP,
        "decision_lineage",
        preview=ViewPreview(
            "mr_violation_lineage",
            "mr_violations",
            MR_CELLS,
            where=lambda cell: cell["relation"].lower(),
            columns=(
                "workflow_id",
                "dataset",
                "instance_id",
                "repeat",
                "format",
                "decision",
                "gold",
                "parse_status",
                "finish_reason",
                "response_text",
                "mr1",
                "mr2",
                "mr3",
                "generation_key",
            ),
            order=("instance_id", "repeat", "format"),
        ),
    )


# ------------------------------------------------------------------------------------------
# Model upgrades


@dg.asset(key_prefix=PREFIX, group_name=GROUP, pool=POOL, kinds={"duckdb"}, check_specs=comparison_checks(GROUP))
def model_comparison(
    context: dg.AssetExecutionContext,
    config: ComparisonConfig,
    model_registry: ModelRegistryResource,
    generation_outcomes: pd.DataFrame,
    mr_flags: pd.DataFrame,
):
    """One row per candidate model × metric × slice: the candidate against the registry's approved
    baseline on accuracy and M1/M2/M3 per ingestion × dataset (× format for accuracy), paired over
    instances — difference with a paired bootstrap 95% CI, exact McNemar, Holm, verdict. Code:
    metamorph.studies.format_robustness.report.comparison_scores, metamorph.comparison.compare_models."""
    yield from comparison_output(
        GROUP,
        model_registry.models(),
        fmt_report.comparison_scores(generation_outcomes, mr_flags),
        fmt_report.COMPARED_METRICS,
        config,
        instance=context.instance,
    )
