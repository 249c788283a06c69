"""What ``python -m pipelines.run order_probe`` prints after a run: recovery with bootstrap 95%
CIs (resampling canonical expressions) beside its chance baseline, parse failures and the share
of replies cut at ``max_tokens`` per model × language × setting, the S_* diagnostics with the
components used, recovery by kept adjacent pairs, and the error categories. Tables are read from
the DuckDB warehouse (schema ``order_probe``).
"""

from __future__ import annotations

import duckdb
import pandas as pd

from metamorph.comparison import item_scores
from metamorph.measurability import is_call_error
from metamorph.report_card import CARD_ROW_COLUMNS
from metamorph.schemas import require_columns
from metamorph.sql import markdown_sections
from metamorph.studies.order_probe.vocab import POOLED_LANGUAGE
from metamorph.studies.order_probe import study as declared

__all__ = [
    "CHANCE_RECOVERY_PCT",
    "COMPARED_METRICS",
    "RESAMPLING_UNITS",
    "planned_cells",
    "SECTIONS",
    "card_rows",
    "comparison_scores",
    "headline",
]

#: The chance baseline of recovery (%): one of the 4! = 24 orders of the four units picked at random.
CHANCE_RECOVERY_PCT = 100 / 24

SECTIONS = (
    (
        f"Recovery (%) per model × language × setting: replies that restore the canonical expression exactly, "
        f"bootstrap 95% CI over canonical expressions. Baseline: chance = {CHANCE_RECOVERY_PCT:.2f}% (a random "
        f"order of the four units); unperturbed_pct = recovery when the input is already canonical; "
        f"truncated_pct = replies cut at max_tokens; call_errors = calls that failed at the provider, left out of "
        f"every rate (a cell with no reply says 'not measurable'):",
        "SELECT r.model_id, r.language, r.setting, r.n_items, r.n_inputs, "
        "coalesce(CAST(round(r.recovery_pct, 2) AS VARCHAR), r.not_measurable) AS recovery_pct, "
        "round(r.ci_low_pct, 2) AS ci_low, round(r.ci_high_pct, 2) AS ci_high, "
        "round(r.unperturbed_recovery_pct, 1) AS unperturbed_pct, round(r.parse_failure_pct, 1) AS parse_fail_pct, "
        "round(t.truncated_pct, 1) AS truncated_pct, r.n_call_errors AS call_errors, r.n_dropped_equal, "
        "r.n_dropped_duplicate "
        "FROM order_probe.recovery_rates AS r LEFT JOIN ("
        "  SELECT model_id, coalesce(language, 'all') AS language, setting, "
        "         100.0 * avg(CASE WHEN finish_reason = 'length' THEN 1 ELSE 0 END) AS truncated_pct "
        "  FROM order_probe.scored_replies WHERE input_kind = 'scrambled' AND reason <> 'call_error' "
        "  GROUP BY GROUPING SETS ((model_id, language, setting), (model_id, setting))) AS t "
        "USING (model_id, language, setting) ORDER BY r.model_id, r.setting, r.language",
    ),
    (
        "Diagnostics (S_* in [0, 1]; S_Logic null without a local NLI model):",
        "SELECT model_id, language, setting, n_items, "
        "coalesce(CAST(round(s_acc_mean, 3) AS VARCHAR), not_measurable) AS s_acc, round(s_logic, 3) AS s_logic, "
        "round(s_info, 3) AS s_info, round(s_cons, 3) AS s_cons, round(mdr, 3) AS mdr, round(mda, 3) AS mda, "
        "round(s_seq, 3) AS s_seq, round(s_struct, 3) AS s_struct, round(s_rob, 3) AS s_rob, note "
        "FROM order_probe.diagnostics ORDER BY model_id, setting, language",
    ),
    ("S_Acc components used:", "SELECT DISTINCT components FROM order_probe.diagnostics"),
    (
        "Recovery (%) by kept canonical adjacent pairs (all languages):",
        "SELECT model_id, setting, level AS kept_adjacent, n_inputs, "
        "coalesce(CAST(round(recovery_pct, 2) AS VARCHAR), not_measurable) AS recovery_pct, "
        "round(ci_low_pct, 2) AS ci_low, round(ci_high_pct, 2) AS ci_high FROM order_probe.recovery_breakdown "
        "WHERE dimension = 'kept_adjacent' AND language = 'all' ORDER BY model_id, setting, level",
    ),
    (
        "Error categories (%, all languages):",
        "SELECT model_id, setting, category, n, coalesce(CAST(round(pct, 1) AS VARCHAR), not_measurable) AS pct "
        "FROM order_probe.error_categories "
        "WHERE language = 'all' ORDER BY model_id, setting, category",
    ),
)


def headline(con: duckdb.DuckDBPyConnection) -> str:
    """Markdown text of :data:`SECTIONS`, read through ``con`` (the warehouse). A cell with nothing
    measurable prints its ``not_measurable`` text ("not measurable: every call failed (N of N)")
    in place of the number.

    Raises ``duckdb.CatalogException`` when the study's tables have not been materialized.
    """
    return markdown_sections(con, SECTIONS)


