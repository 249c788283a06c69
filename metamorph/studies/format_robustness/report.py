"""What ``python -m pipelines.run format_robustness`` prints after a run.

One vocabulary, the paper's (§4.1, §5.2): MR1 / MR2 / MR3 are the metamorphic *relations*
(decision invariance, evidence invariance, execution-stability invariance); M1 / M2 / M3 are
their *violation rates*:

* M1 / M2 / M3 (%): the share of (instance, repeat) groups whose formats violate MR1 (the decision
  differs between two formats; ⊥ is an outcome of its own), MR2 (the evidence-category sets of two
  formats have Jaccard < θ = 0.3) and MR3 (the k repeats agree in one format and not in another),
  with bootstrap 95% CIs resampling instances — Table 1;
* truncated (%): the share of replies cut at ``max_tokens`` (printed beside M1: a cut reply with
  a readable label keeps it, one without is ⊥ and can flip M1);
* echoed: evidence items that copy the prompt's instructions
  (:mod:`metamorph.studies.format_robustness.echo`), of all evidence items; they are not evidence
  in M2;
* Acc_f (%): accuracy per format, ⊥ counting as wrong, beside the majority-label baseline (the
  accuracy of always answering the most frequent gold label of the same replies);
* the decision distribution, so that a low M1 can be read against a model that always answers
  the same label.

Tables are read from the DuckDB warehouse (schema ``format_robustness``).
"""

from __future__ import annotations

import re
import textwrap

import duckdb
import pandas as pd

from metamorph import stats
from metamorph.comparison import item_scores
from metamorph.report_card import clustered_rate_rows
from metamorph.sql import markdown_sections
from metamorph.studies.format_robustness.plan import metric_input
from metamorph.studies.format_robustness import study as declared

__all__ = [
    "COMPARED_METRICS",
    "RESAMPLING_UNITS",
    "planned_cells",
    "LEGEND",
    "SECTIONS",
    "STUDY",
    "VOTE_ONLY_SECTION",
    "card_rows",
    "comparison_scores",
    "headline",
    "violation_table",
]

#: The legend printed above the violation table: every number it shows, defined; two paragraphs
#: wrapped at 100 characters (a terminal line a person reads).
LEGEND = "\n".join(
    textwrap.fill(paragraph, 100)
    for paragraph in (
        "M1, M2, M3 = violation rates (%) of the metamorphic relations MR1 (same decision in every format), "
        "MR2 (same evidence: the evidence-category sets of every pair of formats have Jaccard >= 0.3) and MR3 "
        "(the k repeats agree in every format or in none), over (instance, repeat) groups (paper §4.1, §5.2, "
        "Table 1); [bootstrap 95% CI resampling instances]. When decoding samples, each of the k repeats is an "
        "independent draw with its own seed; when it is deterministic (a local model decoding greedily) the k "
        "repeats are one computation, and M3 and voting are printed as 'not measurable' instead of a 0 that "
        "would read as perfect stability.",
        "truncated % = replies cut at max_tokens (a cut reply keeps a readable label, else it is ⊥ = "
        "unparseable). echoed = evidence items that copy the prompt's instructions instead of the document, of "
        "all evidence items; they are left out of MR2.",
    )
)


def _delta_columns(alias: str) -> str:
    """SQL of the columns ``ΔM1 pp``, ``ΔM2 pp``, ``ΔM3 pp`` (one decimal, ``not measurable`` for a
    null Δ) from ``<alias>relation`` / ``<alias>delta_pp`` rows."""
    return ", ".join(
        f"coalesce(printf('%.1f', max(CASE {alias}relation WHEN 'MR{i}' THEN {alias}delta_pp END)), "
        f"'not measurable') AS \"ΔM{i} pp\""
        for i in (1, 2, 3)
    )


