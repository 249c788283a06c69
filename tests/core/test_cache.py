"""Generation cache: keys, hits, errors, and a killed run that resumes (real local model).

The cache tests run on both backends (``cache_store``: a DuckDB file and a PostgreSQL schema).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import duckdb
import pytest

from metamorph.cache_pg import redact
from metamorph.providers.base import Document, GenerationRequest, GenerationResult

MSG = ({"role": "user", "content": "hello"},)


def req(**kw) -> GenerationRequest:
    base = dict(provider="openai", model="m", messages=MSG, params={"temperature": 0.0})
    base.update(kw)
    return GenerationRequest(**base)


def test_key_is_sha256_of_canonical_request():
    import hashlib
    import json

    r = req()
    material = {
        "provider": "openai",
        "base_url": None,
        "model": "m",
        "params": {"temperature": 0.0},
        "messages": [{"role": "user", "content": "hello"}],
        "ingestion": "inline",
        "document": None,
        "renderer_version": None,
        "repeat_index": 1,
    }
    want = hashlib.sha256(json.dumps(material, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert r.cache_key() == want


def test_explicit_zero_differs_from_unset():
    assert req(params={"temperature": 0}).cache_key() != req(params={}).cache_key()
    assert req(params={"top_p": 0}).cache_key() != req(params={}).cache_key()


def test_every_shaping_field_changes_the_key():
    base = req().cache_key()
    doc = Document(b"a: 1\n", "text/plain", "x.txt")
    variants = [
        req(model="m2"),
        req(provider="anthropic"),
        req(base_url="http://127.0.0.1:1/v1"),
        req(messages=({"role": "user", "content": "hello!"},)),
        req(repeat_index=2),
        req(renderer_version="txt-2"),
        req(params={"temperature": 0.0, "seed": 1}),
        req(ingestion="openai_file", document=doc),
    ]
    keys = [v.cache_key() for v in variants]
    assert base not in keys and len(set(keys)) == len(keys)


def test_document_hash_and_media_type_are_in_the_key_not_the_bytes():
    a = req(ingestion="openai_file", document=Document(b"a: 1\n", "text/plain", "x.txt"))
    b = req(ingestion="openai_file", document=Document(b"a: 2\n", "text/plain", "x.txt"))
    c = req(ingestion="openai_file", document=Document(b"a: 1\n", "text/csv", "x.txt"))
    d = req(ingestion="openai_file", document=Document(b"a: 1\n", "text/plain", "renamed.txt"))
    assert len({a.cache_key(), b.cache_key(), c.cache_key()}) == 3
    assert a.cache_key() == d.cache_key()  # the file name does not shape the response
    assert "a: 1" not in a.to_json()


def test_unknown_param_is_rejected():
    with pytest.raises(ValueError, match="unknown decoding parameter"):
        req(params={"temprature": 0})


def test_hit_miss_and_errors_are_not_hits(cache_store):
    cache = cache_store.open()
    r1, r2 = req(), req(repeat_index=2)
    assert cache.get(r1.cache_key()) is None
    cache.put(
        r1,
        GenerationResult(
            text="hi",
            finish_reason="stop",
            prompt_tokens=3,
            completion_tokens=1,
            model_id="m",
            model_version="m-2026-01-01",
        ),
    )
    cache.put(r2, GenerationResult(text=None, error="ProviderError[503]: overloaded"))
    hit = cache.get(r1.cache_key())
    assert hit.text == "hi" and hit.finish_reason == "stop" and hit.prompt_tokens == 3
    assert cache.get(r2.cache_key()) is None  # errors are stored but never served
    assert cache.count(errors=True) == 1 and cache.count(errors=False) == 1
    # a later success replaces the error; a later error never replaces a success
    cache.put(r2, GenerationResult(text="ok"))
    cache.put(r1, GenerationResult(text=None, error="boom"))
    assert cache.get(r2.cache_key()).text == "ok" and cache.get(r1.cache_key()).text == "hi"
    assert cache.count(errors=True) == 0
    assert cache.known_versions("openai", "m") == {"m-2026-01-01"}


def test_no_secret_in_the_cache(cache_store, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-SECRET-123")
    cache = cache_store.open()
    cache.put(req(), GenerationResult(text="hi"))
    cache.release()
    dump = str(cache_store.rows("SELECT * FROM generations"))
    assert "hi" in dump and "SECRET" not in dump


def test_a_postgres_url_password_is_redacted_from_the_cache_name():
    assert redact("postgresql://u:s3cret@db:5432/x?sslmode=require") == "postgresql://u:***@db:5432/x?sslmode=require"
    assert redact("postgresql://u@db/x") == "postgresql://u@db/x"


#: Requests of the killed run: enough that some are still to come when the test has seen three
#: stored, also when a loaded machine lets the run finish several between two looks.
KILL_N = 16

# a plain script with no ``__main__`` guard, as a user writes one: the provider's worker processes
# must not re-import it
KILL_SCRIPT = textwrap.dedent("""
    import sys
    from metamorph.cache import GenerationCache
    from metamorph.providers.base import GenerationRequest
    from metamorph.providers.llama_cpp import LlamaCppProvider
    from metamorph.runner import run_requests

    N = __N__
    provider = LlamaCppProvider()
    reqs = [GenerationRequest("llama_cpp", provider.model_name,
                              ({"role": "user", "content": f"Count to {i}."},),
                              {"temperature": 0.0, "max_tokens": 24, "seed": 0}) for i in range(1, N + 1)]
    outcomes, stats = run_requests(reqs, provider, GenerationCache(sys.argv[1]), log=lambda m: None)
    print(f"calls={stats.calls} hits={stats.cache_hits}", flush=True)
