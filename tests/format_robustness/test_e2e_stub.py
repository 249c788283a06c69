"""The whole format_robustness group, routing included, against a scripted OpenAI-compatible
model on the local HTTP stub (no llm marker: the model boundary is the stub server)."""

import json

import dagster as dg
import duckdb

from metamorph.schemas import validate_frame
from metamorph.studies.format_robustness import schemas as M
from pipelines.definitions import build_definitions
from tests.conftest import shared_sample, use_stub_registry
from tests.core.stub_http import Reply


def chat(text):
    return Reply(
        200,
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "stub-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        },
    )


def read(db, table):
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(f"SELECT * FROM format_robustness.{table}").df()
    finally:
        con.close()


def test_group_with_routing_on_a_stub_model(stub, metamorph_home, tmp_path, monkeypatch):
    use_stub_registry(stub, tmp_path, monkeypatch)
    # 24 planned calls (3 instances x 4 formats x k = 2) answered in order, then "A" for every routed call
    answers = ["A", "B", "A", "A"] * 6
    stub.script(
        "POST",
        "/v1/chat/completions",
        *[chat(json.dumps({"decision": a, "evidence": ["patient has fever"]})) for a in answers],
        chat(json.dumps({"decision": "A", "evidence": ["patient has fever"]})),
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
                        "config": {"sources": [f"medqa:{shared_sample('medqa')}"], "limit": 3}
                    }
                }
            },
        )
        assert inputs.success
        model = defs.resolve_job_def("format_robustness_model_job").execute_in_process(
            instance=instance,
            partition_key="stub",
            raise_on_error=False,
            run_config={"ops": {"format_robustness__workflow_generations": {"config": {"k": 2}}}},
        )
        assert model.success
        tables = defs.resolve_job_def("format_robustness_tables_job").execute_in_process(instance=instance)
        assert tables.success
        ui_shows_the_worst_cells_and_their_replies(instance, [model, tables])
    db = metamorph_home / "metamorph.duckdb"
    for table, schema in {
        "mr_flags": M.MRFlags,
        "mr_violations": M.MRViolations,
        "routing_choice": M.RoutingChoice,
        "routed_generations": M.RoutedGenerations,
        "routed_outcomes": M.RoutedOutcomes,
        "format_routing": M.FormatRouting,
        "mitigation_table": M.MitigationTable,
        "mr_table": M.MRTable,
        "vote_aggregation": M.VoteAggregation,
        "silent_by_dataset": M.SilentByDataset,
        "workflow_tests": M.WorkflowTests,
        "flip_errors": M.FlipErrors,
        "evidence_change_share": M.EvidenceChangeShare,
        "drift_correlation": M.DriftCorrelation,
    }.items():
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


def ui_shows_the_worst_cells_and_their_replies(instance, results) -> None:
    """From mr_violations to the raw replies of a violating group in the UI's metadata, its
    headline floats and checks, and the lineage view's rows for the worst cell (scripted answers
    of the test above: MR3 = 100 %, MR1 = 50 % with the r = 2 groups B/A/B/A, MR2 = 0 %)."""

    def meta(name):
        key = dg.AssetKey(["format_robustness", name])
        return instance.get_latest_materialization_event(key).asset_materialization.metadata

    mv = meta("mr_violations")
    assert mv["dagster/table_name"].value == "format_robustness.mr_violations"
    # MR2 = 0 % is at its best possible value: not a "worst" cell
    # (both worst cells are stub/inline · medqa: the summary's heading says so once)
    assert [k for k in mv if k.startswith("worst cell")] == [
        "worst cell 1: MR3 = 100",
        "worst cell 1: MR3 = 100 (rows in full)",
        "worst cell 2: MR1 = 50",
        "worst cell 2: MR1 = 50 (rows in full)",
    ]
    # the table: the columns a reader reads (every row is repeat 2: no repeat column); the JSON: every column
    table = mv["worst cell 2: MR1 = 50"].value
    assert [c.name for c in table.schema.columns] == ["instance", "format", "got / gold", "reply"]
    assert len(table.records) == 12 and {tuple(sorted(r.data)) for r in table.records} == {
        ("format", "got / gold", "instance", "reply")
    }
    mr1 = mv["worst cell 2: MR1 = 50 (rows in full)"].value
    assert len(mr1) == 12 and {r["repeat"] for r in mr1} == {2}
    assert {len(r["generation_key"]) for r in mr1} == {17}  # 16 hex digits and "…"
    assert {(r["format"], json.loads(r["response_text"])["decision"], r["decision"]) for r in mr1} == {
        ("txt", "B", "B"),
        ("md", "A", "A"),
        ("json", "B", "B"),
        ("csv", "A", "A"),
    }
    # one workflow and dataset: short keys (the metric's name), the full cell and its CI in one JSON entry
    assert {k: mv[k].value for k in mv if mv[k].value.__class__ is float and k.startswith("M")} == {
        "M1_pct": 50.0,
        "M2_pct": 0.0,
        "M3_pct": 100.0,
    }
    assert mv["headline"].value == {
        f"M{i}_pct": {"cell": f"M{i}_pct/stub/inline/medqa", "value": v, "ci_low": v, "ci_high": v}
        for i, v in ((1, 50.0), (2, 0.0), (3, 100.0))
    }
    checks = {
        (e.asset_key.path[-1], e.check_name): e.passed
        for result in results
        for e in result.get_asset_check_evaluations()
    }
    assert {
        c: checks[("mr_violations", c)]
        for c in ("rows_present", "value_defined", "ci_brackets_value", "value_in_range")
    } == dict.fromkeys(("rows_present", "value_defined", "ci_brackets_value", "value_in_range"), True)
    assert sum(1 for (asset, name) in checks if name == "rows_present") == 18
    lv = meta("lineage_views")
    assert lv["worst_cell"].value == "mr_violations: stub/inline · medqa · MR3 = 100"
    assert lv["worst_cell_rows"].value == 24  # 3 instances × 2 repeats × 4 formats
    rows = [r.data for r in lv["mr_violation_lineage (worst cell)"].value.records]
    assert len(rows) == 24 and all(r["mr3"] for r in rows) and rows[0]["response_text"].startswith('{"decision"')