SECTIONS = (
    (
        "Accuracy Acc_f by format (%): correct replies among all replies with a gold label, ⊥ counted as wrong; "
        "n = those replies (instances × k repeats), n_unparseable = the ⊥ among them. "
        "Baseline: majority_baseline_pct = the accuracy of always answering the dataset's most frequent gold label.",
        "SELECT workflow_id, dataset, format, round(accuracy_pct, 1) AS accuracy_pct, "
        "round(majority_baseline_pct, 1) AS majority_baseline_pct, n, n_unparseable "
        "FROM format_robustness.accuracy_by_format ORDER BY workflow_id, dataset, "
        "CASE format WHEN 'txt' THEN 0 WHEN 'md' THEN 1 WHEN 'json' THEN 2 WHEN 'csv' THEN 3 ELSE 4 END, format",
    ),
    (
        "What the model answered (all formats and repeats; ⊥ = unparseable, with the reason). A model that always "
        "gives the same answer cannot violate MR1:",
        "SELECT workflow_id, dataset, coalesce(decision, '⊥ (' || parse_reason || ')') AS outcome, count(*) AS n "
        "FROM format_robustness.extracted_decisions GROUP BY ALL ORDER BY workflow_id, dataset, n DESC, outcome",
    ),
    (
        "Mitigations (paper §5.5, Table 3): ΔM = M before − M after, in percentage points (positive = fewer "
        "violations). vote = the majority decision over the k repeats in each format; routing = every input converted to "
        "the workflow's best format (routed_to) and run again, so the formats can no longer disagree:",
        "SELECT m.workflow_id, m.dataset, m.strategy, CASE m.strategy WHEN 'routing' THEN r.best_format ELSE '–' END "
        "AS routed_to, " + _delta_columns("m.") + " "
        "FROM format_robustness.mitigation_table AS m LEFT JOIN format_robustness.routing_choice AS r "
        "USING (workflow_id, dataset) WHERE m.workflow_id <> 'Avg.' AND m.dataset <> 'Avg.' "
        "GROUP BY ALL ORDER BY m.workflow_id, m.dataset, m.strategy DESC",
    ),
)


#: The accuracy section when some calls failed: each format's failed calls (not in n) and why a
#: cell has no value (printed "–", never "nan").
ACCURACY_WITH_CALL_ERRORS = (
    SECTIONS[0][0] + " n_call_errors = calls that failed at the provider (not replies, not in n).",
    "SELECT workflow_id, dataset, format, coalesce(CAST(round(accuracy_pct, 1) AS VARCHAR), '–') AS accuracy_pct, "
    "coalesce(CAST(round(majority_baseline_pct, 1) AS VARCHAR), '–') AS majority_baseline_pct, n, n_unparseable, "
    "n_call_errors, "
    "coalesce(not_measurable, '') AS not_measurable "
    "FROM format_robustness.accuracy_by_format ORDER BY workflow_id, dataset, "
    "CASE format WHEN 'txt' THEN 0 WHEN 'md' THEN 1 WHEN 'json' THEN 2 WHEN 'csv' THEN 3 ELSE 4 END, format",
)


def short_reason(reason: str) -> str:
    """A ``not_measurable`` text as a table cell: ``not measurable: <why>`` with a trailing
    explanation in brackets cut when it is long (a count such as ``(24 of 24)`` stays), so
    ``not measurable: every call failed (24 of 24)`` prints whole and the deterministic-decoding
    note as ``not measurable: deterministic decoding``."""
    if not reason.startswith("not measurable"):
        return "not measurable"
    return re.sub(r" \([^()]{25,}\)$", "", reason)


