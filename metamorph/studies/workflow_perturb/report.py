"""The headline of the workflow perturb study, as printed by ``python -m pipelines.run workflow_perturb``:
goldens kept and rejected, mean metric by perturbation type and severity, the sensitivity matrix,
and — once a judge model has run — the LLM judge's replies and its rows of the severity table.

Reads the study's tables from the DuckDB warehouse (schema ``workflow_perturb``); pure (no Dagster).
"""

from __future__ import annotations

import duckdb
import pandas as pd

from metamorph.comparison import item_scores
from metamorph.report_card import clustered_rate_rows
from metamorph.schemas import require_columns
from metamorph.studies.workflow_perturb.analysis import DELTA_AVG_FACTOR, DELTA_STEP_FACTOR
from metamorph.studies.workflow_perturb import study as declared

__all__ = [
    "COMPARED_METRICS",
    "RESAMPLING_UNITS",
    "planned_cells",
    "STUDY",
    "all_card_rows",
    "card_rows",
    "comparison_scores",
    "gate_card_rows",
    "headline",
]


def headline(con: duckdb.DuckDBPyConnection) -> str:
    """Markdown text of the study's headline tables, read through ``con`` (the warehouse).

    Raises ``duckdb.CatalogException`` when the study's tables have not been materialized.
    """
    out: list[str] = []
    tables = {
        r[0]
        for r in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'workflow_perturb'"
        ).fetchall()
    }
    rejected = con.execute(
        "SELECT golden_id, rejection_reason FROM workflow_perturb.goldens WHERE NOT valid ORDER BY golden_id"
    ).df()
    n_goldens = con.execute("SELECT count(*) FROM workflow_perturb.goldens").fetchall()[0][0]
    means = con.execute(
        "SELECT type, severity, count(*) AS n, round(avg(chain_f1), 3) AS chain_f1, round(avg(graph_f1), 3) "
        "AS graph_f1, round(avg(bleu), 3) AS bleu, round(avg(gleu), 3) AS gleu, round(avg(bertscore_f1), 3) "
        "AS bertscore_f1, round(avg(kendall_tau), 3) AS kendall_tau "
        "FROM workflow_perturb.perturbation_scores GROUP BY ALL ORDER BY type, severity"
    ).df()
    sens = (
        con.execute(
            "SELECT metric, type, round(mean_10, 3) AS s10, round(mean_30, 3) AS s30, "
            "round(mean_50, 3) AS s50, round(delta_avg, 3) AS delta_avg, round(delta_1, 3) AS delta_1, "
            "round(delta_2, 3) AS delta_2, n_10 FROM workflow_perturb.sensitivity_matrix "
            "WHERE operator = 'deterministic' AND n_10 > 0 ORDER BY type, metric"
        ).df()
        if "sensitivity_matrix" in tables
        else None
    )
    out.append(
        f"\nGoldens: {n_goldens - len(rejected)} valid, {len(rejected)} rejected (kept in workflow_perturb.goldens)"
    )
    if len(rejected):
        out.append(rejected.head(20).to_markdown(index=False))
    out.append("\nMean metric by perturbation type and severity (deterministic operators):")
    out.append(means.to_markdown(index=False))
    if sens is not None:
        out.append("\nSensitivity matrix (Δ_avg = 2.5·[s̄(10%) − s̄(50%)]):")
        out.append(sens.to_markdown(index=False))
    if {"judge_scores", "severity_table_judge"} <= tables:
        out += _judge_lines(con)
    return "\n".join(out)


