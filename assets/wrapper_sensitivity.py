"""Study 2 — prompt-wrapper sensitivity (asset group ``wrapper_sensitivity``).

qa_items → wrapped_prompts → wrapper_generations (per model) → scored_answers, token_balance
(per model) → metric tables (all models).

Where the logic lives (one hop):

* items and loaders: :mod:`metamorph.studies.wrapper_sensitivity.tasks`; wrappers, padding, Δtok: :mod:`metamorph.studies.wrapper_sensitivity.wrappers`
* requests, scoring, context budget: :mod:`metamorph.studies.wrapper_sensitivity.plan`; extraction: :mod:`metamorph.studies.wrapper_sensitivity.extract`
* metrics: :mod:`metamorph.studies.wrapper_sensitivity.metrics`; schemas: :mod:`metamorph.studies.wrapper_sensitivity.schemas`,
  :mod:`metamorph.studies.wrapper_sensitivity.schemas`
"""

import json
from dataclasses import replace

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
    study_config,
    plan_and_guard,
    runner_options,
    validated_output,
)
from metamorph.studies.wrapper_sensitivity import plan as ws
from metamorph.studies.wrapper_sensitivity import metrics as wm
from metamorph.studies.wrapper_sensitivity import diagnostics as diag
from metamorph.studies.wrapper_sensitivity import regression as reg
from metamorph.studies.wrapper_sensitivity import report as ws_report
from metamorph.studies.wrapper_sensitivity.tasks import QAItem
from metamorph.measurability import is_call_error
from metamorph.runner import generation_frame, run_requests
from metamorph.studies.wrapper_sensitivity import schemas as S
from metamorph.studies.wrapper_sensitivity.wrappers import FAMILIES, WrappedPrompt, render_token_controlled
from assets.partitions import PER_MODEL, model_partitions
from assets.registry import REGISTRY_ENTRY
from metamorph.studies.wrapper_sensitivity.study import STUDY
from metamorph.studies.wrapper_sensitivity.vocab import HEADLINE_INDICES
from resources.llm import GenerationCacheResource, ModelRegistryResource

GROUP = "wrapper_sensitivity"
PREFIX = [GROUP]
POOL = "duckdb"


def items_from_frame(df: pd.DataFrame) -> list[QAItem]:
    return [
        QAItem(
            item_id=r.item_id,
            task=r.task,
            answer_type=r.answer_type,
            question=r.question,
            choices=tuple(tuple(c) for c in json.loads(r.choices_json)),
            gold=r.gold,
            passage=None if pd.isna(r.passage) else r.passage,
        )
        for r in df.itertuples()
    ]


def prompts_from_frame(df: pd.DataFrame) -> list[WrappedPrompt]:
    return [
        WrappedPrompt(
            item_id=r.item_id,
            task=r.task,
            family=r.wrapper,
            template_version=r.template_version,
            messages=json.loads(r.messages_json),
            pad_chars=int(r.pad_chars),
            pad_offset=int(r.pad_offset),
        )
        for r in df.itertuples()
    ]


#: Settings of qa_items: ``sources`` and ``limit`` are ``--source`` and ``--limit``.
ItemsConfig = study_config(STUDY, "qa_items", LimitConfig, name="ItemsConfig", module=__name__)


@dg.asset(key_prefix=PREFIX, group_name=GROUP, pool=POOL, kinds={"duckdb", "python"})
def qa_items(config: ItemsConfig) -> dg.Output:
    """The canonical QA items of every source (metamorph.studies.wrapper_sensitivity.tasks.load_tasks)."""
    rows = []
    for spec, x in STUDY.load(config.sources, config.row_limit):
        rows.append(
            {
                "task": x.task,
                "item_id": x.item_id,
                "answer_type": x.answer_type,
                "question": x.question,
                "passage": x.passage,
                "choices_json": json.dumps([list(c) for c in x.choices]),
                "n_choices": len(x.choices) if x.answer_type == "choice" else None,
                "gold": x.gold,
                "source": spec,
            }
        )
    df = pd.DataFrame(rows)
    df["n_choices"] = df["n_choices"].astype("Int64")
    return validated_output(
        S.QAItems, df, "qa_items", {"items_per_task": dg.MetadataValue.json(df.groupby("task").size().to_dict())}
    )


