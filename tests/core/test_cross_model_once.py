"""A sweep over several registry models builds each cross-model table once.

``metamorph run`` over three registry models (the model boundary is the local HTTP stub) runs one
model job per model, which materializes only that model's partitions, then ONE run of the tables
job for the cross-model tables; the report card is built once. The materializations are counted in
the Dagster instance the run used. A failed model run does not plan the cross-model tables, so the
catalog never marks them failed; and the tables' automation condition requests them once after the
model partitions were updated, not while a model run is in progress."""

from __future__ import annotations

import json
from collections import Counter

import dagster as dg
import pytest

from tests.core.stub_http import Reply, chat_completion

STUDY = "wrapper_sensitivity"
MODELS = ["m1", "m2", "m3"]
#: Two ARC items x five wrappers x one seed = 10 calls per model.
ARC = [
    {
        "id": f"q{i}",
        "question": f"Which number is largest ({i})?",
        "choices": [{"label": k, "text": t} for k, t in zip("ABCD", ("1", "9", "3", "4"))],
        "answerKey": "B",
    }
    for i in (1, 2)
]
#: wrapper_sensitivity's assets outside its inputs (qa_items, wrapped_prompts): partitioned by model ...
PER_MODEL = {"wrapper_generations", "scored_answers", "token_balance"}
#: ... and the cross-model tables, each read from every model partition.
CROSS_MODEL = {
    "acc_parse_correlation",
    "constrained_falsifier",
    "fixed_effects",
    "fsi_decomposition",
    "fsi_psi",
    "item_level_model",
    "lineage_views",
    "matched_fsi",
    "mean_fsi_psi",
    "model_comparison",
    "wrapper_cells",
    "wrapper_wins",
}


@pytest.fixture
def sweep(stub, tmp_path, monkeypatch, metamorph_home):
    """Three openai_compatible entries on the stub, every reply "The answer is B"; the ARC file's spec."""
    reg = tmp_path / "models.yaml"
    reg.write_text(
        "models:\n"
        + "".join(
            f"  - id: {m}\n    provider: openai_compatible\n    model: stub-{m}\n"
            f"    base_url: {stub.url}/v1\n    api_key_env: STUB_KEY\n    max_concurrency: 1\n"
            for m in MODELS
        )
    )
    monkeypatch.setenv("METAMORPH_MODELS", str(reg))
    monkeypatch.setenv("STUB_KEY", "k")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    stub.script("POST", "/v1/chat/completions", lambda rec: Reply(200, chat_completion("The answer is B")))
    path = tmp_path / "arc.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ARC))
    # the code location `metamorph run` uses, with this test's registry, warehouse and cache (the
    # module's own was built when it was first imported)
    import pipelines.definitions

    monkeypatch.setattr(pipelines.definitions, "defs", pipelines.definitions.build_definitions())
    return f"arc_challenge:{path}"


def materializations(instance: dg.DagsterInstance, key: dg.AssetKey) -> Counter:
    """Materialization events of ``key`` by partition (None: unpartitioned)."""
    records = instance.fetch_materializations(key, limit=1000).records
    return Counter(r.partition_key for r in records)


