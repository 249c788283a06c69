"""The five formats beyond the paper's four (html, yaml, pdf, docx, xlsx): each document read back by
an independent library, every field of every shipped record recovered, the nasty values the text
formats survive, binary documents in rendered_documents, ``--formats`` and the extracted text an
inline model reads."""

from __future__ import annotations

import io
import json

import dagster as dg
import duckdb
import pandas as pd
import pytest
import yaml

from metamorph.errors import InputError
from metamorph.studies.format_robustness import readers
from metamorph.studies.format_robustness.records import SourceInstance
from metamorph.studies.format_robustness.renderers import (
    DEFAULT_FORMATS,
    KNOWN_FORMATS,
    RENDERERS,
    UnwritableCharacter,
    expected_pairs,
    render,
)
from metamorph.studies.format_robustness.sources import construct_dataset, load_source
from tests.conftest import shared_sample, use_stub_registry

NEW = ("html", "yaml", "pdf", "docx", "xlsx")
BINARY = ("pdf", "docx", "xlsx")

X = SourceInstance(
    instance_id="t-1",
    dataset="toy",
    fields=(("age", 58), ("note", 'a|b, "quoted"\nsecond line'), ("temp", 38.5), ("flag", True), ("empty", None)),
    task_prompt="Decide.",
    answer_space=("yes", "no"),
    gold="yes",
)
PAIRS = [("age", "58"), ("note", 'a|b, "quoted"\nsecond line'), ("temp", "38.5"), ("flag", "true"), ("empty", "")]


def test_the_registry_has_nine_formats_and_the_default_stays_the_papers_four():
    assert KNOWN_FORMATS == ("txt", "md", "json", "csv", "html", "yaml", "pdf", "docx", "xlsx")
    assert DEFAULT_FORMATS == ("txt", "md", "json", "csv")
    assert {f: (RENDERERS[f].binary, RENDERERS[f].extraction) for f in NEW} == {
        "html": (False, None),
        "yaml": (False, None),
        "pdf": (True, "extract:pypdf"),
        "docx": (True, "extract:docx"),
        "xlsx": (True, "extract:openpyxl"),
    }


# --------------------------------------------------------------------------- each reader, by hand


def test_html_is_a_two_column_table_read_by_html_parser():
    doc = render(X, "html")
    assert doc.media_type == "text/html" and doc.data is None
    body = doc.text.split("<tbody>\n")[1].split("</tbody>")[0]
    assert body == (
        '<tr><th scope="row">age</th><td>58</td></tr>\n'
        '<tr><th scope="row">note</th><td>a|b, &quot;quoted&quot;\nsecond line</td></tr>\n'
        '<tr><th scope="row">temp</th><td>38.5</td></tr>\n'
        '<tr><th scope="row">flag</th><td>true</td></tr>\n'
        '<tr><th scope="row">empty</th><td></td></tr>\n'
    )
    assert readers.read_pairs("html", doc.text) == PAIRS


def test_yaml_is_one_mapping_with_native_scalars():
    doc = render(X, "yaml")
    assert doc.text == "age: 58\nnote: 'a|b, \"quoted\"\n\n  second line'\ntemp: 38.5\nflag: true\nempty: null\n"
    assert yaml.safe_load(doc.text) == {
        "age": 58,
        "note": 'a|b, "quoted"\nsecond line',
        "temp": 38.5,
        "flag": True,
        "empty": None,
    }


def test_pdf_text_as_pypdf_reads_it():
    from pypdf import PdfReader

    doc = render(X, "pdf")
    assert doc.data.startswith(b"%PDF-") and doc.media_type == "application/pdf"
    reader = PdfReader(io.BytesIO(doc.data))
    assert len(reader.pages) == 1
    text = reader.pages[0].extract_text(extraction_mode="layout", layout_mode_space_vertically=False)
    assert text == 'age: 58\nnote: a|b, "quoted"\\nsecond line\ntemp: 38.5\nflag: true\nempty:'
    assert doc.text == text  # what an inline model reads: extract:pypdf
    assert doc.filename == "t-1.pdf"