""").replace("__N__", str(KILL_N))


@pytest.mark.llm
def test_killed_run_resumes_without_repeating_finished_calls(tmp_path):
    path = tmp_path / "c.duckdb"
    script = tmp_path / "run.py"
    script.write_text(KILL_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen([sys.executable, str(script), str(path)], env=env, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    done = 0
    while time.monotonic() < deadline:
        time.sleep(0.2)
        try:
            con = duckdb.connect(str(path), read_only=True)
            done = con.execute("SELECT count(*) FROM generations WHERE error IS NULL").fetchall()[0][0]
            con.close()
        except (duckdb.IOException, duckdb.CatalogException):
            continue
        if done >= 3:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert 3 <= done < KILL_N, f"expected to kill mid-run, {done} finished"
    con = duckdb.connect(str(path), read_only=True)
    finished = con.execute("SELECT count(*) FROM generations WHERE error IS NULL").fetchall()[0][0]
    con.close()
    out = subprocess.run(
        [sys.executable, str(script), str(path)], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == f"calls={KILL_N - finished} hits={finished}"
    again = subprocess.run(
        [sys.executable, str(script), str(path)], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert again.strip() == f"calls=0 hits={KILL_N}"


# ------------------------------------------------------------------------------------------
# group commit, batched lookups, claims (no model needed)


def ok(text, **kw):
    return GenerationResult(text=text, finish_reason="stop", **kw)


def test_puts_are_group_committed_and_a_process_reads_its_own_writes(cache_store):
    writer = cache_store.open(commit_interval_s=60, commit_rows=10_000)  # commits only on flush
    other = cache_store.open()  # another reader of the same file: sees committed rows only
    rs = [req(repeat_index=i) for i in range(1, 4)]
    for i, r in enumerate(rs):
        writer.put(r, ok(f"a{i}"))
    assert other.count() == 0  # queued, not committed
    assert writer.get(rs[2].cache_key()).text == "a2"  # a read flushes first
    assert other.count() == 3
    writer.release(), other.release()


def test_commit_rows_starts_a_commit_without_a_flush(cache_store):
    writer = cache_store.open(commit_interval_s=60, commit_rows=2)
    other = cache_store.open()
    writer.put(req(repeat_index=1), ok("a"))
    writer.put(req(repeat_index=2), ok("b"))
    deadline = time.monotonic() + 10
    while other.count() < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert other.count() == 2
    writer.release(), other.release()


def test_a_success_wins_inside_one_commit_window(cache_store):
    cache = cache_store.open(commit_interval_s=60)
    a, b = req(repeat_index=1), req(repeat_index=2)
    cache.put(a, GenerationResult(text=None, error="e1"))
    cache.put(a, ok("first"))
    cache.put(a, GenerationResult(text=None, error="e2"))
    cache.put(b, GenerationResult(text=None, error="e1"))
    cache.put(b, GenerationResult(text=None, error="e2"))
    assert cache.get(a.cache_key()).text == "first"
    assert (cache.count(errors=True), cache.count(errors=False)) == (1, 1)
    # (DuckDB: a connection of the same process shares the cache's database)
    assert cache_store.rows("SELECT error FROM generations WHERE key = ?", [b.cache_key()]) == [("e2",)]
    cache.release()


def test_get_many_answers_thousands_of_keys_in_one_query(cache_store):
    cache = cache_store.open()
    rs = [req(repeat_index=i) for i in range(1, 3001)]
    for i, r in enumerate(rs):
        cache.put(
            r,
            ok(f"t{i}", prompt_tokens=i, completion_tokens=1, attempts=2)
            if i % 3
            else GenerationResult(text=None, error="boom"),
        )
    missing = req(repeat_index=9999).cache_key()
    got = cache.get_many([r.cache_key() for r in rs] + [missing, rs[1].cache_key()])
    assert len(got) == 2000  # 1000 errors and the unknown key are not hits
    r1 = got[rs[1].cache_key()]
    assert (r1.text, r1.prompt_tokens, r1.completion_tokens, r1.attempts, r1.error) == ("t1", 1, 1, 2, None)
    assert rs[0].cache_key() not in got and missing not in got
    cache.release()


def exited_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_claims_split_keys_between_owners(cache_store):
    a, b = cache_store.open(), cache_store.open()
    k1, k2, k3 = (req(repeat_index=i) for i in (1, 2, 3))
    got = a.claim([k1.cache_key(), k2.cache_key()])
    assert (got.claimed, got.busy, got.done) == ([k1.cache_key(), k2.cache_key()], [], {})
    got = b.claim([k1.cache_key(), k2.cache_key(), k3.cache_key()])
    assert (got.claimed, got.busy) == ([k3.cache_key()], [k1.cache_key(), k2.cache_key()])
    a.put(k1, ok("one"))
    a.flush()  # the commit that stores k1 ends a's claim on it
    got = b.claim([k1.cache_key(), k2.cache_key()])
    assert (got.claimed, got.busy, got.done[k1.cache_key()].text) == ([], [k2.cache_key()], "one")
    a.release()  # ends a's remaining claim (k2)
    assert b.claim([k2.cache_key()]).claimed == [k2.cache_key()]
    b.release()
    assert cache_store.rows("SELECT count(*) FROM claims") == [(0,)]


def test_claims_of_gone_or_expired_owners_are_taken_over(cache_store):
    import socket

    cache = cache_store.open()
    cache.release()
    host = socket.gethostname()
    rows = [
        ("dead", f"{host}:{exited_pid()}:t", time.time() + 600),  # same host, process gone
        ("expired", "elsewhere:1:t", time.time() - 1),  # another host, lease over
        ("live", "elsewhere:1:t", time.time() + 600),  # another host, lease running
        ("mine", f"{host}:{os.getpid()}:t", time.time() + 600),
    ]  # this process, another cache
    cache_store.executemany("INSERT INTO claims VALUES (?, ?, ?)", rows)
    got = cache.claim(["dead", "expired", "live", "mine"])
    assert (got.claimed, got.busy) == (["dead", "expired"], ["live", "mine"])
    cache.release()


def test_a_running_owner_renews_its_leases(cache_store):
    a = cache_store.open(lease_s=1.0)
    a.claim(["k"])
    time.sleep(2.2)  # more than two leases: only the writer's renewals keep the claim
    b = cache_store.open()
    assert b.claim(["k"]).busy == ["k"]
    a.release(), b.release()


EXIT_SCRIPT = textwrap.dedent("""
    import sys
    from metamorph.cache import open_cache
    from metamorph.providers.base import GenerationRequest, GenerationResult

    cache = open_cache(sys.argv[1], commit_interval_s=600)
    for i in range(5):
        cache.put(GenerationRequest("openai", "m", ({"role": "user", "content": str(i)},)), GenerationResult(text="x"))
    print("queued", flush=True)  # no flush: the interpreter's exit commits them
