"""The runner and the generation cache under faults, a SIGKILL and a second runner, counted at the stub.

Real OpenAI SDK, real caches (each test runs on a DuckDB file and on a PostgreSQL schema:
``cache_store``), runners in real subprocesses; the only double is the local HTTP stub standing in
for the provider API.
"""

import os
import signal
import subprocess
import sys
import textwrap
import time

from metamorph.providers.base import GenerationRequest
from metamorph.providers.openai_provider import OpenAIProvider
from metamorph.providers.retry import RetryPolicy
from metamorph.runner import run_requests
from tests.core.stub_http import FAULT_KINDS, FaultPlan, echo_chat

CHAT = "/v1/chat/completions"


def content(rec) -> str:
    return rec.json["messages"][-1]["content"]


def requests(n: int) -> list[GenerationRequest]:
    return [
        GenerationRequest("openai", "gpt-x", ({"role": "user", "content": f"q{i}"},), {"temperature": 0.0})
        for i in range(n)
    ]


RUNNER = textwrap.dedent("""
    import sys
    from metamorph.cache import open_cache
    from metamorph.providers.base import GenerationRequest
    from metamorph.providers.openai_provider import OpenAIProvider
    from metamorph.runner import run_requests

    url, path, n, hold_s, wait, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), \
        sys.argv[5] == "wait", int(sys.argv[6])
    provider = OpenAIProvider(kind="openai", api_key="sk-test-RUNNER", base_url=url + "/v1", max_concurrency=threads)
    reqs = [GenerationRequest("openai", "gpt-x", ({"role": "user", "content": f"q{i}"},), {"temperature": 0.0})
            for i in range(n)]
    cache = open_cache(path, commit_interval_s=0.1, hold_s=hold_s, yield_s=0.1)
    if wait:  # start together with another runner
        print("ready", flush=True)
        sys.stdin.readline()
    outcomes, stats = run_requests(reqs, provider, cache, log=lambda m: None, poll_s=0.1)
    assert [o.result.text for o in outcomes] == [f"echo: q{i}" for i in range(n)]
    print(f"calls={stats.calls} hits={stats.cache_hits} errors={stats.errors}", flush=True)
""")


def provider_for(stub, **kw) -> OpenAIProvider:
    return OpenAIProvider(kind="openai", api_key="sk-test-RUNNER", base_url=stub.url + "/v1", max_concurrency=4, **kw)


def runner(stub, store, n, hold_s=0.5, wait=False, threads=4, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            RUNNER,
            stub.url,
            store.location,
            str(n),
            str(hold_s),
            "wait" if wait else "go",
            str(threads),
        ],
        env={**os.environ, "PYTHONPATH": os.getcwd()},
        text=True,
        stdout=subprocess.PIPE,
        **kw,
    )


def count_committed(store) -> int | None:
    """Committed successes in the cache, or ``None`` while a runner holds the DuckDB file (read in its
    yield gaps) or before the table exists."""
    rows = store.try_rows("SELECT count(*) FROM generations WHERE error IS NULL")
    return None if rows is None else rows[0][0]


def committed_contents(store, n) -> set[str]:
    """Contents ("q<i>") whose success is committed in the cache (read with the writer gone)."""
    by_key = {r.cache_key(): r.messages[-1]["content"] for r in requests(n)}
    keys = [k for (k,) in store.rows("SELECT key FROM generations WHERE error IS NULL", read_only=True)]
    return {by_key[k] for k in keys}


def test_sigkill_mid_run_then_resume_requests_no_committed_key_twice_and_loses_none(stub, cache_store):
    stub.latency_s = 0.05
    stub.script("POST", CHAT, echo_chat)
    store, n = cache_store, 120
    proc = runner(stub, store, n, threads=2)  # ~40 requests/s: 3 s of work
    deadline = time.monotonic() + 300  # a loaded machine may take long to import the SDK
    while not (sum(r.replied for r in list(stub.requests)) >= n // 3 and (count_committed(store) or 0) > 0):
        assert proc.poll() is None, "the runner ended before it could be killed"
        assert time.monotonic() < deadline, "the runner committed nothing in 300 s"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)  # part way, with some completions committed
    proc.wait()
    received = set(stub.count_by(content))
    answered = {content(r) for r in list(stub.requests) if r.replied}
    committed = committed_contents(store, n)
    assert 0 < len(committed) < n and committed <= answered
    lost_window = answered - committed  # answered, but not committed when the process died

    # the restart (a new runner and cache on the same file; the dead process's claims are void)
    outcomes, stats = run_requests(requests(n), provider_for(stub), cache_store.open(), log=lambda m: None)
    assert (stats.calls, stats.cache_hits, stats.errors) == (n - len(committed), len(committed), 0)
    assert [o.result.text for o in outcomes] == [f"echo: q{i}" for i in range(n)]
    counts = stub.count_by(content)
    assert sorted(counts) == sorted(f"q{i}" for i in range(n))  # zero lost: every key was answered
    assert {c for c in committed if counts[c] != 1} == set()  # a committed completion is never requested again
    twice = {c for c, k in counts.items() if k > 1}
    assert twice <= received - committed and max(counts.values()) == (2 if twice else 1)
    assert twice >= lost_window  # what the kill lost was requested again, nothing else was
    assert committed_contents(store, n) == set(counts)
    print(
        f"\nkilled after {len(answered)} answers: {len(committed)} committed, {len(lost_window)} lost "
        f"(the last commit window), {len(twice)} requested twice"
    )