def test_a_sweep_over_three_models_builds_each_cross_model_table_once_and_a_changed_entry_reruns_its_own(
    sweep, stub, capsys
):
    """The sweep (module docstring); then the registry entries are observed (their fingerprints are
    the data versions of model_registry/registry_entry) and m2's entry changes: automation evaluated
    in-process requests m2's generation partition and its per-model assets, nothing of m1 or m3,
    nothing of a study never run; once that run is done, each cross-model table once."""
    import os

    from assets.registry import REGISTRY_ENTRY
    from metamorph.models import load_registry
    from pipelines.definitions import build_definitions
    from pipelines.jobs import split_assets
    from pipelines.run import main

    assert split_assets(STUDY) == (frozenset(PER_MODEL), frozenset(CROSS_MODEL))
    assert main([STUDY, "--source", sweep, "--seeds", "0", "--models", *MODELS]) == 0
    assert "FSI" in capsys.readouterr().out  # the headline tables are printed as before
    assert len(stub.requests_to("/v1/chat/completions")) == 30
    with dg.DagsterInstance.get() as instance:
        for name in sorted(PER_MODEL):
            assert materializations(instance, dg.AssetKey([STUDY, name])) == {m: 1 for m in MODELS}, name
        for name in sorted(CROSS_MODEL):
            assert materializations(instance, dg.AssetKey([STUDY, name])) == {None: 1}, name
        assert materializations(instance, dg.AssetKey(["model_upgrades", "robustness_report_card"])) == {None: 1}
        jobs = Counter(r.dagster_run.job_name for r in instance.get_run_records())
        assert jobs == {
            f"{STUDY}_inputs_job": 1,
            f"{STUDY}_model_job": 3,
            f"{STUDY}_tables_job": 1,
            "model_upgrades_job": 1,
        }

    reg = os.environ["METAMORPH_MODELS"]
    defs = build_definitions()
    observe = defs.resolve_implicit_job_def_def_for_assets([REGISTRY_ENTRY])
    with dg.DagsterInstance.get() as instance:
        assert observe.execute_in_process(instance=instance, asset_selection=[REGISTRY_ENTRY]).success
        fp = {m.id: m.fingerprint() for m in load_registry(reg)}
        for m in MODELS:
            record = instance.fetch_observations(
                dg.AssetRecordsFilter(asset_key=REGISTRY_ENTRY, asset_partitions=[m]), limit=1
            ).records[0]
            assert record.asset_observation.tags["dagster/data_version"] == fp[m]
        first = dg.evaluate_automation_conditions(defs=defs, instance=instance)
        assert requested(first) == {}
        # m2's entry changes (a decoding setting): a new fingerprint, observed
        with open(reg) as fh:
            text = fh.read()
        text = text.replace("model: stub-m2\n", "model: stub-m2\n    params: {temperature: 0.5}\n")
        with open(reg, "w") as fh:
            fh.write(text)
        new_fp = {m.id: m.fingerprint() for m in load_registry(reg)}
        assert [m for m in MODELS if new_fp[m] != fp[m]] == ["m2"]
        assert observe.execute_in_process(instance=instance, asset_selection=[REGISTRY_ENTRY]).success
        second = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
        assert requested(second) == {f"{STUDY}/{name}": ["m2"] for name in PER_MODEL}
        # nothing new: nothing requested again
        third = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=second.cursor)
        assert requested(third) == {}
        # the run automation launches for m2 (its model job), then the cross-model tables once
        model_job = defs.resolve_job_def(f"{STUDY}_model_job")
        ops = {f"{STUDY}__wrapper_generations": {"config": {"seeds": [0]}}}
        assert model_job.execute_in_process(instance=instance, partition_key="m2", run_config={"ops": ops}).success
        fourth = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=third.cursor)
        assert requested(fourth) == {f"{STUDY}/{name}": [None] for name in CROSS_MODEL}


def test_a_failed_model_run_plans_no_cross_model_table(stub, metamorph_home, tmp_path, monkeypatch):
    """The model run of a sweep fails at a step (format routing's config is refused when its step
    runs); the run planned only per-model assets, so the catalog cannot mark a cross-model table
    failed, and the tables built before keep their one materialization."""
    from pipelines.definitions import build_definitions
    from pipelines.jobs import split_assets

    study = "format_robustness"
    reg = tmp_path / "models.yaml"
    reg.write_text(
        f"models:\n  - id: stub\n    provider: openai_compatible\n    model: stub-model\n"
        f"    base_url: {stub.url}/v1\n    api_key_env: STUB_KEY\n    max_concurrency: 1\n"
    )
    monkeypatch.setenv("METAMORPH_MODELS", str(reg))
    monkeypatch.setenv("STUB_KEY", "k")
    reply = chat_completion(json.dumps({"decision": "A", "evidence": ["fever"]}))
    stub.script("POST", "/v1/chat/completions", lambda rec: Reply(200, reply))
    defs = build_definitions()
    per_model, cross_model = split_assets(study)
    assert {"generation_outcomes", "routing_choice"} <= per_model and "model_comparison" in cross_model
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["stub"])
        inputs = {f"{study}__source_instances": {"config": {"sources": ["construct"], "limit": 2}}}
        assert (
            defs.resolve_job_def(f"{study}_inputs_job")
            .execute_in_process(instance=instance, run_config={"ops": inputs})
            .success
        )
        gen = {f"{study}__workflow_generations": {"config": {"k": 1}}}
        model_job = defs.resolve_job_def(f"{study}_model_job")
        assert model_job.execute_in_process(instance=instance, partition_key="stub", run_config={"ops": gen}).success
        assert defs.resolve_job_def(f"{study}_tables_job").execute_in_process(instance=instance).success
        bad = {**gen, f"{study}__routing_choice": {"config": {"selection": "bogus"}}}
        failed = model_job.execute_in_process(
            instance=instance, partition_key="stub", run_config={"ops": bad}, raise_on_error=False
        )
        assert [e.step_key for e in failed.get_step_failure_events()] == [f"{study}__routing_choice"]
        planned = instance.get_records_for_run(
            failed.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED
        ).records
        planned_names = {r.event_log_entry.dagster_event.asset_key.path[-1] for r in planned}
        assert planned_names == set(per_model) and not planned_names & cross_model
        for name in sorted(cross_model):
            assert materializations(instance, dg.AssetKey([study, name])) == {None: 1}, name


def requested(result) -> dict[str, list]:
    """``{asset: sorted requested partitions}`` of an automation evaluation (None: unpartitioned)."""
    return {
        r.key.to_user_string(): sorted(result.get_requested_partitions(r.key), key=str)
        for r in result.results
        if result.get_num_requested(r.key)
    }
