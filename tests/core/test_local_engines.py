"""The two local engines (xllamacpp, the default; llama-cpp-python, the fallback): each one
deterministic per request on the packaged models and every study's real prompts, its prompt token
count equal to what the call reports, its identity in the cache key, the registry fingerprint and
the result; the registry's ``engine`` / ``prefix_reuse`` settings checked; a missing chat template
read from the GGUF metadata."""

import json
from importlib import metadata

import pytest

from metamorph.errors import ConfigError, RegistryError
from metamorph.models import ModelSpec, load_registry, parse_registry
from metamorph.providers import engines
from metamorph.providers.base import GenerationRequest, canonical_json, sha256_hex
from metamorph.providers.llama_cpp import (
    GEMMA3_FILE,
    SMOLLM2_FILE,
    LlamaCppProvider,
    compact_json_grammar,
    default_gguf_path,
    gguf_chat_template,
    gguf_path,
)
from tests.conftest import REPO

ENGINES = tuple(engines.ENGINES)


def registry() -> dict[str, ModelSpec]:
    return {m.id: m for m in load_registry(REPO / "config" / "models.yaml")}


def with_engine(request: GenerationRequest, engine: str) -> GenerationRequest:
    """``request`` computed by ``engine`` (the registry's params.engine; absent = the default)."""
    params = {k: v for k, v in request.params.items() if k != "engine"}
    if engine != engines.DEFAULT_ENGINE:
        params["engine"] = engine
    return GenerationRequest(
        request.provider, request.model, request.messages, params, renderer_version=request.renderer_version
    )


def study_requests(spec: ModelSpec) -> list[GenerationRequest]:
    """The first real request of each study's first generation step for ``spec`` at the default options
    (what ``metamorph plan`` plans: the format study's construct documents with the entry's
    constrained decoding, the wrapper study's BoolQ prompts, OrderProbe's free-text prompts,
    WorkflowPerturb's generator), each study's decoding parameters as its run sends them."""
    from metamorph.study import studies

    out = []
    for study in studies().values():
        steps = study.cost_steps(spec, study.values())
        out += steps[0].requests()[:1]
    return out


def texts(results) -> list[tuple]:
    return [(r.text, r.finish_reason, r.prompt_tokens, r.completion_tokens) for r in results]


@pytest.mark.llm
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("model_id", ["smollm2", "gemma3-270m"])
def test_each_engine_is_deterministic_per_request_on_every_studys_prompts(engine, model_id):
    spec = registry()[model_id]
    reqs = [with_engine(r, engine) for r in study_requests(spec)]
    assert len(reqs) == 4
    first = LlamaCppProvider(gguf_path(spec.model), chat_format=spec.chat_format, engine=engine)
    try:
        forward = texts(first.generate(r) for r in reqs)
        counted = [first.request_prompt_tokens(r) for r in reqs]
    finally:
        first.close()
    assert all(t[0] for t in forward)
    # the count the cost plan and the context check use is the count the engine reports
    assert counted == [t[2] for t in forward]
    again = LlamaCppProvider(gguf_path(spec.model), chat_format=spec.chat_format, engine=engine)
    try:  # a fresh engine, the requests in reverse order: each completion depends on its request only
        results = [again.generate(r) for r in reversed(reqs)][::-1]
    finally:
        again.close()
    assert texts(results) == forward
    assert {r.system_fingerprint for r in results} == {f"{engine} {metadata.version(engines.ENGINES[engine])}"}


