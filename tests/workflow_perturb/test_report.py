"""The study's headline (``python -m pipelines.run workflow_perturb``) read from a DuckDB warehouse built by hand."""

from __future__ import annotations

import duckdb

from metamorph.studies.workflow_perturb.report import headline


def _warehouse(with_judge: bool) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(":memory:")
    con.execute("CREATE SCHEMA workflow_perturb")
    con.execute(
        "CREATE TABLE workflow_perturb.goldens AS SELECT * FROM (VALUES ('g1', true, NULL), ('g2', true, NULL)) "
        "t(golden_id, valid, rejection_reason)"
    )
    con.execute(
        "CREATE TABLE workflow_perturb.perturbation_scores AS SELECT * FROM (VALUES "
        "('missing', 0.1, 0.9, 0.8, 0.7, 0.6, 0.95, 0.5)) "
        "t(type, severity, chain_f1, graph_f1, bleu, gleu, bertscore_f1, kendall_tau)"
    )
    if with_judge:
        # two variants judged: 3 valid replies (mean 0.8), and 1 valid + 2 invalid; a third with none valid
        con.execute(
            "CREATE TABLE workflow_perturb.judge_scores AS SELECT * FROM (VALUES "
            "('m', 'g1::missing@10', 0.8, 3, 0, 0), ('m', 'g2::missing@10', 0.4, 1, 2, 0), "
            "('m', 'g1::missing@30', NULL, 0, 3, 0), ('m', 'g2::missing@30', NULL, 0, 0, 3)) "
            "t(model_id, variant_id, judge, judge_valid, judge_invalid, n_call_errors)"
        )
        con.execute(
            "CREATE TABLE workflow_perturb.severity_table_judge AS SELECT * FROM (VALUES "
            "('m', 'missing', 0.1, 0.6, 0.28284, 2, 0, 0, NULL), "
            "('m', 'missing', 0.3, NULL, NULL, 0, 2, 3, 'not measurable: no reply parsed (3 of 3 unparseable)'), "
            "('m', 'compressed', 0.1, 0.9, 0.0, 1, 0, 0, NULL), ('m', 'compressed', 0.3, 0.5, 0.0, 1, 0, 0, NULL), "
            "('m', 'compressed', 0.5, 0.3, 0.0, 1, 0, 0, NULL)) "
            "t(model_id, type, severity, mean, sd, n, n_null, n_call_errors, not_measurable)"
        )
    return con


def _rows(text: str) -> list[list[str]]:
    """The cells of every markdown table row of ``text`` (separator rows dropped)."""
    return [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("|") and not set(line) <= set("|-: ")
    ]


def test_headline_shows_the_judge_rows_when_a_judge_ran():
    text = headline(_warehouse(with_judge=True))
    judge = text[text.index("LLM judge (App. B.6)") :]
    rows = _rows(judge)
    # replies: 4 variants, 3 + 1 + 0 + 0 = 4 valid, 0 + 2 + 3 + 0 = 5 invalid, 3 failed calls (no reply),
    # 2 variants with a score
    assert rows[0] == ["model_id", "variants", "valid_replies", "invalid_replies", "call_errors", "variants_scored"]
    assert rows[1] == ["m", "4", "4", "5", "3", "2"]
    assert rows[2] == ["model_id", "type", "severity", "mean", "sd", "n", "n_null", "call_errors"]
    assert rows[6] == ["m", "missing", "0.1", "0.6", "0.283", "2", "0", "0"]
    # no valid reply: the reason, never 0 and never a number
    assert rows[7] == [
        "m",
        "missing",
        "0.3",
        "not measurable: no reply parsed (3 of 3 unparseable)",
        "nan",
        "0",
        "2",
        "3",
    ]
    # the Δ row: compressed 2.5·(0.9 − 0.3) = 1.5, Δ¹ = 5·(0.9 − 0.5) = 2, Δ² = 5·(0.5 − 0.3) = 1;
    # missing has no valid reply at 30% and no variant at 50%: every Δ is null
    assert rows[8] == ["model_id", "type", "s10", "s30", "s50", "delta_avg", "Δ¹", "Δ²"]
    assert rows[9] == ["m", "compressed", "0.9", "0.5", "0.3", "1.5", "2", "1"]
    assert rows[10] == ["m", "missing", "0.6", "nan", "nan", "nan", "nan", "nan"]
    assert "LLM judge" not in headline(_warehouse(with_judge=False))
