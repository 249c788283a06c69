"""Unit tests of metamorph.providers.retry (no HTTP; the HTTP retry paths are in test_providers_http.py)."""

from __future__ import annotations

import calendar
import dataclasses
import random

import pytest

from metamorph.errors import ConfigError
from metamorph.providers.base import ProviderError
from metamorph.providers.retry import (
    RetryPolicy,
    attempt_timeout,
    backoff_delay,
    call_with_retries,
    classify_status,
    parse_retry_after,
)


class FakeTime:
    """A clock that only moves when we 'sleep'."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


class Flaky:
    """Raises the scripted errors in order, then returns 'ok'."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def retryable(retry_after: float | None = None) -> ProviderError:
    return ProviderError("busy", status=503, retryable=True, retry_after=retry_after)


# --------------------------------------------------------------------------- classify_status


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504, 529, 599])
def test_classify_status_retryable(status):
    assert classify_status(status, None) is True


@pytest.mark.parametrize("status", [200, 400, 401, 403, 404, 413, 422, 499, 600])
def test_classify_status_not_retryable(status):
    assert classify_status(status, None) is False
    assert classify_status(status, '{"error": {"type": "invalid_request_error"}}') is False


def test_classify_status_overloaded_body():
    assert classify_status(None, None) is False
    assert classify_status(None, "") is False
    assert classify_status(None, "Overloaded") is True
    assert classify_status(400, '{"type":"error","error":{"type":"overloaded_error","message":"x"}}') is True
    assert classify_status(None, "server is OVERLOADED, try later") is True


# --------------------------------------------------------------------------- parse_retry_after


@pytest.mark.parametrize(
    "value, expected",
    [
        ("2", 2.0),
        ("1.5", 1.5),
        (" 3 ", 3.0),
        ("0", 0.0),
        (7, 7.0),
        (0.25, 0.25),
        ("-1", None),
        (-3, None),
        ("abc", None),
        ("", None),
        (None, None),
        ("nan", None),
        ("inf", None),
        (True, None),
    ],
)
def test_parse_retry_after_scalar(value, expected):
    assert parse_retry_after(value) == expected


def test_parse_retry_after_http_date():
    when = calendar.timegm((2026, 10, 21, 7, 28, 0))
    assert parse_retry_after("Wed, 21 Oct 2026 07:28:00 GMT", now=when - 30) == 30.0
    assert parse_retry_after("Wed, 21 Oct 2026 07:28:00 GMT", now=when + 5) == 0.0  # in the past
    assert parse_retry_after("Wed, 99 Foo 2026 07:28:00 GMT", now=when) is None


def test_parse_retry_after_headers_mapping():
    assert parse_retry_after({"retry-after-ms": "1500"}) == 1.5
    assert parse_retry_after({"Retry-After-Ms": "250", "Retry-After": "9"}) == 0.25  # ms preferred
    assert parse_retry_after({"Retry-After": "7"}) == 7.0
    assert parse_retry_after({"retry-after-ms": "bogus", "retry-after": "4"}) == 4.0
    assert parse_retry_after({"content-type": "application/json"}) is None
    assert parse_retry_after({}) is None


# --------------------------------------------------------------------------- RetryPolicy / backoff


def test_policy_defaults_and_frozen():
    p = RetryPolicy()
    assert (p.max_attempts, p.base_delay_s, p.max_delay_s, p.max_total_s, p.jitter) == (6, 1.0, 60.0, 300.0, True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.max_attempts = 3  # type: ignore[misc]
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError):
        RetryPolicy(base_delay_s=-1)


def test_backoff_exponential_capped_without_jitter():
    p = RetryPolicy(base_delay_s=1.0, max_delay_s=4.0, jitter=False)
    rng = random.Random(0)
    assert [backoff_delay(p, n, rng) for n in range(1, 6)] == [1.0, 2.0, 4.0, 4.0, 4.0]
    assert backoff_delay(p, 1, rng, retry_after=10.0) == 10.0
    assert backoff_delay(p, 3, rng, retry_after=0.5) == 4.0


def test_backoff_equal_jitter_bounds():
    p = RetryPolicy(base_delay_s=2.0, max_delay_s=60.0, jitter=True)
    rng = random.Random(1234)
    for n in range(1, 8):
        d = min(60.0, 2.0 * 2 ** (n - 1))
        for _ in range(50):
            assert d / 2 <= backoff_delay(p, n, rng) <= d


# --------------------------------------------------------------------------- call_with_retries


def test_success_first_try():
    t = FakeTime()
    fn = Flaky()
    assert call_with_retries(fn, RetryPolicy(), sleep=t.sleep, clock=t.clock) == ("ok", 1)
    assert t.sleeps == []


