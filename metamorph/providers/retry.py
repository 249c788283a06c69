"""Retry policy for provider calls: the *only* retry layer (the SDKs run with ``max_retries=0``).

A provider's ``generate`` makes exactly one attempt and raises
:class:`~metamorph.providers.base.ProviderError` on failure. :func:`call_with_retries` retries
the errors marked ``retryable`` with capped exponential backoff and jitter, honours a server's
``Retry-After`` and stops once the time budget :attr:`RetryPolicy.max_total_s` would be exceeded.
The budget bounds the whole request, attempts included: while an attempt runs,
:func:`attempt_timeout` gives the provider the time left of it, and the provider hands the SDK the
smaller of that and its own per-request timeout, so a server that hangs is cut when the budget ends.

:func:`classify_status` decides which HTTP failures are retryable and :func:`parse_retry_after`
reads the server's requested delay; both are used by the provider adapters to build the
``ProviderError`` they raise.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, Awaitable, Callable, TypeVar

from metamorph.providers.base import ProviderError

__all__ = [
    "RetryPolicy",
    "acall_with_retries",
    "attempt_timeout",
    "backoff_delay",
    "call_with_retries",
    "classify_status",
    "parse_retry_after",
]

T = TypeVar("T")

#: HTTP statuses that are worth retrying besides every 5xx (529 = Anthropic "overloaded").
RETRYABLE_STATUSES = frozenset({408, 409, 429, 529})


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a failed provider call.

    Attributes:
        max_attempts: total attempts including the first one (1 = never retry).
        base_delay_s: backoff before the 2nd attempt, in seconds; doubles at each retry.
        max_delay_s: cap on the exponential backoff, in seconds (a server's ``Retry-After``
            may ask for longer and is honoured).
        max_total_s: time budget in seconds of the whole request, measured with ``clock`` from the
            start of the first attempt: an attempt is given at most what is left of it as its
            timeout (:func:`attempt_timeout`), and a wait that would end after ``max_total_s`` is not
            started (the last error is re-raised instead).
        jitter: if ``True``, "equal jitter": each backoff is drawn uniformly from
            ``[d/2, d]`` where ``d`` is the capped exponential delay; if ``False`` it is ``d``.

    Raises:
        ValueError: on a non-positive ``max_attempts`` or a negative delay/budget.
    """

    max_attempts: int = 6
    base_delay_s: float = 1.0
    max_delay_s: float = 60.0
    max_total_s: float = 300.0
    jitter: bool = True

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        for name in ("base_delay_s", "max_delay_s", "max_total_s"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


#: Seconds left of the budget of the :func:`call_with_retries` running in this context (a function
#: of no argument), ``None`` outside one. A context variable: each thread of a runner has its own.
_BUDGET_LEFT: ContextVar[Callable[[], float] | None] = ContextVar("metamorph_retry_budget_left", default=None)


def attempt_timeout(own_s: float) -> float:
    """The timeout (seconds) to give the attempt that starts now: ``own_s`` (the provider's
    per-request timeout), or, inside :func:`call_with_retries`, what is left of its
    ``max_total_s`` budget when that is less (never below 1 ms)."""
    left = _BUDGET_LEFT.get()
    if left is None:
        return own_s
    return min(own_s, max(0.001, left()))


def backoff_delay(
    policy: RetryPolicy, retry_number: int, rng: random.Random, retry_after: float | None = None
) -> float:
    """Seconds to wait before retry number ``retry_number`` (1 = the wait before attempt 2).

    The exponential delay is ``d = min(max_delay_s, base_delay_s * 2**(retry_number-1))``; with
    jitter the result is uniform in ``[d/2, d]``. If the server sent ``retry_after`` (seconds) the
    result is at least ``retry_after``.
    """
    exp = min(policy.max_delay_s, policy.base_delay_s * (2.0 ** (retry_number - 1)))
    delay = exp / 2.0 + rng.uniform(0.0, exp / 2.0) if policy.jitter else exp
    if retry_after is not None and retry_after > delay:
        delay = float(retry_after)
    return delay


def call_with_retries(
    fn: Callable[[], T],
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], Any] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    rng: random.Random | None = None,
) -> tuple[T, int]:
    """Call ``fn()`` until it succeeds, retrying retryable :class:`ProviderError` s.

    Args:
        fn: zero-argument callable making ONE attempt (e.g. ``lambda: provider.generate(req)``);
            while it runs, :func:`attempt_timeout` reads what is left of the budget.
        policy: the :class:`RetryPolicy`.
        sleep: called with the wait in seconds between attempts (inject a fake in tests).
        clock: monotonic clock in seconds, used for the ``max_total_s`` budget.
        rng: random source of the jitter (default: a fresh ``random.Random()``).

    Returns:
        ``(result, attempts)``: ``fn``'s return value and how many attempts were made (1 = no retry).

    Raises:
        ProviderError: at once (after 1 attempt) if it is not ``retryable``; otherwise the last
            error once ``max_attempts`` attempts failed or the next wait would exceed
            ``max_total_s``. The raised error carries an ``attempts`` attribute (int).
        Exception: any other exception from ``fn`` propagates immediately, unretried.
    """
    rng = rng if rng is not None else random.Random()
    start = clock()
    token = _BUDGET_LEFT.set(lambda: policy.max_total_s - (clock() - start))
    try:
        attempt = 0
        while True:
            attempt += 1
            try:
                return fn(), attempt
            except ProviderError as err:
                sleep(_wait_or_raise(err, attempt, policy, rng, clock() - start))
    finally:
        _BUDGET_LEFT.reset(token)


