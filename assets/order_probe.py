"""Study 4 — OrderProbe (asset group ``order_probe``).

order_items → scrambled_inputs → order_prompts → order_generations (per model) → scored_replies
(per model) → recovery_rates, recovery_breakdown, error_categories, recovery_regression,
semantic_scores → diagnostics (all models); lineage views from each recovery cell to its prompts,
raw replies and parse reasons.

Where the logic lives (one hop):

* items: :mod:`metamorph.studies.order_probe.sources`; patterns: :mod:`metamorph.studies.order_probe.permutations`
* prompts, requests, scoring: :mod:`metamorph.studies.order_probe.plan`; parser: :mod:`metamorph.studies.order_probe.extract`
* recovery, breakdowns, error categories: :mod:`metamorph.studies.order_probe.metrics`;
  S_*: :mod:`metamorph.studies.order_probe.semantic`; Logit: :mod:`metamorph.studies.order_probe.regression`
* schemas: :mod:`metamorph.studies.order_probe.schemas`; lineage: ``sql/order_probe/lineage_views.sql``
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
    BudgetConfig,
    ComparisonConfig,
    LimitConfig,
    comparison_checks,
    comparison_output,
    create_lineage_views,
    effective_budget,
    generation_metadata,
    metric_table,
    plan_and_guard,
    runner_options,
    study_config,
    validated_output,
)
from metamorph.measurability import is_call_error
from metamorph.runner import generation_frame, run_requests
from metamorph.studies.order_probe import metrics as om
from metamorph.studies.order_probe import plan as op
from metamorph.studies.order_probe import regression as reg
from metamorph.studies.order_probe import report as op_report
from metamorph.studies.order_probe import schemas as S
from metamorph.studies.order_probe import semantic as sem
from metamorph.studies.order_probe.sources import OrderItem
from assets.partitions import PER_MODEL, model_partitions
from assets.registry import REGISTRY_ENTRY
from metamorph.studies.order_probe.study import STUDY
from resources.llm import GenerationCacheResource, ModelRegistryResource

GROUP = "order_probe"
PREFIX = [GROUP]
POOL = "duckdb"


def items_from_frame(df: pd.DataFrame) -> list[OrderItem]:
    return [
        OrderItem(
            r.item_id,
            r.language,
            r.canonical,
            tuple(json.loads(r.meanings_json)),
            None if pd.isna(r.structure) else r.structure,
            None if pd.isna(r.frequency) else float(r.frequency),
            r.source,
        )
        for r in df.itertuples()
    ]


#: Settings of order_items: ``sources`` and ``limit`` are ``--source`` and ``--limit``.
ItemsConfig = study_config(STUDY, "order_items", LimitConfig, name="ItemsConfig", module=__name__)


@dg.asset(key_prefix=PREFIX, group_name=GROUP, pool=POOL, kinds={"duckdb", "python"})
def order_items(config: ItemsConfig) -> dg.Output:
    """Canonical four-unit expressions (metamorph.studies.order_probe.sources.load_sources)."""
    items = STUDY.load(config.sources, config.row_limit)
    df = pd.DataFrame(
        [
            {
                "item_id": x.item_id,
                "language": x.language,
                "canonical": x.canonical,
                "meanings_json": json.dumps(list(x.meanings), ensure_ascii=False),
                "n_meanings": len(x.meanings),
                "structure": x.structure,
                "frequency": x.frequency,
                "repeated_unit": len(set(x.units)) < 4,
                "source": x.source,
            }
            for x in items
        ]
    )
    df["frequency"] = df["frequency"].astype(float)
    return validated_output(
        S.OrderItems,
        df,
        "order_items",
        {"items_per_language": dg.MetadataValue.json(df.groupby("language").size().to_dict())},
    )


@dg.asset(key_prefix=PREFIX, group_name=GROUP, pool=POOL, kinds={"duckdb", "python"})
def scrambled_inputs(order_items: pd.DataFrame) -> dg.Output:
    """Item × 23 patterns + the unperturbed run; equal-to-canonical and duplicate variants are
    kept as rows but not sent (metamorph.studies.order_probe.plan.scrambled_inputs)."""
    df = op.scrambled_inputs(items_from_frame(order_items))
    return validated_output(
        S.ScrambledInputs,
        df,
        "scrambled_inputs",
        {
            "status_counts": dg.MetadataValue.json(df["status"].value_counts().to_dict()),
            "dropped_equal_to_canonical": dg.MetadataValue.int(int((df["status"] == "equals_canonical").sum())),
            "dropped_duplicates": dg.MetadataValue.int(int((df["status"] == "duplicate").sum())),
        },
    )


#: Settings of order_prompts: ``settings`` is ``--settings``.
PromptsConfig = study_config(
    STUDY,
    "order_prompts",
    name="PromptsConfig",
    module=__name__,
    template_version=(str, Field(default=op.TEMPLATE_VERSION, description="Prompt template version.")),
)


@dg.asset(key_prefix=PREFIX, group_name=GROUP, pool=POOL, kinds={"duckdb", "python"})
def order_prompts(config: PromptsConfig, scrambled_inputs: pd.DataFrame) -> dg.Output:
    """Every sent input × setting with the exact messages (metamorph.studies.order_probe.plan.prompts_frame)."""
    df = op.prompts_frame(scrambled_inputs, config.settings, config.template_version)
    ex = df.drop_duplicates("setting")
    sample = "\n\n".join(f"**{r.setting}** ({r.language})\n```\n{r.messages_json[:900]}\n```" for r in ex.itertuples())
    return validated_output(S.OrderPrompts, df, "order_prompts", {"example_prompts": dg.MetadataValue.md(sample)})


#: Settings of order_generations: ``max_tokens`` and ``budget_usd`` are ``--max-tokens`` and ``--budget-usd``.
GenerationConfig = study_config(STUDY, "order_generations", BudgetConfig, name="GenerationConfig", module=__name__)


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
def order_generations(
    context: dg.AssetExecutionContext,
    config: GenerationConfig,
    model_registry: ModelRegistryResource,
    generation_cache: GenerationCacheResource,
    order_prompts: pd.DataFrame,
) -> dg.Output:
    """model × setting × item × input completions through the generation cache, greedy decoding
    (metamorph.studies.order_probe.plan.plan_generations)."""
    spec = model_registry.get(context.partition_key)
    check_study_kinds("order_probe", False, [spec])  # a workflow under test answers documents
    provider = model_registry.provider(spec)
    planned = op.plan_generations(order_prompts, spec, {"max_tokens": config.max_tokens} if config.max_tokens else None)
    cache = generation_cache.open()
    plan = plan_and_guard(
        context,
        [p.request for p in planned],
        spec,
        provider,
        cache,
        effective_budget(config.budget_usd, model_registry.budget_usd),
        "order_generations",
    )
    outcomes, stats = run_requests([p.request for p in planned], provider, cache, **runner_options(context))
    df = generation_frame(
        [
            {
                "model_id": p.model_id,
                "setting": p.setting,
                "item_id": p.item_id,
                "language": p.language,
                "pattern": p.pattern,
                "input_kind": p.input_kind,
            }
            for p in planned
        ],
        outcomes,
    )
    return validated_output(
        S.OrderGenerations, df, "order_generations", generation_metadata(df, stats, spec, by="setting", plan=plan)
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
            "parse_failure_share",
            asset=[*PREFIX, "scored_replies"],
            description="Share of replies without a unique candidate (calls that failed are no replies).",
        )
    ],
)
def scored_replies(order_generations: pd.DataFrame, scrambled_inputs: pd.DataFrame, order_items: pd.DataFrame):
    """Every reply parsed and scored by exact match
    (metamorph.studies.order_probe.plan.score_generations)."""
    df = op.score_generations(order_generations, scrambled_inputs, items_from_frame(order_items))
    failed = is_call_error(df["reason"])
    replies = df[~failed]  # a call error is no reply: in no share below
    share = float((~replies["parse_ok"]).mean()) if len(replies) else 0.0
    yield validated_output(
        S.ScoredReplies,
        df,
        "scored_replies",
        {
            "reasons": dg.MetadataValue.json(df["reason"].value_counts().to_dict()),
            "correct_pct": dg.MetadataValue.float(
                round(100 * float(replies["correct"].mean()), 2) if len(replies) else None
            ),
            "n_call_errors": dg.MetadataValue.int(int(failed.sum())),
        },
    )
    bad = replies[~replies["parse_ok"]][["setting", "item_id", "pattern", "reason", "generation_key"]]
    yield dg.AssetCheckResult(
        check_name="parse_failure_share",
        passed=share <= 0.5,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "parse_failure_pct": round(100 * share, 2),
            "examples": dg.MetadataValue.md(markdown_table(bad.head(20)) if len(bad) else "_none_"),
        },
    )


# ------------------------------------------------------------------------------------------
# Cross-model tables

ALL_SCORED = {"scored_replies": dg.AssetIn(key=[*PREFIX, "scored_replies"])}


# How the metric tables read in the UI (assets._cells): the rows behind a recovery cell are its
# scrambled inputs that were not recovered (raw completion: order_generations by generation_key).
_PCT = (0.0, 100.0)


def _not_recovered(rows: pd.DataFrame, cell) -> pd.DataFrame:
    rows = rows[(rows["input_kind"] == "scrambled") & ~rows["correct"].astype(bool) & ~is_call_error(rows["reason"])]
    return rows.sort_values(["language", "item_id", "pattern"], kind="stable")


def _recovery_trace(cell) -> tuple[str, str, dict]:
    """``metamorph trace``'s recovery metric, model and slice (language, setting) for one cell."""
    return "recovery", cell["model_id"], {"language": cell["language"], "setting": cell["setting"]}


