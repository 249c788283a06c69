"""Generation cache: keys, hits, errors, and a killed run that resumes (real local model)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import duckdb
import pytest

from metamorph.cache import GenerationCache
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
    material = {"provider": "openai", "base_url": None, "model": "m", "params": {"temperature": 0.0},
                "messages": [{"role": "user", "content": "hello"}], "ingestion": "inline", "document": None,
                "renderer_version": None, "repeat_index": 1}
    want = hashlib.sha256(json.dumps(material, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert r.cache_key() == want


def test_explicit_zero_differs_from_unset():
    assert req(params={"temperature": 0}).cache_key() != req(params={}).cache_key()
    assert req(params={"top_p": 0}).cache_key() != req(params={}).cache_key()


def test_every_shaping_field_changes_the_key():
    base = req().cache_key()
    doc = Document(b"a: 1\n", "text/plain", "x.txt")
    variants = [req(model="m2"), req(provider="anthropic"), req(base_url="http://127.0.0.1:1/v1"),
                req(messages=({"role": "user", "content": "hello!"},)), req(repeat_index=2),
                req(renderer_version="txt-2"), req(params={"temperature": 0.0, "seed": 1}),
                req(ingestion="openai_file", document=doc)]
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


def test_hit_miss_and_errors_are_not_hits(tmp_path):
    cache = GenerationCache(tmp_path / "c.duckdb")
    r1, r2 = req(), req(repeat_index=2)
    assert cache.get(r1.cache_key()) is None
    cache.put(r1, GenerationResult(text="hi", finish_reason="stop", prompt_tokens=3, completion_tokens=1,
                                   model_id="m", model_version="m-2026-01-01"))
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


def test_no_secret_in_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-SECRET-123")
    cache = GenerationCache(tmp_path / "c.duckdb")
    cache.put(req(), GenerationResult(text="hi"))
    con = duckdb.connect(str(tmp_path / "c.duckdb"))
    dump = str(con.execute("SELECT * FROM generations").fetchall())
    con.close()
    assert "SECRET" not in dump


KILL_SCRIPT = textwrap.dedent("""
    import sys
    from metamorph.cache import GenerationCache
    from metamorph.providers.base import GenerationRequest
    from metamorph.providers.llama_cpp import LlamaCppProvider
    from metamorph.runner import run_requests

    provider = LlamaCppProvider()
    reqs = [GenerationRequest("llama_cpp", provider.model_name,
                              ({"role": "user", "content": f"Count to {i}."},),
                              {"temperature": 0.0, "max_tokens": 24, "seed": 0}) for i in range(1, 9)]
    outcomes, stats = run_requests(reqs, provider, GenerationCache(sys.argv[1]), log=lambda m: None)
    print(f"calls={stats.calls} hits={stats.cache_hits}", flush=True)
""")


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
    assert 3 <= done < 8, f"expected to kill mid-run, {done} finished"
    con = duckdb.connect(str(path), read_only=True)
    finished = con.execute("SELECT count(*) FROM generations WHERE error IS NULL").fetchall()[0][0]
    con.close()
    out = subprocess.run([sys.executable, str(script), str(path)], env=env, capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == f"calls={8 - finished} hits={finished}"
    again = subprocess.run([sys.executable, str(script), str(path)], env=env, capture_output=True, text=True,
                           check=True).stdout
    assert again.strip() == "calls=0 hits=8"
