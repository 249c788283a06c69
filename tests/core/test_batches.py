"""Provider batch APIs: run_requests in batch mode against the local stub.

The real openai / anthropic SDKs talk HTTP to :mod:`tests.core.stub_batches` (stateful batch
endpoints on :mod:`tests.core.stub_http`); the cache is a real DuckDB file. We assert on what the
SDKs really sent (the uploaded JSONL, the batch create bodies), on the exact texts and errors in
the cache, and on the number of create / poll / download calls counted at the stub.
"""

from __future__ import annotations

import json

import duckdb
import pytest

from metamorph.batch import BatchExecution, run_batches
from metamorph.cache import GenerationCache
from metamorph.errors import RegistryError
from metamorph.models import ExecutionConfig, parse_registry
from metamorph.providers.anthropic_provider import AnthropicProvider
from metamorph.providers.base import GenerationRequest
from metamorph.providers.openai_provider import OpenAIProvider
from metamorph.providers.retry import RetryPolicy
from metamorph.runner import run_requests
from tests.core.stub_batches import (
    AnthropicBatchAPI,
    OpenAIBatchAPI,
    anthropic_errored,
    anthropic_expired,
    anthropic_ok,
    openai_expired,
    openai_http_error,
    openai_ok,
)
from tests.core.stub_http import Reply, chat_completion

OPENAI_KEY = "sk-test-BATCH-OPENAI-SECRET-0123456789"
ANTHROPIC_KEY = "sk-ant-test-BATCH-ANTHROPIC-SECRET-9876543210"
FAST = ExecutionConfig(mode="batch", poll_interval_s=0.01, max_wait_s=10.0)
NO_RETRY = RetryPolicy(max_attempts=1)


def quiet(_msg: str) -> None:
    pass


def oa_requests(n: int = 3) -> list[GenerationRequest]:
    return [
        GenerationRequest(
            provider="openai",
            model="gpt-test",
            messages=({"role": "system", "content": "Be terse."}, {"role": "user", "content": f"question {i}"}),
            params={"temperature": 0, "max_tokens": 16, "seed": 0},
        )
        for i in range(1, n + 1)
    ]


def an_requests(n: int = 3) -> list[GenerationRequest]:
    return [
        GenerationRequest(
            provider="anthropic",
            model="claude-test",
            messages=({"role": "system", "content": "Be terse."}, {"role": "user", "content": f"question {i}"}),
            params={"max_tokens": 32, "stop": "END"},
        )
        for i in range(1, n + 1)
    ]


def by_id(answers: dict):
    """answer(custom_id, body) from a custom_id -> answer mapping (absent: no result line)."""

    def answer(custom_id, body):
        fn = answers.get(custom_id)
        return None if fn is None else fn(custom_id, body)

    return answer


def openai_batch(stub, config=FAST):
    return BatchExecution(OpenAIProvider("openai", OPENAI_KEY, base_url=stub.url + "/v1"), config)


def anthropic_batch(stub, config=FAST):
    return BatchExecution(AnthropicProvider(ANTHROPIC_KEY, base_url=stub.url, anthropic_version="2023-06-01"), config)


def stored(cache_path) -> dict[str, tuple]:
    with duckdb.connect(str(cache_path), read_only=True) as con:
        rows = con.execute(
            "SELECT key, response_text, error, finish_reason, prompt_tokens, completion_tokens, "
            "model_version, latency_s FROM generations"
        ).fetchall()
    return {r[0]: r[1:] for r in rows}


def batch_rows(cache_path) -> list[tuple]:
    with duckdb.connect(str(cache_path), read_only=True) as con:
        return con.execute(
            "SELECT batch_id, provider, base_url, model, keys, status, collected, input_file_id "
            "FROM batches ORDER BY submitted_at"
        ).fetchall()