class PromptsConfig(dg.Config):
    families: list[str] = Field(default=list(FAMILIES), description="Wrapper families (§3.2).")
    template_version: str = Field(
        default="v1", description="Wrapper template version (metamorph/studies/wrapper_sensitivity/data/wrappers)."
    )


@dg.asset(key_prefix=PREFIX, group_name=GROUP, pool=POOL, kinds={"duckdb", "python"})
def wrapped_prompts(config: PromptsConfig, qa_items: pd.DataFrame) -> dg.Output:
    """Every item × wrapper, padded with newlines to the task's character budget (§3.3,
    metamorph.studies.wrapper_sensitivity.wrappers.render_token_controlled)."""
    prompts = render_token_controlled(items_from_frame(qa_items), config.families, config.template_version)
    df = pd.DataFrame([{**p.to_record(), "wrapper": p.family} for p in prompts])
    df["char_budget"] = df.groupby("task")["prompt_chars"].transform("max")
    df = df[
        [
            "task",
            "item_id",
            "wrapper",
            "template_version",
            "pad_chars",
            "pad_offset",
            "prompt_chars",
            "char_budget",
            "messages_json",
        ]
    ]
    example = df.iloc[: len(config.families)]
    sample = "\n\n".join(
        f"**{r.wrapper}**\n```\n{json.loads(r.messages_json)[-1]['content'][:700]}\n```" for r in example.itertuples()
    )
    return validated_output(S.WrappedPrompts, df, "wrapped_prompts", {"example_prompts": dg.MetadataValue.md(sample)})


