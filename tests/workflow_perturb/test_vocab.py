"""The study's vocabulary is declared once (metamorph.studies.workflow_perturb.vocab); the SQL
views, which cannot import it, name only values it declares."""

import re
from pathlib import Path

from metamorph.studies.workflow_perturb import analysis, gate, lineage, perturb, plan, vocab

SQL = Path(__file__).resolve().parents[2] / "sql" / "workflow_perturb" / "lineage_views.sql"


def test_the_judge_lineage_joins_the_deterministic_operator_of_the_vocabulary():
    text = SQL.read_text(encoding="utf-8")
    assert re.findall(r"v\.model_id = '(\w+)'", text) == [vocab.OPERATORS[0]] == ["deterministic"]


def test_the_modules_re_export_the_vocabulary_instead_of_declaring_it_again():
    assert perturb.PERTURBATION_TYPES is vocab.PERTURBATION_TYPES is gate.FAILURE_MODES
    assert perturb.SEVERITIES is vocab.SEVERITIES and analysis.SEVERITIES is vocab.SEVERITIES
    assert plan.METRIC_COLUMNS is vocab.VARIANT_METRICS and lineage.METRICS is vocab.VARIANT_METRICS
    assert analysis.METRICS is vocab.METRICS is gate.GATE_METRICS
    assert vocab.METRICS == ("chain_f1", "graph_f1", "bleu", "gleu", "bertscore_f1", "kendall_tau", "judge")
    assert gate.MODES is vocab.GATE_MODES and gate.DEFAULT_MODE == "primary_and_secondary"
    assert vocab.STRATA == ("5-7", "8-15", "16+")
    assert set(lineage.TRACES) == {*vocab.VARIANT_METRICS, "judge"}