def test_the_engine_and_its_version_are_in_a_local_requests_key_only():
    msgs = ({"role": "user", "content": "hi"},)
    local = GenerationRequest("llama_cpp", "m.gguf", msgs, {"temperature": 0.0})
    fallback = GenerationRequest("llama_cpp", "m.gguf", msgs, {"temperature": 0.0, "engine": "llama-cpp-python"})
    # the versions scripts/bootstrap.sh installs (pyproject.toml pins them)
    assert local.key_material()["engine"] == "xllamacpp 2026.10.11549; full-size SWA cache"
    assert fallback.key_material()["engine"] == "llama-cpp-python 0.3.36"
    assert local.cache_key() != fallback.cache_key()
    assert fallback.key_material()["params"] == {"temperature": 0.0}
    spelled_out = GenerationRequest(
        "llama_cpp", "m.gguf", msgs, {"temperature": 0.0, "engine": "xllamacpp", "prefix_reuse": False}
    )
    assert spelled_out.cache_key() == local.cache_key()
    # prefix reuse changes no completion, so no key, with either engine
    for params in ({"temperature": 0.0}, {"temperature": 0.0, "engine": "llama-cpp-python"}):
        keys = {
            GenerationRequest("llama_cpp", "m.gguf", msgs, {**params, "prefix_reuse": v}).cache_key()
            for v in (True, False)
        }
        assert keys == {GenerationRequest("llama_cpp", "m.gguf", msgs, params).cache_key()}
    # with a system prompt, either engine evaluates the prompt in segments: another computation, another key
    system = ({"role": "system", "content": "Be brief."}, *msgs)
    split = GenerationRequest("llama_cpp", "m.gguf", system, {"temperature": 0.0, "engine": "llama-cpp-python"})
    assert (
        split.key_material()["engine"]
        == "llama-cpp-python 0.3.36; prefill system prompt, 2 paragraphs, rest, last token"
    )
    assert GenerationRequest("llama_cpp", "m.gguf", system, {}).key_material()["engine"] == (
        "xllamacpp 2026.10.11549; full-size SWA cache; prefill system prompt, 2 paragraphs, rest, last token"
    )
    api = GenerationRequest("openai", "gpt-4o-mini", msgs, {"temperature": 0.0})
    assert "engine" not in api.key_material()
    literal = {
        "provider": "openai",
        "base_url": None,
        "model": "gpt-4o-mini",
        "params": {"temperature": 0.0},
        "messages": [{"role": "user", "content": "hi"}],
        "ingestion": "inline",
        "document": None,
        "renderer_version": None,
        "repeat_index": 1,
    }
    assert api.cache_key() == sha256_hex(canonical_json(literal).encode())


def test_a_missing_engine_is_one_line_saying_what_to_install(monkeypatch):
    monkeypatch.setitem(engines.ENGINES, "xllamacpp", "metamorph-no-such-distribution")
    engines.engine_identity.cache_clear()
    try:
        req = GenerationRequest("llama_cpp", "m.gguf", ({"role": "user", "content": "hi"},), {})
        with pytest.raises(ConfigError) as e:
            req.cache_key()
        assert str(e.value) == (
            "the local engine xllamacpp is not installed "
            "(pip install xllamacpp==2026.10.11549; bash scripts/bootstrap.sh does it)"
        )
        spec = ModelSpec(id="smol", provider="llama_cpp", model="SmolLM2-135M-Instruct.Q4_1.gguf")
        assert len(spec.fingerprint()) == 64  # the registry still loads and fingerprints
    finally:
        engines.engine_identity.cache_clear()


