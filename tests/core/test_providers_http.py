"""Provider adapters against a real local HTTP stub: we assert on what the SDKs really send.

The stub (``http.server.ThreadingHTTPServer`` on 127.0.0.1, port 0) records every request and
replies with scripted responses; the real openai / anthropic SDKs are pointed at it with
``base_url``. Nothing of metamorph is mocked.
"""

from __future__ import annotations

import base64
import socket

import pytest

from metamorph.errors import ConfigError
from metamorph.providers.anthropic_provider import FILES_API_BETA, AnthropicProvider
from metamorph.providers.base import Document, GenerationRequest, Provider, ProviderError
from metamorph.providers.openai_provider import OpenAIProvider
from metamorph.providers.retry import RetryPolicy, call_with_retries

OPENAI_KEY = "sk-test-OPENAI-SECRET-0123456789"
ANTHROPIC_KEY = "sk-ant-test-ANTHROPIC-SECRET-9876543210"


from tests.core.stub_http import Reply


class FakeSleep:
    def __init__(self) -> None:
        self.sleeps: list[float] = []
        self.now = 0.0

    def __call__(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


# ============================================================================ canned replies


def chat_reply(text="hello", finish="stop", model="gpt-test-2026-01-01"):
    return Reply(
        200,
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": model,
            "system_fingerprint": "fp_abc123",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13},
        },
    )


def responses_reply(text="from the file", status="completed", incomplete_reason=None):
    return Reply(
        200,
        {
            "id": "resp_1",
            "object": "response",
            "created_at": 1,
            "model": "gpt-test-2026-01-01",
            "status": status,
            "incomplete_details": {"reason": incomplete_reason} if incomplete_reason else None,
            "output": [
                {
                    "type": "message",
                    "id": "msg_1",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            ],
            "usage": {
                "input_tokens": 100,
                "output_tokens": 3,
                "total_tokens": 103,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            },
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        },
    )


def openai_file_reply(file_id="file-abc123"):
    return Reply(
        200,
        {
            "id": file_id,
            "object": "file",
            "bytes": 10,
            "created_at": 1,
            "filename": "doc.md",
            "purpose": "user_data",
            "status": "processed",
        },
    )


def anthropic_reply(text="ok", stop_reason="end_turn", model="claude-test-20260101"):
    return Reply(
        200,
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": 50, "output_tokens": 4},
        },
    )


def anthropic_file_reply(file_id="file_011abc"):
    return Reply(
        200,
        {
            "id": file_id,
            "type": "file",
            "filename": "doc.md",
            "mime_type": "text/plain",
            "size_bytes": 10,
            "created_at": "2026-01-01T00:00:00Z",
            "downloadable": False,
        },
    )


OVERLOADED = Reply(529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})

MESSAGES = ({"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is in the doc?"})
DOC = Document(content=b"# Title\n\nThe answer is 42.\n", media_type="text/markdown", filename="doc.md")


def openai_request(provider="openai", params=None, **kw):
    return GenerationRequest(provider=provider, model="gpt-test", messages=MESSAGES, params=params or {}, **kw)


def anthropic_request(params=None, **kw):
    return GenerationRequest(
        provider="anthropic",
        model="claude-test",
        messages=MESSAGES,
        params={"max_tokens": 64} if params is None else params,
        **kw,
    )


def openai_provider(stub, kind="openai", **kw):
    return OpenAIProvider(kind, OPENAI_KEY, base_url=stub.url + "/v1", **kw)


def anthropic_provider(stub, **kw):
    return AnthropicProvider(ANTHROPIC_KEY, base_url=stub.url, **kw)


# ============================================================================ OpenAI: chat completions


