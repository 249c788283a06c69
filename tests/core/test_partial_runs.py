"""A run that fails midway: the tables it wrote before failing are marked partial where the UI
shows them (asset observations, read back through the instance API), the tables after the failed
step keep the previous successful run's rows exactly, and a later successful run clears the mark.

The model boundary is the local HTTP stub; the failure is a bad routing config (``selection``
is checked by metamorph.studies.format_robustness.mitigations.routing_choice when the step runs,
so the run starts and fails at the step routing_choice_per_model)."""

from __future__ import annotations

import json

import dagster as dg
import duckdb
import pandas as pd

from pipelines.definitions import build_definitions
from pipelines.partial import (
    MARKED_TAG,
    PartialTable,
    mark_partial_run,
    partial_assets,
    partial_run_sensor,
    warehouse_partial,
)
from metamorph.study import studies
from pipelines.instance import run_job
from pipelines.run import print_headline
from tests.core.stub_http import Reply, chat_completion

CHAT = "/v1/chat/completions"
STUDY = "format_robustness"
GEN_OP = "format_robustness__workflow_generations"

# Assets of format_robustness_model_job written before/independently of routing_choice_per_model (they do
# not depend on it), in the run of the failing job: the per-model chain for partition "stub". The
# cross-model tables are not in the model job.
WRITTEN_PER_MODEL = ["workflow_generations", "extracted_decisions", "evidence_categories"]
# lineage_views is SQL views created by its step (no IO manager write, no ledger row): a cross-model
# asset, built by format_robustness_tables_job
VIEWS = "lineage_views"
# routing_choice_per_model failed; these depend on it and were not run
NOT_UPDATED = ["routed_generations", "routed_outcomes", "routing_choice_per_model"]  # sorted by asset key


def answering(decision: str):
    def reply(rec) -> Reply:
        return Reply(
            200,
            chat_completion(
                json.dumps({"decision": decision, "evidence": ["patient has fever"]}),
                model="stub-model",
                prompt_tokens=10,
                completion_tokens=5,
            ),
        )

    return reply


def read(db, table: str) -> pd.DataFrame:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(f"SELECT * FROM {STUDY}.{table} ORDER BY ALL").df()
    finally:
        con.close()


def model_config(seed: int, selection: str = "all") -> dict:
    return {
        "ops": {
            GEN_OP: {"config": {"k": 1, "seed": seed}},
            "format_robustness__routing_choice_per_model": {"config": {"selection": selection}},
        }
    }


