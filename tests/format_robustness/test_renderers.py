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
    instance_id="t-1",
    dataset="toy",
    fields=(("age", 58), ("note", 'a|b, "quoted"\nsecond line'), ("temp", 38.5), ("flag", True), ("empty", None)),
    task_prompt="Decide.",
    answer_space=("yes", "no"),
    gold="yes",
)


def test_txt_exact():
    assert render(X, "txt").text == ('age: 58\nnote: a|b, "quoted"\\nsecond line\ntemp: 38.5\nflag: true\nempty: \n')


def test_md_exact_two_column_table():
    assert render(X, "md").text == (
        '| Field | Value |\n| --- | --- |\n| age | 58 |\n| note | a\\|b, "quoted"\\nsecond line |\n'
        "| temp | 38.5 |\n| flag | true |\n| empty |  |\n"
    )


def test_json_is_one_object_with_native_types():
    obj = json.loads(render(X, "json").text)
    assert obj == {"age": 58, "note": 'a|b, "quoted"\nsecond line', "temp": 38.5, "flag": True, "empty": None}


def test_csv_each_field_in_its_own_cell():
    rows = list(csv.reader(io.StringIO(render(X, "csv").text)))
    assert rows == [["age", "note", "temp", "flag", "empty"], ["58", 'a|b, "quoted"\nsecond line', "38.5", "true", ""]]


def test_documents_differ_but_carry_the_same_pairs():
    docs = {f: render(X, f) for f in DEFAULT_FORMATS}
    assert len({d.sha256 for d in docs.values()}) == 4
    assert {d.media_type for d in docs.values()} == {"text/plain", "text/markdown", "application/json", "text/csv"}
    for f, d in docs.items():
        assert RENDERERS[f].parse(d.text) == [
            ("age", "58"),
            ("note", 'a|b, "quoted"\nsecond line'),
            ("temp", "38.5"),
            ("flag", "true"),
            ("empty", ""),
        ]


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


# --------------------------------------------------------------------------- line breaks

from metamorph.studies.format_robustness.renderers import LINE_BREAKS, RENDERERS as _RENDERERS
from metamorph.studies.format_robustness.renderers import render as _render
from metamorph.studies.format_robustness.records import SourceInstance as _SI

_BREAKS = {
    "LF": "\n",
    "CR": "\r",
    "CRLF": "\r\n",
    "VT": "\x0b",
    "FF": "\x0c",
    "FS": "\x1c",
    "GS": "\x1d",
    "RS": "\x1e",
    "NEL": "\x85",
    "LS": "\u2028",
    "PS": "\u2029",
}


def test_line_breaks_cover_every_splitlines_boundary():
    boundaries = {chr(c) for c in range(0x110000) if len(("a" + chr(c) + "b").splitlines()) == 2}
    assert boundaries == set(LINE_BREAKS)
    assert set(_BREAKS.values()) - {"\r\n"} == set(LINE_BREAKS)


@pytest.mark.parametrize("fmt", ["txt", "md", "json", "csv"])
@pytest.mark.parametrize("name", sorted(_BREAKS))
def test_every_line_break_round_trips_in_every_format(fmt, name):
    b = _BREAKS[name]
    values = [f"x{b}y", b, f"z{b}", f"{b}{b}lead and trail{b}", f'a\\u2028 literal | , " {b} end']
    x = _SI("i1", "d", tuple((f"f{j}", v) for j, v in enumerate(values)), "P", ("yes", "no"))
    doc = _render(x, fmt, check=True)
    assert _RENDERERS[fmt].parse(doc.text) == [(f"f{j}", v) for j, v in enumerate(values)]
    if fmt in ("txt", "md"):  # line-oriented: one line per field (+ 2 header lines for md)
        assert len(doc.text.splitlines()) == len(values) + (2 if fmt == "md" else 0)
    if fmt == "json":
        assert not any(c in doc.text for c in ("\x85", "\u2028", "\u2029"))


def test_txt_escapes_are_exact():
    x = _SI("i1", "d", (("a", "1\r\n2\u20283\\"),), "P", ("yes", "no"))
    assert _render(x, "txt").text == "a: 1\\r\\n2\\u20283\\\\\n"
    assert _render(x, "csv").text == 'a\n"1\r\n2\u20283\\"\n'


# Renderer output is part of the cache key only through renderer_version (file uploads) and the
# document text: a change of a renderer's output without a version bump must fail here.
_PINNED = {
    "txt": "txt-2",
    "md": "md-2",
    "json": "json-2",
    "csv": "csv-2",
}


def _fixture():
    return _SI(
        "pin-1",
        "d",
        (("age", 42), ("note", 'a|b, "c"\r\nd\u2028e\\f'), ("ok", True), ("t", 37.5), ("empty", None)),
        "P",
        ("yes", "no"),
    )


def test_renderer_versions_pin_their_output():
    got = {f: (_RENDERERS[f].version, _render(_fixture(), f).sha256[:16]) for f in _PINNED}
    assert {f: v for f, (v, _) in got.items()} == _PINNED
    assert {f: h for f, (_, h) in got.items()} == PINNED_SHA, (
        "a renderer's output changed: bump its version in RENDERERS and update the pin"
    )


PINNED_SHA = {
    "txt": "f24cb5202f12417a",
    "md": "344a305dde1eca37",
    "json": "85fb637be92b8725",
    "csv": "6f1006597b2d5145",
}


@pytest.fixture
def csv_default_limit():
    """``csv``'s field limit as a fresh process has it (131,072 characters), restored afterwards:
    an earlier CSV source read in the same process must not hide a parse that would fail alone."""
    before = csv.field_size_limit(131_072)
    yield
    csv.field_size_limit(before)


def test_a_field_up_to_max_field_chars_round_trips_in_every_format(tmp_path, csv_default_limit):
    """A 200,000-character question (under the documented 1,000,000) was refused by the CSV
    re-parse of the rendered document (csv's default 131,072), after source_instances was written;
    one character over MAX_FIELD_CHARS is refused by the loader, naming row and field."""
    from metamorph.datasets import CSV_FIELD_LIMIT, MAX_FIELD_CHARS
    from metamorph.studies.format_robustness.sources import load_sources

    assert (MAX_FIELD_CHARS, CSV_FIELD_LIMIT) == (1_000_000, 2**31 - 1)
    row = {"id": "m-1", "question": "Fever? " + "x" * 200_000, "options": {k: k for k in "ABCD"}, "answer_idx": "A"}
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    [(_, x)] = load_sources([f"medqa:{path}"])
    docs = {f: render(x, f, check=True) for f in DEFAULT_FORMATS}
    assert dict(RENDERERS["csv"].parse(docs["csv"].text))["question"] == row["question"]
    for size, problem in ((MAX_FIELD_CHARS, None), (MAX_FIELD_CHARS + 1, "holds 1,000,001 characters")):
        path.write_text(json.dumps(dict(row, question="q" * size)) + "\n", encoding="utf-8")
        if problem is None:
            [(_, x)] = load_sources([f"medqa:{path}"])
            assert len(render(x, "csv", check=True).text) > MAX_FIELD_CHARS
        else:
            with pytest.raises(InputError) as e:
                load_sources([f"medqa:{path}"])
            assert str(e.value) == (
                f"{path}, row 1, field 'question': holds 1,000,001 characters; the limit is 1,000,000 per field "
                "(no model context takes more)"
            )
