"""The provider interface every LLM backend implements, and the request/result records.

A :class:`GenerationRequest` holds *everything that shapes a response*; its
:meth:`GenerationRequest.cache_key` is the sha256 of the canonical JSON of those fields, so
two requests share a key exactly when a provider would be asked the same thing. Secrets are
never part of a request: providers read them from the environment when they are built.

Decoding parameters are explicit (DEVELOPERS.md): a parameter set to ``0`` is
sent as ``0``; a parameter that is not set is absent from ``params`` and is not sent.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "DECODING_PARAMS",
    "INGESTION_PATHS",
    "Document",
    "GenerationRequest",
    "GenerationResult",
    "Provider",
    "ProviderError",
    "canonical_json",
    "sha256_hex",
    "storable_text",
]

#: Ingestion paths of the document-format study: the document in the message text (``inline``), as
#: an OpenAI file input or an Anthropic document block, or uploaded as a file to a workflow under test
#: (``upload``: an ``http`` service or a ``python`` function receives the rendered document's bytes,
#: file name and media type; the message carries only the task prompt).
INGESTION_PATHS = ("inline", "openai_file", "anthropic_document", "upload")

#: Decoding parameters a request may carry; anything else is a configuration error.
#: ``chat_format`` (llama_cpp only) names the llama.cpp chat format that turns the messages into
#: the prompt (e.g. ``gemma`` for a GGUF without a chat template); it shapes the response, so it
#: is a request parameter and part of the cache key. ``engine`` (llama_cpp only) names the engine
#: that computes it (:mod:`metamorph.providers.engines`); ``prefix_reuse`` (llama_cpp only, default
#: true) lets the engine keep the KV state of a prompt's system prompt for the next prompt that
#: starts with it; it changes no completion (:class:`metamorph.providers.llama_cpp.LlamaCppProvider`),
#: so it is not part of the key.
DECODING_PARAMS = (
    "temperature",
    "top_p",
    "top_k",
    "max_tokens",
    "seed",
    "frequency_penalty",
    "presence_penalty",
    "repeat_penalty",
    "stop",
    "response_format",
    "grammar",
    "chat_format",
    "engine",
    "prefix_reuse",
)


def sha256_hex(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def canonical_json(obj: Any) -> str:
    """Canonical JSON: sorted keys, no insignificant whitespace, UTF-8 kept (not escaped)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class Document:
    """A file attached to a request (for the ``openai_file`` / ``anthropic_document`` / ``upload`` paths).

    ``sha256`` and ``media_type`` enter the cache key (on the ``upload`` path also ``filename``: a
    workflow under test sees the upload's name); the bytes are sent to the provider.
    """

    content: bytes
    media_type: str
    filename: str

    @property
    def sha256(self) -> str:
        return sha256_hex(self.content)


@dataclass(frozen=True)
class GenerationRequest:
    """One model call.

    Attributes:
        provider: provider kind (``llama_cpp``, ``openai``, ``anthropic``, ``openai_compatible``, or a
            workflow under test: ``http``, ``python``).
        model: the model name sent to the provider (for llama_cpp: the GGUF file name).
        messages: chat messages ``[{"role": ..., "content": ...}, ...]`` in order.
        params: decoding parameters actually sent (keys from :data:`DECODING_PARAMS`).
            An explicit ``0`` is kept; an unset parameter is absent.
        base_url: endpoint for OpenAI-compatible servers (``None`` = the SDK default).
        ingestion: how the document reaches the model (:data:`INGESTION_PATHS`).
        document: attached file, if the ingestion path uploads one.
        renderer_version: version of the renderer that produced the document/prompt.
        repeat_index: r in 1..k; k repeats are k distinct cache entries and k real calls.
        workflow_version: the ``version`` a workflow under test (``http`` / ``python`` entry)
            declares; part of the cache key when set, so a new version of the service is new calls.
        workflow_io: how an ``http`` workflow is sent the request and where its reply is read
            (``send``, ``fields``, ``reply_pointer``), only those that differ from the defaults
            (:meth:`metamorph.models.WorkflowConfig.io_key`); part of the cache key when set, so an
            entry reading another pointer of the same service is never served another's reply.
    """

    provider: str
    model: str
    messages: tuple[dict[str, str], ...]
    params: dict[str, Any] = field(default_factory=dict)
    base_url: str | None = None
    ingestion: str = "inline"
    document: Document | None = None
    renderer_version: str | None = None
    repeat_index: int = 1
    workflow_version: str | None = None
    workflow_io: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        unknown = sorted(set(self.params) - set(DECODING_PARAMS))
        if unknown:
            raise ValueError(f"unknown decoding parameter(s) {unknown}; allowed: {list(DECODING_PARAMS)}")
        if self.ingestion not in INGESTION_PATHS:
            raise ValueError(f"unknown ingestion path {self.ingestion!r}; allowed: {list(INGESTION_PATHS)}")
        if self.ingestion != "inline" and self.document is None:
            raise ValueError(f"ingestion path {self.ingestion!r} needs a document")
        object.__setattr__(self, "messages", tuple(dict(m) for m in self.messages))
        for m in self.messages:
            if set(m) != {"role", "content"}:
                raise ValueError(f"a message must have exactly 'role' and 'content', got {sorted(m)}")

    def key_material(self) -> dict[str, Any]:
        """Everything that shapes the response, as a JSON-able dict (no secrets, no bytes).

        A ``llama_cpp`` request adds ``engine``: the engine that computes it, its installed
        version and how it evaluates a prompt (:func:`metamorph.providers.engines.engine_key`),
        since each gives its own completions; its ``params`` then leave out what that field says
        and ``prefix_reuse`` (:func:`~metamorph.providers.engines.local_params`), so
        ``engine: xllamacpp`` or ``prefix_reuse`` written out gives the key of the entry without
        them. Other providers' keys carry no such field.

        Raises:
            ConfigError: a ``llama_cpp`` request whose engine is unknown or not installed.
        """
        engine, params = {}, dict(self.params)
        if self.provider == "llama_cpp":
            from metamorph.providers.engines import engine_key, engine_name, local_params

            first = self.messages[0] if self.messages else {}
            engine = {"engine": engine_key(engine_name(self.params), split=first.get("role") == "system")}
            params = local_params(params)
        return {
            **engine,
            "provider": self.provider,
            "base_url": self.base_url,
            "model": self.model,
            "params": params,
            "messages": [dict(m) for m in self.messages],
            "ingestion": self.ingestion,
            "document": None if self.document is None else self._document_key(),
            "renderer_version": self.renderer_version,
            "repeat_index": self.repeat_index,
            **({} if self.workflow_version is None else {"workflow_version": self.workflow_version}),
            **({"workflow_io": self.workflow_io} if self.workflow_io else {}),
        }

    def _document_key(self) -> dict[str, str]:
        assert self.document is not None
        key = {"sha256": self.document.sha256, "media_type": self.document.media_type}
        if self.ingestion == "upload":
            key["filename"] = self.document.filename
        return key

    def cache_key(self) -> str:
        """sha256 (hex) of :func:`canonical_json` of :meth:`key_material`."""
        return sha256_hex(canonical_json(self.key_material()).encode("utf-8"))

    def to_json(self) -> str:
        """The request as stored with the generation (same content as the key material)."""
        return canonical_json(self.key_material())