RECOVERY_CELLS = Cells(
    "recovery_pct",
    ("model_id", "language", "setting"),
    worse="low",
    ci=("ci_low_pct", "ci_high_pct"),
    bounds=_PCT,
    headline="recovery_pct/{model_id}/{language}/{setting}",
    behind=Behind(
        lambda i: i["scored_replies"],
        _not_recovered,
        table="order_generations",
        show=("language", "item_id", "pattern", "scrambled", "canonical", "expression", "reason"),
        first=("item_id", "pattern", "scrambled", "expression", "canonical", "response_text"),
    ),
    trace=_recovery_trace,
)
BREAKDOWN_CELLS = Cells(
    "recovery_pct",
    ("model_id", "language", "setting", "dimension", "level"),
    worse="low",
    ci=("ci_low_pct", "ci_high_pct"),
    bounds=_PCT,
    trace=_recovery_trace,
)
CATEGORY_CELLS = Cells("pct", ("model_id", "language", "setting", "category"), worse=None, bounds=_PCT)
REGRESSION_CELLS = Cells("p_value", ("model_id", "setting", "term"), worse=None, bounds=(0.0, 1.0), digits=4)
DIAGNOSTICS_CELLS = Cells(
    "s_rob", ("model_id", "language", "setting"), worse="low", bounds=(0.0, 1.0), digits=3, trace=_recovery_trace
)


