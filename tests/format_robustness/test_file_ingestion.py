"""Ingestion as the workflow really does it: an OpenAI entry that attaches the document as an
``input_file`` and an Anthropic entry that sends it as a ``document`` block, run on ``construct`` in
txt, pdf, docx and yaml against the real SDKs pointed at the local HTTP stub. What the SDKs sent is
read back from the stub: the uploaded file's bytes are the rendered PDF, the document block is its
base64; a format the path cannot take (yaml on openai_file, docx on anthropic_document) is never
sent, is a 'not sent' row in workflow_generations, and ``metamorph plan`` said so before any call."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb

from metamorph import cli
from metamorph.studies.format_robustness.renderers import RENDERERS
from metamorph.studies.format_robustness.sources import load_sources
from tests.core.stub_http import Recorded, Reply, StubServer
from tests.core.test_providers_http import anthropic_reply, responses_reply

REPO = Path(__file__).resolve().parents[2]
FORMATS = "txt,pdf,docx,yaml"
ANSWER = json.dumps({"decision": "A", "evidence": []})
DOCX = RENDERERS["docx"].media_type
MEDIA = {f: RENDERERS[f].media_type for f in FORMATS.split(",")}


def _registry(path: Path, url: str) -> Path:
    path.write_text(
        "models:\n"
        f"  - {{id: gpt-files, provider: openai, model: gpt-test, base_url: '{url}/v1', ingestion: [openai_file],\n"
        "     max_concurrency: 1}\n"
        f"  - {{id: claude-docs, provider: anthropic, model: claude-test, base_url: '{url}',\n"
        "     ingestion: [anthropic_document], max_concurrency: 1, params: {temperature: null, seed: null}}\n"
    )
    return path


def _uploaded(stub: StubServer):
    n = {"i": 0}

    def reply(rec: Recorded) -> Reply:
        n["i"] += 1
        part = rec.parts["file"]
        return Reply(
            200,
            {
                "id": f"file-{n['i']}",
                "object": "file",
                "bytes": len(part["data"]),
                "created_at": 1,
                "filename": part["filename"],
                "purpose": "user_data",
                "status": "processed",
            },
        )

    return reply


def test_plan_names_what_each_file_path_cannot_take_and_the_run_never_sends_it(tmp_path, clean_proxy_env, capsys):
    [x] = [x for _, x in load_sources(["construct"], limit=1)]
    stub = StubServer()
    try:
        stub.route("POST", "/v1/files", _uploaded(stub))
        stub.route("POST", "/v1/responses", lambda rec: responses_reply(ANSWER))
        stub.route("POST", "/v1/messages", lambda rec: anthropic_reply(ANSWER))
        registry = _registry(tmp_path / "models.yaml", stub.url)

        # the plan, before any call: per model and path, the formats it cannot take and the requests left out
        argv = ["plan", "format_robustness", "--registry", str(registry), "--cache", str(tmp_path / "none.duckdb")]
        assert cli.main([*argv, "--formats", FORMATS, "--k", "1", "--limit", "1", "--no-routing"]) == 0
        printed = capsys.readouterr().out.splitlines()
        assert [line for line in printed if "cannot take" in line] == [
            "  gpt-files openai_file: cannot take yaml (1 request not sent; those cells are not measurable)",
            "  claude-docs anthropic_document: cannot take docx (1 request not sent; those cells are not measurable)",
        ]
        counts = [line.split(":")[1].split(",")[0] for line in printed if "workflow_generations:" in line]
        assert counts == [" 3 requests", " 3 requests"]  # txt, pdf, docx / txt, pdf, yaml
        assert stub.requests == []  # planning sent nothing

        env = {
            **os.environ,
            "OPENAI_API_KEY": "sk-test-openai",
            "ANTHROPIC_API_KEY": "sk-ant-test",
            "METAMORPH_MODELS": str(registry),
            "METAMORPH_HOME": str(tmp_path / "home"),
            "DAGSTER_HOME": str(tmp_path / "dh"),
        }
        args = ["format_robustness", "--limit", "1", "--k", "1", "--no-routing", "--formats", FORMATS]
        out = subprocess.run(
            [sys.executable, "-m", "pipelines.run", *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        stub.close()
    # a request that was not sent is not a failed call: the run finishes with exit 0
    assert out.returncode == 0, out.stderr[-3000:]
    assert "calls failed" not in out.stdout
    assert (
        "note: 2 requests were not sent (workflow_generations 2): an ingestion path cannot take their document's "
        "format (metamorph plan names them); those cells are not measurable."
    ) in out.stdout.splitlines()

    con = duckdb.connect(str(tmp_path / "home" / "metamorph.duckdb"), read_only=True)
    try:
        docs = {
            f: (bytes(b) if b is not None else t.encode(), sha)
            for f, b, t, sha in con.execute(
                "SELECT format, document_bytes, document_text, document_sha256 FROM format_robustness.rendered_documents"
            ).fetchall()
        }
        rows = con.execute(
            "SELECT model_id, format, error, response_text FROM format_robustness.workflow_generations "
            "ORDER BY model_id, format"
        ).fetchall()
        reasons = con.execute(
            "SELECT model_id, format, parse_reason FROM format_robustness.extracted_decisions "
            "WHERE parse_reason = 'call_error' ORDER BY model_id"
        ).fetchall()
        unmeasured = {
            table: con.execute(
                f"SELECT workflow_id, format, not_measurable FROM format_robustness.{table} "
                "WHERE not_measurable IS NOT NULL ORDER BY ALL"
            ).fetchall()
            for table in ("accuracy_by_format", "stability_by_format")
        }
        mr = con.execute(
            "SELECT DISTINCT workflow_id, not_measurable FROM format_robustness.mr_violations "
            "WHERE relation = 'MR1' ORDER BY ALL"
        ).fetchall()
    finally:
        con.close()
    pdf, pdf_sha = docs["pdf"]
    assert hashlib.sha256(pdf).hexdigest() == pdf_sha and pdf.startswith(b"%PDF-")

    # OpenAI: three files uploaded (txt, pdf, docx), each with its name and media type; yaml never
    uploads = stub.requests_to("/v1/files")
    sent = {u.parts["file"]["filename"]: (u.parts["file"]["content_type"], u.parts["file"]["data"]) for u in uploads}
    assert sorted(sent) == sorted(f"{x.instance_id}.{f}" for f in ("txt", "pdf", "docx"))
    assert sent[f"{x.instance_id}.pdf"] == ("application/pdf", pdf)
    assert hashlib.sha256(sent[f"{x.instance_id}.pdf"][1]).hexdigest() == pdf_sha
    assert sent[f"{x.instance_id}.docx"] == (DOCX, docs["docx"][0])
    assert all(u.parts["purpose"]["data"] == b"user_data" for u in uploads)
    calls = stub.requests_to("/v1/responses")
    assert sorted(c.json["input"][-1]["content"][0]["file_id"] for c in calls) == ["file-1", "file-2", "file-3"]

    # Anthropic: the txt as a plain-text document, the pdf as a base64 document block; docx never
    messages = stub.requests_to("/v1/messages")
    blocks = {m.json["messages"][-1]["content"][0]["title"]: m.json["messages"][-1]["content"][0] for m in messages}
    assert sorted(blocks) == sorted(f"{x.instance_id}.{f}" for f in ("txt", "pdf", "yaml"))
    pdf_block = blocks[f"{x.instance_id}.pdf"]
    assert pdf_block["source"]["type"] == "base64" and pdf_block["source"]["media_type"] == "application/pdf"
    assert base64.b64decode(pdf_block["source"]["data"]) == pdf
    assert blocks[f"{x.instance_id}.txt"]["source"] == {
        "type": "text",
        "media_type": "text/plain",
        "data": docs["txt"][0].decode(),
    }
    assert not any(DOCX in json.dumps(m.json) for m in messages)

    # the cells not sent are error rows naming path, format and reason — never answers
    not_sent = [(m, f, e) for m, f, e, _ in rows if e is not None]
    assert not_sent == [
        ("claude-docs", "docx", f"not sent: anthropic_document cannot take docx ({DOCX}); not measurable"),
        ("gpt-files", "yaml", "not sent: openai_file cannot take yaml (application/yaml); not measurable"),
    ]
    assert all(r == ANSWER for _, _, e, r in rows if e is None) and len(rows) == 8
    assert reasons == [("claude-docs", "docx", "call_error"), ("gpt-files", "yaml", "call_error")]
    # the metric tables say those cells were not sent, never that their calls failed
    for table in ("accuracy_by_format", "stability_by_format"):
        assert unmeasured[table] == [
            ("claude-docs/anthropic_document", "docx", "not measurable: not sent (1 of 1 requests)"),
            ("gpt-files/openai_file", "yaml", "not measurable: not sent (1 of 1 requests)"),
        ], table
    # the stub's answer "A" is no label: of the 4 formats, the 3 sent replies parsed none
    assert mr == [
        (f"{m}/{path}", "not measurable: no reply parsed (3 of 3 unparseable)")
        for m, path in (("claude-docs", "anthropic_document"), ("gpt-files", "openai_file"))
    ]

    # metamorph trace of the pdf cell sent as a file: the name, media type and sha256 the path sent
    from metamorph import trace as tr

    db = str(tmp_path / "home" / "metamorph.duckdb")
    [row] = tr.trace(db, "format_robustness", "accuracy", "gpt-files", {"format": "pdf"})["rows"]
    assert row["sent"] == f"openai_file: the file {x.instance_id}.pdf (application/pdf, sha256 {pdf_sha})"
    assert (row["extracted_text"], row["response_text"]) == (None, ANSWER)
    [row] = tr.trace(db, "format_robustness", "accuracy", "claude-docs", {"format": "pdf"})["rows"]
    assert row["sent"] == f"anthropic_document: the file {x.instance_id}.pdf (application/pdf, sha256 {pdf_sha})"