#: Settings of wrapper_generations: ``seeds``, ``max_tokens``, ``constrained_arm`` and ``budget_usd`` are
#: the command line's options of those names.
WrapperGenerationConfig = study_config(
    STUDY,
    "wrapper_generations",
    BudgetConfig,
    name="WrapperGenerationConfig",
    module=__name__,
    temperature=(
        float,
        Field(
            default=ws.DEFAULT_PARAMS["temperature"], description="Sampling temperature (seeds only differ when > 0)."
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
def wrapper_generations(
    context: dg.AssetExecutionContext,
    config: WrapperGenerationConfig,
    model_registry: ModelRegistryResource,
    generation_cache: GenerationCacheResource,
    qa_items: pd.DataFrame,
    wrapped_prompts: pd.DataFrame,
) -> dg.Output:
    """model × task × wrapper × item × seed completions through the generation cache.

    For a local model every prompt is counted with its tokenizer and checked against the context
    budget before any call (metamorph.studies.wrapper_sensitivity.plan.count_and_check_budget).
    """
    spec = model_registry.get(context.partition_key)
    check_study_kinds("wrapper_sensitivity", False, [spec])  # a workflow under test answers documents
    provider = model_registry.provider(spec)
    items, prompts = items_from_frame(qa_items), prompts_from_frame(wrapped_prompts)
    counted = {}
    if hasattr(provider, "prompt_tokens"):
        counted = ws.count_and_check_budget(prompts, provider.prompt_tokens, config.max_tokens, provider.n_ctx)
    planned = ws.plan_wrapper_generations(
        items,
        prompts,
        spec,
        config.seeds,
        {"temperature": config.temperature, "max_tokens": config.max_tokens},
        config.constrained_arm,
    )
    cache = generation_cache.open()
    plan = plan_and_guard(
        context,
        [p.request for p in planned],
        spec,
        provider,
        cache,
        effective_budget(config.budget_usd, model_registry.budget_usd),
        "wrapper_generations",
    )
    outcomes, stats = run_requests([p.request for p in planned], provider, cache, **runner_options(context))
    df = generation_frame(
        [
            {"model_id": p.model_id, "task": p.task, "item_id": p.item_id, "wrapper": p.wrapper, "seed": p.seed}
            for p in planned
        ],
        outcomes,
        prompt_tokens=[
            counted.get((p.task, p.item_id, p.prompt.family), o.result.prompt_tokens) for p, o in zip(planned, outcomes)
        ],
    )
    return validated_output(
        S.WrapperGenerations, df, "wrapper_generations", generation_metadata(df, stats, spec, by="wrapper", plan=plan)
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
            "unparseable_share",
            asset=[*PREFIX, "scored_answers"],
            description="Unparseable share of the replies under the paper's extractor (the headline mode); "
            "calls that failed are no replies.",
        )
    ],
)
def scored_answers(wrapper_generations: pd.DataFrame, qa_items: pd.DataFrame):
    """Every generation under the paper's extractor (the headline) and strict / normalized / lenient
    extraction (metamorph.studies.wrapper_sensitivity.plan.score_generations)."""
    df = ws.score_generations(wrapper_generations, items_from_frame(qa_items))
    failed = is_call_error(df["reason"])
    norm = df[(df["mode"] == wm.DEFAULT_MODE) & ~failed]  # a failed call is no reply: in no share
    share = float((~norm["parseable"]).mean()) if len(norm) else 0.0
    yield validated_output(
        S.ScoredAnswers,
        df,
        "scored_answers",
        {
            "parseable_pct_by_mode": dg.MetadataValue.json(
                (df[~failed].groupby("mode")["parseable"].mean() * 100).round(1).to_dict()
            ),
            "n_call_errors": dg.MetadataValue.int(int((failed & (df["mode"] == wm.DEFAULT_MODE)).sum())),
            f"reasons_{wm.DEFAULT_MODE}": dg.MetadataValue.json(norm["reason"].value_counts().to_dict()),
        },
    )
    bad = norm[~norm["parseable"]][["task", "item_id", "wrapper", "seed", "reason", "generation_key"]]
    yield dg.AssetCheckResult(
        check_name="unparseable_share",
        passed=share <= 0.5,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "unparseable_pct": round(100 * share, 2),
            "examples": dg.MetadataValue.md(markdown_table(bad.head(20)) if len(bad) else "_none_"),
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
def token_balance(wrapper_generations: pd.DataFrame) -> dg.Output:
    """Δtok per item and the matched subset (§3.3): metamorph.studies.wrapper_sensitivity.plan.token_balance."""
    df = ws.token_balance(wrapper_generations)
    return validated_output(
        S.TokenBalance,
        df,
        "token_balance",
        {
            "matched_items": dg.MetadataValue.int(int(df["matched"].sum())),
            "items": dg.MetadataValue.int(len(df)),
            "plot": plots.histogram(df["delta_tok"].dropna() * 100, "Δtok over wrappers (%)", threshold=5.0),
        },
    )


# ------------------------------------------------------------------------------------------
# Cross-model tables

ALL_SCORED = {"scored_answers": dg.AssetIn(key=[*PREFIX, "scored_answers"])}


class ModeConfig(dg.Config):
    mode: str = Field(
        default=wm.DEFAULT_MODE,
        description="Extraction variant for the headline tables: paper (the "
        "paper's §3.5 extractor, default), strict, normalized or lenient.",
    )


def _standard(scored: pd.DataFrame, config=None) -> pd.DataFrame:
    """The answers of the five standard wrappers (the constrained arm left out)."""
    return scored[scored["wrapper"].isin(FAMILIES)]


def _mode_cells(scored: pd.DataFrame, config: ModeConfig) -> pd.DataFrame:
    """The paired cells of the five standard wrappers in the config's extraction mode
    (wm.cell_metrics with paired=True: an item × seed whose call failed under any wrapper is left
    out of every wrapper, so the wrappers are compared on the same replies)."""
    return wm.cell_metrics(_standard(scored), config.mode, paired=True)


def _mode_answers(scored: pd.DataFrame, config: ModeConfig) -> pd.DataFrame:
    """The answers behind those cells: the five standard wrappers in the config's mode."""
    standard = _standard(scored)
    return standard[standard["mode"] == config.mode]


def _matched_items(token_balance: pd.DataFrame, config=None) -> pd.DataFrame:
    """The token-matched items (Δtok ≤ 5%) of token_balance."""
    return token_balance[token_balance["matched"]][["model_id", "task", "item_id"]]


# How the metric tables read in the UI (assets._cells): the rows behind a cell are scored answers
# (raw completion: wrapper_generations by generation_key).
_PCT = (0.0, 100.0)


def _scored(inputs: dict) -> pd.DataFrame:
    return inputs["scored_answers"]


def _incorrect(rows: pd.DataFrame, cell) -> pd.DataFrame:
    """The wrong replies behind a cell (a failed call is no reply: not listed)."""
    wrong = rows[~rows["correct"].astype(bool) & ~is_call_error(rows["reason"])]
    return wrong.sort_values(["wrapper", "item_id", "seed"], kind="stable")


def _worst_wrapper_incorrect(rows: pd.DataFrame, cell) -> pd.DataFrame:
    """The wrong answers of the cell's worst wrapper(s) (ties are listed joined by ', ')."""
    return _incorrect(rows[rows["wrapper"].isin(str(cell.get("worst_wrapper") or "").split(", "))], cell)


_BEHIND = Behind(
    _scored,
    _incorrect,
    show=("wrapper", "item_id", "seed", "mode", "value", "gold", "parseable", "reason"),
    table="wrapper_generations",
    first=("item_id", "wrapper", "seed", "value", "gold", "response_text"),
    varying=("seed",),
)
CELL_CELLS = Cells(
    "accuracy_pct",
    ("model_id", "task", "wrapper", "mode"),
    worse="low",
    bounds=_PCT,
    select=lambda df: (df["mode"] == wm.DEFAULT_MODE) & df["wrapper"].isin(FAMILIES),
    headline="accuracy_pct/{model_id}/{task}/{wrapper}",
    behind=_BEHIND,
    trace=lambda c: ("accuracy", c["model_id"], {"task": c["task"], "wrapper": c["wrapper"], "mode": c["mode"]}),
)
FSI_CELLS = Cells(
    "fsi",
    ("model_id", "task"),
    bounds=(0.0, 1.0),
    digits=4,
    headline="FSI/{model_id}/{task}",
    behind=replace(_BEHIND, pick=_worst_wrapper_incorrect),
    trace=lambda c: ("FSI", c["model_id"], {"task": c["task"]}),
)
MEAN_CELLS = Cells(
    "mean", ("model_id", "index"), worse=None, ci=("ci_low", "ci_high"), digits=4, headline="{index}/{model_id}"
)
CORRELATION_CELLS = Cells("r", ("scope", "model_id"), worse=None, bounds=(-1.0, 1.0), digits=3)
FE_CELLS = Cells("beta", (), worse=None, ci=("ci_low", "ci_high"), digits=4)
ITEM_CELLS = Cells("coef", ("term",), worse=None, ci=("ci_low", "ci_high"), digits=4)
DECOMPOSITION_CELLS = Cells("fsi_pp", ("model_id", "task"), worse=None, bounds=_PCT)
WINS_CELLS = Cells("win_pct", ("wrapper",), worse=None, bounds=_PCT)
MATCHED_CELLS = Cells("fsi_matched_pp", ("model_id", "task"), worse=None, bounds=_PCT)


def _headline_plot(df: pd.DataFrame) -> dict:
    head = df[(df["mode"] == wm.DEFAULT_MODE) & df["wrapper"].isin(FAMILIES)]
    return {
        "plot": plots.scatter(head, "parseability_pct", "accuracy_pct", f"Accuracy vs parseability ({wm.DEFAULT_MODE})")
    }


SCORED = ["scored_answers"]
wrapper_cells = metric_table(
    GROUP,
    "wrapper_cells",
    wm.cell_metrics_by_mode,
    S.WrapperCells,
    ins=SCORED,
    cells=CELL_CELLS,
    metadata=_headline_plot,
    row="One row per model × task × wrapper × extraction mode: accuracy A, parseability P, Acc|parse and the "
    "truncation rate of the cell's generations; the worst cells (paper extractor) list their wrong answers with "
    "the raw replies.",
    source="§4",
)
fsi_psi = metric_table(
    GROUP,
    "fsi_psi",
    wm.fsi_psi,
    S.WrapperFSI,
    ins=SCORED,
    config=ModeConfig,
    prepare={"scored_answers": _mode_cells},
    rows={"scored_answers": _mode_answers},
    cells=FSI_CELLS,
    row="One row per model × task: FSI (accuracy spread over the five wrappers), PSI (parseability spread), nFSI "
    "and the chance-adjusted nFSI, with the best and worst wrappers; the worst cells list the worst wrapper's "
    "wrong answers with the raw replies.",
    source="§4 (FSI paper), review minor 2",
)
mean_fsi_psi = metric_table(
    GROUP,
    "mean_fsi_psi",
    wm.mean_indices,
    S.WrapperMeanIndices,
    ins=["fsi_psi"],
    kwargs={"n_resamples": 10_000, "seed": 0},
    cells=MEAN_CELLS,
    metadata=lambda df: {"plot": plots.mean_with_ci(df, HEADLINE_INDICES)},
    row="One row per model × index (FSI, PSI, nFSI …): its mean over the model's tasks with a percentile bootstrap "
    "95% CI over tasks (10,000 resamples).",
    source="§4, §5",
)
acc_parse_correlation = metric_table(
    GROUP,
    "acc_parse_correlation",
    reg.pearson_acc_parse,
    S.WrapperCorrelation,
    ins=SCORED,
    config=ModeConfig,
    prepare={"scored_answers": _mode_cells},
    cells=CORRELATION_CELLS,
    row="One row pooled over all cells and one per model: Pearson r between the cells' accuracy and parseability, "
    "with its p-value.",
    source="§5",
)
fixed_effects = metric_table(
    GROUP,
    "fixed_effects",
    reg.fixed_effects_regression,
    S.WrapperFERegression,
    ins=SCORED,
    config=ModeConfig,
    prepare={"scored_answers": _mode_cells},
    # the design does not identify β (e.g. one model, one task): a row with the reason
    not_estimated=lambda args, inputs, config: {
        "n_cells": int((args[0]["n"] > 0).sum()),
        "n_call_errors": int(args[0]["n_call_errors"].sum()),
    },
    cells=FE_CELLS,
    row="One row: β of the cell-level regression A = βP + α_m + γ_t + δ_f by WLS, with its SE, CI and partial R² "
    "(a design that does not identify β gives a row with a note, not an error).",
    source="§5.2",
)
item_level_model = metric_table(
    GROUP,
    "item_level_model",
    reg.item_level_model,
    S.WrapperItemModel,
    ins=SCORED,
    config=ModeConfig,
    config_args=("mode",),
    prepare={"scored_answers": _standard},
    # e.g. 'parseable' constant: its coefficient is not identified
    not_estimated=lambda args, inputs, config: {
        "mode": config.mode,
        "n_obs": int(((args[0]["mode"] == config.mode) & ~is_call_error(args[0]["reason"])).sum()),
        "n_call_errors": int(((args[0]["mode"] == config.mode) & is_call_error(args[0]["reason"])).sum()),
    },
    cells=ITEM_CELLS,
    row="One row per coefficient of the item-level linear probability model of correctness on parseability and "
    "wrapper, with cluster-robust SEs by item.",
    source="the review, major 3",
)
fsi_decomposition = metric_table(
    GROUP,
    "fsi_decomposition",
    diag.decomposition,
    S.WrapperDecomposition,
    ins=SCORED,
    config=ModeConfig,
    prepare={"scored_answers": _mode_cells},
    cells=DECOMPOSITION_CELLS,
    row="One row per model × task: FSI split into a compliance part (parseability) and a conditional-accuracy part.",
    source="the review, major 1 (on §3.5, §5.2)",
)
wrapper_wins = metric_table(
    GROUP,
    "wrapper_wins",
    diag.win_counts,
    S.WrapperWins,
    ins=SCORED,
    config=ModeConfig,
    prepare={"scored_answers": _mode_cells},
    cells=WINS_CELLS,
    metadata=lambda df: {"plot": plots.bars(df, "wrapper", "wins", "Wrapper wins over model × task")},
    row="One row per wrapper: in how many model × task combinations it has the highest accuracy (ties all win).",
    source="§5",
)
matched_fsi = metric_table(
    GROUP,
    "matched_fsi",
    diag.matched_fsi,
    S.WrapperMatchedFSI,
    ins=["scored_answers", "token_balance"],
    config=ModeConfig,
    config_args=("mode",),
    prepare={"scored_answers": _standard, "token_balance": _matched_items},
    cells=MATCHED_CELLS,
    row="One row per model × task: FSI and PSI on the items whose prompts are token-matched (Δtok ≤ 5%) next to the "
    "full FSI and PSI.",
    source="§3.3, §5",
)
constrained_falsifier = metric_table(
    GROUP,
    "constrained_falsifier",
    diag.constrained_falsifier,
    S.WrapperConstrainedFalsifier,
    ins=SCORED,
    config=ModeConfig,
    config_args=("mode",),
    checks=False,
    row="One row per model × task: FSI and PSI with free vs JSON-schema constrained json decoding (the review's "
    "falsifier; empty unless the constrained arm was run).",
)


@dg.asset(
    key_prefix=PREFIX,
    group_name=GROUP,
    pool=POOL,
    kinds={"duckdb", "sql"},
    deps=[wrapper_cells, scored_answers, wrapper_generations, wrapped_prompts, qa_items],
)
def lineage_views(warehouse: DuckDBResource) -> dg.MaterializeResult:
    """Views answer_lineage, cell_lineage and spread_lineage (sql/wrapper_sensitivity/lineage_views.sql):
    from an accuracy, FSI or PSI cell to the exact request, raw completion, wrapped prompt and item
    (``metamorph trace --study wrapper_sensitivity``). The metadata shows the wrong answers of
    cell_lineage for the worst cell of wrapper_cells and the SQL selecting them."""
    return create_lineage_views(
        warehouse,
        GROUP,
        "answer_lineage",
        preview=ViewPreview(
            "cell_lineage",
            "wrapper_cells",
            CELL_CELLS,
            where=lambda cell: "NOT correct",
            columns=(
                "model_id",
                "task",
                "wrapper",
                "mode",
                "item_id",
                "seed",
                "value",
                "gold",
                "reason",
                "finish_reason",
                "response_text",
                "generation_key",
            ),
            order=("item_id", "seed"),
        ),
    )


# ------------------------------------------------------------------------------------------
# Model upgrades


class WrapperComparisonConfig(ComparisonConfig):
    mode: str = Field(
        default=wm.DEFAULT_MODE, description="Extraction variant the verdicts use (default: the paper's extractor)."
    )


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
    config: WrapperComparisonConfig,
    model_registry: ModelRegistryResource,
    scored_answers: pd.DataFrame,
):
    """One row per candidate model × metric × slice: the candidate against the registry's approved
    baseline on accuracy and parseability per task × wrapper and per task, paired over items —
    difference with a paired bootstrap 95% CI, exact McNemar, Holm, verdict. Code:
    metamorph.studies.wrapper_sensitivity.report.comparison_scores, metamorph.comparison.compare_models."""
    yield from comparison_output(
        GROUP,
        model_registry.models(),
        ws_report.comparison_scores(scored_answers, config.mode),
        ws_report.COMPARED_METRICS,
        config,
        instance=context.instance,
    )
