"""A user's own HTTP service as the system under test (registry ``provider: http``).

One :meth:`HttpWorkflowProvider.generate` call is ONE ``POST`` to the entry's ``url`` (httpx);
retries belong to :func:`metamorph.providers.retry.call_with_retries`, with the same classifier as
the model providers (:func:`~metamorph.providers.retry.classify_status`: 408, 409, 429 and every
5xx are retried, honouring ``Retry-After``; timeouts and connection failures are retried too).

The request carries (field names from the entry's ``fields``, :class:`~metamorph.models.WorkflowConfig`):

* ``send: multipart`` — a ``multipart/form-data`` body: the document as a file part (its file
  name and media type), the task prompt and, for a ``seeded`` entry, the seed as text fields;
* ``send: json`` — a JSON body ``{<document>: {"filename", "media_type", "content_base64"},
  <prompt>: "...", <seed>: 123}``.

The task prompt is the request's user message (the ``upload`` ingestion path puts only the task
prompt there). The reply is the string the entry's ``reply_pointer`` (RFC 6901) selects in the JSON
response body; a body that is not JSON, a pointer that selects nothing or a value that is not a
string is a failed call (:class:`~metamorph.providers.base.ProviderError`, not retried), never a reply.
An entry's ``extracted_pointer`` (optional) selects the text the service extracted from the upload,
kept as the result's ``extracted_text`` (the same rules: it must select a string).

Headers are read from the environment variables ``headers_env`` names when the provider is built;
their values are sent and never enter a request record, a result, a log line or an error message
(every message and every reply is redacted of them and of the credential after an auth scheme,
``Bearer <token>``; a response body is quoted at most 200 characters, redacted).
"""

from __future__ import annotations

import base64
import json
import threading
import time
from typing import Any

import httpx
import jsonpointer

from metamorph.errors import ConfigError, mask_secrets
from metamorph.providers.base import GenerationRequest, GenerationResult, ProviderError
from metamorph.providers.retry import classify_status, parse_retry_after

__all__ = ["HttpWorkflowProvider", "read_reply", "task_prompt"]

#: Characters of a failed response's body quoted in the error (redacted).
BODY_CHARS = 200


def task_prompt(request: GenerationRequest) -> str:
    """The task prompt a workflow is sent: the request's user messages' text (one on the ``upload`` path)."""
    return "\n\n".join(m["content"] for m in request.messages if m["role"] == "user")


def read_reply(payload: Any, workflow: Any, label: str) -> tuple[str, str | None]:
    """``(reply, extracted text)`` of a workflow's JSON ``payload``: the strings ``workflow``'s
    ``reply_pointer`` and ``extracted_pointer`` select (extracted ``None`` when no
    ``extracted_pointer`` is declared).

    Raises:
        ProviderError: a pointer selects nothing or a value that is not text (not retryable; the
            message begins with ``label``).
    """
    out = []
    for name in ("reply_pointer", "extracted_pointer"):
        pointer = getattr(workflow, name)
        if pointer is None:
            out.append(None)
            continue
        try:
            value = jsonpointer.resolve_pointer(payload, pointer)
        except jsonpointer.JsonPointerException:
            raise ProviderError(f"{label}: {name} {pointer!r} selects nothing in the response") from None
        if not isinstance(value, str):
            raise ProviderError(
                f"{label}: {name} {pointer!r} selects {'null' if value is None else type(value).__name__}, not text"
            )
        out.append(value)
    return out[0], out[1]


#: A header value at least this long found in a reply is replaced by ``[REDACTED]`` (as is the
#: credential after an auth scheme); a shorter one makes the call fail (:meth:`HttpWorkflowProvider.generate`).
MIN_REPLACED_CHARS = 8


