"""docs/scaling-out.md, run verbatim: its ```bash blocks, in order, in one ``bash -e`` (the first failing
command fails the test), in a copy of the repository whose ``.venv`` is the virtualenv running the tests, with
the shipped registry (the local models), ``PATH`` as the test process has it (the page activates the
venv itself) and no variable set but those the page tells the reader to set (the ports and data folder
of the local services, chosen here so that the servers of the other tests are left alone).

Needs PostgreSQL and Redis installable or installed (scripts/services.sh) and runs the local models: marked
``services`` and ``llm``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import _unreachable
from tests.core.test_scaleout_faults import free_port

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "scaling-out.md"

pytestmark = [pytest.mark.services, pytest.mark.llm]  # the page runs the shipped local models


def page_blocks() -> list[str]:
    """The page's ```bash blocks, in order."""
    return re.findall(r"```bash\n(.*?)```", PAGE.read_text(), flags=re.S)


def repository_copy(dest: Path) -> None:
    """The repository's tracked and untracked (not ignored) files copied to ``dest``, and ``dest/.venv`` a
    link to the virtualenv running the tests."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for rel in filter(None, (f.decode() for f in files)):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    (dest / ".venv").symlink_to(Path(sys.prefix))


def session_processes(sid: int) -> list[int]:
    out = subprocess.run(["ps", "-e", "-o", "pid=,sid="], capture_output=True, text=True).stdout
    return [int(p) for p, s in (line.split() for line in out.splitlines()) if int(s) == sid and int(p) != sid]


def command_of(pid: int) -> str:
    return subprocess.run(["ps", "-o", "args=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()


def test_every_command_of_the_scaling_out_page_runs_verbatim_and_both_model_runs_succeed():
    if not (shutil.which("initdb") or list(Path("/usr/lib/postgresql").glob("*/bin/initdb"))):
        _unreachable("PostgreSQL (initdb)", "PATH", RuntimeError("not installed"))
    blocks = page_blocks()
    assert len(blocks) == 3, "the page's blocks: run, look at the results, stop"
    work = Path(tempfile.mkdtemp(prefix="metamorph-page-", dir="/tmp"))
    os.chmod(work, 0o755)  # the PostgreSQL server runs as `postgres` (as root) and needs to reach its data
    repo = work / "repo"
    repo.mkdir()
    repository_copy(repo)
    venv_bin = str(Path(sys.prefix) / "bin")
    told = {  # what the page tells the reader to set for other ports and another data folder
        "METAMORPH_PG_PORT": str(free_port()),
        "METAMORPH_REDIS_PORT": str(free_port()),
        "METAMORPH_SERVICES_DIR": str(work / "services"),
    }
    env = {
        "PATH": os.pathsep.join(p for p in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep) if p != venv_bin),
        "HOME": os.environ.get("HOME", str(work)),
        "LANG": "C.UTF-8",
        **told,
    }
    script = "\n".join(blocks)
    log = work / "page.log"
    with open(log, "w") as sink:
        proc = subprocess.Popen(
            ["bash", "-e", "-c", script],
            cwd=repo,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=1500)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        finally:
            # what the page started and did not stop, 30 s after it ended (the daemon's code server exits
            # once its heartbeat stops, within 20 s)
            deadline = time.monotonic() + 30
            while session_processes(proc.pid) and time.monotonic() < deadline:
                time.sleep(1)
            leftover = [command_of(pid) for pid in session_processes(proc.pid)]
            for pid in session_processes(proc.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            subprocess.run(["bash", str(repo / "scripts" / "services.sh"), "stop"], env=env, capture_output=True)
    out = log.read_text()
    assert proc.returncode == 0, out[-6000:]
    assert leftover == [], leftover
    # what the page's second block printed: three successful runs, 24 completions per model in the cache, and
    # in the warehouse
    assert "order_probe_inputs_job|SUCCESS\norder_probe_model_job|SUCCESS\norder_probe_model_job|SUCCESS\n" in out
    assert "SmolLM2-135M-Instruct.Q4_1.gguf|24\ngemma-3-270m-q4_k_m.gguf|24\n" in out, out[-6000:]
    assert "[('gemma3-270m', 24), ('smollm2', 24)]\n" in out, out[-6000:]
    shutil.rmtree(work, ignore_errors=True)
