"""The runner's calls spread over client processes (``run_requests(..., processes=N)``), counted at the stub.

Real OpenAI SDK in real spawned processes, real DuckDB caches; the only doubles are the local HTTP
stubs standing in for the provider API (:mod:`tests.core.stub_async`, :mod:`tests.core.stub_http`).
Every test checks the log line that names the client processes, so it cannot pass on the
one-process path.
"""

import _thread
import os
import signal
import threading
import time

import psutil
import pytest

from metamorph.cache import GenerationCache
from metamorph.providers.base import GenerationRequest
from metamorph.providers.openai_provider import OpenAIProvider
from metamorph.providers.retry import RetryPolicy
from metamorph.runner import PROCESS_MIN_CALLS, client_processes, run_requests, usable_cores
from tests.core.stub_async import AsyncStub, StubThread
from tests.core.stub_http import FaultPlan, body_key, echo_chat

KEY = "sk-test-PROCS-secret"


def requests(n: int, tag: str = "q") -> list[GenerationRequest]:
    return [
        GenerationRequest("openai", "gpt-x", ({"role": "user", "content": f"{tag}{i}"},), {"temperature": 0.0})
        for i in range(n)
    ]


def provider(url: str, concurrency: int, **kw) -> OpenAIProvider:
    return OpenAIProvider(kind="openai", api_key=KEY, base_url=url + "/v1", max_concurrency=concurrency, **kw)


def spread(lines: list[str], n: int) -> bool:
    return any(line.startswith("generation: ") and line.endswith(f", {n} client processes)") for line in lines)


