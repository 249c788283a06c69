"""``make ui`` (scripts/ui.sh) as a real process: the UI serves GraphQL, its launchpad rejects a
bad inputs config with the one-line message and creates no run, and SIGTERM or SIGINT to the
script's PID stops it and every process it started (webserver, daemon, code server, gRPC
server) — no orphans."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from dagster_graphql.client.query import LAUNCH_PIPELINE_EXECUTION_MUTATION

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def _signals_as_from_a_terminal() -> None:
    """In the child before exec: SIGINT and SIGTERM unblocked and at their default action (a
    blocked mask and an ignored SIGINT are inherited through exec; bash cannot trap a signal
    that was ignored when it started)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _graphql_smoke():
    """scripts/graphql_smoke.py as a module (it is a script, not a package member)."""
    spec = importlib.util.spec_from_file_location("graphql_smoke", REPO / "scripts" / "graphql_smoke.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: every live process whose parent chain reaches a pid (the smoke script's own helper)
descendants = _graphql_smoke().descendants


def graphql(port: int, query: str, variables: dict | None = None) -> dict | None:
    """The ``data`` of a GraphQL answer of the UI on ``port``; None while it does not answer."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query, "variables": variables or {}}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=300) as resp:
            return json.loads(resp.read())["data"]
    except urllib.error.HTTPError as exc:  # an answer that is an error (e.g. PythonError) comes with status 500
        return json.loads(exc.read())["data"]
    except OSError:
        return None


def launch_rejects_limit_zero(port: int) -> None:
    """What the launchpad's Launch button sends, with ``limit: 0``: the answer is an error whose
    message is the one line of pipelines.inputs with no stack frames, and no run exists afterwards."""
    selector = {
        "repositoryLocationName": "metamorph",
        "repositoryName": "__repository__",
        "jobName": "order_probe_inputs_job",
    }
    answer = graphql(
        port,
        LAUNCH_PIPELINE_EXECUTION_MUTATION,
        {
            "executionParams": {
                "selector": selector,
                "mode": "default",
                "runConfigData": {"ops": {"order_probe__order_items": {"config": {"limit": 0}}}},
            }
        },
    )
    # everything the launch dialog renders (ui-core PythonErrorInfo: message, stack, causes)
    assert answer["launchPipelineExecution"] == {
        "__typename": "PythonError",
        "message": "order_probe__order_items: limit: must be a whole number >= 1, got '0'",
        "className": "InputsRejected",
        "stack": [],
        "cause": None,
    }
    assert graphql(port, "{ runsOrError { ... on Runs { results { runId } } } }") == {"runsOrError": {"results": []}}


def _as_a_background_job_of_a_script() -> None:
    """In the child before exec: what ``make ui &`` in a non-interactive shell gives — SIGINT
    ignored (bash cannot trap it; scripts/ui.sh runs itself again with the default action)."""
    _signals_as_from_a_terminal()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize(
    "sig, start",
    [
        (signal.SIGTERM, _signals_as_from_a_terminal),
        (signal.SIGINT, _signals_as_from_a_terminal),
        (signal.SIGINT, _as_a_background_job_of_a_script),
    ],
    ids=["SIGTERM", "SIGINT", "SIGINT-ignored-on-entry"],
)
def test_ui_serves_and_a_signal_to_its_pid_stops_everything_it_started(sig, start, tmp_path):
    venv = Path(os.environ.get("METAMORPH_VENV") or Path(sys.executable).parent.parent)
    port = free_port()
    env = {
        **os.environ,
        "METAMORPH_VENV": str(venv),
        "PORT": str(port),
        "METAMORPH_HOME": str(tmp_path / "home"),
        "DAGSTER_HOME": str(tmp_path / "dagster_home"),
        "UI_STOP_TIMEOUT": "60",
    }
    out, err = open(tmp_path / "ui.out", "w"), open(tmp_path / "ui.err", "w")
    # a new session with the signals a terminal gives (not what this test process inherited: a
    # background job ignores SIGINT, and a library thread may have blocked signals): the signal
    # reaches the script alone, as `kill PID` does
    ui = subprocess.Popen(
        ["bash", "scripts/ui.sh"], cwd=REPO, env=env, stdout=out, stderr=err, start_new_session=True, preexec_fn=start
    )
    try:
        deadline = time.monotonic() + 600  # ~10 s on an idle machine, minutes on a loaded one
        while (data := graphql(port, "{ version }")) is None:
            assert ui.poll() is None, (tmp_path / "ui.err").read_text()[-2000:]
            assert time.monotonic() < deadline, "the UI did not answer within 600 s"
            time.sleep(2)
        assert data == {"version": "1.13.27"}
        if sig == signal.SIGTERM:
            launch_rejects_limit_zero(port)
        started = descendants(ui.pid)
        assert len(started) >= 5  # dg/dagster dev, webserver, daemon, code server, gRPC server
        t0 = time.monotonic()
        ui.send_signal(sig)
        assert ui.wait(timeout=120) == 0
        assert time.monotonic() - t0 < 90  # the script kills what is left after UI_STOP_TIMEOUT = 60 s
        assert [pid for pid in started if alive(pid)] == []
    finally:
        if ui.poll() is None:  # only when an assertion above failed: what this test started
            for pid in descendants(ui.pid) | {ui.pid}:
                os.kill(pid, signal.SIGKILL)
        out.close()
        err.close()
    stdout, stderr = (tmp_path / "ui.out").read_text(), (tmp_path / "ui.err").read_text()  # Dagster logs to stdout
    assert "Dagster services shut down." in stdout and "still running after" not in stderr
    if (venv / "bin" / "dg").exists():
        assert "/bin/dg dev" in stdout
        assert "Warning" not in stdout + stderr, stderr
    # (without dg, scripts/ui.sh falls back to `dagster dev`, which warns that dg dev supersedes it)