def _breakdown_plots(df: pd.DataFrame) -> dict:
    pooled = df[df["language"] == "all"]
    return {
        "plot_patterns": plots.order_recovery_by_pattern(pooled[pooled["dimension"] == "pattern"]),
        "plot_structure": plots.order_recovery_by(
            pooled[pooled["dimension"] == "structure"].rename(columns={"level": "structure"}),
            "structure",
            "Recovery by structure × setting (%, 95% CI)",
        ),
    }


recovery_rates = metric_table(
    GROUP,
    "recovery_rates",
    om.recovery_rates,
    S.RecoveryRates,
    ins=["scored_replies", "scrambled_inputs"],
    cells=RECOVERY_CELLS,
    metadata=lambda df: {
        "plot": plots.order_recovery_by(
            df[df["language"] != "all"], "language", "Recovery by language × setting (%, 95% CI)"
        )
    },
    row="One row per model × language ('all' pools them) × setting: the recovery rate, the % of scrambled inputs "
    "whose canonical expression is exactly reconstructed, with a bootstrap 95% CI over canonical expressions, the "
    "parse-failure rate and the unperturbed run; the worst cells list their unrecovered inputs with the raw replies.",
    source="§4.1, App. Table 13",
)
recovery_breakdown = metric_table(
    GROUP,
    "recovery_breakdown",
    om.recovery_breakdown,
    S.RecoveryBreakdown,
    ins=["scored_replies"],
    cells=BREAKDOWN_CELLS,
    metadata=_breakdown_plots,
    row="One row per model × language × setting × level of one dimension (the 23 patterns, structure, frequency "
    "bin, kept adjacent pairs): the recovery rate with its bootstrap 95% CI.",
    source="App. Tables 18–20, 23",
)
error_categories = metric_table(
    GROUP,
    "error_categories",
    om.error_categories,
    S.ErrorCategories,
    ins=["scored_replies", "order_items"],
    prepare={"order_items": lambda items: om.lexicon(items["canonical"])},
    cells=CATEGORY_CELLS,
    row="One row per model × language × setting × outcome category (exact, related non-canonical, valid unrelated, "
    "…; mutually exclusive): its share of the scored inputs and the rule deciding it.",
    source="App. Table 26",
)
recovery_regression = metric_table(
    GROUP,
    "recovery_regression",
    reg.recovery_logit,
    S.RecoveryRegression,
    ins=["scored_replies"],
    cells=REGRESSION_CELLS,
    row="One row per model × setting × predictor: the log-odds coefficient of a logit of exact recovery on log "
    "frequency, language and structure, with its SE and Wald p-value.",
    source="App. Table 21",
)


