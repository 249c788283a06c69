"""The whole format_robustness group, routing included, against a scripted OpenAI-compatible
model on the local HTTP stub (no llm marker: the model boundary is the stub server)."""

import json

import dagster as dg
import duckdb

from metamorph.schemas import validate_frame
from metamorph.studies.format_robustness import schemas as M
from pipelines.definitions import build_definitions
from tests.conftest import shared_sample
from tests.core.stub_http import Reply


def chat(text):
    return Reply(200, {
        "id": "c", "object": "chat.completion", "created": 1, "model": "stub-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    })


def read(db, table):
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(f"SELECT * FROM format_robustness.{table}").df()
    finally:
        con.close()


def test_group_with_routing_on_a_stub_model(stub, metamorph_home, tmp_path, monkeypatch):
    reg = tmp_path / "models.yaml"
    reg.write_text(f"models:\n  - id: stub\n    provider: openai_compatible\n    model: stub-model\n"
                   f"    base_url: {stub.url}/v1\n    api_key_env: STUB_KEY\n    max_concurrency: 1\n")
    monkeypatch.setenv("METAMORPH_MODELS", str(reg))
    monkeypatch.setenv("STUB_KEY", "k")
    # 24 planned calls (3 instances x 4 formats x k = 2) answered in order, then "A" for every routed call
    answers = ["A", "B", "A", "A"] * 6
    stub.script("POST", "/v1/chat/completions",
                *[chat(json.dumps({"decision": a, "evidence": ["patient has fever"]})) for a in answers],
                chat(json.dumps({"decision": "A", "evidence": ["patient has fever"]})))
    defs = build_definitions()
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["stub"])
        inputs = defs.resolve_job_def("format_robustness_inputs_job").execute_in_process(
            instance=instance, raise_on_error=False,
            run_config={"ops": {"format_robustness__source_instances": {
                "config": {"sources": [f"medqa:{shared_sample('medqa')}"], "limit": 3}}}})
        assert inputs.success
        model = defs.resolve_job_def("format_robustness_model_job").execute_in_process(
            instance=instance, partition_key="stub", raise_on_error=False,
            run_config={"ops": {"format_robustness__workflow_generations": {"config": {"k": 2}}}})
        assert model.success
    db = metamorph_home / "metamorph.duckdb"
    for table, schema in {"mr_flags": M.MRFlags, "mr_violations": M.MRViolations, "routing_choice": M.RoutingChoice,
                          "routed_generations": M.RoutedGenerations, "routed_outcomes": M.RoutedOutcomes,
                          "format_routing": M.FormatRouting, "mitigation_table": M.MitigationTable,
                          "mr_table": M.MRTable, "vote_aggregation": M.VoteAggregation,
                          "silent_by_dataset": M.SilentByDataset, "workflow_tests": M.WorkflowTests,
                          "flip_errors": M.FlipErrors, "evidence_change_share": M.EvidenceChangeShare,
                          "drift_correlation": M.DriftCorrelation}.items():
        validate_frame(schema, read(db, table), table)
    # calls go document by document, r = 1, 2: txt (A, B), md (A, A), json (A, B), csv (A, A) for every
    # instance -> group r = 1 all A, group r = 2 B/A/B/A (MR1): M1 = 3/6; txt unstable, md stable: M3 = 100
    v = read(db, "mr_violations").set_index("relation")
    assert v.loc["MR1", "violation_pct"] == 50.0 and v.loc["MR1", "n_groups"] == 6 and v.loc["MR1", "n_instances"] == 3
    assert v.loc["MR3", "violation_pct"] == 100.0
    choice = read(db, "routing_choice").iloc[0]
    routed = read(db, "routed_generations")
    assert len(routed) == 24 and set(routed["routed_format"]) == {choice["best_format"]}
    # the input already in the best format is the original call (cache); the other 18 are new calls
    assert int(routed["cache_hit"].sum()) == 6
    assert len(stub.requests_to("/v1/chat/completions")) == 24 + 18
    rt = read(db, "format_routing").set_index("relation")
    # every new (routed) call answers A; the input already in the best format keeps its cached answers:
    # (A, A) for md / csv -> nothing left; (A, B) for txt / json -> group r = 2 violates MR1 and MR3 holds
    left = 0.0 if choice["best_format"] in ("md", "csv") else 50.0
    assert (rt.loc["MR1", "before_pct"], rt.loc["MR1", "after_pct"], rt.loc["MR1", "n_after"]) == (50.0, left, 6)
    assert (rt.loc["MR3", "before_pct"], rt.loc["MR3", "after_pct"]) == (100.0, 2 * left)
    assert set(read(db, "mitigation_table")["strategy"]) == {"vote", "routing"}