def test_failed_run_marks_what_it_wrote_and_leaves_the_rest(stub, metamorph_home, tmp_path, monkeypatch, capsys):
    reg = tmp_path / "models.yaml"
    reg.write_text(
        f"models:\n  - id: stub\n    provider: openai_compatible\n    model: stub-model\n"
        f"    base_url: {stub.url}/v1\n    api_key_env: STUB_KEY\n    max_concurrency: 1\n    status: approved\n"
    )
    monkeypatch.setenv("METAMORPH_MODELS", str(reg))
    monkeypatch.setenv("STUB_KEY", "k")
    defs = build_definitions()
    db = metamorph_home / "metamorph.duckdb"
    model_job = defs.resolve_job_def(f"{STUDY}_model_job")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["stub"])
        inputs = run_job(
            defs.resolve_job_def(f"{STUDY}_inputs_job"),
            instance,
            {"ops": {"format_robustness__source_instances": {"config": {"limit": 2}}}},
        )
        assert inputs.success
        stub.script("POST", CHAT, answering("refer"))
        first = run_job(model_job, instance, model_config(seed=0), partition="stub")
        assert first.success
        assert run_job(defs.resolve_job_def(f"{STUDY}_tables_job"), instance, {}).success  # the cross-model tables
        before = {t: read(db, t) for t in [*WRITTEN_PER_MODEL, *NOT_UPDATED]}
        assert set(before["workflow_generations"]["response_text"].map(lambda t: json.loads(t)["decision"])) == {
            "refer"
        }
        assert mark_partial_run(instance, first.run_id) == []  # a successful run is never marked
        assert partial_assets(instance, list(defs.resolve_asset_graph().get_all_asset_keys())) == []

        # run 2: new seed -> new cache keys -> new answers; then routing_choice_per_model fails on its config
        stub.script("POST", CHAT, answering("do not refer"))
        second = run_job(model_job, instance, model_config(seed=1, selection="bogus"), partition="stub")
        assert not second.success
        assert [e.step_key for e in second.get_step_failure_events()] == ["format_robustness__routing_choice_per_model"]
        written = {(e.asset_key.path[-1], e.partition) for e in second.get_asset_materialization_events()}
        marked = {(t.asset.split("/")[-1], t.partition) for t in mark_partial_run(instance, second.run_id)}
        assert marked == set()  # run_job marked them already: the run carries the tag
        assert instance.get_run_by_id(second.run_id).tags[MARKED_TAG] == str(len(written))
        assert {(a, "stub") for a in WRITTEN_PER_MODEL} <= written
        assert not {a for a, _ in written} & set(NOT_UPDATED)

        # the UI's place: every table the failed run wrote has an observation 'partial' naming the run
        for asset, partition in sorted(written, key=str):
            flt = dg.AssetRecordsFilter(
                asset_key=dg.AssetKey([STUDY, asset]), asset_partitions=[partition] if partition else None
            )
            obs = instance.fetch_observations(flt, limit=1).records[0].asset_observation
            text = (
                f"run {second.run_id} (job format_robustness_model_job) failed at step "
                f"format_robustness__routing_choice_per_model. This table{' (partition stub)' if partition else ''} was "
                f"written by that run before it failed; {len(NOT_UPDATED)} other asset(s) of the run were not updated and still "
                f"hold an earlier run's rows: "
                + ", ".join(f"{STUDY}/{a}" for a in NOT_UPDATED)
                + ". Re-run the job to make them consistent."
            )
            assert obs.metadata["partial"].value == text
            assert obs.metadata["failed_run"].value == second.run_id
            assert obs.metadata["failed_step"].value == "format_robustness__routing_choice_per_model"
            assert obs.metadata["not_updated"].value == [f"{STUDY}/{a}" for a in NOT_UPDATED]
        keys = list(defs.resolve_asset_graph().get_all_asset_keys())
        assert sorted((t.asset.split("/")[-1], t.partition) for t in partial_assets(instance, keys)) == sorted(
            written, key=lambda w: (w[0], w[1] or "")
        )
        assert {t.run_id for t in partial_assets(instance, keys)} == {second.run_id}

        # the warehouse: the failed run's tables hold its rows, the ones after the failure run 1's, exactly
        assert set(read(db, "workflow_generations")["response_text"].map(lambda t: json.loads(t)["decision"])) == {
            "do not refer"
        }
        for t in NOT_UPDATED:
            pd.testing.assert_frame_equal(read(db, t), before[t])

        # the warehouse ledger carries the same mark for SQL readers; the tables after the failure
        # are still those of run 1, unmarked
        note = (
            f"run {second.run_id} failed at step format_robustness__routing_choice_per_model; the other tables of that "
            "run were not updated"
        )
        con = duckdb.connect(str(db), read_only=True)
        try:
            ledger = {
                (t.split(".")[1], p or None): (r, n)
                for t, p, r, n in con.execute(
                    "SELECT table_name, partition, run_id, partial FROM metamorph_meta.table_writes"
                ).fetchall()
            }
            assert warehouse_partial(con, STUDY) == sorted(
                (f"{STUDY}.{a}", p or "", second.run_id, note) for a, p in written if a != VIEWS
            )
            assert warehouse_partial(con, "order_probe") == []
        finally:
            con.close()
        tables = list(written)
        assert (VIEWS, None) not in written  # a cross-model asset: not in the model job
        assert {w: ledger[w] for w in tables} == dict.fromkeys(tables, (second.run_id, note))
        assert {a: ledger[(a, "stub")] for a in NOT_UPDATED} == dict.fromkeys(NOT_UPDATED, (first.run_id, None))
        study = studies()[STUDY]
        print_headline(study, str(db), study.values())
        out = capsys.readouterr().out.splitlines()
        at = out.index(
            f"note: {len(tables)} table(s) of {STUDY} were last written by a run that failed (partial; "
            "SELECT * FROM metamorph_meta.table_writes WHERE partial IS NOT NULL):"
        )
        assert out[at + 1 :] == [
            f"  {STUDY}.{a}{f' [{p}]' if p else ''}: {note}"
            for a, p in sorted(tables, key=lambda w: (w[0], w[1] or ""))
        ]

        # the sensor path (runs launched from the UI): a failed run not yet marked is marked once
        third = model_job.execute_in_process(
            instance=instance,
            partition_key="stub",
            raise_on_error=False,
            run_config=model_config(seed=1, selection="bogus"),
        )
        assert not third.success and MARKED_TAG not in instance.get_run_by_id(third.run_id).tags
        failure = [e for e in third.all_events if e.event_type_value == "PIPELINE_FAILURE"][0]
        ctx = dg.build_run_status_sensor_context(
            sensor_name="partial_run_sensor",
            dagster_event=failure,
            dagster_instance=instance,
            dagster_run=instance.get_run_by_id(third.run_id),
        )
        partial_run_sensor(ctx.for_run_failure())
        n_third = len({(e.asset_key, e.partition) for e in third.get_asset_materialization_events()})
        assert instance.get_run_by_id(third.run_id).tags[MARKED_TAG] == str(n_third)
        assert {t.run_id for t in partial_assets(instance, keys)} == {third.run_id}

        # a successful run rewrites every table of the job: nothing is partial any more
        fixed = run_job(model_job, instance, model_config(seed=1), partition="stub")
        assert fixed.success
        tables_run = run_job(defs.resolve_job_def(f"{STUDY}_tables_job"), instance, {})
        assert tables_run.success
        assert partial_assets(instance, keys) == []
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert warehouse_partial(con) == []
        # the model job's tables by the fixed run, the cross-model ones by the tables run after it
        assert sorted(
            con.execute(
                "SELECT DISTINCT run_id FROM metamorph_meta.table_writes WHERE table_name LIKE "
                "'format_robustness.%' AND table_name NOT IN ('format_robustness.source_instances', "
                "'format_robustness.rendered_documents')"
            ).fetchall()
        ) == sorted([(fixed.run_id,), (tables_run.run_id,)])
    finally:
        con.close()
    assert PartialTable  # exported type of partial_assets


