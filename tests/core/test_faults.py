"""Provider faults from the local HTTP stub, through the real OpenAI and Anthropic SDKs.

Every fault kind the stub injects must come out of a provider as a classified ProviderError
(never as a completion, never as an unclassified exception), and its transient kinds must be
recovered by the retry policy.
"""

import json

import pytest

from metamorph.providers.anthropic_provider import AnthropicProvider
from metamorph.providers.base import GenerationRequest, ProviderError
from metamorph.providers.openai_provider import OpenAIProvider
from metamorph.providers.retry import RetryPolicy, call_with_retries
from tests.core.stub_http import FAULT_KINDS, FaultPlan, Reply, body_key, echo_chat

KEY = "sk-test-FAULTS-SECRET"
CHAT = "/v1/chat/completions"

# The client timeout (1.5 s) is far above a loaded machine's reply time, so only the injected hang
# (2 s) times out. kind -> (status, retryable, start of the message)
EXPECTED = {
    "429": (429, True, "OpenAI HTTP 429: Error code: 429 - Rate limit reached"),
    "500": (500, True, "OpenAI HTTP 500: Error code: 500 - The server had an error"),
    "529": (529, True, "OpenAI HTTP 529: Error code: 529 - Overloaded"),
    "reset": (None, True, "OpenAI connection error"),
    "timeout": (None, True, "OpenAI request timed out after 1.5 s"),
    "error_body": (200, True, "OpenAI returned HTTP 200 with an error body (server_error): The server had an error"),
    "truncated": (None, True, "OpenAI response body is not valid JSON (Unterminated string"),
    "malformed": (None, True, "OpenAI response body is not valid JSON (Expecting value: char 0)"),
    "cut": (None, True, "OpenAI connection error"),
}


def chat_body_key(text: str) -> str:
    """The stub's key of the Chat Completions body the OpenAI SDK sends for ``request(text)``."""
    return body_key(
        json.dumps({"model": "gpt-x", "messages": [{"role": "user", "content": text}], "temperature": 0.0}).encode()
    )


def request(text="hi"):
    return GenerationRequest("openai", "gpt-x", ({"role": "user", "content": text},), {"temperature": 0.0})


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_each_fault_is_a_classified_provider_error_then_recovers(stub, kind):
    stub.faults = FaultPlan(rate=1.0, kinds=(kind,), times=1, retry_after_s=0.0, hang_s=2.0)
    stub.script("POST", CHAT, echo_chat)
    provider = OpenAIProvider(kind="openai", api_key=KEY, base_url=stub.url + "/v1", timeout_s=1.5)
    with pytest.raises(ProviderError) as info:
        provider.generate(request())
    status, retryable, start = EXPECTED[kind]
    err = info.value
    assert (err.status, err.retryable) == (status, retryable)
    assert str(err).startswith(start) and KEY not in str(err)
    if kind == "429":
        assert err.retry_after == 0.0
    # the same body again: the stub faults only its first request, the SDK call now succeeds
    assert provider.generate(request()).text == "echo: hi"
    recs = stub.requests_to(CHAT)
    assert [r.fault for r in recs] == [kind, None]
    assert stub.counts[body_key(recs[0].raw)] == 2


def test_retry_policy_recovers_every_transient_fault_kind(stub):
    stub.faults = FaultPlan(rate=1.0, kinds=FAULT_KINDS, times=1, hang_s=2.0)
    stub.script("POST", CHAT, echo_chat)
    provider = OpenAIProvider(kind="openai", api_key=KEY, base_url=stub.url + "/v1", timeout_s=1.5)
    policy = RetryPolicy(max_attempts=2, base_delay_s=0.0, max_delay_s=0.0, jitter=False)
    seen: list[str] = []
    for i in range(60):  # the kind is a function of the body hash: go on until each kind came once
        req = request(f"q{i}")
        kind = stub.faults.kind_for(chat_body_key(f"q{i}"))
        if kind in seen:
            continue
        result, attempts = call_with_retries(lambda: provider.generate(req), policy)
        assert (result.text, attempts) == (f"echo: q{i}", 2)
        assert [r.fault for r in stub.requests_to(CHAT)[-2:]] == [kind, None]
        seen.append(kind)
    assert sorted(seen) == sorted(FAULT_KINDS)


def test_a_persistent_fault_ends_as_the_last_error(stub):
    stub.faults = FaultPlan(rate=1.0, kinds=("500",), persistent=("500",))
    stub.script("POST", CHAT, echo_chat)
    provider = OpenAIProvider(kind="openai", api_key=KEY, base_url=stub.url + "/v1")
    with pytest.raises(ProviderError) as info:
        call_with_retries(lambda: provider.generate(request()), RetryPolicy(max_attempts=3, base_delay_s=0.0))
    assert info.value.status == 500 and info.value.attempts == 3
    assert len(stub.requests_to(CHAT)) == 3


@pytest.mark.parametrize(
    "body, retryable",
    [
        ({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, True),
        ({"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}, False),
    ],
)
def test_anthropic_200_with_an_error_body_is_an_error_not_an_empty_completion(stub, body, retryable):
    stub.script("POST", "/v1/messages", Reply(200, body))
    provider = AnthropicProvider(api_key=KEY, base_url=stub.url)
    req = GenerationRequest("anthropic", "claude-x", ({"role": "user", "content": "hi"},), {"max_tokens": 5})
    with pytest.raises(ProviderError) as info:
        provider.generate(req)
    kind, message = body["error"]["type"], body["error"]["message"]
    assert str(info.value) == f"Anthropic returned HTTP 200 with an error body ({kind}): {message}"
    assert (info.value.status, info.value.retryable) == (200, retryable)


def test_anthropic_truncated_body_is_retryable(stub):
    stub.script("POST", "/v1/messages", Reply(200, raw=b'{"id": "msg_1", "type": "mess'))
    provider = AnthropicProvider(api_key=KEY, base_url=stub.url)
    req = GenerationRequest("anthropic", "claude-x", ({"role": "user", "content": "hi"},), {"max_tokens": 5})
    with pytest.raises(ProviderError) as info:
        provider.generate(req)
    assert str(info.value) == "Anthropic response body is not valid JSON (Unterminated string starting at: char 24)"
    assert info.value.retryable


def test_fault_plan_is_deterministic_in_the_body_and_validates():
    plan = FaultPlan(rate=0.2)
    keys = [body_key(f'{{"q": {i}}}'.encode()) for i in range(2000)]
    faulted = [k for k in keys if plan.kind_for(k) is not None]
    assert faulted == [k for k in keys if int(k[:8], 16) % 10_000 < 2_000]
    assert 0.17 < len(faulted) / len(keys) < 0.23  # sha256 spreads bodies evenly
    assert plan.fault_of(faulted[0], 1) == plan.kind_for(faulted[0]) and plan.fault_of(faulted[0], 2) is None
    assert body_key(b'{"b": 1, "a": 2}') == body_key(b'{"a":2,"b":1}')  # canonical JSON
    with pytest.raises(ValueError, match="kinds among"):
        FaultPlan(rate=0.2, kinds=("418",))
    with pytest.raises(ValueError, match="rate must be in"):
        FaultPlan(rate=1.5)
