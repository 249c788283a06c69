"""Translating the official SDKs' exceptions into :class:`ProviderError` (one place for both SDKs).

The openai and anthropic SDKs share one exception layout (``APIStatusError`` with
``status_code``/``response``, ``APITimeoutError``, ``APIConnectionError`` and a base error). The
retry classification is :func:`metamorph.providers.retry.classify_status`; the API key is
redacted from every message and the SDK exception is not chained (its body may echo the key).
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from types import ModuleType
from typing import Any, Iterator

from metamorph.providers.base import ProviderError
from metamorph.providers.retry import classify_status, parse_retry_after

__all__ = [
    "RETRYABLE_ERROR_TYPES",
    "async_http_client",
    "body_text",
    "error_in_body",
    "no_text_error",
    "redact",
    "sdk_errors",
]


def async_http_client(sdk: ModuleType, max_connections: int) -> Any:
    """The HTTP client for an SDK's async client (``openai.AsyncOpenAI`` / ``anthropic.AsyncAnthropic``):
    the SDK's aiohttp transport (``DefaultAioHttpClient``) when aiohttp is installed, else its default
    httpx2 one; either keeps up to ``max_connections`` connections open and alive. The SDK defaults
    keep 100 alive, so at a higher concurrency connections would be closed and reopened; and the
    httpx2 pool scans every connection for each request, which costs more CPU than the request at
    hundreds of connections."""
    import httpx2

    limits = httpx2.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
    try:
        import aiohttp  # noqa: F401  (the transport's dependency)

        return sdk.DefaultAioHttpClient(limits=limits)
    except (ImportError, RuntimeError):  # the SDK without its aiohttp extra
        return sdk.DefaultAsyncHttpxClient(limits=limits)


def redact(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` replaced by ``[REDACTED]``."""
    if secret:
        text = text.replace(secret, "[REDACTED]")
    return text


def body_text(err: Any) -> str | None:
    """The HTTP body of an SDK status error as text (None when unavailable)."""
    response = getattr(err, "response", None)
    try:
        text = response.text if response is not None else None
    except Exception:  # body not read / not decodable
        text = None
    if not text and getattr(err, "body", None) is not None:
        text = str(err.body)
    return text


@contextmanager
def sdk_errors(
    sdk: ModuleType, base_error: type[Exception], label: str, api_key: str | None, timeout_s: float
) -> Iterator[None]:
    """Run an SDK call; raise :class:`ProviderError` (status, retryable, retry_after) on failure.

    ``sdk`` is the ``openai`` or ``anthropic`` module, ``base_error`` its root exception
    (``openai.OpenAIError`` / ``anthropic.AnthropicError``), ``label`` the provider name used in
    messages. Status errors are retryable per :func:`classify_status`; timeouts, connection
    errors and a response body that is not valid JSON (truncated, or an HTML error page) are
    retryable; anything else the SDK raises is not.
    """
    try:
        yield
    except sdk.APIStatusError as err:
        status = err.status_code
        raise ProviderError(
            redact(f"{label} HTTP {status}: {err.message}", api_key),
            status=status,
            retryable=classify_status(status, body_text(err)),
            retry_after=parse_retry_after(err.response.headers),
        ) from None
    except sdk.APITimeoutError:
        raise ProviderError(f"{label} request timed out after {timeout_s:g} s", status=None, retryable=True) from None
    except sdk.APIConnectionError as err:
        raise ProviderError(
            redact(f"{label} connection error: {err.message}", api_key), status=None, retryable=True
        ) from None
    except json.JSONDecodeError as err:  # a truncated or non-JSON body: a transport fault, worth a retry
        raise ProviderError(
            f"{label} response body is not valid JSON ({err.msg}: char {err.pos})", status=None, retryable=True
        ) from None
    except base_error as err:  # e.g. response validation: not worth retrying
        raise ProviderError(redact(f"{label} error {type(err).__name__}: {err}", api_key), retryable=False) from None


#: Error types in a 200 body that say "try again" (OpenAI ``server_error``; Anthropic ``api_error``,
#: ``overloaded_error``, ``rate_limit_error``).
RETRYABLE_ERROR_TYPES = frozenset(
    {"server_error", "api_error", "overloaded_error", "rate_limit_error", "rate_limit_exceeded"}
)


def error_in_body(response: Any, label: str) -> ProviderError | None:
    """A :class:`ProviderError` for a 200 response whose body is an error object, else ``None``.

    Some gateways answer HTTP 200 with ``{"error": {...}}`` (OpenAI style) or ``{"type": "error",
    "error": {...}}`` (Anthropic style); the SDKs then build a response object with no choices or
    content, which must never be stored as an (empty) completion. Retryable when the error type is
    in :data:`RETRYABLE_ERROR_TYPES` or the message says "overloaded".
    """
    err = getattr(response, "error", None)
    if err is None and getattr(response, "type", None) != "error":
        return None
    get = err.get if isinstance(err, dict) else (lambda name: getattr(err, name, None))
    kind = get("type") if err is not None else None
    message = (get("message") if err is not None else None) or "no message"
    return ProviderError(
        f"{label} returned HTTP 200 with an error body ({kind}): {message}",
        status=200,
        retryable=kind in RETRYABLE_ERROR_TYPES or classify_status(None, str(message)),
    )


def no_text_error(label: str, finish_reason: str | None, refusal: str | None = None) -> ProviderError:
    """The error of a reply that carries no completion text: OpenAI's ``content: null`` (a refusal,
    a tool call) or an Anthropic reply without a text block. Not retryable (the same request
    would likely get the same reply); the runner stores it as an error, so it is never served as an
    empty completion and the next run asks again. The refusal's text, if any, is quoted (first 200
    characters)."""
    why = f"; refusal: {refusal[:200]!r}" if refusal else ""
    return ProviderError(f"{label} reply has no text (finish_reason {finish_reason}{why})", retryable=False)
