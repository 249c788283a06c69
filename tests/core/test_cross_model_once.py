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


#: format_robustness with routing on: what one model partition computes (its routing choice from its
#: own generations, then the routed re-run) ...
FORMAT_PER_MODEL = {
    "workflow_generations",
    "extracted_decisions",
    "evidence_categories",
    "routing_choice_per_model",
    "routed_generations",
    "routed_outcomes",
}
#: ... and its cross-model tables, among them generation_outcomes and routing_choice (every model's
#: outcomes and choices in one table).
FORMAT_CROSS_MODEL = {
    "accuracy_by_format",
    "drift_correlation",
    "evidence_change_share",
    "evidence_drift",
    "fairness_disparity",
    "flip_errors",
    "format_routing",
    "format_tests",
    "generation_outcomes",
    "lineage_views",
    "mitigation_table",
    "model_comparison",
    "mr_flags",
    "mr_table",
    "mr_violations",
    "routing_choice",
    "silent_by_dataset",
    "silent_violations",
    "stability_by_format",
    "vote_aggregation",
    "workflow_tests",
}


def format_registry(stub, tmp_path, monkeypatch, models) -> None:
    """``models`` as openai_compatible entries on the stub (the first approved), each answering
    "refer" with one evidence item."""
    reg = tmp_path / "models.yaml"
    reg.write_text(
        "models:\n"
        + "".join(
            f"  - id: {m}\n    provider: openai_compatible\n    model: stub-{m}\n    base_url: {stub.url}/v1\n"
            f"    api_key_env: STUB_KEY\n    max_concurrency: 1\n" + ("    status: approved\n" if i == 0 else "")
            for i, m in enumerate(models)
        )
    )
    monkeypatch.setenv("METAMORPH_MODELS", str(reg))
    monkeypatch.setenv("STUB_KEY", "k")
    reply = chat_completion(json.dumps({"decision": "refer", "evidence": ["fever"]}))
    stub.script("POST", "/v1/chat/completions", lambda rec: Reply(200, reply))


def test_a_format_sweep_with_routing_builds_each_cross_model_table_once(stub, metamorph_home, tmp_path, monkeypatch):
    """format_robustness with format routing on, over three models: each model's routing choice and
    routed re-run are in its own partitions (one materialization per model), generation_outcomes,
    routing_choice and every other cross-model table are built once, by the one tables run."""
    from pipelines.jobs import split_assets
    from pipelines.run import main

    assert split_assets("format_robustness") == (frozenset(FORMAT_PER_MODEL), frozenset(FORMAT_CROSS_MODEL))
    format_registry(stub, tmp_path, monkeypatch, MODELS)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    import pipelines.definitions

    monkeypatch.setattr(pipelines.definitions, "defs", pipelines.definitions.build_definitions())
    assert main(["format_robustness", "--limit", "2", "--k", "1", "--models", *MODELS]) == 0
    # per model: 2 instances x 4 formats, then the routed re-run of the 6 not already in the best format
    assert len(stub.requests_to("/v1/chat/completions")) == 3 * (8 + 6)
    with dg.DagsterInstance.get() as instance:
        for name in sorted(FORMAT_PER_MODEL):
            assert materializations(instance, dg.AssetKey(["format_robustness", name])) == {m: 1 for m in MODELS}, name
        for name in sorted(FORMAT_CROSS_MODEL):
            assert materializations(instance, dg.AssetKey(["format_robustness", name])) == {None: 1}, name
        jobs = Counter(r.dagster_run.job_name for r in instance.get_run_records())
        assert jobs == {
            "format_robustness_inputs_job": 1,
            "format_robustness_model_job": 3,
            "format_robustness_tables_job": 1,
            "model_upgrades_job": 1,
        }


def test_a_failed_model_run_plans_no_cross_model_table(stub, metamorph_home, tmp_path, monkeypatch):
    """The model run of a sweep fails at a step (format routing's config is refused when the step
    routing_choice_per_model runs); the run planned only per-model assets, so the catalog cannot mark a
    cross-model table failed (no planned materialization, no failed one), and the tables built
    before keep their one materialization."""
    from pipelines.definitions import build_definitions
    from pipelines.jobs import split_assets

    study = "format_robustness"
    format_registry(stub, tmp_path, monkeypatch, ["stub"])
    defs = build_definitions()
    per_model, cross_model = split_assets(study)
    assert {"generation_outcomes", "routing_choice"} <= cross_model and "model_comparison" in cross_model
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
        bad = {**gen, f"{study}__routing_choice_per_model": {"config": {"selection": "bogus"}}}
        failed = model_job.execute_in_process(
            instance=instance, partition_key="stub", run_config={"ops": bad}, raise_on_error=False
        )
        assert [e.step_key for e in failed.get_step_failure_events()] == [f"{study}__routing_choice_per_model"]

        def named(event_type) -> set[str]:
            records = instance.get_records_for_run(failed.run_id, of_type=event_type).records
            return {r.event_log_entry.dagster_event.asset_key.path[-1] for r in records}

        assert named(dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED) == set(per_model)
        # the catalog's state of an asset is that of the last run that planned it: the failed run for
        # this model's partitions, the tables run for every cross-model table
        for name in sorted(per_model):
            info = instance.get_latest_planned_materialization_info(dg.AssetKey([study, name]), "stub")
            assert info.run_id == failed.run_id, name
        tables_run = [
            r.dagster_run.run_id for r in instance.get_run_records() if r.dagster_run.job_name.endswith("_tables_job")
        ]
        for name in sorted(cross_model):
            assert (
                instance.get_latest_planned_materialization_info(dg.AssetKey([study, name])).run_id == tables_run[0]
            ), name
        for name in sorted(cross_model):
            assert materializations(instance, dg.AssetKey([study, name])) == {None: 1}, name


