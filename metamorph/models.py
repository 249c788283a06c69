"""The model registry: which models the studies evaluate, one dynamic partition each.

The registry is a YAML file (default ``config/models.yaml``)::

    models:
      - id: smollm2        # the partition key: [a-z0-9._-]+
        provider: llama_cpp              # llama_cpp | openai | anthropic | openai_compatible
        model: SmolLM2-135M-Instruct.Q4_1.gguf
        ingestion: [inline]              # document-format study ingestion paths
        status: approved                 # approved (the baseline of upgrade verdicts) | candidate
      - id: gemma3-270m
        provider: llama_cpp
        model: gemma-3-270m-q4_k_m.gguf
        status: candidate
        n_threads: 2                     # llama_cpp only: CPU threads (default 1; see below)
        params:
          chat_format: gemma             # llama_cpp only: the llama.cpp chat format (file has no template)
      - id: gpt-4o-mini
        provider: openai
        model: gpt-4o-mini
        ingestion: [inline, openai_file]
        api_key_env: OPENAI_API_KEY      # the NAME of the variable; the key itself never appears
      - id: qwen-long
        provider: openai_compatible
        base_url: https://dashscope.example/compatible-mode/v1
        model: qwen-long
        api_key_env: DASHSCOPE_API_KEY
        max_concurrency: 2
      - id: claude-batch
        provider: anthropic
        model: claude-haiku-4-5
        params: {max_tokens: 512}
        execution:                       # optional; default {mode: sync}
          mode: batch                    # sync (one HTTP call per request) | batch (provider batch API)
          poll_interval_s: 60            # seconds between status polls of a submitted batch
          max_wait_s: 86400              # stop polling after this long (a rerun resumes the batch)
          max_requests: 10000            # requests per submitted batch (more are split)
        price_per_mtok: {input: 0.40, output: 1.20}   # USD per million tokens (cost planning)
      - id: my-doc-service               # a workflow under test: your own HTTP service
        provider: http
        url: http://127.0.0.1:8000/ask   # no credential in it: headers come from the environment
        version: "1.4.0"                 # part of the fingerprint and every cache key
        send: multipart                  # multipart (a file upload) | json (the document base64 in a field)
        fields: {document: file, prompt: prompt, seed: seed}   # the request's field names (these are the defaults)
        reply_pointer: /answer           # RFC 6901 pointer to the reply text in the JSON response
        extracted_pointer: /extracted_text   # optional: pointer to the text the service extracted (trace shows it)
        headers_env: {Authorization: DOC_SERVICE_TOKEN}        # header -> the NAME of its variable
        timeout_s: 120
        seeded: true                     # the service takes a seed (replicates then get theirs)
        deterministic: true              # its reply is a function of the request alone
        price_per_call: 0.002            # USD per call (cost planning, budget)
      - id: my-pipeline                  # a workflow under test: a Python function
        provider: python
        function: mypackage.pipeline:answer   # called with (document, prompt, seed) -> reply text
        version: "7"
        workers: 2                       # worker processes calling it at once (default 1)
        blocking_metrics:                # optional: the metrics whose regression blocks (default: all)
          <study>: [accuracy]            # per study package; a study not named blocks on every compared metric; [] never

A *workflow* of the document-format study is a model with one ingestion path
(``<model id>/<ingestion>``). An ``http`` or ``python`` entry is the user's own workflow as the
system under test (:data:`WORKFLOW_PROVIDERS`, :class:`WorkflowConfig`): it receives the rendered
document as a file (ingestion ``upload``, its only path) with the task prompt and, when ``seeded``,
the replicate's seed, and returns the reply text. Only a study that sends documents can use one
(:func:`check_study_kinds`). ``model`` defaults to the ``url`` / ``function``; ``version`` (required)
is part of the fingerprint and every cache key, so a new version of the service is a new candidate. Each entry's :meth:`ModelSpec.fingerprint` lets the registry
sensor notice a changed entry (e.g. a new model snapshot) and re-evaluate that partition.

``status`` says which entry upgrade verdicts compare against: the one ``approved`` entry is the
baseline, ``candidate`` entries (the default) are compared with it
(:func:`approved_baseline`, :mod:`metamorph.comparison`). Promoting a candidate changes no
output, so ``status`` is not part of the fingerprint.

``execution`` (:class:`ExecutionConfig`) chooses how misses are sent: ``sync`` calls the
provider once per request; ``batch`` (openai, openai_compatible, anthropic) submits them as a
provider batch job and polls it (:mod:`metamorph.batch`). Both land under the same generation
keys, so ``execution`` is not part of the fingerprint either.
``price_per_mtok`` (optional, API models only) is the price in USD per million input and output
tokens, used by the cost plan (:mod:`metamorph.costplan`) and the budget guard; a local
``llama_cpp`` model costs 0 and takes no price. A price changes no output, so it is not part of
the fingerprint either.
``n_threads`` (optional, ``llama_cpp`` only, default 1) is the number of CPU threads llama.cpp uses
for decoding and prompt processing alike. The default keeps a machine with few cores that also runs Dagster,
tests or a second model responsive: llama.cpp's own default (every core for prompt batches) spun on
its thread barrier when another process held a core. On idle cores more threads are faster —
measured on two idle cores: 16 SmolLM2 format-study calls (~1,000-token
prompts) took 63.7 s with one thread and 49.7 s with prompt processing on both cores (1.28×;
``benchmarks/generation_overhead.py``).
Threads change how fast, not what is generated (greedy decoding gives the same completion; tested),
so ``n_threads`` is not part of the fingerprint either.
``study_params`` (optional) maps a study (its package name under ``metamorph/studies/``) to
decoding parameters that apply in that study only, over ``params`` (:meth:`ModelSpec.params_for`):
the embedded default samples in the document-format study (``temperature: 0.7``, so its k repeats
are independent draws) and keeps the other studies' paper settings. It shapes outputs, so it is
part of the fingerprint (when given).
``deterministic`` (optional, API providers only, default false) declares that the endpoint's reply
is a function of the request alone (e.g. a self-hosted server with greedy decoding and batch size
one), so the replicates of a request — the format study's k repeats and routed re-runs, the judge's
three calls — are one call (:mod:`metamorph.replicates`). API backends are not bit-reproducible even
at temperature 0, hence the default; a ``llama_cpp`` entry takes no such setting (the provider
decides per request: greedy or seeded decoding is deterministic). It changes what the replicates
measure, so ``deterministic: true`` is part of the fingerprint.
``blocking_metrics`` (optional; study → metric names) chooses which of a candidate's regressions fail
its studies' ``model_comparison`` check and make ``metamorph verdict`` exit 1 (:mod:`metamorph.verdict`);
without it every compared metric of every study blocks. It changes no output: not in the fingerprint.
``params.engine`` (optional, ``llama_cpp`` only) names the engine that runs the GGUF:
``xllamacpp`` (the default; a prebuilt wheel) or ``llama-cpp-python`` (built from source; the
fallback) — :mod:`metamorph.providers.engines`. Each engine version gives its own completions, so
the engine and its installed version are part of every request's cache key and of the entry's
fingerprint (upgrading xllamacpp re-evaluates the entry). ``params.prefix_reuse`` (optional,
``llama_cpp`` only, default true) lets either engine keep the KV state of a prompt's leading
segments (the study's system prompt and instructions) for the next prompt that starts with them
instead of computing them again; both engines evaluate those segments each as a batch of its own
whether or not they reuse them, so a completion is the same either way and the setting is in no key
or fingerprint (:class:`metamorph.providers.llama_cpp.LlamaCppProvider`).
``workers`` (optional, ``llama_cpp`` only, default: the cores this process may use divided by
``n_threads``, at least 1) is the number of
model contexts computing requests at once, each in its own worker process with ``n_threads``
threads (:mod:`metamorph.providers.llama_workers`); ``workers: 1`` is one such process (a model
is never computed in the calling process). A completion is byte-identical whichever worker
computes it (tested on the packaged models), so ``workers`` is not part of the fingerprint either.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import yaml

from metamorph.datasets import read_text
from metamorph.errors import ConfigError, RegistryError, looks_like_secret
from metamorph.providers.base import DECODING_PARAMS, INGESTION_PATHS, canonical_json, sha256_hex
from metamorph.providers.engines import ENGINES, engine_key, engine_name, local_params

__all__ = [
    "BATCH_PROVIDERS",
    "DEFAULT_FIELDS",
    "EXECUTION_MODES",
    "MAX_LOCAL_PARALLEL",
    "MAX_NAME_CHARS",
    "PROVIDERS",
    "SEND_MODES",
    "STATUSES",
    "WORKFLOW_PROVIDERS",
    "ExecutionConfig",
    "ModelSpec",
    "Price",
    "WorkflowConfig",
    "approved_baseline",
    "check_study_kinds",
    "load_registry",
    "local_engine",
    "parse_registry",
]

PROVIDERS = ("llama_cpp", "openai", "anthropic", "openai_compatible", "http", "python")
#: Providers that are a user's own workflow under test rather than a model endpoint.
WORKFLOW_PROVIDERS = ("http", "python")
#: How an ``http`` workflow receives the document: a multipart file upload or a JSON field (base64).
SEND_MODES = ("multipart", "json")
#: The request fields of an ``http`` workflow and their default names (registry ``fields``).
DEFAULT_FIELDS = {"document": "file", "prompt": "prompt", "seed": "seed"}
_ID = re.compile(r"^[a-z0-9][a-z0-9._-]{0,79}$")
_DEFAULT_KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
STATUSES = ("approved", "candidate")
_INGESTION_OK = {
    "llama_cpp": {"inline"},
    "openai": {"inline", "openai_file"},
    "anthropic": {"inline", "anthropic_document"},
    "openai_compatible": {"inline"},
    "http": {"upload"},
    "python": {"upload"},
}


EXECUTION_MODES = ("sync", "batch")
#: Providers with a batch API (OpenAI Batch on /v1/chat/completions; Anthropic Message Batches).
BATCH_PROVIDERS = ("openai", "openai_compatible", "anthropic")


@dataclass(frozen=True)
class ExecutionConfig:
    """How a model's generation requests are executed (registry key ``execution``).

    Attributes:
        mode: ``sync`` (one HTTP call per request, with retries) or ``batch`` (one provider batch
            job per ``max_requests`` misses: OpenAI Batch / Anthropic Message Batches, results in
            the generation cache under the same keys as ``sync``).
        poll_interval_s: seconds between two status polls of the open batches (> 0).
        max_wait_s: seconds a run polls before it gives up and returns the unfinished requests as
            errors that are *not* stored (the batch stays persisted; a rerun resumes polling it).
        max_requests: requests per batch job (OpenAI allows 50,000, Anthropic 100,000).
    """

    mode: str = "sync"
    poll_interval_s: float = 60.0
    max_wait_s: float = 86400.0
    max_requests: int = 10000


@dataclass(frozen=True)
class Price:
    """A model's price in USD per million tokens: ``input`` (prompt) and ``output`` (completion);
    ``per_call``: USD per call (a workflow's ``price_per_call``; its token prices are 0)."""

    input: float
    output: float
    per_call: float = 0.0

    def cost_usd(self, input_tokens: int, output_tokens: int, calls: int = 0) -> float:
        """USD for ``input_tokens`` prompt and ``output_tokens`` completion tokens and ``calls`` calls."""
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000 + calls * self.per_call


@dataclass(frozen=True)
class WorkflowConfig:
    """How an ``http`` or ``python`` workflow under test is called (registry keys of the same names).

    Attributes:
        version: the workflow's version (text); part of the fingerprint and of every cache key.
        seeded: the workflow takes a seed; each replicate is then sent its own
            (:func:`metamorph.replicates.seeded`). Unseeded, no seed is sent.
        send: ``http``: ``multipart`` (the document as a file upload with its file name and media
            type) or ``json`` (a JSON body; the document as ``{"filename", "media_type",
            "content_base64"}`` in its field).
        fields: ``http``: request field names of ``document``, ``prompt`` and ``seed``.
        reply_pointer: ``http``: RFC 6901 JSON pointer to the reply text in the response body;
            ``python`` with ``extracted_pointer``: to the reply in the mapping the function returns.
        extracted_pointer: optional RFC 6901 JSON pointer to the text the workflow extracted from
            the upload (what its model read): in the response body (``http``), or in the mapping the
            function returns (``python``; the function then returns a mapping, not the reply text).
            Stored with each generation (``extracted_text``) and printed by ``metamorph trace``;
            ``None``: not recorded.
        headers_env: ``http``: header name -> the NAME of the environment variable holding its value.
        timeout_s: ``http``: seconds per call (connect, read, write).
        function: ``python``: ``package.module:function``.
    """

    version: str
    seeded: bool = False
    send: str = "multipart"
    fields: tuple[tuple[str, str], ...] = tuple(DEFAULT_FIELDS.items())
    reply_pointer: str = "/answer"
    headers_env: tuple[tuple[str, str], ...] = ()
    timeout_s: float = 120.0
    function: str | None = None
    extracted_pointer: str | None = None

    def field(self, name: str) -> str:
        """The request field name of ``document``, ``prompt`` or ``seed``."""
        return dict(self.fields)[name]

    def io_key(self) -> dict[str, Any] | None:
        """How the request is sent and the reply read, where it differs from the defaults
        (``send: multipart``, :data:`DEFAULT_FIELDS`, ``reply_pointer: /answer``): the part of every
        request's cache key beside ``version`` (``None``: all defaults, the key has no such part)."""
        out: dict[str, Any] = {}
        if self.send != "multipart":
            out["send"] = self.send
        if dict(self.fields) != DEFAULT_FIELDS:
            out["fields"] = dict(self.fields)
        if self.reply_pointer != "/answer":
            out["reply_pointer"] = self.reply_pointer
        return out or None

    def identity(self) -> dict[str, Any]:
        """What shapes the workflow's replies (the fingerprint's part): everything but ``timeout_s``."""
        return {
            "version": self.version,
            "seeded": self.seeded,
            "send": self.send,
            "fields": dict(self.fields),
            "reply_pointer": self.reply_pointer,
            "headers_env": dict(self.headers_env),
            "function": self.function,
            **({"extracted_pointer": self.extracted_pointer} if self.extracted_pointer is not None else {}),
        }


@dataclass(frozen=True)
class ModelSpec:
    """One registry entry. ``params`` are default decoding parameters for every study (for
    llama_cpp also ``chat_format``); ``status`` is ``approved`` or ``candidate``;
    ``price_per_mtok`` the :class:`Price` of an API model (``None``: not given; local models: ``None``).

    ``source`` and ``entry`` (the registry file and the 1-based entry of ``models``) locate the
    entry for error messages; they are not part of its identity (equality, fingerprint)."""

    id: str
    provider: str
    model: str
    ingestion: tuple[str, ...] = ("inline",)
    base_url: str | None = None
    api_key_env: str | None = None
    max_concurrency: int = 4
    params: dict[str, Any] = field(default_factory=dict)
    status: str = "candidate"
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)
    price_per_mtok: Price | None = None
    n_threads: int = 1
    deterministic: bool = False
    study_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    blocking_metrics: dict[str, tuple[str, ...]] | None = None
    workers: int | None = None
    workflow: WorkflowConfig | None = None
    price_per_call: float | None = None
    source: str | None = field(default=None, compare=False, repr=False)
    entry: int | None = field(default=None, compare=False, repr=False)

    @property
    def price(self) -> Price | None:
        """The cost plan's price: ``price_per_mtok``, or a workflow's ``price_per_call`` (``None``: not given)."""
        if self.price_per_call is not None:
            return Price(0.0, 0.0, self.price_per_call)
        return self.price_per_mtok

    @property
    def version(self) -> str | None:
        """A workflow's declared ``version`` (``None`` for a model endpoint)."""
        return self.workflow.version if self.workflow else None

    @property
    def chat_format(self) -> str | None:
        """The llama.cpp chat format of a llama_cpp entry (``params.chat_format``), else None."""
        return self.params.get("chat_format")

    def params_for(self, study: str) -> dict[str, Any]:
        """The entry's decoding parameters in ``study``: ``params`` updated with
        ``study_params[study]`` (a ``null`` there unsets the parameter, as in ``params``)."""
        return {**self.params, **self.study_params.get(study, {})}

    def fingerprint(self) -> str:
        """sha256 of the entry's canonical JSON (changes when any field that shapes outputs
        changes; ``status``, ``max_concurrency``, ``execution``, ``price_per_mtok``,
        ``n_threads`` and ``workers`` do not). A ``llama_cpp`` entry adds the engine that computes
        it and the engine's installed version (:func:`local_engine`), so an engine upgrade is a
        changed entry to the registry sensor."""
        local = self.provider == "llama_cpp"
        engine = {"engine": local_engine(self.params)} if local else {}
        return sha256_hex(
            canonical_json(
                {
                    **engine,
                    "id": self.id,
                    "provider": self.provider,
                    "model": self.model,
                    "ingestion": list(self.ingestion),
                    "base_url": self.base_url,
                    "api_key_env": self.api_key_env,
                    "params": local_params(self.params) if local else self.params,
                    **({"deterministic": True} if self.deterministic else {}),
                    **({"study_params": self.study_params} if self.study_params else {}),
                    **({"workflow": self.workflow.identity()} if self.workflow else {}),
                }
            ).encode()
        )

    def workflow_id(self, ingestion: str) -> str:
        return f"{self.id}/{ingestion}"


