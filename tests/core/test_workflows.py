"""A user's own workflow as the system under test: ``http`` and ``python`` registry entries.

The ``http`` kind is tested against the example service (``examples/doc_service``: Starlette on a real
uvicorn server on 127.0.0.1, started in its own process) and against the project's HTTP stub for what the
example does not do (a JSON body, failures); the ``python`` kind calls the example's function in worker
processes. No project code is mocked.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from metamorph.errors import RegistryError
from metamorph.models import parse_registry
from metamorph.providers.base import Document, GenerationRequest, ProviderError
from tests.core.stub_http import Reply
from tests.core.test_registry_sensor import evaluated  # noqa: F401  (a fixture)

REPO = Path(__file__).resolve().parents[2]
PROMPT = (
    'Decide.\n\nReply with one JSON object and nothing else. The object has two keys. The value of "decision" '
    'is exactly one of these labels: "refer", "do not refer". The value of "evidence" is a list.'
)
CSV = b"name,temperature_c\nAda,39.1\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_doc_service(log: Path, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """The example service on a free port of 127.0.0.1 (uvicorn in its own process), every request
    appended to ``log``; returns the process and the ``/ask`` URL once it accepts connections."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "examples.doc_service.app:app", "--host", "127.0.0.1", "--port", str(port)],
        cwd=REPO,
        env={**os.environ, "DOC_SERVICE_LOG": str(log), **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, f"http://127.0.0.1:{port}/ask"
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"the doc service exited: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the doc service did not start within 60 s")


@pytest.fixture
def doc_service(tmp_path, clean_proxy_env):
    log = tmp_path / "service-requests.jsonl"
    proc, url = start_doc_service(log)
    yield url, log
    proc.terminate()
    proc.wait(10)


def http_spec(url: str, **extra):
    entry = {"id": "svc", "provider": "http", "url": url, "version": "1.0", **extra}
    return parse_registry({"models": [entry]}, "models.yaml")[0]


def upload_request(content: bytes = CSV, seed: int | None = 7, filename: str = "r-1.csv", media: str = "text/csv"):
    return GenerationRequest(
        provider="http",
        model="svc",
        messages=({"role": "user", "content": PROMPT},),
        params={} if seed is None else {"seed": seed},
        ingestion="upload",
        document=Document(content, media, filename),
        workflow_version="1.0",
    )


# --------------------------------------------------------------------------- registry


def test_an_http_entry_reads_its_defaults_and_its_version_and_send_mode_shape_the_fingerprint():
    spec = http_spec("http://127.0.0.1:9/ask", seeded=True, deterministic=True, price_per_call=0.002)
    assert (spec.model, spec.base_url, spec.ingestion) == ("http://127.0.0.1:9/ask",) * 2 + (("upload",),)
    assert dict(spec.workflow.fields) == {"document": "file", "prompt": "prompt", "seed": "seed"}
    assert (spec.workflow.reply_pointer, spec.workflow.send, spec.workflow.seeded) == ("/answer", "multipart", True)
    assert spec.price.cost_usd(1000, 1000, calls=3) == pytest.approx(0.006)
    fp = spec.fingerprint()
    assert http_spec("http://127.0.0.1:9/ask", seeded=True, deterministic=True, timeout_s=5).fingerprint() == fp
    assert http_spec("http://127.0.0.1:9/ask", seeded=True, deterministic=True, version="1.1").fingerprint() != fp
    assert http_spec("http://127.0.0.1:9/ask", seeded=True, deterministic=True, send="json").fingerprint() != fp


@pytest.mark.parametrize(
    ("extra", "field", "problem"),
    [
        (
            {"version": None},
            "version",
            'a http workflow declares its version (e.g. version: "1.0"); it is part of every cache key',
        ),
        ({"version": 2}, "version", "'version' must be text (quote it: YAML read the number 2)"),
        ({"send": "xml"}, "send", "send 'xml' not in ['multipart', 'json']"),
        (
            {"reply_pointer": "answer"},
            "reply_pointer",
            "reply_pointer must be a JSON pointer (RFC 6901) such as /answer, got 'answer'",
        ),
        (
            {"fields": {"doc": "f"}},
            "fields.doc",
            "unknown field(s) ['doc']; fields names ['document', 'prompt', 'seed']",
        ),
        ({"seeded": "yes"}, "seeded", "seeded must be true or false"),
        ({"timeout_s": 0}, "timeout_s", "timeout_s must be a positive number of seconds up to 604,800 (a week), got 0"),
        (
            {"params": {"temperature": 0}},
            "params",
            "a http workflow takes no decoding parameters (params); it is sent the prompt, the document and its seed",
        ),
        (
            {"price_per_mtok": {"input": 1, "output": 1}},
            "price_per_mtok",
            "a workflow is priced per call: use price_per_call (USD per call)",
        ),
        ({"function": "json:dumps"}, "function", "function is a python workflow setting"),
        (
            {"extracted_pointer": "extracted_text"},
            "extracted_pointer",
            "extracted_pointer must be a JSON pointer (RFC 6901) such as /extracted_text, got 'extracted_text'",
        ),
    ],
)
def test_a_bad_http_entry_is_one_line_naming_its_field(extra, field, problem):
    entry = {"id": "svc", "provider": "http", "url": "http://127.0.0.1:9/ask", "version": "1", **extra}
    entry = {k: v for k, v in entry.items() if v is not None}
    with pytest.raises(RegistryError) as err:
        parse_registry({"models": [entry]}, "models.yaml")
    assert str(err.value) == f"models.yaml, row 1, field '{field}': {problem}"