def test_chat_openai_sends_explicit_zero_and_omits_unset(stub):
    stub.script("POST", "/v1/chat/completions", chat_reply())
    provider = openai_provider(stub)
    fmt = {"type": "json_object"}
    request = openai_request(params={"temperature": 0, "max_tokens": 16, "seed": 0, "response_format": fmt})
    result = provider.generate(request)

    [sent] = stub.requests_to("/v1/chat/completions")
    body = sent.json
    assert body["model"] == "gpt-test"
    assert body["messages"] == [dict(m) for m in MESSAGES]
    assert body["temperature"] == 0 and "temperature" in body
    assert body["seed"] == 0
    assert "top_p" not in body and "stop" not in body and "frequency_penalty" not in body
    assert body["max_completion_tokens"] == 16 and "max_tokens" not in body
    assert body["response_format"] == fmt
    assert sent.headers["authorization"] == f"Bearer {OPENAI_KEY}"

    assert result.text == "hello" and result.finish_reason == "stop" and result.error is None
    assert (result.prompt_tokens, result.completion_tokens) == (11, 2)
    assert result.model_id == result.model_version == "gpt-test-2026-01-01"
    assert result.system_fingerprint == "fp_abc123"
    assert result.latency_s is not None and result.latency_s >= 0 and result.attempts == 1
    # the key reaches the server but no record of ours
    for value in vars(result).values():
        assert OPENAI_KEY not in str(value)
    assert OPENAI_KEY not in repr(result) and OPENAI_KEY not in repr(provider)
    assert OPENAI_KEY not in request.to_json()


def test_chat_openai_compatible_sends_max_tokens_and_extra_body(stub):
    stub.script("POST", "/v1/chat/completions", chat_reply(finish="length"))
    provider = openai_provider(stub, kind="openai_compatible")
    params = {
        "max_tokens": 8,
        "top_p": 0.9,
        "top_k": 40,
        "repeat_penalty": 1.1,
        "grammar": 'root ::= "x"',
        "stop": ["\n"],
    }
    result = provider.generate(openai_request("openai_compatible", params=params))

    [sent] = stub.requests_to("/v1/chat/completions")
    body = sent.json
    assert body["max_tokens"] == 8 and "max_completion_tokens" not in body
    assert (body["top_p"], body["top_k"], body["repeat_penalty"], body["grammar"]) == (0.9, 40, 1.1, 'root ::= "x"')
    assert body["stop"] == ["\n"]
    assert "temperature" not in body
    assert result.finish_reason == "length"


def test_openai_kind_rejects_llama_cpp_params_before_any_request(stub):
    provider = openai_provider(stub)
    for name, value in (("top_k", 40), ("repeat_penalty", 1.1), ("grammar", "root ::= x")):
        with pytest.raises(ConfigError, match=name):
            provider.generate(openai_request(params={name: value}))
    assert stub.requests == []


def test_openai_request_for_other_provider_or_endpoint_is_config_error(stub):
    provider = openai_provider(stub)
    with pytest.raises(ConfigError):
        provider.generate(openai_request("openai_compatible"))
    with pytest.raises(ConfigError):
        provider.generate(openai_request(base_url="http://elsewhere/v1"))
    with pytest.raises(ConfigError):
        provider.generate(openai_request(ingestion="anthropic_document", document=DOC))
    assert stub.requests == []


# ============================================================================ OpenAI: files + responses


def test_providers_implement_the_protocol(stub):
    for provider in (openai_provider(stub), openai_provider(stub, kind="openai_compatible"), anthropic_provider(stub)):
        assert isinstance(provider, Provider)
    assert (openai_provider(stub).kind, anthropic_provider(stub).kind) == ("openai", "anthropic")
    assert openai_provider(stub, max_concurrency=2).max_concurrency == 2


