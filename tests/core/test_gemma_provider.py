"""The second local model, Gemma 3 270M (base, no chat template), through our llama_cpp provider."""

import pytest

from metamorph.errors import ConfigError
from metamorph.models import load_registry
from metamorph.providers.base import GenerationRequest
from metamorph.providers.llama_cpp import GEMMA3_FILE, LlamaCppProvider, gguf_path
from tests.conftest import REPO

pytestmark = pytest.mark.llm


@pytest.fixture(scope="module")
def gemma():
    return LlamaCppProvider(gguf_path(GEMMA3_FILE), n_ctx=512, chat_format="gemma")


MSGS = ({"role": "system", "content": "Answer with one word."}, {"role": "user", "content": "Is water wet?"})


def test_assembled_file_is_the_published_one(gemma):
    assert gemma.model_path.stat().st_size == 253_113_024
    assert gemma.model_version == "sha256:a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


def test_gemma_answers_through_the_registry_entry(gemma):
    spec = {m.id: m for m in load_registry(REPO / "config" / "models.yaml")}["gemma3-270m"]
    params = {"chat_format": spec.chat_format, "temperature": 0.0, "max_tokens": 12, "seed": 0}
    a = gemma.generate(GenerationRequest("llama_cpp", spec.model, MSGS, params))
    b = gemma.generate(GenerationRequest("llama_cpp", spec.model, MSGS, params))
    assert a.text and a.text == b.text  # not empty (the gemma format builds the prompt), and greedy is repeatable
    # the system message is folded into the user turn, and counted the way llama.cpp counts it (BOS included)
    assert a.prompt_tokens == gemma.prompt_tokens(list(MSGS))
    assert 1 <= a.completion_tokens <= 12 and a.model_id == GEMMA3_FILE


def test_request_must_name_the_providers_chat_format(gemma):
    with pytest.raises(ConfigError, match="chat_format None differs"):
        gemma.generate(GenerationRequest("llama_cpp", GEMMA3_FILE, MSGS, {"max_tokens": 4}))


def test_without_a_chat_format_the_missing_template_is_named():
    bare = LlamaCppProvider(gguf_path(GEMMA3_FILE), n_ctx=256)
    with pytest.raises(ConfigError, match="no chat template.*chat_format"):
        bare.prompt_tokens([{"role": "user", "content": "x"}])


def test_loading_gemma_writes_nothing_to_stderr():
    """llama.cpp prints "llama_kv_cache_iswa: using full-size SWA cache (ref: …)" on stderr while it
    loads Gemma 3, past llama-cpp-python's verbose=False; a user can do nothing about it."""
    import subprocess
    import sys

    code = (
        "from metamorph.providers.llama_cpp import GEMMA3_FILE, LlamaCppProvider, gguf_path\n"
        "from metamorph.providers.base import GenerationRequest\n"
        "p = LlamaCppProvider(gguf_path(GEMMA3_FILE), n_ctx=512, chat_format='gemma')\n"
        "r = p.generate(GenerationRequest('llama_cpp', GEMMA3_FILE, ({'role': 'user', 'content': 'Hi'},),\n"
        "               {'chat_format': 'gemma', 'max_tokens': 2, 'temperature': 0.0, 'seed': 0}))\n"
        "print(r.completion_tokens)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stderr == "" and out.stdout.strip() in ("1", "2")
