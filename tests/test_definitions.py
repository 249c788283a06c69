"""The code location loads; the registry sensor and the weekly schedule emit the right requests."""

import json

import dagster as dg
import pytest

from pipelines.definitions import defs
from pipelines.schedules import weekly_reevaluation
from pipelines.sensors import model_registry_sensor

EXPECTED_ASSETS = {
    "source_instances", "rendered_documents", "workflow_generations", "extracted_decisions", "evidence_categories",
    "generation_outcomes", "mr_flags", "mr_violations", "accuracy_by_format", "stability_by_format",
    "evidence_drift", "fairness_disparity", "silent_violations", "format_tests", "vote_aggregation",
    "format_routing", "lineage_views",
}


def test_definitions_validate_loadable():
    dg.Definitions.validate_loadable(defs)


def test_asset_graph_keys_and_groups():
    graph = defs.resolve_asset_graph()
    keys = {k.path[-1] for k in graph.get_all_asset_keys()}
    assert keys == EXPECTED_ASSETS
    for key in graph.get_all_asset_keys():
        assert key.path[0] == "format_robustness"
        assert graph.get(key).group_name == "format_robustness"


def test_per_model_assets_share_the_dynamic_model_partitions():
    graph = defs.resolve_asset_graph()
    partitioned = {k.path[-1] for k in graph.get_all_asset_keys() if graph.get(k).partitions_def is not None}
    assert partitioned == {"workflow_generations", "extracted_decisions", "evidence_categories"}
    for k in graph.get_all_asset_keys():
        p = graph.get(k).partitions_def
        if p is not None:
            assert isinstance(p, dg.DynamicPartitionsDefinition) and p.name == "model"


def test_every_asset_is_in_the_duckdb_pool():
    for node in defs.resolve_asset_graph().asset_nodes:
        assert node.pools == {"duckdb"}, node.key


def write_registry(path, ids):
    lines = ["models:"]
    for i in ids:
        lines += [f"  - id: {i}", "    provider: llama_cpp", "    model: SmolLM2-135M-Instruct.Q4_1.gguf"]
    path.write_text("\n".join(lines) + "\n")


def test_registry_sensor_adds_partitions_and_reruns_changed_entries(tmp_path, monkeypatch):
    reg = tmp_path / "models.yaml"
    monkeypatch.setenv("METAMORPH_MODELS", str(reg))
    write_registry(reg, ["m-a", "m-b"])
    with dg.instance_for_test() as instance:
        ctx = dg.build_sensor_context(instance=instance, cursor=None)
        res = model_registry_sensor(ctx)
        assert [r.partition_key for r in res.run_requests] == ["m-a", "m-b"]
        assert res.dynamic_partitions_requests[0].partition_keys == ["m-a", "m-b"]
        instance.add_dynamic_partitions("model", ["m-a", "m-b"])
        cursor = res.cursor
        # unchanged registry: skip
        again = model_registry_sensor(dg.build_sensor_context(instance=instance, cursor=cursor))
        assert isinstance(again, dg.SkipReason)
        # m-b's entry changes (new snapshot name) -> only m-b re-runs, no new partition
        reg.write_text(reg.read_text() + "    params: {temperature: 0.5}\n")
        changed = model_registry_sensor(dg.build_sensor_context(instance=instance, cursor=cursor))
        assert [r.partition_key for r in changed.run_requests] == ["m-b"]
        assert changed.run_requests[0].tags["metamorph/reason"] == "registry entry changed"
        assert changed.dynamic_partitions_requests == []
        assert set(json.loads(changed.cursor)) == {"m-a", "m-b"}


def test_weekly_schedule_fans_out_over_partitions():
    from datetime import datetime, timezone

    with dg.instance_for_test() as instance:
        ctx = dg.build_schedule_context(instance=instance,
                                        scheduled_execution_time=datetime(2026, 11, 30, 3, tzinfo=timezone.utc))
        assert isinstance(weekly_reevaluation(ctx), dg.SkipReason)
        instance.add_dynamic_partitions("model", ["m-a", "m-b"])
        reqs = weekly_reevaluation(ctx)
        assert [(r.partition_key, r.run_key) for r in reqs] == [("m-a", "weekly:2026-11-30:m-a"),
                                                               ("m-b", "weekly:2026-11-30:m-b")]


@pytest.mark.parametrize("job", ["format_robustness_inputs_job", "format_robustness_model_job"])
def test_jobs_resolve(job):
    assert defs.resolve_job_def(job).name == job