def local_engine(params: dict[str, Any]) -> str:
    """The engine of a ``llama_cpp`` entry with ``params`` and its installed version
    and how it evaluates a prompt (:func:`metamorph.providers.engines.engine_key`), or
    ``"<engine> (not installed)"``: the
    fingerprint of an entry stays computable on a machine without its engine (its run fails, saying
    what to install)."""
    name = engine_name(params)
    try:
        return engine_key(name)
    except ConfigError:
        return f"{name} (not installed)"


#: Longest ``id``, ``provider`` or ``model`` value (characters): a model path fits (PATH_MAX).
MAX_NAME_CHARS = 4096

#: Most ``workers`` (processes, each holding the model) or ``n_threads`` a local entry may ask for.
MAX_LOCAL_PARALLEL = 256


def _yaml_kind(v: Any) -> str:
    """How YAML read a value that should have been text: ``the number 493``, ``a list`` ..."""
    if isinstance(v, bool):
        return f"the boolean {str(v).lower()}"
    if isinstance(v, (int, float)):
        return f"the number {v!r}"
    return {dict: "a mapping", list: "a list"}.get(type(v), type(v).__name__)


def parse_registry(data: Any, source: str = "<registry>") -> list[ModelSpec]:
    """Validate a parsed registry document.

    Raises :class:`RegistryError` (a :class:`ConfigError`) naming ``source``, the entry of
    ``models`` (``row``, 1-based) and the key (``field``): not a mapping with a ``models`` list; an
    empty ``models`` list; an entry that is not a mapping or has an unknown key; ``id``, ``provider`` or ``model`` missing,
    not a YAML string (``id: 0755`` is the number 493) or longer than :data:`MAX_NAME_CHARS`; an id that is not a partition key; an unknown provider; ``ingestion`` not a list
    or naming a path the provider lacks; ``openai_compatible`` without ``base_url``;
    ``api_key_env`` (when given, even empty) not an environment variable name (the value is never echoed: it may be a key);
    a control or invisible format character, or white space at an end, in ``model``, ``base_url``,
    ``url``, ``function`` or ``version``; any other key or text value that looks like a secret (:func:`~metamorph.errors.looks_like_secret`;
    field: its key path, e.g. ``params.seed``); ``base_url`` not an ``http(s)`` URL, or carrying a
    credential (``user:password@``, or a query parameter such as ``api-key``, ``token``, ``sig``);
    ``max_concurrency`` not an integer >= 1; ``params`` not a mapping, naming a parameter outside
    :data:`DECODING_PARAMS`, or a numeric parameter that is not a finite number in its range
    (temperature >= 0, top_p in [0, 1], integers top_k >= 0, max_tokens >= 1, seed in [0, 2**31));
    ``execution`` not a mapping of
    known keys, an unknown mode, batch mode for a provider without a batch API, or a setting that is
    not a positive number (field ``execution.<key>``); ``price_per_mtok`` not a mapping of exactly
    ``input`` and ``output`` to numbers >= 0 (field ``price_per_mtok.input`` …), or given for a
    ``llama_cpp`` model (local models cost 0); ``n_threads`` or ``workers`` not an integer from 1 to
    :data:`MAX_LOCAL_PARALLEL` or given for a provider other than ``llama_cpp``; ``deterministic`` not a boolean or given for ``llama_cpp``;
    ``study_params`` not a mapping of a known study to decoding parameters checked as ``params`` (field
    ``study_params.<study>``); ``blocking_metrics`` not a mapping of a known study to a list of that
    study's compared metrics (field ``blocking_metrics.<study>``), or given on the approved entry; a
    second ``status: approved`` entry (field ``status``); a duplicate id; a top-level key
    other than ``models`` (field: the key, masked when it looks like a secret).
    """
    if not isinstance(data, dict) or not isinstance(data.get("models"), list):
        raise RegistryError(source, "expected a mapping with a 'models' list", field="models")
    for key in data:
        if key != "models":  # a stray line (a pasted key, a typo of models) is never ignored
            raise RegistryError(source, "unknown top-level key (a registry holds one key, models)", field=str(key))
    if not data["models"]:  # no partition, no baseline: a run would write its inputs and then fail
        raise RegistryError(source, "the 'models' list is empty; a registry lists at least one model", field="models")
    out: list[ModelSpec] = []
    seen: dict[str, int] = {}
    approved_at: int | None = None
    for i, e in enumerate(data["models"], start=1):

        def bad(problem: str, key: str | None = None) -> RegistryError:
            return RegistryError(source, problem, row=i, field=key)

        if not isinstance(e, dict):
            raise bad("an entry of 'models' must be a mapping")
        unknown = set(e) - {
            "id",
            "provider",
            "model",
            "ingestion",
            "base_url",
            "api_key_env",
            "max_concurrency",
            "params",
            "status",
            "execution",
            "price_per_mtok",
            "n_threads",
            "workers",
            "deterministic",
            "study_params",
            "blocking_metrics",
            *_WORKFLOW_KEYS,
        }
        if unknown:
            raise bad(f"unknown key(s) {sorted(unknown)}", sorted(unknown)[0])
        _refuse_secrets(e, bad)
        _refuse_invisible(e, bad)
        if e.get("provider") in WORKFLOW_PROVIDERS and e.get("model") in (None, ""):
            e = {**e, "model": e.get("url") if e["provider"] == "http" else e.get("function")}
            if e["model"] in (None, ""):
                key = "url" if e["provider"] == "http" else "function"
                raise bad(f"'{key}' is required", key)
        for k in ("id", "provider", "model"):
            if e.get(k) is None or e.get(k) == "":
                raise bad(f"'{k}' is required", k)
            if not isinstance(e[k], str):  # YAML reads 0755 as 493 and 1e3 as 1000.0: never what was typed
                raise bad(f"'{k}' must be text (quote it: YAML read {_yaml_kind(e[k])})", k)
            if len(e[k]) > MAX_NAME_CHARS:
                raise bad(f"'{k}' is {len(e[k]):,} characters long; at most {MAX_NAME_CHARS:,}", k)
        if not _ID.match(str(e["id"])):
            raise bad(f"id {e['id']!r} must match {_ID.pattern} (it is a partition key)", "id")
        if e["provider"] not in PROVIDERS:
            raise bad(f"provider {e['provider']!r} not in {list(PROVIDERS)}", "provider")
        workflow = _parse_workflow(e, bad)
        raw_ingestion = e.get("ingestion") or (["upload"] if workflow else ["inline"])
        if not isinstance(raw_ingestion, list):
            raise bad(f"ingestion must be a list such as [inline], got {type(raw_ingestion).__name__}", "ingestion")
        ingestion = tuple(raw_ingestion)
        wrong = [p for p in ingestion if p not in INGESTION_PATHS or p not in _INGESTION_OK[e["provider"]]]
        if wrong:
            raise bad(f"ingestion {wrong} not available for provider {e['provider']}", "ingestion")
        if workflow and "base_url" in e:
            raise bad(f"a {e['provider']} workflow takes no base_url (an http workflow's address is url)", "base_url")
        if e.get("base_url") is not None and not isinstance(e["base_url"], str):
            raise bad("base_url must be a URL string", "base_url")
        if e.get("base_url"):
            _check_base_url(e["base_url"], bad)
        if e["provider"] == "http":
            e = {**e, "base_url": e["url"]}
        if e["provider"] == "openai_compatible" and not e.get("base_url"):
            raise bad("openai_compatible needs base_url", "base_url")
        status = e.get("status", "candidate")
        if status not in STATUSES:
            raise bad(f"status {status!r:.40} not in {list(STATUSES)}", "status")
        if workflow and "api_key_env" in e:
            raise bad(
                f"a {e['provider']} workflow takes no api_key_env (an http workflow's headers_env names its variables)",
                "api_key_env",
            )
        key_env = e["api_key_env"] if e.get("api_key_env") is not None else _DEFAULT_KEY_ENV.get(e["provider"])
        if key_env is not None and not (isinstance(key_env, str) and re.fullmatch(r"[A-Z_][A-Z0-9_]*", key_env)):
            raise bad("api_key_env must be an environment variable NAME, e.g. OPENAI_API_KEY", "api_key_env")
        conc = e.get("max_concurrency", 1 if e["provider"] in ("llama_cpp", "python") else 4)
        if isinstance(conc, bool) or not isinstance(conc, int) or conc < 1:
            raise bad(f"max_concurrency must be an integer >= 1, got {_shown(conc)}", "max_concurrency")
        params = e.get("params") or {}
        if workflow and (params or e.get("study_params")):
            key = "params" if params else "study_params"
            raise bad(
                f"a {e['provider']} workflow takes no decoding parameters ({key}); it is sent the prompt, the document and its seed",
                key,
            )
        if not isinstance(params, dict):
            raise bad(f"params must be a mapping of decoding parameters, got {type(params).__name__}", "params")
        if "chat_format" in params and (e["provider"] != "llama_cpp" or not isinstance(params["chat_format"], str)):
            raise bad("params.chat_format is a llama_cpp setting (a llama.cpp chat format name)", "params")
        for name, what in (("engine", "the local engine"), ("prefix_reuse", "the local engine's prompt cache")):
            if name in params and e["provider"] != "llama_cpp":
                raise bad(f"params.{name} is a llama_cpp setting ({what})", "params")
        if "engine" in params and not (isinstance(params["engine"], str) and params["engine"] in ENGINES):
            raise bad(f"params.engine must be one of {list(ENGINES)}, got {params['engine']!r:.40}", "params")
        if "prefix_reuse" in params and not isinstance(params["prefix_reuse"], bool):
            raise bad(f"params.prefix_reuse must be true or false, got {params['prefix_reuse']!r:.40}", "params")
        _check_decoding_params(params, "params", bad)
        for key, what in (
            ("n_threads", "CPU threads of the local model"),
            ("workers", "local model contexts computing at once"),
        ):
            if key not in e:
                continue
            if e["provider"] != "llama_cpp" and not (key == "workers" and e["provider"] == "python"):
                raise bad(f"{key} is a llama_cpp setting ({what})", key)
            if isinstance(e[key], bool) or not isinstance(e[key], int) or not 1 <= e[key] <= MAX_LOCAL_PARALLEL:
                raise bad(f"{key} must be an integer from 1 to {MAX_LOCAL_PARALLEL}, got {_shown(e[key])}", key)
        threads = e.get("n_threads", 1)
        deterministic = e.get("deterministic", False)
        if not isinstance(deterministic, bool):
            raise bad("deterministic must be true or false", "deterministic")
        if "deterministic" in e and e["provider"] == "llama_cpp":  # workflows declare it as API models do
            raise bad(
                "deterministic is an API-provider setting (a llama_cpp model is deterministic exactly when "
                "its decoding is greedy or seeded)",
                "deterministic",
            )
        study_params = _study_params(e.get("study_params"), bad)
        execution = _parse_execution(e.get("execution"), e["provider"], bad)
        if workflow and "price_per_mtok" in e:
            raise bad("a workflow is priced per call: use price_per_call (USD per call)", "price_per_mtok")
        price = _price(e.get("price_per_mtok"), e["provider"], bad)
        per_call = e.get("price_per_call")
        if per_call is not None:
            if not workflow:
                raise bad(
                    "price_per_call is a workflow (http, python) setting; a model takes price_per_mtok",
                    "price_per_call",
                )
            if isinstance(per_call, bool) or not isinstance(per_call, (int, float)) or not 0 <= per_call < math.inf:
                raise bad(
                    f"price_per_call must be a number of USD per call >= 0, got {_shown(per_call)}", "price_per_call"
                )
        blocking = _blocking_metrics(e.get("blocking_metrics"), bad)
        if blocking is not None and status == "approved":
            raise bad(
                "blocking_metrics choose which of a candidate's regressions block; the approved entry is the "
                "baseline and is never judged (remove the key, or keep it on status: candidate)",
                "blocking_metrics",
            )
        mid = str(e["id"])
        if mid in seen:
            raise bad(f"duplicate model id {mid!r} (first at entry {seen[mid]})", "id")
        if status == "approved" and approved_at is not None:
            raise bad(
                f"a second entry with status 'approved' (the first is row {approved_at}): upgrade verdicts "
                "compare every candidate with exactly one approved baseline",
                "status",
            )
        if status == "approved":
            approved_at = i
        seen[mid] = i
        out.append(
            ModelSpec(
                id=mid,
                provider=e["provider"],
                model=str(e["model"]),
                ingestion=ingestion,
                base_url=e.get("base_url"),
                api_key_env=key_env,
                max_concurrency=conc,
                params=dict(params),
                status=status,
                execution=execution,
                price_per_mtok=price,
                n_threads=threads,
                deterministic=deterministic,
                study_params=study_params,
                workers=e.get("workers"),
                blocking_metrics=blocking,
                workflow=workflow,
                price_per_call=None if per_call is None else float(per_call),
                source=source,
                entry=i,
            )
        )
    return out