async def acall_with_retries(
    fn: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
    rng: random.Random | None = None,
) -> tuple[T, int]:
    """:func:`call_with_retries` for a coroutine function: ``await fn()`` makes ONE attempt and
    ``await sleep(seconds)`` waits between attempts. Same policy, classification, budget
    (:func:`attempt_timeout` reads it inside the attempt: the budget lives in the task's context),
    return value and exceptions."""
    rng = rng if rng is not None else random.Random()
    start = clock()
    token = _BUDGET_LEFT.set(lambda: policy.max_total_s - (clock() - start))
    try:
        attempt = 0
        while True:
            attempt += 1
            try:
                return await fn(), attempt
            except ProviderError as err:
                await sleep(_wait_or_raise(err, attempt, policy, rng, clock() - start))
    finally:
        _BUDGET_LEFT.reset(token)


def _wait_or_raise(err: ProviderError, attempt: int, policy: RetryPolicy, rng: random.Random, elapsed: float) -> float:
    """Seconds to wait before the next attempt after ``err`` ended attempt number ``attempt``,
    ``elapsed`` seconds into the request; re-raises ``err`` (with ``attempts`` set) when it is not
    retryable, the attempts are used up, or the wait would end past ``max_total_s``."""
    err.attempts = attempt  # type: ignore[attr-defined]
    if not err.retryable or attempt >= policy.max_attempts:
        raise err
    wait = backoff_delay(policy, attempt, rng, err.retry_after)
    if elapsed + wait >= policy.max_total_s:
        raise err
    return wait


def classify_status(status: int | None, body: str | None) -> bool:
    """Whether a failed HTTP call may be retried.

    Retryable: 408 (timeout), 409 (conflict), 429 (rate limit), any 5xx (incl. 529 overloaded),
    or a response body containing ``"overloaded"`` (case-insensitive, e.g. Anthropic's
    ``overloaded_error``). Everything else (400, 401, 403, 404, 422, ...) is not.
    """
    if status is not None and (status in RETRYABLE_STATUSES or 500 <= status <= 599):
        return True
    return bool(body) and "overloaded" in body.lower()


def _header(headers: Mapping[str, Any], name: str) -> Any:
    try:
        value = headers.get(name)  # case-insensitive for httpx/httpx2 Headers
    except Exception:  # pragma: no cover - exotic mappings
        value = None
    if value is not None:
        return value
    lname = name.lower()
    for key, val in headers.items():
        if isinstance(key, str) and key.lower() == lname:
            return val
    return None


def _parse_seconds(value: Any) -> float | None:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds


def parse_retry_after(value: str | int | float | Mapping[str, Any] | None, *, now: float | None = None) -> float | None:
    """Seconds a server asked us to wait, or ``None`` if it did not say (or said nonsense).

    Args:
        value: a ``Retry-After`` value (delay in seconds, e.g. ``"2"`` / ``"1.5"``, or an
            HTTP-date such as ``"Wed, 21 Oct 2026 07:28:00 GMT"``), or a headers mapping, in which
            case ``retry-after-ms`` (milliseconds, preferred when valid) then ``retry-after`` are
            read, case-insensitively.
        now: current POSIX time in seconds for HTTP-dates (default ``time.time()``).

    Returns:
        The delay in seconds (``>= 0``; an HTTP-date in the past gives ``0.0``), or ``None`` for a
        missing, negative, non-finite or unparsable value.
    """
    if value is None:
        return None
    if isinstance(value, Mapping) or (hasattr(value, "get") and hasattr(value, "items")):
        ms = _parse_seconds(_header(value, "retry-after-ms"))  # type: ignore[arg-type]
        if ms is not None:
            return ms / 1000.0
        return parse_retry_after(_header(value, "retry-after"), now=now)  # type: ignore[arg-type]
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return _parse_seconds(value)
    text = str(value).strip()
    if not text:
        return None
    seconds = _parse_seconds(text)
    if seconds is not None:
        return seconds
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:  # HTTP-dates are GMT; a naive result is malformed
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)
