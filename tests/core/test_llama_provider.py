"""The embedded default provider with the real SmolLM2-135M model."""

import pytest

from metamorph.errors import ConfigError, ContextBudgetError
from metamorph.providers.base import GenerationRequest
from metamorph.providers.llama_cpp import LlamaCppProvider, default_gguf_path

pytestmark = pytest.mark.llm


@pytest.fixture(scope="module")
def provider():
    return LlamaCppProvider(n_ctx=512)


def req(provider, content="Say hello.", **params):
    return GenerationRequest("llama_cpp", provider.model_name, ({"role": "user", "content": content},), params)


def test_gguf_is_found_inside_the_package():
    p = default_gguf_path()
    assert p.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and p.stat().st_size > 50_000_000


def test_greedy_generation_is_deterministic_and_reports_usage(provider):
    a = provider.generate(req(provider, temperature=0.0, max_tokens=16, seed=0))
    b = provider.generate(req(provider, temperature=0.0, max_tokens=16, seed=0))
    assert a.text == b.text and a.text
    assert a.prompt_tokens == provider.prompt_tokens([{"role": "user", "content": "Say hello."}])
    assert 1 <= a.completion_tokens <= 16
    assert a.model_id == "SmolLM2-135M-Instruct.Q4_1.gguf" and a.model_version.startswith("sha256:")


def test_max_tokens_cut_is_reported_as_length(provider):
    r = provider.generate(req(provider, "Write a long story about a cat.", temperature=0.0, max_tokens=3))
    assert r.finish_reason == "length" and r.completion_tokens == 3


def test_json_schema_constrained_output_is_json(provider):
    import json

    schema = {
        "type": "object",
        "properties": {"decision": {"type": "string", "enum": ["yes", "no"]}},
        "required": ["decision"],
        "additionalProperties": False,  # JSON Schema allows other keys unless told not to
    }
    r = provider.generate(
        req(
            provider,
            "Is the sky blue? Answer as JSON.",
            temperature=0.0,
            max_tokens=20,
            response_format={"type": "json_object", "schema": schema},
        )
    )
    assert json.loads(r.text)["decision"] in ("yes", "no")


def test_context_budget_boundary(provider):
    msgs = [{"role": "user", "content": "hello " * 50}]
    n = provider.prompt_tokens(msgs)
    fits = GenerationRequest("llama_cpp", provider.model_name, tuple(msgs), {"max_tokens": 512 - n, "temperature": 0.0})
    over = GenerationRequest("llama_cpp", provider.model_name, tuple(msgs), {"max_tokens": 513 - n})
    with pytest.raises(ContextBudgetError, match=f"prompt \\({n} tokens\\)"):
        provider.generate(over)
    assert (
        provider.generate(
            GenerationRequest("llama_cpp", provider.model_name, tuple(msgs), {"max_tokens": 1, "temperature": 0.0})
        ).completion_tokens
        == 1
    )
    assert fits.params["max_tokens"] + n == 512


def test_file_ingestion_is_rejected(provider):
    from metamorph.providers.base import Document

    r = GenerationRequest(
        "llama_cpp",
        provider.model_name,
        ({"role": "user", "content": "x"},),
        {},
        ingestion="openai_file",
        document=Document(b"x", "text/plain", "x.txt"),
    )
    with pytest.raises(ConfigError, match="only inline"):
        provider.generate(r)
