"""The document-format study as a :class:`metamorph.study.Study`: its assets, options, loader, plan,
headline and card."""

from __future__ import annotations

from metamorph.study import Option, Study, whole_number

#: The most repeats ``--k`` takes: every repeat is a call per document (the paper runs 3), and a
#: mistyped k made ``metamorph plan`` build requests until memory ran out.
MAX_REPEATS = 100

#: Format routing's assets (§5.5 "Rte."): its re-run costs up to 3 calls per (instance, repeat)
#: more; ``--no-routing`` leaves them out of the model job (voting needs no call and stays).
ROUTING_ASSETS = ("routed_generations", "routed_outcomes", "format_routing", "mitigation_table")


def _load_sources(specs, limit):
    from metamorph.studies.format_robustness.sources import load_sources

    return load_sources(specs, limit=limit)


def _cost_steps(spec, options):
    from metamorph.studies.format_robustness.plan import cost_steps

    return cost_steps(spec, options)


def _headline(con, options) -> str:
    from metamorph.studies.format_robustness.report import headline

    return headline(con, routing=not options.no_routing)


def _card_rows(generation_outcomes, mr_flags):
    from metamorph.studies.format_robustness.report import card_rows

    return card_rows(generation_outcomes, mr_flags)


K = Option(
    "k",
    f"repeats per document (1 to {MAX_REPEATS})",
    whole_number(1, MAX_REPEATS),
    default=3,
    targets=(("workflow_generations", "k"),),
)
NO_ROUTING = Option(
    "no_routing",
    "leave out format routing's re-run (up to 3 more calls per instance and repeat); the mitigation "
    "table then shows voting only",
    flag=True,
    drops_assets=ROUTING_ASSETS,
)

STUDY = Study(
    name="format_robustness",
    title="Document formats (txt, md, json, csv; M1-M3)",
    description="Document-format robustness: the same records rendered as txt, md, json and csv documents; "
    "metamorphic relations M1-M3, accuracy, and the mitigations voting and format routing (§5.5).",
    inputs=("source_instances", "rendered_documents"),
    source_asset="source_instances",
    generations="workflow_generations",
    budget_assets=("workflow_generations", "routed_generations"),
    default_sources=("construct",),
    limit_rule="a seeded random sample of N rows (construct: N records)",
    load_sources=_load_sources,
    cost_steps=_cost_steps,
    headline=_headline,
    card=(("generation_outcomes", "mr_flags"), _card_rows),
    options=(K, NO_ROUTING),
    takes_documents=True,
)

__all__ = ["K", "MAX_REPEATS", "NO_ROUTING", "ROUTING_ASSETS", "STUDY"]