def test_docx_table_as_python_docx_reads_it():
    from docx import Document

    doc = render(X, "docx")
    table = Document(io.BytesIO(doc.data)).tables[0]
    assert [[c.text for c in row.cells] for row in table.rows] == [
        ["Field", "Value"],
        ["age", "58"],
        ["note", 'a|b, "quoted"\\nsecond line'],
        ["temp", "38.5"],
        ["flag", "true"],
        ["empty", ""],
    ]
    assert doc.text == 'Field\tValue\nage\t58\nnote\ta|b, "quoted"\\nsecond line\ntemp\t38.5\nflag\ttrue\nempty\t\n'


def test_xlsx_cells_as_openpyxl_reads_them_numbers_native():
    from openpyxl import load_workbook

    doc = render(X, "xlsx")
    ws = load_workbook(io.BytesIO(doc.data)).worksheets[0]
    assert ws.title == "record"
    assert [[c.value for c in row] for row in ws.iter_rows()] == [
        ["age", "note", "temp", "flag", "empty"],
        [58, 'a|b, "quoted"\\nsecond line', 38.5, True, None],
    ]
    assert doc.text == 'age\tnote\ttemp\tflag\tempty\n58\ta|b, "quoted"\\nsecond line\t38.5\ttrue\t\n'


def test_xlsx_text_that_looks_like_a_formula_and_numbers_a_cell_cannot_hold_are_text():
    from openpyxl import load_workbook

    x = SourceInstance(
        "f-1",
        "toy",
        (("f", "=1+1"), ("big", 2**53 + 1), ("third", 0.1 + 0.2), ("whole", 37.0), ("n", 2**53)),
        "P",
        ("a", "b"),
    )
    ws = load_workbook(io.BytesIO(render(x, "xlsx").data)).worksheets[0]
    assert [c.value for c in ws[2]] == ["=1+1", "9007199254740993", "0.30000000000000004", "37.0", 2**53]
    assert [c.data_type for c in ws[2]] == ["s", "s", "s", "s", "n"]


@pytest.mark.parametrize("fmt", BINARY)
def test_binary_documents_do_not_depend_on_when_they_are_made(fmt, monkeypatch):
    import time

    first = render(X, fmt).data
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 86400 * 400)  # a year later
    second = render(X, fmt).data
    assert first == second
    assert render(X, fmt).sha256 != render(SourceInstance("t-2", "toy", (("age", 59),), "P", ("a", "b")), fmt).sha256


# --------------------------------------------------------------------------- nasty values

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


@pytest.mark.parametrize("fmt", NEW)
@pytest.mark.parametrize("name", sorted(_BREAKS))
def test_every_line_break_round_trips(fmt, name):
    b = _BREAKS[name]
    values = [f"x{b}y", b, f"z{b}", f"{b}{b}lead and trail{b}", f'a\\u2028 literal | , " {b} end']
    x = SourceInstance("i1", "d", tuple((f"f{j}", v) for j, v in enumerate(values)), "Decide.", ("yes", "no"))
    doc = render(x, fmt, check=True)
    got = readers.read_pairs(fmt, doc.data if doc.data is not None else doc.text)
    assert got == [(f"f{j}", v) for j, v in enumerate(values)]


#: Values the text formats survive, and every new format must too (pdf: see below).
NASTY = {
    "quotes": "she said \"no\" and 'yes' `maybe` “curly” ‘single’",
    "delimiters": "a,b;c|d\te: f = g # h & i < j > k \\ l {m} [n] --- *o* _p_",
    "backslashes": "\\n is not a newline, \\u2028 neither, and \\ alone, \\\\ two",
    "html_like": "<td>cell</td> </tbody> &amp; &lt; <!-- x --> <script>alert(1)</script>",
    "yaml_like": "yes: no\n- item\n? key\n: value\n--- \n... &anchor *alias !!python/object",
    "spaces": "  leading, inner   three, trailing  ",
    "only_space": "   ",
    "controls": "nul\x00 bel\x07 esc\x1b del\x7f c1\x9b",
    "rtl_hebrew": "שלום עולם, מספר 123 ואז English",
    "rtl_arabic": "مرحبا بالعالم ١٢٣",
    "accents": "Crème brûlée, naïve, Zürich, Ελληνικά, Кириллица",
    "long": "word " * 1500 + "end",
    "long_unbroken": "x" * 5000,
    "cjk": "漢字かなカナ한국어",
    "emoji": "fever 🤒 and 👍🏽 flags 🇫🇷",
    "number_like": "007",
    "bool_like": "true",
    "null_like": "null",
    "empty": "",
}
#: Characters DejaVu Sans (the PDF font) has no glyph for.
NO_GLYPH = {"cjk": "U+6F22 CJK UNIFIED IDEOGRAPH-6F22", "emoji": "U+1F912 FACE WITH THERMOMETER"}


