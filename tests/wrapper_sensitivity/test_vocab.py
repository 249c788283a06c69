"""The study's vocabulary is declared once (metamorph.studies.wrapper_sensitivity.vocab); the SQL
views, which cannot import it, spell only names it declares."""

import re
from pathlib import Path

import pandas as pd
import pandera.errors
import pytest

from metamorph.studies.wrapper_sensitivity import extract, metrics, schemas, vocab, wrappers

SQL = Path(__file__).resolve().parents[2] / "sql" / "wrapper_sensitivity" / "lineage_views.sql"


def test_lineage_views_name_the_constrained_arm_and_the_headline_indices_of_the_vocabulary():
    text = SQL.read_text(encoding="utf-8")
    assert set(re.findall(r"wrapper <> '(\w+)'", text)) == {vocab.CONSTRAINED_ARM} == {"json_constrained"}
    assert tuple(re.findall(r"'(\w+)' AS metric", text)) == vocab.HEADLINE_INDICES == ("FSI", "PSI")


def test_the_modules_re_export_the_vocabulary_instead_of_declaring_it_again():
    assert wrappers.FAMILIES is vocab.FAMILIES and metrics.WRAPPER_ORDER is vocab.FAMILIES
    assert extract.MODES is vocab.MODES and metrics.MODES is vocab.MODES
    assert extract.ANSWER_TYPES is vocab.ANSWER_TYPES and metrics.ANSWER_TYPES is vocab.ANSWER_TYPES
    assert vocab.WRAPPERS == ("plain", "json", "structured", "structured_delim", "deliberate", "json_constrained")
    assert vocab.INDEX_NAMES == ("FSI", "PSI", "nFSI", "nFSI_chance", "FSI_fraction", "PSI_fraction")
    assert vocab.INDEX_UNITS == ("pp", "ratio", "fraction")


def test_the_items_schema_checks_answer_types_against_the_vocabulary():
    row = dict(
        task="t",
        item_id="1",
        answer_type="choice",
        question="q?",
        passage=None,
        choices_json="[]",
        n_choices=2,
        gold="A",
        source="s",
    )
    schemas.QAItems.validate(pd.DataFrame([row]))
    with pytest.raises(pandera.errors.SchemaError, match="isin"):
        schemas.QAItems.validate(pd.DataFrame([{**row, "answer_type": "free_text"}]))