""")


def test_a_normal_exit_commits_what_is_queued(cache_store):
    out = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT, cache_store.location],
        env={**os.environ, "PYTHONPATH": os.getcwd()},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout == "queued\n", out.stderr
    assert cache_store.rows("SELECT count(*) FROM generations", read_only=True) == [(5,)]


def test_a_commit_blocked_by_another_process_raises_and_keeps_the_rows(cache_store):
    cache = cache_store.open(lock_timeout_s=0.5)
    cache.release()  # the store is free
    error, message = cache_store.lock_error
    with cache_store.held_by_another_process():  # DuckDB: the file; PostgreSQL: a table lock
        cache.put(req(), ok("kept"))
        with pytest.raises(error, match=message):
            cache.flush()
    assert cache.get(req().cache_key()).text == "kept"  # still queued, committed now
    cache.release()


def test_every_result_field_round_trips(cache_store):
    cache = cache_store.open()
    stored = GenerationResult(
        text="t",
        finish_reason="length",
        prompt_tokens=11,
        completion_tokens=7,
        latency_s=0.25,
        model_id="mid",
        model_version="mv",
        system_fingerprint="fp",
        error=None,
        attempts=3,
        extracted_text="what the workflow read",
    )
    cache.put(req(), stored)
    assert cache.get_many([req().cache_key()]) == {req().cache_key(): stored}
    assert cache.claim([req().cache_key()]).done == {req().cache_key(): stored}
    cache.release()


def test_a_cache_file_from_before_the_extracted_text_column_is_read_and_then_extended(tmp_path):
    from metamorph.cache import GenerationCache

    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute(
        "CREATE TABLE generations (key VARCHAR PRIMARY KEY, provider VARCHAR NOT NULL, model VARCHAR NOT NULL, "
        "request_json VARCHAR NOT NULL, response_text VARCHAR, finish_reason VARCHAR, prompt_tokens BIGINT, "
        "completion_tokens BIGINT, latency_s DOUBLE, model_id VARCHAR, model_version VARCHAR, "
        "system_fingerprint VARCHAR, created_at TIMESTAMP NOT NULL, error VARCHAR, attempts INTEGER)"
    )
    key = req().cache_key()
    con.execute(
        "INSERT INTO generations VALUES (?, 'openai', 'm', '{}', 'old reply', 'stop', 1, 1, 0.1, 'm', 'v', NULL, "
        "TIMESTAMP '2026-01-01', NULL, 1)",
        [key],
    )
    con.close()
    ro = GenerationCache(path, read_only=True)
    assert (ro.get(key).text, ro.get(key).extracted_text) == ("old reply", None)
    ro.release()
    rw = GenerationCache(path)
    assert rw.get(key).extracted_text is None
    rw.put(req(params={"temperature": 0.5}), GenerationResult("new", extracted_text="read"))
    assert rw.get(req(params={"temperature": 0.5}).cache_key()).extracted_text == "read"
    rw.release()


def test_rows_stored_before_stale_before_are_not_served(cache_store):
    """A re-evaluation after a provider version change (runner ``stale_before``): a success
    stored before the instant is neither a hit nor ``done`` in a claim; it is claimed to be called
    again, and a newer success for the key replaces it."""
    from datetime import datetime, timezone

    cache = cache_store.open()
    old, new = req(), req(repeat_index=2)
    cache.put(old, GenerationResult(text="old version", model_version="v1"))
    cache.flush()
    time.sleep(0.01)
    cut = datetime.now(timezone.utc).replace(tzinfo=None)
    time.sleep(0.01)
    cache.put(new, GenerationResult(text="new version", model_version="v2"))
    cache.flush()
    keys = [old.cache_key(), new.cache_key()]
    assert {k: r.text for k, r in cache.get_many(keys).items()} == {keys[0]: "old version", keys[1]: "new version"}
    assert {k: r.text for k, r in cache.get_many(keys, stale_before=cut).items()} == {keys[1]: "new version"}
    got = cache.claim(keys, stale_before=cut)
    assert (list(got.done), got.claimed, got.busy) == ([keys[1]], [keys[0]], [])
    cache.put(old, GenerationResult(text="called again", model_version="v2"))
    cache.flush()
    assert {k: r.text for k, r in cache.get_many(keys, stale_before=cut).items()} == {
        keys[0]: "called again",
        keys[1]: "new version",
    }


def test_postgres_claims_and_commits_wait_for_the_one_advisory_lock(cache_store_pg):
    """On PostgreSQL a claim's two look-ups (stored rows, then claims) and a commit (row + end of its
    claim) are serialised by one advisory lock: otherwise a key committed by A between B's two
    look-ups would be claimed, and requested, by B again. Here the lock is held by another session:
    both wait, and give up after ``lock_timeout_s`` with nothing written."""
    import psycopg2

    from metamorph.cache_pg import _LOCK_KEY

    cache = cache_store_pg.open(lock_timeout_s=0.3)
    holder = psycopg2.connect(cache_store_pg.location)
    holder.autocommit = True
    holder.cursor().execute("SELECT pg_advisory_lock(%s)", [_LOCK_KEY])
    try:
        with pytest.raises(psycopg2.errors.LockNotAvailable):
            cache.claim(["k"])
        cache.put(req(), ok("later"))
        with pytest.raises(psycopg2.errors.LockNotAvailable):
            cache.flush()
        assert cache_store_pg.rows("SELECT count(*) FROM claims") == [(0,)]
        assert cache_store_pg.rows("SELECT count(*) FROM generations") == [(0,)]
    finally:
        holder.cursor().execute("SELECT pg_advisory_unlock(%s)", [_LOCK_KEY])
        holder.close()
    assert cache.claim(["k"]).claimed == ["k"] and cache.get(req().cache_key()).text == "later"
    cache.release()


def test_a_cache_path_that_is_a_directory_or_not_duckdb_is_one_error_at_once(tmp_path):
    """Only another process's lock is waited for (lock_timeout_s, 120 s by default); a directory or a
    file that is not DuckDB is named at once instead of a 2-minute wait and a duckdb.IOException."""
    from metamorph.cache import GenerationCache
    from metamorph.errors import InputError

    with pytest.raises(InputError) as e:
        GenerationCache(tmp_path, lock_timeout_s=30)
    assert str(e.value) == f"{tmp_path}: is a directory, expected the generation cache's DuckDB file"
    junk = tmp_path / "cache.duckdb"
    junk.write_text("not a database\n")
    start = time.monotonic()
    with pytest.raises(InputError) as e:
        GenerationCache(junk, lock_timeout_s=30)
    assert time.monotonic() - start < 10
    assert str(e.value) == (
        f'{junk}: cannot open the generation cache: IO Error: The file "{junk}" exists, but it is not a valid '
        "DuckDB database file! If it is the generation cache, it is damaged: move it away and run again (the "
        "replies it held are requested again)"
    )


# ------------------------------------------------------------------------------------------
# Replies the store cannot hold as they came: made storable, or stored as an error, alone


def _stub_chat(text, usage=None, **message):
    from tests.core.stub_http import Reply, chat_completion

    body = chat_completion("x")
    body["choices"][0]["message"] = {"role": "assistant", "content": text, **message}
    if usage is not None:
        body["usage"] = usage
    return Reply(200, body)


def _run(stub, cache_store, questions, reply, provider=None):
    """``questions`` through run_requests (real OpenAI SDK, real cache on ``cache_store``), the stub
    answering each by ``reply(question)``; returns (outcome text/error per question, stored rows)."""
    from metamorph.providers.openai_provider import OpenAIProvider
    from metamorph.runner import run_requests

    stub.script("POST", "/v1/chat/completions", lambda rec: reply(rec.json["messages"][-1]["content"]))
    provider = provider or OpenAIProvider("openai", "sk-test-CACHE", base_url=stub.url + "/v1", max_concurrency=1)
    requests = [
        GenerationRequest("openai", "gpt-x", ({"role": "user", "content": q},), {"temperature": 0.0}) for q in questions
    ]
    cache = cache_store.open(commit_interval_s=60)  # one group commit for the whole run (at release)
    outcomes, _ = run_requests(requests, provider, cache, log=lambda m: None)
    stored = {
        key: (text, error) for key, text, error in cache_store.rows("SELECT key, response_text, error FROM generations")
    }
    return [(o.result.text, o.result.error) for o in outcomes], [stored.get(r.cache_key()) for r in requests]


def test_a_reply_with_a_lone_surrogate_is_stored_as_u_fffd_with_its_neighbours(stub, cache_store):
    """The stub's JSON escapes ``\\ud800`` (the SDK decodes it to a str UTF-8 cannot encode): the
    reply is stored with U+FFFD in its place, and the group commit keeps the other replies."""
    replies = {"q1": "fine", "q2": "bad \ud800 reply", "q3": "also fine", "q4": "nul \x00 here"}
    got, stored = _run(stub, cache_store, list(replies), lambda q: _stub_chat(replies[q]))
    # a NUL (JSON "\u0000") too: PostgreSQL's TEXT cannot hold it, and both backends store the same text
    want = [("fine", None), ("bad \ufffd reply", None), ("also fine", None), ("nul \ufffd here", None)]
    assert got == want and stored == want
    again, _ = _run(stub, cache_store, list(replies), lambda q: _stub_chat("never asked"))
    assert again == want and len(stub.requests_to("/v1/chat/completions")) == 4  # all four served from the cache


def test_a_row_the_store_refuses_is_stored_as_an_error_alone(stub, cache_store):
    """A reply whose usage the store cannot hold (a token count beyond BIGINT) fails the group commit:
    its neighbours are committed one by one and it is stored as an error, called again next run."""
    huge = {"prompt_tokens": 2**64, "completion_tokens": 1, "total_tokens": 2**64 + 1}
    got, stored = _run(
        stub, cache_store, ["q1", "q2", "q3"], lambda q: _stub_chat(f"a {q}", huge if q == "q2" else None)
    )
    assert got == [("a q1", None), ("a q2", None), ("a q3", None)]  # this run keeps every reply it got
    assert stored[0] == ("a q1", None) and stored[2] == ("a q3", None)
    text, error = stored[1]
    assert text is None and error.startswith("CacheError: the reply could not be stored (")
    again, stored = _run(stub, cache_store, ["q1", "q2", "q3"], lambda q: _stub_chat(f"b {q}"))
    assert again == [("a q1", None), ("b q2", None), ("a q3", None)]  # only q2 is asked again
    assert stored == again and len(stub.requests_to("/v1/chat/completions")) == 4


def test_a_reply_with_content_null_is_an_error_to_retry_never_an_empty_completion(stub, cache_store):
    """``content: null`` — a refusal, a tool call — is stored as an error (not ""), so the next run asks again."""
    replies = {
        "refused": _stub_chat(None, refusal="I can't help with that."),
        "tool": _stub_chat(
            None,
            tool_calls=[{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        ),
        "empty": _stub_chat(""),
    }
    replies["tool"].body["choices"][0]["finish_reason"] = "tool_calls"
    got, stored = _run(stub, cache_store, list(replies), replies.get)
    want = [
        (
            None,
            'ProviderError[None]: OpenAI reply has no text (finish_reason stop; refusal: "I can\'t help with that.")',
        ),
        (None, "ProviderError[None]: OpenAI reply has no text (finish_reason tool_calls)"),
        ("", None),  # an empty text is a completion (the model said nothing)
    ]
    assert got == want and stored == want
    again, _ = _run(stub, cache_store, list(replies), lambda q: _stub_chat(f"now {q}"))
    assert again == [("now refused", None), ("now tool", None), ("", None)]
    assert len(stub.requests_to("/v1/chat/completions")) == 5


def test_an_anthropic_reply_without_a_text_block_is_an_error(stub):
    from metamorph.providers.anthropic_provider import AnthropicProvider
    from metamorph.providers.base import ProviderError
    from tests.core.stub_http import Reply

    stub.script(
        "POST",
        "/v1/messages",
        Reply(
            200,
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "claude-test",
                "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
                "stop_reason": "tool_use",
                "stop_sequence": None,
                "usage": {"input_tokens": 5, "output_tokens": 1},
            },
        ),
    )
    provider = AnthropicProvider("sk-ant-test-CACHE", base_url=stub.url)
    request = GenerationRequest("anthropic", "claude-test", MSG, {"max_tokens": 8})
    with pytest.raises(ProviderError) as info:
        provider.generate(request)
    assert (str(info.value), info.value.retryable) == ("Anthropic reply has no text (finish_reason tool_use)", False)
