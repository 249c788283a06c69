"""What ``python -m pipelines.run wrapper_sensitivity`` prints after a run: the accuracy of each
wrapper beside its chance baseline and the share of replies cut at ``max_tokens``, FSI (best −
worst wrapper accuracy) and PSI (best − worst parseability) per model and task, their means over
tasks with bootstrap CIs, and the decomposition of FSI into schema compliance and conditional
accuracy (review, major 1). Tables are read from the DuckDB warehouse (schema
``wrapper_sensitivity``).
"""

from __future__ import annotations

import duckdb
import pandas as pd

from metamorph.comparison import item_scores
from metamorph.report_card import CARD_ROW_COLUMNS, clustered_rate_rows
from metamorph.sql import markdown_sections
from metamorph.studies.wrapper_sensitivity.metrics import validate_scored
from metamorph.studies.wrapper_sensitivity.vocab import DEFAULT_MODE, FAMILIES, HEADLINE_INDICES
from metamorph.studies.wrapper_sensitivity import study as declared

__all__ = [
    "COMPARED_METRICS",
    "RESAMPLING_UNITS",
    "planned_cells",
    "SECTIONS",
    "STUDY",
    "card_rows",
    "comparison_scores",
    "headline",
]

SECTIONS = (
    (
        "Accuracy A per wrapper (%, the paper's extractor; an unparseable reply is wrong) beside its baseline "
        "chance_pct (the accuracy of guessing: 100/options for choice tasks, 50 for yes/no, 0 for numbers), the "
        "parseability P and truncated_pct (replies cut at max_tokens); call_errors = calls that failed at the provider, "
        "left out of every figure (a cell with no reply says 'not measurable'):",
        "SELECT model_id, task, wrapper, coalesce(CAST(round(accuracy_pct, 1) AS VARCHAR), not_measurable) AS "
        "accuracy_pct, round(chance_pct, 1) AS chance_pct, "
        "round(parseability_pct, 1) AS parseability_pct, round(truncation_rate_pct, 1) AS truncated_pct, n, "
        "n_call_errors AS call_errors "
        "FROM wrapper_sensitivity.wrapper_cells WHERE mode = 'paper' ORDER BY model_id, task, wrapper",
    ),
    (
        "FSI = max − min accuracy over the wrappers, PSI = max − min parseability (the paper's extractor, §3.5; "
        "fractions 0–1; tied wrappers all listed); nFSI = FSI / mean accuracy; nFSI_chance = the same range of "
        "chance-adjusted accuracies (A − chance)/(100 − chance); the wrappers are compared on the items × seeds "
        "answered under every wrapper (an item whose call failed under one wrapper is left out of all):",
        "SELECT model_id, task, coalesce(CAST(round(fsi, 3) AS VARCHAR), not_measurable) AS FSI, "
        "coalesce(CAST(round(psi, 3) AS VARCHAR), not_measurable) AS PSI, round(nfsi, 3) AS nFSI, "
        "round(nfsi_chance, 3) AS nFSI_chance, best_wrapper, worst_wrapper, all_tied, n_call_errors AS call_errors "
        "FROM wrapper_sensitivity.fsi_psi ORDER BY model_id, task",
    ),
    (
        "Mean indices per model, bootstrap 95% CI over tasks (10,000 resamples):",
        'SELECT model_id, "index", coalesce(CAST(round(mean, 2) AS VARCHAR), not_measurable) AS mean, '
        "round(ci_low, 2) AS ci_low, round(ci_high, 2) AS ci_high, n_tasks, ci_note, n_call_errors AS call_errors "
        "FROM wrapper_sensitivity.mean_fsi_psi "
        'ORDER BY model_id, "index"',
    ),
    (
        "FSI decomposition (compliance vs conditional accuracy; null where a wrapper has no parseable reply, "
        "see note):",
        "SELECT model_id, task, coalesce(CAST(round(fsi_pp, 1) AS VARCHAR), not_measurable) AS FSI_pp, "
        "round(compliance_pp, 1) AS compliance_pp, "
        "round(conditional_pp, 1) AS conditional_pp, note FROM wrapper_sensitivity.fsi_decomposition "
        "ORDER BY model_id, task",
    ),
)


def headline(con: duckdb.DuckDBPyConnection) -> str:
    """Markdown text of :data:`SECTIONS`, read through ``con`` (the warehouse). A cell with nothing
    measurable prints its ``not_measurable`` text ("not measurable: every call failed (N of N)")
    in place of the number.

    Raises ``duckdb.CatalogException`` when the study's tables have not been materialized.
    """
    return markdown_sections(con, SECTIONS)


# ------------------------------------------------------------------------------------------
# Model upgrades: item scores for upgrade verdicts and the report card's rows.

#: The metrics of the upgrade verdicts and whether a higher value is better, as the study
#: declares them (:attr:`metamorph.study.Study.compared_metrics`).
COMPARED_METRICS = dict(declared.STUDY.compared_metrics)