def card_rows(recovery_rates: pd.DataFrame) -> pd.DataFrame:
    """Report-card rows per model: the recovery rate (%) pooled over languages, per prompt
    setting, with its bootstrap 95% CI over canonical expressions (``recovery_rates`` rows with
    language ``all``; ``n`` = canonical expressions)."""
    r = recovery_rates[recovery_rates["language"] == POOLED_LANGUAGE]
    return pd.DataFrame(
        {
            "model_id": r["model_id"],
            "study": "order_probe",
            "metric": "recovery",
            "slice": "setting=" + r["setting"].astype(str),
            "unit": "%",
            "value": r["recovery_pct"],
            "ci_low": r["ci_low_pct"],
            "ci_high": r["ci_high_pct"],
            "n": r["n_items"],
            "higher_is_better": True,
        },
        columns=CARD_ROW_COLUMNS,
    ).reset_index(drop=True)


# ------------------------------------------------------------------------------------------
# Model upgrades: item scores for upgrade verdicts.

#: The metrics of the upgrade verdicts and whether a higher value is better, as the study
#: declares them (:attr:`metamorph.study.Study.compared_metrics`).
COMPARED_METRICS = dict(declared.STUDY.compared_metrics)

#: The resampling unit of each compared / card metric: the columns naming the cluster the design
#: repeats, which every bootstrap interval and paired test of the metric resamples or pairs as one
#: unit (``item`` of :func:`metamorph.comparison.item_scores`, ``cluster`` of
#: :func:`metamorph.report_card.clustered_rate_rows`). docs/definitions.md lists these.
#: The canonical expression of a language: its up to 23 scrambled inputs move together.
RESAMPLING_UNITS: dict[str, tuple[str, ...]] = {"recovery": ("language", "item_id")}


def planned_cells(options, specs=()) -> pd.DataFrame:
    """The (metric, slice) cells :func:`comparison_scores` will compare, with the items each will
    have, from the sources a run with ``options`` loads (``metamorph plan``'s detectable effects,
    :func:`metamorph.power.plan_text`): ``metric, slice, n_items, outcomes`` — per ``language,
    setting`` the language's canonical expressions, per ``setting`` all of them; ``outcomes``: the
    0/1 outcomes an item's value averages (its scrambled inputs, up to 23; 23 here). Raises the
    loader's ``InputError``."""
    from metamorph.comparison import slice_label
    from metamorph.studies.order_probe.study import STUDY as DECLARED

    items = DECLARED.sources_of(options)
    by_lang = pd.Series([x.language for x in items]).value_counts().sort_index()
    rows = []
    for setting in options.settings:
        rows += [
            ("recovery", slice_label({"language": lang, "setting": setting}), int(n), 23) for lang, n in by_lang.items()
        ]
        rows.append(("recovery", slice_label({"setting": setting}), len(items), 23))
    return pd.DataFrame(rows, columns=["metric", "slice", "n_items", "outcomes"])


def comparison_scores(scored: pd.DataFrame) -> pd.DataFrame:
    """Item scores (:func:`metamorph.comparison.item_scores`) of every model: ``recovery``, the
    exact recovery (``correct``, 0/1; a parse failure counts as not recovered, a call error is left
    out) of the scrambled inputs of a canonical expression, averaged over those inputs — per ``language,
    setting`` and per ``setting`` (languages pooled). The item is the canonical expression
    (``language/item_id``), not the single scrambled input.

    Why the expression: its scrambled inputs are the same strings for every model (``scrambled_inputs``
    is shared, so both models' values of an expression average the same inputs and pair exactly),
    but they are not independent of each other — the up to 23 orders of one expression share its
    frequency, structure and familiarity — so they are the expression's repeats, resampled and
    tested together (as ``recovery_rates``' bootstrap CI over canonical expressions does). Per-input
    0/1 pairs with exact McNemar would count each expression up to 23 times and overstate the
    evidence. The per-expression values are fractions, so the test is the paired sign-flip
    permutation test, and the means of the comparison are the average over expressions of their
    recovery (equal to ``recovery_rates.recovery_pct`` / 100 when every expression has the same
    number of sent inputs; an expression with a repeated unit has fewer distinct inputs).

    Args:
        scored: ``scored_replies`` rows (every model); the unperturbed inputs are left out.

    Returns:
        :data:`~metamorph.comparison.ITEM_SCORE_COLUMNS`, slices ``language=<l>, setting=<s>``
        and ``setting=<s>``.

    Raises:
        ValueError: a missing column (``model_id``, ``language``, ``setting``, ``item_id``,
            ``input_kind``, ``correct``, ``reason``) or a missing ``correct``.
    """
    require_columns(
        scored,
        ("model_id", "language", "setting", "item_id", "input_kind", "correct", "reason"),
        "order_probe comparison_scores(scored_replies)",
    )
    scr = scored[(scored["input_kind"] == "scrambled") & ~is_call_error(scored["reason"])]
    item = list(RESAMPLING_UNITS["recovery"])
    return pd.concat(
        [
            item_scores(scr, metric="recovery", value="correct", item=item, slices=["language", "setting"]),
            item_scores(scr, metric="recovery", value="correct", item=item, slices=["setting"]),
        ],
        ignore_index=True,
    )