def test_the_extracted_pointer_is_part_of_the_fingerprint_when_given_and_a_python_entry_takes_the_pointers_with_it():
    fp = http_spec("http://127.0.0.1:9/ask").fingerprint()
    assert http_spec("http://127.0.0.1:9/ask", extracted_pointer="/extracted_text").fingerprint() != fp
    fn = {"id": "fn", "provider": "python", "function": "examples.doc_service.qa:answer_document", "version": "1"}
    with pytest.raises(RegistryError) as err:
        parse_registry({"models": [{**fn, "reply_pointer": "/answer"}]}, "models.yaml")
    assert str(err.value) == (
        "models.yaml, row 1, field 'reply_pointer': reply_pointer of a python workflow selects the reply in the "
        "mapping its function returns, which it does only with extracted_pointer (without it the function returns "
        "the reply text)"
    )
    [spec] = parse_registry({"models": [{**fn, "extracted_pointer": "/extracted_text"}]}, "models.yaml")
    assert (spec.workflow.reply_pointer, spec.workflow.extracted_pointer) == ("/answer", "/extracted_text")
    with pytest.raises(RegistryError, match=r"field 'extracted_pointer': extracted_pointer is a workflow"):
        parse_registry({"models": [{"id": "m", "provider": "openai", "model": "g", "extracted_pointer": "/x"}]}, "r")


def test_the_text_the_example_service_extracted_is_read_by_the_extracted_pointer(doc_service):
    from metamorph.providers.http_workflow import HttpWorkflowProvider

    url, _ = doc_service
    html = b"<html><head><title>t</title></head><body><table><tr><td>name</td><td>Ada</td></tr>"
    html += b"<tr><td>temperature_c</td><td>39.1</td></tr></table></body></html>"
    provider = HttpWorkflowProvider(url, http_spec(url, extracted_pointer="/extracted_text").workflow)
    result = provider.generate(upload_request(content=html, filename="r-1.html", media="text/html"))
    assert result.extracted_text == "name\tAda\ntemperature_c\t39.1"  # the service's html.parser reading
    assert json.loads(result.text) == {"decision": "refer", "evidence": ["name Ada"]}
    # without the pointer nothing is recorded; a pointer that selects no text is a failed call
    assert HttpWorkflowProvider(url, http_spec(url).workflow).generate(upload_request()).extracted_text is None
    for pointer, tail in [("/seed", "selects int, not text"), ("/nothing", "selects nothing in the response")]:
        p = HttpWorkflowProvider(url, http_spec(url, extracted_pointer=pointer).workflow)
        with pytest.raises(ProviderError) as err:
            p.generate(upload_request())
        assert str(err.value) == f"http workflow {url} HTTP 200: extracted_pointer {pointer!r} {tail}"
        assert (err.value.status, err.value.retryable) == (200, False)


def test_a_workflow_key_on_a_model_endpoint_is_refused():
    with pytest.raises(RegistryError, match=r"field 'version': version is a workflow \(http, python\) setting"):
        parse_registry({"models": [{"id": "m", "provider": "openai", "model": "gpt", "version": "1"}]}, "models.yaml")


