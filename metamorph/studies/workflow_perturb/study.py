"""WorkflowPerturb as a :class:`metamorph.study.Study`: its assets, options, loader, plan, headline and card."""

from __future__ import annotations

from metamorph.study import Card, Comparison, Deferred, Option, Study, positive, whole_number
from metamorph.studies.workflow_perturb import vocab


def _load_sources(specs, limit):
    from metamorph.studies.workflow_perturb.workflows import load_goldens_by_source

    return load_goldens_by_source(specs, on_invalid="collect", limit=limit)


def _headline(con, options) -> str:
    from metamorph.studies.workflow_perturb.report import headline

    return headline(con)


LLM_GOLDENS = Option(
    "llm_goldens",
    "goldens sent to the LLM generator (first N valid ones)",
    positive,
    default=3,
    targets=(("perturbations_llm", "n_goldens"),),
    config_help="First N valid goldens sent to the LLM generator (N ≥ 1).",
)
JUDGE_VARIANTS = Option(
    "judge_variants",
    "first N deterministic variants scored by the LLM judge of each model (App. B.6; 3 calls each; "
    "default 9; the variants run golden by golden, 9 per golden)",
    positive,
    default=9,
    targets=(("judge_scores", "n_variants"),),
    config_help="First N deterministic variants to judge (N ≥ 1; 3 calls each).",
)
JUDGE_CONSTRAINED = Option(
    "judge_constrained",
    "constrain the judge's decoding to the B.6.4 JSON object (small local judges)",
    flag=True,
    targets=(("judge_scores", "constrained"),),
    config_help="Constrain decoding to the B.6.4 JSON object (JUDGE_REPLY_SCHEMA); an option for small local "
    "judges, not the paper's judge.",
)
#: The generator's completion limit (App. A): a reply holds a whole workflow, so at least 16 tokens.
MAX_TOKENS = Option(
    "max_tokens",
    "completion limit of an LLM generator call (perturbations_llm; >= 16); the judge keeps its own (the "
    "B.6.4 JSON object)",
    whole_number(16),
    default=320,
    targets=(("perturbations_llm", "max_tokens"),),
    config_help="Completion limit of a generator call (N ≥ 16).",
)

STUDY = Study(
    name="workflow_perturb",
    title="WorkflowPerturb (perturbed workflows, CI gate)",
    description="WorkflowPerturb: golden workflows perturbed by deterministic operators and an LLM generator, "
    "scored by structural, lexical and semantic metrics and an LLM judge; the CI gate's thresholds.",
    inputs=(
        "goldens",
        "perturbations",
        "perturbation_scores",
        "severity_table",
        "sensitivity_matrix",
        "strata_table",
        "threshold_recalibration",
        "firing_matrix",
    ),
    source_asset="goldens",
    generations="perturbations_llm",
    budget_assets=("perturbations_llm", "judge_scores"),
    default_sources=("embedded",),
    limit_rule="the first N rows",
    sources_help="'embedded' (goldens the project writes) or a WorFBench-shaped JSONL / Parquet path or hf:// URI.",
    limit_help="Keep the first N ≥ 1 rows of each source; -1 = every row.",
    load_sources=_load_sources,
    cost_steps=Deferred("metamorph.studies.workflow_perturb.plan:cost_steps"),
    headline=_headline,
    headline_without_models=True,
    card=Card(
        ("judge_scores", "perturbation_scores_llm"),
        Deferred("metamorph.studies.workflow_perturb.report:all_card_rows"),
        optional=("perturbation_scores_llm",),
    ),
    options=(LLM_GOLDENS, JUDGE_VARIANTS, JUDGE_CONSTRAINED, MAX_TOKENS),
    # Metrics of the upgrade verdicts, and whether a higher value is better. ``judge``: the judge's
    # score of a perturbed variant against its golden (App. B.6, in [0, 1]). Every variant is a
    # degraded copy of its golden (≥ 10% of the steps perturbed), and the study asks how sensitive a
    # metric is to that degradation (§5, Table 5), so a lower score of the same variant is better: a
    # candidate judge "improved" when it scores the degraded variants lower than the baseline judge.
    compared_metrics={"judge": False},
    comparison=Comparison(
        ("judge_scores",),
        Deferred("metamorph.studies.workflow_perturb.report:comparison_scores"),
        Deferred("metamorph.studies.workflow_perturb.report:planned_cells"),
    ),
    lineage=Deferred("metamorph.studies.workflow_perturb.lineage:TRACES", value=True),
    commands=Deferred("metamorph.studies.workflow_perturb.cli:COMMANDS", value=True),
    vocab=vocab,
)

__all__ = ["JUDGE_CONSTRAINED", "JUDGE_VARIANTS", "LLM_GOLDENS", "MAX_TOKENS", "STUDY"]