#: Registry keys of a workflow entry (``http`` / ``python``), besides the common ones.
_WORKFLOW_KEYS = (
    "url",
    "version",
    "seeded",
    "send",
    "fields",
    "reply_pointer",
    "headers_env",
    "timeout_s",
    "function",
    "price_per_call",
    "extracted_pointer",
)
_HTTP_ONLY = ("url", "send", "fields", "headers_env", "timeout_s")
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}")
_FUNCTION = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*")


def _parse_workflow(e: dict[str, Any], bad: Any) -> WorkflowConfig | None:
    """The :class:`WorkflowConfig` of an ``http`` / ``python`` entry (``None`` for a model endpoint).

    Raises ``bad(problem, field)`` for a workflow key on a model endpoint (or an ``http`` key on a
    ``python`` entry); ``version`` missing or not text; ``seeded`` not a boolean; ``url`` missing,
    not an ``http(s)`` URL or carrying a credential (:func:`_check_base_url`); ``send`` not
    ``multipart`` / ``json``; ``fields`` not a mapping of ``document`` / ``prompt`` / ``seed`` to
    distinct names; a pointer that is not an RFC 6901 JSON pointer (``""`` or starting with ``/``);
    ``headers_env`` not a mapping of header names to environment variable NAMES (a value is never
    echoed: it may be the secret itself); ``timeout_s`` not a positive number; ``function`` not
    ``package.module:function`` or naming a module or function that cannot be imported."""
    provider = e.get("provider")
    if provider not in WORKFLOW_PROVIDERS:
        given = [k for k in _WORKFLOW_KEYS if k in e and k != "price_per_call"]
        if given:
            raise bad(f"{given[0]} is a workflow (http, python) setting", given[0])
        return None
    if provider == "python":
        given = [k for k in _HTTP_ONLY if k in e]
        if given:
            raise bad(f"{given[0]} is an http workflow setting", given[0])
        if "reply_pointer" in e and "extracted_pointer" not in e:
            raise bad(
                "reply_pointer of a python workflow selects the reply in the mapping its function returns, "
                "which it does only with extracted_pointer (without it the function returns the reply text)",
                "reply_pointer",
            )
    elif "function" in e:
        raise bad("function is a python workflow setting", "function")
    version = e.get("version")
    if version is None or version == "":
        raise bad(
            f'a {provider} workflow declares its version (e.g. version: "1.0"); it is part of every cache key',
            "version",
        )
    if not isinstance(version, str):
        raise bad(f"'version' must be text (quote it: YAML read {_yaml_kind(version)})", "version")
    out: dict[str, Any] = {"version": version}
    for key in ("seeded",):
        if key in e and not isinstance(e[key], bool):
            raise bad(f"{key} must be true or false", key)
    out["seeded"] = bool(e.get("seeded", False))
    if provider == "python":
        fn = e.get("function")
        if not isinstance(fn, str) or not _FUNCTION.fullmatch(fn):
            raise bad("function must be package.module:function (a module path, a colon, a function name)", "function")
        _check_importable(fn, bad)
        out["function"] = fn
        out.update(_pointers(e, bad))
        return WorkflowConfig(**out)
    url = e.get("url")
    if not isinstance(url, str) or not url:
        raise bad("an http workflow needs url (the address your service listens on)", "url")
    _check_base_url(url, bad, key="url")
    send = e.get("send", "multipart")
    if send not in SEND_MODES:
        raise bad(f"send {send!r:.40} not in {list(SEND_MODES)}", "send")
    out["send"] = send
    fields = e.get("fields") or {}
    if not isinstance(fields, dict):
        raise bad("fields must be a mapping such as {document: file, prompt: prompt, seed: seed}", "fields")
    unknown = sorted(map(str, set(fields) - set(DEFAULT_FIELDS)))
    if unknown:
        raise bad(f"unknown field(s) {unknown}; fields names {list(DEFAULT_FIELDS)}", f"fields.{unknown[0]}")
    names = {**DEFAULT_FIELDS, **fields}
    for k, v in names.items():
        if not isinstance(v, str) or not v.strip():
            raise bad(f"fields.{k} must be a non-empty field name", f"fields.{k}")
    if len(set(names.values())) != len(names):
        raise bad(f"fields must name three distinct request fields, got {names}", "fields")
    out["fields"] = tuple(names.items())
    out.update(_pointers(e, bad))
    headers = e.get("headers_env") or {}
    if not isinstance(headers, dict):
        raise bad("headers_env must be a mapping of header name to environment variable NAME", "headers_env")
    for name, env in headers.items():
        if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
            raise bad("headers_env has a key that is not an HTTP header name", "headers_env")
        if not isinstance(env, str) or not _ENV_NAME.fullmatch(env):
            raise bad(
                f"headers_env.{name} must be the NAME of an environment variable (e.g. DOC_SERVICE_TOKEN); "
                "the header's value is read from it, never written in the registry",
                f"headers_env.{name}",
            )
    out["headers_env"] = tuple((str(k), str(v)) for k, v in headers.items())
    if "timeout_s" in e:
        t = e["timeout_s"]
        if not _is_seconds(t):
            raise bad(f"timeout_s must be {SECONDS_RANGE}, got {_shown(t)}", "timeout_s")
        out["timeout_s"] = float(t)
    return WorkflowConfig(**out)


