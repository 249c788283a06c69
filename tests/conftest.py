"""Shared fixtures. Real samples are read by path from ../shared (never copied into the repo)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.core.stub_http import StubServer

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO = Path(__file__).resolve().parent.parent
SHARED_DATASETS = Path(os.environ.get("METAMORPH_SHARED", REPO.parent / "shared")) / "datasets"


def shared_sample(name: str) -> Path:
    """Path of ``../shared/datasets/<name>/sample.jsonl``; skips the test when it is absent."""
    p = SHARED_DATASETS / name / "sample.jsonl"
    if not p.exists():
        pytest.skip(f"shared sample {p} not present")
    return p


@pytest.fixture
def metamorph_home(tmp_path, monkeypatch):
    """A fresh METAMORPH_HOME (warehouse + cache) for one test."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("METAMORPH_HOME", str(home))
    return home


@pytest.fixture
def clean_proxy_env(monkeypatch):
    """No proxy or provider env vars may redirect the SDKs away from the local stub."""
    for var in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "OPENAI_BASE_URL",
        "OPENAI_ORG_ID",
        "OPENAI_PROJECT_ID",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_CUSTOM_HEADERS",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
def stub(clean_proxy_env):
    """A running :class:`tests.stub_http.StubServer` on 127.0.0.1 (closed after the test)."""
    server = StubServer()
    yield server
    server.close()


# ------------------------------------------------------------------------------------------
# PostgreSQL and Redis (scripts/services.sh). Tests that need them are marked `services` (added
# automatically to every test using the fixtures below). When a service does not answer: with
# METAMORPH_SERVICES=1 (set by `make test` and .ci/run once the services are started) the test FAILS;
# without it (a plain pytest run with no services) the test is skipped, naming the command that starts them.

PG_URL = os.environ.get("METAMORPH_TEST_PG_URL", "postgresql://postgres@127.0.0.1:55432/postgres")
REDIS_URL = os.environ.get("METAMORPH_TEST_REDIS_URL", "redis://127.0.0.1:56379/0")
SERVICE_FIXTURES = {"postgres_url", "pg_schema_url", "redis_url", "cache_store_pg"}


def _unreachable(what: str, url: str, exc: Exception):
    msg = f"{what} not reachable at {url} ({type(exc).__name__}: {str(exc).strip()[:200]}); start it: scripts/services.sh start"
    if os.environ.get("METAMORPH_SERVICES") == "1":
        pytest.fail(f"METAMORPH_SERVICES=1 but {msg}", pytrace=False)
    pytest.skip(msg)


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The test PostgreSQL server's URL (a superuser; METAMORPH_TEST_PG_URL)."""
    import psycopg2

    try:
        psycopg2.connect(PG_URL, connect_timeout=3).close()
    except psycopg2.OperationalError as exc:
        _unreachable("PostgreSQL", PG_URL, exc)
    return PG_URL


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The test Redis server's URL (METAMORPH_TEST_REDIS_URL)."""
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        _unreachable("Redis", REDIS_URL, exc)
    return REDIS_URL


@pytest.fixture
def pg_schema_url(postgres_url):
    """A URL whose connections work in a fresh schema of their own (dropped after the test)."""
    import psycopg2

    schema = f"t_{uuid.uuid4().hex[:12]}"
    con = psycopg2.connect(postgres_url)
    con.autocommit = True
    con.cursor().execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in postgres_url else "?"
    yield f"{postgres_url}{sep}options={quote(f'-csearch_path={schema}')}"
    con.cursor().execute(f"DROP SCHEMA {schema} CASCADE")
    con.close()


@pytest.fixture
def cache_store_pg(pg_schema_url):
    from tests.core.cache_backends import PostgresStore

    return PostgresStore(pg_schema_url)


@pytest.fixture(params=["duckdb", "postgres"])
def cache_store(request, tmp_path):
    """The generation cache's two backends (tests/core/cache_backends.py): a DuckDB file, and a
    fresh schema on the PostgreSQL test server."""
    from tests.core.cache_backends import DuckDBStore

    if request.param == "duckdb":
        return DuckDBStore(tmp_path / "c.duckdb")
    return request.getfixturevalue("cache_store_pg")


def pytest_collection_modifyitems(config, items):
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        callspec = getattr(item, "callspec", None)
        if names & SERVICE_FIXTURES or (callspec and callspec.params.get("cache_store") == "postgres"):
            item.add_marker(pytest.mark.services)


@pytest.fixture(autouse=True)
def _no_stale_defs_state_storage():
    """dagster 1.13.27 leaves a closed test instance's DefsStateStorage in a context variable; a
    later ``materialize`` without an instance then fails with "undefined DagsterInstance weakref"."""
    from dagster._core.storage.defs_state import base

    base._current_storage.set(None)
    yield
    base._current_storage.set(None)