def secret_free(cache_path, *secrets) -> None:
    with duckdb.connect(str(cache_path), read_only=True) as con:
        for (table,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall():
            text = json.dumps(con.execute(f"SELECT * FROM {table}").fetchall(), default=str)
            for s in secrets:
                assert s not in text, f"secret found in table {table}"


# ============================================================================ OpenAI


def test_openai_submit_poll_results_land_under_the_sync_keys(stub, tmp_path):
    reqs = oa_requests(3)
    keys = [r.cache_key() for r in reqs]
    api = OpenAIBatchAPI(
        stub,
        by_id({k: openai_ok(f"answer {i}") for i, k in enumerate(keys, 1)}),
        statuses=("validating", "in_progress", "completed"),
    )
    cache = GenerationCache(tmp_path / "cache.duckdb")
    outcomes, stats = run_requests(reqs, openai_batch(stub), cache, log=quiet)

    assert [o.result.text for o in outcomes] == ["answer 1", "answer 2", "answer 3"]
    assert [o.cache_hit for o in outcomes] == [False] * 3
    assert (stats.calls, stats.errors, stats.prompt_tokens, stats.completion_tokens) == (3, 0, 21, 6)
    # what the SDK really sent: one JSONL upload with purpose=batch, one batch create, 3 polls, 1 download
    [upload] = stub.requests_to("/v1/files")
    assert upload.parts["purpose"]["data"] == b"batch"
    assert upload.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    lines = [json.loads(x) for x in upload.parts["file"]["data"].decode().splitlines()]
    assert [x["custom_id"] for x in lines] == keys
    assert {(x["method"], x["url"]) for x in lines} == {("POST", "/v1/chat/completions")}
    assert lines[0]["body"] == {
        "model": "gpt-test",
        "messages": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "question 1"}],
        "temperature": 0,
        "seed": 0,
        "max_completion_tokens": 16,
    }
    [create] = stub.requests_to("/v1/batches")
    assert create.json == {"input_file_id": "file-in-1", "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    assert (api.creates, dict(api.polls), dict(api.downloads)) == (1, {"batch_1": 3}, {"file-output-batch_1": 1})
    # the body of each line is byte-for-byte the body of the synchronous call
    stub.script("POST", "/v1/chat/completions", Reply(200, chat_completion("sync")))
    OpenAIProvider("openai", OPENAI_KEY, base_url=stub.url + "/v1").generate(reqs[1])
    assert stub.requests_to("/v1/chat/completions")[0].json == lines[1]["body"]

    rows = stored(tmp_path / "cache.duckdb")
    assert rows[keys[0]] == ("answer 1", None, "stop", 7, 2, "gpt-test-2026-01-01", None)
    assert batch_rows(tmp_path / "cache.duckdb") == [
        ("batch_1", "openai", stub.url + "/v1", "gpt-test", keys, "completed", True, "file-in-1")
    ]
    secret_free(tmp_path / "cache.duckdb", OPENAI_KEY)
    # a synchronous provider is served the batch's completions from the cache: same keys, no HTTP call
    n_http = len(stub.requests)
    again, stats2 = run_requests(
        reqs, OpenAIProvider("openai", OPENAI_KEY, base_url=stub.url + "/v1"), cache, log=quiet
    )
    assert [o.result.text for o in again] == ["answer 1", "answer 2", "answer 3"]
    assert stats2.cache_hits == 3 and len(stub.requests) == n_http


def test_openai_partial_failure_is_a_recorded_error_and_only_it_is_resubmitted(stub, tmp_path):
    reqs = oa_requests(3)
    keys = [r.cache_key() for r in reqs]
    answers = {
        keys[0]: openai_ok("one"),
        keys[1]: openai_http_error(400, "max_completion_tokens too small"),
        keys[2]: openai_ok("three"),
    }
    api = OpenAIBatchAPI(stub, by_id(answers))
    cache = GenerationCache(tmp_path / "cache.duckdb")
    outcomes, stats = run_requests(reqs, openai_batch(stub), cache, log=quiet)

    assert [o.result.text for o in outcomes] == ["one", None, "three"]
    assert outcomes[1].result.error == (
        "BatchError[400]: OpenAI batch request failed (HTTP 400): max_completion_tokens too small"
    )
    assert stats.errors == 1
    assert (cache.count(errors=False), cache.count(errors=True)) == (2, 1)
    assert cache.get(keys[1]) is None  # an error is never a value
    assert dict(api.downloads) == {"file-output-batch_1": 1, "file-error-batch_1": 1}

    answers[keys[1]] = openai_ok("two")
    outcomes2, stats2 = run_requests(reqs, openai_batch(stub), cache, log=quiet)
    assert [o.result.text for o in outcomes2] == ["one", "two", "three"]
    assert stats2.cache_hits == 2 and api.creates == 2
    assert [x["custom_id"] for x in api.submitted["batch_2"]] == [keys[1]]
    assert (cache.count(errors=False), cache.count(errors=True)) == (3, 0)


def test_openai_expired_batch_records_errors_for_unfinished_keys_and_a_rerun_resubmits_them(stub, tmp_path):
    reqs = oa_requests(3)
    keys = [r.cache_key() for r in reqs]
    # key 1 ran; key 2 is in the error file as batch_expired; key 3 has no line at all
    answers = {keys[0]: openai_ok("done in time"), keys[1]: openai_expired}
    api = OpenAIBatchAPI(stub, by_id(answers), statuses=("in_progress", "expired"))
    cache = GenerationCache(tmp_path / "cache.duckdb")
    outcomes, _ = run_requests(reqs, openai_batch(stub), cache, log=quiet)

    assert outcomes[0].result.text == "done in time"
    assert outcomes[1].result.error == (
        "BatchError[batch_expired]: OpenAI batch request failed: This request could "
        "not be executed before the completion window expired."
    )
    assert outcomes[2].result.error == (
        "BatchError[expired]: batch batch_1 ended (expired) without a result for this request"
    )
    assert batch_rows(tmp_path / "cache.duckdb")[0][5:7] == ("expired", True)
    rows = stored(tmp_path / "cache.duckdb")
    assert rows[keys[1]][0] is None and rows[keys[2]][0] is None

    api.statuses = ("completed",)
    answers.update({keys[1]: openai_ok("second try"), keys[2]: openai_ok("third try")})
    outcomes2, _ = run_requests(reqs, openai_batch(stub), cache, log=quiet)
    assert [o.result.text for o in outcomes2] == ["done in time", "second try", "third try"]
    assert [x["custom_id"] for x in api.submitted["batch_2"]] == [keys[1], keys[2]]


def test_restart_resumes_the_persisted_batch_without_resubmitting(stub, tmp_path):
    reqs = oa_requests(4)
    keys = [r.cache_key() for r in reqs]
    api = OpenAIBatchAPI(
        stub, by_id({k: openai_ok(f"late {i}") for i, k in enumerate(keys, 1)}), statuses=("in_progress",)
    )
    path = tmp_path / "cache.duckdb"
    first, stats = run_requests(
        reqs, openai_batch(stub, ExecutionConfig("batch", 0.01, 0.15)), GenerationCache(path), log=quiet
    )
    assert all(
        o.result.error.startswith("BatchPending: batch batch_1 still in_progress after max_wait_s=0.15") for o in first
    )
    assert stored(path) == {}  # pending is not an error to store
    assert batch_rows(path)[0][5:7] == ("in_progress", False)
    polls_before = api.polls["batch_1"]
    assert polls_before >= 2

    # "restart": a new cache object on the file and a new provider; the batch has finished meanwhile
    api.statuses = ("completed",)
    api.polls.clear()
    second, stats2 = run_requests(reqs, openai_batch(stub), GenerationCache(path), log=quiet)
    assert [o.result.text for o in second] == ["late 1", "late 2", "late 3", "late 4"]
    assert (api.creates, api.uploads, dict(api.polls), dict(api.downloads)) == (
        1,
        1,
        {"batch_1": 1},
        {"file-output-batch_1": 1},
    )
    assert len(stub.requests_to("/v1/batches")) == 1 and len(stub.requests_to("/v1/files")) == 1
    assert batch_rows(path)[0][5:7] == ("completed", True)
    assert stats2.calls == 4 and stats2.errors == 0


def test_resume_stores_results_of_keys_this_run_did_not_ask_for(stub, tmp_path):
    reqs = oa_requests(3)
    keys = [r.cache_key() for r in reqs]
    api = OpenAIBatchAPI(stub, by_id({k: openai_ok(f"t{i}") for i, k in enumerate(keys, 1)}), statuses=("in_progress",))
    path = tmp_path / "cache.duckdb"
    run_requests(reqs, openai_batch(stub, ExecutionConfig("batch", 0.01, 0.05)), GenerationCache(path), log=quiet)
    api.statuses = ("completed",)
    outcomes, _ = run_requests(reqs[:1], openai_batch(stub), GenerationCache(path), log=quiet)
    assert outcomes[0].result.text == "t1"
    assert {k: v[0] for k, v in stored(path).items()} == {keys[0]: "t1", keys[1]: "t2", keys[2]: "t3"}
    assert api.creates == 1


def test_failed_submission_stores_errors_and_a_lost_batch_is_abandoned(stub, tmp_path):
    reqs = oa_requests(2)
    stub.script("POST", "/v1/files", Reply(400, {"error": {"message": "bad jsonl", "type": "invalid_request_error"}}))
    cache = GenerationCache(tmp_path / "cache.duckdb")
    outcomes, _ = run_requests(reqs, openai_batch(stub), cache, retry=NO_RETRY, log=quiet)
    assert [o.result.error for o in outcomes] == [
        "ProviderError[400]: batch submission failed: OpenAI HTTP 400: Error code: 400 - bad jsonl"
    ] * 2
    assert batch_rows(tmp_path / "cache.duckdb") == []

    # a persisted batch the provider no longer knows (404): errors stored, batch marked lost + collected
    from datetime import datetime

    from metamorph.cache import BatchRecord

    keys = [r.cache_key() for r in reqs]
    cache.record_batch(
        BatchRecord(
            "batch_gone",
            "openai",
            stub.url + "/v1",
            "gpt-test",
            tuple(keys),
            tuple(r.to_json() for r in reqs),
            "in_progress",
            False,
            None,
            datetime(2026, 1, 1),
        )
    )
    OpenAIBatchAPI(stub, by_id({}))
    outcomes, _ = run_requests(reqs, openai_batch(stub), cache, retry=NO_RETRY, log=quiet)
    assert outcomes[0].result.error.startswith(
        "BatchError[lost]: batch batch_gone ended (lost) without a result "
        "for this request; the provider answered OpenAI HTTP 404"
    )
    assert [r[5:7] for r in batch_rows(tmp_path / "cache.duckdb")] == [("lost", True)]


def test_requests_a_batch_cannot_carry_go_synchronously(stub, tmp_path):
    from metamorph.providers.base import Document

    doc_req = GenerationRequest(
        provider="openai",
        model="gpt-test",
        messages=({"role": "user", "content": "doc?"},),
        ingestion="openai_file",
        document=Document(b"# t\n", media_type="text/markdown", filename="d.md"),
    )
    inline = oa_requests(1)[0]
    api = OpenAIBatchAPI(stub, by_id({inline.cache_key(): openai_ok("batched")}))  # serves both uploads
    stub.script(
        "POST",
        "/v1/responses",
        Reply(
            200,
            {
                "id": "resp_1",
                "object": "response",
                "created_at": 1,
                "model": "gpt-test-2026-01-01",
                "status": "completed",
                "output": [
                    {
                        "type": "message",
                        "id": "m",
                        "role": "assistant",
                        "status": "completed",
                        "content": [{"type": "output_text", "text": "from the file", "annotations": []}],
                    }
                ],
                "usage": {
                    "input_tokens": 9,
                    "output_tokens": 3,
                    "total_tokens": 12,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens_details": {"reasoning_tokens": 0},
                },
                "parallel_tool_calls": True,
                "tool_choice": "auto",
                "tools": [],
            },
        ),
    )
    outcomes, _ = run_requests([inline, doc_req], openai_batch(stub), GenerationCache(tmp_path / "c.duckdb"), log=quiet)
    assert [o.result.text for o in outcomes] == ["batched", "from the file"]
    assert [x["custom_id"] for x in api.submitted["batch_1"]] == [inline.cache_key()]
    [resp] = stub.requests_to("/v1/responses")
    assert resp.json["input"][0]["content"][0] == {"type": "input_file", "file_id": "file-in-2"}
    assert [r.parts["purpose"]["data"] for r in stub.requests_to("/v1/files")] == [b"batch", b"user_data"]


# ============================================================================ Anthropic


def test_anthropic_submit_poll_results_with_errored_and_expired(stub, tmp_path):
    reqs = an_requests(4)
    keys = [r.cache_key() for r in reqs]
    answers = {
        keys[0]: anthropic_ok("alpha"),
        keys[1]: anthropic_errored("invalid_request_error", "prompt too long"),
        keys[2]: anthropic_expired,
        keys[3]: anthropic_ok("delta"),
    }
    api = AnthropicBatchAPI(stub, by_id(answers), statuses=("in_progress", "in_progress", "ended"))
    path = tmp_path / "cache.duckdb"
    outcomes, stats = run_requests(reqs, anthropic_batch(stub), GenerationCache(path), log=quiet)

    assert [o.result.text for o in outcomes] == ["alpha", None, None, "delta"]
    assert outcomes[1].result.error == (
        "BatchError[invalid_request_error]: Anthropic batch request errored: prompt too long"
    )
    assert outcomes[2].result.error == "BatchError[expired]: Anthropic batch msgbatch_1: request expired"
    assert stats.errors == 2
    [create] = stub.requests_to("/v1/messages/batches")
    assert create.headers["authorization"] == f"Bearer {ANTHROPIC_KEY}"
    assert [r["custom_id"] for r in create.json["requests"]] == keys
    params = create.json["requests"][0]["params"]
    assert params == {
        "model": "claude-test",
        "max_tokens": 32,
        "system": "Be terse.",
        "stop_sequences": ["END"],
        "messages": [{"role": "user", "content": "question 1"}],
    }
    # the SDK's results() retrieves the batch once more before it downloads: 3 status polls + 1
    assert (api.creates, dict(api.polls), dict(api.downloads)) == (1, {"msgbatch_1": 4}, {"msgbatch_1": 1})
    # params are exactly the synchronous Messages body
    stub.script("POST", "/v1/messages", Reply(200, answers[keys[0]](keys[0], {})["result"]["message"]))
    AnthropicProvider(ANTHROPIC_KEY, base_url=stub.url, anthropic_version="2023-06-01").generate(reqs[0])
    assert stub.requests_to("/v1/messages")[0].json == params
    rows = stored(path)
    assert rows[keys[0]] == ("alpha", None, "stop", 30, 3, "claude-test-20260101", None)
    secret_free(path, ANTHROPIC_KEY)

    answers.update({keys[1]: anthropic_ok("beta"), keys[2]: anthropic_ok("gamma")})
    api.statuses = ("ended",)
    outcomes2, _ = run_requests(reqs, anthropic_batch(stub), GenerationCache(path), log=quiet)
    assert [o.result.text for o in outcomes2] == ["alpha", "beta", "gamma", "delta"]
    assert [r["custom_id"] for r in api.submitted["msgbatch_2"]] == [keys[1], keys[2]]


def test_anthropic_restart_resumes_polling(stub, tmp_path):
    reqs = an_requests(2)
    keys = [r.cache_key() for r in reqs]
    api = AnthropicBatchAPI(
        stub, by_id({keys[0]: anthropic_ok("a"), keys[1]: anthropic_ok("b")}), statuses=("in_progress",)
    )
    path = tmp_path / "cache.duckdb"
    first, _ = run_requests(
        reqs, anthropic_batch(stub, ExecutionConfig("batch", 0.01, 0.05)), GenerationCache(path), log=quiet
    )
    assert all(o.result.error.startswith("BatchPending: batch msgbatch_1 still in_progress") for o in first)
    api.statuses = ("ended",)
    api.polls.clear()
    second, _ = run_requests(reqs, anthropic_batch(stub), GenerationCache(path), log=quiet)
    assert [o.result.text for o in second] == ["a", "b"]
    assert (api.creates, dict(api.polls), dict(api.downloads)) == (1, {"msgbatch_1": 2}, {"msgbatch_1": 1})


# ============================================================================ config


def test_registry_execution_field():
    specs = parse_registry(
        {
            "models": [
                {
                    "id": "gpt",
                    "provider": "openai",
                    "model": "gpt-x",
                    "execution": {"mode": "batch", "poll_interval_s": 30, "max_wait_s": 3600, "max_requests": 500},
                },
                {"id": "gpt-sync", "provider": "openai", "model": "gpt-x"},
            ]
        },
        "models.yaml",
    )
    assert specs[0].execution == ExecutionConfig("batch", 30, 3600, 500)
    assert specs[1].execution == ExecutionConfig("sync", 60.0, 86400.0, 10000)
    assert specs[0].fingerprint() != specs[1].fingerprint()  # ids differ; execution itself is not in it
    same = parse_registry({"models": [{"id": "gpt", "provider": "openai", "model": "gpt-x"}]})[0]
    assert same.fingerprint() == specs[0].fingerprint()

    cases = [
        ({"mode": "bulk"}, "openai", "execution.mode"),
        ({"mode": "batch"}, "llama_cpp", "execution.mode"),
        ({"poll_interval_s": 0}, "openai", "execution.poll_interval_s"),
        ({"max_requests": 2.5}, "openai", "execution.max_requests"),
        ({"every": 3}, "openai", "execution.every"),
        ("batch", "openai", "execution"),
    ]
    for execution, provider, field in cases:
        with pytest.raises(RegistryError) as err:
            parse_registry(
                {"models": [{"id": "m", "provider": provider, "model": "x", "execution": execution}]}, "models.yaml"
            )
        assert err.value.field == field and err.value.row == 1 and "models.yaml" in str(err.value)


def test_build_provider_wraps_batch_entries(monkeypatch, stub):
    from resources.llm import build_provider

    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    [spec] = parse_registry(
        {
            "models": [
                {
                    "id": "gpt-b",
                    "provider": "openai",
                    "model": "gpt-x",
                    "base_url": stub.url + "/v1",
                    "execution": {"mode": "batch"},
                }
            ]
        }
    )
    provider = build_provider(spec)
    assert isinstance(provider, BatchExecution) and provider.config.mode == "batch"
    assert isinstance(provider.inner, OpenAIProvider) and OPENAI_KEY not in repr(provider)


def test_run_batches_returns_busy_keys_to_the_sync_path(stub, tmp_path):
    reqs = oa_requests(2)
    keys = [r.cache_key() for r in reqs]
    path = tmp_path / "cache.duckdb"
    other = GenerationCache(path)
    assert other.claim([keys[1]]).claimed == [keys[1]]  # another live runner holds key 2
    api = OpenAIBatchAPI(stub, by_id({keys[0]: openai_ok("mine")}), statuses=("completed",))
    cache = GenerationCache(path)
    results, left = run_batches(dict(zip(keys, reqs)), openai_batch(stub), cache, log=quiet)
    assert {k: r.text for k, (r, _) in results.items()} == {keys[0]: "mine"}
    assert list(left) == [keys[1]]
    assert [x["custom_id"] for x in api.submitted["batch_1"]] == [keys[0]]
    other.release()


_CHILD = """
import sys
from metamorph.cache import GenerationCache
from metamorph.models import ExecutionConfig
from metamorph.runner import run_requests
from tests.core.test_batches import oa_requests, openai_batch

class Stub:
    url = sys.argv[1]

run_requests(oa_requests(3), openai_batch(Stub, ExecutionConfig("batch", 0.05, 600.0)), GenerationCache(sys.argv[2]),
             log=lambda m: print(m, flush=True))
"""


def test_killed_run_is_resumed_by_the_next_process(stub, tmp_path):
    """A run SIGKILLed while it polls: the next run polls the persisted batch (0 creates, 1 poll)."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    reqs = oa_requests(3)
    keys = [r.cache_key() for r in reqs]
    api = OpenAIBatchAPI(
        stub, by_id({k: openai_ok(f"after kill {i}") for i, k in enumerate(keys, 1)}), statuses=("in_progress",)
    )
    path = tmp_path / "cache.duckdb"
    repo = str(Path(__file__).resolve().parents[2])
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, stub.url, str(path)],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": repo, "NO_PROXY": "127.0.0.1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while api.polls["batch_1"] < 3 and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.05)
        assert api.polls["batch_1"] >= 3, child.communicate(timeout=5)[0] if child.poll() is not None else "no polls"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    assert api.creates == 1
    api.statuses = ("completed",)
    api.polls.clear()
    outcomes, _ = run_requests(reqs, openai_batch(stub), GenerationCache(path), log=quiet)
    assert [o.result.text for o in outcomes] == ["after kill 1", "after kill 2", "after kill 3"]
    assert (api.creates, api.uploads, dict(api.polls)) == (1, 1, {"batch_1": 1})


def test_dagster_model_job_in_batch_mode(stub, metamorph_home, tmp_path, monkeypatch):
    """The format study's model job with a registry entry in batch mode: the registry resource hands
    the asset a BatchExecution, both generation assets go through batch jobs on the stub, and the
    rows carry the batch answers (Dagster in-process, real warehouse and cache)."""
    import dagster as dg

    from pipelines.definitions import build_definitions
    from tests.conftest import shared_sample

    reg = tmp_path / "models.yaml"
    reg.write_text(
        f"models:\n  - id: gpt-batch\n    provider: openai\n    model: gpt-test\n"
        f"    base_url: {stub.url}/v1\n    api_key_env: STUB_OPENAI_KEY\n"
        f"    execution: {{mode: batch, poll_interval_s: 0.01, max_wait_s: 30}}\n"
    )
    monkeypatch.setenv("METAMORPH_MODELS", str(reg))
    monkeypatch.setenv("STUB_OPENAI_KEY", OPENAI_KEY)
    decision = json.dumps({"decision": "A", "evidence": ["patient has fever"]})
    api = OpenAIBatchAPI(stub, lambda custom_id, body: openai_ok(decision)(custom_id, body), statuses=("completed",))
    defs = build_definitions()
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["gpt-batch"])
        inputs = defs.resolve_job_def("format_robustness_inputs_job").execute_in_process(
            instance=instance,
            raise_on_error=False,
            run_config={
                "ops": {
                    "format_robustness__source_instances": {
                        "config": {"sources": [f"medqa:{shared_sample('medqa')}"], "limit": 3}
                    }
                }
            },
        )
        assert inputs.success
        model = defs.resolve_job_def("format_robustness_model_job").execute_in_process(
            instance=instance,
            partition_key="gpt-batch",
            raise_on_error=False,
            run_config={"ops": {"format_robustness__workflow_generations": {"config": {"k": 2}}}},
        )
        assert model.success
    # 3 instances x 4 formats x k=2 planned; then the routed re-runs of the 18 inputs not already in the best format
    assert [len(api.submitted[b]) for b in sorted(api.submitted)] == [24, 18]
    assert len(stub.requests_to("/v1/chat/completions")) == 0
    with duckdb.connect(str(metamorph_home / "metamorph.duckdb"), read_only=True) as con:
        gens = con.execute(
            "SELECT response_text, error, cache_hit, latency_s FROM format_robustness.workflow_generations"
        ).fetchall()
    assert len(gens) == 24 and set(gens) == {(decision, None, False, None)}
    assert [r[5:7] for r in batch_rows(metamorph_home / "generation_cache.duckdb")] == [("completed", True)] * 2
    secret_free(metamorph_home / "generation_cache.duckdb", OPENAI_KEY)


def test_workflow_perturb_turns_are_called_synchronously_in_batch_mode(stub, tmp_path):
    from metamorph.studies.workflow_perturb.generate import provider_generate

    stub.script("POST", "/v1/chat/completions", Reply(200, chat_completion("turn answer", model="gpt-test")))
    api = OpenAIBatchAPI(stub, by_id({}))
    gen = provider_generate(
        openai_batch(stub), "gpt-test", cache=GenerationCache(tmp_path / "c.duckdb"), params={"max_tokens": 8}
    )
    assert gen([{"role": "user", "content": "hi"}]).text == "turn answer"
    assert api.creates == 0 and len(stub.requests_to("/v1/chat/completions")) == 1


def test_max_requests_splits_the_misses_into_several_batches(stub, tmp_path):
    reqs = oa_requests(5)
    keys = [r.cache_key() for r in reqs]
    api = OpenAIBatchAPI(stub, by_id({k: openai_ok(f"n{i}") for i, k in enumerate(keys, 1)}), statuses=("completed",))
    outcomes, _ = run_requests(
        reqs,
        openai_batch(stub, ExecutionConfig("batch", 0.01, 10.0, 2)),
        GenerationCache(tmp_path / "c.duckdb"),
        log=quiet,
    )
    assert [o.result.text for o in outcomes] == ["n1", "n2", "n3", "n4", "n5"]
    assert {b: [x["custom_id"] for x in lines] for b, lines in api.submitted.items()} == {
        "batch_1": keys[:2],
        "batch_2": keys[2:4],
        "batch_3": keys[4:],
    }
    assert dict(api.polls) == {"batch_1": 1, "batch_2": 1, "batch_3": 1}


def test_restart_resumes_the_persisted_batch_on_the_postgres_cache(stub, cache_store_pg):
    """The batch table lives beside the generations on either backend: a run on the PostgreSQL
    cache that stops polling, then a new process-like restart, submits once and collects once."""
    reqs = oa_requests(3)
    keys = [r.cache_key() for r in reqs]
    api = OpenAIBatchAPI(
        stub, by_id({k: openai_ok(f"pg {i}") for i, k in enumerate(keys, 1)}), statuses=("in_progress",)
    )
    first, _ = run_requests(
        reqs, openai_batch(stub, ExecutionConfig("batch", 0.01, 0.15)), cache_store_pg.open(), log=quiet
    )
    assert all(o.result.error.startswith("BatchPending: batch batch_1") for o in first)
    [rec] = cache_store_pg.open().batches()
    assert (rec.batch_id, rec.keys, rec.status, rec.collected) == ("batch_1", tuple(keys), "in_progress", False)
    api.statuses = ("completed",)
    second, stats = run_requests(reqs, openai_batch(stub), cache_store_pg.open(), log=quiet)
    assert [o.result.text for o in second] == ["pg 1", "pg 2", "pg 3"] and stats.errors == 0
    assert (api.creates, api.uploads) == (1, 1)
    [rec] = cache_store_pg.open().batches()
    assert (rec.status, rec.collected) == ("completed", True)