class HttpWorkflowProvider:
    """An ``http`` registry entry's service.

    Args:
        url: the address the service listens on (checked by the registry: no credential in it).
        workflow: the entry's :class:`~metamorph.models.WorkflowConfig` (send mode, fields, pointer, timeout).
        headers: header name -> value (read from the environment by the caller; secret).
        max_concurrency: at most this many calls at once (a semaphore; the runner sizes its threads by it).
        deterministic: the registry's declaration (replicates of an unseeded request share one call).
        transport: an httpx transport (tests); ``None`` = a real connection pool.

    Raises:
        ConfigError: ``max_concurrency < 1``.
    """

    kind = "http"

    def __init__(
        self,
        url: str,
        workflow: Any,
        headers: dict[str, str] | None = None,
        max_concurrency: int = 4,
        deterministic: bool = False,
        transport: httpx.BaseTransport | None = None,
    ):
        if max_concurrency < 1:
            raise ConfigError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.url = url
        self.workflow = workflow
        self.max_concurrency = int(max_concurrency)
        self.deterministic = bool(deterministic)
        # a header value and its credential after an auth scheme ("Bearer <token>"), longest first
        values = [v for v in (headers or {}).values() if v]
        parts = [
            v.split(None, 1)[1]
            for v in values
            if len(v.split(None, 1)) == 2 and len(v.split(None, 1)[1]) >= MIN_REPLACED_CHARS
        ]
        self._secrets = sorted(set(values + parts), key=len, reverse=True)
        # a value this short can be ordinary text of a reply ("refer", "med"): replacing it there would
        # change the answer, so a reply holding one is a failed call instead (header name → value)
        self._short = {h: v for h, v in (headers or {}).items() if v and len(v) < MIN_REPLACED_CHARS}
        self._client = httpx.Client(
            headers=dict(headers or {}),
            timeout=httpx.Timeout(workflow.timeout_s),
            limits=httpx.Limits(max_connections=self.max_concurrency),
            transport=transport,
            follow_redirects=False,
        )
        self._slots = threading.BoundedSemaphore(self.max_concurrency)

    def __repr__(self) -> str:  # never show a header value
        return f"HttpWorkflowProvider(url={self.url!r}, version={self.workflow.version!r})"

    def is_deterministic(self, request: GenerationRequest) -> bool:
        """The registry's declaration (``deterministic``), the same for every request."""
        return self.deterministic

    def _redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "[REDACTED]")
        return mask_secrets(text)

    def _body(self, request: GenerationRequest) -> dict[str, Any]:
        """httpx keyword arguments of the call (``files`` + ``data``, or ``json``)."""
        doc = request.document
        if doc is None:
            raise ConfigError("an http workflow is sent a document (ingestion upload); the request has none")
        wf = self.workflow
        prompt, seed = task_prompt(request), request.params.get("seed")
        if wf.send == "json":
            body: dict[str, Any] = {
                wf.field("document"): {
                    "filename": doc.filename,
                    "media_type": doc.media_type,
                    "content_base64": base64.b64encode(doc.content).decode("ascii"),
                },
                wf.field("prompt"): prompt,
            }
            if seed is not None:
                body[wf.field("seed")] = seed
            return {"json": body}
        data = {wf.field("prompt"): prompt}
        if seed is not None:
            data[wf.field("seed")] = str(seed)
        return {"files": {wf.field("document"): (doc.filename, doc.content, doc.media_type)}, "data": data}

    def generate(self, request: GenerationRequest) -> GenerationResult:
        """One POST; the reply at ``reply_pointer`` (and the extracted text at ``extracted_pointer``).

        Raises:
            ProviderError: HTTP status >= 400 (retryable per :func:`classify_status`, with
                ``Retry-After``); a timeout or connection failure (retryable); a redirect (3xx, not
                followed, not retried); a body that is not JSON, or whose ``reply_pointer`` /
                ``extracted_pointer`` selects nothing or a non-string (not retryable).
        """
        kwargs = self._body(request)
        label = f"http workflow {self.url}"
        with self._slots:
            t0 = time.monotonic()
            try:
                resp = self._client.post(self.url, **kwargs)
            except httpx.TimeoutException:
                raise ProviderError(f"{label}: timed out after {self.workflow.timeout_s:g} s", retryable=True) from None
            except httpx.TransportError as exc:
                raise ProviderError(
                    self._redact(f"{label}: connection failed ({type(exc).__name__}: {exc})"), retryable=True
                ) from None
            latency = time.monotonic() - t0
        if resp.status_code >= 400:
            body = resp.text
            raise ProviderError(
                self._redact(f"{label} HTTP {resp.status_code}: {body[:BODY_CHARS]}"),
                status=resp.status_code,
                retryable=classify_status(resp.status_code, body),
                retry_after=parse_retry_after(resp.headers),
            )
        if 300 <= resp.status_code < 400:
            raise ProviderError(
                self._redact(
                    f"{label} HTTP {resp.status_code}: redirected to {resp.headers.get('location', '(no Location)')} "
                    "(redirects are not followed: give the final URL as the entry's url)"
                ),
                status=resp.status_code,
            )
        try:
            payload = resp.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ProviderError(
                self._redact(
                    f"{label} HTTP {resp.status_code}: the body is not JSON "
                    f"({resp.headers.get('content-type', 'no content-type')}): {resp.text[:BODY_CHARS]}"
                ),
                status=resp.status_code,
            ) from None
        try:
            reply, extracted = read_reply(payload, self.workflow, f"{label} HTTP {resp.status_code}")
        except ProviderError as exc:
            raise ProviderError(str(exc), status=resp.status_code) from None
        for header, value in self._short.items():
            if value in reply or (extracted is not None and value in extracted):
                raise ProviderError(
                    f"{label} HTTP {resp.status_code}: the reply holds the value of the header {header} "
                    f"({len(value)} characters, too short to replace without changing the reply); "
                    "a header value is never stored, so the reply is not",
                    status=resp.status_code,
                )
        for secret in self._secrets:  # a service that echoes the header: the reply goes to the cache
            reply = reply.replace(secret, "[REDACTED]")
            extracted = None if extracted is None else extracted.replace(secret, "[REDACTED]")
        return GenerationResult(
            text=reply,
            extracted_text=extracted,
            finish_reason="stop",
            latency_s=latency,
            model_id=self.url,
            model_version=self.workflow.version,
        )

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()
