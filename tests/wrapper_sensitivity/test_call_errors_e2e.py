"""Calls that fail at the provider are not answers: the wrapper_sensitivity group end to end on
Dagster (in-process, real DuckDB warehouse), the model behind the real local HTTP stub. Two ARC
items × the five wrappers, one seed: 10 calls, every value below is counted by hand."""

from __future__ import annotations

import json

import dagster as dg
import duckdb
import pytest

from tests.conftest import use_stub_registry
from tests.core.stub_http import Recorded, Reply, chat_completion

ARC = [
    {
        "id": f"q{i}",
        "question": f"Which number is largest ({i})?",
        "choices": [{"label": k, "text": t} for k, t in zip("ABCD", ("1", "9", "3", "4"))],
        "answerKey": "B",
    }
    for i in (1, 2)
]
#: a 200 reply with no choices: the call fails (not retried), the generation's error is set
NO_CHOICES = Reply(200, {"id": "c", "object": "chat.completion", "created": 1, "model": "stub", "choices": []})


@pytest.fixture
def stub_model(stub, tmp_path, monkeypatch, metamorph_home):
    use_stub_registry(stub, tmp_path, monkeypatch)
    return stub


def run(stub, tmp_path, answer) -> None:
    """Materialize the group; ``answer(item_id, wrapper)`` is the reply text, or None for a failed call."""
    from metamorph.studies.wrapper_sensitivity.tasks import load_task
    from metamorph.studies.wrapper_sensitivity.wrappers import FAMILIES, render_token_controlled
    from pipelines.definitions import build_definitions

    path = tmp_path / "arc.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ARC))
    spec = f"arc_challenge:{path}"
    prompts = render_token_controlled(load_task(spec), list(FAMILIES), "v1")
    by_messages = {json.dumps(list(p.messages)): (p.item_id, p.family) for p in prompts}

    def reply(rec: Recorded) -> Reply:
        text = answer(*by_messages[json.dumps(rec.json["messages"])])
        return NO_CHOICES if text is None else Reply(200, chat_completion(text, model="stub-model"))

    stub.script("POST", "/v1/chat/completions", reply)
    defs = build_definitions()
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["stub"])
        inputs = {"wrapper_sensitivity__qa_items": {"config": {"sources": [spec]}}}
        assert (
            defs.resolve_job_def("wrapper_sensitivity_inputs_job")
            .execute_in_process(instance=instance, run_config={"ops": inputs})
            .success
        )
        model = {"wrapper_sensitivity__wrapper_generations": {"config": {"seeds": [0]}}}
        assert (
            defs.resolve_job_def("wrapper_sensitivity_model_job")
            .execute_in_process(instance=instance, partition_key="stub", run_config={"ops": model})
            .success
        )
        assert defs.resolve_job_def("wrapper_sensitivity_tables_job").execute_in_process(instance=instance).success
    assert len(stub.requests_to("/v1/chat/completions")) == 10


def test_failed_calls_are_left_out_and_fsi_compares_the_items_answered_under_every_wrapper(
    stub_model, metamorph_home, tmp_path
):
    # "The answer is B" is read (paper extractor) only under plain: q1 right under plain; q2 answers A
    # under plain (wrong); every other wrapper finds no answer. q2's json call fails.
    def answer(item_id, wrapper):
        if (item_id, wrapper) == ("q2", "json"):
            return None
        return "The answer is A" if (item_id, wrapper) == ("q2", "plain") else "The answer is B"

    run(stub_model, tmp_path, answer)
    con = duckdb.connect(str(metamorph_home / "metamorph.duckdb"), read_only=True)
    try:
        assert con.execute("SELECT count(error) FROM wrapper_sensitivity.wrapper_generations").fetchall() == [(1,)]
        cells = con.execute(
            "SELECT wrapper, n, n_correct, n_parseable, accuracy_pct, parseability_pct, n_call_errors, not_measurable "
            "FROM wrapper_sensitivity.wrapper_cells WHERE mode = 'paper' ORDER BY wrapper"
        ).fetchall()
        assert cells == [
            ("deliberate", 2, 0, 0, 0.0, 0.0, 0, "not measurable: no reply parsed (2 of 2 unparseable)"),
            ("json", 1, 0, 0, 0.0, 0.0, 1, "not measurable: no reply parsed (1 of 1 unparseable)"),
            ("plain", 2, 1, 2, 50.0, 100.0, 0, None),
            ("structured", 2, 0, 0, 0.0, 0.0, 0, "not measurable: no reply parsed (2 of 2 unparseable)"),
            ("structured_delim", 2, 0, 0, 0.0, 0.0, 0, "not measurable: no reply parsed (2 of 2 unparseable)"),
        ]
        # FSI compares the wrappers on q1 only (q2 failed under json): plain 1/1, the others 0/1
        assert con.execute(
            "SELECT task, fsi, psi, best_wrapper, n_call_errors, n_generations, not_measurable "
            "FROM wrapper_sensitivity.fsi_psi"
        ).fetchall() == [("arc_challenge", 1.0, 1.0, "plain", 1, 10, None)]
        assert con.execute(
            "SELECT mean, n_tasks, n_call_errors, not_measurable FROM wrapper_sensitivity.mean_fsi_psi "
            "WHERE \"index\" = 'FSI'"
        ).fetchall() == [(100.0, 1, 1, None)]
        # the worst wrapper (json, the first in canonical order of the four at 0) parses nothing: no split
        assert con.execute(
            "SELECT fsi_pp, worst_wrapper, compliance_pp, n_call_errors FROM wrapper_sensitivity.fsi_decomposition"
        ).fetchall() == [(100.0, "json", None, 1)]
    finally:
        con.close()


def test_every_call_failed_prints_not_measurable(stub_model, metamorph_home, tmp_path):
    from metamorph.studies.wrapper_sensitivity.study import STUDY

    run(stub_model, tmp_path, lambda item_id, wrapper: None)
    con = duckdb.connect(str(metamorph_home / "metamorph.duckdb"), read_only=True)
    try:
        assert con.execute(
            "SELECT DISTINCT n, accuracy_pct, n_call_errors, not_measurable FROM wrapper_sensitivity.wrapper_cells"
        ).fetchall() == [(0, None, 2, "not measurable: every call failed (2 of 2)")]
        assert con.execute("SELECT fsi, n_call_errors, not_measurable FROM wrapper_sensitivity.fsi_psi").fetchall() == [
            (None, 10, "not measurable: every call failed (10 of 10)")
        ]
        text = STUDY.headline(con, None)
    finally:
        con.close()
    sections = [s.strip() for s in text.split("\n\n")]
    cells, fsi, mean, decomposition = sections
    for section, columns in (
        (cells, ["accuracy_pct"]),
        (fsi, ["FSI", "PSI"]),
        (mean, ["mean"]),
        (decomposition, ["FSI_pp"]),
    ):
        lines = section.splitlines()
        header = [c.strip() for c in lines[1].strip("|").split("|")]
        rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[3:]]
        assert rows, section
        for r in rows:
            for column in columns:
                assert r[header.index(column)].startswith("not measurable: every call failed ("), section
    assert "not measurable: every call failed (2 of 2)" in cells
    assert (
        "not measurable: every call failed (10 of 10)" in fsi and "(10 of 10)" in mean and "(10 of 10)" in decomposition
    )
