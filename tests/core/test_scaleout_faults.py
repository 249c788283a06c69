"""The scale-out path under service faults (docs/scaling-out.md "Faults"): two real dagster-celery workers
run one model partition of a small OrderProbe study against the local HTTP stub, with Dagster's storage and
the generation cache on PostgreSQL, while PostgreSQL is restarted or Redis is stopped for a few seconds.

The servers are this module's own (scripts/services.sh on free ports, data in a fresh directory), never
the ones the other ``services`` tests share: the faults stop them.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import psycopg2
import pytest

from tests.conftest import _unreachable
from tests.core.test_providers_http import chat_reply
from tests.core.test_scaleout import SOURCE, celery_setup, execute_model_job, pg_rows, run_id_of

REPO = Path(__file__).resolve().parents[2]
SERVICES = REPO / "scripts" / "services.sh"
STEP = "order_probe__order_generations"

pytestmark = pytest.mark.services


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class OwnServices:
    """A PostgreSQL and a Redis server started by scripts/services.sh for this module alone."""

    env: dict

    @property
    def pg_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.env['METAMORPH_PG_PORT']}/postgres"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.env['METAMORPH_REDIS_PORT']}/0"

    def run(self, *args: str) -> str:
        out = subprocess.run(
            ["bash", str(SERVICES), *args], env=self.env, capture_output=True, text=True, timeout=300, check=False
        )
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout

    def database(self, name: str) -> str:
        """A fresh database ``name`` on the PostgreSQL server: its URL."""
        admin = psycopg2.connect(self.pg_url)
        admin.autocommit = True
        admin.cursor().execute(f"CREATE DATABASE {name}")
        admin.close()
        return self.pg_url.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture(scope="module")
def own_services():
    folder = tempfile.mkdtemp(prefix="metamorph-faults-", dir="/tmp")
    env = {
        **os.environ,
        "METAMORPH_SERVICES_DIR": folder,
        "METAMORPH_PG_PORT": str(free_port()),
        "METAMORPH_REDIS_PORT": str(free_port()),
    }
    services = OwnServices(env)
    out = subprocess.run(["bash", str(SERVICES), "start"], env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        subprocess.run(["bash", str(SERVICES), "stop"], env=env, capture_output=True, timeout=120)
        _unreachable("PostgreSQL and Redis of their own", folder, RuntimeError(out.stderr.strip()))
    yield services
    subprocess.run(["bash", str(SERVICES), "stop"], env=env, capture_output=True, timeout=120)
    shutil.rmtree(folder, ignore_errors=True)


def cache_rows(url: str) -> int:
    """Committed rows of the generation cache at ``url`` (0 before its table exists)."""
    try:
        con = psycopg2.connect(url, connect_timeout=2)
    except psycopg2.OperationalError:
        return -1
    try:
        with con, con.cursor() as cur:
            cur.execute("SELECT to_regclass('generations') IS NOT NULL")
            if not cur.fetchone()[0]:
                return 0
            cur.execute("SELECT count(*) FROM generations WHERE error IS NULL")
            return cur.fetchone()[0]
    except psycopg2.OperationalError:
        return -1
    finally:
        con.close()


def req(i: int):
    from metamorph.providers.base import GenerationRequest

    return GenerationRequest("openai", "m", ({"role": "user", "content": f"q{i}"},))


def test_the_postgres_cache_waits_out_a_restart_keeping_its_rows_and_claims_then_gives_up_with_one_line(
    own_services, caplog
):
    """The cache alone: with the server stopped, queued rows stay queued and a claim waits; the server
    back 2 s later, the claim and the commit go through on a new connection (the outage's start and end
    logged once each). With
    the server down longer than ``lock_timeout_s``, the flush raises a one-line OperationalError and
    keeps the rows, committed once the server is back."""
    import threading

    from metamorph.cache import open_cache
    from metamorph.providers.base import GenerationResult

    url = own_services.database(f"cache_unit_{os.getpid()}_{int(time.time() * 1000) % 10**8}")
    cache = open_cache(url, lock_timeout_s=30)
    cache.put(req(0), GenerationResult(text="before"))
    assert cache.claim([req(1).cache_key()]).claimed == [req(1).cache_key()]
    caplog.set_level(logging.INFO, logger="metamorph.cache_pg")
    own_services.run("stop", "postgresql")
    try:
        cache.put(req(1), GenerationResult(text="during"))
        threading.Timer(2.0, own_services.run, ("start", "postgresql")).start()
        t0 = time.monotonic()
        assert cache.claim([req(2).cache_key()]).claimed == [req(2).cache_key()]
        assert 2.0 <= time.monotonic() - t0 < 15
        cache.flush()
    finally:
        own_services.run("start", "postgresql")
    assert sorted(pg_rows(url, "SELECT response_text FROM generations")) == [("before",), ("during",)]
    assert pg_rows(url, "SELECT key FROM claims WHERE owner = %s", [cache.owner]) == [(req(2).cache_key(),)]
    lines = [r.getMessage() for r in caplog.records if r.name == "metamorph.cache_pg"]
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"generation cache {url}: PostgreSQL connection lost (")
    assert lines[0].endswith("reconnecting every 0.5 s for up to 30 s, queued completions are kept")
    assert re.fullmatch(
        rf"generation cache {re.escape(url)}: reconnected to PostgreSQL after \d+\.\d s \(lost: .+\)", lines[1]
    ), lines[1]
    cache.release()
    assert pg_rows(url, "SELECT count(*) FROM claims") == [(0,)]

    short = open_cache(url, lock_timeout_s=2)
    own_services.run("stop", "postgresql")
    try:
        short.put(req(3), GenerationResult(text="kept"))
        with pytest.raises(psycopg2.OperationalError) as info:
            short.flush()
    finally:
        own_services.run("start", "postgresql")
    message = str(info.value)
    assert "\n" not in message and re.fullmatch(
        rf"generation cache {re.escape(url)}: PostgreSQL unreachable for 2 s \(lock_timeout_s 2 s\): "
        r"connection to server at \"127\.0\.0\.1\", port \d+ failed: Connection refused",
        message,
    ), message
    short.flush()
    assert pg_rows(url, "SELECT response_text FROM generations WHERE key = %s", [req(3).cache_key()]) == [("kept",)]
    short.release()


@dataclass
class Study:
    """One model partition (``gpt-a``, 24 completions) of the OrderProbe study, ready to run on two
    celery workers: its instance, environment and workers."""

    tmp_path: Path
    home: Path
    env: dict
    workers: dict[str, subprocess.Popen]
    cache_url: str
    dagster_url: str

    def execute(self) -> subprocess.Popen:
        """``dagster job execute`` of the model partition's run (a process of its own; output piped)."""
        return execute_model_job(self.env)

    def logs(self) -> str:
        return "\n".join((self.tmp_path / "logs" / f"{n}.log").read_text()[-3000:] for n in self.workers)

    def stop_workers(self) -> None:
        for w in self.workers.values():
            if w.poll() is None:
                os.killpg(w.pid, signal.SIGTERM)
        for w in self.workers.values():
            try:
                w.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(w.pid, signal.SIGKILL)
                w.wait()


