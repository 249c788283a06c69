"""The document-format study as a :class:`metamorph.study.Study`: its assets, options, loader, plan,
headline and card."""

from __future__ import annotations

import argparse

from metamorph.study import Card, Comparison, Deferred, Option, Study, check_value, seed, whole_number
from metamorph.studies.format_robustness import vocab
from metamorph.studies.format_robustness.vocab import BASELINE_FORMAT, FORMATS

#: The most repeats ``--k`` takes: every repeat is a call per document (the paper runs 3), and a
#: mistyped k made ``metamorph plan`` build requests until memory ran out.
MAX_REPEATS = 100

#: Format routing's assets (§5.5 "Rte."): its re-run costs up to 3 calls per (instance, repeat)
#: more; ``--no-routing`` leaves them out of the model job (voting needs no call and stays).
ROUTING_ASSETS = ("routed_generations", "routed_outcomes", "format_routing", "mitigation_table")


def _load_sources(specs, limit, sample_seed):
    from metamorph.studies.format_robustness.sources import load_sources

    return load_sources(specs, limit=limit, sample_seed=sample_seed)


def _headline(con, options) -> str:
    from metamorph.studies.format_robustness.report import headline

    return headline(con, routing=not options.no_routing)


def check_formats(value: list[str]) -> list[str]:
    """The launchpad's ``formats`` (a list) checked as ``--formats`` checks the same formats joined by
    commas (:func:`format_list`): ``ValueError`` with the command line's words; returned unchanged."""
    check_value(format_list, ",".join(map(str, value)))
    return value


def format_list(text: str) -> list[str]:
    """``--formats``: comma-separated registered formats (``txt,md,pdf``), each once, the baseline
    ``txt`` among them (every metric compares a format with it, §4.1). Raises
    ``argparse.ArgumentTypeError`` naming an unknown format and the known ones, a repeated one, a
    missing baseline, or an empty list (one line; the command line exits 2)."""
    from metamorph.studies.format_robustness.renderers import RENDERERS

    names = [n.strip() for n in str(text).split(",")]
    if not any(names) or "" in names:
        raise argparse.ArgumentTypeError(f"must be formats separated by commas (e.g. txt,md,pdf), got {text!r:.60}")
    unknown = [n for n in names if n not in RENDERERS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown format {unknown[0]!r:.40}; the known formats are {', '.join(RENDERERS)}"
        )
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise argparse.ArgumentTypeError(f"format {repeated[0]!r} is given twice")
    if BASELINE_FORMAT not in names:
        raise argparse.ArgumentTypeError(
            f"must include the baseline format {BASELINE_FORMAT} (every metric compares a format with it): "
            f"{','.join([BASELINE_FORMAT, *names])}"
        )
    return names


K = Option(
    "k",
    f"repeats per document (1 to {MAX_REPEATS})",
    whole_number(1, MAX_REPEATS),
    default=3,
    targets=(("workflow_generations", "k"),),
    config_help=f"Repeats per workflow × document (r = 1..k), a whole number 1 to {MAX_REPEATS}: independent draws "
    "when decoding samples; when a local model decodes greedily, one computation shared by the k rows.",
)
NO_ROUTING = Option(
    "no_routing",
    "leave out format routing's re-run (up to 3 more calls per instance and repeat); the mitigation "
    "table then shows voting only",
    flag=True,
    drops_assets=ROUTING_ASSETS,
)

FORMATS_OPTION = Option(
    "formats",
    "document formats to render, comma-separated, the baseline txt among them: txt, md, json, csv (the paper's "
    "four, default), html, yaml, pdf, docx, xlsx (default: txt,md,json,csv)",
    format_list,
    default=list(FORMATS),
    targets=(("rendered_documents", "formats"),),
    config_help="Formats to render (registry keys), the baseline txt among them: the paper's txt, md, json, csv "
    "(default), and html, yaml, pdf, docx, xlsx. Same values as `--formats`.",
    config_type=list[str],
    config_check=check_formats,
)


def check_sample_seed(value: int | None) -> int | None:
    """The launchpad's ``sample_seed``: null (the first ``limit`` rows), or a seed as ``--sample-seed``
    takes it (:data:`metamorph.study.seed`); ``ValueError`` with the command line's words otherwise."""
    return value if value is None else check_value(seed, value)


SAMPLE_SEED = Option(
    "sample_seed",
    "seed of the random sample of --limit rows of a file source (§5.1; 0 to 2147483647)",
    seed,
    default=0,
    targets=(("source_instances", "sample_seed"),),
    config_help="Seed of the random sample of `limit` rows, 0 to 2147483647; null = the first `limit` rows of the "
    "file (earlier behaviour).",
    config_type=int | None,
    config_check=check_sample_seed,
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
    sources_help="Source specs: 'construct' (embedded default), or '<adapter>:<path|hf:// URI>' with adapter "
    "medqa, discrim_eval, credit_default, canonical. See metamorph.studies.format_robustness.sources.",
    limit_help="Keep N ≥ 1 rows of each source, drawn at random with sample_seed (§5.1); construct: N records; "
    "-1 = every row.",
    # the generation asset's max_tokens when --max-tokens is not given (read by plan.DEFAULT_PARAMS). It
    # fits the longest reply the instruction asks for. Measured in SmolLM2's tokenizer: 10 quotes of 12
    # English words (extract.MAX_EVIDENCE, MAX_EVIDENCE_WORDS) with the decision are 152 tokens; the
    # longest reply the local model's response schema admits (config/models.yaml: 10 items of 60
    # characters, here cut from construct records — field names and numbers tokenize densely) is 261
    # tokens, over the earlier 256. The share of replies cut at max_tokens is printed beside M1.
    max_tokens_default=512,
    max_tokens_help="Completion token limit (N ≥ 1); a cut answer is 'truncated'.",
    load_sources=_load_sources,
    cost_steps=Deferred("metamorph.studies.format_robustness.plan:cost_steps"),
    plan_notes=Deferred("metamorph.studies.format_robustness.plan:not_sent_notes"),
    headline=_headline,
    card=Card(("generation_outcomes", "mr_flags"), Deferred("metamorph.studies.format_robustness.report:card_rows")),
    options=(K, NO_ROUTING, FORMATS_OPTION, SAMPLE_SEED),
    sampling=("sample_seed",),
    takes_documents=True,
    sequential=True,
    # Metrics of the upgrade verdicts, and whether a higher value is better: Acc (§5.2) and the
    # violation rates M1/M2/M3 of MR1–MR3 (§4.1, §5.1; a violation is worse).
    compared_metrics={"accuracy": True, "M1": False, "M2": False, "M3": False},
    comparison=Comparison(
        ("generation_outcomes", "mr_flags"),
        Deferred("metamorph.studies.format_robustness.report:comparison_scores"),
        Deferred("metamorph.studies.format_robustness.report:planned_cells"),
    ),
    lineage=Deferred("metamorph.studies.format_robustness.lineage:TRACES", value=True),
    vocab=vocab,
)

__all__ = [
    "check_formats",
    "check_sample_seed",
    "FORMATS_OPTION",
    "K",
    "MAX_REPEATS",
    "NO_ROUTING",
    "ROUTING_ASSETS",
    "SAMPLE_SEED",
    "STUDY",
    "format_list",
]