def _nasty(name: str) -> SourceInstance:
    return SourceInstance(
        f"n-{name}", "nasty", (("id", 7), (name, NASTY[name]), ("after", "x")), "Decide.", ("yes", "no")
    )


@pytest.mark.parametrize("fmt", KNOWN_FORMATS)
@pytest.mark.parametrize("name", sorted(NASTY))
def test_nasty_values_round_trip_in_every_format(fmt, name):
    x = _nasty(name)
    if fmt == "pdf" and name in NO_GLYPH:
        with pytest.raises(UnwritableCharacter) as err:
            render(x, fmt)
        assert str(err.value) == (
            f"nasty, field 'instance n-{name}': pdf: the font DejaVuSans has no glyph for {NO_GLYPH[name]} "
            f"({NASTY[name][0 if name == 'cjk' else 6]!r}) in field {name!r}"
        )
        return
    doc = render(x, fmt, check=True)
    assert RENDERERS[fmt].parse(doc.data if RENDERERS[fmt].binary else doc.text) == expected_pairs(x)


def test_a_long_pdf_value_wraps_with_continuation_marks_and_pages():
    x = _nasty("long")
    doc = render(x, "pdf")
    lines = doc.text.split("\n")
    assert len(lines) > 60  # 7,500 characters at ~90 a line, over two A4 pages
    assert all(ln.endswith(" \\") for ln in lines[1:-2])  # cut after a space, then the mark
    from pypdf import PdfReader

    assert len(PdfReader(io.BytesIO(doc.data)).pages) == 2


@pytest.mark.parametrize("fmt", BINARY)
def test_a_file_the_reader_cannot_read_fails_the_check_naming_instance_and_format(fmt):
    from metamorph.studies.format_robustness.renderers import RenderedDocument, check_semantic_invariance

    r = RENDERERS[fmt]
    broken = RenderedDocument("t-1", "toy", fmt, r.media_type, r.version, "", b"not a file", r.extraction)
    with pytest.raises(InputError, match=rf"^toy, field 'instance t-1': {fmt} parser failed on the rendered document"):
        check_semantic_invariance(X, broken)


# --------------------------------------------------------------------------- every shipped record


@pytest.mark.parametrize("fmt", NEW)
def test_every_construct_record_round_trips(fmt):
    for x in construct_dataset():
        render(x, fmt, check=True)


@pytest.mark.parametrize("fmt", NEW)
@pytest.mark.parametrize("adapter", ["medqa", "discrim_eval", "credit_default"])
def test_every_shared_record_round_trips(adapter, fmt):
    xs = load_source(f"{adapter}:{shared_sample(adapter)}")
    assert len(xs) == 200
    for x in xs:
        render(x, fmt, check=True)  # the reader's pairs equal expected_pairs(x), or InputError


# --------------------------------------------------------------------------- --formats


def test_formats_option_parses_a_comma_list_and_names_the_known_ones():
    import argparse

    from metamorph.studies.format_robustness.study import STUDY, format_list

    assert format_list("txt,md,pdf") == ["txt", "md", "pdf"]
    assert STUDY.values().formats == ["txt", "md", "json", "csv"]
    with pytest.raises(argparse.ArgumentTypeError) as err:
        format_list("txt,odt")
    assert str(err.value) == (
        "unknown format 'odt'; the known formats are txt, md, json, csv, html, yaml, pdf, docx, xlsx"
    )
    with pytest.raises(argparse.ArgumentTypeError, match="^format 'pdf' is given twice$"):
        format_list("pdf,txt,pdf")
    with pytest.raises(argparse.ArgumentTypeError, match="must be formats separated by commas"):
        format_list("txt,,md")
    with pytest.raises(argparse.ArgumentTypeError) as err:
        format_list("pdf,docx")
    assert str(err.value) == (
        "must include the baseline format txt (every metric compares a format with it): txt,pdf,docx"
    )


