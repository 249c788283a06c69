"""The study's vocabulary is declared once (metamorph.studies.format_robustness.vocab); the SQL
files, which cannot import it, order the formats exactly as it does."""

import re
from pathlib import Path

import pandas as pd
import pandera.errors
import pytest

from metamorph.studies.format_robustness import metrics, renderers, schemas, vocab

SQL = Path(__file__).resolve().parents[2] / "sql" / "format_robustness"


@pytest.mark.parametrize("name", ["accuracy_by_format", "stability_by_format"])
def test_the_sql_format_order_is_the_vocabulary_order(name):
    text = (SQL / f"{name}.sql").read_text(encoding="utf-8")
    case = re.search(r"CASE [\w.]*format((?: WHEN '\w+' THEN \d+)+) ELSE (\d+) END", text)
    pairs = re.findall(r"WHEN '(\w+)' THEN (\d+)", case.group(1))
    assert [f for f, _ in pairs] == list(vocab.FORMATS) == ["txt", "md", "json", "csv"]
    assert [int(n) for _, n in pairs] == [0, 1, 2, 3] and int(case.group(2)) == 4


def test_the_modules_re_export_the_vocabulary_instead_of_declaring_it_again():
    assert renderers.DEFAULT_FORMATS is vocab.FORMATS and metrics.FORMAT_ORDER is vocab.FORMATS
    assert metrics.BASELINE_FORMAT == vocab.BASELINE_FORMAT == "txt"
    assert vocab.RELATIONS == ("MR1", "MR2", "MR3") and vocab.PARSE_STATUSES == ("ok", "repaired", "unparseable")


def test_the_mitigation_table_checks_strategy_and_relation_against_the_vocabulary():
    row = dict(workflow_id="w", dataset="d", strategy="vote", relation="MR1", delta_pp=1.5)
    cols = list(schemas.MitigationTable.to_schema().columns)
    frame = pd.DataFrame([{c: row.get(c) for c in cols}])
    assert len(schemas.MitigationTable.validate(frame)) == 1
    with pytest.raises(pandera.errors.SchemaError, match="isin"):
        schemas.MitigationTable.validate(frame.assign(strategy="routing_v2"))
    with pytest.raises(pandera.errors.SchemaError, match="isin"):
        schemas.MitigationTable.validate(frame.assign(relation="MR4"))