def violation_table(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """One row per workflow × dataset: ``workflow_id, dataset, n_instances, n_groups, M1 %,
    truncated %, M2 %, echoed, M3 %`` (strings; each M with its CI in brackets, or why it is not
    measurable when ``mr_violations`` says so (:func:`short_reason`: ``not measurable: every call
    failed (24 of 24)``); ``echoed`` as ``<echoed items> of <all items>``).

    M1/M2/M3 come from ``mr_violations``; ``truncated %`` (one decimal) and ``echoed`` from the
    ``extracted_decisions`` rows of the same workflow and dataset. Raises
    ``duckdb.CatalogException`` when the tables have not been materialized.
    """
    mrv = con.execute(
        "SELECT workflow_id, dataset, relation, round(violation_pct, 1) AS pct, "
        "round(ci_low_pct, 1) AS ci_low, round(ci_high_pct, 1) AS ci_high, n_instances, n_groups, not_measurable "
        "FROM format_robustness.mr_violations ORDER BY workflow_id, dataset, relation"
    ).df()
    side = con.execute(
        "SELECT workflow_id, dataset, 100.0 * avg(CASE WHEN truncated THEN 1 ELSE 0 END) AS truncated_pct, "
        "sum(n_echoed) AS n_echoed, sum(n_echoed + n_evidence) AS n_items "
        "FROM format_robustness.extracted_decisions GROUP BY workflow_id, dataset"
    ).df()
    side = {(r.workflow_id, r.dataset): r for r in side.itertuples()}
    rows = []
    for (workflow, dataset), g in mrv.groupby(["workflow_id", "dataset"], sort=True):
        row = {
            "workflow_id": workflow,
            "dataset": dataset,
            "n_instances": int(g["n_instances"].iloc[0]),
            "n_groups": int(g["n_groups"].iloc[0]),
        }
        cells = {}
        for r in g.itertuples():
            ci = "" if r.ci_low is None or r.ci_low != r.ci_low else f" [{r.ci_low}, {r.ci_high}]"
            if isinstance(r.not_measurable, str):
                cells[r.relation] = short_reason(r.not_measurable)
            else:
                cells[r.relation] = "–" if r.pct != r.pct else f"{r.pct:.1f}{ci}"
        s = side.get((workflow, dataset))
        row["M1 %"] = cells.get("MR1", "–")
        row["truncated %"] = "–" if s is None else f"{s.truncated_pct:.1f}"
        row["M2 %"] = cells.get("MR2", "–")
        row["echoed"] = "–" if s is None else f"{int(s.n_echoed)} of {int(s.n_items)}"
        row["M3 %"] = cells.get("MR3", "–")
        rows.append(row)
    return pd.DataFrame(rows)


#: The mitigations section when format routing was not run (``pipelines.run --no-routing``):
#: voting only, from ``vote_aggregation`` (a ``mitigation_table`` left by an earlier run is not shown).
VOTE_ONLY_SECTION = (
    "Mitigations (paper §5.5, Table 3), voting only — format routing was not run (--no-routing): ΔM = M "
    "before − M after, in percentage points (positive = fewer violations); vote = the majority decision "
    "over the k repeats:",
    "SELECT workflow_id, dataset, 'vote' AS strategy, " + _delta_columns("") + " "
    "FROM format_robustness.vote_aggregation GROUP BY ALL ORDER BY workflow_id, dataset",
)


def headline(con: duckdb.DuckDBPyConnection, routing: bool = True) -> str:
    """Markdown text: :data:`LEGEND`, :func:`violation_table`, then :data:`SECTIONS` (with
    ``routing=False`` the mitigations section is :data:`VOTE_ONLY_SECTION`).

    When calls failed, the accuracy section is :data:`ACCURACY_WITH_CALL_ERRORS` (their count per
    format, and why a cell has no value). Raises ``duckdb.CatalogException`` when the study's
    tables have not been materialized.
    """
    sections = SECTIONS if routing else (*SECTIONS[:-1], VOTE_ONLY_SECTION)
    failed = con.execute(
        "SELECT count(*) FROM format_robustness.accuracy_by_format WHERE n_call_errors > 0 OR not_measurable IS NOT NULL"
    ).fetchone()[0]
    if failed:  # calls failed: the accuracy table says how many per format and which cells have no value
        sections = (ACCURACY_WITH_CALL_ERRORS, *sections[1:])
    table = violation_table(con).to_markdown(index=False)
    few = few_clusters_line(con)
    return "\n".join(["", LEGEND, table, *([few] if few else []), markdown_sections(con, sections)])


def few_clusters_line(con: duckdb.DuckDBPyConnection) -> str | None:
    """The line printed under the violation table when some of its intervals rest on fewer than
    :data:`metamorph.stats.MIN_RELIABLE_CLUSTERS` instances (the unit the bootstrap resamples;
    :func:`metamorph.stats.few_clusters_note`): which workflow × dataset, on how many instances;
    ``None`` when none does. A degenerate interval (``[100.0, 100.0]`` on 2 instances) counts: it
    is the narrowest-looking of all. The interval stays in the table; this line keeps it from
    reading as a reliable bound."""
    rows = con.execute(
        "SELECT DISTINCT workflow_id, dataset, n_instances FROM format_robustness.mr_violations "
        "WHERE ci_low_pct IS NOT NULL AND n_instances < ? ORDER BY workflow_id, dataset",
        [stats.MIN_RELIABLE_CLUSTERS],
    ).fetchall()
    if not rows:
        return None
    cells = "; ".join(f"{w} on {d}: {n} instances" for w, d, n in rows)
    return (
        f"\nUnreliable intervals: the bootstrap CIs above rest on fewer than {stats.MIN_RELIABLE_CLUSTERS} "
        f"instances (the resampled unit) for {cells}; they are too narrow to read as bounds."
    )


# ------------------------------------------------------------------------------------------
# Model upgrades: item scores for upgrade verdicts and the report card's rows.

#: The metrics of the upgrade verdicts and whether a higher value is better, as the study
#: declares them (:attr:`metamorph.study.Study.compared_metrics`).
COMPARED_METRICS = dict(declared.STUDY.compared_metrics)

#: The resampling unit of each compared / card metric: the columns naming the cluster the design
#: repeats, which every bootstrap interval and paired test of the metric resamples or pairs as one
#: unit (``item`` of :func:`metamorph.comparison.item_scores`, ``cluster`` of
#: :func:`metamorph.report_card.clustered_rate_rows`). docs/definitions.md lists these.
#: An instance: its k repeats and its four formats move together (every slice is within a dataset).
RESAMPLING_UNITS: dict[str, tuple[str, ...]] = {m: ("dataset", "instance_id") for m in COMPARED_METRICS}
STUDY = "format_robustness"


def _by_model(frame: pd.DataFrame) -> pd.DataFrame:
    """``model_id`` and ``ingestion`` from ``workflow_id`` (``<model id>/<ingestion>``)."""
    parts = frame["workflow_id"].astype(str).str.split("/", n=1, expand=True)
    return frame.assign(model_id=parts[0], ingestion=parts[1])


def _defined_flags(flags: pd.DataFrame, col: str) -> pd.DataFrame:
    """The rows of ``flags`` whose ``col`` (``mr1``, ``mr2``, ``mr3``) is a measurement: not null,
    and for ``mr2`` not in a workflow × dataset where no reply gave evidence (``n_with_evidence``
    sums to 0), which :func:`~metamorph.studies.format_robustness.metrics.mr_violations` reports as
    not measurable — its groups' ``mr2`` is False only because every evidence set is empty."""
    defined = flags[flags[col].notna()]
    if col != "mr2" or "n_with_evidence" not in flags.columns:
        return defined
    evidence = flags.groupby(["workflow_id", "dataset"], sort=False)["n_with_evidence"]
    known = evidence.transform(lambda s: s.notna().all())
    none = known & evidence.transform("sum").eq(0)
    return defined[~none.loc[defined.index].astype(bool)]


def _gold_rows(outcomes: pd.DataFrame) -> pd.DataFrame:
    """Replies with a gold label: a failed call (``call_error``) is neither right nor wrong."""
    gen = _by_model(metric_input(outcomes))
    failed = gen["call_error"].astype(bool) if "call_error" in gen.columns else False
    return gen[gen["gold"].notna() & ~failed]


def planned_cells(options, specs=()) -> pd.DataFrame:
    """The (metric, slice) cells :func:`comparison_scores` will compare, with the items each will
    have, from the sources a run with ``options`` loads and the ingestion paths every model of
    ``specs`` has (``metamorph plan``'s detectable effects, :func:`metamorph.power.plan_text`):
    ``metric, slice, n_items, outcomes`` — accuracy per ``ingestion, dataset, format`` and per
    ``ingestion, dataset`` over the instances with a gold label, M1/M2/M3 per ``ingestion, dataset``
    over every instance (M3 is left out by the run when it is not measurable); ``outcomes``: the 0/1
    outcomes an item's value averages (k repeats, times the four formats when pooled; M1/M2: its k
    groups; M3: one flag per instance). Raises the loaders' ``InputError``."""
    from metamorph.comparison import slice_label
    from metamorph.studies.format_robustness.renderers import DEFAULT_FORMATS
    from metamorph.studies.format_robustness.study import STUDY as DECLARED

    xs = [x for _, x in DECLARED.sources_of(options)]
    ingestions = [i for i in (specs[0].ingestion if specs else ("inline",)) if all(i in s.ingestion for s in specs)]
    datasets = list(dict.fromkeys(x.dataset for x in xs))
    k = options.k
    rows = []
    for ing in ingestions:
        for ds in datasets:
            n_all = sum(1 for x in xs if x.dataset == ds)
            n_gold = sum(1 for x in xs if x.dataset == ds and x.gold is not None)
            here = {"ingestion": ing, "dataset": ds}
            rows += [("accuracy", slice_label({**here, "format": f}), n_gold, k) for f in DEFAULT_FORMATS]
            rows.append(("accuracy", slice_label(here), n_gold, k * len(DEFAULT_FORMATS)))
            rows += [(m, slice_label(here), n_all, 1 if m == "M3" else k) for m in ("M1", "M2", "M3")]
    return pd.DataFrame(rows, columns=["metric", "slice", "n_items", "outcomes"])


def comparison_scores(outcomes: pd.DataFrame, flags: pd.DataFrame) -> pd.DataFrame:
    """Item scores (:func:`metamorph.comparison.item_scores`) of every model, the item being
    the instance:

    * ``accuracy`` — is_correct (⊥ = wrong) of generations with a gold label, averaged over the
      k repeats, per ``ingestion, dataset, format``; and per ``ingestion, dataset`` averaged over
      formats and repeats;
    * ``M1`` / ``M2`` / ``M3`` — the instance's MR flags (:func:`~metamorph.studies.format_robustness.metrics.mr_flags`)
      averaged over its groups (repeats), per ``ingestion, dataset``; instances whose flag is
      undefined (< 2 formats) are not items.

    Args:
        outcomes: ``generation_outcomes`` rows. flags: ``mr_flags`` rows.
    """
    gold = _gold_rows(outcomes)
    parts = [
        item_scores(
            gold,
            metric="accuracy",
            value="is_correct",
            item=_item("accuracy"),
            slices=["ingestion", "dataset", "format"],
        ),
        item_scores(
            gold, metric="accuracy", value="is_correct", item=_item("accuracy"), slices=["ingestion", "dataset"]
        ),
    ]
    f = _by_model(flags)
    for rel in ("M1", "M2", "M3"):
        col = f"mr{rel[-1]}"
        defined = _defined_flags(f, col)
        if len(defined):  # none when the relation is not measurable (mr_flags' mr3_note)
            parts.append(
                item_scores(
                    defined.assign(**{col: defined[col].astype(bool)}),
                    metric=rel,
                    value=col,
                    item=_item(rel),
                    slices=["ingestion", "dataset"],
                )
            )
    return pd.concat(parts, ignore_index=True)


def _item(metric: str) -> list[str]:
    """The item columns of ``metric`` within a slice: its resampling unit without ``dataset``,
    which every compared slice fixes."""
    return [c for c in RESAMPLING_UNITS[metric] if c != "dataset"]


def card_rows(outcomes: pd.DataFrame, flags: pd.DataFrame, n_resamples: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Report-card rows per model and ingestion path, pooled over datasets: M1, M2, M3 (% of
    groups violating, as :func:`~metamorph.studies.format_robustness.metrics.mr_violations`) and
    accuracy (% of generations with gold), each with a bootstrap 95% CI resampling instances
    (:func:`metamorph.report_card.clustered_rate_rows`)."""
    f = _by_model(flags)
    parts = []
    for rel in ("M1", "M2", "M3"):
        col = f"mr{rel[-1]}"
        defined = _defined_flags(f, col)
        if defined.empty:  # not measurable (mr_flags' mr3_note): no card row
            continue
        parts.append(
            clustered_rate_rows(
                defined.assign(**{col: defined[col].astype(bool)}),
                study=STUDY,
                metric=rel,
                value=col,
                cluster=list(RESAMPLING_UNITS[rel]),
                slices=["ingestion"],
                higher_is_better=False,
                n_resamples=n_resamples,
                seed=seed,
            )
        )
    parts.append(
        clustered_rate_rows(
            _gold_rows(outcomes),
            study=STUDY,
            metric="accuracy",
            value="is_correct",
            cluster=list(RESAMPLING_UNITS["accuracy"]),
            slices=["ingestion"],
            n_resamples=n_resamples,
            seed=seed,
        )
    )
    return pd.concat(parts, ignore_index=True)