def client_pids() -> list[int]:
    """This process's client processes (python -m metamorph.client_calls)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "metamorph.client_calls" in child.cmdline():
                found.append(child.pid)
        except psutil.NoSuchProcess:
            pass
    return found


def alive(pids: list[int]) -> list[int]:
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_how_many_client_processes_a_run_gets():
    class Threads:  # a provider without an async session (a local model): always this process
        kind, max_concurrency = "local", 256

    http = OpenAIProvider(kind="openai", api_key=KEY, base_url="http://127.0.0.1:9/v1", max_concurrency=256)
    narrow = OpenAIProvider(kind="openai", api_key=KEY, base_url="http://127.0.0.1:9/v1", max_concurrency=63)
    assert client_processes(http, PROCESS_MIN_CALLS - 1) == 1  # a small run
    assert client_processes(http, PROCESS_MIN_CALLS) == min(usable_cores(), 256 // 32)
    assert client_processes(narrow, 100_000) == 1  # a server that takes few requests at once
    assert client_processes(Threads(), 100_000) == 1
    assert client_processes(Threads(), 10, processes=4) == 1
    assert (client_processes(http, 10, processes=3), client_processes(narrow, 10, processes=500)) == (3, 63)
    assert client_processes(http, 10, processes=0) == 1


def test_several_thousand_requests_through_two_processes_each_sent_and_stored_once(tmp_path, clean_proxy_env):
    n = 3000
    app = AsyncStub()
    server = StubThread(app)
    lines: list[str] = []
    try:
        cache = GenerationCache(tmp_path / "c.duckdb")
        outcomes, stats = run_requests(requests(n), provider(server.url, 256), cache, log=lines.append, processes=2)
    finally:
        server.close()
    assert spread(lines, 2), lines
    assert [o.result.text for o in outcomes] == [f"echo: q{i}" for i in range(n)]
    assert (stats.done, stats.calls, stats.errors, stats.cache_hits) == (n, n, 0, 0)
    assert app.summary() == {
        "requests": n,
        "answered": n,
        "bodies_requested_twice_or_more": 0,
        "bodies_answered_twice_or_more": 0,
    }
    assert (cache.count(errors=False), cache.count(errors=True)) == (n, 0)
    rerun, stats = run_requests(requests(n), provider(server.url, 256), cache, log=lambda m: None, processes=2)
    assert stats.cache_hits == n and [o.result.text for o in rerun] == [o.result.text for o in outcomes]


def test_faults_end_as_in_one_process_outcome_for_outcome(stub, tmp_path):
    """A fifth of the bodies faulted (deterministic in the body): transient ones (429 with
    Retry-After, 529, a reset connection, a cut body) succeed at the second attempt, persistent
    ones (500, an error body, a malformed body) end as the same stored errors after 3 attempts,
    whether one process or two sends them; the stub sees the same requests per body."""
    persistent = ("500", "error_body", "malformed")
    kinds = ("429", "529", "reset", "cut", *persistent)
    stub.faults = FaultPlan(rate=0.2, kinds=kinds, times=1, persistent=persistent, retry_after_s=0.05)
    stub.script("POST", "/v1/chat/completions", echo_chat)
    policy = RetryPolicy(max_attempts=3, base_delay_s=0.0, max_delay_s=0.0, jitter=False)
    runs = {}
    for k in (1, 2):
        lines: list[str] = []
        before = len(stub.requests)
        outcomes, stats = run_requests(
            requests(120, tag=f"p{k}-"),
            OpenAIProvider(kind="openai", api_key=KEY, base_url=stub.url + "/v1", max_concurrency=8, timeout_s=5),
            GenerationCache(tmp_path / f"c{k}.duckdb"),
            retry=policy,
            log=lines.append,
            processes=k,
        )
        assert spread(lines, 2) == (k == 2), lines
        per_body: dict[str, int] = {}
        for rec in stub.requests[before:]:
            c = rec.json["messages"][-1]["content"].split("-", 1)[1]
            per_body[c] = per_body.get(c, 0) + 1
        results = [
            (o.request.messages[-1]["content"].split("-", 1)[1], o.result.text, o.result.error, o.result.attempts)
            for o in outcomes
        ]
        runs[k] = (results, per_body, (stats.calls, stats.errors))
    # the fault plan hashes the whole body, so each run has its own faulted bodies: compare the
    # outcome of each body with what its fault kind gives
    for k, (results, per_body, (calls, errors)) in runs.items():
        failing = 0
        for c, text, error, attempts in results:
            body = next(r for r in stub.requests if r.json["messages"][-1]["content"] == f"p{k}-{c}")
            kind = stub.faults.kind_for(body.key)
            if kind in persistent:
                failing += 1
                assert (text, attempts, per_body[c]) == (None, 3, 3) and error.startswith("ProviderError["), error
            else:
                assert (text, error, attempts, per_body[c]) == (f"echo: p{k}-{c}", None, 1 + bool(kind), 1 + bool(kind))
        assert (calls, errors) == (120, failing) and KEY not in repr(results)
    kinds_seen = {stub.faults.kind_for(r.key) for r in stub.requests if stub.faults.kind_for(r.key)}
    assert kinds_seen == set(kinds)


def test_429s_with_retry_after_lower_what_each_process_keeps_in_flight(tmp_path, clean_proxy_env):
    """As the one-process test in test_adaptive_concurrency: the stub serves 8 at a time and
    answers more with a 429 (Retry-After 0.05 s); two processes may keep 32 in flight each. Each
    process's limit falls on its own 429s, so the second half of the arrivals never finds more
    than 3 × 8 requests open; every request is answered exactly once, none is an error."""
    n = 300
    app = AsyncStub(latency_s=0.05, capacity=8, retry_after_s=0.05, reject_s=0.02)
    server = StubThread(app)
    lines: list[str] = []
    try:
        policy = RetryPolicy(max_attempts=50, base_delay_s=0.01, max_delay_s=0.2, max_total_s=120)
        outcomes, stats = run_requests(
            requests(n),
            provider(server.url, 64, timeout_s=30),
            GenerationCache(tmp_path / "c.duckdb"),
            retry=policy,
            log=lines.append,
            processes=2,
        )
    finally:
        server.close()
    assert spread(lines, 2), lines
    assert [o.result.text for o in outcomes] == [f"echo: q{i}" for i in range(n)]
    assert (stats.calls, stats.errors) == (n, 0)
    assert len(app.answered) == n and set(app.answered.values()) == {1}
    rejected = [i for i, (_, status) in enumerate(app.arrivals) if status == 429]
    assert len(app.arrivals) == n + len(rejected) and rejected
    assert max(o for o, _ in app.arrivals[len(app.arrivals) // 2 :]) <= 24
    assert len(rejected) < n // 2


def _stop_mid_run(app: AsyncStub, action) -> threading.Thread:
    """A thread that, once the stub has answered 64 requests, finds the client processes and
    calls ``action(pids)``; the pids are appended to the thread's ``pids``."""
    pids: list[int] = []

    def watch() -> None:
        deadline = time.monotonic() + 60
        while sum(app.answered.values()) < 64 and time.monotonic() < deadline:
            time.sleep(0.01)
        pids.extend(client_pids())
        action(pids)

    thread = threading.Thread(target=watch)
    thread.pids = pids  # type: ignore[attr-defined]
    thread.start()
    return thread


