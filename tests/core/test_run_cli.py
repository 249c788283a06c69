"""``python -m pipelines.run`` on bad input: one line on stderr naming file and row, exit 2, nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_bad_jsonl_line_gives_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "question": "q"}\n{bad json\n', encoding="utf-8")
    env = {**os.environ, "METAMORPH_HOME": str(tmp_path / "home"), "DAGSTER_HOME": str(tmp_path / "dh")}
    out = subprocess.run([sys.executable, "-m", "pipelines.run", "format_robustness", "--source", f"medqa:{bad}",
                          "--no-models"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [f"error: {bad}, row 2: not valid JSON "
                                               "(Expecting property name enclosed in double quotes; column 2)"]
    assert not (tmp_path / "home" / "metamorph.duckdb").exists()  # validated before any run was launched


def test_reclaim_stale_runs_frees_the_pool_slot_of_a_killed_run_only():
    """A run left STARTED by a killed ``pipelines.run`` (its pid is gone) is failed and its
    ``duckdb`` slot freed; a run of a live process and a run from the UI (untagged) are kept."""
    import dagster as dg
    from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus

    from pipelines.run import HOST_TAG, LAUNCHER_TAG, PID_TAG, launch_tags, reclaim_stale_runs

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with dg.instance_for_test() as instance:
        instance.event_log_storage.set_concurrency_slots("duckdb", 1)
        killed = DagsterRun(job_name="j", run_id="killed", status=DagsterRunStatus.STARTED,
                            tags={**launch_tags(), PID_TAG: str(dead.pid)})
        live = DagsterRun(job_name="j", run_id="live", status=DagsterRunStatus.STARTED, tags=launch_tags())
        ui = DagsterRun(job_name="j", run_id="ui", status=DagsterRunStatus.STARTED, tags={})
        other_host = DagsterRun(job_name="j", run_id="elsewhere", status=DagsterRunStatus.STARTED,
                                tags={LAUNCHER_TAG: "pipelines.run", PID_TAG: str(dead.pid), HOST_TAG: "not-this-host"})
        for r in (killed, live, ui, other_host):
            instance.add_run(r)
        assert instance.event_log_storage.claim_concurrency_slot("duckdb", "killed", "step").is_claimed

        assert reclaim_stale_runs(instance) == ["killed"]
        assert instance.get_run_by_id("killed").status == DagsterRunStatus.FAILURE
        assert [instance.get_run_by_id(i).status for i in ("live", "ui", "elsewhere")] == [DagsterRunStatus.STARTED] * 3
        assert instance.event_log_storage.get_concurrency_info("duckdb").claimed_slots == []
        assert instance.event_log_storage.claim_concurrency_slot("duckdb", "next", "step").is_claimed
        assert reclaim_stale_runs(instance) == []