def _pointers(e: dict[str, Any], bad: Any) -> dict[str, str]:
    """The ``reply_pointer`` and ``extracted_pointer`` an entry gives (each an RFC 6901 JSON pointer:
    ``""`` or starting with ``/``); ``bad(problem, field)`` otherwise."""
    out = {}
    for key, example in (("reply_pointer", "/answer"), ("extracted_pointer", "/extracted_text")):
        if key in e:
            ptr = e[key]
            if not isinstance(ptr, str) or not (ptr == "" or ptr.startswith("/")):
                raise bad(f"{key} must be a JSON pointer (RFC 6901) such as {example}, got {ptr!r:.40}", key)
            out[key] = ptr
    return out


def _check_importable(fn: str, bad: Any) -> None:
    """Raise ``bad(problem, "function")`` unless ``package.module:function`` imports and is callable
    (the module is imported: its import errors are named by type, not echoed)."""
    import importlib

    module, name = fn.split(":")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise bad(f"module {module!r} of function cannot be found ({exc.name} is not importable)", "function") from None
    except Exception as exc:  # the module itself fails to import
        raise bad(f"module {module!r} of function fails to import: {type(exc).__name__}", "function") from None
    if not callable(getattr(mod, name, None)):
        raise bad(f"module {module!r} has no function {name!r}", "function")


