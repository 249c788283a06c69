"""What ``python -m pipelines.run format_robustness`` prints after a run.

* M1 / M2 / M3 (%): the share of (instance, repeat) groups that violate MR1 (the decision changes across the
  four formats), MR2 (the evidence categories differ, Jaccard < θ) and MR3 (the k repeats of one
  format disagree), with bootstrap 95% CIs — paper §5.2, Table 1.
* Acc_f (%): accuracy per format; ⊥ (unparseable) counts as wrong.
* The decision distribution, so that a low M1 can be read against a model that always answers
  the same label.

Tables are read from the DuckDB warehouse (schema ``format_robustness``).
"""

from __future__ import annotations

import duckdb
import pandas as pd

from metamorph.comparison import item_scores
from metamorph.report_card import clustered_rate_rows
from metamorph.sql import markdown_sections
from metamorph.studies.format_robustness.plan import metric_input


SECTIONS = (
    ("Accuracy by format (%):",
     "SELECT workflow_id, dataset, format, round(accuracy_pct, 1) AS accuracy_pct, n, n_unparseable "
     "FROM format_robustness.accuracy_by_format ORDER BY workflow_id, dataset, "
     "CASE format WHEN 'txt' THEN 0 WHEN 'md' THEN 1 WHEN 'json' THEN 2 WHEN 'csv' THEN 3 ELSE 4 END, format"),
    ("What the model answered (all formats and repeats; ⊥ = unparseable, with the reason) — read the rates "
     "above against it: a model that always gives the same answer cannot violate MR1:",
     "SELECT workflow_id, dataset, coalesce(decision, '⊥ (' || parse_reason || ')') AS outcome, count(*) AS n "
     "FROM format_robustness.extracted_decisions GROUP BY ALL ORDER BY workflow_id, dataset, n DESC"),
)


def headline(con: duckdb.DuckDBPyConnection) -> str:
    """Markdown text: M1/M2/M3 with CIs per workflow × dataset (one row each), then :data:`SECTIONS`.

    Raises ``duckdb.CatalogException`` when the study's tables have not been materialized.
    """
    mrv = con.execute(
        "SELECT workflow_id, dataset, relation, round(violation_pct, 1) AS pct, "
        "round(ci_low_pct, 1) AS ci_low, round(ci_high_pct, 1) AS ci_high, n_instances, n_groups "
        "FROM format_robustness.mr_violations ORDER BY workflow_id, dataset, relation").df()
    rows = []
    for (workflow, dataset), g in mrv.groupby(["workflow_id", "dataset"], sort=True):
        row = {"workflow_id": workflow, "dataset": dataset, "n_instances": int(g["n_instances"].iloc[0]),
               "n_groups": int(g["n_groups"].iloc[0])}
        for r in g.itertuples():
            ci = "" if r.ci_low is None or r.ci_low != r.ci_low else f" [{r.ci_low}, {r.ci_high}]"
            row[f"M{r.relation[-1]} %"] = f"{r.pct:.1f}{ci}"
        rows.append(row)
    return "\n".join(["", "Metamorphic-relation violations M1 (decision), M2 (evidence), M3 (stability): % of "
                       "(instance, repeat) groups (§5.2); bootstrap 95% CI resampling instances:", pd.DataFrame(rows).to_markdown(index=False),
                       markdown_sections(con, SECTIONS)])


# ------------------------------------------------------------------------------------------
# Model upgrades: item scores for upgrade verdicts and the report card's rows.

#: Metrics of the upgrade verdicts, and whether a higher value is better: Acc (§5.2) and the
#: violation rates M1/M2/M3 of MR1–MR3 (§4.1, §5.1; a violation is worse).
COMPARED_METRICS = {"accuracy": True, "M1": False, "M2": False, "M3": False}
STUDY = "format_robustness"


def _by_model(frame: pd.DataFrame) -> pd.DataFrame:
    """``model_id`` and ``ingestion`` from ``workflow_id`` (``<model id>/<ingestion>``)."""
    parts = frame["workflow_id"].astype(str).str.split("/", n=1, expand=True)
    return frame.assign(model_id=parts[0], ingestion=parts[1])


def _gold_rows(outcomes: pd.DataFrame) -> pd.DataFrame:
    gen = _by_model(metric_input(outcomes))
    return gen[gen["gold"].notna()]


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
    parts = [item_scores(gold, metric="accuracy", value="is_correct", item=["instance_id"],
                         slices=["ingestion", "dataset", "format"]),
             item_scores(gold, metric="accuracy", value="is_correct", item=["instance_id"],
                         slices=["ingestion", "dataset"])]
    f = _by_model(flags)
    for rel in ("M1", "M2", "M3"):
        col = f"mr{rel[-1]}"
        defined = f[f[col].notna()]
        parts.append(item_scores(defined.assign(**{col: defined[col].astype(bool)}), metric=rel, value=col,
                                 item=["instance_id"], slices=["ingestion", "dataset"]))
    return pd.concat(parts, ignore_index=True)


def card_rows(outcomes: pd.DataFrame, flags: pd.DataFrame, n_resamples: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Report-card rows per model and ingestion path, pooled over datasets: M1, M2, M3 (% of
    groups violating, as :func:`~metamorph.studies.format_robustness.metrics.mr_violations`) and
    accuracy (% of generations with gold), each with a bootstrap 95% CI resampling instances
    (:func:`metamorph.report_card.clustered_rate_rows`)."""
    f = _by_model(flags)
    parts = []
    for rel in ("M1", "M2", "M3"):
        col = f"mr{rel[-1]}"
        defined = f[f[col].notna()]
        parts.append(clustered_rate_rows(defined.assign(**{col: defined[col].astype(bool)}), study=STUDY,
                                         metric=rel, value=col, cluster=["dataset", "instance_id"],
                                         slices=["ingestion"], higher_is_better=False, n_resamples=n_resamples,
                                         seed=seed))
    parts.append(clustered_rate_rows(_gold_rows(outcomes), study=STUDY, metric="accuracy", value="is_correct",
                                     cluster=["dataset", "instance_id"], slices=["ingestion"],
                                     n_resamples=n_resamples, seed=seed))
    return pd.concat(parts, ignore_index=True)
