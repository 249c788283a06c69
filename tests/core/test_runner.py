"""run_requests against the real OpenAI SDK and a local HTTP stub: cache use, errors, versions."""

import time

from metamorph import runner
from metamorph.cache import GenerationCache
from metamorph.providers.base import GenerationRequest
from metamorph.providers.openai_provider import OpenAIProvider
from metamorph.providers.retry import RetryPolicy
from metamorph.runner import RunStats, run_requests
from tests.core.stub_http import Reply

KEY = "sk-test-RUNNER-SECRET"


def reply(text, model):
    return Reply(
        200,
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
        },
    )


def reqs(n, stub):
    return [
        GenerationRequest(
            "openai", "gpt-x", ({"role": "user", "content": f"q{i}"},), {"temperature": 0.0}, repeat_index=1
        )
        for i in range(n)
    ]


def provider(stub):
    return OpenAIProvider(kind="openai", api_key=KEY, base_url=stub.url + "/v1", max_concurrency=2)


def test_hits_are_not_called_and_duplicates_are_called_once(stub, tmp_path):
    stub.script("POST", "/v1/chat/completions", reply("a", "gpt-x-2026-01-01"))
    cache = GenerationCache(tmp_path / "c.duckdb")
    rs = reqs(3, stub)
    outs, stats = run_requests(rs + [rs[0]], provider(stub), cache, log=lambda m: None)
    assert len(stub.requests_to("/v1/chat/completions")) == 3
    assert (stats.calls, stats.cache_hits, stats.done, stats.errors) == (3, 0, 4, 0)
    assert [o.result.text for o in outs] == ["a"] * 4
    outs, stats = run_requests(rs, provider(stub), cache, log=lambda m: None)
    assert len(stub.requests_to("/v1/chat/completions")) == 3  # no new HTTP request
    assert (stats.calls, stats.cache_hits) == (0, 3) and all(o.cache_hit for o in outs)


def test_errors_are_recorded_not_served_and_retried_next_run(stub, tmp_path):
    cache = GenerationCache(tmp_path / "c.duckdb")
    stub.script("POST", "/v1/chat/completions", Reply(400, {"error": {"message": "bad request"}}))
    outs, stats = run_requests(reqs(1, stub), provider(stub), cache, log=lambda m: None)
    assert stats.errors == 1 and outs[0].result.text is None and "400" in outs[0].result.error
    assert KEY not in outs[0].result.error
    assert cache.count(errors=True) == 1
    stub.script("POST", "/v1/chat/completions", reply("fine", "gpt-x-2026-01-01"))
    outs, stats = run_requests(reqs(1, stub), provider(stub), cache, log=lambda m: None)
    assert stats.calls == 1 and outs[0].result.text == "fine" and cache.count(errors=True) == 0


def test_retry_on_429_inside_the_runner(stub, tmp_path):
    stub.script(
        "POST",
        "/v1/chat/completions",
        Reply(429, {"error": {"message": "slow down"}}, {"retry-after": "0"}),
        reply("ok", "gpt-x-2026-01-01"),
    )
    outs, stats = run_requests(
        reqs(1, stub),
        provider(stub),
        GenerationCache(tmp_path / "c.duckdb"),
        retry=RetryPolicy(base_delay_s=0.01, max_delay_s=0.02),
        log=lambda m: None,
    )
    assert outs[0].result.text == "ok" and outs[0].result.attempts == 2
    assert len(stub.requests_to("/v1/chat/completions")) == 2


def test_a_new_resolved_model_version_is_logged(stub, tmp_path):
    cache = GenerationCache(tmp_path / "c.duckdb")
    stub.script("POST", "/v1/chat/completions", reply("a", "gpt-x-2026-01-01"))
    run_requests(reqs(2, stub), provider(stub), cache, log=lambda m: None)
    warnings = []
    stub.script("POST", "/v1/chat/completions", reply("b", "gpt-x-2026-06-01"))
    more = [GenerationRequest("openai", "gpt-x", ({"role": "user", "content": "new"},), {"temperature": 0.0})]
    _, stats = run_requests(more, provider(stub), cache, log=lambda m: None, warn=warnings.append)
    assert warnings == [
        "model version change: openai/gpt-x now resolves to 'gpt-x-2026-06-01'; the cache holds "
        "completions from ['gpt-x-2026-01-01']"
    ]
    assert stats.version_changes == warnings