def check_study_kinds(study: str, takes_documents: bool, specs: list[ModelSpec]) -> None:
    """Raise :class:`RegistryError` naming the first of ``specs`` that is a workflow (``http`` /
    ``python``) when ``study`` does not send documents (``takes_documents`` false): a workflow
    under test answers an uploaded document, while such a study sends prompts."""
    if takes_documents:
        return
    for m in specs:
        if m.provider in WORKFLOW_PROVIDERS:
            raise RegistryError(
                m.source or "<registry>",
                f"{m.id!r} is a {m.provider} workflow, which answers an uploaded document; the study {study} "
                "sends prompts, not documents (choose its models with --models)",
                row=m.entry,
                field="provider",
            )


def _study_params(raw: Any, bad: Any) -> dict[str, dict[str, Any]]:
    """An entry's ``study_params``: a mapping of installed study packages to mappings of decoding
    parameters (``bad(problem, field)`` builds the error, field ``study_params.<study>``)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise bad(
            f"study_params must be a mapping of study to decoding parameters, got {type(raw).__name__}", "study_params"
        )
    from metamorph.study import studies as declared

    studies = sorted(declared())
    for name, params in raw.items():
        if name not in studies:
            raise bad(f"study_params names no study (choose from {studies})", f"study_params.{str(name)[:40]}")
        if not isinstance(params, dict):
            raise bad(f"study_params.{name} must be a mapping of decoding parameters", f"study_params.{name}")
        for setting in ("chat_format", "engine", "prefix_reuse"):
            if setting in params:
                raise bad(f"{setting} belongs in params (one per model)", f"study_params.{name}")
        _check_decoding_params(params, f"study_params.{name}", bad)
    return {str(k): dict(v) for k, v in raw.items()}


#: Query parameter names that carry a credential (compared lowercased, ``-`` read as ``_``):
#: ``key``, ``api_key``, ``apikey``, ``token``, ``access_token``, ``sig``, ``signature``, ``secret``,
#: ``client_secret``, ``password``, ``auth``, ``session``...
_CREDENTIAL_PARAM = re.compile(
    r"(?:^|_)(?:[a-z]*key|[a-z]*token|sig|signature|[a-z]*secret|password|passwd|pwd|"
    r"auth|authorization|credentials?|session|jwt|bearer)s?(?:$|_)"
)
_KEY_ADVICE = "a key belongs in the environment variable that api_key_env names, never in the registry"
_HEADER_ADVICE = "a credential belongs in an environment variable that headers_env names, never in the registry"


def _check_base_url(url: str, bad: Any, key: str = "base_url") -> None:
    """Raise ``bad(problem, key)`` when ``url`` is not an ``http(s)://host...`` URL or carries a
    credential: userinfo (``user:password@host``), a query or path (``;name=``) parameter named like
    a credential (:data:`_CREDENTIAL_PARAM`), or has a fragment (``#access_token=…``). The URL is part of every stored request, cache key and fingerprint,
    so a credential in it would be persisted; the message names the parameter, never a value."""
    advice = _KEY_ADVICE if key == "base_url" else _HEADER_ADVICE
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # a port out of 0-65535 or not a number raises here, not when each call is made
    except ValueError:
        raise bad(f"{key} is not a valid URL", key) from None
    if parts.scheme not in ("http", "https") or not host:
        raise bad(f"{key} must be an http(s) URL such as https://host/v1", key)
    if "@" in parts.netloc:
        raise bad(f"{key} holds credentials (user:password@ before the host); {advice}", key)
    if parts.fragment:
        raise bad(f"{key} has a fragment (#…), which an API URL never has; remove it", key)
    for name, _ in parse_qsl(parts.query, keep_blank_values=True):
        if _CREDENTIAL_PARAM.search(name.lower().replace("-", "_")):
            raise bad(f"{key} holds a credential in its query parameter {name!r}; {advice}", key)
    for segment in parts.path.split("/"):  # path parameters: /v1;token=…
        for param in segment.split(";")[1:]:
            name = param.split("=", 1)[0]
            if _CREDENTIAL_PARAM.search(name.lower().replace("-", "_")):
                raise bad(f"{key} holds a credential in its path parameter {name!r}; {advice}", key)


def _refuse_secrets(entry: dict[str, Any], bad: Any) -> None:
    """Raise ``bad(problem, field)`` for the first key or text value of ``entry`` (nested mappings
    and lists included; field ``params.<key>`` ...) that looks like a secret
    (:func:`~metamorph.errors.looks_like_secret`): a registry value is stored, keyed and shown, a
    key must never be. ``api_key_env`` is left to its own check (it names a variable)."""
    stack: list[tuple[str, Any]] = [(str(k), v) for k, v in entry.items() if k != "api_key_env"][::-1]
    while stack:
        path, value = stack.pop()
        advice = _HEADER_ADVICE if path.split(".")[0].split("[")[0] in _WORKFLOW_KEYS else _KEY_ADVICE
        if looks_like_secret(path.rsplit(".", 1)[-1]):
            raise bad(f"this key name looks like a secret (an API key or token); {advice}", path)
        if isinstance(value, str) and looks_like_secret(value) and not (path == "model" and os.path.isfile(value)):
            # an existing local file (a GGUF under a hub snapshot directory named by its commit hash)
            # is a path, not key material
            raise bad(f"the value looks like a secret (an API key or token); {advice}", path)
        if isinstance(value, dict):
            stack.extend((f"{path}.{k}", v) for k, v in reversed(list(value.items())))
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", v) for i, v in reversed(list(enumerate(value))))


#: The keys whose text names something (a model, an endpoint, a function, a version): none of them
#: ever holds a control or invisible format character, nor white space at either end, and each such
#: character makes every call fail or names another model (``urllib`` drops a newline of a URL that
#: httpx then sends).
_NAME_KEYS = ("model", "base_url", "url", "function", "version")


def _refuse_invisible(entry: dict[str, Any], bad: Any) -> None:
    """Raise ``bad(problem, key)`` for the first of :data:`_NAME_KEYS` in ``entry`` whose text holds
    a control character (``Cc``), an invisible format character (``Cf``: bidi overrides, zero-width
    spaces) or a line or paragraph separator, or starts or ends with white space."""
    import unicodedata

    for key in _NAME_KEYS:
        value = entry.get(key)
        if not isinstance(value, str) or not value:
            continue
        for i, ch in enumerate(value, start=1):
            kind = unicodedata.category(ch)
            if kind in ("Cc", "Zl", "Zp"):
                raise bad(
                    f"{key} holds a control character (U+{ord(ch):04X}) at character {i}, which it never has; remove it",
                    key,
                )
            if kind == "Cf":
                name = unicodedata.name(ch, "")
                raise bad(
                    f"{key} holds an invisible format character (U+{ord(ch):04X}{' ' + name if name else ''}) at "
                    f"character {i}, which it never has; remove it",
                    key,
                )
        if value != value.strip():
            end = "starts" if value[0].isspace() else "ends"
            raise bad(f"{key} {end} with white space, which it never has; remove it", key)


#: A number in exponent notation that YAML 1.1 (PyYAML) reads as text: no decimal point, or an
#: exponent without its sign (``1e308``, ``1.0e308``, ``5e-7``).
_YAML_TEXT_NUMBER = re.compile(r"[-+]?(\d[\d_]*)?\.?\d*[eE][-+]?\d+")


def _shown(v: Any) -> str:
    """``v`` as an error message shows it (its repr, cut at 40 characters); a string that YAML read
    as text but that is a number in exponent notation (``'1e308'``) adds how to write it as a
    number, since the registry's reader follows YAML 1.1."""
    text = f"{v!r:.40}"
    if isinstance(v, str) and _YAML_TEXT_NUMBER.fullmatch(v.strip()):
        return (
            f"{text} (text: YAML reads a number in exponent notation as a number only with a decimal "
            "point and a signed exponent, such as 1.0e+308 or 5.0e-7)"
        )
    return text


#: Numeric decoding parameters: name -> (integer only, the allowed range in words, the range test).
#: Each range is the widest a provider documents, so a typo (``temperature: 1.0e+308``) is refused at
#: load instead of being stored in every cache key and rejected by every call: ``temperature`` 0-2
#: and the OpenAI penalties -2-2 (OpenAI's ranges; Anthropic's temperature is 0-1), ``top_p`` 0-1,
#: ``top_k`` and ``max_tokens`` at most 1,000,000 (above any vocabulary and any context), llama.cpp's
#: ``repeat_penalty`` 0-10 (1 = off). ``seed`` stays below 2**31 (the range of
#: :func:`metamorph.replicates.replicate_seed`); llama.cpp reads a negative seed as "random", which
#: would make a seeded request non-reproducible. docs/models.md lists the ranges.
_NUMERIC_PARAMS: dict[str, tuple[bool, str, Any]] = {
    "temperature": (False, "from 0 to 2", lambda v: 0 <= v <= 2),
    "top_p": (False, "from 0 to 1", lambda v: 0 <= v <= 1),
    "top_k": (True, "from 0 to 1000000", lambda v: 0 <= v <= 1_000_000),
    "max_tokens": (True, "from 1 to 1000000", lambda v: 1 <= v <= 1_000_000),
    "seed": (True, f"from 0 to {2**31 - 1}", lambda v: 0 <= v < 2**31),
    "frequency_penalty": (False, "from -2 to 2", lambda v: -2 <= v <= 2),
    "presence_penalty": (False, "from -2 to 2", lambda v: -2 <= v <= 2),
    "repeat_penalty": (False, "from 0 to 10", lambda v: 0 <= v <= 10),
}


def _check_decoding_params(params: dict[str, Any], key: str, bad: Any) -> None:
    """Raise ``bad(problem, key)`` unless every key of ``params`` is one of :data:`DECODING_PARAMS`
    and every numeric one is ``null`` (unset) or a finite number in its range (:data:`_NUMERIC_PARAMS`;
    integers for ``top_k``, ``max_tokens`` and ``seed``; the field named is ``<key>.<parameter>``); ``stop`` is a string or a list of strings,
    ``response_format`` a mapping, ``grammar`` and ``chat_format`` strings (each provider would
    otherwise reject every call, stored as an error per request)."""
    unknown = sorted(map(str, set(params) - set(DECODING_PARAMS)))
    if unknown:
        raise bad(f"unknown decoding parameter(s) {unknown}; allowed: {list(DECODING_PARAMS)}", key)
    for name, (integer, words, in_range) in _NUMERIC_PARAMS.items():
        v = params.get(name)
        if v is None:
            continue
        typed = not isinstance(v, bool) and isinstance(v, int if integer else (int, float))
        if not typed or not math.isfinite(v) or not in_range(v):
            raise bad(
                f"{name} must be {'an integer' if integer else 'a number'} {words}, got {_shown(v)}", f"{key}.{name}"
            )
    stop = params.get("stop")
    if stop is not None and not (
        isinstance(stop, str) or (isinstance(stop, list) and all(isinstance(x, str) and x for x in stop))
    ):
        raise bad(f"stop must be a string or a list of non-empty strings, got {stop!r:.40}", key)
    fmt = params.get("response_format")
    if fmt is not None and not isinstance(fmt, dict):
        raise bad(f"response_format must be a mapping such as {{type: json_object}}, got {fmt!r:.40}", key)
    for name in ("grammar", "chat_format"):
        v = params.get(name)
        if v is not None and not (isinstance(v, str) and v.strip()):
            raise bad(f"{name} must be a non-empty string, got {v!r:.40}", key)


def _parse_execution(raw: Any, provider: str, bad: Any) -> ExecutionConfig:
    """An entry's ``execution`` mapping -> :class:`ExecutionConfig` (``bad(problem, field)`` builds the error)."""
    if raw is None:
        return ExecutionConfig()
    if not isinstance(raw, dict):
        raise bad(f"execution must be a mapping such as {{mode: batch}}, got {type(raw).__name__}", "execution")
    unknown = sorted(set(raw) - {"mode", "poll_interval_s", "max_wait_s", "max_requests"})
    if unknown:
        raise bad(f"unknown key(s) {unknown} in execution", f"execution.{unknown[0]}")
    mode = raw.get("mode", "sync")
    if mode not in EXECUTION_MODES:
        raise bad(f"execution.mode {mode!r:.40} not in {list(EXECUTION_MODES)}", "execution.mode")
    if mode == "batch" and provider not in BATCH_PROVIDERS:
        raise bad(
            f"execution.mode batch needs a provider with a batch API {list(BATCH_PROVIDERS)}, not {provider}",
            "execution.mode",
        )
    out: dict[str, Any] = {"mode": mode}
    for name in ("poll_interval_s", "max_wait_s"):
        if name in raw:
            v = raw[name]
            if not _is_seconds(v):
                raise bad(f"execution.{name} must be {SECONDS_RANGE}, got {_shown(v)}", f"execution.{name}")
            out[name] = v
    if "max_requests" in raw:
        v = raw["max_requests"]
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise bad(f"execution.max_requests must be a positive integer, got {_shown(v)}", "execution.max_requests")
        out["max_requests"] = v
    return ExecutionConfig(**out)


#: The longest a registry duration (``timeout_s``, ``execution.poll_interval_s``,
#: ``execution.max_wait_s``) may be: a week. A socket timeout or a sleep past the platform's
#: ``time_t`` (about 1e12 s here) raises ``OverflowError`` in every call, and NaN or infinity
#: never elapse.
MAX_SECONDS = 604_800
SECONDS_RANGE = f"a positive number of seconds up to {MAX_SECONDS:,} (a week)"


def _is_seconds(v: Any) -> bool:
    """Whether ``v`` is a number of seconds in (0, :data:`MAX_SECONDS`] (not a boolean, not NaN)."""
    return not isinstance(v, bool) and isinstance(v, (int, float)) and 0 < v <= MAX_SECONDS


def _price(raw: Any, provider: str, bad) -> Price | None:
    """The validated ``price_per_mtok`` of an entry (``None`` when absent); ``bad(problem, key)``
    builds the entry's :class:`RegistryError`."""
    if raw is None:
        return None
    key = "price_per_mtok"
    if provider == "llama_cpp":
        raise bad("a llama_cpp model runs locally and costs 0; remove price_per_mtok", key)
    if not isinstance(raw, dict):
        raise bad(
            f"price_per_mtok must be a mapping such as {{input: 0.15, output: 0.60}} (USD per million "
            f"tokens), got {type(raw).__name__}",
            key,
        )
    if set(raw) != {"input", "output"}:
        extra, missing = sorted(map(str, set(raw) - {"input", "output"})), sorted({"input", "output"} - set(raw))
        raise bad(
            f"price_per_mtok needs exactly the keys input and output (missing {missing}, unknown {extra})",
            f"{key}.{(missing or extra)[0]}",
        )
    for part in ("input", "output"):
        v = raw[part]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0 or v == float("inf"):
            raise bad(
                f"price_per_mtok.{part} must be a number of USD per million tokens >= 0, got {_shown(v)}",
                f"{key}.{part}",
            )
    return Price(float(raw["input"]), float(raw["output"]))


def _blocking_metrics(raw: Any, bad) -> dict[str, tuple[str, ...]] | None:
    """The validated ``blocking_metrics`` of an entry (``None`` when absent: every metric blocks)."""
    if raw is None:
        return None
    from metamorph.study import compared_metrics

    known = compared_metrics()
    key = "blocking_metrics"
    if not isinstance(raw, dict):
        raise bad(
            f"blocking_metrics must be a mapping of study to the metrics that may block its verdicts, such as "
            f"{{<study>: [<metric>, ...]}}, got {type(raw).__name__}",
            key,
        )
    out = {}
    for study, metrics in raw.items():
        if study not in known:
            raise bad(f"unknown study {study!r:.40} (studies: {', '.join(sorted(known))})", f"{key}.{str(study):.40}")
        if not isinstance(metrics, list) or not all(isinstance(x, str) for x in metrics):
            raise bad(
                f"{key}.{study} must be a list of metric names ([] = never blocks), such as [{known[study][0]}]",
                f"{key}.{study}",
            )
        wrong = [x for x in metrics if x not in known[study]]
        if wrong:
            raise bad(
                f"{wrong[0]!r:.40} is not a compared metric of {study} ({', '.join(known[study])})", f"{key}.{study}"
            )
        out[study] = tuple(metrics)
    return out


def _refuse_duplicate_keys(root: yaml.Node | None, source: str) -> None:
    """Raise :class:`RegistryError` for the first mapping of the composed document ``root`` that
    holds a key twice: ``row`` is the entry of ``models`` it is in (``None`` outside the list),
    ``field`` the key's path inside the entry (``params.temperature``) and the problem names both
    lines. Merge keys (``<<``) are left to YAML."""

    def walk(node: yaml.Node, path: str, row: int | None, seen_nodes: set[int]) -> None:
        if id(node) in seen_nodes:  # an alias of a node already checked
            return
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[str, int] = {}
            for key_node, value_node in node.value:
                key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else None
                if key is None or key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                at = f"{path}.{key}" if path else key
                line = key_node.start_mark.line + 1
                if key in first:
                    lines = f"line {line}" if line == first[key] else f"lines {first[key]} and {line}"
                    raise RegistryError(
                        source,
                        f"key {key!r} is given twice ({lines}); YAML would keep the last one silently",
                        row=row,
                        field=at,
                    )
                first[key] = line
                if row is None and not path and key == "models" and isinstance(value_node, yaml.SequenceNode):
                    for i, item in enumerate(value_node.value, start=1):
                        walk(item, "", i, seen_nodes)
                else:
                    walk(value_node, at, row, seen_nodes)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, f"{path}[{i}]", row, seen_nodes)

    if root is not None:
        walk(root, "", None, set())


