"""The headline of the workflow perturb study, as printed by ``python -m pipelines.run workflow_perturb``:
goldens kept and rejected, mean metric by perturbation type and severity, the sensitivity matrix,
and — once a judge model has run — the LLM judge's replies and its rows of the severity table.

Reads the study's tables from the DuckDB warehouse (schema ``workflow_perturb``); pure (no Dagster).
"""

from __future__ import annotations

import duckdb


def headline(con: duckdb.DuckDBPyConnection) -> str:
    """Markdown text of the study's headline tables, read through ``con`` (the warehouse).

    Raises ``duckdb.CatalogException`` when the study's tables have not been materialized.
    """
    out: list[str] = []
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables "
                                        "WHERE table_schema = 'workflow_perturb'").fetchall()}
    rejected = con.execute("SELECT golden_id, rejection_reason FROM workflow_perturb.goldens "
                           "WHERE NOT valid ORDER BY golden_id").df()
    n_goldens = con.execute("SELECT count(*) FROM workflow_perturb.goldens").fetchall()[0][0]
    means = con.execute(
        "SELECT type, severity, count(*) AS n, round(avg(chain_f1), 3) AS chain_f1, round(avg(graph_f1), 3) "
        "AS graph_f1, round(avg(bleu), 3) AS bleu, round(avg(gleu), 3) AS gleu, round(avg(bertscore_f1), 3) "
        "AS bertscore_f1, round(avg(kendall_tau), 3) AS kendall_tau "
        "FROM workflow_perturb.perturbation_scores GROUP BY ALL ORDER BY type, severity").df()
    sens = con.execute("SELECT metric, type, round(mean_10, 3) AS s10, round(mean_30, 3) AS s30, "
                       "round(mean_50, 3) AS s50, round(delta_avg, 3) AS delta_avg, round(delta_1, 3) AS delta_1, "
                       "round(delta_2, 3) AS delta_2, n_10 FROM workflow_perturb.sensitivity_matrix "
                       "WHERE operator = 'deterministic' AND n_10 > 0 ORDER BY type, metric").df() \
        if "sensitivity_matrix" in tables else None
    out.append(f"\nGoldens: {n_goldens - len(rejected)} valid, {len(rejected)} rejected (kept in workflow_perturb.goldens)")
    if len(rejected):
        out.append(rejected.head(20).to_markdown(index=False))
    out.append("\nMean metric by perturbation type and severity (deterministic operators):")
    out.append(means.to_markdown(index=False))
    if sens is not None:
        out.append("\nSensitivity matrix (Δ_avg = 2.5·[s̄(10%) − s̄(50%)]):")
        out.append(sens.to_markdown(index=False))
    if {"judge_scores", "judge_severity_table"} <= tables:
        out += _judge_lines(con)
    return "\n".join(out)


def _judge_lines(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The LLM judge (App. B.6) per judge model: its replies (valid / invalid of 3 per variant) and
    its rows of the severity table (variants without a valid reply excluded, counted in n_null)."""
    replies = con.execute(
        "SELECT model_id, count(*) AS variants, sum(judge_valid) AS valid_replies, "
        "sum(judge_invalid) AS invalid_replies, count(judge) AS variants_scored "
        "FROM workflow_perturb.judge_scores GROUP BY model_id ORDER BY model_id").df()
    rows = con.execute(
        "SELECT model_id, type, severity, round(mean, 3) AS mean, round(sd, 3) AS sd, n, n_null "
        "FROM workflow_perturb.judge_severity_table ORDER BY model_id, type, severity").df()
    return ["\nLLM judge (App. B.6): replies per judge model (3 calls per variant; invalid ones excluded):",
            replies.to_markdown(index=False),
            "\nLLM judge score by perturbation type and severity (deterministic operators; [0, 1]):",
            rows.to_markdown(index=False)]