def test_responses_with_uploaded_file_uploads_once(stub, caplog):
    stub.script("POST", "/v1/files", openai_file_reply("file-abc123"))
    stub.script(
        "POST",
        "/v1/responses",
        responses_reply("first"),
        responses_reply("cut", status="incomplete", incomplete_reason="max_output_tokens"),
    )
    provider = openai_provider(stub)
    params = {"temperature": 0, "max_tokens": 32, "seed": 1, "stop": ["x"]}
    req1 = openai_request(params=params, ingestion="openai_file", document=DOC)
    req2 = openai_request(params=params, ingestion="openai_file", document=DOC, repeat_index=2)
    r1 = provider.generate(req1)
    r2 = provider.generate(req2)

    uploads = stub.requests_to("/v1/files")
    assert len(uploads) == 1
    up = uploads[0]
    assert up.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    assert up.parts["purpose"]["data"] == b"user_data"
    assert up.parts["file"]["filename"] == "doc.md"
    assert up.parts["file"]["content_type"] == "text/markdown"
    assert up.parts["file"]["data"] == DOC.content

    calls = stub.requests_to("/v1/responses")
    assert len(calls) == 2
    body = calls[0].json
    assert body["model"] == "gpt-test"
    assert body["instructions"] == "You are terse."
    assert body["input"] == [
        {
            "role": "user",
            "content": [
                {"type": "input_file", "file_id": "file-abc123"},
                {"type": "input_text", "text": "What is in the doc?"},
            ],
        }
    ]
    assert body["temperature"] == 0 and body["max_output_tokens"] == 32
    for dropped in ("seed", "stop", "max_tokens", "max_completion_tokens", "top_p"):
        assert dropped not in body
    assert calls[1].json["input"][0]["content"][0] == {"type": "input_file", "file_id": "file-abc123"}

    assert (r1.text, r1.finish_reason, r1.prompt_tokens, r1.completion_tokens) == ("first", "stop", 100, 3)
    assert r1.model_id == r1.model_version == "gpt-test-2026-01-01"
    assert (r2.text, r2.finish_reason) == ("cut", "length")
    dropped_warnings = [r.getMessage() for r in caplog.records if "Responses API has no" in r.getMessage()]
    assert len(dropped_warnings) == 2  # seed and stop, each logged once per provider
    assert any("'seed'" in m for m in dropped_warnings) and any("'stop'" in m for m in dropped_warnings)


def test_a_responses_reply_without_output_text_is_an_error_unless_cut(stub):
    refused = responses_reply()
    refused.body["output"][0]["content"] = [{"type": "refusal", "refusal": "I can't help with that."}]
    cut = responses_reply(status="incomplete", incomplete_reason="max_output_tokens")
    cut.body["output"] = []  # the token limit was spent before any text
    stub.script("POST", "/v1/files", openai_file_reply())
    stub.script("POST", "/v1/responses", refused, cut)
    provider = openai_provider(stub)
    request = openai_request(params={"max_tokens": 8}, ingestion="openai_file", document=DOC)
    with pytest.raises(ProviderError) as info:
        provider.generate(request)
    assert (str(info.value), info.value.retryable) == (
        'OpenAI reply has no text (finish_reason stop; refusal: "I can\'t help with that.")',
        False,
    )
    res = provider.generate(request)
    assert (res.text, res.finish_reason, res.error) == ("", "length", None)


def test_responses_maps_json_schema_response_format(stub):
    stub.script("POST", "/v1/files", openai_file_reply())
    stub.script("POST", "/v1/responses", responses_reply())
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}}
    openai_provider(stub).generate(
        openai_request(params={"response_format": fmt}, ingestion="openai_file", document=DOC)
    )
    [call] = stub.requests_to("/v1/responses")
    assert call.json["text"] == {"format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}}


# ============================================================================ Anthropic


def test_anthropic_document_block_system_and_max_tokens(stub):
    stub.script("POST", "/v1/messages", anthropic_reply("The answer is 42.", stop_reason="max_tokens"))
    provider = anthropic_provider(stub)
    request = anthropic_request(params={"max_tokens": 64, "stop": "END"}, ingestion="anthropic_document", document=DOC)
    result = provider.generate(request)

    [sent] = stub.requests_to("/v1/messages")
    body = sent.json
    assert body["model"] == "claude-test"
    assert body["max_tokens"] == 64
    assert body["system"] == "You are terse."
    assert body["stop_sequences"] == ["END"]
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {
                    "type": "document",
                    "source": {"type": "text", "media_type": "text/plain", "data": DOC.content.decode()},
                    "title": "doc.md",
                },
                {"type": "text", "text": "What is in the doc?"},
            ],
        }
    ]
    for absent in ("temperature", "top_p", "top_k"):
        assert absent not in body
    # anthropic 2.x authenticates with a Bearer header (not x-api-key) and pins the API version
    assert sent.headers["authorization"] == f"Bearer {ANTHROPIC_KEY}"
    assert "x-api-key" not in sent.headers
    assert sent.headers["anthropic-version"] == "2026-10-21"

    assert (result.text, result.finish_reason) == ("The answer is 42.", "length")
    assert (result.prompt_tokens, result.completion_tokens) == (50, 4)
    assert result.model_id == result.model_version == "claude-test-20260101"
    for value in vars(result).values():
        assert ANTHROPIC_KEY not in str(value)
    assert ANTHROPIC_KEY not in request.to_json() and ANTHROPIC_KEY not in repr(provider)