def test_a_python_entry_whose_module_or_function_does_not_exist_is_one_line_at_load_and_the_run_exits_2(
    tmp_path, monkeypatch, capsys
):
    from pipelines.run import main

    registry = tmp_path / "models.yaml"
    run_root = tmp_path / "run"
    monkeypatch.setenv("METAMORPH_MODELS", str(registry))
    monkeypatch.setenv("METAMORPH_HOME", str(run_root / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(run_root / "dagster_home"))
    for function, problem in [
        (
            "examples.doc_service.nowhere:answer",
            "module 'examples.doc_service.nowhere' of function cannot be found "
            "(examples.doc_service.nowhere is not importable)",
        ),
        (
            "examples.doc_service.qa:no_such_function",
            "module 'examples.doc_service.qa' has no function 'no_such_function'",
        ),
        (
            "examples.doc_service.qa",
            "function must be package.module:function (a module path, a colon, a function name)",
        ),
    ]:
        registry.write_text(
            yaml.safe_dump({"models": [{"id": "fn", "provider": "python", "function": function, "version": "1"}]})
        )
        assert main(["format_robustness", "--no-models"]) == 2
        out = capsys.readouterr()
        assert out.err.splitlines() == [f"error: {registry}, row 1, field 'function': {problem}"]
        assert not run_root.exists()


def test_a_study_that_sends_prompts_refuses_a_workflow_at_load_in_one_line(tmp_path, monkeypatch, capsys):
    from metamorph.cli import main as cli

    registry = tmp_path / "models.yaml"
    registry.write_text(
        yaml.safe_dump({"models": [{"id": "svc", "provider": "http", "url": "http://127.0.0.1:9/ask", "version": "1"}]})
    )
    problem = (
        f"error: {registry}, row 1, field 'provider': 'svc' is a http workflow, which answers an uploaded "
        "document; the study {study} sends prompts, not documents (choose its models with --models)"
    )
    from metamorph.study import studies

    prompting = [name for name, s in studies().items() if not s.takes_documents]
    assert len(prompting) == len(studies()) - 1  # every study but the document-format one sends prompts
    for study in prompting:
        assert cli(["plan", study, "--registry", str(registry), "--cache", str(tmp_path / "none.duckdb")]) == 2
        assert capsys.readouterr().err.splitlines() == [problem.format(study=study)]
    monkeypatch.setenv("METAMORPH_MODELS", str(registry))
    monkeypatch.setenv("METAMORPH_HOME", str(tmp_path / "run" / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "run" / "dagster_home"))
    from pipelines.run import main

    assert main(["order_probe", "--no-models"]) == 2
    assert capsys.readouterr().err.splitlines() == [problem.format(study="order_probe")]
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- replicates and the plan


def test_replicates_of_a_workflow_get_their_own_seeds_when_seeded_and_share_one_call_when_not():
    from metamorph.costplan import computation_keys
    from metamorph.studies.format_robustness.plan import plan_generations
    from metamorph.studies.format_robustness.renderers import DEFAULT_FORMATS, render
    from metamorph.studies.format_robustness.sources import load_sources

    [(_, x)] = load_sources(["construct"], limit=1)
    docs = [render(x, f, check=True) for f in DEFAULT_FORMATS]
    seeded = http_spec("http://127.0.0.1:9/ask", seeded=True, deterministic=True)
    planned = plan_generations([x], docs, seeded, k=3)
    assert len(planned) == 12
    assert len({p.request.params["seed"] for p in planned}) == 12  # each replicate its own seed
    assert all(set(p.request.params) == {"seed"} for p in planned)
    assert len(set(computation_keys([p.request for p in planned], seeded))) == 12
    assert planned[0].request.messages == (
        {"role": "user", "content": planned[0].request.messages[0]["content"]},
    )  # the task prompt only: no system prompt, no document text
    assert docs[0].text not in planned[0].request.messages[0]["content"]

    unseeded = http_spec("http://127.0.0.1:9/ask", deterministic=True)
    planned = plan_generations([x], docs, unseeded, k=3)
    assert all(p.request.params == {} for p in planned)
    assert len(set(computation_keys([p.request for p in planned], unseeded))) == 4  # one call per document
    nondeterministic = http_spec("http://127.0.0.1:9/ask")
    assert len(set(computation_keys([p.request for p in planned], nondeterministic))) == 12


def test_the_version_and_the_upload_name_are_part_of_the_cache_key():
    key = upload_request().cache_key()
    assert upload_request(filename="r-2.csv").cache_key() != key
    assert GenerationRequest(**{**upload_request().__dict__, "workflow_version": "1.1"}).cache_key() != key
    assert upload_request().key_material()["document"] == {
        "sha256": hashlib.sha256(CSV).hexdigest(),
        "media_type": "text/csv",
        "filename": "r-1.csv",
    }
    inline = GenerationRequest(provider="openai", model="m", messages=({"role": "user", "content": "x"},))
    assert "workflow_version" not in inline.key_material()  # model endpoints' keys are unchanged


# --------------------------------------------------------------------------- the http provider


def test_the_example_service_receives_the_upload_prompt_and_seed_and_the_reply_is_read_by_the_pointer(doc_service):
    from metamorph.providers.http_workflow import HttpWorkflowProvider

    url, log = doc_service
    spec = http_spec(url, seeded=True)
    provider = HttpWorkflowProvider(url, spec.workflow)
    result = provider.generate(upload_request())
    assert json.loads(result.text) == {"decision": "refer", "evidence": ["name,temperature_c"]}
    assert (result.finish_reason, result.model_version, result.model_id) == ("stop", "1.0", url)
    assert [json.loads(line) for line in log.read_text().splitlines()] == [
        {"filename": "r-1.csv", "media_type": "text/csv", "sha256": hashlib.sha256(CSV).hexdigest(), "seed": 7}
    ]
    # a pointer into the service's reply that selects no text is a failed call, never a reply
    for pointer, what in [("/extracted_text", None), ("/seed", "int"), ("/nothing", "nothing")]:
        p = HttpWorkflowProvider(url, http_spec(url, reply_pointer=pointer).workflow)
        if what is None:
            assert p.generate(upload_request()).text == CSV.decode()
            continue
        with pytest.raises(ProviderError) as err:
            p.generate(upload_request())
        assert not err.value.retryable
        tail = "selects nothing in the response" if what == "nothing" else f"selects {what}, not text"
        assert str(err.value) == f"http workflow {url} HTTP 200: reply_pointer {pointer!r} {tail}"
    # the service refuses a media type it cannot read: an error with the status, not retried
    with pytest.raises(ProviderError) as err:
        provider.generate(upload_request(media="image/png", filename="r-1.png"))
    assert (err.value.status, err.value.retryable) == (415, False)
    assert "unsupported media type 'image/png'" in str(err.value)
    # and a file its reader cannot open: 422, not retried
    with pytest.raises(ProviderError) as err:
        provider.generate(upload_request(content=b"%PDF-1.7 not really", media="application/pdf", filename="r-1.pdf"))
    assert (err.value.status, err.value.retryable) == (422, False)
    assert "the PDF document cannot be read (PdfStreamError: Stream has ended unexpectedly)" in str(err.value)


def test_a_json_body_carries_the_document_base64_and_headers_come_from_the_environment(stub, monkeypatch):
    from metamorph.providers.http_workflow import HttpWorkflowProvider

    token = "wf-FAKE-header-token-93e1"
    stub.script("POST", "/v2/qa", Reply(200, {"out": {"text": "the reply"}}))
    spec = http_spec(
        f"{stub.url}/v2/qa",
        send="json",
        seeded=True,
        fields={"document": "upload", "prompt": "question", "seed": "rng"},
        reply_pointer="/out/text",
        headers_env={"X-Api-Token": "WF_TEST_TOKEN"},
    )
    monkeypatch.setenv("WF_TEST_TOKEN", token)
    from resources.llm import build_provider

    provider = build_provider(spec)
    assert isinstance(provider, HttpWorkflowProvider)
    assert provider.generate(upload_request(seed=11)).text == "the reply"
    [rec] = stub.requests
    assert rec.headers["x-api-token"] == token
    assert rec.json == {
        "upload": {"filename": "r-1.csv", "media_type": "text/csv", "content_base64": base64.b64encode(CSV).decode()},
        "question": PROMPT,
        "rng": 11,
    }
    assert token not in repr(provider)


def test_a_missing_header_variable_is_one_line_naming_the_header(monkeypatch):
    from resources.llm import build_provider

    monkeypatch.delenv("WF_ABSENT_TOKEN", raising=False)
    spec = http_spec("http://127.0.0.1:9/x", headers_env={"Authorization": "WF_ABSENT_TOKEN"})
    with pytest.raises(RegistryError) as err:
        build_provider(spec)
    assert str(err.value) == (
        "models.yaml, row 1, field 'headers_env.Authorization': workflow 'svc' needs the environment variable "
        "WF_ABSENT_TOKEN (its Authorization header), which is not set"
    )


def test_failures_are_classified_for_the_runner_and_a_header_echoed_in_a_body_is_redacted(stub, monkeypatch):
    from metamorph.providers.http_workflow import HttpWorkflowProvider

    token = "Bearer wf-FAKE-echoed-7c2d"
    url = f"{stub.url}/ask"
    wf = http_spec(url).workflow
    provider = HttpWorkflowProvider(url, wf, headers={"Authorization": token})
    cases = [
        (Reply(429, {"error": "slow down"}, headers={"Retry-After": "3"}), 429, True, 3.0),
        (Reply(503, {"error": "down"}), 503, True, None),
        (Reply(400, {"error": f"bad token {token}"}), 400, False, None),
        (Reply(200, raw=b"<html>oops</html>"), 200, False, None),
    ]
    for reply, status, retryable, after in cases:
        stub.script("POST", "/ask", reply)
        with pytest.raises(ProviderError) as err:
            provider.generate(upload_request())
        assert (err.value.status, err.value.retryable, err.value.retry_after) == (status, retryable, after)
        assert token not in str(err.value) and "wf-FAKE-echoed" not in str(err.value)
    assert str(err.value) == f"http workflow {url} HTTP 200: the body is not JSON (application/json): <html>oops</html>"
    # nothing listens: a connection failure, retryable
    closed = f"http://127.0.0.1:{free_port()}/ask"
    with pytest.raises(ProviderError) as err:
        HttpWorkflowProvider(closed, wf).generate(upload_request())
    assert err.value.retryable and str(err.value).startswith(f"http workflow {closed}: connection failed (ConnectError")


def test_an_unreachable_workflow_is_an_error_row_with_its_status_never_an_answer(stub, tmp_path):
    from metamorph.cache import GenerationCache
    from metamorph.providers.http_workflow import HttpWorkflowProvider
    from metamorph.providers.retry import RetryPolicy
    from metamorph.runner import run_requests

    stub.script("POST", "/ask", Reply(503, {"error": "down"}))
    url = f"{stub.url}/ask"
    provider = HttpWorkflowProvider(url, http_spec(url).workflow)
    cache = GenerationCache(tmp_path / "cache.duckdb")
    policy = RetryPolicy(max_attempts=2, base_delay_s=0.0, max_delay_s=0.0, jitter=False)
    [outcome], _ = run_requests([upload_request()], provider, cache, retry=policy, log=lambda line: None)
    assert outcome.result.text is None
    assert outcome.result.error == f'ProviderError[503]: http workflow {url} HTTP 503: {{"error": "down"}}'
    assert outcome.result.attempts == 2 and len(stub.requests) == 2


# --------------------------------------------------------------------------- the python kind


def test_a_python_workflow_calls_the_example_function_in_a_worker_process():
    from metamorph.providers.python_workflow import PythonWorkflowProvider

    spec = parse_registry(
        {
            "models": [
                {
                    "id": "fn",
                    "provider": "python",
                    "function": "examples.doc_service.qa:answer_document",
                    "version": "3",
                    "workers": 2,
                }
            ]
        },
        "models.yaml",
    )[0]
    assert (spec.ingestion, spec.max_concurrency, spec.workers) == (("upload",), 1, 2)
    from resources.llm import build_provider

    provider = build_provider(spec)
    assert isinstance(provider, PythonWorkflowProvider) and provider.max_concurrency == 2
    try:
        result = provider.generate(upload_request(content=b"name,temperature_c\nAda,do not refer\n", seed=None))
        assert json.loads(result.text) == {"decision": "do not refer", "evidence": ["name,temperature_c"]}
        assert (result.model_id, result.model_version) == ("examples.doc_service.qa:answer_document", "3")
        [pid] = provider.pool.pids()[:1]
        assert pid != os.getpid()
        # the function raises for a media type it cannot read: a failed call with the type and message
        with pytest.raises(ProviderError) as err:
            provider.generate(upload_request(media="image/png", filename="x.png"))
        assert str(err.value) == (
            "ExtractionError in python workflow worker: x.png: unsupported media type 'image/png' (supported: "
            "['application/json', 'application/pdf', "
            "'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet', "
            "'application/vnd.openxmlformats-officedocument.wordprocessingml.document', 'application/yaml', "
            "'text/csv', 'text/html', 'text/markdown', 'text/plain'])"
        )
    finally:
        provider.close()


def test_a_python_workflow_with_an_extracted_pointer_returns_a_mapping_read_by_its_pointers():
    from resources.llm import build_provider

    entry = {
        "id": "fn-text",
        "provider": "python",
        "function": "examples.doc_service.qa:answer_document_with_text",
        "version": "1",
        "extracted_pointer": "/extracted_text",
    }
    provider = build_provider(parse_registry({"models": [entry]}, "models.yaml")[0])
    try:
        result = provider.generate(upload_request(content=b"name,temperature_c\nAda,do not refer\n", seed=None))
        assert result.extracted_text == "name,temperature_c\nAda,do not refer\n"
        assert json.loads(result.text) == {"decision": "do not refer", "evidence": ["name,temperature_c"]}
    finally:
        provider.close()
    # the same function without the pointer returns no text: a failed call, never a reply
    del entry["extracted_pointer"]
    provider = build_provider(parse_registry({"models": [entry]}, "models.yaml")[0])
    try:
        with pytest.raises(ProviderError) as err:
            provider.generate(upload_request(seed=None))
        assert str(err.value) == (
            "WorkflowReplyError in python workflow worker: examples.doc_service.qa:answer_document_with_text "
            "returned dict, not text"
        )
    finally:
        provider.close()


def test_a_python_workflow_through_the_runner_one_call_serves_the_replicates_of_an_unseeded_deterministic_entry(
    tmp_path,
):
    from metamorph.cache import GenerationCache
    from metamorph.runner import run_requests
    from metamorph.studies.format_robustness.plan import plan_generations
    from metamorph.studies.format_robustness.renderers import render
    from metamorph.studies.format_robustness.sources import load_sources
    from resources.llm import build_provider

    entry = {"id": "fn", "provider": "python", "function": "examples.doc_service.qa:answer_document"}
    spec = parse_registry({"models": [{**entry, "version": "1", "deterministic": True}]}, "models.yaml")[0]
    [(_, x)] = load_sources(["construct"], limit=1)
    planned = plan_generations([x], [render(x, "md", check=True)], spec, k=3)
    provider = build_provider(spec)
    try:
        outcomes, stats = run_requests(
            [p.request for p in planned], provider, GenerationCache(tmp_path / "c.duckdb"), log=lambda line: None
        )
    finally:
        provider.close()
    assert [(o.cache_hit, o.shared) for o in outcomes] == [(False, False), (False, True), (False, True)]
    assert len({o.key for o in outcomes}) == 1 and stats.calls == 1
    assert json.loads(outcomes[0].result.text)["decision"] in ("refer", "do not refer")


def test_an_unpriced_workflow_says_which_price_is_missing_when_a_budget_is_set():
    from metamorph.costplan import check_budget, plan_requests
    from metamorph.errors import BudgetError

    plan = plan_requests([upload_request()], http_spec("http://127.0.0.1:9/ask"), label="workflow_generations")
    assert plan.cost_text() == "unknown (no price_per_call in the registry)"
    with pytest.raises(BudgetError) as err:
        check_budget(plan, 1.0)
    assert str(err.value) == (
        "model 'svc' (workflow_generations): 1 calls to make but the registry entry has no price_per_call, "
        "so the budget of $1 cannot be checked; nothing was called"
    )
    priced = plan_requests([upload_request()], http_spec("http://127.0.0.1:9/ask", price_per_call=0.25))
    assert (priced.cost_usd, priced.unbounded_calls) == (0.25, 0)


def test_a_workflows_plan_says_its_output_is_not_counted_instead_of_a_zero_bound():
    """A workflow takes no max_tokens: its plan line and budget error name no output-token bound (a
    "≤ 0 output tokens" read as "outputs nothing"). 4 prompt characters + an 8-byte document = 12
    characters = 3 estimated input tokens; one call at $0.25."""
    from metamorph.costplan import check_budget, plan_requests
    from metamorph.errors import BudgetError

    request = GenerationRequest(
        provider="http",
        model="svc",
        messages=({"role": "user", "content": "abcd"},),
        params={},
        ingestion="upload",
        document=Document(b"12345678", "text/csv", "r.csv"),
        workflow_version="1.0",
    )
    spec = http_spec("http://127.0.0.1:9/ask", price_per_call=0.25)
    plan = plan_requests([request], spec, label="workflow_generations")
    assert plan.line() == (
        "svc workflow_generations: 1 requests, 0 cache hits, 1 calls, 3 input tokens (estimated, chars/4), "
        "output not counted (a workflow takes no max_tokens), est. cost $0.25"
    )
    with pytest.raises(BudgetError) as err:
        check_budget(plan, 0.1)
    assert str(err.value) == (
        "model 'svc' (workflow_generations): 1 calls, est. cost $0.25 exceeds the budget of $0.1; nothing was called"
    )


# --------------------------------------------------------------------------- the format study through the service


def test_the_format_study_through_the_example_service_makes_the_planned_calls_and_trace_shows_upload_and_reply(
    tmp_path, clean_proxy_env
):
    from tests.core.test_secrets import leaks

    token = "wf-FAKE-service-token-5d1e"
    log = tmp_path / "service-requests.jsonl"
    proc, url = start_doc_service(log, {"DOC_SERVICE_TOKEN": token})
    try:
        registry = tmp_path / "models.yaml"
        registry.write_text(
            yaml.safe_dump(
                {
                    "models": [
                        {
                            "id": "doc-service",
                            "provider": "http",
                            "url": url,
                            "version": "1",
                            "seeded": True,
                            "deterministic": True,
                            "price_per_call": 0.001,
                            "headers_env": {"Authorization": "DOC_SERVICE_AUTH"},
                        }
                    ]
                }
            )
        )
        home = tmp_path / "home"
        env = {
            **os.environ,
            "METAMORPH_MODELS": str(registry),
            "METAMORPH_HOME": str(home),
            "DAGSTER_HOME": str(tmp_path / "dagster_home"),
            "DOC_SERVICE_AUTH": f"Bearer {token}",
        }
        args = ["format_robustness", "--source", "construct", "--limit", "2"]
        cmd = [sys.executable, "-m", "metamorph.cli"]
        plan = subprocess.run([*cmd, "plan", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        assert plan.returncode == 0, plan.stderr
        lines = plan.stdout.splitlines()
        assert lines[1].startswith("  doc-service workflow_generations: 24 requests, 0 cache hits, 24 calls, ")
        assert lines[1].endswith("est. cost $0.024")
        assert lines[3].startswith(
            "  doc-service total: up to 48 requests, 0 cache hits, 6 reuse a call of this run's workflow_generations, up to 42 calls, "
        )
        run = subprocess.run([*cmd, "run", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
        assert run.returncode == 0, run.stderr[-3000:]
    finally:
        proc.terminate()
        proc.wait(10)
    received = [json.loads(line) for line in log.read_text().splitlines()]
    # every format's routing alternative has the same size, so the upper bound is what was sent
    assert len(received) == 42
    import duckdb

    con = duckdb.connect(str(home / "metamorph.duckdb"), read_only=True)
    docs = con.execute(
        "SELECT instance_id, format, media_type FROM format_robustness.rendered_documents ORDER BY ALL"
    ).fetchall()
    gens = con.execute(
        "SELECT count(*), count(response_text), count(DISTINCT generation_key) FROM format_robustness.workflow_generations"
    ).fetchone()
    ingestion = con.execute("SELECT DISTINCT ingestion FROM format_robustness.workflow_generations").fetchall()
    con.close()
    assert gens == (24, 24, 24) and ingestion == [("upload",)]
    ext = {"txt": "txt", "md": "md", "json": "json", "csv": "csv"}
    uploaded = {(r["filename"], r["media_type"]) for r in received}
    assert uploaded == {(f"{i}.{ext[f]}", m) for i, f, m in docs}
    assert len({r["seed"] for r in received[:24]}) == 24  # each replicate its own seed

    trace = subprocess.run(
        [*cmd, "trace", "--warehouse", str(home / "metamorph.duckdb"), "--study", "format_robustness"]
        + ["--metric", "accuracy", "--model", "doc-service", "--where", "format=csv", "--limit", "1", "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert trace.returncode == 0, trace.stderr
    [row] = json.loads(trace.stdout)["rows"]
    request = json.loads(row["request_json"])
    assert request["document"]["filename"] == f"{row['instance_id']}.csv"
    assert (request["ingestion"], request["workflow_version"]) == ("upload", "1")
    reply = json.loads(row["response_text"])
    first_line = row["input"].splitlines()[0]
    assert reply["evidence"] == [" ".join(first_line.split()[:12])]  # the rule quotes the extracted text
    assert leaks(tmp_path, (token,)) == []


@pytest.mark.llm
def test_the_example_service_answers_with_the_packaged_local_model_on_two_construct_records(tmp_path, clean_proxy_env):
    """DOC_SERVICE_ANSWERER=model: SmolLM2 through metamorph's local engine answers two construct records
    (csv uploads) in the answer's JSON shape, greedily, so the same request gets the same reply."""
    from metamorph.providers.http_workflow import HttpWorkflowProvider
    from metamorph.studies.format_robustness.plan import plan_generations
    from metamorph.studies.format_robustness.renderers import render
    from metamorph.studies.format_robustness.sources import load_sources

    proc, url = start_doc_service(tmp_path / "log.jsonl", {"DOC_SERVICE_ANSWERER": "model"})
    try:
        spec = http_spec(url, seeded=True, deterministic=True)
        xs = [x for _, x in load_sources(["construct"], limit=2)]
        planned = plan_generations(xs, [render(x, "csv", check=True) for x in xs], spec, k=1)
        provider = HttpWorkflowProvider(url, spec.workflow, max_concurrency=1)
        replies = [provider.generate(p.request).text for p in planned]
        assert [set(json.loads(r)) for r in replies] == [{"decision", "evidence"}] * 2
        assert provider.generate(planned[0].request).text == replies[0]
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_registry_sensor_adds_a_workflow_as_a_partition_and_launches_no_study_that_sends_prompts(
    evaluated,  # noqa: F811  (the fixture imported above)
    tmp_path,
):
    """order_probe has been run: a new http workflow becomes a partition, and no order_probe run is
    requested for it (that study sends prompts; its run would refuse the entry)."""
    import dagster as dg

    from tests.core.test_registry_sensor import tick

    instance, _, stub, registry, _ = evaluated
    stub.script("GET", "/v1/models", Reply(200, {"object": "list", "data": []}))
    registry.write_text(
        registry.read_text() + f"  - {{id: svc, provider: http, url: '{stub.url}/ask', version: '1'}}\n"
    )
    res = tick(instance)
    assert isinstance(res, dg.SensorResult)
    assert res.run_requests == []
    assert [r.partition_keys for r in res.dynamic_partitions_requests] == [["svc"]]
    # launched by hand (the UI's launchpad), the study's generation step refuses the entry in one line
    from pipelines.run import failure_message
    from tests.core.test_registry_sensor import GEN

    _, defs, _, _, _ = evaluated
    instance.add_dynamic_partitions("model", ["svc"])
    result = defs.resolve_job_def("order_probe_model_job").execute_in_process(
        instance=instance, partition_key="svc", asset_selection=[GEN], raise_on_error=False
    )
    assert not result.success and len(stub.requests_to("/ask")) == 0
    assert failure_message(result) == (
        f"order_probe__order_generations: {registry}, row 2, field 'provider': 'svc' is a http workflow, which "
        "answers an uploaded document; the study order_probe sends prompts, not documents (choose its models "
        "with --models)",
        True,
    )


FIELDS_TAB = (
    "age\t67\nsex\tmale\nethnicity\tAsian\nchief_complaint\tabdominal pain\nsymptom_duration_days\t9\n"
    "temperature_c\t36.6\nspo2_pct\t98\nsystolic_bp_mmhg\t210\nheart_rate_bpm\t80\n"
    "chronic_conditions\tchronic kidney disease\nsmoker\tyes"
)


def test_the_example_service_extracts_every_format_of_the_study_with_its_own_readers():
    from examples.doc_service.qa import ExtractionError, extract_text
    from metamorph.studies.format_robustness.renderers import RENDERERS, render
    from metamorph.studies.format_robustness.sources import load_source

    x = load_source("construct")[0]  # construct-0-0000: 67, male, Asian, abdominal pain, ...
    got = {f: extract_text(render(x, f).content, render(x, f).filename, render(x, f).media_type) for f in RENDERERS}
    assert got["html"] == got["docx"] == "Field\tValue\n" + FIELDS_TAB  # the table's rows, cells by a tab
    keys, values = zip(*(line.split("\t") for line in FIELDS_TAB.splitlines()), strict=True)
    assert got["xlsx"] == "\t".join(keys) + "\n" + "\t".join(values)  # a header row, a data row
    assert got["pdf"] == got["txt"] == FIELDS_TAB.replace("\t", ": ") + "\n"  # pypdf reads the txt layout back
    assert got["yaml"].endswith("smoker: 'yes'\n")  # a text format arrives as written
    with pytest.raises(
        ExtractionError, match=r"the PDF document cannot be read \(PdfStreamError: Stream has ended unexpectedly\)"
    ) as err:
        extract_text(b"%PDF-1.7 not really", "x.pdf", "application/pdf")
    assert err.value.status == 422
    with pytest.raises(ExtractionError, match=r"the XLSX document cannot be read") as err:
        extract_text(b"PK no zip", "x.xlsx", render(x, "xlsx").media_type)
    assert err.value.status == 422


def test_the_format_study_uploads_all_nine_formats_to_the_example_service(tmp_path, clean_proxy_env):
    log = tmp_path / "service-requests.jsonl"
    proc, url = start_doc_service(log)
    try:
        registry = tmp_path / "models.yaml"
        entry = {"id": "doc-service", "provider": "http", "url": url, "version": "1", "deterministic": True}
        entry["extracted_pointer"] = "/extracted_text"  # the service's reply carries the text it extracted
        registry.write_text(yaml.safe_dump({"models": [entry]}))
        home = tmp_path / "home"
        env = {
            **os.environ,
            "METAMORPH_MODELS": str(registry),
            "METAMORPH_HOME": str(home),
            "DAGSTER_HOME": str(tmp_path / "dagster_home"),
        }
        formats = "txt,md,json,csv,html,yaml,pdf,docx,xlsx"
        args = ["format_robustness", "--limit", "2", "--k", "1", "--no-routing", "--formats", formats]
        cmd = [sys.executable, "-m", "metamorph.cli"]
        run = subprocess.run([*cmd, "run", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
        assert run.returncode == 0, run.stderr[-3000:]
    finally:
        proc.terminate()
        proc.wait(10)
    received = [json.loads(line) for line in log.read_text().splitlines()]
    # 2 construct records x 9 formats x k = 1, each uploaded once as its own file
    assert len(received) == 18
    assert sorted(r["filename"].rsplit(".", 1)[1] for r in received) == sorted(formats.split(",") * 2)
    import duckdb

    con = duckdb.connect(str(home / "metamorph.duckdb"), read_only=True)
    gens = con.execute(
        "SELECT count(*), count(response_text), count(error) FROM format_robustness.workflow_generations"
    ).fetchone()
    acc = con.execute("SELECT format, n FROM format_robustness.accuracy_by_format ORDER BY format").fetchall()
    extracted = con.execute(
        "SELECT count(extracted_text), count(*) FILTER (WHERE format = 'txt' AND extracted_text = response_text) "
        "FROM format_robustness.workflow_generations"
    ).fetchone()
    con.close()
    assert gens == (18, 18, 0)  # every upload was read and answered: no 415, no 422
    assert acc == [(f, 2) for f in sorted(formats.split(","))]
    assert extracted == (18, 0)  # every generation keeps the text the service extracted, beside its reply

    # trace shows what the service read from each upload: the table of the html and docx renderings,
    # the header and data rows of the xlsx one, the txt layout pypdf reads back from the pdf
    keys, values = zip(*(line.split("\t") for line in FIELDS_TAB.splitlines()), strict=True)
    expected = {
        "html": "Field\tValue\n" + FIELDS_TAB,
        "docx": "Field\tValue\n" + FIELDS_TAB,
        "xlsx": "\t".join(keys) + "\n" + "\t".join(values),
        "pdf": FIELDS_TAB.replace("\t", ": ") + "\n",
    }
    where = ["--where", "instance_id=construct-0-0000", "--where", "repeat=1"]
    for fmt, text in expected.items():
        out = subprocess.run(
            [*cmd, "trace", "--warehouse", str(home / "metamorph.duckdb"), "--study", "format_robustness"]
            + ["--metric", "accuracy", "--model", "doc-service", "--where", f"format={fmt}", *where, "--json"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr
        [row] = json.loads(out.stdout)["rows"]
        assert row["extracted_text"] == text, fmt
        assert row["sent"].startswith(f"upload: the file construct-0-0000.{fmt} (")
    out = subprocess.run(
        [*cmd, "trace", "--warehouse", str(home / "metamorph.duckdb"), "--study", "format_robustness"]
        + ["--metric", "accuracy", "--model", "doc-service", "--where", "format=xlsx", *where],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    at = lines.index("extracted_text:")
    assert lines[at + 1 : at + 4] == ["\t".join(keys), "\t".join(values), "response_text:"]


def test_how_the_reply_is_sent_and_read_is_part_of_the_cache_key():
    """Two entries of one service and version that read the reply at another pointer, or send the
    document another way or under other field names, make other requests: one's cached reply is
    never served to the other. An entry with the defaults keeps the key it had."""
    from metamorph.studies.format_robustness.plan import plan_generations
    from metamorph.studies.format_robustness.renderers import render
    from metamorph.studies.format_robustness.sources import load_sources

    [(_, x)] = load_sources(["construct"], limit=1)
    docs = [render(x, "csv", check=True)]

    def key(**extra):
        [planned] = plan_generations([x], docs, http_spec("http://127.0.0.1:9/ask", **extra), k=1)
        return planned.request

    default = key()
    assert "workflow_io" not in default.key_material()
    assert default.cache_key() == GenerationRequest(**{**default.__dict__, "workflow_io": None}).cache_key()
    others = [key(reply_pointer="/nope/0"), key(send="json"), key(fields={"document": "upload"})]
    assert [r.key_material()["workflow_io"] for r in others] == [
        {"reply_pointer": "/nope/0"},
        {"send": "json"},
        {"fields": {"document": "upload", "prompt": "prompt", "seed": "seed"}},
    ]
    assert len({default.cache_key(), *(r.cache_key() for r in others)}) == 4


def test_a_header_value_the_service_echoes_in_its_reply_never_reaches_the_reply_text(stub):
    """A reply (or an error body) quoting the header value, or only its credential after the scheme,
    is stored with them replaced: the reply text goes to the cache and the warehouse."""
    from metamorph.providers.http_workflow import HttpWorkflowProvider

    token = "Bearer wfSECRETbare9c1d"
    url = f"{stub.url}/ask"
    provider = HttpWorkflowProvider(url, http_spec(url).workflow, headers={"Authorization": token})
    stub.script("POST", "/ask", Reply(200, {"answer": f"refer ({token}; again wfSECRETbare9c1d)"}))
    assert provider.generate(upload_request()).text == "refer ([REDACTED]; again [REDACTED])"
    stub.script("POST", "/ask", Reply(401, {"error": "unknown key wfSECRETbare9c1d"}))
    with pytest.raises(ProviderError) as err:
        provider.generate(upload_request())
    assert str(err.value) == f'http workflow {url} HTTP 401: {{"error": "unknown key [REDACTED]"}}'


def test_a_short_header_value_in_a_reply_fails_the_call_instead_of_changing_the_answer(stub):
    """A header value too short to be told from ordinary text ("refer") is not spliced out of the
    reply, which would turn the answer into another one: the call fails, naming the header and not
    the value; a reply without it is read as it is."""
    from metamorph.providers.http_workflow import HttpWorkflowProvider

    url = f"{stub.url}/ask"
    provider = HttpWorkflowProvider(url, http_spec(url).workflow, headers={"X-Team": "refer"})
    stub.script("POST", "/ask", Reply(200, {"answer": "refer: referred for care"}))
    with pytest.raises(ProviderError) as err:
        provider.generate(upload_request())
    assert str(err.value) == (
        f"http workflow {url} HTTP 200: the reply holds the value of the header X-Team (5 characters, too short "
        "to replace without changing the reply); a header value is never stored, so the reply is not"
    )
    assert err.value.retryable is False
    stub.script("POST", "/ask", Reply(200, {"answer": "do not send"}))
    assert provider.generate(upload_request()).text == "do not send"


def test_a_redirect_is_an_error_naming_where_it_points_not_a_body_that_is_not_json(stub):
    from metamorph.providers.http_workflow import HttpWorkflowProvider

    url = f"{stub.url}/ask"
    provider = HttpWorkflowProvider(url, http_spec(url).workflow)
    stub.script("POST", "/ask", Reply(307, raw=b"", headers={"Location": "https://svc.example/v2/ask"}))
    with pytest.raises(ProviderError) as err:
        provider.generate(upload_request())
    assert (err.value.status, err.value.retryable) == (307, False)
    assert str(err.value) == (
        f"http workflow {url} HTTP 307: redirected to https://svc.example/v2/ask (redirects are not followed: "
        "give the final URL as the entry's url)"
    )
