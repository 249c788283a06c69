"""scripts/graphql_smoke.py as CI runs it: the UI (``dg dev``) started on a free port with a
temporary DAGSTER_HOME serves exactly the asset groups, jobs, sensors and schedules that
pipelines.definitions defines, and stops with every process it started."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _terminal_signals() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.mark.ui
def test_graphql_serves_every_group_job_sensor_and_schedule(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "scripts/graphql_smoke.py"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        preexec_fn=_terminal_signals,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    lines = out.stdout.splitlines()
    # 4 studies + model_upgrades + model_registry; 4 inputs + 4 model + 4 tables jobs + model_upgrades_job +
    # Dagster's __ASSET_JOB;
    # the registry sensor, the partial-run sensor and the two automation sensors; one weekly schedule per study
    assert lines[:4] == [
        "graphql_smoke: asset_groups: 6 served, 6 defined — match",
        "graphql_smoke: jobs: 14 served, 14 defined — match",
        "graphql_smoke: sensors: 4 served, 4 defined — match",
        "graphql_smoke: schedules: 4 served, 4 defined — match",
    ]
    summary = json.loads(lines[4])
    assert {k: summary[k] for k in ("status", "asset_groups", "jobs", "sensors", "schedules", "stopped_cleanly")} == {
        "status": 0,
        "asset_groups": 6,
        "jobs": 14,
        "sensors": 4,
        "schedules": 4,
        "stopped_cleanly": True,
    }
    home = Path(summary["home"])  # the temporary homes: under TMPDIR, removed
    assert home.parent == tmp_path and not home.exists()
