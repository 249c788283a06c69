"""What the UI sends and gets back, through Dagster's GraphQL schema against the code location in
its own code server (as ``make ui`` runs it): an asset's own launchpad and a model partition that
is not a registry model are refused with one line, no stack, and no run is created."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
from dagster_graphql.client.query import LAUNCH_PIPELINE_EXECUTION_MUTATION
from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql

REPO = Path(__file__).resolve().parents[2]

#: what the partitions dialog asks before it launches one partition (ui-core ConfigPartitionForAssetJobQuery)
PARTITION_QUERY = """
query ($job: String!, $partition: String!, $assetKeys: [AssetKeyInput!]!) {
  pipelineOrError(params: {pipelineName: $job, repositoryName: "__repository__", repositoryLocationName: "metamorph"}) {
    ... on Pipeline {
      partition(partitionName: $partition, selectedAssetKeys: $assetKeys) {
        runConfigOrError { __typename ... on PartitionRunConfig { yaml } ... on PythonError { message className stack } }
        tagsOrError { __typename ... on PythonError { message className stack } }
      }
    }
  }
}
"""

RUNS = "{ runsOrError { ... on Runs { results { runId } } } }"


@pytest.fixture
def ui_context(tmp_path, monkeypatch):
    registry = tmp_path / "models.yaml"
    registry.write_text(
        "models:\n  - {id: m1, provider: openai_compatible, model: x, base_url: 'http://127.0.0.1:9/v1'}\n"
    )
    monkeypatch.setenv("METAMORPH_MODELS", str(registry))
    monkeypatch.setenv("METAMORPH_HOME", str(tmp_path))
    monkeypatch.chdir(REPO)
    with dg.instance_for_test() as instance:
        with define_out_of_process_context(str(REPO / "workspace.yaml"), None, instance) as context:
            yield context, registry


def test_the_ui_refuses_a_bad_asset_config_and_a_stray_partition_before_a_run(ui_context, tmp_path):
    context, registry = ui_context
    # the asset's own launchpad: Dagster's implicit asset job with the asset selected
    launched = execute_dagster_graphql(
        context,
        LAUNCH_PIPELINE_EXECUTION_MUTATION,
        {
            "executionParams": {
                "selector": {
                    "repositoryLocationName": "metamorph",
                    "repositoryName": "__repository__",
                    "jobName": "__ASSET_JOB",
                    "assetSelection": [{"path": ["format_robustness", "source_instances"]}],
                },
                "mode": "default",
                "runConfigData": {"ops": {"format_robustness__source_instances": {"config": {"limit": 0}}}},
            }
        },
    )
    assert launched.data["launchPipelineExecution"] == {
        "__typename": "PythonError",
        "message": "format_robustness__source_instances: limit: must be a whole number >= 1, got '0'",
        "className": "InputsRejected",
        "stack": [],
        "cause": None,
    }
    # a partition added by hand in the partitions dialog ("Add a partition"), then launched
    context.instance.add_dynamic_partitions("model", ["nosuchmodel", "m1"])
    keys = [{"path": ["format_robustness", "workflow_generations"]}]
    line = (
        f"partition 'nosuchmodel' is not a model of the registry {registry} (models: m1); launch a registered model, "
        "or register it first. To remove the partition: metamorph partitions --remove nosuchmodel"
    )
    asked = execute_dagster_graphql(
        context,
        PARTITION_QUERY,
        {"job": "format_robustness_model_job", "partition": "nosuchmodel", "assetKeys": keys},
    ).data["pipelineOrError"]["partition"]
    refused = {"__typename": "PythonError", "message": line, "className": "PartitionRejected", "stack": []}
    assert asked == {"runConfigOrError": refused, "tagsOrError": refused}
    ok = execute_dagster_graphql(
        context, PARTITION_QUERY, {"job": "format_robustness_model_job", "partition": "m1", "assetKeys": keys}
    ).data["pipelineOrError"]["partition"]
    assert ok["runConfigOrError"] == {"__typename": "PartitionRunConfig", "yaml": "{}\n"}
    assert ok["tagsOrError"]["__typename"] == "PartitionTags"
    assert execute_dagster_graphql(context, RUNS).data == {"runsOrError": {"results": []}}
    assert not (tmp_path / "metamorph.duckdb").exists()


#: what the Overview's Timeline asks for its finished runs (ui-core useRunsForTimeline: CompletedRunTimelineQuery);
#: it leaves out a run whose repositoryOrigin is null and puts the others under their job
TIMELINE_QUERY = """
query ($filter: RunsFilter!) {
  runsOrError(filter: $filter, limit: 500) {
    ... on Runs { results { pipelineName status startTime endTime repositoryOrigin { repositoryName repositoryLocationName } } }
  }
}
"""
#: the jobs of the code locations the Timeline lists its rows under (FutureTicksQuery)
WORKSPACE_JOBS = """
{ workspaceOrError { ... on Workspace { locationEntries { name locationOrLoadError {
  ... on RepositoryLocation { repositories { name pipelines { name } } } } } } } }
"""


def test_a_metamorph_run_is_on_the_overview_timeline_under_its_job(ui_context, tmp_path):
    import time

    from pipelines.definitions import build_definitions
    from pipelines.instance import run_job

    context, _ = ui_context
    t0 = time.time()
    job = build_definitions().resolve_job_def("order_probe_inputs_job")
    res = run_job(job, context.instance, {"ops": {"order_probe__order_items": {"config": {"limit": 2}}}})
    assert res.success
    runs = execute_dagster_graphql(
        context,
        TIMELINE_QUERY,
        {
            "filter": {
                "statuses": ["SUCCESS", "FAILURE", "CANCELED"],
                "updatedAfter": t0 - 1,
                "updatedBefore": time.time() + 1,
            }
        },
    ).data["runsOrError"]["results"]
    assert [(r["pipelineName"], r["status"], r["repositoryOrigin"]) for r in runs] == [
        (
            "order_probe_inputs_job",
            "SUCCESS",
            {"repositoryName": "__repository__", "repositoryLocationName": "metamorph"},
        )
    ]
    assert t0 - 1 <= runs[0]["startTime"] <= runs[0]["endTime"] <= time.time()
    # the Timeline's row for it: the job of that name in that repository of that code location
    [entry] = execute_dagster_graphql(context, WORKSPACE_JOBS).data["workspaceOrError"]["locationEntries"]
    [repo] = entry["locationOrLoadError"]["repositories"]
    assert (entry["name"], repo["name"]) == ("metamorph", "__repository__")
    assert "order_probe_inputs_job" in {p["name"] for p in repo["pipelines"]}
