"""docs/testing-your-workflow.md, run verbatim: its ```bash blocks in one ``bash -e`` (the first failing
command fails the test), in a fresh folder whose ``.venv`` is the virtualenv running the tests, with ``PATH``
as the test process has it less the virtualenv (the page activates it) and no variable set but the one the
page tells the reader they may set (the service's port, a free one here). The example service answers by
its rule (no model), so the page runs in about a minute."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.core.test_secrets import leaks
from tests.core.test_workflows import free_port

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "testing-your-workflow.md"


def test_every_command_of_the_workflow_page_runs_verbatim_and_the_service_gets_the_planned_calls():
    blocks = re.findall(r"```bash\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert len(blocks) == 1
    work = Path(tempfile.mkdtemp(prefix="metamorph-workflow-page-"))
    (work / ".venv").symlink_to(Path(sys.prefix))
    venv_bin = str(Path(sys.prefix) / "bin")
    env = {
        "PATH": os.pathsep.join(p for p in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep) if p != venv_bin),
        "HOME": os.environ.get("HOME", str(work)),
        "LANG": "C.UTF-8",
        "NO_PROXY": "127.0.0.1,localhost",
        "DOC_SERVICE_PORT": str(free_port()),
    }
    out = subprocess.run(
        ["bash", "-e", "-c", blocks[0]], cwd=work, env=env, capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-6000:]
    lines = out.stdout.splitlines()
    [plan] = [line for line in lines if line.startswith("  doc-service workflow_generations:")]
    assert plan.startswith("  doc-service workflow_generations: 24 requests, 0 cache hits, 24 calls, ")
    assert plan.endswith("est. cost $0.024")
    assert "requests the service received: 24" in lines
    received = [json.loads(x) for x in (work / "workflow-demo" / "requests.jsonl").read_text().splitlines()]
    assert len({r["seed"] for r in received}) == 24
    # the trace: the upload's name in the request, the reply the service gave
    [req] = [line for line in lines if line.startswith('{"base_url":"http://127.0.0.1:')]
    request = json.loads(req)
    assert request["document"]["filename"].endswith(".csv") and request["document"]["media_type"] == "text/csv"
    assert request["workflow_version"] == "1" and request["ingestion"] == "upload"
    reply = lines[lines.index("response_text:") + 1]
    assert json.loads(reply)["decision"] in ("refer", "do not refer")
    # the text the service extracted, read by extracted_pointer: the uploaded CSV's own text, whole
    [header] = [line for line in lines if line.startswith("== 1. ")]
    instance = header.split()[2]
    import duckdb

    con = duckdb.connect(str(work / "workflow-demo" / "metamorph.duckdb"), read_only=True)
    [(document,)] = con.execute(
        "SELECT document_text FROM format_robustness.rendered_documents WHERE instance_id = ? AND format = 'csv'",
        [instance],
    ).fetchall()
    con.close()
    extracted = lines[lines.index("extracted_text:") + 1 : lines.index("response_text:")]
    assert extracted == [*document.splitlines(), ""] and len(extracted) == 3  # header row, record row, its newline
    assert leaks(work / "workflow-demo", ("demo-token",)) == []  # the header's value is stored nowhere
    shutil.rmtree(work, ignore_errors=True)
