"""Calls that fail at the provider are not answers: the workflow_perturb group end to end on
Dagster (in-process, real DuckDB warehouse), the judge and generator behind the real local HTTP
stub. One embedded golden; the judge judges the first deterministic variants, 3 calls each."""

from __future__ import annotations

import threading

import dagster as dg
import duckdb
import pytest

from tests.conftest import use_stub_registry
from tests.core.stub_http import Recorded, Reply, chat_completion

GENERATED = (
    "Node:\n1: Boil fresh water in a kettle\n2: Pour water slowly over the grounds in circles\n"
    "3: Serve the coffee in a warm mug\nEdge: (START,1) (1,2) (2,3) (3,END)"
)
#: a 200 reply with no choices: the call fails (not retried), the generation's error is set
NO_CHOICES = Reply(200, {"id": "c", "object": "chat.completion", "created": 1, "model": "stub", "choices": []})


def chat(text: str) -> Reply:
    return Reply(200, chat_completion(text, model="stub-model"))


@pytest.fixture
def stub_model(stub, tmp_path, monkeypatch, metamorph_home):
    use_stub_registry(stub, tmp_path, monkeypatch)
    return stub


def run(stub, judge_reply, generator_reply: Reply, n_variants: int) -> None:
    """Materialize the group; ``judge_reply(variant, call)`` answers the ``call``-th request (1-based) of the
    ``variant``-th distinct judge prompt (0-based, in arrival order)."""
    from pipelines.definitions import build_definitions

    bodies: list[str] = []
    calls: dict[str, int] = {}
    lock = threading.Lock()

    def reply(rec: Recorded) -> Reply:
        if "final_score" not in rec.raw.decode():  # the judge's prompt asks for final_score (App. B.6.4)
            return generator_reply
        with lock:
            if rec.key not in bodies:
                bodies.append(rec.key)
            calls[rec.key] = calls.get(rec.key, 0) + 1
            variant, call = bodies.index(rec.key), calls[rec.key]
        return judge_reply(variant, call)

    stub.script("POST", "/v1/chat/completions", reply)
    defs = build_definitions()
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["stub"])
        inputs = {"workflow_perturb__goldens": {"config": {"limit": 1}}}
        assert (
            defs.resolve_job_def("workflow_perturb_inputs_job")
            .execute_in_process(instance=instance, run_config={"ops": inputs})
            .success
        )
        model = {
            "workflow_perturb__perturbations_llm": {
                "config": {"n_goldens": 1, "types": ["missing"], "severities": [0.3], "max_attempts": 1}
            },
            "workflow_perturb__judge_scores": {"config": {"n_variants": n_variants}},
        }
        assert (
            defs.resolve_job_def("workflow_perturb_model_job")
            .execute_in_process(instance=instance, partition_key="stub", run_config={"ops": model})
            .success
        )
        assert defs.resolve_job_def("workflow_perturb_tables_job").execute_in_process(instance=instance).success


def test_a_failed_judge_call_is_no_reply_and_a_variant_whose_calls_all_failed_is_not_measurable(
    stub_model, metamorph_home
):
    # variant 0: calls 1 and 3 answer 4 of 5, call 2 fails -> 0.8 from 2 valid replies;
    # variant 1: its 3 calls fail -> no score, not 0
    def judge(variant, call):
        if variant == 1 or call == 2:
            return NO_CHOICES
        return chat('{"final_score": 4}')

    run(stub_model, judge, chat(GENERATED), n_variants=2)
    con = duckdb.connect(str(metamorph_home / "metamorph.duckdb"), read_only=True)
    try:
        judged = con.execute(
            "SELECT j.judge, j.judge_valid, j.judge_invalid, j.n_call_errors, j.not_measurable, p.type, p.p "
            "FROM workflow_perturb.judge_scores AS j JOIN workflow_perturb.perturbations AS p USING (variant_id) "
            "ORDER BY j.n_call_errors"
        ).fetchall()
        assert [r[:5] for r in judged] == [
            (0.8, 2, 0, 1, None),
            (None, 0, 0, 3, "not measurable: every call failed (3 of 3)"),
        ]
        (_, _, _, _, _, t0, p0), (_, _, _, _, _, t1, p1) = judged
        cells = con.execute(
            "SELECT type, severity, mean, n, n_null, n_call_errors, not_measurable "
            "FROM workflow_perturb.severity_table_judge WHERE (type, severity) IN (($1, $2), ($3, $4)) "
            "ORDER BY n_call_errors",
            [t0, p0, t1, p1],
        ).fetchall()
        # the first two deterministic variants: missing@10 and missing@30 of the golden
        assert [(t0, p0), (t1, p1)] == [("missing", 0.1), ("missing", 0.3)]
        assert cells == [
            ("missing", 0.1, 0.8, 1, 0, 1, None),
            ("missing", 0.3, None, 0, 1, 3, "not measurable: every call failed (3 of 3)"),
        ]
        assert con.execute("SELECT count(*) FROM workflow_perturb.severity_table_judge WHERE mean = 0").fetchall() == [
            (0,)
        ]
    finally:
        con.close()


def test_every_call_failed_prints_not_measurable(stub_model, metamorph_home):
    from metamorph.studies.workflow_perturb.study import STUDY
    from pipelines.run import call_errors_line, failed_calls

    run(stub_model, lambda variant, call: NO_CHOICES, NO_CHOICES, n_variants=1)
    con = duckdb.connect(str(metamorph_home / "metamorph.duckdb"), read_only=True)
    try:
        assert con.execute(
            "SELECT judge, judge_valid, judge_invalid, n_call_errors, not_measurable FROM workflow_perturb.judge_scores"
        ).fetchall() == [(None, 0, 0, 3, "not measurable: every call failed (3 of 3)")]
        judged = con.execute(
            "SELECT mean, n_call_errors, not_measurable FROM workflow_perturb.severity_table_judge "
            "WHERE n_call_errors > 0"
        ).fetchall()
        assert judged == [(None, 3, "not measurable: every call failed (3 of 3)")]
        assert con.execute(
            "SELECT count(*) FROM workflow_perturb.severity_table_judge WHERE mean IS NOT NULL"
        ).fetchall() == [(0,)]
        # the generator was never heard: its row is a call error, not an invalid perturbation
        assert con.execute(
            "SELECT status, attempts, n_call_errors, nodes_json FROM workflow_perturb.perturbations_llm"
        ).fetchall() == [("call_error", 1, 1, None)]
        text = STUDY.headline(con, None)
    finally:
        con.close()
    counts = failed_calls(str(metamorph_home / "metamorph.duckdb"), STUDY, ["stub"])
    assert counts == {"perturbations_llm": (1, 1), "judge_scores": (3, 3)}
    assert call_errors_line(counts).startswith(
        "4 of 4 calls failed at the provider (perturbations_llm 1 of 1, judge_scores 3 of 3)"
    )
    judge = text[text.index("LLM judge (App. B.6)") :]
    lines = [line for line in judge.splitlines() if line.startswith("|")]
    # replies: 1 variant, no reply at all, 3 failed calls, no variant scored
    assert [c.strip() for c in lines[2].strip("|").split("|")] == ["stub", "1", "0", "0", "3", "0"]
    table = judge[judge.index("LLM judge score by perturbation type and severity") :].split("\n\n")[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines() if line.startswith("|")]
    header, body = rows[0], rows[2:]
    means = [r[header.index("mean")] for r in body]
    assert "not measurable: every call failed (3 of 3)" in means
    assert all(m.startswith("not measurable: ") for m in means), means  # no number for a cell nothing measured