def requested(result) -> dict[str, list]:
    """``{asset: sorted requested partitions}`` of an automation evaluation (None: unpartitioned), the
    registry entry's own observation left out: it is requested on every 5-minute cron tick, and a tick
    may pass between two evaluations of a test."""
    return {
        r.key.to_user_string(): sorted(result.get_requested_partitions(r.key), key=str)
        for r in result.results
        if result.get_num_requested(r.key) and r.key.path[0] != "model_registry"
    }


#: A run of a study with no cross-model table (the throwaway study of test_study), with one model:
#: its runs, whether a tables job exists, and what the automation requests afterwards.
NO_TABLES_CHECK = """
import json
import sys
from collections import Counter
from pathlib import Path

import assets
import metamorph.studies

root = Path(sys.argv[1])
metamorph.studies.__path__.append(str(root / "studies"))
assets.__path__.append(str(root / "assets"))

import dagster as dg

from metamorph.cli import main
from pipelines.definitions import defs
from pipelines.jobs import split_assets

code = main(["run", "toy_study", "--limit", "2", "--models", "toy"])
with dg.DagsterInstance.get() as instance:
    jobs = Counter(r.dagster_run.job_name for r in instance.get_run_records())
    evaluation = dg.evaluate_automation_conditions(defs=defs, instance=instance)
    print(json.dumps({
        "code": code,
        "tables": sorted(split_assets("toy_study")[1]),
        "jobs": dict(sorted(jobs.items())),
        "toy_jobs": sorted(j.name for j in defs.jobs if j.name.startswith("toy_study")),
        "requested": sorted(r.key.to_user_string() for r in evaluation.results if evaluation.get_num_requested(r.key)),
    }))
"""


def test_a_study_without_cross_model_tables_gets_no_tables_run(tmp_path):
    """A study whose assets are all its inputs and per-model ones has no tables job: ``metamorph run``
    with a model makes the inputs run, the model run and the report card, no tables run, and the
    automation requests nothing after it."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests.core.test_study import TOY_ASSETS, TOY_PACKAGE

    package = tmp_path / "studies" / "toy_study"
    package.mkdir(parents=True)
    files = dict(TOY_PACKAGE)
    # no compared metrics (no model_comparison) and no report-card rows: nothing crosses models
    study = files["study.py"]
    for line in (
        '    compared_metrics={"width_ok": True},\n',
        "    comparison=Comparison(\n"
        '        ("toy_generations",),\n'
        '        Deferred("metamorph.studies.toy_study.report:comparison_scores"),\n'
        '        Deferred("metamorph.studies.toy_study.report:planned_cells"),\n'
        "    ),\n",
    ):
        assert line in study
        study = study.replace(line, "")
    files["study.py"] = study
    report = files["report.py"]
    assert "def card_rows(generations, extra=None):\n    return generations\n" in report
    columns = ["model_id", "study", "metric", "slice", "unit", "value", "ci_low", "ci_high", "n", "higher_is_better"]
    files["report.py"] = report.replace(
        "def card_rows(generations, extra=None):\n    return generations\n",
        f"def card_rows(generations, extra=None):\n    return pd.DataFrame(columns={columns!r})\n",
    )
    for name, text in files.items():
        (package / name).write_text(text, encoding="utf-8")
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "toy_study.py").write_text(TOY_ASSETS)
    (tmp_path / "check.py").write_text(NO_TABLES_CHECK)
    reg = tmp_path / "models.yaml"
    # the toy study's generations call no provider: the entry is never reached
    reg.write_text(
        "models:\n  - id: toy\n    provider: openai_compatible\n    model: toy-model\n"
        "    base_url: http://127.0.0.1:9/v1\n    api_key_env: STUB_KEY\n    status: approved\n"
    )
    repo = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": str(repo),
        "METAMORPH_HOME": str(tmp_path / "home"),
        "DAGSTER_HOME": str(tmp_path / "dh"),
        "METAMORPH_MODELS": str(reg),
        "STUB_KEY": "k",
    }
    out = subprocess.run(
        [sys.executable, str(tmp_path / "check.py"), str(tmp_path)],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.splitlines()[-1]) == {
        "code": 0,
        "tables": [],
        "jobs": {"model_upgrades_job": 1, "toy_study_inputs_job": 1, "toy_study_model_job": 1},
        "toy_jobs": ["toy_study_inputs_job", "toy_study_model_job"],
        "requested": [],
    }, out.stderr[-3000:]