def storable_text(text: str | None) -> str | None:
    """``text`` as every store of the project can hold it (UTF-8 in DuckDB and PostgreSQL, Arrow,
    JSON): a surrogate pair left as two code points is joined into its character, every other
    (lone) surrogate — e.g. a reply whose JSON escapes ``"\\ud800"``, which the SDKs decode to
    an unencodable str — and every NUL (PostgreSQL's TEXT cannot hold it) becomes U+FFFD
    (REPLACEMENT CHARACTER). Any other text, and ``None``, is returned unchanged."""
    if text is None:
        return None
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


@dataclass(frozen=True)
class GenerationResult:
    """What a provider returned for one request (or the error it raised).

    Attributes:
        text: response text; ``None`` when the call failed.
        finish_reason: provider's stop reason normalised to ``stop`` / ``length`` / other strings.
        prompt_tokens / completion_tokens: usage as reported by the provider (or counted locally).
        latency_s: wall seconds of the successful attempt.
        model_id: the model id the provider reports having used.
        model_version: provider-reported resolved version (e.g. a dated snapshot, GGUF sha256).
        system_fingerprint: OpenAI ``system_fingerprint`` where given.
        error: ``"<ErrorType>: message"`` when the call failed, else ``None``.
        attempts: how many attempts were made (1 = no retry).
        extracted_text: the text a workflow under test reports having extracted from the uploaded
            document (its entry's ``extracted_pointer``); ``None`` for a model, or when not declared.

    Every text field is made storable on construction (:func:`storable_text`: lone surrogates and
    NUL become U+FFFD), so what a run reads, the cache stores and the warehouse holds is the same text.
    """

    text: str | None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float | None = None
    model_id: str | None = None
    model_version: str | None = None
    system_fingerprint: str | None = None
    error: str | None = None
    attempts: int = 1
    extracted_text: str | None = None

    def __post_init__(self) -> None:
        for name in (
            "text",
            "finish_reason",
            "model_id",
            "model_version",
            "system_fingerprint",
            "error",
            "extracted_text",
        ):
            value = getattr(self, name)
            if isinstance(value, str):
                fixed = storable_text(value)
                if fixed is not value:
                    object.__setattr__(self, name, fixed)

    @property
    def ok(self) -> bool:
        return self.error is None

    def replace(self, **changes: Any) -> "GenerationResult":
        return dataclasses.replace(self, **changes)


class ProviderError(Exception):
    """A failed provider call, classified for the retry policy.

    Attributes:
        status: HTTP status code when there was one.
        retryable: whether the retry policy may try again (408, 409, 429, 5xx, 529, overloaded).
        retry_after: seconds the server asked us to wait (``Retry-After``), if it did.
    """

    def __init__(
        self, message: str, *, status: int | None = None, retryable: bool = False, retry_after: float | None = None
    ):
        super().__init__(message)
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after


@runtime_checkable
class Provider(Protocol):
    """An LLM backend.

    ``generate`` makes exactly one attempt and either returns a :class:`GenerationResult` with
    ``error=None`` or raises :class:`ProviderError`; retries are the caller's job
    (:mod:`metamorph.providers.retry`). ``max_concurrency`` bounds parallel calls.
    """

    kind: str
    max_concurrency: int

    def generate(self, request: GenerationRequest) -> GenerationResult: ...