def test_anthropic_pdf_is_sent_base64(stub):
    stub.script("POST", "/v1/messages", anthropic_reply())
    pdf = Document(content=b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n", media_type="application/pdf", filename="doc.pdf")
    result = anthropic_provider(stub).generate(anthropic_request(ingestion="anthropic_document", document=pdf))
    [sent] = stub.requests_to("/v1/messages")
    block = sent.json["messages"][0]["content"][0]
    assert block == {
        "type": "document",
        "title": "doc.pdf",
        "source": {"type": "base64", "media_type": "application/pdf", "data": base64.b64encode(pdf.content).decode()},
    }
    assert result.finish_reason == "stop"


def test_a_document_the_file_path_cannot_take_is_refused_before_any_request(stub):
    """The declarations of metamorph.providers.file_inputs: openai_file takes docx but not yaml;
    anthropic_document takes yaml (as plain text) but not docx. A refused one sends nothing."""
    docx_type = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    yaml_doc = Document(b"a: 1\n", "application/yaml", "r.yaml")
    docx_doc = Document(b"PK\x03\x04", docx_type, "r.docx")
    with pytest.raises(ConfigError) as err:
        openai_provider(stub).generate(openai_request(ingestion="openai_file", document=yaml_doc))
    assert str(err.value) == (
        "document 'r.yaml': media type 'application/yaml' is not a file type the Responses API documents for "
        "input_file (metamorph.providers.file_inputs.FILE_INPUTS)"
    )
    with pytest.raises(ConfigError) as err:
        anthropic_provider(stub).generate(anthropic_request(ingestion="anthropic_document", document=docx_doc))
    assert str(err.value) == (
        f"document 'r.docx': media type '{docx_type}' cannot be sent as an Anthropic document block "
        "(text-like or application/pdf only)"
    )
    assert stub.requests == []
    stub.script("POST", "/v1/files", openai_file_reply())
    stub.script("POST", "/v1/responses", responses_reply())
    stub.script("POST", "/v1/messages", anthropic_reply())
    openai_provider(stub).generate(openai_request(ingestion="openai_file", document=docx_doc))
    anthropic_provider(stub).generate(anthropic_request(ingestion="anthropic_document", document=yaml_doc))
    [upload] = stub.requests_to("/v1/files")
    assert (upload.parts["file"]["content_type"], upload.parts["file"]["data"]) == (docx_type, b"PK\x03\x04")
    [message] = stub.requests_to("/v1/messages")
    assert message.json["messages"][-1]["content"][0]["source"] == {
        "type": "text",
        "media_type": "text/plain",
        "data": "a: 1\n",
    }


def test_anthropic_missing_max_tokens_is_config_error_before_any_request(stub):
    provider = anthropic_provider(stub)
    with pytest.raises(ConfigError, match="max_tokens"):
        provider.generate(anthropic_request(params={"stop": "x"}))
    with pytest.raises(ConfigError, match="seed"):
        provider.generate(anthropic_request(params={"max_tokens": 5, "seed": 1}))
    with pytest.raises(ConfigError):
        provider.generate(anthropic_request(ingestion="openai_file", document=DOC))
    assert stub.requests == []


def test_anthropic_sampling_params_need_an_api_version_that_accepts_them(stub):
    stub.script("POST", "/v1/messages", anthropic_reply())
    with pytest.raises(ConfigError, match="2026-10-21"):
        anthropic_provider(stub).generate(anthropic_request(params={"max_tokens": 5, "temperature": 0}))
    assert stub.requests == []

    provider = anthropic_provider(stub, anthropic_version="2023-06-01")
    provider.generate(anthropic_request(params={"max_tokens": 5, "temperature": 0, "top_k": 1}))
    [sent] = stub.requests_to("/v1/messages")
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.json["temperature"] == 0 and sent.json["top_k"] == 1 and "top_p" not in sent.json


def test_anthropic_files_api_uploads_once_and_references_file_id(stub):
    stub.script("POST", "/v1/files", anthropic_file_reply("file_011abc"))
    stub.script("POST", "/v1/messages", anthropic_reply())
    provider = anthropic_provider(stub, use_files_api=True)
    assert provider.use_files_api is True
    for r in (1, 2):
        provider.generate(anthropic_request(ingestion="anthropic_document", document=DOC, repeat_index=r))

    [upload] = stub.requests_to("/v1/files")
    assert FILES_API_BETA in upload.headers["anthropic-beta"]
    assert upload.parts["file"]["filename"] == "doc.md" and upload.parts["file"]["data"] == DOC.content
    calls = stub.requests_to("/v1/messages")
    assert len(calls) == 2
    for call in calls:
        assert FILES_API_BETA in call.headers["anthropic-beta"]
        assert call.json["messages"][0]["content"][0] == {
            "type": "document",
            "source": {"type": "file", "file_id": "file_011abc"},
            "title": "doc.md",
        }


# ============================================================================ errors and retries over HTTP


def test_openai_429_retry_after_then_200(stub):
    stub.script(
        "POST",
        "/v1/chat/completions",
        Reply(429, {"error": {"message": "Rate limit", "type": "rate_limit_exceeded"}}, {"Retry-After": "2"}),
        chat_reply("finally"),
    )
    provider = openai_provider(stub)
    sleep = FakeSleep()
    result, attempts = call_with_retries(
        lambda: provider.generate(openai_request(params={"temperature": 0})), RetryPolicy(), sleep=sleep
    )
    assert len(stub.requests_to("/v1/chat/completions")) == 2
    assert attempts == 2 and result.text == "finally"
    assert len(sleep.sleeps) == 1 and sleep.sleeps[0] >= 2.0


def test_anthropic_529_overloaded_then_200(stub):
    stub.script("POST", "/v1/messages", OVERLOADED, anthropic_reply("after overload"))
    provider = anthropic_provider(stub)
    with pytest.raises(ProviderError) as info:
        provider.generate(anthropic_request())
    assert (info.value.status, info.value.retryable, info.value.retry_after) == (529, True, None)

    sleep = FakeSleep()
    result, attempts = call_with_retries(
        lambda: provider.generate(anthropic_request()), RetryPolicy(base_delay_s=0.5, jitter=False), sleep=sleep
    )
    assert (result.text, attempts) == ("after overload", 1)  # the script's last reply repeats
    stub.script("POST", "/v1/messages", OVERLOADED, OVERLOADED, anthropic_reply("third time"))
    before = len(stub.requests_to("/v1/messages"))
    result, attempts = call_with_retries(
        lambda: provider.generate(anthropic_request()), RetryPolicy(base_delay_s=0.5, jitter=False), sleep=sleep
    )
    assert (result.text, attempts) == ("third time", 3)
    assert len(stub.requests_to("/v1/messages")) - before == 3
    assert sleep.sleeps == [0.5, 1.0]


def test_overloaded_body_with_other_status_is_retryable(stub):
    stub.script(
        "POST", "/v1/messages", Reply(400, {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})
    )
    with pytest.raises(ProviderError) as info:
        anthropic_provider(stub).generate(anthropic_request())
    assert (info.value.status, info.value.retryable) == (400, True)


def test_400_is_not_retried(stub):
    stub.script(
        "POST",
        "/v1/chat/completions",
        Reply(400, {"error": {"message": "bad param", "type": "invalid_request_error"}}),
        chat_reply(),
    )
    provider = openai_provider(stub)
    sleep = FakeSleep()
    with pytest.raises(ProviderError) as info:
        call_with_retries(lambda: provider.generate(openai_request()), RetryPolicy(), sleep=sleep)
    assert len(stub.requests_to("/v1/chat/completions")) == 1
    assert (info.value.status, info.value.retryable, info.value.attempts) == (400, False, 1)
    assert sleep.sleeps == []


def test_bounded_total_retry_time(stub):
    stub.script("POST", "/v1/chat/completions", Reply(503, {"error": {"message": "unavailable"}}, {"Retry-After": "1"}))
    provider = openai_provider(stub)
    fake = FakeSleep()
    policy = RetryPolicy(max_attempts=10, base_delay_s=1.0, max_total_s=3.5, jitter=False)
    with pytest.raises(ProviderError) as info:
        call_with_retries(lambda: provider.generate(openai_request()), policy, sleep=fake, clock=fake.clock)
    # waits 1 (t=1), 2 (t=3); the next wait of 4 would end at 7 > 3.5 -> give up after 3 attempts
    assert fake.sleeps == [1.0, 2.0]
    assert len(stub.requests_to("/v1/chat/completions")) == 3
    assert (info.value.status, info.value.retryable, info.value.retry_after, info.value.attempts) == (503, True, 1.0, 3)


def test_retry_after_ms_header_is_read(stub):
    stub.script(
        "POST",
        "/v1/chat/completions",
        Reply(429, {"error": {"message": "slow down"}}, {"retry-after-ms": "1500", "Retry-After": "9"}),
    )
    with pytest.raises(ProviderError) as info:
        openai_provider(stub).generate(openai_request())
    assert (info.value.status, info.value.retryable, info.value.retry_after) == (429, True, 1.5)


def test_error_message_never_contains_the_key(stub):
    stub.script(
        "POST",
        "/v1/chat/completions",
        Reply(401, {"error": {"message": f"Incorrect API key provided: {OPENAI_KEY}", "type": "auth"}}),
    )
    stub.script(
        "POST",
        "/v1/messages",
        Reply(
            401,
            {
                "type": "error",
                "error": {"type": "authentication_error", "message": f"invalid x-api-key {ANTHROPIC_KEY}"},
            },
        ),
    )
    with pytest.raises(ProviderError) as info:
        openai_provider(stub).generate(openai_request())
    assert info.value.status == 401 and info.value.retryable is False
    assert OPENAI_KEY not in str(info.value) and "[REDACTED]" in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__
    with pytest.raises(ProviderError) as info:
        anthropic_provider(stub).generate(anthropic_request())
    assert info.value.status == 401 and ANTHROPIC_KEY not in str(info.value)


def test_connection_error_and_timeout_are_retryable(stub):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    provider = OpenAIProvider("openai", OPENAI_KEY, base_url=f"http://127.0.0.1:{dead_port}/v1")
    with pytest.raises(ProviderError) as info:
        provider.generate(openai_request())
    assert (info.value.status, info.value.retryable) == (None, True)
    assert OPENAI_KEY not in str(info.value)

    stub.script("POST", "/v1/messages", Reply(200, {}, delay_s=1.0))
    with pytest.raises(ProviderError) as info:
        anthropic_provider(stub, timeout_s=0.2).generate(anthropic_request())
    assert (info.value.status, info.value.retryable) == (None, True)


# ============================================================================ upload memo key


SAME_BYTES = b"age,sex\n42,female\n"


def test_openai_upload_memo_is_keyed_on_bytes_filename_and_media_type(stub):
    stub.script(
        "POST",
        "/v1/files",
        openai_file_reply("file-csv"),
        openai_file_reply("file-json"),
        openai_file_reply("file-txt"),
    )
    stub.script("POST", "/v1/responses", responses_reply())
    provider = openai_provider(stub)
    docs = [
        Document(SAME_BYTES, "text/csv", "record.csv"),
        Document(SAME_BYTES, "application/json", "record.json"),
        Document(SAME_BYTES, "text/csv", "record.csv"),
        Document(SAME_BYTES, "text/plain", "record.csv"),
    ]
    for d in docs:
        provider.generate(openai_request(params={"max_tokens": 8}, ingestion="openai_file", document=d))
    uploads = stub.requests_to("/v1/files")
    assert [
        (u.parts["file"]["filename"], u.parts["file"]["content_type"], u.parts["file"]["data"]) for u in uploads
    ] == [
        ("record.csv", "text/csv", SAME_BYTES),
        ("record.json", "application/json", SAME_BYTES),
        ("record.csv", "text/plain", SAME_BYTES),
    ]
    refs = [c.json["input"][0]["content"][0]["file_id"] for c in stub.requests_to("/v1/responses")]
    assert refs == ["file-csv", "file-json", "file-csv", "file-txt"]


def test_anthropic_upload_memo_is_keyed_on_bytes_filename_and_media_type(stub):
    stub.script("POST", "/v1/files", anthropic_file_reply("file_csv"), anthropic_file_reply("file_json"))
    stub.script("POST", "/v1/messages", anthropic_reply())
    provider = anthropic_provider(stub, use_files_api=True)
    docs = [
        Document(SAME_BYTES, "text/csv", "record.csv"),
        Document(SAME_BYTES, "application/json", "record.json"),
        Document(SAME_BYTES, "text/csv", "record.csv"),
    ]
    for d in docs:
        provider.generate(anthropic_request(ingestion="anthropic_document", document=d))
    uploads = stub.requests_to("/v1/files")
    # text-like media types are uploaded as text/plain; the filename still tells the two apart
    assert [
        (u.parts["file"]["filename"], u.parts["file"]["content_type"], u.parts["file"]["data"]) for u in uploads
    ] == [("record.csv", "text/plain", SAME_BYTES), ("record.json", "text/plain", SAME_BYTES)]
    refs = [c.json["messages"][0]["content"][0]["source"]["file_id"] for c in stub.requests_to("/v1/messages")]
    assert refs == ["file_csv", "file_json", "file_csv"]


# ============================================================================ the retry budget bounds the request


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_hanging_server_is_cut_when_the_retry_budget_ends(stub, tmp_path, kind):
    """A 503, then a server that holds the request 8 s without answering. With a 2 s budget the
    second attempt (after a 0.2 s wait) is given what is left of it as its timeout, not the
    provider's 120 s: the request ends as an error row after about 2 s."""
    import time

    from metamorph.cache import GenerationCache
    from metamorph.runner import run_requests

    path, label = ("/v1/chat/completions", "OpenAI") if kind == "openai" else ("/v1/messages", "Anthropic")
    stub.script("POST", path, Reply(503, {"error": {"message": "unavailable"}}), Reply(drop="hang", delay_s=8.0))
    provider = openai_provider(stub) if kind == "openai" else anthropic_provider(stub)
    assert provider.timeout_s == 120.0
    request = openai_request() if kind == "openai" else anthropic_request()
    policy = RetryPolicy(max_attempts=5, base_delay_s=0.2, max_total_s=2.0, jitter=False)
    cache = GenerationCache(tmp_path / "c.duckdb")
    start = time.monotonic()
    [outcome], stats = run_requests([request], provider, cache, retry=policy, log=lambda m: None)
    elapsed = time.monotonic() - start
    # the per-attempt timeout each request told the server (the SDK's x-stainless-read-timeout header)
    given = [float(r.headers["x-stainless-read-timeout"]) for r in stub.requests_to(path)]
    # the first: the 2 s budget less the moments before its call; the second: less the first and the 0.2 s wait
    assert len(given) == 2 and 1.0 < given[0] <= 2.0 and 0.5 < given[1] <= given[0] - 0.2
    res = outcome.result
    assert (res.text, res.attempts, stats.errors) == (None, 2, 1)
    assert res.error == f"ProviderError[None]: {label} request timed out after {given[1]:g} s"
    assert 1.9 < elapsed < 6.0  # the budget and a generous margin (not the 8 s hang and more)
    assert cache.count(errors=True) == 1 and cache.count(errors=False) == 0


@pytest.mark.parametrize(
    "case", ["anthropic_document", "openai_compatible", "openai_file", "openai_chat", "openai_chat_2_processes"]
)
def test_the_runner_sends_what_generate_sends(stub, tmp_path, case):
    """The runner calls these providers through their async session (the SDKs' async clients on
    aiohttp, Chat Completions through the client's ``post`` of create's body; an openai_file
    request through ``generate`` on a worker thread), in this process or (``2_processes``) in a
    client process. The same request sent by ``generate`` and by the runner gives the stub the
    same body and the same auth / version headers, and the same result; the key reaches the stub
    only in ``Authorization`` and nothing the runner stores."""
    from metamorph.cache import GenerationCache
    from metamorph.runner import run_requests

    if case == "anthropic_document":
        stub.script("POST", "/v1/messages", anthropic_reply("The answer is 42."))
        provider, path, key = anthropic_provider(stub), "/v1/messages", ANTHROPIC_KEY
        request = anthropic_request(
            params={"max_tokens": 64, "stop": "END"}, ingestion="anthropic_document", document=DOC
        )
    elif case == "openai_compatible":
        stub.script("POST", "/v1/chat/completions", chat_reply("hi"))
        provider, path, key = openai_provider(stub, kind="openai_compatible"), "/v1/chat/completions", OPENAI_KEY
        request = openai_request(
            provider="openai_compatible", params={"temperature": 0, "max_tokens": 8, "top_k": 5, "seed": 3}
        )
    elif case.startswith("openai_chat"):
        stub.script("POST", "/v1/chat/completions", chat_reply("hi"))
        provider, path, key = openai_provider(stub, organization="org-7"), "/v1/chat/completions", OPENAI_KEY
        schema = {"name": "a", "schema": {"type": "object", "properties": {"x": {"type": "integer"}}}}
        params = {"temperature": 0.5, "top_p": 0.9, "seed": 3, "stop": ["END", "\n\n"], "max_tokens": 8}
        params |= {"frequency_penalty": 0.1, "presence_penalty": 0.2}
        params["response_format"] = {"type": "json_schema", "json_schema": schema}
        request = GenerationRequest("openai", "gpt-test", MESSAGES, params)
    else:
        stub.script("POST", "/v1/files", openai_file_reply("file-abc123"))
        stub.script("POST", "/v1/responses", responses_reply("from the file"))
        provider, path, key = openai_provider(stub), "/v1/responses", OPENAI_KEY
        request = openai_request(params={"temperature": 0, "max_tokens": 32}, ingestion="openai_file", document=DOC)
    direct = provider.generate(request)
    cache = GenerationCache(tmp_path / "c.duckdb")
    processes = 2 if case.endswith("2_processes") else None
    [outcome], stats = run_requests([request], provider, cache, log=lambda m: None, processes=processes)
    by_generate, by_runner = stub.requests_to(path)
    assert by_runner.json == by_generate.json
    for header in ("authorization", "content-type", "anthropic-version", "x-api-key", "openai-organization"):
        assert by_runner.headers.get(header) == by_generate.headers.get(header), header
    assert by_runner.headers["authorization"] == f"Bearer {key}"
    assert (stats.calls, stats.errors) == (1, 0)
    assert outcome.result.replace(latency_s=None) == direct.replace(latency_s=None)
    con = cache._connect()
    try:
        assert key not in repr(con.execute("SELECT * FROM generations").fetchall())
    finally:
        con.close()