def test_formats_go_to_rendered_documents_in_the_inputs_job():
    from metamorph.study import studies
    from pipelines.run import build_parser

    args = build_parser().parse_args(["format_robustness", "--formats", "txt,pdf,xlsx"])
    study = studies()["format_robustness"]
    assert study.inputs_ops(study.from_args(args)) == {
        "format_robustness__source_instances": {"config": {}},
        "format_robustness__rendered_documents": {"config": {"formats": ["txt", "pdf", "xlsx"]}},
    }


# An unknown format on the command line (run and plan: one line, exit 2, nothing written) is a case
# of tests/core/test_study.py::test_a_bad_value_is_the_same_line_and_exit_2_in_run_and_plan_and_writes_nothing.


def test_the_launchpad_rejects_an_unknown_format_with_the_same_words():
    from assets.format_robustness import RenderConfig

    assert RenderConfig().formats == ["txt", "md", "json", "csv"]
    with pytest.raises(Exception, match="unknown format 'odt'; the known formats are txt, md, json, csv, html"):
        RenderConfig(formats=["txt", "odt"])
    with pytest.raises(Exception, match="must include the baseline format txt"):
        RenderConfig(formats=["pdf"])
    assert RenderConfig(formats=["txt", "pdf"]).formats == ["txt", "pdf"]


# --------------------------------------------------------------------------- what the model reads


def test_an_inline_model_reads_a_binary_documents_extracted_text_named_by_its_extraction():
    from metamorph.models import ModelSpec
    from metamorph.studies.format_robustness.plan import DOC_BEGIN, DOC_END, plan_generations

    spec = ModelSpec(id="m", provider="openai_compatible", model="m", base_url="http://127.0.0.1:1/v1")
    docs = [render(X, "txt"), render(X, "pdf")]
    planned = plan_generations([X], docs, spec, k=1)
    by_fmt = {p.format: p.request for p in planned}
    pdf_user = by_fmt["pdf"].messages[1]["content"]
    assert pdf_user.endswith(
        "The document is the file t-1.pdf; its text, extracted by extract:pypdf, follows.\n\n"
        f'{DOC_BEGIN}\nage: 58\nnote: a|b, "quoted"\\nsecond line\ntemp: 38.5\nflag: true\nempty:\n{DOC_END}'
    )
    assert by_fmt["pdf"].renderer_version == "pdf-1+extract:pypdf+p2"
    assert by_fmt["txt"].renderer_version == "txt-2+p2"
    assert "extracted by" not in by_fmt["txt"].messages[1]["content"]


def test_plan_counts_the_formats_of_the_run():
    from metamorph.models import ModelSpec
    from metamorph.studies.format_robustness.plan import cost_steps
    from metamorph.studies.format_robustness.study import STUDY

    spec = ModelSpec(id="m", provider="openai_compatible", model="m", base_url="http://127.0.0.1:1/v1")
    steps = cost_steps(spec, STUDY.values(sources=["construct"], limit=2, k=1, formats=["txt", "pdf", "docx"]))
    assert len(steps[0].requests()) == 2 * 3 * 1
    assert {json.loads(r.to_json())["renderer_version"] for r in steps[0].requests()} == {
        "txt-2+p2",
        "pdf-1+extract:pypdf+p2",
        "docx-1+extract:docx+p2",
    }


# --------------------------------------------------------------------------- the warehouse


