"""Anthropic Messages API adapter (``POST {base_url}/v1/messages``).

One :meth:`AnthropicProvider.generate` call is ONE HTTP attempt (the SDK's own retries are off,
``max_retries=0``); retries belong to :func:`metamorph.providers.retry.call_with_retries`.

Notes on the installed SDK (anthropic 2.x):

* it authenticates with ``Authorization: Bearer <api_key>`` (not ``x-api-key``) and sends
  ``anthropic-version: 2026-10-21``;
* that API version rejects the sampling parameters ``temperature``, ``top_p`` and ``top_k``
  with HTTP 400 (the SDK no longer has arguments for them). This adapter therefore raises
  :class:`~metamorph.errors.ConfigError` for them *before* any call, unless the provider is built
  with an older ``anthropic_version`` (e.g. ``"2023-06-01"``), in which case they are sent in the
  request body.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anthropic

from metamorph.errors import ConfigError
from metamorph.providers.base import Document, GenerationRequest, GenerationResult
from metamorph.providers.file_inputs import FILE_INPUTS, TEXT_MEDIA_TYPES, is_text_media_type
from metamorph.providers.retry import attempt_timeout
from metamorph.providers.sdk_errors import async_http_client, error_in_body, no_text_error, sdk_errors

__all__ = [
    "AnthropicProvider",
    "TEXT_MEDIA_TYPES",
    "FILES_API_BETA",
    "SAMPLING_PARAMS_REMOVED_IN",
    "inline_source",
    "message_result",
]

log = logging.getLogger(__name__)

#: ``anthropic-beta`` value of the Files API.
FILES_API_BETA = "files-api-2025-04-14"

#: First ``anthropic-version`` that rejects ``temperature`` / ``top_p`` / ``top_k``.
SAMPLING_PARAMS_REMOVED_IN = "2026-10-21"

_SAMPLING = ("temperature", "top_p", "top_k")
_UNSUPPORTED = ("seed", "frequency_penalty", "presence_penalty", "repeat_penalty", "response_format", "grammar")
_FINISH_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length"}

try:  # the SDK's default API version (private constant; only used to decide about sampling params)
    from anthropic._constants import ANTHROPIC_API_VERSION as _SDK_API_VERSION
except Exception:  # pragma: no cover - other SDK layouts
    _SDK_API_VERSION = None


class AnthropicProvider:
    """Provider for the Anthropic Messages API.

    Args:
        api_key: the secret key (read from the environment by the caller); never logged or stored in
            results. The SDK sends it as ``Authorization: Bearer <key>``.
        base_url: API root *without* ``/v1`` (``None`` = ``https://api.anthropic.com``).
        max_concurrency: at most this many :meth:`generate` calls run at once on this instance.
        timeout_s: per-HTTP-request timeout in seconds.
        use_files_api: upload documents once per (sha256, filename, media type) with the Files API beta
            (``client.beta.files.upload``) and reference them by ``file_id``; falls back to inline
            document blocks (with a warning) if the SDK has no Files API.
        anthropic_version: ``anthropic-version`` header to send (``None`` = the SDK's default,
            ``2026-10-21`` for anthropic 2.x). Versions before :data:`SAMPLING_PARAMS_REMOVED_IN`
            accept ``temperature`` / ``top_p`` / ``top_k``.
        deterministic: declare every request's reply a function of the request alone (registry
            ``deterministic: true``), so replicates share one call (:mod:`metamorph.replicates`);
            default False.

    Raises:
        ConfigError: empty ``api_key`` or ``max_concurrency < 1``.
    """

    kind = "anthropic"

    def __init__(
        self,
        api_key: str,
        base_url: str | None = None,
        max_concurrency: int = 4,
        timeout_s: float = 120.0,
        use_files_api: bool = False,
        anthropic_version: str | None = None,
        deterministic: bool = False,
    ):
        if not api_key:
            raise ConfigError("AnthropicProvider: api_key is empty; set the provider's API-key environment variable")
        if max_concurrency < 1:
            raise ConfigError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.base_url = base_url
        self.max_concurrency = int(max_concurrency)
        self.timeout_s = float(timeout_s)
        self.deterministic = bool(deterministic)
        self.anthropic_version = anthropic_version or _SDK_API_VERSION
        self._api_key = api_key
        self._args = (base_url, max_concurrency, timeout_s, use_files_api, anthropic_version, deterministic)
        headers = {"anthropic-version": anthropic_version} if anthropic_version else None
        self._headers = headers
        self.client = anthropic.Anthropic(
            api_key=api_key, base_url=base_url, max_retries=0, timeout=self.timeout_s, default_headers=headers
        )
        files = getattr(getattr(self.client, "beta", None), "files", None)
        self.use_files_api = bool(use_files_api) and callable(getattr(files, "upload", None))
        if use_files_api and not self.use_files_api:
            log.warning(
                "anthropic SDK %s has no client.beta.files.upload: documents are sent inline",
                getattr(anthropic, "__version__", "?"),
            )
        self._slots = threading.BoundedSemaphore(self.max_concurrency)
        self._file_ids: dict[tuple[str, str, str], str] = {}
        self._upload_lock = threading.Lock()

    def is_deterministic(self, request: GenerationRequest) -> bool:
        """The registry's declaration (``deterministic``), the same for every request."""
        return self.deterministic

    def __reduce__(self) -> tuple:
        """Rebuilt from its arguments in another process (the runner's client processes: pickled
        into the pipe to the process, which carries the API key; never into a file, log or error)."""
        base_url, _, timeout_s, use_files_api, anthropic_version, deterministic = self._args
        args = (
            self._api_key,
            base_url,
            self.max_concurrency,
            timeout_s,
            use_files_api,
            anthropic_version,
            deterministic,
        )
        return (type(self), args)

    def __repr__(self) -> str:  # never show the key
        return (
            f"AnthropicProvider(base_url={self.base_url!r}, max_concurrency={self.max_concurrency}, "
            f"use_files_api={self.use_files_api}, anthropic_version={self.anthropic_version!r})"
        )

    @property
    def sampling_params_allowed(self) -> bool:
        """Whether ``temperature`` / ``top_p`` / ``top_k`` may be sent with this API version."""
        return self.anthropic_version is None or self.anthropic_version < SAMPLING_PARAMS_REMOVED_IN

    def generate(self, request: GenerationRequest) -> GenerationResult:
        """Make ONE attempt at ``request`` and return the result (``attempts=1``, ``error=None``).

        What is sent: ``model``; ``system`` (the single system message, if any); the other messages
        in order; ``max_tokens``; ``stop_sequences`` (from ``stop``); ``temperature`` / ``top_p`` /
        ``top_k`` only with an API version that accepts them. With ingestion ``anthropic_document``
        the last user message becomes ``[document block, text block]``: text-like documents
        (``text/*``, JSON, CSV, ...) as a ``text`` source, PDFs as ``base64``, or — with
        ``use_files_api`` — a ``file`` source after a one-off upload (per (sha256, filename, media type), per instance).

        Returns ``text`` (all text blocks joined), ``finish_reason`` (``end_turn`` /
        ``stop_sequence`` -> ``stop``, ``max_tokens`` -> ``length``, others unchanged),
        ``prompt_tokens`` (input + cache-creation + cache-read tokens), ``completion_tokens``
        (output tokens), ``latency_s`` (seconds of the Messages call), ``model_id`` /
        ``model_version`` (the model the API reports).

        Raises:
            ConfigError: before any HTTP request: ``max_tokens`` missing (the API requires it), a
                parameter the Messages API does not take (``seed``, penalties, ``response_format``,
                ``grammar``, or sampling parameters with API version >= 2026-10-21), several or
                misplaced system messages, an unsupported role, ingestion ``openai_file``, a
                document media type other than text or PDF, or non-UTF-8 text.
            ProviderError: the HTTP call failed: ``status`` (``None`` for connection errors and
                timeouts, which are retryable), ``retryable`` per
                :func:`~metamorph.providers.retry.classify_status` (so 429, 5xx, 529 and
                ``overloaded_error`` bodies are retryable), ``retry_after`` from the headers; or
                the reply has no text block (:func:`message_result`).
        """
        kwargs = self.message_kwargs(request)
        document = request.document if request.ingestion == "anthropic_document" else None
        with self._slots:
            if document is not None:
                source = self._file_source(document) if self.use_files_api else inline_source(document)
                block = {"type": "document", "source": source, "title": document.filename}
                kwargs["messages"][-1]["content"].insert(0, block)
            if document is not None and self.use_files_api:
                method = self.client.beta.messages.create
                kwargs["betas"] = [FILES_API_BETA]
            else:
                method = self.client.messages.create
            start = time.perf_counter()
            message = self.call(method, **kwargs)
            latency = time.perf_counter() - start
        return message_result(message, latency)

    @asynccontextmanager
    async def async_session(self) -> AsyncIterator[Callable[[GenerationRequest], Awaitable[GenerationResult]]]:
        """An ``async`` :meth:`generate` for the running event loop, open for the ``async with`` block.

        It sends requests with ``anthropic.AsyncAnthropic`` (on :func:`~metamorph.providers.
        sdk_errors.async_http_client`: up to ``max_concurrency`` connections kept alive; the caller
        bounds how many calls are in flight), a document inline as :meth:`generate` does; a request
        whose document goes through the Files API (``use_files_api``) is handed to :meth:`generate`
        on a worker thread. Same request body, result, errors and secret handling as
        :meth:`generate`; the client is closed when the block ends.
        """
        client = anthropic.AsyncAnthropic(
            api_key=self._api_key,
            base_url=self.base_url,
            max_retries=0,
            timeout=self.timeout_s,
            default_headers=self._headers,
            http_client=async_http_client(anthropic, self.max_concurrency),
        )

        async def agenerate(request: GenerationRequest) -> GenerationResult:
            kwargs = self.message_kwargs(request)
            document = request.document if request.ingestion == "anthropic_document" else None
            if document is not None and self.use_files_api:
                return await asyncio.to_thread(self.generate, request)
            if document is not None:
                block = {"type": "document", "source": inline_source(document), "title": document.filename}
                kwargs["messages"][-1]["content"].insert(0, block)
            start = time.perf_counter()
            timeout = attempt_timeout(self.timeout_s)
            with sdk_errors(anthropic, anthropic.AnthropicError, "Anthropic", self._api_key, timeout):
                message = await client.messages.create(**kwargs, timeout=timeout)
            return message_result(message, time.perf_counter() - start)

        try:
            yield agenerate
        finally:
            await client.close()

    # ----------------------------------------------------------------- helpers

    def message_kwargs(self, request: GenerationRequest) -> dict[str, Any]:
        """The Messages API request body of ``request`` (also one Message Batches item's params).

        Raises:
            ConfigError: a request for another provider or endpoint.
        """
        if request.provider != self.kind:
            raise ConfigError(f"request for provider {request.provider!r} sent to AnthropicProvider")
        if request.base_url is not None and request.base_url.rstrip("/") != (self.base_url or "").rstrip("/"):
            raise ConfigError(f"request base_url {request.base_url!r} differs from the provider's {self.base_url!r}")
        if request.ingestion not in ("inline", "anthropic_document"):
            raise ConfigError(
                f"ingestion path {request.ingestion!r} is not served by AnthropicProvider "
                "(use 'inline' or 'anthropic_document')"
            )
        params = request.params
        if "max_tokens" not in params or params["max_tokens"] is None:
            raise ConfigError(
                f"the Anthropic Messages API requires max_tokens: set params.max_tokens for model {request.model!r}"
            )
        unsupported = sorted(k for k in params if k in _UNSUPPORTED)
        if unsupported:
            raise ConfigError(
                f"parameter(s) {unsupported} are not accepted by the Anthropic Messages API; "
                "remove them from the Anthropic model's params"
            )
        sampling = {k: params[k] for k in _SAMPLING if k in params}
        if sampling and not self.sampling_params_allowed:
            raise ConfigError(
                f"parameter(s) {sorted(sampling)} are rejected (HTTP 400) by Anthropic API version "
                f"{self.anthropic_version}; remove them, or build AnthropicProvider with "
                "anthropic_version='2023-06-01' for models that still accept them"
            )

        system: str | None = None
        messages: list[dict[str, Any]] = []
        for i, m in enumerate(request.messages):
            role = m["role"]
            if role == "system":
                if system is not None or messages:
                    raise ConfigError(
                        "Anthropic takes one system prompt before the conversation; got a second "
                        f"or misplaced system message (message {i + 1})"
                    )
                system = m["content"]
            elif role in ("user", "assistant"):
                messages.append({"role": role, "content": m["content"]})
            else:
                raise ConfigError(f"message {i + 1}: role {role!r} is not supported by Anthropic (user/assistant)")
        if not messages:
            raise ConfigError("the request has no user message")
        if request.ingestion == "anthropic_document":
            if messages[-1]["role"] != "user":
                raise ConfigError(
                    "anthropic_document needs the last message to be the user turn the document is attached to"
                )
            messages[-1]["content"] = [{"type": "text", "text": messages[-1]["content"]}]

        kwargs: dict[str, Any] = {"model": request.model, "max_tokens": params["max_tokens"], "messages": messages}
        if system is not None:
            kwargs["system"] = system
        if "stop" in params:
            stop = params["stop"]
            kwargs["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
        if sampling:
            kwargs["extra_body"] = sampling
        return kwargs

    def _file_source(self, doc: Document) -> dict[str, Any]:
        _check_media_type(doc)
        media_type = "text/plain" if is_text_media_type(doc.media_type) else doc.media_type
        # Memo key = everything the upload carries (bytes, filename, media type sent).
        memo = (doc.sha256, doc.filename, media_type)
        with self._upload_lock:
            file_id = self._file_ids.get(memo)
            if file_id is None:
                uploaded = self.call(
                    self.client.beta.files.upload, file=(doc.filename, doc.content, media_type), betas=[FILES_API_BETA]
                )
                file_id = uploaded.id
                self._file_ids[memo] = file_id
        return {"type": "file", "file_id": file_id}

    def call(self, method: Any, **kwargs: Any) -> Any:
        """``method(**kwargs, timeout=t)`` on :attr:`client` with SDK errors mapped to
        :class:`ProviderError` (retryable or not, the API key redacted from the message). ``t`` is
        :func:`~metamorph.providers.retry.attempt_timeout` of ``timeout_s``: inside a retry loop, no
        more than what is left of its budget. ``method`` takes ``timeout`` (an SDK method, or a
        function passing it on)."""
        timeout = attempt_timeout(self.timeout_s)
        with sdk_errors(anthropic, anthropic.AnthropicError, "Anthropic", self._api_key, timeout):
            return method(**kwargs, timeout=timeout)


def _check_media_type(doc: Document) -> None:
    """Raise ``ConfigError`` for a document the ``anthropic_document`` path does not send
    (:data:`~metamorph.providers.file_inputs.FILE_INPUTS`: PDF or text)."""
    if not FILE_INPUTS["anthropic_document"].accepts(doc.media_type):
        raise ConfigError(
            f"document {doc.filename!r}: media type {doc.media_type!r} cannot be sent as an "
            "Anthropic document block (text-like or application/pdf only)"
        )


def inline_source(doc: Document) -> dict[str, Any]:
    """The Messages API ``source`` of a document sent inline: UTF-8 text, or a base64 PDF.

    Raises:
        ConfigError: a media type the API does not read, or text that is not valid UTF-8.
    """
    _check_media_type(doc)
    if is_text_media_type(doc.media_type):
        try:
            text = doc.content.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ConfigError(f"document {doc.filename!r} ({doc.media_type}) is not valid UTF-8: {err}") from None
        return {"type": "text", "media_type": "text/plain", "data": text}
    return {"type": "base64", "media_type": "application/pdf", "data": base64.b64encode(doc.content).decode("ascii")}


def message_result(message: Any, latency: float) -> GenerationResult:
    """The :class:`GenerationResult` of a Messages API reply (text blocks joined; prompt tokens
    include cache reads and writes); ``latency`` in seconds, ``None`` for a batch item.

    Raises:
        ProviderError: an error carried in the reply body, or a reply with no text block (not
            retryable; stored as an error, never as an empty completion).
    """
    failed = error_in_body(message, "Anthropic")
    if failed is not None:
        raise failed
    blocks = [block for block in (message.content or []) if getattr(block, "type", None) == "text"]
    if not blocks:  # e.g. only tool_use blocks: no completion text, never stored as ""
        raise no_text_error("Anthropic", message.stop_reason)
    text = "".join(block.text for block in blocks)
    usage = message.usage
    prompt_tokens = None
    if usage is not None and getattr(usage, "input_tokens", None) is not None:
        prompt_tokens = (
            usage.input_tokens
            + (getattr(usage, "cache_creation_input_tokens", None) or 0)
            + (getattr(usage, "cache_read_input_tokens", None) or 0)
        )
    reason = message.stop_reason
    return GenerationResult(
        text=text,
        finish_reason=_FINISH_REASONS.get(reason, reason) if reason is not None else None,
        prompt_tokens=prompt_tokens,
        completion_tokens=getattr(usage, "output_tokens", None),
        latency_s=latency,
        model_id=message.model,
        model_version=message.model,
        system_fingerprint=None,
    )
