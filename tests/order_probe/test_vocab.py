"""The study's vocabulary is declared once (metamorph.studies.order_probe.vocab); the SQL views,
which cannot import it, name only values it declares."""

import re
from pathlib import Path

from metamorph.studies.order_probe import extract, plan, schemas, sources, vocab

SQL = Path(__file__).resolve().parents[2] / "sql" / "order_probe" / "lineage_views.sql"


def test_the_cell_lineage_names_the_pooled_language_and_an_input_kind_of_the_vocabulary():
    text = SQL.read_text(encoding="utf-8")
    assert set(re.findall(r"r\.language = '(\w+)'", text)) == {vocab.POOLED_LANGUAGE} == {"all"}
    assert re.findall(r"input_kind = '(\w+)'", text) == [vocab.INPUT_KINDS[0]] == ["scrambled"]


def test_the_modules_re_export_the_vocabulary_instead_of_declaring_it_again():
    assert sources.LANGUAGES is vocab.LANGUAGES == ("zh_cn", "zh_tw", "ja", "ko")
    assert plan.SETTINGS is vocab.SETTINGS == ("zero_shot", "cot", "few_shot")
    assert extract.PARSE_REASONS is vocab.PARSE_REASONS and extract.SPACELESS == ("zh_cn", "zh_tw", "ja")
    assert schemas.LANGS_ALL == ["zh_cn", "zh_tw", "ja", "ko", "all"]