def _stored(cache: GenerationCache) -> dict[str, str | None]:
    con = cache._connect()
    try:
        rows = con.execute("SELECT request_json, response_text, error FROM generations").fetchall()
        claims = con.execute("SELECT count(*) FROM claims").fetchone()[0]
    finally:
        con.close()
    assert claims == 0  # no claim left behind
    import json

    out = {}
    for request_json, text, error in rows:
        assert error is None, error
        out[json.loads(request_json)["messages"][-1]["content"]] = text
    return out


def test_ctrl_c_ends_every_client_process_and_stores_every_answered_request(tmp_path, clean_proxy_env):
    """A terminal's Ctrl-C: SIGINT to every process of the group (the client processes, and this
    one: KeyboardInterrupt in the main thread). The client processes do not die of it: they start
    nothing new, finish the calls in flight and return them, so every request the stub answered
    is stored (and nothing else); none of them outlives run_requests."""
    app = AsyncStub(latency_s=0.3)
    server = StubThread(app)
    cache = GenerationCache(tmp_path / "c.duckdb")
    lines: list[str] = []

    def ctrl_c(pids: list[int]) -> None:
        for pid in pids:
            os.kill(pid, signal.SIGINT)
        _thread.interrupt_main()

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        watcher = _stop_mid_run(app, ctrl_c)
        with pytest.raises(KeyboardInterrupt):
            run_requests(requests(2000), provider(server.url, 64), cache, log=lines.append, processes=2)
        watcher.join()
    finally:
        signal.signal(signal.SIGINT, previous)
        server.close()
    assert spread(lines, 2), lines
    assert len(watcher.pids) == 2 and alive(watcher.pids) == []
    answered = {f"q{i}" for i in range(2000) if app.answered[_key(f"q{i}")]}
    assert sum(app.counts.values()) == len(answered) < 2000  # every request sent was answered, once
    stored = _stored(cache)
    assert stored == {c: f"echo: {c}" for c in answered}


def test_a_killed_client_process_fails_the_run_and_the_other_ones_rows_are_stored(tmp_path, clean_proxy_env):
    """SIGKILL of one of two client processes mid-run: run_requests raises RuntimeError naming it;
    the other process returns its calls in flight, stored; only the killed one's calls in flight
    are answered by the stub and not stored; no process is left."""
    app = AsyncStub(latency_s=0.3)
    server = StubThread(app)
    cache = GenerationCache(tmp_path / "c.duckdb")
    lines: list[str] = []
    try:
        watcher = _stop_mid_run(app, lambda pids: os.kill(pids[0], signal.SIGKILL))
        with pytest.raises(RuntimeError, match=r"client process [12] of 2 ended \(exit code -9\)") as info:
            run_requests(requests(2000), provider(server.url, 64), cache, log=lines.append, processes=2)
        watcher.join()
        time.sleep(0.5)  # let the stub finish answering what the killed process had sent
    finally:
        server.close()
    assert spread(lines, 2), lines
    assert KEY not in str(info.value)
    assert len(watcher.pids) == 2 and alive(watcher.pids) == []
    answered = {f"q{i}" for i in range(2000) if app.answered[_key(f"q{i}")]}
    stored = _stored(cache)
    assert set(stored) <= answered and all(stored[c] == f"echo: {c}" for c in stored)
    # answered, not stored: the killed process's calls in flight (at most its 32) and the few it had
    # not yet passed on (it sends what finished every 10 ms); the other one's 32 are all stored
    assert 64 <= len(stored) and len(answered) - len(stored) <= 40


def _key(content: str) -> str:
    """The stub's body key of the request the runner sends for ``content``."""
    import json

    body = {"messages": [{"role": "user", "content": content}], "model": "gpt-x", "temperature": 0.0}
    return body_key(json.dumps(body).encode())