class SemanticConfig(dg.Config):
    # "" / 0 = not used (a null default would be left out of the launchpad's scaffold)
    cross_encoder_path: str = Field(
        default="",
        description="Local directory of a multilingual cross-encoder "
        "(sentence-transformers CrossEncoder); empty = not used.",
    )
    embedding_model_path: str = Field(
        default="", description="Local directory of a sentence encoder suitable for zh/ja/ko; empty = not used."
    )
    nli_model_path: str = Field(
        default="",
        description="Local directory of a multilingual NLI model "
        "(transformers); empty = S_Logic is null with the reason.",
    )
    bertscore_model_path: str = Field(
        default="",
        description="Local directory of a BERT model for BERTScore (e.g. bert-base-chinese); empty = not used.",
    )
    bertscore_num_layers: int = Field(
        default=0, ge=0, description="Layer for BERTScore (required with bertscore_model_path); 0 = none."
    )


@dg.asset(key_prefix=PREFIX, group_name=GROUP, pool=POOL, ins=ALL_SCORED, kinds={"duckdb"})
def semantic_scores(config: SemanticConfig, scored_replies: pd.DataFrame, order_items: pd.DataFrame) -> dg.Output:
    """S_Acc, S_Logic and S_Info of every explanation against the reference meanings:
    metamorph.studies.order_probe.semantic.semantic_scores."""
    scorers = sem.load_scorers(
        config.cross_encoder_path or None,
        config.embedding_model_path or None,
        config.nli_model_path or None,
        config.bertscore_model_path or None,
        config.bertscore_num_layers or None,
    )
    df = sem.semantic_scores(scored_replies, items_from_frame(order_items), scorers)
    return validated_output(
        S.SemanticScores, df, "semantic_scores", {"components": dg.MetadataValue.text(scorers.describe())}
    )


diagnostics = metric_table(
    GROUP,
    "diagnostics",
    sem.diagnostics,
    S.Diagnostics,
    ins=["semantic_scores"],
    cells=DIAGNOSTICS_CELLS,
    row="One row per model × language × setting: the diagnostic scores S_Acc, S_Logic, S_Info, S_Cons, MDR, MDA, "
    "S_seq, S_struct and S_Rob of the explanations.",
    source="§4.2, Table 2",
)


@dg.asset(
    key_prefix=PREFIX,
    group_name=GROUP,
    pool=POOL,
    kinds={"duckdb", "sql"},
    deps=[recovery_rates, scored_replies, order_generations, order_prompts, scrambled_inputs, order_items],
)
def lineage_views(warehouse: DuckDBResource) -> dg.MaterializeResult:
    """Views reply_lineage and recovery_cell_lineage (sql/order_probe/lineage_views.sql): from a
    recovery cell to its prompts, raw replies and parse reasons. The metadata shows the unrecovered
    rows of recovery_cell_lineage for the worst cell of recovery_rates and the SQL selecting them."""
    return create_lineage_views(
        warehouse,
        GROUP,
        "reply_lineage",
        preview=ViewPreview(
            "recovery_cell_lineage",
            "recovery_rates",
            RECOVERY_CELLS,
            rename=(("language", "cell_language"),),
            where=lambda cell: "NOT correct AND reason <> 'call_error'",
            columns=(
                "model_id",
                "setting",
                "language",
                "item_id",
                "pattern",
                "scrambled",
                "canonical",
                "expression",
                "reason",
                "finish_reason",
                "response_text",
                "generation_key",
            ),
            order=("language", "item_id", "pattern"),
        ),
    )


# ------------------------------------------------------------------------------------------
# Model upgrades


@dg.asset(
    key_prefix=PREFIX,
    group_name=GROUP,
    pool=POOL,
    ins=ALL_SCORED,
    kinds={"duckdb"},
    check_specs=comparison_checks(GROUP),
)
def model_comparison(
    context: dg.AssetExecutionContext,
    config: ComparisonConfig,
    model_registry: ModelRegistryResource,
    scored_replies: pd.DataFrame,
):
    """One row per candidate model × metric × slice: the candidate against the registry's approved
    baseline on exact recovery per language × setting and per setting, paired over canonical
    expressions (each expression's recovery averaged over its scrambled inputs) — difference with a
    paired bootstrap 95% CI, paired permutation test, Holm, verdict. Code:
    metamorph.studies.order_probe.report.comparison_scores, metamorph.comparison.compare_models."""
    yield from comparison_output(
        GROUP,
        model_registry.models(),
        op_report.comparison_scores(scored_replies),
        op_report.COMPARED_METRICS,
        config,
        instance=context.instance,
    )
