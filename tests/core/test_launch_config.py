"""The launchpad: every config field is scaffolded with its default, and an inputs job checks its
config and sources when the run is launched (one line, no run created) — pipelines/inputs.py."""

from __future__ import annotations

import dagster as dg
import pytest
import yaml
from dagster._core.snap.snap_to_yaml import default_values_yaml_from_type_snap

from pipelines.definitions import defs
from pipelines.inputs import InputsRejected, config_class

INPUT_OPS = {
    "format_robustness": ("format_robustness__source_instances", "medqa:{missing}"),
    "wrapper_sensitivity": ("wrapper_sensitivity__qa_items", "boolq:{missing}"),
    "workflow_perturb": ("workflow_perturb__goldens", "{missing}"),
    "order_probe": ("order_probe__order_items", "{missing}"),
}


def scaffold(job: dg.JobDefinition) -> dict:
    """The run config the launchpad pre-fills for ``job`` (Dagster's own scaffold)."""
    snap = job.get_job_snapshot()
    schema = snap.config_schema_snapshot
    return (
        yaml.safe_load(
            default_values_yaml_from_type_snap(schema, schema.get_config_snap(snap.mode_def_snaps[0].root_config_key))
        )
        or {}
    )


@pytest.mark.parametrize("job_name", sorted(j.name for j in defs.resolve_all_job_defs() if j.name.endswith("_job")))
def test_the_launchpad_scaffold_shows_every_config_field_with_its_default(job_name):
    job = defs.resolve_job_def(job_name)
    ops = scaffold(job).get("ops", {})
    classes = {n.name: c for n in job.graph.nodes if (c := config_class(n.definition)) is not None}
    if not classes:  # a job without configurable ops (model_upgrades_job) pre-fills nothing
        assert ops == {}, job_name
        return
    for op, cls in classes.items():
        shown = ops[op]["config"]
        assert set(shown) == set(cls.model_fields), (op, shown)
        assert shown == {name: f.default for name, f in cls.model_fields.items()}, op


def test_no_row_limit_is_shown_as_minus_one():
    ops = scaffold(defs.resolve_job_def("format_robustness_inputs_job"))["ops"]
    assert ops["format_robustness__source_instances"]["config"] == {
        "sources": ["construct"],
        "limit": -1,
        "sample_seed": 0,
    }


@pytest.mark.parametrize("study", sorted(INPUT_OPS))
def test_bad_inputs_fail_the_launch_with_one_line_and_no_run(study, tmp_path, monkeypatch):
    monkeypatch.setenv("METAMORPH_HOME", str(tmp_path))
    op, spec = INPUT_OPS[study]
    missing = tmp_path / "missing.jsonl"
    job = defs.resolve_job_def(f"{study}_inputs_job")
    with dg.instance_for_test() as instance:
        for cfg, kind, message in (
            ({"limit": 0}, "ConfigError", f"{op}: limit: must be a whole number >= 1, got '0'"),
            ({"sources": [spec.format(missing=missing)]}, "InputError", f"{missing}: file does not exist"),
        ):
            with pytest.raises(InputsRejected) as err:
                job.execute_in_process(instance=instance, run_config={"ops": {op: {"config": cfg}}})
            assert (type(err.value.cause).__name__, str(err.value)) == (kind, message)
        assert instance.get_runs() == []
        assert instance.get_latest_materialization_event(dg.AssetKey(op.split("__"))) is None
    assert not (tmp_path / "metamorph.duckdb").exists()


def test_a_step_outside_the_inputs_job_still_rejects_a_bad_limit(tmp_path, monkeypatch):
    """Materializing the asset alone (Dagster's implicit asset job, no config mapping) fails its
    first step, before anything is loaded, with pydantic's message for the same rule."""
    monkeypatch.setenv("METAMORPH_HOME", str(tmp_path))
    from pipelines.definitions import build_definitions

    local = build_definitions()
    with dg.instance_for_test() as instance:
        res = dg.materialize(
            [local.resolve_assets_def(dg.AssetKey(["order_probe", "order_items"]))],
            instance=instance,
            raise_on_error=False,
            resources=local.resources,
            run_config={"ops": {"order_probe__order_items": {"config": {"limit": 0}}}},
        )
    assert not res.success and res.get_asset_materialization_events() == []
    err = res.get_step_failure_events()[0].event_specific_data.error
    while err.cause is not None:
        err = err.cause
    assert err.cls_name == "ValidationError"  # pydantic's, raised when the step builds its config
    assert err.message.splitlines()[:3] == [
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ItemsConfig",
        "limit",
        "  Value error, must be a whole number >= 1, got '0' [type=value_error, input_value=0, input_type=int]",
    ]