def test_a_fifth_of_requests_faulted_each_ends_as_completion_or_recorded_error_and_rerun_retries_only_errors(
    stub, cache_store
):
    persistent = ("500", "error_body", "malformed")
    plan = FaultPlan(rate=0.2, times=1, persistent=persistent, retry_after_s=0.0, hang_s=2.5)
    stub.faults = plan
    stub.script("POST", CHAT, echo_chat)
    provider = OpenAIProvider(
        kind="openai", api_key="sk-test-FAULTS", base_url=stub.url + "/v1", max_concurrency=8, timeout_s=2.0
    )  # well above a loaded machine's latency
    policy = RetryPolicy(max_attempts=3, base_delay_s=0.0, max_delay_s=0.0, jitter=False)
    cache = cache_store.open()
    reqs = requests(150)
    outcomes, stats = run_requests(reqs, provider, cache, retry=policy, log=lambda m: None)

    kind = {content(r): plan.kind_for(r.key) for r in stub.requests}
    assert len(kind) == 150 and {k for k in kind.values() if k} == set(FAULT_KINDS)  # all nine kinds occurred
    assert 0.15 < sum(k is not None for k in kind.values()) / 150 < 0.25
    failing = {c for c, k in kind.items() if k in persistent}
    messages = {
        "500": "ProviderError[500]: OpenAI HTTP 500: Error code: 500 - The server had an error",
        "error_body": "ProviderError[200]: OpenAI returned HTTP 200 with an error body (server_error): "
        "The server had an error processing your request",
        "malformed": "ProviderError[None]: OpenAI response body is not valid JSON (Expecting value: char 0)",
    }
    for o in outcomes:
        c = o.request.messages[-1]["content"]
        if c in failing:
            assert (o.result.text, o.result.error, o.result.attempts) == (None, messages[kind[c]], 3)
        else:
            assert (o.result.text, o.result.error) == (f"echo: {c}", None)
            assert o.result.attempts == (2 if kind[c] else 1)
    assert (stats.done, stats.calls, stats.errors) == (150, 150, len(failing))
    expected = {c: 3 if c in failing else 2 if k else 1 for c, k in kind.items()}
    assert stub.count_by(content) == expected
    assert (cache.count(errors=True), cache.count(errors=False)) == (len(failing), 150 - len(failing))

    stub.faults = None  # the provider is healthy again: the rerun asks for the errors only
    outcomes, stats = run_requests(reqs, provider, cache, retry=policy, log=lambda m: None)
    assert (stats.calls, stats.cache_hits, stats.errors) == (len(failing), 150 - len(failing), 0)
    assert stub.count_by(content) == {c: n + (c in failing) for c, n in expected.items()}
    assert all(o.result.error is None for o in outcomes) and cache.count(errors=True) == 0


def test_two_runners_sharing_one_cache_split_the_keys_and_request_each_once(stub, cache_store):
    stub.latency_s = 0.05
    stub.script("POST", CHAT, echo_chat)
    store, n = cache_store, 120
    proc = runner(stub, store, n, hold_s=0.3, wait=True, stdin=subprocess.PIPE)  # runner B, its own process
    cache = cache_store.open(commit_interval_s=0.1, hold_s=0.3, yield_s=0.1)  # runner A, this process
    cache.release()
    assert proc.stdout.readline() == "ready\n"
    proc.stdin.write("go\n")  # both start now
    proc.stdin.flush()
    outcomes, a = run_requests(requests(n), provider_for(stub), cache, log=lambda m: None, poll_s=0.1)
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, out
    b = dict(kv.split("=") for kv in out.split())
    assert [o.result.text for o in outcomes] == [f"echo: q{i}" for i in range(n)]
    assert a.calls + int(b["calls"]) == n and min(a.calls, int(b["calls"])) > 0, out  # split, none called twice
    assert a.calls + a.cache_hits == n and int(b["calls"]) + int(b["hits"]) == n
    assert stub.count_by(content) == {f"q{i}": 1 for i in range(n)}
    assert committed_contents(store, n) == {f"q{i}" for i in range(n)}