def test_progress_lines(stub, tmp_path):
    stub.script("POST", "/v1/chat/completions", reply("a", "gpt-x-2026-01-01"))
    lines = []
    run_requests(
        reqs(2, stub), provider(stub), GenerationCache(tmp_path / "c.duckdb"), log=lines.append, progress_every_s=0.0
    )
    assert lines[0] == "generation: 2 requests, 0 served from cache, 2 to call (openai, concurrency 2)"
    assert lines[-1].startswith(
        "generation finished: 2/2 done, 0 cache hits, 0 errors, prompt + completion tokens "
        "10+2 called, 0+0 from cache, "
    )
    assert lines[-1].endswith("s elapsed") and "ETA" not in lines[-1]  # nothing is left when it finished


def test_progress_line_is_short_and_says_time_left():
    stats = RunStats(
        total=144,
        done=9,
        cache_hits=2,
        errors=1,
        prompt_tokens=2335,
        completion_tokens=564,
        started=time.monotonic() - 587,
    )
    # 587 s for 7 calls made, 135 requests left: 587 / 7 × 135 = 11320.7 s = 3h08m
    assert stats.progress() == "9/144 done, 2 from cache, 1 errors, 9m47s elapsed, about 3h08m left"
    assert (
        RunStats(total=3, done=3, started=time.monotonic() - 42).progress()
        == "3/3 done, 0 from cache, 0 errors, 42s elapsed"
    )
    assert [runner._duration(s) for s in (0, 59.6, 60, 3599, 3600, 7325)] == [
        "0s",
        "1m00s",
        "1m00s",
        "59m59s",
        "1h00m",
        "2h02m",
    ]


def test_progress_lines_only_when_a_request_finished(stub, tmp_path):
    stub.script("POST", "/v1/chat/completions", reply("a", "gpt-x-2026-01-01"))
    lines = []
    run_requests(
        reqs(3, stub), provider(stub), GenerationCache(tmp_path / "c.duckdb"), log=lines.append, progress_every_s=0.0
    )
    done = [int(line.split(": ")[1].split("/")[0]) for line in lines if line.startswith("generation progress: ")]
    assert done and done == sorted(set(done)) and done[-1] == 3, lines


def test_an_interrupt_does_not_wait_out_the_retries_of_queued_requests(stub, tmp_path):
    """Ctrl-C (KeyboardInterrupt in the main thread, as Dagster raises its interrupt) while every
    request fails with a retryable 503: the two requests in flight are not retried again and the
    two queued ones are never sent, so run_requests raises within a second instead of waiting
    out 4 × 4 retry waits of 2 s; nothing is stored for the stopped requests (they stay misses,
    not errors) and no claim is left behind."""
    import _thread
    import signal
    import threading

    import pytest

    stub.script("POST", "/v1/chat/completions", Reply(503, {"error": {"message": "overloaded"}}))
    cache = GenerationCache(tmp_path / "c.duckdb")
    policy = RetryPolicy(max_attempts=5, base_delay_s=2.0, max_delay_s=2.0, jitter=False)
    interrupted_at = []

    def interrupt_when_both_in_flight_failed_once():
        deadline = time.monotonic() + 30
        while len(stub.requests_to("/v1/chat/completions")) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # both workers are in their 2 s wait, the main thread in its wait loop
        interrupted_at.append(time.monotonic())
        _thread.interrupt_main()

    # a process started in the background inherits SIGINT ignored (then interrupt_main does nothing):
    # use Python's own handler, as an interactive run (and Dagster, which replaces it) has one
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    watcher = threading.Thread(target=interrupt_when_both_in_flight_failed_once)
    watcher.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_requests(reqs(4, stub), provider(stub), cache, retry=policy, log=lambda m: None)
        stopped_after = time.monotonic() - interrupted_at[0]
    finally:
        watcher.join()
        signal.signal(signal.SIGINT, previous)
    assert stopped_after < 1.0, stopped_after
    assert len(stub.requests_to("/v1/chat/completions")) == 2  # the first attempt of the 2 in flight
    assert cache.count() == 0  # no error stored for a request that was stopped
    con = cache._connect()
    try:
        assert con.execute("SELECT count(*) FROM claims").fetchone() == (0,)
    finally:
        con.close()
