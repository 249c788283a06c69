"""docs/scaling-out.md, run verbatim: its ```bash blocks, in order, in one bash with job control (as in the
reader's terminal), in a copy of the repository whose ``.venv`` is the virtualenv running the tests, with
the shipped registry (the local models), ``PATH`` as the test process has it (the page activates the
venv itself) and no variable set but those the page tells the reader to set (the ports and data folder
of the local services, chosen here so that the servers of the other tests are left alone).

Needs PostgreSQL and Redis installable or installed (scripts/services.sh): marked ``services``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import _unreachable
from tests.core.test_scaleout_faults import free_port

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "scaling-out.md"

pytestmark = pytest.mark.services


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
    proc = subprocess.Popen(
        ["bash", "-e", "-m", "-c", script],
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out = proc.communicate(timeout=1500)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        out = proc.communicate()[0]
        pytest.fail("the page did not finish in 25 minutes:\n" + out[-5000:])
    finally:
        for pid in session_processes(proc.pid):  # what the page started and did not stop
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["bash", str(repo / "scripts" / "services.sh"), "stop"], env=env, capture_output=True)
    print(out[-4000:])
    assert proc.returncode == 0, out[-6000:]
    shutil.rmtree(work, ignore_errors=True)
