"""Renderers: exact renderings, the three §4.2 constraints, round trip on every real instance."""

from __future__ import annotations

import csv
import io
import json

import pytest

from metamorph.studies.format_robustness.sources import construct_dataset, load_source
from metamorph.errors import InputError
from metamorph.studies.format_robustness.records import SourceInstance
from metamorph.studies.format_robustness.renderers import (
    DEFAULT_FORMATS,
    RENDERERS,
    Renderer,
    register_renderer,
    render,
)
from tests.conftest import shared_sample

X = SourceInstance(
    instance_id="t-1", dataset="toy",
    fields=(("age", 58), ("note", "a|b, \"quoted\"\nsecond line"), ("temp", 38.5), ("flag", True), ("empty", None)),
    task_prompt="Decide.", answer_space=("yes", "no"), gold="yes",
)


def test_txt_exact():
    assert render(X, "txt").text == (
        "age: 58\nnote: a|b, \"quoted\"\\nsecond line\ntemp: 38.5\nflag: true\nempty: \n")


def test_md_exact_two_column_table():
    assert render(X, "md").text == (
        "| Field | Value |\n| --- | --- |\n| age | 58 |\n| note | a\\|b, \"quoted\"\\nsecond line |\n"
        "| temp | 38.5 |\n| flag | true |\n| empty |  |\n")


def test_json_is_one_object_with_native_types():
    obj = json.loads(render(X, "json").text)
    assert obj == {"age": 58, "note": "a|b, \"quoted\"\nsecond line", "temp": 38.5, "flag": True, "empty": None}


def test_csv_each_field_in_its_own_cell():
    rows = list(csv.reader(io.StringIO(render(X, "csv").text)))
    assert rows == [["age", "note", "temp", "flag", "empty"],
                    ["58", "a|b, \"quoted\"\nsecond line", "38.5", "true", ""]]


def test_documents_differ_but_carry_the_same_pairs():
    docs = {f: render(X, f) for f in DEFAULT_FORMATS}
    assert len({d.sha256 for d in docs.values()}) == 4
    assert {d.media_type for d in docs.values()} == {"text/plain", "text/markdown", "application/json", "text/csv"}
    for f, d in docs.items():
        assert RENDERERS[f].parse(d.text) == [("age", "58"), ("note", "a|b, \"quoted\"\nsecond line"),
                                              ("temp", "38.5"), ("flag", "true"), ("empty", "")]


def test_instruction_isolation_is_enforced():
    leaky = SourceInstance("t-2", "toy", (("q", "Decide. Then answer."),), "Decide. Then answer.", ("yes", "no"))
    with pytest.raises(InputError, match="instruction isolation"):
        render(leaky, "txt")


def test_a_broken_renderer_fails_the_invariance_check():
    bad = Renderer("lossy", "text/plain", "txt", "lossy-1", lambda x: "x: 1\n", lambda t: [("x", "1")])
    register_renderer(bad)
    try:
        with pytest.raises(InputError, match="lossy round trip changed the record"):
            render(X, "lossy")
    finally:
        del RENDERERS["lossy"]


def test_register_rejects_duplicate_names():
    with pytest.raises(ValueError, match="already registered"):
        register_renderer(RENDERERS["txt"])


@pytest.mark.parametrize("fmt", DEFAULT_FORMATS)
def test_round_trip_on_every_construct_instance(fmt):
    for x in construct_dataset(n=200, seed=3):
        render(x, fmt, check=True)


@pytest.mark.parametrize("adapter", ["medqa", "discrim_eval", "credit_default"])
def test_round_trip_on_every_shared_real_instance(adapter):
    xs = load_source(f"{adapter}:{shared_sample(adapter)}")
    assert len(xs) == 200
    for x in xs:
        for fmt in DEFAULT_FORMATS:
            render(x, fmt, check=True)
