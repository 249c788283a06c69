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

from metamorph.sql import markdown_sections


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
