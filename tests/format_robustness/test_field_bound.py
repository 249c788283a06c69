"""The one bound a source field meets, end to end: ``metamorph run`` accepts a field of exactly
:data:`metamorph.datasets.MAX_FIELD_CHARS` characters (far over Python csv's default field limit of
131,072, which the CSV re-parse of the rendered document met after ``source_instances`` was
written) and refuses one more character with one line naming file, row and field, exit 2, before
anything is written. The model is the local HTTP stub."""

from __future__ import annotations

import csv
import json

import duckdb
import pytest

from metamorph.datasets import MAX_FIELD_CHARS
from tests.conftest import use_stub_registry
from tests.core.stub_http import Reply, chat_completion

QUESTION_PREFIX = "Fever? "


@pytest.fixture
def csv_default_limit():
    """``csv``'s field limit as a fresh process has it (131,072 characters), restored afterwards."""
    before = csv.field_size_limit(131_072)
    yield
    csv.field_size_limit(before)


def test_a_field_at_the_bound_runs_and_one_over_is_refused_before_anything_is_written(
    stub, tmp_path, monkeypatch, metamorph_home, capsys, csv_default_limit
):
    import pipelines.definitions
    from pipelines.run import main

    use_stub_registry(stub, tmp_path, monkeypatch)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    monkeypatch.setattr(pipelines.definitions, "defs", pipelines.definitions.build_definitions())
    stub.script(
        "POST", "/v1/chat/completions", lambda rec: Reply(200, chat_completion('{"decision": "A", "evidence": []}'))
    )
    path = tmp_path / "long.jsonl"
    row = {"id": "m-1", "options": {k: k for k in "ABCD"}, "answer_idx": "A"}
    argv = ["format_robustness", "--source", f"medqa:{path}", "--models", "stub", "--k", "1", "--no-routing"]

    # exactly the bound: the run renders, calls and scores it
    question = QUESTION_PREFIX + "x" * (MAX_FIELD_CHARS - len(QUESTION_PREFIX))
    path.write_text(json.dumps(dict(row, question=question)) + "\n", encoding="utf-8")
    assert main(argv) == 0
    con = duckdb.connect(str(metamorph_home / "metamorph.duckdb"), read_only=True)
    try:
        [(n_sources,)] = con.execute("SELECT count(*) FROM format_robustness.source_instances").fetchall()
        docs = con.execute(
            "SELECT format, length(document_text) > ? FROM format_robustness.rendered_documents ORDER BY format",
            [MAX_FIELD_CHARS],
        ).fetchall()
        [(n_generations,)] = con.execute("SELECT count(*) FROM format_robustness.workflow_generations").fetchall()
    finally:
        con.close()
    assert n_sources == 1
    assert docs == [("csv", True), ("json", True), ("md", True), ("txt", True)]
    assert n_generations == 4 and len(stub.requests_to("/v1/chat/completions")) == 4
    capsys.readouterr()

    # one character over, in a fresh home: one line, exit 2, no warehouse written
    home = tmp_path / "home2"
    home.mkdir()
    monkeypatch.setenv("METAMORPH_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home2"))
    monkeypatch.setattr(pipelines.definitions, "defs", pipelines.definitions.build_definitions())
    path.write_text(json.dumps(dict(row, question=question + "x")) + "\n", encoding="utf-8")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"error: {path}, row 1, field 'question': holds 1,000,001 characters; the limit is 1,000,000 per field "
        "(no model context takes more)"
    ]
    assert not (home / "metamorph.duckdb").exists()
    assert len(stub.requests_to("/v1/chat/completions")) == 4  # no call made