def prepare_study(stub, services: OwnServices, tmp_path: Path, monkeypatch, tag: str) -> Study:
    """The stub answering every chat completion after 1 s, a registry with model ``gpt-a`` on it
    (2 at a time: about 12 s of generation), fresh databases for Dagster and the cache, two started
    workers with the shipped config/celery-worker.yaml, and the inputs job run in this process."""
    from metamorph.studies.order_probe.sources import load_source
    from pipelines.definitions import build_definitions

    [item] = load_source(SOURCE)
    stub.latency_s = 1.0
    stub.script("POST", "/v1/chat/completions", chat_reply(f"成语：「{item.canonical}」\n解释：{item.meanings[0]}"))
    registry = tmp_path / "models.yaml"
    registry.write_text(
        "models:\n  - {id: gpt-a, provider: openai, model: gpt-test-a, "
        f"base_url: '{stub.url}/v1', max_concurrency: 2}}\n"
    )
    suffix = f"{tag}_{os.getpid()}_{int(time.time() * 1000) % 10**8}"
    dagster_url = services.database(f"dagster_{suffix}").replace("postgresql://", "postgresql+psycopg2://")
    cache_url = services.database(f"cache_{suffix}")
    home, env, workers = celery_setup(
        tmp_path, registry, services.redis_url, dagster_url, cache_url, REPO / "config" / "celery-worker.yaml"
    )
    for var in ("METAMORPH_DAGSTER_PG_URL", "METAMORPH_HOME", "METAMORPH_MODELS", "METAMORPH_CACHE_URL"):
        monkeypatch.setenv(var, env[var])
    monkeypatch.delenv("METAMORPH_CELERY_BROKER", raising=False)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions("model", ["gpt-a"])
        res = (
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
        )
        assert res.success
    return Study(tmp_path, home, env, workers, cache_url, dagster_url)


