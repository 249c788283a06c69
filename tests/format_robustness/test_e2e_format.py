"""End to end: the whole format_robustness group on real MedQA rows with the real local model."""

import json

import dagster as dg
import duckdb
import pytest

from assets import format_robustness as fr_assets
from metamorph.studies.format_robustness import schemas as M
from metamorph.studies.format_robustness import schemas as S
from metamorph.schemas import validate_frame
from assets._common import ALL_ROWS
from pipelines.definitions import build_definitions
from pipelines.inputs import InputsRejected
from tests.conftest import shared_sample

MODEL = "smollm2"
TABLES = {
    "source_instances": S.SourceInstances,
    "rendered_documents": S.RenderedDocuments,
    "workflow_generations": S.WorkflowGenerations,
    "extracted_decisions": S.ExtractedDecisions,
    "evidence_categories": S.EvidenceCategories,
    "generation_outcomes": S.GenerationOutcomes,
    "mr_flags": M.MRFlags,
    "mr_violations": M.MRViolations,
    "accuracy_by_format": M.AccuracyByFormat,
    "stability_by_format": M.StabilityByFormat,
    "evidence_drift": M.EvidenceDrift,
    "silent_violations": M.SilentViolations,
    "format_tests": M.FormatTests,
    "vote_aggregation": M.VoteAggregation,
    "format_routing": M.FormatRouting,
}


def run_study(instance, sources, limit, k, tables=True):
    """The inputs job, the model job for :data:`MODEL`, then (``tables``) the cross-model tables job."""
    defs = build_definitions()
    inputs = defs.resolve_job_def("format_robustness_inputs_job").execute_in_process(
        instance=instance,
        raise_on_error=False,
        run_config={"ops": {"format_robustness__source_instances": {"config": {"sources": sources, "limit": limit}}}},
    )
    if not inputs.success:
        return inputs, None
    model = defs.resolve_job_def("format_robustness_model_job").execute_in_process(
        instance=instance,
        partition_key=MODEL,
        raise_on_error=False,
        run_config={"ops": {"format_robustness__workflow_generations": {"config": {"k": k}}}},
    )
    if tables and model.success:  # the cross-model tables, once after the model run (as metamorph run does)
        tables_run = defs.resolve_job_def("format_robustness_tables_job").execute_in_process(
            instance=instance, raise_on_error=False
        )
        assert tables_run.success, "format_robustness_tables_job"
    return inputs, model


def read(db, table):
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(f"SELECT * FROM format_robustness.{table}").df()
    finally:
        con.close()


def generation_metadata(result):
    mats = [e for e in result.get_asset_materialization_events() if e.asset_key.path[-1] == "workflow_generations"]
    return {k: v.value for k, v in mats[0].materialization.metadata.items()}


@pytest.mark.llm
def test_medqa_end_to_end_with_the_local_model(metamorph_home):
    medqa = shared_sample("medqa")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", [MODEL])
        inputs, model = run_study(instance, [f"medqa:{medqa}"], 5, 2)
        assert inputs.success and model.success
        md = generation_metadata(model)
        assert md["model_calls"] == 5 * 4 * 2 and md["cache_hits"] == 0

        db = metamorph_home / "metamorph.duckdb"
        for table, schema in TABLES.items():
            df = read(db, table)
            assert len(df) > 0, table
            validate_frame(schema, df, table)
        assert len(read(db, "workflow_generations")) == 40
        assert set(read(db, "accuracy_by_format")["format"]) == {"txt", "md", "json", "csv"}
        assert sorted(read(db, "mr_violations")["relation"]) == ["MR1", "MR2", "MR3"]
        # lineage: every decision reaches its raw completion, request and document
        lineage = read(db, "decision_lineage")
        assert len(lineage) == 40 and lineage["request_json"].notna().all()
        req = json.loads(lineage.iloc[0]["request_json"])
        # the embedded default samples in this study (registry study_params): a seed per request
        assert req["params"]["temperature"] == 0.7 and req["repeat_index"] in (1, 2)
        assert lineage["request_json"].map(lambda j: json.loads(j)["params"]["seed"]).nunique() == 40

        # a warm cache: a second materialization of the inputs and the generations makes no model call
        _, again = run_study(instance, [f"medqa:{medqa}"], 5, 2, tables=False)
        md2 = generation_metadata(again)
        assert md2["model_calls"] == 0 and md2["cache_hits"] == 40


def test_bad_input_fails_and_writes_nothing_downstream(metamorph_home, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps(
            {"id": "m-1", "question": "Q?", "options": {"A": "a", "B": "b", "C": "c", "D": "d"}, "answer_idx": "E"}
        )
        + "\n"
    )
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", [MODEL])
        with pytest.raises(InputsRejected) as err:  # at launch: no run is created
            run_study(instance, [f"medqa:{bad}"], ALL_ROWS, 1)
        assert str(err.value) == f"{bad}, row 1, field 'answer_idx': gold label 'E' is not one of A, B, C, D"
        assert instance.get_runs() == []
    db = metamorph_home / "metamorph.duckdb"
    if db.exists():
        con = duckdb.connect(str(db), read_only=True)
        tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        con.close()
        assert tables == set()


def test_asset_module_has_no_metric_logic():
    # metric code is one hop away: every metric asset's docstring names its function or SQL file
    for name in (
        "mr_violations",
        "accuracy_by_format",
        "stability_by_format",
        "evidence_drift",
        "fairness_disparity",
        "silent_violations",
        "format_tests",
        "vote_aggregation",
        "format_routing",
    ):
        doc = getattr(fr_assets, name).op.description or ""
        assert "metamorph.studies.format_robustness." in doc, name
