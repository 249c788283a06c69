"""The code location loads; the registry sensor and the weekly schedule emit the right requests."""

import dagster as dg
import pytest

from pipelines.definitions import defs
from pipelines.schedules import WEEKLY_SCHEDULES
from pipelines.sensors import model_registry_sensor

EXPECTED_ASSETS = {
    # the registry's entries (observable, partitioned by model)
    "registry_entry",
    # format_robustness
    "source_instances",
    "rendered_documents",
    "workflow_generations",
    "extracted_decisions",
    "evidence_categories",
    "generation_outcomes",
    "mr_flags",
    "mr_violations",
    "accuracy_by_format",
    "stability_by_format",
    "evidence_drift",
    "fairness_disparity",
    "silent_violations",
    "format_tests",
    "vote_aggregation",
    "format_routing",
    "lineage_views",
    "routing_choice",
    "routing_choice_per_model",
    "routed_generations",
    "routed_outcomes",
    "mitigation_table",
    "mr_table",
    "silent_by_dataset",
    "workflow_tests",
    "flip_errors",
    "evidence_change_share",
    "drift_correlation",
    # wrapper_sensitivity
    "qa_items",
    "wrapped_prompts",
    "wrapper_generations",
    "scored_answers",
    "token_balance",
    "wrapper_cells",
    "fsi_psi",
    "mean_fsi_psi",
    "acc_parse_correlation",
    "fixed_effects",
    "item_level_model",
    "fsi_decomposition",
    "wrapper_wins",
    "matched_fsi",
    "constrained_falsifier",
    # workflow_perturb
    "goldens",
    "perturbations",
    "perturbation_scores",
    "perturbations_llm",
    "perturbation_scores_llm",
    "judge_scores",
    "severity_table_judge",
    "severity_table",
    "sensitivity_matrix",
    "strata_table",
    "threshold_recalibration",
    "firing_matrix",
    # order_probe
    "order_items",
    "scrambled_inputs",
    "order_prompts",
    "order_generations",
    "scored_replies",
    "recovery_rates",
    "recovery_breakdown",
    "error_categories",
    "recovery_regression",
    "semantic_scores",
    "diagnostics",
    # format_robustness and wrapper_sensitivity: upgrade verdicts; model_upgrades: the report card
    "model_comparison",
    "robustness_report_card",
}
PER_MODEL = {
    "registry_entry",
    "workflow_generations",
    "extracted_decisions",
    "evidence_categories",
    "routing_choice_per_model",
    "routed_generations",
    "routed_outcomes",
    "wrapper_generations",
    "scored_answers",
    "token_balance",
    "perturbations_llm",
    "perturbation_scores_llm",
    "judge_scores",
    "severity_table_judge",
    "order_generations",
    "scored_replies",
}


def test_definitions_validate_loadable():
    dg.Definitions.validate_loadable(defs)


def test_asset_graph_keys_and_groups():
    graph = defs.resolve_asset_graph()
    keys = {k.path[-1] for k in graph.get_all_asset_keys()}
    assert keys == EXPECTED_ASSETS
    for key in graph.get_all_asset_keys():
        assert key.path[0] in (
            "format_robustness",
            "wrapper_sensitivity",
            "workflow_perturb",
            "order_probe",
            "model_upgrades",
            "model_registry",
        )
        assert graph.get(key).group_name == key.path[0]


def test_per_model_assets_share_the_dynamic_model_partitions():
    graph = defs.resolve_asset_graph()
    partitioned = {k.path[-1] for k in graph.get_all_asset_keys() if graph.get(k).partitions_def is not None}
    assert partitioned == PER_MODEL
    for k in graph.get_all_asset_keys():
        p = graph.get(k).partitions_def
        if p is not None:
            assert isinstance(p, dg.DynamicPartitionsDefinition) and p.name == "model"


def test_every_asset_is_in_the_duckdb_pool():
    for node in defs.resolve_asset_graph().asset_nodes:
        if node.key.path[0] == "model_registry":  # observed from the registry file: no warehouse
            continue
        assert node.pools == {"duckdb"}, node.key


def write_registry(path, ids):
    lines = ["models:"]
    for i in ids:
        lines += [f"  - id: {i}", "    provider: llama_cpp", "    model: SmolLM2-135M-Instruct.Q4_1.gguf"]
    path.write_text("\n".join(lines) + "\n")


def _evaluated(instance, study: str, asset: str, model_id: str, fingerprint: str | None) -> None:
    """Record a materialization of a study's generation asset for one model partition."""
    meta = {} if fingerprint is None else {"registry_fingerprint": fingerprint}
    instance.report_runless_asset_event(dg.AssetMaterialization([study, asset], partition=model_id, metadata=meta))


