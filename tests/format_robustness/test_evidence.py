"""Unit tests of metamorph.studies.format_robustness.evidence and the packaged lexicons.

Hand-written items have hand-checked category tuples. The real-data checks read the shared
sample files *by path at run time* (never copied into the repo) and skip when they are absent.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from metamorph.errors import InputError
from metamorph.studies.format_robustness.evidence import Lexicon, available_lexicons, load_lexicon

SHARED = Path(__file__).resolve().parents[3] / "shared" / "datasets"
STUDY_DATASETS = ("construct", "credit_default", "discrim_eval", "medqa")


@pytest.fixture(scope="module")
def lex():
    return {name: load_lexicon(name) for name in STUDY_DATASETS}


def _sentences(text: str) -> list[str]:
    """Lines, then sentences (split after . ? ! before an upper-case letter, digit or quote)."""
    out = []
    for line in text.split("\n"):
        out += [s.strip() for s in re.split(r'(?<=[.?!])\s+(?=[A-Z0-9"])', line) if s.strip()]
    return out


def _read_jsonl(path: Path, n: int) -> list[dict]:
    rows = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                rows.append(json.loads(line))
            if len(rows) == n:
                break
    return rows


# ------------------------------------------------------------------------------------------
# Files and loading


def test_every_study_lexicon_is_packaged_and_valid(lex):
    assert set(STUDY_DATASETS) <= set(available_lexicons())
    for name, lx in lex.items():
        assert lx.dataset == name
        assert lx.version == "1"
        assert lx.tag == f"{name}@1"
        assert lx.source.endswith(f"{name}.json")


def test_category_lists(lex):
    assert sorted(lex["credit_default"].categories) == [
        "age",
        "bill_amount",
        "credit_limit",
        "education",
        "gender",
        "marital_status",
        "payment_amount",
        "payment_history",
    ]
    assert sorted(lex["construct"].categories) == [
        "age",
        "chronic_condition",
        "duration",
        "ethnicity",
        "gender",
        "smoking",
        "symptom",
        "vital_sign",
    ]
    assert {
        "age",
        "gender",
        "symptom",
        "vital_sign",
        "lab_result",
        "physical_exam",
        "medication",
        "medical_history",
        "imaging",
        "timeline",
        "social_history",
        "family_history",
        "procedure",
        "pregnancy",
    } <= set(lex["medqa"].categories)
    assert {
        "age",
        "gender",
        "race_ethnicity",
        "income_finances",
        "employment",
        "credit_history",
        "education",
        "health",
        "criminal_legal",
        "references_reputation",
        "experience_qualifications",
        "family",
        "policy_rules",
    } <= set(lex["discrim_eval"].categories)


def test_missing_lexicon_names_the_path(tmp_path):
    with pytest.raises(InputError) as exc:
        load_lexicon("no_such_dataset")
    assert "no_such_dataset.json" in str(exc.value)
    assert "medqa" in str(exc.value)  # lists what is available
    with pytest.raises(InputError) as exc:
        load_lexicon("medqa", directory=tmp_path)
    assert str(tmp_path / "medqa.json") in str(exc.value)


def test_invalid_json_names_the_path(tmp_path):
    (tmp_path / "toy.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(InputError) as exc:
        load_lexicon("toy", directory=tmp_path)
    assert str(tmp_path / "toy.json") in str(exc.value)
    assert "not valid JSON" in str(exc.value)


@pytest.mark.parametrize(
    ("content", "field"),
    [
        ({"version": "1", "categories": {"a": ["x"]}}, "dataset"),
        ({"dataset": "toy", "categories": {"a": ["x"]}}, "version"),
        ({"dataset": "toy", "version": "1", "categories": {}}, "categories"),
        ({"dataset": "toy", "version": "1", "categories": {"a": []}}, "categories.a"),
        ({"dataset": "toy", "version": "1", "categories": {"a": ["ok", 3]}}, "categories.a[1]"),
        ({"dataset": "toy", "version": "1", "categories": {"a": ["regex:(unclosed"]}}, "categories.a[0]"),
        ({"dataset": "toy", "version": "1", "categories": {"bad name": ["x"]}}, "categories.bad name"),
        ({"dataset": "other", "version": "1", "categories": {"a": ["x"]}}, "dataset"),
    ],
)
def test_invalid_lexicon_names_path_and_field(tmp_path, content, field):
    path = tmp_path / "toy.json"
    path.write_text(json.dumps(content), encoding="utf-8")
    with pytest.raises(InputError) as exc:
        load_lexicon("toy", directory=tmp_path)
    assert exc.value.source == str(path)
    assert exc.value.field == field


def test_bad_dataset_name_is_rejected():
    with pytest.raises(InputError):
        load_lexicon("../etc/passwd")


# ------------------------------------------------------------------------------------------
# Matching rules


def toy() -> Lexicon:
    return Lexicon.from_mapping(
        {
            "dataset": "toy",
            "version": "7",
            "categories": {
                "age": ["age", "regex:\\d+[\\s-]*years?[\\s-]*old"],
                "vital": ["heart rate", "°c", "regex:/\\s*min"],
                "symptom": ["symptom", "chest pain"],
            },
        }
    )


def test_word_boundaries():
    lx = toy()
    assert lx.categories_for("page 3 of the report") == ()
    assert lx.categories_for("the disease stage") == ()
    assert lx.categories_for("usage, message, ageing") == ()
    assert lx.categories_for("Age: 43") == ("age",)
    assert lx.categories_for("age_group 30-44") == ("age",)  # underscore separates words


def test_phrases_plural_and_separators():
    lx = toy()
    assert lx.categories_for("Symptoms started yesterday") == ("symptom",)
    assert lx.categories_for("heart_rate_bpm: 125") == ("vital",)
    assert lx.categories_for("Heart-rate 125") == ("vital",)
    assert lx.categories_for("heartrate 125") == ("vital",)
    assert lx.categories_for("heart 125") == ()


def test_regex_entries_and_punctuation_edges():
    lx = toy()
    assert lx.categories_for("a 43-year-old woman") == ("age",)
    assert lx.categories_for("temperature 39.5°C") == ("vital",)  # keyword starting with '°' after a digit
    assert lx.categories_for("pulse is 90/min") == ("vital",)  # regex starting with '/' after a digit
    assert lx.categories_for("90/minute") == ()  # ...but not inside a word
    assert lx.categories_for("chest pain for 43 years old") == ("age", "symptom")  # sorted


def test_map_items_and_exact_mapping_rate():
    lx = toy()
    items = ["chest pain", "page 7", "heart rate 120/min", "unrelated words"]
    assert lx.map_items(items) == [("symptom",), (), ("vital",), ()]
    assert lx.mapping_rate(items) == 0.5
    assert lx.mapping_rate(items[:3]) == pytest.approx(2 / 3)
    assert lx.mapping_rate(["Age 50"]) == 1.0
    assert lx.mapping_rate([]) is None


def test_curly_apostrophes_are_normalised(lex):
    lx = Lexicon.from_mapping({"dataset": "toy", "version": "1", "categories": {"doc": ["driver's license"]}})
    assert lx.categories_for("holds a driver\u2019s license") == ("doc",)
    assert lx.categories_for("holds a drivers license") == ()
    assert lex["discrim_eval"].categories_for("a master\u2019s") == ("education",)


def test_categories_for_rejects_non_strings(lex):
    with pytest.raises(TypeError):
        lex["medqa"].categories_for(None)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------
# The packaged lexicons on hand-written evidence items


@pytest.mark.parametrize(
    ("item", "cats"),
    [
        ("43-year-old woman", ("age", "gender")),
        ("fever and chills", ("symptom",)),
        ("temperature 39.5°C", ("vital_sign",)),
        ("blood pressure is 125/90 mm Hg", ("vital_sign",)),
        ("pulse is 90/min", ("vital_sign",)),
        ("Leukocyte count 17,100/mm3", ("lab_result",)),
        ("CT scan shows free air in the soft tissue", ("imaging", "physical_exam")),
        ("received cephalexin", ("medication",)),
        ("treated with lisinopril", ("medication",)),
        ("underwent a hysterectomy 9 years ago", ("procedure", "timeline")),
        ("5-year history of hypertension", ("medical_history", "timeline")),
        ("smokes one pack of cigarettes daily", ("social_history", "timeline")),
        ("mother has breast cancer", ("family_history", "medical_history")),
        ("gravida 2, para 1", ("pregnancy",)),
        ("tender to palpation", ("physical_exam",)),
        ("on page 4", ()),
    ],
)
def test_medqa_items(lex, item, cats):
    assert lex["medqa"].categories_for(item) == cats


@pytest.mark.parametrize(
    ("item", "cats"),
    [
        ("Asian male applicant", ("gender", "race_ethnicity")),
        ("strong credit history", ("credit_history",)),
        ("stable employment", ("employment",)),
        ("lack of criminal record", ("criminal_legal",)),
        ("income slightly below the minimum threshold", ("income_finances", "policy_rules")),
        ("excellent references from past landlords", ("references_reputation", "residence_location")),
        ("has a GED", ("education",)),
        ("recently treated for depression", ("health",)),
        ("He is 45 years old", ("age",)),
        ("has two children", ("family",)),
        ("has many years of experience", ("experience_qualifications", "track_record")),
        ("the manager", ("employment",)),  # 'man' is not matched inside 'manager'
    ],
)
def test_discrim_eval_items(lex, item, cats):
    assert lex["discrim_eval"].categories_for(item) == cats


@pytest.mark.parametrize(
    ("item", "cats"),
    [
        ("PAY_0: 2", ("payment_history",)),
        ("repayment_status_september: payment delayed 2 months", ("payment_history",)),
        ("paid duly in August", ("payment_history",)),
        ("BILL_AMT1 = 138681", ("bill_amount",)),
        ("bill_amount_september_ntd: 138681", ("bill_amount",)),
        ("PAY_AMT1: 3500", ("payment_amount",)),
        ("payment_amount_april_ntd: 0", ("payment_amount",)),
        ("LIMIT_BAL: 70000", ("credit_limit",)),
        ("credit_limit_ntd: 70000", ("credit_limit",)),
        ("age: 58", ("age",)),
        ("sex: female", ("gender",)),
        ("education: university", ("education",)),
        ("marital_status: married", ("marital_status",)),
    ],
)
def test_credit_default_items(lex, item, cats):
    assert lex["credit_default"].categories_for(item) == cats


@pytest.mark.parametrize(
    ("item", "cats"),
    [
        ("systolic_bp_mmhg: 185", ("vital_sign",)),
        ("heart rate 125 bpm", ("vital_sign",)),
        ("temperature_c: 38.9", ("vital_sign",)),
        ("SpO2 of 89%", ("vital_sign",)),
        ("chief_complaint: chest pain", ("symptom",)),
        ("symptom_duration_days: 5", ("duration",)),
        ("symptoms for 3 days", ("duration", "symptom")),
        ("chronic_conditions: COPD; type 2 diabetes", ("chronic_condition",)),
        ("smoker: yes", ("smoking",)),
        ("age: 67", ("age",)),
        ("sex: female", ("gender",)),
        ("ethnicity: Hispanic", ("ethnicity",)),
    ],
)
def test_construct_items(lex, item, cats):
    assert lex["construct"].categories_for(item) == cats


# ------------------------------------------------------------------------------------------
# Real-data sanity checks (read from ../shared by path; skipped when absent)


def test_medqa_first_20_questions_map_over_90_percent(lex):
    path = SHARED / "medqa" / "sample.jsonl"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    rows = _read_jsonl(path, 20)
    assert len(rows) == 20
    items = [s for r in rows for s in _sentences(r["question"])]
    rate = lex["medqa"].mapping_rate(items)
    unmapped = [s for s in items if not lex["medqa"].categories_for(s)]
    print(f"\nmedqa: {len(items)} sentences of the first 20 questions, mapping rate {rate:.4f}; unmapped: {unmapped}")
    assert rate >= 0.9


def test_discrim_eval_first_20_scenarios_map_over_90_percent(lex):
    path = SHARED / "discrim_eval" / "sample.jsonl"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    rows = _read_jsonl(path, 20)
    items = [s for r in rows for s in _sentences(r["filled_template"])]
    rate = lex["discrim_eval"].mapping_rate(items)
    print(f"\ndiscrim_eval: {len(items)} sentences of the first 20 scenarios, mapping rate {rate:.4f}")
    assert rate >= 0.9


def test_credit_default_fields_of_real_rows_map_to_one_category_each(lex):
    path = SHARED / "credit_default" / "sample.jsonl"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    from metamorph.studies.format_robustness.sources import adapt_credit_default
    from metamorph.studies.format_robustness.records import canonical_text

    expected_prefix = {
        "credit_limit": "credit_limit",
        "sex": "gender",
        "education": "education",
        "marital_status": "marital_status",
        "age": "age",
        "repayment_status": "payment_history",
        "bill_amount": "bill_amount",
        "payment_amount": "payment_amount",
    }
    skip = {"id", "ID", "gold", "default_payment_next_month"}
    raw_expected = {
        "LIMIT_BAL": "credit_limit",
        "SEX": "gender",
        "EDUCATION": "education",
        "MARRIAGE": "marital_status",
        "AGE": "age",
    }
    for i, row in enumerate(_read_jsonl(path, 20), start=1):
        for key, value in row.items():  # raw UCI column names
            if key in skip:
                continue
            want = raw_expected.get(key) or (
                "payment_amount"
                if key.startswith("PAY_AMT")
                else "bill_amount"
                if key.startswith("BILL_AMT")
                else "payment_history"
            )
            assert lex["credit_default"].categories_for(f"{key}: {value}") == (want,), key
        for key, value in adapt_credit_default(row, str(path), i).fields:  # the study's field names
            want = next(v for k, v in expected_prefix.items() if key.startswith(k))
            item = f"{key}: {canonical_text(value)}"
            assert lex["credit_default"].categories_for(item) == (want,), item


def test_construct_fields_map_to_one_category_each(lex):
    from metamorph.studies.format_robustness.sources import construct_dataset
    from metamorph.studies.format_robustness.records import canonical_text

    expected = {
        "age": "age",
        "sex": "gender",
        "ethnicity": "ethnicity",
        "chief_complaint": "symptom",
        "symptom_duration_days": "duration",
        "temperature_c": "vital_sign",
        "spo2_pct": "vital_sign",
        "systolic_bp_mmhg": "vital_sign",
        "heart_rate_bpm": "vital_sign",
        "chronic_conditions": "chronic_condition",
        "smoker": "smoking",
    }
    for x in construct_dataset(n=24, seed=0):
        for key, value in x.fields:
            assert lex["construct"].categories_for(f"{key}: {canonical_text(value)}") == (expected[key],), key


def test_a_repeated_item_is_mapped_once():
    """Items recur (one field quoted in every format and repeat): the second lookup is the first
    one's result, not a new pattern search; equal lexicons stay equal whatever they have mapped."""
    lx, other = toy(), toy()
    first = lx.categories_for("43-year-old with chest pain, heart rate 110/min")
    assert first == ("age", "symptom", "vital")
    assert lx.categories_for("43-year-old with chest pain, heart rate 110/min") is first
    assert lx == other and lx.categories_for("Age: 43") == other.categories_for("Age: 43") == ("age",)
    with pytest.raises(TypeError, match="evidence items are strings, got list"):
        lx.categories_for(["not", "a", "string"])
