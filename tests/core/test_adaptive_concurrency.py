"""Adaptive concurrency: 429s lower how many requests the runner keeps in flight, successes raise it back.

The limit itself (:class:`metamorph.providers.adaptive.AdaptiveLimit`) with a fake clock, then the
runner against a rate-limited asynchronous stub (:mod:`tests.core.stub_async`) with the real
OpenAI SDK and a real DuckDB cache, counted at the stub.
"""

import asyncio

import pytest

from metamorph.cache import GenerationCache
from metamorph.providers.adaptive import AdaptiveLimit
from metamorph.providers.base import GenerationRequest
from metamorph.providers.openai_provider import OpenAIProvider
from metamorph.providers.retry import RetryPolicy
from metamorph.runner import run_requests
from tests.core.stub_async import AsyncStub, StubThread


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_throttle_halves_the_limit_once_per_round_and_successes_raise_it_back():
    clock = Clock()
    limit = AdaptiveLimit(16, quiet_s=5.0, clock=clock)
    limit.throttled(0, None)  # 16 -> 8, round 1
    limit.throttled(0, None)  # started before the decrease: the same burst, no second decrease
    assert (limit.limit, limit.threshold, limit.round, limit.decreases) == (8.0, 8.0, 1, 1)
    limit.throttled(1, None)  # 8 -> 4
    assert (limit.limit, limit.round) == (4.0, 2)
    limit.succeeded()  # at the threshold: + 1/4
    limit.succeeded()  # + 1/4.25
    assert limit.limit == pytest.approx(4.0 + 1 / 4 + 1 / 4.25)
    clock.now += 5.0  # quiet for quiet_s: the threshold is the maximum again, + 1 per success
    limit.succeeded()
    assert (limit.threshold, limit.limit) == (16.0, pytest.approx(5.0 + 1 / 4 + 1 / 4.25))
    for _ in range(20):
        limit.succeeded()
    assert limit.limit == 16.0  # never above the maximum


def test_slots_follow_the_limit_and_a_retry_waits_ahead_of_new_requests():
    async def scenario() -> list[str]:
        limit = AdaptiveLimit(4)
        for _ in range(4):
            await limit.acquire()
        limit.throttled(0, None)  # 4 -> 2 with 4 slots held
        order: list[str] = []
        assert limit.over()
        limit.release()  # a throttled request gives its slot up for its wait: 3 held, still over
        limit.release()  # 2 held: at the limit
        assert not limit.over()

        async def take(name: str, priority: bool) -> None:
            await limit.acquire(priority=priority)
            order.append(name)

        new = asyncio.create_task(take("new", False))
        await asyncio.sleep(0)
        retry = asyncio.create_task(take("retry", True))
        await asyncio.sleep(0)
        assert order == [] and limit.in_flight == 2  # both wait: no free slot
        limit.release()
        await asyncio.sleep(0)
        assert order == ["retry"]  # the retry first
        limit.release()
        await asyncio.gather(new, retry)
        assert order == ["retry", "new"] and (limit.in_flight, limit.peak) == (2, 4)
        return order

    asyncio.run(scenario())


def test_429s_lower_the_requests_in_flight_and_every_request_is_answered_once(tmp_path, clean_proxy_env):
    """The stub serves 8 requests at a time (50 ms each) and answers any request beyond that with a
    429 after 20 ms, Retry-After 0.05 s; the runner may keep 64 in flight. Its first burst finds the
    stub over capacity; the limit falls until the stub sees about its capacity, so the second half
    of the arrivals never finds more than 2 × 8 requests open and most of the 300 get their answer
    at the first attempt. Every request is answered exactly once, none is an error."""
    n = 300
    app = AsyncStub(latency_s=0.05, capacity=8, retry_after_s=0.05, reject_s=0.02)
    server = StubThread(app)
    try:
        provider = OpenAIProvider(
            kind="openai", api_key="sk-test-ADAPT", base_url=server.url + "/v1", max_concurrency=64, timeout_s=30
        )
        reqs = [
            GenerationRequest("openai", "gpt-x", ({"role": "user", "content": f"q{i}"},), {"temperature": 0.0})
            for i in range(n)
        ]
        policy = RetryPolicy(max_attempts=50, base_delay_s=0.01, max_delay_s=0.2, max_total_s=120)
        outcomes, stats = run_requests(
            reqs, provider, GenerationCache(tmp_path / "c.duckdb"), retry=policy, log=lambda m: None
        )
    finally:
        server.close()
    assert [o.result.text for o in outcomes] == [f"echo: q{i}" for i in range(n)]
    assert (stats.calls, stats.errors) == (n, 0)
    assert len(app.answered) == n and set(app.answered.values()) == {1}  # every body answered exactly once
    rejected = [i for i, (_, status) in enumerate(app.arrivals) if status == 429]
    assert len(app.arrivals) == n + len(rejected)
    assert max(o for o, _ in app.arrivals[:64]) > 16  # the first burst: more than twice the capacity open
    assert max(o for o, _ in app.arrivals[len(app.arrivals) // 2 :]) <= 16  # then no more than twice it
    assert len(rejected) < n // 2  # 97 in a run; with the limit held at 64: 537 and up to 39 open in the second half