def test_killed_run_is_marked_partial_by_the_next_pipelines_run(clean_proxy_env, tmp_path, monkeypatch):
    """A ``pipelines.run`` killed (SIGKILL) after its model job wrote workflow_generations: the
    reclaim done by the next invocation fails the run, frees its pool slot and marks that table."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from dagster._core.instance.ref import InstanceRef

    from pipelines.instance import reclaim_stale_runs
    from tests.core.stub_http import StubServer

    repo = Path(__file__).resolve().parents[2]
    stub = StubServer(latency_s=1.0)  # 12 + 9 calls one at a time: the model job runs for > 20 s
    stub.script("POST", CHAT, answering("refer"))
    reg = tmp_path / "models.yaml"
    reg.write_text(
        f"models:\n  - id: stub\n    provider: openai_compatible\n    model: stub-model\n"
        f"    base_url: {stub.url}/v1\n    api_key_env: STUB_KEY\n    max_concurrency: 1\n"
    )
    home, dh = tmp_path / "home", tmp_path / "dh"
    monkeypatch.setenv("METAMORPH_HOME", str(home))  # the warehouse the reclaim flags, as in pipelines.run
    env = {
        **os.environ,
        "METAMORPH_HOME": str(home),
        "DAGSTER_HOME": str(dh),
        "METAMORPH_MODELS": str(reg),
        "STUB_KEY": "k",
        "PYTHONPATH": str(repo),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipelines.run", STUDY, "--models", "stub", "--limit", "3", "--k", "1"],
        cwd=repo,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    gen = dg.AssetKey([STUDY, "workflow_generations"])
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:
            # open the instance only once pipelines.run has created it (its log file comes after):
            # two processes creating a fresh instance's databases at once corrupt them
            if dh.joinpath("dagster.yaml").exists() and any((home / "logs").glob("*.log")):
                with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(dh))) as instance:
                    if instance.get_latest_materialization_event(gen) is not None:
                        break
            time.sleep(0.5)
        assert proc.poll() is None, "the run ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        stub.close()
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(dh))) as instance:
        model_run = instance.get_latest_materialization_event(gen).run_id
        assert instance.get_run_by_id(model_run).status == dg.DagsterRunStatus.STARTED
        assert reclaim_stale_runs(instance) == [model_run]
        assert instance.get_run_by_id(model_run).status == dg.DagsterRunStatus.FAILURE
        assert instance.event_log_storage.get_concurrency_info("duckdb").claimed_slots == []
        obs = (
            instance.fetch_observations(dg.AssetRecordsFilter(asset_key=gen, asset_partitions=["stub"]), limit=1)
            .records[0]
            .asset_observation
        )
        assert obs.metadata["partial"].value.startswith(
            f"run {model_run} (job format_robustness_model_job) failed outside a step (its process ended). "
            "This table (partition stub) was written by that run before it failed;"
        )
        assert obs.metadata["failed_step"].value == ""
        assert "format_robustness/routed_generations" in obs.metadata["not_updated"].value
        written = {
            (e.asset_materialization.asset_key.path[-1], e.asset_materialization.partition or "")
            for e in (
                r.event_log_entry
                for r in instance.get_records_for_run(
                    model_run, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
                ).records
            )
        }
        assert instance.get_run_by_id(model_run).tags[MARKED_TAG] == str(len(written))
    con = duckdb.connect(str(home / "metamorph.duckdb"), read_only=True)
    try:
        marks = warehouse_partial(con, STUDY)
        # what the run wrote, by the warehouse's own ledger: a step killed after its write committed
        # but before its materialization event was stored is in the ledger only
        ledger = {
            (t.split(".")[1], p)
            for t, p in con.execute(
                "SELECT table_name, partition FROM metamorph_meta.table_writes WHERE run_id = ?", [model_run]
            ).fetchall()
        }
    finally:
        con.close()
    assert (
        "format_robustness.workflow_generations",
        "stub",
        model_run,
        f"run {model_run} failed outside a step (its process ended); the other tables of that run were not updated",
    ) in marks
    assert {w for w in written if w[0] != VIEWS} <= ledger
    assert {(t.split(".")[1], p) for t, p, *_ in marks} == ledger
