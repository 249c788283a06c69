"""The wrapper-sensitivity study as a :class:`metamorph.study.Study`: its assets, options, loader,
plan, headline and card."""

from __future__ import annotations

from metamorph.study import Card, Comparison, Deferred, Option, Study, seed
from metamorph.studies.wrapper_sensitivity import vocab


def _load_sources(specs, limit):
    from metamorph.studies.wrapper_sensitivity.tasks import load_tasks

    return load_tasks(specs, limit=limit)


def _headline(con, options) -> str:
    from metamorph.studies.wrapper_sensitivity.report import headline

    return headline(con)


#: Sampling seeds of ``wrapper_generations`` (0 to 2**31 - 1).
SEEDS = Option(
    "seeds",
    "sampling seeds",
    seed,
    default=[0, 1, 2, 3, 4],
    nargs="+",
    targets=(("wrapper_generations", "seeds"),),
    config_help="Sampling seeds, each 0 to 2147483647 (2^31 - 1; 5 by default).",
)
CONSTRAINED_ARM = Option(
    "constrained_arm",
    "add constrained json decoding (the json wrapper decoded under its JSON schema)",
    flag=True,
    targets=(("wrapper_generations", "constrained_arm"),),
    config_help="Also run json with JSON-schema constrained decoding.",
)

STUDY = Study(
    name="wrapper_sensitivity",
    title="Wrapper sensitivity (prompt wrappers, FSI / PSI)",
    description="Wrapper sensitivity: the same QA items in five prompt wrappers (plain, chat, markdown, json, "
    "xml), padded to one character budget; accuracy, parseability, FSI and PSI per wrapper.",
    inputs=("qa_items", "wrapped_prompts"),
    source_asset="qa_items",
    generations="wrapper_generations",
    default_sources=("synthetic",),
    limit_rule="the first N items",
    sources_help="Task specs: 'synthetic' (embedded default) or '<task>:<path|hf:// URI>' with task boolq, "
    "arc_challenge, gsm8k, commonsense_qa, winogrande, hellaswag, piqa. See metamorph.studies.wrapper_sensitivity.tasks.",
    limit_help="Keep the first N ≥ 1 items of each source; -1 = every item.",
    # the paper's completion limit (read by plan.DEFAULT_PARAMS)
    max_tokens_default=24,
    max_tokens_help="Completion limit (N ≥ 1; the default is the paper's; truncation is reported).",
    load_sources=_load_sources,
    cost_steps=Deferred("metamorph.studies.wrapper_sensitivity.plan:cost_steps"),
    headline=_headline,
    card=Card(("scored_answers", "mean_fsi_psi"), Deferred("metamorph.studies.wrapper_sensitivity.report:card_rows")),
    options=(SEEDS, CONSTRAINED_ARM),
    # Metrics of the upgrade verdicts (higher is better for both): accuracy and parseability under
    # the headline extractor (§3.5), the two quantities whose ranges over wrappers are FSI and PSI (§4).
    compared_metrics={"accuracy": True, "parseability": True},
    comparison=Comparison(
        ("scored_answers",),
        Deferred("metamorph.studies.wrapper_sensitivity.report:comparison_scores"),
        Deferred("metamorph.studies.wrapper_sensitivity.report:planned_cells"),
    ),
    lineage=Deferred("metamorph.studies.wrapper_sensitivity.lineage:TRACES", value=True),
    vocab=vocab,
)

__all__ = ["CONSTRAINED_ARM", "SEEDS", "STUDY"]