def test_rendered_documents_stores_bytes_and_an_error_row_names_the_character(metamorph_home, tmp_path):
    from pypdf import PdfReader

    from pipelines.definitions import build_definitions

    src = tmp_path / "canon.jsonl"
    rows = [
        {"instance_id": "ok", "dataset": "toy", "fields": [["age", 58], ["note", "שלום"]], "task_prompt": "Decide.",
         "answer_space": ["yes", "no"]},
        {"instance_id": "emoji", "dataset": "toy", "fields": [["note", "fever 🤒"]], "task_prompt": "Decide.",
         "answer_space": ["yes", "no"]},
    ]  # fmt: skip
    src.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    defs = build_definitions()
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("format_robustness_inputs_job").execute_in_process(
            instance=instance,
            raise_on_error=False,
            run_config={
                "ops": {
                    "format_robustness__source_instances": {"config": {"sources": [f"canonical:{src}"]}},
                    "format_robustness__rendered_documents": {"config": {"formats": ["txt", "pdf", "xlsx"]}},
                }
            },
        )
        assert result.success
        checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
        assert checks["unwritable_documents"].passed is False
        mat = [
            m
            for m in result.asset_materializations_for_node("format_robustness__rendered_documents")
            if m.asset_key.path[-1] == "rendered_documents"
        ][0]
        preview = mat.metadata["preview"].value
        assert "bytes)" in preview and "%PDF" not in preview and "age: 58" in preview
    con = duckdb.connect(str(metamorph_home / "metamorph.duckdb"), read_only=True)
    try:
        df = con.execute(
            "SELECT instance_id, format, document_bytes, extraction, document_sha256, n_bytes, round_trip_ok, error "
            "FROM format_robustness.rendered_documents ORDER BY instance_id, format"
        ).df()
        blob_type = con.execute(
            "SELECT data_type FROM information_schema.columns WHERE table_schema = 'format_robustness' "
            "AND table_name = 'rendered_documents' AND column_name = 'document_bytes'"
        ).fetchone()[0]
    finally:
        con.close()
    assert blob_type == "BLOB"
    assert list(zip(df.instance_id, df.format)) == [
        ("emoji", "pdf"),
        ("emoji", "txt"),
        ("emoji", "xlsx"),
        ("ok", "pdf"),
        ("ok", "txt"),
        ("ok", "xlsx"),
    ]
    err = df.iloc[0]
    assert err.error == (
        "toy, field 'instance emoji': pdf: the font DejaVuSans has no glyph for U+1F912 FACE WITH THERMOMETER "
        "('🤒') in field 'note'"
    )
    assert pd.isna(err.document_bytes) and err.n_bytes == 0 and not err.round_trip_ok
    ok_pdf = df.iloc[3]
    data = bytes(ok_pdf.document_bytes)
    assert ok_pdf.extraction == "extract:pypdf" and ok_pdf.n_bytes == len(data)
    import hashlib

    assert ok_pdf.document_sha256 == hashlib.sha256(data).hexdigest()
    page = PdfReader(io.BytesIO(data)).pages[0]
    assert page.extract_text(extraction_mode="layout", layout_mode_space_vertically=False) == "age: 58\nnote: שלום"
    assert pd.isna(df.iloc[4].document_bytes) and pd.isna(df.iloc[4].extraction)


# --------------------------------------------------------------------------- the study, end to end