#: The resampling unit of each compared / card metric: the columns naming the cluster the design
#: repeats, which every bootstrap interval and paired test of the metric resamples or pairs as one
#: unit (``item`` of :func:`metamorph.comparison.item_scores`, ``cluster`` of
#: :func:`metamorph.report_card.clustered_rate_rows`). docs/definitions.md lists these.
#: accuracy, parseability: an item of a task (its seeds and wrappers move together); FSI, PSI
#: (card only, from ``mean_fsi_psi``): the task.
RESAMPLING_UNITS: dict[str, tuple[str, ...]] = {
    "accuracy": ("task", "item_id"),
    "parseability": ("task", "item_id"),
    "FSI": ("task",),
    "PSI": ("task",),
}
STUDY = "wrapper_sensitivity"


def _mode_rows(scored: pd.DataFrame, mode: str) -> pd.DataFrame:
    """The replies of extraction ``mode`` (a call that failed at the provider is no reply: left out)."""
    s = validate_scored(scored, mode)
    return s[(s["mode"] == mode) & ~s["_call_error"]]


def planned_cells(options, specs=()) -> pd.DataFrame:
    """The (metric, slice) cells :func:`comparison_scores` will compare, with the items each will
    have, from the tasks a run with ``options`` loads (``metamorph plan``'s detectable effects,
    :func:`metamorph.power.plan_text`): ``metric, slice, n_items, outcomes`` — accuracy and
    parseability per ``task, wrapper`` (the five families, and the constrained arm when
    ``options.constrained_arm``) and per ``task``, each with the task's items; ``outcomes``: the 0/1
    outcomes an item's value averages (its seeds, times the five wrappers per task). Raises the
    loader's ``InputError``."""
    from metamorph.comparison import slice_label
    from metamorph.studies.wrapper_sensitivity.tasks import load_task
    from metamorph.studies.wrapper_sensitivity.vocab import CONSTRAINED_ARM

    items = [x for s in options.sources for x in load_task(s, limit=options.limit)]
    by_task = pd.Series([x.task for x in items]).value_counts().sort_index()
    wrappers = [*FAMILIES, *([CONSTRAINED_ARM] if options.constrained_arm else [])]
    k = len(options.seeds)
    rows = []
    for metric in COMPARED_METRICS:
        for task, n in by_task.items():
            rows += [(metric, slice_label({"task": task, "wrapper": w}), int(n), k) for w in wrappers]
            rows.append((metric, slice_label({"task": task}), int(n), k * len(FAMILIES)))
    return pd.DataFrame(rows, columns=["metric", "slice", "n_items", "outcomes"])


def comparison_scores(scored: pd.DataFrame, mode: str | None = None) -> pd.DataFrame:
    """Item scores (:func:`metamorph.comparison.item_scores`) of every model under extraction
    ``mode`` (default: the paper's extractor), the item being ``task/item_id``: ``accuracy``
    (correct) and ``parseability`` (parseable) averaged over seeds, per ``task, wrapper`` (every
    wrapper arm present); and per ``task`` averaged over the five standard wrappers and seeds.

    Raises ``ValueError`` for an invalid scored frame (:func:`~metamorph.studies.wrapper_sensitivity.metrics.validate_scored`).
    """
    s = _mode_rows(scored, mode or DEFAULT_MODE)
    std = s[s["wrapper"].isin(FAMILIES)]
    parts = []
    for metric, col in (("accuracy", "correct"), ("parseability", "parseable")):
        unit = list(RESAMPLING_UNITS[metric])
        parts.append(item_scores(s, metric=metric, value=col, item=unit, slices=["task", "wrapper"]))
        parts.append(item_scores(std, metric=metric, value=col, item=unit, slices=["task"]))
    return pd.concat(parts, ignore_index=True)


def card_rows(
    scored: pd.DataFrame, mean_indices: pd.DataFrame, mode: str | None = None, n_resamples: int = 1000, seed: int = 0
) -> pd.DataFrame:
    """Report-card rows per model: accuracy and parseability (%, five standard wrappers, all
    tasks and seeds; bootstrap 95% CI resampling items) and mean FSI / PSI (pp, with their
    bootstrap CIs over tasks from ``mean_fsi_psi``; lower is better)."""
    s = _mode_rows(scored, mode or DEFAULT_MODE)
    std = s[s["wrapper"].isin(FAMILIES)]
    parts = [
        clustered_rate_rows(
            std,
            study=STUDY,
            metric=metric,
            value=col,
            cluster=list(RESAMPLING_UNITS[metric]),
            n_resamples=n_resamples,
            seed=seed,
        )
        for metric, col in (("accuracy", "correct"), ("parseability", "parseable"))
    ]
    idx = mean_indices[mean_indices["index"].isin(HEADLINE_INDICES)]
    parts.append(
        pd.DataFrame(
            {
                "model_id": idx["model_id"],
                "study": STUDY,
                "metric": idx["index"],
                "slice": "all",
                "unit": "pp",
                "value": idx["mean"],
                "ci_low": idx["ci_low"],
                "ci_high": idx["ci_high"],
                "n": idx["n_tasks"],
                "higher_is_better": False,
            },
            columns=CARD_ROW_COLUMNS,
        )
    )
    return pd.concat(parts, ignore_index=True)
