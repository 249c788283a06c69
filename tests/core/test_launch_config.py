"""The launchpad: every config field is scaffolded with its default, and an inputs job checks its
config and sources when the run is launched (one line, no run created) — pipelines/inputs.py."""

from __future__ import annotations

import dagster as dg
import pytest
import yaml
from dagster._core.snap.snap_to_yaml import default_values_yaml_from_type_snap

from pipelines.definitions import defs
from pipelines.inputs import InputsRejected, PartitionRejected, config_class

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


@pytest.mark.parametrize("study", sorted(INPUT_OPS))
def test_the_assets_own_launch_rejects_a_bad_limit_with_one_line_and_no_run(study, tmp_path, monkeypatch):
    """Materializing the inputs asset alone (Dagster's implicit asset job, the asset's own
    launchpad) checks its config at launch as the inputs job does: one line, no run, no table."""
    monkeypatch.setenv("METAMORPH_HOME", str(tmp_path))
    op, _ = INPUT_OPS[study]
    key = dg.AssetKey(op.split("__"))
    job = defs.resolve_implicit_job_def_def_for_assets([key])
    with dg.instance_for_test() as instance:
        with pytest.raises(InputsRejected) as err:
            job.execute_in_process(
                instance=instance, asset_selection=[key], run_config={"ops": {op: {"config": {"limit": 0}}}}
            )
        assert str(err.value) == f"{op}: limit: must be a whole number >= 1, got '0'"
        assert instance.get_runs() == []
    assert not (tmp_path / "metamorph.duckdb").exists()


def test_a_model_jobs_config_is_checked_at_launch_too(tmp_path, monkeypatch):
    """A bad value of a model job's config (``k: 0``) is refused at launch with one line, no run."""
    monkeypatch.setenv("METAMORPH_HOME", str(tmp_path))
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["smollm2"])
        with pytest.raises(InputsRejected) as err:
            defs.resolve_job_def("format_robustness_model_job").execute_in_process(
                instance=instance,
                partition_key="smollm2",
                run_config={"ops": {"format_robustness__workflow_generations": {"config": {"k": 0}}}},
            )
        assert str(err.value).startswith("format_robustness__workflow_generations: k: ")
        assert "\n" not in str(err.value)
        assert instance.get_runs() == []


@pytest.mark.parametrize("study", sorted(INPUT_OPS))
def test_a_partition_that_is_not_a_registry_model_is_refused_before_a_run(study, tmp_path, monkeypatch):
    """A model job's partition added by hand (a typo) is refused with one line naming the registry
    and how to remove it; no run exists, no table is written."""
    monkeypatch.setenv("METAMORPH_HOME", str(tmp_path))
    registry = tmp_path / "models.yaml"
    registry.write_text(
        "models:\n  - {id: m1, provider: openai_compatible, model: x, base_url: 'http://127.0.0.1:9/v1'}\n"
    )
    monkeypatch.setenv("METAMORPH_MODELS", str(registry))
    job = defs.resolve_job_def(f"{study}_model_job")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["nosuchmodel"])
        with pytest.raises(PartitionRejected) as err:
            job.execute_in_process(instance=instance, partition_key="nosuchmodel")
        assert str(err.value) == (
            f"partition 'nosuchmodel' is not a model of the registry {registry} (models: m1); launch a registered "
            "model, or register it first. To remove the partition: metamorph partitions --remove nosuchmodel"
        )
        assert err.value.user_code_process_error_infos[0].stack == []
        assert instance.get_runs() == []
        # what the UI asks for before it launches one partition: the same refusal
        with pytest.raises(PartitionRejected):
            job.get_run_config_for_partition_key("nosuchmodel")
        assert job.get_run_config_for_partition_key("m1") == {}
    assert not (tmp_path / "metamorph.duckdb").exists()


def test_a_stray_partition_is_listed_and_removed_by_metamorph_partitions(tmp_path, monkeypatch, capsys):
    from metamorph.cli import main

    registry = tmp_path / "models.yaml"
    registry.write_text(
        "models:\n  - {id: m1, provider: openai_compatible, model: x, base_url: 'http://127.0.0.1:9/v1'}\n"
    )
    monkeypatch.setenv("METAMORPH_MODELS", str(registry))
    monkeypatch.setenv("METAMORPH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dh"))
    from pipelines.instance import ensure_dagster_home, open_instance

    ensure_dagster_home()
    open_instance().add_dynamic_partitions("model", ["m1", "nosuchmodel"])
    assert main(["partitions"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "m1\tregistry",
        "nosuchmodel\tnot in the registry (remove: metamorph partitions --remove nosuchmodel)",
    ]
    assert main(["partitions", "--remove", "m1"]) == 2
    assert (
        capsys.readouterr().err == "error: --remove 'm1': a model of the registry; remove it from the registry first\n"
    )
    assert main(["partitions", "--remove", "nosuchmodel", "typo2"]) == 2
    assert capsys.readouterr().err == "error: --remove 'typo2': not a model partition of the instance\n"
    assert main(["partitions", "--remove", "nosuchmodel"]) == 0
    assert capsys.readouterr().out == "removed 1 partition(s): nosuchmodel\n"
    assert open_instance().get_dynamic_partitions("model") == ["m1"]