def test_the_study_runs_on_txt_and_binary_formats_and_the_model_reads_their_extracted_text(
    stub, metamorph_home, tmp_path, monkeypatch
):
    """``--formats txt,pdf,docx,xlsx`` through the whole group (routing included) on a scripted
    model: every request of a binary document carries the extracted text of its file, named by its
    extraction."""
    from metamorph.schemas import validate_frame
    from metamorph.studies.format_robustness import schemas as M
    from pipelines.definitions import build_definitions
    from tests.core.stub_http import Reply

    use_stub_registry(stub, tmp_path, monkeypatch)
    reply = {"decision": "A", "evidence": ["patient has fever"]}
    stub.script(
        "POST",
        "/v1/chat/completions",
        Reply(
            200,
            {
                "id": "c",
                "object": "chat.completion",
                "created": 1,
                "model": "stub-model",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": json.dumps(reply)},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            },
        ),
    )
    defs = build_definitions()
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["stub"])
        inputs = defs.resolve_job_def("format_robustness_inputs_job").execute_in_process(
            instance=instance,
            raise_on_error=False,
            run_config={
                "ops": {
                    "format_robustness__source_instances": {
                        "config": {"sources": [f"medqa:{shared_sample('medqa')}"], "limit": 2}
                    },
                    "format_robustness__rendered_documents": {"config": {"formats": ["txt", "pdf", "docx", "xlsx"]}},
                }
            },
        )
        assert inputs.success
        model = defs.resolve_job_def("format_robustness_model_job").execute_in_process(
            instance=instance,
            partition_key="stub",
            raise_on_error=False,
            run_config={"ops": {"format_robustness__workflow_generations": {"config": {"k": 1}}}},
        )
        assert model.success
        assert defs.resolve_job_def("format_robustness_tables_job").execute_in_process(instance=instance).success
    con = duckdb.connect(str(metamorph_home / "metamorph.duckdb"), read_only=True)
    try:
        gens = con.execute("SELECT * FROM format_robustness.workflow_generations").df()
        docs = con.execute("SELECT * FROM format_robustness.rendered_documents").df()
        flags = con.execute("SELECT * FROM format_robustness.mr_flags").df()
    finally:
        con.close()
    validate_frame(M.WorkflowGenerations, gens, "workflow_generations")
    assert sorted(gens["format"]) == ["docx", "docx", "pdf", "pdf", "txt", "txt", "xlsx", "xlsx"]
    assert gens["error"].isna().all() and len(flags) == 2
    calls = stub.requests_to("/v1/chat/completions")[: len(gens)]
    users = [r.json["messages"][1]["content"] for r in calls]
    texts = {(d.instance_id, d.format): d.document_text for d in docs.itertuples()}
    for (iid, fmt), text in texts.items():
        if fmt == "txt":
            continue
        name = {"pdf": "extract:pypdf", "docx": "extract:docx", "xlsx": "extract:openpyxl"}[fmt]
        note = f"The document is the file {iid}.{fmt}; its text, extracted by {name}, follows."
        assert sum(note in u and text in u for u in users) == 1, (iid, fmt)


def test_plan_leaves_out_a_document_its_format_cannot_write_and_routes_only_to_a_format_every_instance_has(tmp_path):
    """The plan streams the requests and leaves out what ``rendered_documents`` leaves out: the
    emoji instance has no pdf (no glyph), so it is planned in txt only, and pdf cannot be the best
    format of the dataset (the emoji instance has no pdf document), so routing has one outcome, txt."""
    from metamorph.models import ModelSpec
    from metamorph.studies.format_robustness.plan import cost_steps
    from metamorph.studies.format_robustness.study import STUDY

    src = tmp_path / "canon.jsonl"
    rows = [
        {"instance_id": "ok", "dataset": "toy", "fields": [["age", 58]], "task_prompt": "Decide.",
         "answer_space": ["yes", "no"]},
        {"instance_id": "emoji", "dataset": "toy", "fields": [["note", "fever 🤒"]], "task_prompt": "Decide.",
         "answer_space": ["yes", "no"]},
    ]  # fmt: skip
    src.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    spec = ModelSpec(id="m", provider="openai_compatible", model="m", base_url="http://127.0.0.1:1/v1")
    gen, routed = cost_steps(spec, STUDY.values(sources=[f"canonical:{src}"], k=1, formats=["txt", "pdf"]))

    def which(r) -> tuple[str, str]:  # (instance, renderer version): the emoji instance's note says "fever"
        return ("emoji" if "fever" in r.to_json() else "ok", json.loads(r.to_json())["renderer_version"])

    seen = sorted(which(r) for r in gen.requests())
    assert seen == [("emoji", "txt-2+p2"), ("ok", "pdf-1+extract:pypdf+p2"), ("ok", "txt-2+p2")]
    assert routed.upper_bound is False
    groups = list(routed.iter_groups())
    assert len(groups) == 1 and len(groups[0]) == 1  # one dataset, one ingestion, one candidate: txt
    sent = sorted(which(r) for r in routed.requests())
    assert sent == [("emoji", "txt-2+p2"), ("ok", "txt-2+p2"), ("ok", "txt-2+p2")]
