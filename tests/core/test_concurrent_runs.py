"""Two runs of one study started at once against one warehouse, one generation cache and one
Dagster instance: both finish, every table has exactly the rows of one run (no duplicate keys),
and no completion is paid twice.

The runs are two real ``python -m pipelines.run`` processes (persistent DAGSTER_HOME, the
``duckdb`` pool with limit 1 from the dagster.yaml it writes) against the local HTTP stub with a
think time, so the first run's model step is still calling when the second arrives.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest

from tests.core.stub_http import Reply, StubServer, chat_completion

REPO = Path(__file__).resolve().parents[2]
CHAT = "/v1/chat/completions"
N_INSTANCES, N_FORMATS = 3, 4


def answer(rec) -> Reply:
    """A parseable JSON answer (decision A) for every request."""
    return Reply(
        200,
        chat_completion(
            json.dumps({"decision": "A", "evidence": ["patient has fever"]}),
            model="stub-model",
            prompt_tokens=10,
            completion_tokens=5,
        ),
    )


def registry(tmp_path: Path, url: str) -> Path:
    reg = tmp_path / "models.yaml"
    reg.write_text(
        f"models:\n  - id: stub\n    provider: openai_compatible\n    model: stub-model\n"
        f"    base_url: {url}/v1\n    api_key_env: STUB_KEY\n    max_concurrency: 2\n    status: approved\n"
    )
    return reg


def run_env(tmp_path: Path, stub: StubServer) -> dict:
    """The environment of a ``pipelines.run`` process on the stub: its own home, Dagster instance and registry."""
    return {
        **os.environ,
        "METAMORPH_HOME": str(tmp_path / "home"),
        "DAGSTER_HOME": str(tmp_path / "dh"),
        "METAMORPH_MODELS": str(registry(tmp_path, stub.url)),
        "STUB_KEY": "k",
        "PYTHONPATH": str(REPO),
        "NO_PROXY": "127.0.0.1,localhost",
    }


def run_cmd(k: int) -> list[str]:
    """The format study on :data:`N_INSTANCES` instances with ``k`` repeats, on the stub model."""
    return [
        sys.executable,
        "-m",
        "pipelines.run",
        "format_robustness",
        "--models",
        "stub",
        "--limit",
        str(N_INSTANCES),
        "--k",
        str(k),
    ]


def overlapping_runs(dagster_home: Path) -> dict:
    """How long the two model-job runs were in progress at the same time (s), and how many times a
    step logged that it waited for the ``duckdb`` pool, read from the shared instance."""
    import dagster as dg
    from dagster._core.instance.ref import InstanceRef

    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(dagster_home))) as instance:
        records = instance.get_run_records()
        model = [r for r in records if r.dagster_run.job_name == "format_robustness_model_job"]
        blocked = sum(
            "blocked by limit for pool duckdb" in (e.user_message or "")
            for r in records
            for e in instance.all_logs(r.dagster_run.run_id)
        )
        statuses = sorted((r.dagster_run.job_name, str(r.dagster_run.status)) for r in records)
    a, b = model
    return {
        "statuses": statuses,
        "blocked": blocked,
        "overlap_s": min(a.end_time, b.end_time) - max(a.start_time, b.start_time),
    }


def table(db: Path, name: str):
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(f"SELECT * FROM format_robustness.{name}").df()
    finally:
        con.close()


def test_two_runs_at_once_share_warehouse_cache_and_pool(clean_proxy_env, tmp_path):
    stub = StubServer(latency_s=0.4)
    stub.script("POST", CHAT, answer)
    try:
        env, cmd = run_env(tmp_path, stub), run_cmd(k=1)
        t0 = time.monotonic()
        procs = [
            subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        outs = [p.communicate(timeout=900) for p in procs]
        wall = time.monotonic() - t0
    finally:
        stub.close()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, f"rc={p.returncode}\nstdout:\n{out}\nstderr:\n{err}"
        assert "Done in" in out
    print(f"two concurrent runs: {wall:.1f} s wall, {len(stub.requests_to(CHAT))} stub requests")

    # The runs overlapped: both model jobs were in progress at once, and steps waited for the pool.
    runs = overlapping_runs(tmp_path / "dh")
    # each metamorph run: its inputs job, its model job, its tables job, then the report card's job
    jobs = [
        "format_robustness_inputs_job",
        "format_robustness_model_job",
        "format_robustness_tables_job",
        "model_upgrades_job",
    ]
    assert runs["statuses"] == [(j, "DagsterRunStatus.SUCCESS") for j in jobs for _ in range(2)]
    assert runs["blocked"] > 0 and runs["overlap_s"] > 0, runs

    # Every completion was paid once. One run makes 3 x 4 = 12 planned calls (k = 1), then routing
    # re-runs each instance's 3 other formats in the best format: 9 calls with new cache keys whose
    # bodies are the best-format body of the instance (the routed key also names the source format).
    # So 21 requests: 9 bodies once, 3 bodies 4 times, and 21 cache rows with distinct keys. A second
    # run paying again would show up as 42 requests / counts of 2 and 8.
    bodies = stub.count_by(lambda r: r.key, path=CHAT)
    assert sorted(bodies.values()) == [1] * 9 + [4] * 3
    con = duckdb.connect(str(tmp_path / "home" / "generation_cache.duckdb"), read_only=True)
    try:
        assert con.execute("SELECT count(*), count(DISTINCT key), count(error) FROM generations").fetchall() == [
            (21, 21, 0)
        ]
        assert con.execute("SELECT count(*) FROM claims").fetchall() == [(0,)]
    finally:
        con.close()

    db = tmp_path / "home" / "metamorph.duckdb"
    n_docs = N_INSTANCES * N_FORMATS
    expected = {
        "source_instances": (N_INSTANCES, ["instance_id"]),
        "rendered_documents": (n_docs, ["instance_id", "format"]),
        "workflow_generations": (n_docs, ["model_id", "workflow_id", "instance_id", "format", "repeat"]),
        "extracted_decisions": (n_docs, ["model_id", "workflow_id", "instance_id", "format", "repeat"]),
        "routed_generations": (n_docs, ["model_id", "workflow_id", "instance_id", "format", "repeat"]),
    }
    for name, (rows, key) in expected.items():
        df = table(db, name)
        assert len(df) == rows, name
        assert not df.duplicated(key).any(), name
    routed = table(db, "routed_generations")
    # the table holds the rows of the run that wrote it last: the pool ran the two routing steps one
    # after the other, so the later one found all 12 of its requests in the cache
    assert routed["cache_hit"].all()


def test_headline_connection_waits_for_another_process_writing(tmp_path):
    """The run that finishes first prints its headline while the other run may be writing the
    warehouse: the read-only connection waits for the writer instead of failing."""

    from pipelines.run import connect_read_only

    db = tmp_path / "w.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE t AS SELECT 42 AS x")
    con.close()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys, time\n"
            f"c = duckdb.connect({str(db)!r}); print('held', flush=True); time.sleep(3); c.close()",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(duckdb.IOException, match="Could not set lock on file"):
            duckdb.connect(str(db), read_only=True)  # what print_headline did before
        with pytest.raises(duckdb.IOException):
            connect_read_only(str(db), timeout_s=0.3)
        t0 = time.monotonic()
        ro = connect_read_only(str(db))
        waited = time.monotonic() - t0
        assert ro.execute("SELECT x FROM t").fetchall() == [(42,)]
        ro.close()
        assert waited > 0.5
    finally:
        holder.wait(timeout=60)


def test_add_partitions_adds_only_the_missing_keys():
    import dagster as dg

    from pipelines.instance import add_partitions

    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["b"])
        add_partitions(instance, "model", ["a", "b", "c"])
        add_partitions(instance, "model", ["a", "b", "c"])
        assert instance.get_dynamic_partitions("model") == ["b", "a", "c"]


def test_open_instance_waits_for_the_lock_of_another_opener(tmp_path, monkeypatch):
    """Two fresh openers of one DAGSTER_HOME are serialised by the lock file (the race that stamped
    runs.db twice): while another process holds it, open_instance waits, then opens."""
    import fcntl
    import threading

    from pipelines.instance import INSTANCE_LOCK, open_instance

    home = tmp_path / "dh"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time\n"
            f"f = open({str(home / INSTANCE_LOCK)!r}, 'w'); fcntl.flock(f, fcntl.LOCK_EX)\n"
            "print('held', flush=True); time.sleep(2)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    opened = {}
    t = threading.Thread(target=lambda: opened.setdefault("instance", open_instance()))
    t.start()
    t.join(1.0)
    assert "instance" not in opened and not (home / "history" / "runs.db").exists()  # still waiting
    holder.wait(timeout=60)
    t.join(60)
    instance = opened["instance"]
    try:
        assert (home / "history" / "runs.db").exists() and instance.get_runs() == []
    finally:
        instance.dispose()
    with open(home / INSTANCE_LOCK, "w") as fh:  # released after opening
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)


def _wait_for(pred, timeout_s: float, what: str):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        got = pred()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def _pool_state(dagster_home: Path) -> tuple[set[str], set[str], dict[str, str]]:
    """(run ids with a pending step in the duckdb pool, run ids holding a slot, status by run id)."""
    import dagster as dg
    from dagster._core.instance.ref import InstanceRef

    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(dagster_home))) as instance:
        info = instance.event_log_storage.get_concurrency_info("duckdb")
        statuses = {r.dagster_run.run_id: str(r.dagster_run.status).split(".")[-1] for r in instance.get_run_records()}
        return info.pending_run_ids, info.active_run_ids, statuses


def test_an_interrupt_stops_a_run_waiting_for_the_pool_at_once(clean_proxy_env, tmp_path):
    """Run B waits for the duckdb pool slot that run A's model step holds while it calls the model.
    Dagster captures SIGINT/SIGTERM between steps and would only raise it when B's step starts, i.e.
    after A's whole model step; B must instead stop within seconds: exit 130, the one-line
    interrupted message naming the run it waited for, its run canceled, nothing of it left in the
    pool; A finishes normally (both without routing, to keep the test short).

    Each of A's calls takes 4 s of think time until B has been stopped, none after: A holds the slot
    for as long as B needs to start and wait, then finishes its remaining calls at once."""
    b_stopped = threading.Event()

    def answer_after_think_time(rec) -> Reply:
        b_stopped.wait(4.0)
        return answer(rec)

    stub = StubServer()
    stub.script("POST", CHAT, answer_after_think_time)
    a = b = None
    try:
        env, cmd = run_env(tmp_path, stub), [*run_cmd(k=3), "--no-routing"]
        a = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # A's model step calls the stub: 36 requests at 4 s, 2 at a time, so it holds the slot >= 72 s
        # unless B has been stopped
        _wait_for(lambda: len(stub.requests_to(CHAT)) >= 1, 300, "run A's first model call")
        b = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def b_waits_for_a():  # B has a step pending while A holds the slot (A's model step)
            pending, holding, _ = _pool_state(tmp_path / "dh")
            return (pending, holding) if len(pending) == 1 and len(holding) == 1 and pending != holding else None

        pending, holding = _wait_for(b_waits_for_a, 180, "run B to wait in the pool for run A")
        b_run, a_run = next(iter(pending)), next(iter(holding))
        t_sig = time.monotonic()
        b.send_signal(signal.SIGTERM)  # what Dagster also does with SIGINT (one handler)
        b_out, b_err = b.communicate(timeout=60)
        stopped_after = time.monotonic() - t_sig
        a_running_when_b_stopped = a.poll() is None
        b_stopped.set()
        a_out, a_err = a.communicate(timeout=900)
    finally:
        b_stopped.set()
        for p in (a, b):  # a failed wait leaves no run behind
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        stub.close()
    assert b.returncode == 130, f"rc={b.returncode}\nstderr:\n{b_err}"
    assert b_err.strip().splitlines()[-1] == (
        "interrupted — the completions made so far are in the generation cache; rerun the same command "
        f"to resume (it was waiting for the duckdb pool slot held by run {a_run})"
    )
    assert stopped_after < 15, stopped_after
    assert a_running_when_b_stopped  # B did not wait for A's step to end
    assert a.returncode == 0 and "Done in" in a_out, a_err[-3000:]
    assert len(stub.requests_to(CHAT)) == 36  # A's calls only (3 instances × 4 formats × k = 3)
    pending, holding, statuses = _pool_state(tmp_path / "dh")
    assert statuses[b_run] == "CANCELED"
    assert not pending and not holding  # neither run left a step or a slot in the pool
