"""Loaders, adapters, the construct dataset and bad-input errors (file, row, field)."""

from __future__ import annotations

import json

import fsspec
import pytest
from fsspec.implementations.local import LocalFileSystem

from metamorph.studies.format_robustness.sources import (
    construct_dataset,
    construct_rule,
    load_source,
    load_sources,
)
from metamorph.errors import InputError
from tests.conftest import shared_sample

MEDQA_ROW = {
    "id": "m-1",
    "question": "A 43-year-old woman has fever. Most likely cause?",
    "options": {"A": "w", "B": "x", "C": "y", "D": "z"},
    "answer_idx": "D",
}


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_construct_is_deterministic_balanced_and_follows_its_rule():
    a, b = construct_dataset(24, seed=0), construct_dataset(24, seed=0)
    assert a == b
    assert construct_dataset(24, seed=1) != a
    assert sum(x.gold == "refer" for x in a) == 12
    for x in a:
        f = dict(x.fields)
        assert x.gold == construct_rule(f["temperature_c"], f["spo2_pct"], f["systolic_bp_mmhg"], f["heart_rate_bpm"])
        assert set(x.sensitive) == {"sex", "ethnicity", "age_group"}


def test_construct_rule_boundaries():
    assert construct_rule(38.5, 98, 120, 80) == "refer"
    assert construct_rule(38.4, 92, 179, 119) == "do not refer"
    assert construct_rule(37.0, 91, 120, 80) == "refer"
    assert construct_rule(37.0, 98, 180, 80) == "refer"
    assert construct_rule(37.0, 98, 120, 120) == "refer"


def test_medqa_real_sample_loads():
    xs = load_source(f"medqa:{shared_sample('medqa')}")
    assert len(xs) == 200
    x = xs[0]
    assert x.answer_space == ("A", "B", "C", "D") and x.gold in x.answer_space
    assert x.field_names() == ["question", "option_A", "option_B", "option_C", "option_D"]


def test_credit_default_real_sample_decodes_fields():
    xs = load_source(f"credit_default:{shared_sample('credit_default')}", limit=5)
    f = dict(xs[0].fields)
    assert len(xs[0].fields) == 23
    assert f["sex"] in ("male", "female") and xs[0].gold in ("default", "no default")
    assert set(xs[0].sensitive) == {"sex", "education", "marital_status", "age_group"}


def test_discrim_eval_has_no_gold_and_yes_is_favourable():
    xs = load_source(f"discrim_eval:{shared_sample('discrim_eval')}", limit=3)
    assert all(x.gold is None and x.favorable_label == "yes" for x in xs)
    assert set(xs[0].sensitive) == {"gender", "race"}


def test_missing_question_names_file_row_field(tmp_path):
    p = write_jsonl(tmp_path / "m.jsonl", [MEDQA_ROW, {**MEDQA_ROW, "id": "m-2", "question": ""}])
    with pytest.raises(InputError) as e:
        load_source(f"medqa:{p}")
    assert str(e.value) == f"{p}, row 2, field 'question': missing or empty"


def test_missing_fields_names_the_field(tmp_path):
    p = write_jsonl(tmp_path / "m.jsonl", [{k: v for k, v in MEDQA_ROW.items() if k != "options"}])
    with pytest.raises(InputError, match=r"row 1, field 'options': missing or empty"):
        load_source(f"medqa:{p}")


def test_duplicate_instance_id(tmp_path):
    p = write_jsonl(tmp_path / "m.jsonl", [MEDQA_ROW, MEDQA_ROW])
    with pytest.raises(InputError) as e:
        load_source(f"medqa:{p}")
    assert str(e.value) == f"{p}, row 2, field 'id': duplicate instance_id 'm-1' (first at row 1)"


def test_gold_outside_answer_space(tmp_path):
    p = write_jsonl(tmp_path / "m.jsonl", [{**MEDQA_ROW, "answer_idx": "E"}])
    with pytest.raises(InputError) as e:
        load_source(f"medqa:{p}")
    assert str(e.value) == f"{p}, row 1, field 'answer_idx': gold label 'E' is not one of A, B, C, D"


def test_answer_idx_and_gold_must_agree(tmp_path):
    p = write_jsonl(tmp_path / "m.jsonl", [{**MEDQA_ROW, "answer_idx": "A", "gold": "C"}])
    with pytest.raises(InputError) as e:
        load_source(f"medqa:{p}")
    assert str(e.value) == f"{p}, row 1, field 'answer_idx': answer_idx 'A' disagrees with gold 'C'"