def approved_baseline(models: list[ModelSpec]) -> ModelSpec:
    """The registry's one ``approved`` entry: the baseline candidates are compared with.

    Raises :class:`RegistryError` (a :class:`ConfigError`) naming the registry file and the
    ``status`` key when no entry or more than one entry is approved.
    """
    approved = [m for m in models if m.status == "approved"]
    if len(approved) != 1:
        source = next((m.source for m in models if m.source), "<registry>")
        raise RegistryError(
            source,
            "upgrade verdicts need exactly one registry entry with status 'approved'; "
            f"found {[m.id for m in approved] or 'none'}",
            field="status",
        )
    return approved[0]


def load_registry(path: str | Path) -> list[ModelSpec]:
    """Read and validate the registry YAML at ``path`` (UTF-8; raises :class:`RegistryError`, a
    :class:`ConfigError`, naming the file — and the entry and key, see :func:`parse_registry` — also
    when the path is missing, a directory or unreadable).

    A mapping that repeats a key is an error (:func:`_refuse_duplicate_keys`): YAML loaders keep the
    last value silently, so a second ``status:`` line would change which entry is the baseline."""
    p = Path(path)
    if not p.exists():
        raise RegistryError(str(p), "model registry does not exist")
    if p.is_dir():
        raise RegistryError(str(p), "is a directory, expected the model registry's YAML file")
    try:
        text = read_text(p, "model registry", RegistryError)
        _refuse_duplicate_keys(yaml.compose(text, Loader=yaml.SafeLoader), str(p))
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise RegistryError(str(p), f"not valid YAML{where}: {getattr(exc, 'problem', None) or exc}") from exc
    except RegistryError:  # a duplicate key, named by _refuse_duplicate_keys (a ValueError too)
        raise
    except ValueError as exc:  # int() refuses an integer of more than sys.get_int_max_str_digits() digits
        raise RegistryError(
            str(p), "holds an integer of more than 4,300 digits, which no registry field takes; write a smaller number"
        ) from exc
    return parse_registry(data, str(p))