def test_retries_then_succeeds_with_exponential_waits():
    t = FakeTime()
    fn = Flaky(retryable(), retryable())
    result = call_with_retries(fn, RetryPolicy(jitter=False), sleep=t.sleep, clock=t.clock)
    assert result == ("ok", 3)
    assert fn.calls == 3
    assert t.sleeps == [1.0, 2.0]


def test_retry_after_is_a_minimum():
    t = FakeTime()
    fn = Flaky(retryable(retry_after=5.0), retryable(retry_after=0.1))
    assert call_with_retries(fn, RetryPolicy(jitter=False), sleep=t.sleep, clock=t.clock) == ("ok", 3)
    assert t.sleeps == [5.0, 2.0]


def test_jittered_waits_are_reproducible_with_seeded_rng():
    runs = []
    for _ in range(2):
        t = FakeTime()
        call_with_retries(
            Flaky(retryable(), retryable(), retryable()),
            RetryPolicy(),
            sleep=t.sleep,
            clock=t.clock,
            rng=random.Random(7),
        )
        runs.append(t.sleeps)
    assert runs[0] == runs[1]
    assert [0.5 <= runs[0][0] <= 1.0, 1.0 <= runs[0][1] <= 2.0, 2.0 <= runs[0][2] <= 4.0] == [True] * 3


def test_non_retryable_raised_after_one_attempt():
    t = FakeTime()
    err = ProviderError("bad request", status=400, retryable=False)
    fn = Flaky(err)
    with pytest.raises(ProviderError) as info:
        call_with_retries(fn, RetryPolicy(), sleep=t.sleep, clock=t.clock)
    assert info.value is err
    assert info.value.attempts == 1
    assert fn.calls == 1 and t.sleeps == []


def test_gives_up_after_max_attempts():
    t = FakeTime()
    fn = Flaky(*[retryable() for _ in range(10)])
    with pytest.raises(ProviderError) as info:
        call_with_retries(fn, RetryPolicy(max_attempts=3, jitter=False), sleep=t.sleep, clock=t.clock)
    assert fn.calls == 3
    assert info.value.attempts == 3
    assert t.sleeps == [1.0, 2.0]


def test_total_wait_budget_reraises_last_error():
    t = FakeTime()
    errors = [retryable() for _ in range(10)]
    fn = Flaky(*errors)
    policy = RetryPolicy(max_attempts=10, base_delay_s=1.0, max_total_s=7.5, jitter=False)
    with pytest.raises(ProviderError) as info:
        call_with_retries(fn, policy, sleep=t.sleep, clock=t.clock)
    # waits 1 + 2 + 4 = 7 <= 7.5; the next wait (8) would end at 15 > 7.5 -> stop after 4 attempts
    assert t.sleeps == [1.0, 2.0, 4.0]
    assert fn.calls == 4
    assert info.value is errors[3] and info.value.attempts == 4
    assert sum(t.sleeps) <= policy.max_total_s


def test_budget_counts_time_spent_in_attempts():
    t = FakeTime()

    def slow_failure():
        t.now += 10.0  # the attempt itself took 10 s
        raise retryable()

    with pytest.raises(ProviderError) as info:
        call_with_retries(slow_failure, RetryPolicy(max_total_s=10.5, jitter=False), sleep=t.sleep, clock=t.clock)
    assert info.value.attempts == 1 and t.sleeps == []


def test_each_attempt_is_given_what_is_left_of_the_budget_as_its_timeout():
    """A server that hangs: every attempt runs until its timeout (at most 3 s here). Attempts start
    at t = 0, 4 (after a 1 s wait) and 9 (after 2 s); with a 10 s budget they get 10, 6 and 1 s, so
    the request ends at t = 10, not at 9 + 3 = 12 (the next wait, 4 s, is not started)."""
    t = FakeTime()
    given = []

    def hangs():
        given.append(attempt_timeout(3.0 if len(given) == 0 else 120.0))
        t.now += min(3.0, given[-1])
        raise retryable()

    policy = RetryPolicy(max_attempts=10, base_delay_s=1.0, max_total_s=10.0, jitter=False)
    start = t.now
    with pytest.raises(ProviderError) as info:
        call_with_retries(hangs, policy, sleep=t.sleep, clock=t.clock)
    # the first attempt's own timeout (3 s) is the smaller; then what is left of the budget
    assert given == [3.0, 6.0, 1.0] and t.sleeps == [1.0, 2.0] and info.value.attempts == 3
    assert t.now - start == 10.0
    assert attempt_timeout(120.0) == 120.0  # outside a retry loop: the provider's own timeout


def test_other_exceptions_are_not_retried():
    t = FakeTime()
    fn = Flaky(ConfigError("bad config"))
    with pytest.raises(ConfigError):
        call_with_retries(fn, RetryPolicy(), sleep=t.sleep, clock=t.clock)
    assert fn.calls == 1 and t.sleeps == []