def wait_until(cond, timeout: float, what: str, run: subprocess.Popen | None = None, poll: float = 0.1) -> float:
    """Poll ``cond()`` until true; the time it became true (``time.time()``)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if run is not None and run.poll() is not None:
            pytest.fail(f"the run ended while waiting for {what}:\n" + run.communicate()[0][-3000:])
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(poll)
    return time.time()


def generation_step_started(home: Path) -> bool:
    with dg.DagsterInstance.from_config(str(home)) as instance:
        run_id = run_id_of(instance)
        return bool(run_id) and any(
            rec.step_key == STEP for rec in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_START)
        )


def test_postgres_restarted_while_the_generation_step_writes_the_run_completes_each_completion_requested_once(
    stub, own_services, tmp_path, monkeypatch
):
    """PostgreSQL (Dagster's run storage and the generation cache) stopped for 4 s while the generation
    step has committed some completions and has requests in flight, then started again. The cache waits
    the outage out (its queued completions kept, its claims and commits run again on a new connection),
    Dagster's storage retries its connections, and the run succeeds: every completion is requested exactly
    once — a request in flight at the stop is not repeated, since the stub answers it and the cache
    keeps its row queued until the server is back — and no claim or pool slot is left."""
    down_s = 4.0
    study = prepare_study(stub, own_services, tmp_path, monkeypatch, "pg")
    run = None
    try:
        run = study.execute()
        wait_until(lambda: generation_step_started(study.home), 300, "the generation step", run, poll=0.5)
        wait_until(lambda: cache_rows(study.cache_url) >= 4, 120, "4 committed completions", run)
        committed_before = cache_rows(study.cache_url)
        received_before = len(stub.requests)
        t_stop = time.time()
        own_services.run("stop", "postgresql")
        time.sleep(down_s)
        own_services.run("start", "postgresql")
        t_up = time.time()
        t_commit = wait_until(
            lambda: cache_rows(study.cache_url) > committed_before, 120, "a commit after the restart", run
        )
        out = run.communicate(timeout=600)[0]
        assert run.returncode == 0, out[-3000:] + study.logs()
    finally:
        if run is not None and run.poll() is None:
            run.kill()
            print("the run, still running at the end:\n", run.communicate()[0][-5000:])
        study.stop_workers()
    assert 4 <= committed_before < received_before < 24  # the fault came mid-step, requests in flight
    counts = stub.count_by(lambda r: r.json["messages"][-1]["content"])
    assert len(counts) == 24 and set(counts.values()) == {1}, counts
    check_the_end_state(study, "gpt-a")
    # the run's log (Dagster's event log, the cache's logger is a managed one) says what happened
    with dg.DagsterInstance.from_config(str(study.home)) as instance:
        msgs = [(r.timestamp, r.user_message) for r in instance.all_logs(run_id_of(instance))]
    # the warning at the outage's start is stored when Dagster's own retries (about 6 s) outlast the
    # outage; the line at its end, written once the server is back, always is, and repeats the cause
    [(t_back, back)] = [(t, m) for t, m in msgs if "reconnected to PostgreSQL after" in m]
    end = re.fullmatch(
        rf"generation cache {re.escape(redacted(study.cache_url))}: reconnected to PostgreSQL after (\d+\.\d) s "
        r"\(lost: (server closed the connection unexpectedly|terminating connection due to administrator command|"
        r"connection to server at .* failed: Connection refused)\)",
        back,
    )
    assert end, back
    t_lost = t_back - float(end.group(1))
    assert t_stop < t_lost < t_up < t_back
    print(
        f"\npostgres restart: down {t_up - t_stop:.1f} s; the cache noticed {t_lost - t_stop:.1f} s after the stop "
        f"and reconnected {t_back - t_up:.1f} s after the server answered again (first commit after "
        f"{t_commit - t_up:.1f} s); {received_before} requests received and {committed_before} committed at the "
        f"stop, each of the 24 completions requested once"
    )


def redacted(url: str) -> str:
    from metamorph.cache_pg import redact

    return redact(url)


def check_the_end_state(study: Study, model: str) -> None:
    """The run succeeded; the cache holds the 24 completions and no claim; the warehouse has the model's 24
    generations; no pool slot is held and no run is left in progress."""
    assert pg_rows(study.cache_url, "SELECT count(*) FROM generations WHERE error IS NULL") == [(24,)]
    assert pg_rows(study.cache_url, "SELECT count(*) FROM claims") == [(0,)]
    import duckdb

    con = duckdb.connect(str(study.tmp_path / "home" / "metamorph.duckdb"), read_only=True)
    try:
        assert con.execute("SELECT model_id, count(*) FROM order_probe.order_generations GROUP BY ALL").fetchall() == [
            (model, 24)
        ]
    finally:
        con.close()
    with dg.DagsterInstance.from_config(str(study.home)) as instance:
        runs = instance.get_runs(filters=dg.RunsFilter(job_name="order_probe_model_job"))
        assert [r.status for r in runs][:1] == [dg.DagsterRunStatus.SUCCESS]
        assert all(r.status in (dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE) for r in runs)
        assert instance.event_log_storage.get_concurrency_info("duckdb").claimed_slots == []


def test_redis_stopped_for_a_few_seconds_mid_generation_the_run_completes_each_completion_requested_once(
    stub, own_services, tmp_path, monkeypatch
):
    """Redis (broker and result backend, no persistence) stopped for 5 s while the generation step runs
    on a worker, then started again, empty. The step itself needs no Redis; the run's process polling its
    result and the worker storing it retry their lost connections (config/celery-worker.yaml), so the run
    succeeds and every completion is requested exactly once."""
    down_s = 5.0
    study = prepare_study(stub, own_services, tmp_path, monkeypatch, "redis")
    run = None
    try:
        run = study.execute()
        wait_until(lambda: generation_step_started(study.home), 300, "the generation step", run, poll=0.5)
        wait_until(lambda: cache_rows(study.cache_url) >= 4, 120, "4 committed completions", run)
        committed_before = cache_rows(study.cache_url)
        received_before = len(stub.requests)
        t_stop = time.time()
        own_services.run("stop", "redis")
        time.sleep(down_s)
        own_services.run("start", "redis")
        t_up = time.time()
        out = run.communicate(timeout=600)[0]
        assert run.returncode == 0, out[-3000:] + study.logs()
    finally:
        if run is not None and run.poll() is None:
            run.kill()
            print("the run, still running at the end:\n", run.communicate()[0][-5000:])
        study.stop_workers()
    assert 4 <= committed_before < received_before < 24
    counts = stub.count_by(lambda r: r.json["messages"][-1]["content"])
    assert len(counts) == 24 and set(counts.values()) == {1}, counts
    check_the_end_state(study, "gpt-a")
    # the generation step's result, stored once Redis was back, was read and the run went on
    with dg.DagsterInstance.from_config(str(study.home)) as instance:
        recs = instance.all_logs(run_id_of(instance))
    [done] = [
        r.timestamp for r in recs if r.step_key == STEP and r.dagster_event_type == dg.DagsterEventType.STEP_SUCCESS
    ]
    after = min(
        r.timestamp for r in recs if r.timestamp > done and r.user_message.startswith("Submitting celery task for step")
    )
    print(
        f"\nredis stop: down {t_up - t_stop:.1f} s; the generation step ended {done - t_up:.1f} s after Redis "
        f"answered again and its next step was sent {after - done:.1f} s later; {received_before} requests "
        f"received and {committed_before} committed at the stop, each of the 24 completions requested once"
    )