def test_the_fingerprint_of_a_local_entry_names_its_engine_and_version():
    smol = ModelSpec(id="smol", provider="llama_cpp", model="SmolLM2-135M-Instruct.Q4_1.gguf")
    material = {
        "engine": "xllamacpp 2026.10.11549; full-size SWA cache; prefill system prompt, 2 paragraphs, rest, last token",
        "id": "smol",
        "provider": "llama_cpp",
        "model": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "ingestion": ["inline"],
        "base_url": None,
        "api_key_env": None,
        "params": {},
    }
    assert smol.fingerprint() == sha256_hex(canonical_json(material).encode())
    fallback = ModelSpec(
        id="smol", provider="llama_cpp", model="SmolLM2-135M-Instruct.Q4_1.gguf", params={"engine": "llama-cpp-python"}
    )
    # params.engine is said by the engine field, with the way that engine evaluates a prompt
    material.update(engine="llama-cpp-python 0.3.36; prefill system prompt, 2 paragraphs, rest, last token")
    assert fallback.fingerprint() == sha256_hex(canonical_json(material).encode())
    for reuse in (True, False):
        spelled_out = ModelSpec(
            id="smol",
            provider="llama_cpp",
            model="SmolLM2-135M-Instruct.Q4_1.gguf",
            params={"engine": "xllamacpp", "prefix_reuse": reuse},
        )
        assert spelled_out.fingerprint() == smol.fingerprint()  # the default engine, prefix reuse: the same entry


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"params": {"engine": "vllm"}}, "params.engine must be one of ['xllamacpp', 'llama-cpp-python'], got 'vllm'"),
        ({"params": {"prefix_reuse": "yes"}}, "params.prefix_reuse must be true or false, got 'yes'"),
        (
            {"provider": "openai", "model": "gpt-4o-mini", "params": {"engine": "xllamacpp"}},
            "params.engine is a llama_cpp setting (the local engine)",
        ),
        (
            {"provider": "openai", "model": "gpt-4o-mini", "params": {"prefix_reuse": True}},
            "params.prefix_reuse is a llama_cpp setting (the local engine's prompt cache)",
        ),
        (
            {"study_params": {"format_robustness": {"engine": "llama-cpp-python"}}},
            "engine belongs in params (one per model)",
        ),
    ],
)
def test_bad_engine_settings_are_refused_at_load(entry, problem):
    base = {"id": "m", "provider": "llama_cpp", "model": "SmolLM2-135M-Instruct.Q4_1.gguf"}
    with pytest.raises(RegistryError) as e:
        parse_registry({"models": [{**base, **entry}]}, source="models.yaml")
    assert problem in str(e.value)


def test_the_chat_template_is_read_from_the_gguf_metadata(tmp_path):
    smol = gguf_chat_template(default_gguf_path())
    assert smol.startswith("{% for message in messages %}") and "<|im_start|>" in smol
    assert gguf_chat_template(gguf_path(GEMMA3_FILE)) is None  # Gemma 3 270M ships none
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(default_gguf_path().read_bytes()[:4096])
    with pytest.raises(ConfigError, match="cut.gguf is not a readable GGUF file"):
        gguf_chat_template(cut)
    text = tmp_path / "model.gguf"
    text.write_text("not a model, just text that is long enough")
    with pytest.raises(ConfigError, match=r"model.gguf is not a GGUF file \(version 2 or 3\)"):
        gguf_chat_template(text)


@pytest.mark.llm
@pytest.mark.parametrize("engine", ENGINES)
def test_a_file_without_a_template_needs_a_chat_format_with_either_engine(engine):
    bare = LlamaCppProvider(gguf_path(GEMMA3_FILE), n_ctx=256, engine=engine)
    with pytest.raises(ConfigError, match=r"gemma-3-270m-q4_k_m.gguf has no chat template.*params.chat_format"):
        bare.prompt_tokens([{"role": "user", "content": "hi"}])
    bare.close()


@pytest.mark.llm
def test_a_request_for_another_engine_is_refused():
    p = LlamaCppProvider(n_ctx=256)
    req = GenerationRequest(
        "llama_cpp", p.model_name, ({"role": "user", "content": "hi"},), {"engine": "llama-cpp-python"}
    )
    with pytest.raises(ConfigError, match="request engine 'llama-cpp-python' differs from the provider's 'xllamacpp'"):
        p.generate(req)