def _judge_lines(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The LLM judge (App. B.6) per judge model: its replies (valid / invalid of 3 per variant, and
    the calls that failed at the provider, which are no reply) and its rows of the severity table
    (variants without a valid reply excluded, counted in n_null; a cell with nothing measured
    prints its ``not_measurable`` text, e.g. "not measurable: every call failed (N of N)")."""
    replies = con.execute(
        "SELECT model_id, count(*) AS variants, sum(judge_valid) AS valid_replies, "
        "sum(judge_invalid) AS invalid_replies, sum(n_call_errors) AS call_errors, count(judge) AS variants_scored "
        "FROM workflow_perturb.judge_scores GROUP BY model_id ORDER BY model_id"
    ).df()
    rows = con.execute(
        "SELECT model_id, type, severity, coalesce(CAST(round(mean, 3) AS VARCHAR), not_measurable) AS mean, "
        "round(sd, 3) AS sd, n, n_null, n_call_errors AS call_errors "
        "FROM workflow_perturb.severity_table_judge ORDER BY model_id, type, severity"
    ).df()
    mean = "max(CASE WHEN severity = {} THEN mean END)"
    s10, s30, s50 = mean.format(0.1), mean.format(0.3), mean.format(0.5)
    sens = con.execute(
        f"SELECT model_id, type, round({s10}, 3) AS s10, round({s30}, 3) AS s30, round({s50}, 3) AS s50, "
        f"round({DELTA_AVG_FACTOR} * ({s10} - {s50}), 3) AS delta_avg, "
        f'round({DELTA_STEP_FACTOR} * ({s10} - {s30}), 3) AS "Δ¹", '
        f'round({DELTA_STEP_FACTOR} * ({s30} - {s50}), 3) AS "Δ²" '
        "FROM workflow_perturb.severity_table_judge GROUP BY model_id, type ORDER BY model_id, type"
    ).df()
    return [
        "\nLLM judge (App. B.6): replies per judge model (3 calls per variant; invalid replies and calls that "
        "failed at the provider excluded):",
        replies.to_markdown(index=False),
        "\nLLM judge score by perturbation type and severity (deterministic operators; [0, 1]):",
        rows.to_markdown(index=False),
        f"\nLLM judge's row of the sensitivity matrix (Δ_avg = {DELTA_AVG_FACTOR}·[s̄(10%) − s̄(50%)]; Δ¹, Δ² = "
        f"{DELTA_STEP_FACTOR:g}·the drop from 10% to 30% and from 30% to 50%, per unit severity as §5.1; null "
        "where a severity has no valid reply):",
        sens.to_markdown(index=False),
    ]


# ------------------------------------------------------------------------------------------
# Model upgrades: item scores for upgrade verdicts and the report card's rows.
#
# The model-dependent numbers of this study are the LLM judge's scores (``judge_scores``, one
# partition per judge model) of the deterministic variants, which are the same variants for every
# model, so they pair. The LLM-generated perturbations (``perturbations_llm``) are different
# variants for each generator model and do not pair; no gate result is computed per model.

#: The metrics of the upgrade verdicts and whether a higher value is better, as the study
#: declares them (:attr:`metamorph.study.Study.compared_metrics`).
COMPARED_METRICS = dict(declared.STUDY.compared_metrics)

#: The resampling unit of each compared / card metric: the columns naming the cluster the design
#: repeats, which every bootstrap interval and paired test of the metric resamples or pairs as one
#: unit (``item`` of :func:`metamorph.comparison.item_scores`, ``cluster`` of
#: :func:`metamorph.report_card.clustered_rate_rows`). docs/definitions.md lists these.
#: The golden: its variants (types, severities) and their judge replies move together.
RESAMPLING_UNITS: dict[str, tuple[str, ...]] = {"judge": ("golden_id",)}
STUDY = "workflow_perturb"
_JUDGE_COLUMNS = ("model_id", "variant_id", "golden_id", "type", "severity", "judge")


def _judged(judge_scores: pd.DataFrame, caller: str) -> pd.DataFrame:
    require_columns(judge_scores, _JUDGE_COLUMNS, caller)
    return judge_scores[judge_scores["judge"].notna()]


def planned_cells(options, specs=()) -> pd.DataFrame:
    """The (metric, slice) cells :func:`comparison_scores` will compare, with the items each will
    have, from the goldens a run with ``options`` loads (``metamorph plan``'s detectable effects,
    :func:`metamorph.power.plan_text`): ``metric, slice, n_items, outcomes`` — ``judge`` per ``type,
    severity`` and per ``type`` over the judged deterministic variants (the first
    ``judge_variants``, as ``judge_scores`` judges them; a variant without a valid reply will not
    be an item); ``outcomes`` 0: an item's value is a score (valid replies / 5), not a rate of 0/1
    outcomes. Raises the loader's ``InputError``."""
    from metamorph.comparison import slice_label
    from metamorph.studies.workflow_perturb.plan import deterministic_perturbations
    from metamorph.studies.workflow_perturb.plan import planned_goldens

    perts = deterministic_perturbations(planned_goldens(options))
    rows = pd.DataFrame([p.to_row() for p in perts]).head(options.judge_variants)
    out = []
    if len(rows):
        for (t, p), g in rows.groupby(["type", "p"], sort=True):
            out.append(("judge", slice_label({"type": t, "severity": p}), len(g), 0))
        for t, g in rows.groupby("type", sort=True):
            out.append(("judge", slice_label({"type": t}), len(g), 0))
    return pd.DataFrame(out, columns=["metric", "slice", "n_items", "outcomes"])


def comparison_scores(judge_scores: pd.DataFrame) -> pd.DataFrame:
    """Item scores (:func:`metamorph.comparison.item_scores`) of every judge model: ``judge``, the
    judge's score of a variant (the mean of its valid replies / 5), per ``type, severity`` and per
    ``type``. The item is the golden (:data:`RESAMPLING_UNITS`), its value the mean of its judged
    deterministic variants in the slice (the same variants for every model): one variant per
    ``type, severity``; per ``type`` its severities, which are not independent items. A variant with no valid
    reply from a model (``judge`` null) is not part of that model's items; an item with none is
    counted by :func:`metamorph.comparison.compare_models` in ``n_baseline_only`` /
    ``n_candidate_only``. Scores are fractions, so the test is the paired sign-flip permutation
    test.

    Args:
        judge_scores: ``judge_scores`` rows of every judge model.

    Returns:
        :data:`~metamorph.comparison.ITEM_SCORE_COLUMNS`, slices ``type=<t>, severity=<p>`` and
        ``type=<t>``.

    Raises:
        ValueError: a missing column (``model_id``, ``variant_id``, ``golden_id``, ``type``,
            ``severity``, ``judge``).
    """
    j = _judged(judge_scores, "workflow_perturb comparison_scores(judge_scores)")
    unit = list(RESAMPLING_UNITS["judge"])
    return pd.concat(
        [
            item_scores(j, metric="judge", value="judge", item=unit, slices=["type", "severity"]),
            item_scores(j, metric="judge", value="judge", item=unit, slices=["type"]),
        ],
        ignore_index=True,
    )


def card_rows(judge_scores: pd.DataFrame, n_resamples: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Report-card rows per judge model: ``judge``, the judge's mean score of the judged
    deterministic variants in % of the rubric's maximum (100 · mean of score / 5; variants without
    a valid reply left out), pooled over types and severities, with a bootstrap 95% CI that
    resamples goldens (the variants of one golden move together;
    :func:`metamorph.report_card.clustered_rate_rows`); ``n`` = goldens; lower is better (see
    :data:`COMPARED_METRICS`).

    Raises:
        ValueError: a missing column.
    """
    j = _judged(judge_scores, "workflow_perturb card_rows(judge_scores)")
    return clustered_rate_rows(
        j,
        study=STUDY,
        metric="judge",
        value="judge",
        cluster=list(RESAMPLING_UNITS["judge"]),
        higher_is_better=False,
        n_resamples=n_resamples,
        seed=seed,
    )


def gate_card_rows(
    llm_scores: pd.DataFrame, thresholds=None, mode: str | None = None, n_resamples: int = 1000, seed: int = 0
) -> pd.DataFrame:
    """Report-card rows per generator model: ``gate_firing``, the % of the model's own valid LLM
    perturbations (``perturbation_scores_llm``) on which the CI gate's bundle for that
    perturbation type fires (§6: a missing-step variant checked by the missing bundle, and so on),
    per ``type`` slice, with a bootstrap 95% CI that resamples goldens; ``n`` = goldens. Instances
    where the bundle has no defined primary metric are left out. Higher = the gate catches more of
    the damage the model was asked to make. (The gates on the deterministic variants are the same
    for every model, so they are not a per-model number.)

    ``llm_scores`` without a ``judge`` column (the table ``perturbation_scores_llm`` as stored: its
    metrics are the non-judge ones) is read with the judge not measured (NaN): a bundle whose
    primary metric is the judge is then undefined and its variants are left out.

    Raises:
        ValueError: a missing column (via :func:`~metamorph.studies.workflow_perturb.analysis.validate_scores`).
    """
    from metamorph.studies.workflow_perturb import gate
    from metamorph.studies.workflow_perturb.analysis import METRICS, validate_scores

    require_columns(llm_scores, ["model_id"], "workflow_perturb gate_card_rows(perturbation_scores_llm)")
    th = thresholds if thresholds is not None else gate.default_thresholds()
    parts = []
    if "judge" not in llm_scores.columns:
        # perturbation_scores_llm holds the non-judge metrics only: the judge is not measured there
        llm_scores = llm_scores.assign(judge=float("nan"))
    for model_id, sub in llm_scores.groupby("model_id", sort=True):
        g = validate_scores(sub.drop(columns=["model_id"]))
        for b in th.bundles:
            defined, fired = gate.bundle_decisions(g[list(METRICS)], b, mode or gate.DEFAULT_MODE)
            on = (g["type"].to_numpy() == b.failure_mode) & defined
            parts.append(
                pd.DataFrame(
                    {
                        "model_id": model_id,
                        "golden_id": g["golden_id"].to_numpy()[on],
                        "type": g["type"].to_numpy()[on],
                        "fired": fired[on],
                    }
                )
            )
    frame = (
        pd.concat(parts, ignore_index=True)
        if parts
        else pd.DataFrame({"model_id": [], "golden_id": [], "type": [], "fired": pd.Series([], dtype=bool)})
    )
    return clustered_rate_rows(
        frame,
        study=STUDY,
        metric="gate_firing",
        value="fired",
        cluster=["golden_id"],
        slices=["type"],
        higher_is_better=True,
        n_resamples=n_resamples,
        seed=seed,
    )


def all_card_rows(judge_scores: pd.DataFrame, llm_scores: pd.DataFrame | None = None) -> pd.DataFrame:
    """The study's report-card rows: :func:`card_rows` of ``judge_scores`` and, when the models'
    LLM perturbations were scored (``llm_scores`` not None and not empty), :func:`gate_card_rows`."""
    parts = [card_rows(judge_scores)]
    if llm_scores is not None and len(llm_scores):
        parts.append(gate_card_rows(llm_scores))
    return pd.concat(parts, ignore_index=True)