def test_limit_must_be_positive(tmp_path):
    p = write_jsonl(tmp_path / "m.jsonl", [MEDQA_ROW])
    with pytest.raises(InputError, match="limit must be >= 1"):
        load_source(f"medqa:{p}", limit=0)


def test_empty_file_and_missing_path(tmp_path):
    empty = tmp_path / "e.jsonl"
    empty.write_text("")
    with pytest.raises(InputError, match="file is empty"):
        load_source(f"medqa:{empty}")
    with pytest.raises(InputError, match="file does not exist"):
        load_source(f"medqa:{tmp_path / 'nope.jsonl'}")


def test_bad_json_line_names_row(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text(json.dumps(MEDQA_ROW) + "\n{not json\n")
    with pytest.raises(InputError, match=r"row 2: not valid JSON"):
        load_source(f"medqa:{p}")


def test_unknown_adapter_and_bad_spec():
    with pytest.raises(InputError, match="unknown adapter"):
        load_source("nosuch:/tmp/x.jsonl")
    with pytest.raises(InputError, match="a source spec is"):
        load_source("medqa")
    with pytest.raises(InputError) as e:  # construct is generated: a location is a mistake, said as such
        load_source("construct:foo")
    assert (
        str(e.value)
        == "construct:foo: 'construct' is generated, not read from a file: give it alone (construct?n=40&seed=7)"
    )


def test_duplicate_across_sources(tmp_path):
    p = write_jsonl(tmp_path / "m.jsonl", [MEDQA_ROW])
    with pytest.raises(InputError) as e:
        load_sources([f"medqa:{p}", f"medqa:{p}"])
    assert (
        str(e.value)
        == f"medqa:{p}, row 1, field 'id': instance 'm-1' of dataset 'medqa' was already loaded from medqa:{p}"
    )


def test_bad_construct_parameters():
    with pytest.raises(InputError, match="must be integers"):
        load_source("construct?n=abc")
    with pytest.raises(InputError, match="1 <= n <= 100,000"):
        load_source("construct?n=0")


def test_csv_and_parquet_files(tmp_path):
    import pandas as pd

    rows = [
        {
            "id": "c-1",
            "ID": 1,
            "LIMIT_BAL": 1000,
            "SEX": 2,
            "EDUCATION": 1,
            "MARRIAGE": 2,
            "AGE": 33,
            **{c: 0 for c in ["PAY_0", "PAY_2", "PAY_3", "PAY_4", "PAY_5", "PAY_6"]},
            **{f"BILL_AMT{i}": 10 * i for i in range(1, 7)},
            **{f"PAY_AMT{i}": i for i in range(1, 7)},
            "default_payment_next_month": 1,
        }
    ]
    pd.DataFrame(rows).to_csv(tmp_path / "c.csv", index=False)
    pd.DataFrame(rows).to_parquet(tmp_path / "c.parquet")
    a = load_source(f"credit_default:{tmp_path / 'c.csv'}")
    b = load_source(f"credit_default:{tmp_path / 'c.parquet'}")
    assert a == b and a[0].gold == "default" and dict(a[0].fields)["sex"] == "female"


class _LocalHub(LocalFileSystem):
    """Stands in for the Hugging Face hub file system: hf://datasets/... -> a local folder."""

    protocol = "hf"
    root = ""

    @classmethod
    def _strip_protocol(cls, path):
        path = str(path)
        if path.startswith("hf://"):
            path = f"{cls.root}/{path[len('hf://') :]}"
        return super()._strip_protocol(path)


def test_hf_uri_goes_through_fsspec(tmp_path):
    (tmp_path / "datasets" / "org" / "medqa").mkdir(parents=True)
    write_jsonl(tmp_path / "datasets" / "org" / "medqa" / "test.jsonl", [MEDQA_ROW])
    _LocalHub.root = str(tmp_path)
    fsspec.register_implementation("hf", _LocalHub, clobber=True)
    try:
        xs = load_source("medqa:hf://datasets/org/medqa/test.jsonl")
    finally:
        fsspec.register_implementation("hf", "huggingface_hub.HfFileSystem", clobber=True)
    assert [x.instance_id for x in xs] == ["m-1"]


def test_sample_rows_is_a_seeded_random_sample_in_file_order():
    from metamorph.studies.format_robustness.sources import sample_rows
    import random

    assert sample_rows(10, 3, 0) == sorted(random.Random(0).sample(range(10), 3)) == [0, 6, 9]
    assert sample_rows(10, 3, None) == [0, 1, 2]  # the first N rows, the named option
    assert sample_rows(10, None, 0) == list(range(10)) == sample_rows(10, 12, 0)
    assert sample_rows(10, 3, 1) != sample_rows(10, 3, 0)


def test_limit_samples_rows_and_errors_name_the_file_row(tmp_path):
    rows = [{**MEDQA_ROW, "id": f"m-{i}"} for i in range(1, 11)]
    p = write_jsonl(tmp_path / "m.jsonl", rows)
    assert [x.instance_id for x in load_source(f"medqa:{p}", limit=3)] == ["m-1", "m-7", "m-10"]
    assert [x.instance_id for x in load_source(f"medqa:{p}", limit=3, sample_seed=None)] == ["m-1", "m-2", "m-3"]
    bad = [dict(r) for r in rows]
    bad[6]["question"] = ""  # file row 7 is in the seed-0 sample
    p2 = write_jsonl(tmp_path / "bad.jsonl", bad)
    with pytest.raises(InputError) as e:
        load_source(f"medqa:{p2}", limit=3)
    assert str(e.value) == f"{p2}, row 7, field 'question': missing or empty"
    # a bad row outside the sample is not read
    assert len(load_source(f"medqa:{p2}", limit=3, sample_seed=None)) == 3


# ------------------------------------------------------------------------------------------
# Malformed CSV files: one InputError naming file, row and field (never a raw ValueError)

CANON_HEADER = "instance_id,dataset,fields,task_prompt,answer_space,gold\n"
CANON_ROW = 'r{n},toy,"{{""age"": 61, ""note"": ""a, b""}}",Decide.,"[""yes"", ""no""]",yes\n'
CREDIT_HEADER = (
    "id,ID,LIMIT_BAL,SEX,EDUCATION,MARRIAGE,AGE,PAY_0,PAY_2,PAY_3,PAY_4,PAY_5,PAY_6,"
    + ",".join(f"BILL_AMT{i}" for i in range(1, 7))
    + ","
    + ",".join(f"PAY_AMT{i}" for i in range(1, 7))
    + ",default_payment_next_month\n"
)


def credit_row(limit_bal="1000"):
    return (
        f"c-1,1,{limit_bal},2,1,2,33,"
        + ",".join(["0"] * 6)
        + ","
        + ",".join(["10"] * 6)
        + ","
        + ",".join(["1"] * 6)
        + ",1\n"
    )


#: (file name, adapter, file text, the error's text after the path)
BAD_CSV = [
    # a bad row: a cell that must hold JSON does not
    (
        "fields.csv",
        "canonical",
        CANON_HEADER + CANON_ROW.format(n=1) + 'r2,toy,age=61,Decide.,"[""yes"", ""no""]",yes\n',
        ", row 3, field 'fields': expected an object or a list of [name, value] pairs as JSON text "
        "in the CSV cell, got 'age=61' (Expecting value)",
    ),
    (
        "space.csv",
        "canonical",
        CANON_HEADER + 'r1,toy,"{""a"": 1}",Decide.,yes|no,yes\n',
        ", row 2, field 'answer_space': expected a list of labels as JSON text in the CSV cell, "
        "got 'yes|no' (Expecting value)",
    ),
    (
        "shape.csv",
        "canonical",
        CANON_HEADER + 'r1,toy,"[[""a"", 1, 2]]",Decide.,"[""yes"", ""no""]",yes\n',
        ", row 2, field 'fields': expected an object or a list of [name, value] pairs, got the entry ['a', 1, 2]",
    ),
    (
        "kind.csv",
        "canonical",
        CANON_HEADER + 'r1,toy,"{""a"": 1}",Decide.,"{""yes"": 1}",yes\n',
        ", row 2, field 'answer_space': expected a list of labels, got {'yes': 1}",
    ),
    (
        "gold.csv",
        "canonical",
        CANON_HEADER + CANON_ROW.format(n=1).replace(",yes\n", ",maybe\n"),
        ", row 2, field 'gold': gold label 'maybe' is not in the answer space ['yes', 'no']",
    ),
    # a missing column
    (
        "nocol.csv",
        "canonical",
        CANON_HEADER.replace(",answer_space", "") + 'r1,toy,"{""a"": 1}",Decide.,yes\n',
        ", row 2, field 'answer_space': missing or empty",
    ),
    # a non-numeric value
    (
        "credit.csv",
        "credit_default",
        CREDIT_HEADER + credit_row("1,000"),  # unquoted separator: one value too many
        ", row 2: has 27 values, the header has 26 columns",
    ),
    (
        "credit2.csv",
        "credit_default",
        CREDIT_HEADER + credit_row("abc"),
        ", row 2, field 'LIMIT_BAL': expected an integer, got 'abc'",
    ),
    (
        "credit3.csv",
        "credit_default",
        CREDIT_HEADER + credit_row("1000.5"),
        ", row 2, field 'LIMIT_BAL': expected an integer, got '1000.5'",
    ),
    # ragged rows: too many values, too few (named by the first column without a value)
    (
        "long.csv",
        "canonical",
        CANON_HEADER + CANON_ROW.format(n=1) + CANON_ROW.format(n=2)[:-1] + ",extra\n",
        ", row 3: has 7 values, the header has 6 columns",
    ),
    (
        "short.csv",
        "canonical",
        CANON_HEADER + CANON_ROW.format(n=1).rsplit(",", 1)[0] + "\n",
        ", row 2, field 'gold': has 5 values, the header has 6 columns",
    ),
    # bad quoting, an empty file, a header without rows, a header that repeats a name
    (
        "quote.csv",
        "canonical",
        CANON_HEADER + CANON_ROW.format(n=1) + 'r2,toy,"{""a"": 1}\n',
        ", row 3: not valid CSV (unexpected end of data)",
    ),
    ("empty.csv", "canonical", "", ": file is empty"),
    ("header.csv", "canonical", CANON_HEADER, ": file has no rows"),
    (
        "twice.csv",
        "canonical",
        CANON_HEADER.replace("gold", "dataset") + CANON_ROW.format(n=1),
        ", row 1, field 'dataset': the header names this column twice",
    ),
    # a medqa CSV: options are JSON text
    (
        "medqa.csv",
        "medqa",
        'id,question,options,answer_idx\nm-1,Q?,"{""A"": ""w""}",D\n',
        ", row 2, field 'options': expected options with keys A-D, got {'A': 'w'}",
    ),
]


@pytest.mark.parametrize(("name", "adapter", "text", "message"), BAD_CSV, ids=[c[0] for c in BAD_CSV])
def test_malformed_csv_raises_input_error_naming_file_row_field(tmp_path, name, adapter, text, message):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as e:
        load_source(f"{adapter}:{p}")
    assert str(e.value) == f"{p}{message}"


def test_canonical_csv_decodes_json_cells_and_empty_optional_cells(tmp_path):
    p = tmp_path / "ok.csv"
    p.write_text(
        "instance_id,dataset,fields,task_prompt,answer_space,gold,favorable_label,sensitive\n"
        'r1,toy,"{""age"": 61, ""note"": ""a, b""}",Decide.,"[""yes"", ""no""]",yes,,"{""sex"": ""f""}"\n'
        "\n"  # a blank line is skipped and not counted
        'r2,toy,"[[""age"", 40]]",Decide.,"[""yes"", ""no""]",,no,\n',
        encoding="utf-8",
    )
    a, b = load_source(f"canonical:{p}")
    assert (a.instance_id, a.fields, a.answer_space, a.gold, a.favorable_label, a.sensitive) == (
        "r1",
        (("age", 61), ("note", "a, b")),
        ("yes", "no"),
        "yes",
        None,
        {"sex": "f"},
    )
    assert (b.instance_id, b.fields, b.gold, b.favorable_label, b.sensitive) == ("r2", (("age", 40),), None, "no", {})


def test_medqa_csv_with_json_options_loads(tmp_path):
    p = tmp_path / "m.csv"
    p.write_text(
        'id,question,options,answer_idx\nm-1,Q?,"{""A"": ""w"", ""B"": ""x"", ""C"": ""y"", ""D"": ""z""}",D\n',
        encoding="utf-8",
    )
    (x,) = load_source(f"medqa:{p}")
    assert x.fields == (("question", "Q?"), ("option_A", "w"), ("option_B", "x"), ("option_C", "y"), ("option_D", "z"))
    assert x.gold == "D"


def test_integer_columns_accept_integral_floats_only(tmp_path):
    import pandas as pd

    row = {
        "id": "c-1",
        "ID": 1,
        "LIMIT_BAL": 1000.0,
        "SEX": 2,
        "EDUCATION": 1,
        "MARRIAGE": 2,
        "AGE": 33,
        **{c: 0 for c in ["PAY_0", "PAY_2", "PAY_3", "PAY_4", "PAY_5", "PAY_6"]},
        **{f"BILL_AMT{i}": 10 for i in range(1, 7)},
        **{f"PAY_AMT{i}": 1 for i in range(1, 7)},
        "default_payment_next_month": 0,
    }
    pd.DataFrame([row]).to_parquet(tmp_path / "ok.parquet")
    assert dict(load_source(f"credit_default:{tmp_path / 'ok.parquet'}")[0].fields)["credit_limit_ntd"] == 1000
    pd.DataFrame([{**row, "LIMIT_BAL": 1000.5}]).to_parquet(tmp_path / "bad.parquet")
    with pytest.raises(InputError) as e:
        load_source(f"credit_default:{tmp_path / 'bad.parquet'}")
    assert str(e.value) == f"{tmp_path / 'bad.parquet'}, row 1, field 'LIMIT_BAL': expected an integer, got 1000.5"


def test_jsonl_keeps_a_unicode_line_separator_inside_a_string(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text(
        json.dumps({**MEDQA_ROW, "question": "line one\u2028line two"}, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    assert dict(load_source(f"medqa:{p}")[0].fields)["question"] == "line one\u2028line two"


def test_a_file_that_is_not_utf8_is_an_input_error(tmp_path):
    p = tmp_path / "latin1.csv"
    p.write_bytes(CANON_HEADER.encode() + 'r1,toy,"{}",Décidez.,"[]",\n'.encode("latin-1"))
    with pytest.raises(InputError) as e:
        load_source(f"canonical:{p}")
    assert str(e.value) == f"{p}, row 2: not valid UTF-8: byte 0xe9 at column 14 (invalid continuation byte)"


# --------------------------------------------------------------------------- one reader, four formats

_CANONICAL_ROWS = [
    {
        "instance_id": "c-1",
        "dataset": "toy",
        "fields": {"age": 61, "smoker": "no"},
        "task_prompt": "Decide.",
        "answer_space": ["yes", "no"],
        "gold": "yes",
        "sensitive": {"sex": "female"},
    },
    {
        "instance_id": "c-2",
        "dataset": "toy",
        "fields": {"age": 34, "smoker": "yes"},
        "task_prompt": "Decide.",
        "answer_space": ["yes", "no"],
        "gold": "no",
        "sensitive": {"sex": "male"},
    },
]


@pytest.mark.parametrize("adapter", ["medqa", "discrim_eval", "credit_default", "canonical"])
def test_each_source_reads_the_same_items_from_jsonl_json_csv_and_parquet(adapter, tmp_path):
    """List and object values (MedQA's ``options``; ``canonical``'s ``fields``, ``answer_space``,
    ``sensitive``) are JSON text in CSV cells, decoded by the shared reader."""
    from metamorph.studies.format_robustness.sources import load_sources
    from tests.conftest import shared_sample
    from tests.formats import head_rows, same_items, write_formats

    rows = _CANONICAL_ROWS if adapter == "canonical" else head_rows(shared_sample(adapter), 4)
    paths = write_formats(rows, tmp_path, adapter)
    items = {fmt: [x for _, x in load_sources([f"{adapter}:{p}"])] for fmt, p in paths.items()}
    assert len(items["jsonl"]) == len(rows)
    texts = same_items(items, paths)
    assert texts["json"] == texts["csv"] == texts["parquet"] == texts["jsonl"]


@pytest.mark.parametrize("uri", ["", "  "])
def test_an_empty_path_is_no_path_given_not_the_working_directory(uri):
    # '--source worfbench:' / 'orderprobe:' left an empty path, read as '.' ("is a directory")
    from metamorph.datasets import read_rows
    from metamorph.errors import InputError

    with pytest.raises(InputError, match="no path given") as exc:
        read_rows(uri)
    assert str(exc.value).startswith(repr(uri))