def test_a_response_format_becomes_a_compact_llguidance_grammar():
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    expected = (
        "%llguidance {}\nstart: %json "
        '{"properties": {"a": {"type": "string"}}, "required": ["a"], "type": "object", '
        '"x-guidance": {"item_separator": ", ", "key_separator": ": ", "whitespace_flexible": false}}'
    )
    assert compact_json_grammar({"type": "json_object", "schema": schema}) == expected
    assert compact_json_grammar({"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}) == expected
    assert compact_json_grammar({"type": "json_object"}) == (
        "%llguidance {}\nstart: %json "
        '{"type": "object", "x-guidance": {"item_separator": ", ", "key_separator": ": ", "whitespace_flexible": false}}'
    )
    with pytest.raises(ConfigError, match="response_format type 'text' is not json_object or json_schema"):
        compact_json_grammar({"type": "text"})
    with pytest.raises(ConfigError, match="schema must be a mapping"):
        compact_json_grammar({"type": "json_schema", "json_schema": {}})


@pytest.mark.llm
def test_xllamacpp_json_replies_are_compact_on_both_packaged_models():
    """The same constrained request: one spelling of the JSON (", " and ": ", no newlines)."""
    schema = {
        "type": "object",
        "properties": {"decision": {"type": "string", "maxLength": 40}},
        "required": ["decision"],
        "additionalProperties": False,
    }
    msgs = ({"role": "user", "content": "Is the sky blue? Reply in JSON with a decision, yes or no."},)
    for path, chat_format in ((default_gguf_path(), None), (gguf_path(GEMMA3_FILE), "gemma")):
        p = LlamaCppProvider(path, n_ctx=512, chat_format=chat_format)
        params = {"temperature": 0.0, "max_tokens": 24, "response_format": {"type": "json_object", "schema": schema}}
        try:
            text = p.generate(
                GenerationRequest(
                    "llama_cpp", p.model_name, msgs, {**params, **({"chat_format": chat_format} if chat_format else {})}
                )
            ).text
        finally:
            p.close()
        assert text.startswith('{"decision": "') and text.endswith('"}') and "\n" not in text, text


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return int(f.read().split("VmRSS:")[1].split()[0]) / 1024


@pytest.mark.llm
def test_xllamacpps_memory_stays_flat_over_many_distinct_prompts():
    """llama.cpp's server stores each prompt's state in host memory by default (up to 8 GiB; about
    9 MB per 130-token SmolLM2 prompt, 270 MB after 30 calls measured): with that store off, 30
    distinct prompts grow the worker process by well under the size of five stored states."""
    p = LlamaCppProvider(gguf_path(SMOLLM2_FILE), n_ctx=512)
    try:
        p.generate(
            GenerationRequest("llama_cpp", SMOLLM2_FILE, ({"role": "user", "content": "hi"},), {"max_tokens": 2})
        )
        (worker,) = p._pool.pids()
        before = _rss_mb(worker)
        for i in range(30):
            text = f"Document {i}: " + " ".join(f"word{j}" for j in range(120))
            msgs = ({"role": "user", "content": text},)
            p.generate(GenerationRequest("llama_cpp", SMOLLM2_FILE, msgs, {"max_tokens": 4, "temperature": 0.0}))
        grown = _rss_mb(worker) - before
    finally:
        p.close()
    assert grown < 45, f"{grown:.0f} MB"


def mapped_ggufs(pid: int) -> set[str]:
    """The GGUF files process ``pid`` has mapped (llama.cpp maps the model file it loads)."""
    with open(f"/proc/{pid}/maps") as f:
        return {line.split(maxsplit=5)[5].strip() for line in f if line.rstrip().endswith(".gguf")}


@pytest.mark.llm
@pytest.mark.parametrize("engine", ENGINES)
def test_each_model_is_computed_in_a_process_that_loads_no_other(engine):
    """llama.cpp's LLGuidance sampler caches the last tokenizer it built in a process-wide static
    keyed by the vocabulary's address: a process that closed SmolLM2 and loaded Gemma 3 at the same
    address aborted in the engine test (about one run in three) and could constrain a model with
    another's tokens. So no model is loaded in the calling process, whatever ``workers`` says:
    each provider's model lives in a worker process of its own, for that process's life."""
    import os

    spec = registry()
    seen = []
    for model_id in ("smollm2", "gemma3-270m", "smollm2"):
        s = spec[model_id]
        (req,) = [with_engine(r, engine) for r in study_requests(s)[:1]]  # the format study's JSON reply
        p = LlamaCppProvider(gguf_path(s.model), chat_format=s.chat_format, engine=engine, workers=1)
        try:
            assert isinstance(json.loads(p.generate(req).text), dict)  # the study's JSON reply
            assert mapped_ggufs(os.getpid()) == set()
            (worker,) = p._pool.pids()
            assert mapped_ggufs(worker) == {str(gguf_path(s.model))}
            seen.append(worker)
        finally:
            p.close()
    assert len(set(seen)) == 3
