"""OpenAI (and OpenAI-compatible server) adapter: Chat Completions, or Files + Responses.

One :meth:`OpenAIProvider.generate` call is ONE HTTP attempt (the SDK's own retries are off,
``max_retries=0``); retries belong to :func:`metamorph.providers.retry.call_with_retries`.

Ingestion paths:

* ``inline``: ``POST {base_url}/chat/completions`` with ``model``, ``messages`` and only the
  decoding parameters present in ``request.params``.
* ``openai_file``: the document is uploaded once per (sha256, filename, media type) — what the
  upload carries — (``POST /files``,
  ``purpose="user_data"``), then ``POST /responses`` references it with an ``input_file`` block.
  Only the media types the Responses API documents for ``input_file`` are sent
  (:data:`metamorph.providers.file_inputs.FILE_INPUTS`); another is a ``ConfigError`` before any call.
  The Responses API has no ``seed``, ``stop``, ``frequency_penalty`` or ``presence_penalty``:
  those are **dropped** (listed in :data:`RESPONSES_DROPPED_PARAMS`, logged once per provider).

The API key is only handed to the SDK (which sends it as ``Authorization: Bearer``); it never
enters a request record, a result, or an error message.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import openai
from openai.types.chat import ChatCompletion

from metamorph.errors import ConfigError
from metamorph.providers.base import GenerationRequest, GenerationResult, ProviderError
from metamorph.providers.file_inputs import FILE_INPUTS
from metamorph.providers.retry import attempt_timeout, classify_status
from metamorph.providers.sdk_errors import async_http_client, error_in_body, no_text_error, redact, sdk_errors

__all__ = ["OpenAIProvider", "RESPONSES_DROPPED_PARAMS", "LLAMA_CPP_ONLY_PARAMS"]

log = logging.getLogger(__name__)

#: Provider kinds this adapter serves.
KINDS = ("openai", "openai_compatible")

#: Non-OpenAI sampling parameters: ``extra_body`` for ``openai_compatible``, ConfigError for ``openai``.
LLAMA_CPP_ONLY_PARAMS = ("top_k", "repeat_penalty", "grammar")

#: Decoding parameters the Responses API does not accept; dropped on the ``openai_file`` path.
RESPONSES_DROPPED_PARAMS = ("seed", "stop", "frequency_penalty", "presence_penalty")

_CHAT_PASSTHROUGH = ("temperature", "top_p", "seed", "frequency_penalty", "presence_penalty", "stop", "response_format")

_FINISH_REASONS = {"stop": "stop", "length": "length", "max_tokens": "length", "max_output_tokens": "length"}


def _normalise_finish(reason: str | None) -> str | None:
    if reason is None:
        return None
    return _FINISH_REASONS.get(reason, reason)


class OpenAIProvider:
    """Provider for the OpenAI API (``kind="openai"``) or an OpenAI-compatible server
    (``kind="openai_compatible"``, e.g. llama.cpp server, vLLM; give its ``base_url``).

    Args:
        kind: ``"openai"`` or ``"openai_compatible"``.
        api_key: the secret key (read from the environment by the caller); never logged or stored
            in results. Sent by the SDK as ``Authorization: Bearer <key>``.
        base_url: API root including ``/v1`` (``None`` = SDK default, ``https://api.openai.com/v1``).
        max_concurrency: at most this many :meth:`generate` calls run at once on this instance
            (enforced with a semaphore; the caller may also use it to size its thread pool).
        timeout_s: per-HTTP-request timeout in seconds.
        organization: optional OpenAI organization id (``OpenAI-Organization`` header).
        deterministic: declare every request's reply a function of the request alone (registry
            ``deterministic: true``), so replicates share one call (:mod:`metamorph.replicates`);
            default False — an API backend is not bit-reproducible even at temperature 0.

    Raises:
        ConfigError: unknown ``kind``, empty ``api_key`` or ``max_concurrency < 1``.
    """

    def __init__(
        self,
        kind: str,
        api_key: str,
        base_url: str | None = None,
        max_concurrency: int = 4,
        timeout_s: float = 120.0,
        organization: str | None = None,
        deterministic: bool = False,
    ):
        if kind not in KINDS:
            raise ConfigError(f"OpenAIProvider kind must be one of {list(KINDS)}, got {kind!r}")
        if not api_key:
            raise ConfigError(
                f"OpenAIProvider ({kind}): api_key is empty; set the provider's API-key "
                "environment variable (a server without auth accepts any placeholder, e.g. 'none')"
            )
        if max_concurrency < 1:
            raise ConfigError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.kind = kind
        self.base_url = base_url
        self.max_concurrency = int(max_concurrency)
        self.timeout_s = float(timeout_s)
        self.deterministic = bool(deterministic)
        self._api_key = api_key
        self._organization = organization
        self.client = openai.OpenAI(
            api_key=api_key, base_url=base_url, organization=organization, max_retries=0, timeout=self.timeout_s
        )
        self._slots = threading.BoundedSemaphore(self.max_concurrency)
        self._file_ids: dict[tuple[str, str, str], str] = {}
        self._upload_lock = threading.Lock()
        self._warned_dropped: set[str] = set()

    def is_deterministic(self, request: GenerationRequest) -> bool:
        """The registry's declaration (``deterministic``), the same for every request."""
        return self.deterministic

    def __reduce__(self) -> tuple:
        """Rebuilt from its arguments in another process (the runner's client processes: pickled
        into the pipe to the process, which carries the API key; never into a file, log or error)."""
        args = (
            self.kind,
            self._api_key,
            self.base_url,
            self.max_concurrency,
            self.timeout_s,
            self._organization,
            self.deterministic,
        )
        return (type(self), args)

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIProvider(kind={self.kind!r}, base_url={self.base_url!r}, max_concurrency={self.max_concurrency})"

    # ------------------------------------------------------------------ public

    def generate(self, request: GenerationRequest) -> GenerationResult:
        """Make ONE attempt at ``request`` and return the result (``attempts=1``, ``error=None``).

        ``inline`` -> Chat Completions; ``openai_file`` -> upload (memoised per (sha256, filename, media type) on
        this instance) + Responses API. ``latency_s`` is the wall time of the generation call
        (not of the upload). ``model_id`` and ``model_version`` are the model the server reports
        (a dated snapshot for OpenAI); ``system_fingerprint`` is set for Chat Completions.

        Raises:
            ConfigError: before any HTTP request, for a request this provider cannot serve
                (wrong provider kind or base_url, ingestion ``anthropic_document``, an ``openai_file``
                document of a media type ``input_file`` does not take, ``top_k`` /
                ``repeat_penalty`` / ``grammar`` with kind ``openai``, several system messages
                on the Responses path, no user message).
            ProviderError: the HTTP call failed. ``status`` is the HTTP status (``None`` for a
                connection error or timeout, which are retryable); ``retryable`` follows
                :func:`~metamorph.providers.retry.classify_status`; ``retry_after`` comes from the
                ``retry-after-ms`` / ``Retry-After`` response headers. Also (not retryable) when
                the reply carries no completion text: ``content: null`` (a refusal, a tool call)
                or a Responses reply without an ``output_text`` part (unless it was cut at
                ``max_tokens``: that is an empty completion with finish reason ``length``, as on
                Chat Completions).
        """
        self.check_request(request)
        if request.ingestion == "inline":
            kwargs = self.chat_kwargs(request)
            with self._slots:
                start = time.perf_counter()
                response = self.call(self.client.chat.completions.create, **kwargs)
                latency = time.perf_counter() - start
            return self.chat_result(response, latency)
        # openai_file
        kwargs = self._responses_kwargs(request)  # validates params before uploading
        with self._slots:
            file_id = self._file_id(request)
            content = kwargs["input"][-1]["content"]
            content.insert(0, {"type": "input_file", "file_id": file_id})
            start = time.perf_counter()
            response = self.call(self.client.responses.create, **kwargs)
            latency = time.perf_counter() - start
        return self._responses_result(response, latency)

    @asynccontextmanager
    async def async_session(self) -> AsyncIterator[Callable[[GenerationRequest], Awaitable[GenerationResult]]]:
        """An ``async`` :meth:`generate` for the running event loop, open for the ``async with`` block.

        It sends ``inline`` requests with ``openai.AsyncOpenAI`` (its ``post`` of the body
        ``chat.completions.create`` sends, without create's type-driven copy of it; on :func:`~metamorph.providers.
        sdk_errors.async_http_client`: up to ``max_concurrency`` connections kept alive; the caller
        bounds how many calls are in flight) and hands ``openai_file`` requests (upload + Responses)
        to :meth:`generate` on a worker thread. Same request body, result, errors and secret
        handling as :meth:`generate`; the client is closed when the block ends.
        """
        client = openai.AsyncOpenAI(
            api_key=self._api_key,
            base_url=self.base_url,
            organization=self._organization,
            max_retries=0,
            timeout=self.timeout_s,
            http_client=async_http_client(openai, self.max_concurrency),
        )

        async def agenerate(request: GenerationRequest) -> GenerationResult:
            self.check_request(request)
            if request.ingestion != "inline":
                return await asyncio.to_thread(self.generate, request)
            kwargs = self.chat_kwargs(request)
            start = time.perf_counter()
            response = await self.acall(chat, **kwargs)
            return self.chat_result(response, time.perf_counter() - start)

        async def chat(timeout: float, extra_body: dict[str, Any] | None = None, **body: Any) -> Any:
            # The request chat.completions.create sends (path, JSON body, bearer auth, timeout,
            # ChatCompletion reply), through the client's own post: create first copies the body
            # through its parameter types, a third of the SDK's CPU per request, and the body here
            # is plain JSON, which that copy leaves as it is.
            return await client.post(
                "/chat/completions",
                cast_to=ChatCompletion,
                body={**body, **(extra_body or {})},
                options={"timeout": timeout, "security": {"bearer_auth": True}},
            )

        try:
            yield agenerate
        finally:
            await client.close()

    async def acall(self, method: Any, **kwargs: Any) -> Any:
        """:meth:`call` for a coroutine method of an async client."""
        timeout = attempt_timeout(self.timeout_s)
        with sdk_errors(openai, openai.OpenAIError, "OpenAI", self._api_key, timeout):
            return await method(**kwargs, timeout=timeout)

    # ----------------------------------------------------------------- helpers

    def redact(self, text: str) -> str:
        """``text`` with this provider's API key masked."""
        return redact(text, self._api_key)

    def check_request(self, request: GenerationRequest) -> None:
        """Raise ``ConfigError`` for a request this provider cannot send as asked (another
        provider kind or endpoint, an ingestion path it does not support)."""
        if request.provider != self.kind:
            raise ConfigError(
                f"request for provider {request.provider!r} sent to an OpenAIProvider of kind {self.kind!r}"
            )
        if request.base_url is not None and (request.base_url.rstrip("/") != (self.base_url or "").rstrip("/")):
            raise ConfigError(
                f"request base_url {request.base_url!r} differs from the provider's "
                f"{self.base_url!r}; the cache key would not describe the endpoint called"
            )
        if request.ingestion not in ("inline", "openai_file"):
            raise ConfigError(
                f"ingestion path {request.ingestion!r} is not served by OpenAIProvider (use 'inline' or 'openai_file')"
            )
        doc = request.document
        if (
            request.ingestion == "openai_file"
            and doc is not None
            and not FILE_INPUTS["openai_file"].accepts(doc.media_type)
        ):
            raise ConfigError(
                f"document {doc.filename!r}: media type {doc.media_type!r} is not a file type the Responses API "
                "documents for input_file (metamorph.providers.file_inputs.FILE_INPUTS)"
            )

    def _split_extra(self, params: dict[str, Any]) -> dict[str, Any]:
        extra = {k: params[k] for k in LLAMA_CPP_ONLY_PARAMS if k in params}
        if extra and self.kind == "openai":
            raise ConfigError(
                f"parameter(s) {sorted(extra)} are not OpenAI API parameters; they are only "
                "sent (in extra_body) to 'openai_compatible' servers such as llama.cpp"
            )
        return extra

    def chat_kwargs(self, request: GenerationRequest) -> dict[str, Any]:
        """The Chat Completions request body of ``request`` (also one Batch API line's body)."""
        params = request.params
        kwargs: dict[str, Any] = {"model": request.model, "messages": [dict(m) for m in request.messages]}
        for name in _CHAT_PASSTHROUGH:
            if name in params:
                kwargs[name] = params[name]
        if "max_tokens" in params:
            key = "max_completion_tokens" if self.kind == "openai" else "max_tokens"
            kwargs[key] = params["max_tokens"]
        extra = self._split_extra(params)
        if extra:
            kwargs["extra_body"] = extra
        return kwargs

    def _responses_kwargs(self, request: GenerationRequest) -> dict[str, Any]:
        params = request.params
        extra = self._split_extra(params)
        systems = [m["content"] for m in request.messages if m["role"] in ("system", "developer")]
        if len(systems) > 1:
            raise ConfigError(
                "the openai_file path sends the system message as `instructions`; "
                f"got {len(systems)} system messages, expected at most one"
            )
        turns = [m for m in request.messages if m["role"] not in ("system", "developer")]
        if not turns or turns[-1]["role"] != "user":
            raise ConfigError(
                "the openai_file path needs the last non-system message to be the user turn the document is attached to"
            )
        input_items: list[dict[str, Any]] = [{"role": m["role"], "content": m["content"]} for m in turns[:-1]]
        input_items.append({"role": "user", "content": [{"type": "input_text", "text": turns[-1]["content"]}]})
        kwargs: dict[str, Any] = {"model": request.model, "input": input_items}
        if systems:
            kwargs["instructions"] = systems[0]
        for name in ("temperature", "top_p"):
            if name in params:
                kwargs[name] = params[name]
        if "max_tokens" in params:
            kwargs["max_output_tokens"] = params["max_tokens"]
        if "response_format" in params:
            kwargs["text"] = {"format": _responses_format(params["response_format"])}
        dropped = [name for name in RESPONSES_DROPPED_PARAMS if name in params]
        for name in dropped:
            if name not in self._warned_dropped:
                self._warned_dropped.add(name)
                log.warning("OpenAI Responses API has no %r parameter: it is not sent (openai_file path)", name)
        if extra:
            kwargs["extra_body"] = extra
        return kwargs

    def _file_id(self, request: GenerationRequest) -> str:
        doc = request.document
        assert doc is not None  # GenerationRequest guarantees a document off the inline path
        # Memo key = everything the upload carries: the same bytes sent as record.csv and as
        # record.json are two different files to the workflow (name and type steer its parser).
        memo = (doc.sha256, doc.filename, doc.media_type)
        with self._upload_lock:
            file_id = self._file_ids.get(memo)
            if file_id is None:
                uploaded = self.call(
                    self.client.files.create, file=(doc.filename, doc.content, doc.media_type), purpose="user_data"
                )
                file_id = uploaded.id
                self._file_ids[memo] = file_id
            return file_id

    def call(self, method: Any, **kwargs: Any) -> Any:
        """``method(**kwargs, timeout=t)`` on :attr:`client` with SDK errors mapped to
        :class:`ProviderError` (retryable or not, the API key redacted from the message). ``t`` is
        :func:`~metamorph.providers.retry.attempt_timeout` of ``timeout_s``: inside a retry loop, no
        more than what is left of its budget. ``method`` takes ``timeout`` (an SDK method, or a
        function passing it on)."""
        timeout = attempt_timeout(self.timeout_s)
        with sdk_errors(openai, openai.OpenAIError, "OpenAI", self._api_key, timeout):
            return method(**kwargs, timeout=timeout)

    @staticmethod
    def chat_result(response: Any, latency: float) -> GenerationResult:
        """The :class:`GenerationResult` of a chat completion; ``latency`` in seconds, ``None``
        for a batch item.

        Raises:
            ProviderError: an error carried in the response body, no choices, or ``content: null``
                (a refusal or a tool call; not retryable, stored as an error so the next run asks again).
        """
        failed = error_in_body(response, "OpenAI")
        if failed is not None:
            raise failed
        if not response.choices:
            raise ProviderError("OpenAI returned no choices", retryable=False)
        choice = response.choices[0]
        text = choice.message.content
        if text is None:  # a refusal or a tool call: no completion text, never stored as ""
            raise no_text_error("OpenAI", choice.finish_reason, getattr(choice.message, "refusal", None))
        usage = response.usage
        return GenerationResult(
            text=text,
            finish_reason=_normalise_finish(choice.finish_reason),
            prompt_tokens=getattr(usage, "prompt_tokens", None),
            completion_tokens=getattr(usage, "completion_tokens", None),
            latency_s=latency,
            model_id=response.model,
            model_version=response.model,
            system_fingerprint=getattr(response, "system_fingerprint", None),
        )

    @staticmethod
    def _responses_result(response: Any, latency: float) -> GenerationResult:
        status = getattr(response, "status", None)
        if status == "failed":
            error = getattr(response, "error", None)
            code = getattr(error, "code", None)
            message = getattr(error, "message", None) or "no message"
            raise ProviderError(
                f"OpenAI response failed ({code}): {message}",
                retryable=code in ("server_error", "rate_limit_exceeded") or classify_status(None, message),
            )
        if status == "incomplete":
            details = getattr(response, "incomplete_details", None)
            finish = _normalise_finish(getattr(details, "reason", None) or "incomplete")
        else:
            finish = "stop" if status in (None, "completed") else str(status)
        if not _has_output_text(response) and finish != "length":  # a refusal or tool calls only
            raise no_text_error("OpenAI", finish, _refusal(response))
        usage = response.usage
        return GenerationResult(
            text=response.output_text,
            finish_reason=finish,
            prompt_tokens=getattr(usage, "input_tokens", None),
            completion_tokens=getattr(usage, "output_tokens", None),
            latency_s=latency,
            model_id=response.model,
            model_version=response.model,
            system_fingerprint=None,
        )


def _message_parts(response: Any) -> list[Any]:
    return [
        part
        for item in (getattr(response, "output", None) or [])
        if getattr(item, "type", None) == "message"
        for part in (getattr(item, "content", None) or [])
    ]


def _has_output_text(response: Any) -> bool:
    """Whether a Responses API reply holds an ``output_text`` part (else ``output_text`` is "")."""
    return any(getattr(part, "type", None) == "output_text" for part in _message_parts(response))


def _refusal(response: Any) -> str | None:
    return next((p.refusal for p in _message_parts(response) if getattr(p, "type", None) == "refusal"), None)


def _responses_format(response_format: Any) -> Any:
    """Chat ``response_format`` -> Responses ``text.format`` (json_schema is flattened)."""
    if (
        isinstance(response_format, dict)
        and response_format.get("type") == "json_schema"
        and isinstance(response_format.get("json_schema"), dict)
    ):
        return {"type": "json_schema", **response_format["json_schema"]}
    return response_format