def test_registry_sensor_decides_from_materializations(tmp_path, monkeypatch):
    from metamorph.models import load_registry

    reg = tmp_path / "models.yaml"
    monkeypatch.setenv("METAMORPH_MODELS", str(reg))
    write_registry(reg, ["m-a", "m-b"])
    fp = {m.id: m.fingerprint() for m in load_registry(reg)}
    with dg.instance_for_test() as instance:
        # no study has inputs yet: partitions are added, nothing is launched
        first = model_registry_sensor(dg.build_sensor_context(instance=instance))
        assert first.run_requests == [] and first.dynamic_partitions_requests[0].partition_keys == ["m-a", "m-b"]
        instance.add_dynamic_partitions("model", ["m-a", "m-b"])
        for name in ("source_instances", "rendered_documents"):
            instance.report_runless_asset_event(dg.AssetMaterialization(["format_robustness", name]))
        # inputs without any model run (pipelines.run --no-models) are not a request to run models
        idle = model_registry_sensor(dg.build_sensor_context(instance=instance))
        assert isinstance(idle, dg.SkipReason) and "no study has been run with a model" in idle.skip_message
        # m-a was evaluated with its current entry: only m-b is launched, whatever the cursor says
        _evaluated(instance, "format_robustness", "workflow_generations", "m-a", fp["m-a"])
        res = model_registry_sensor(dg.build_sensor_context(instance=instance, cursor=None))
        assert [(r.job_name, r.partition_key, r.tags["metamorph/reason"]) for r in res.run_requests] == [
            ("format_robustness_model_job", "m-b", "new model")
        ]
        assert res.dynamic_partitions_requests == []
        # both evaluated: nothing to do
        _evaluated(instance, "format_robustness", "workflow_generations", "m-b", fp["m-b"])
        again = model_registry_sensor(dg.build_sensor_context(instance=instance))
        assert isinstance(again, dg.SkipReason)
        # m-b's entry changes: not this sensor's (declarative automation re-runs it, registry_automation)
        reg.write_text(reg.read_text() + "    params: {temperature: 0.5}\n")
        changed = model_registry_sensor(dg.build_sensor_context(instance=instance))
        assert isinstance(changed, dg.SkipReason)
        # a materialization without a recorded fingerprint (older runs) counts as not evaluated
        _evaluated(instance, "format_robustness", "workflow_generations", "m-a", None)
        stale = model_registry_sensor(dg.build_sensor_context(instance=instance))
        assert [(r.partition_key, r.tags["metamorph/reason"]) for r in stale.run_requests] == [("m-a", "new model")]


def test_weekly_schedule_fans_out_over_partitions(tmp_path, monkeypatch):
    """One request per model partition that is a registry model; a partition added by hand that
    is not one (its launch would be refused) is left out."""
    from datetime import datetime, timezone

    registry = tmp_path / "models.yaml"
    registry.write_text(
        "models:\n"
        + "".join(
            f"  - {{id: {m}, provider: openai_compatible, model: x, base_url: 'http://127.0.0.1:9/v1'}}\n"
            for m in ("m-a", "m-b")
        )
    )
    monkeypatch.setenv("METAMORPH_MODELS", str(registry))
    weekly = {s.name: s for s in WEEKLY_SCHEDULES}["format_robustness_weekly"]
    with dg.instance_for_test() as instance:
        ctx = dg.build_schedule_context(
            instance=instance, scheduled_execution_time=datetime(2026, 11, 30, 3, tzinfo=timezone.utc)
        )
        assert isinstance(weekly(ctx), dg.SkipReason)
        instance.add_dynamic_partitions("model", ["m-a", "typo", "m-b"])
        assert isinstance(weekly(ctx), dg.SkipReason)  # inputs not materialized yet
        for name in ("source_instances", "rendered_documents"):
            instance.report_runless_asset_event(dg.AssetMaterialization(["format_robustness", name]))
        assert isinstance(weekly(ctx), dg.SkipReason)  # never run with a model
        _evaluated(instance, "format_robustness", "workflow_generations", "m-a", "x")
        reqs = weekly(ctx)
        assert [(r.partition_key, r.run_key) for r in reqs] == [
            ("m-a", "format_robustness:weekly:2026-11-30:m-a"),
            ("m-b", "format_robustness:weekly:2026-11-30:m-b"),
        ]


@pytest.mark.parametrize(
    "job",
    [
        "format_robustness_inputs_job",
        "format_robustness_model_job",
        "format_robustness_tables_job",
        "wrapper_sensitivity_inputs_job",
        "wrapper_sensitivity_model_job",
        "workflow_perturb_inputs_job",
        "workflow_perturb_model_job",
        "model_upgrades_job",
    ],
)
def test_jobs_resolve(job):
    assert defs.resolve_job_def(job).name == job


def test_registry_sensor_is_off_until_turned_on():
    """Opening the UI after `make demo` launches nothing: the shipped registry has more models than
    the demo evaluates, so the sensor starts stopped."""
    assert model_registry_sensor.default_status == dg.DefaultSensorStatus.STOPPED
