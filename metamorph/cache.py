"""The generation cache: one DuckDB file, one row per (request key), committed per completion.

Key: :meth:`GenerationRequest.cache_key` — sha256 of the canonical JSON of everything that
shapes the response (provider, base_url, model, every decoding parameter with explicit 0 kept
distinct from unset, all messages, the sha256 and media type of an attached document, renderer
version, repeat index; the seed is one of the decoding parameters).

Semantics:

* a **hit** (a stored row with ``error IS NULL``) is served without calling the provider;
* an **error** is stored as an error (for the record) and is *not* a hit: the next run calls the
  provider again and overwrites it on success;
* every completion is written in its own short transaction as soon as it arrives, through a
  connection opened for that write only, so killing a run loses no finished completion and no
  DuckDB lock is held while a model is thinking;
* no secret is ever stored: requests carry none (providers read keys from the environment).

Table ``generations`` columns: key, provider, model, request_json, response_text, finish_reason,
prompt_tokens, completion_tokens, latency_s, model_id, model_version, system_fingerprint,
created_at (naive TIMESTAMP in UTC), error, attempts.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path

import duckdb

from metamorph.providers.base import GenerationRequest, GenerationResult

_DDL = """
CREATE TABLE IF NOT EXISTS generations (
    key VARCHAR PRIMARY KEY,
    provider VARCHAR NOT NULL,
    model VARCHAR NOT NULL,
    request_json VARCHAR NOT NULL,
    response_text VARCHAR,
    finish_reason VARCHAR,
    prompt_tokens BIGINT,
    completion_tokens BIGINT,
    latency_s DOUBLE,
    model_id VARCHAR,
    model_version VARCHAR,
    system_fingerprint VARCHAR,
    created_at TIMESTAMP NOT NULL,
    error VARCHAR,
    attempts INTEGER
)
"""

_COLS = ("response_text", "finish_reason", "prompt_tokens", "completion_tokens", "latency_s", "model_id",
         "model_version", "system_fingerprint", "error", "attempts")


class GenerationCache:
    """A DuckDB-backed generation cache at ``path`` (created on first use).

    Connections are opened per operation and closed at once; a lock held by another process is
    waited for with backoff up to ``lock_timeout_s`` seconds, then ``duckdb.IOException`` is raised.
    Thread-safe within a process.
    """

    def __init__(self, path: str | Path, lock_timeout_s: float = 120.0):
        self.path = str(path)
        self.lock_timeout_s = lock_timeout_s
        self._lock = threading.Lock()
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as con:
            con.execute(_DDL)

    def _connect(self) -> duckdb.DuckDBPyConnection:
        deadline = time.monotonic() + self.lock_timeout_s
        delay = 0.05
        while True:
            try:
                return duckdb.connect(self.path)
            except duckdb.IOException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(delay + random.random() * delay)
                delay = min(delay * 2, 2.0)

    def get(self, key: str) -> GenerationResult | None:
        """The stored successful result for ``key``, or ``None`` (miss, or only an error stored)."""
        return self.get_many([key]).get(key)

    def get_many(self, keys: Iterable[str]) -> dict[str, GenerationResult]:
        """Successful results for the given keys (errors are not hits)."""
        keys = list(dict.fromkeys(keys))
        if not keys:
            return {}
        with self._lock, self._connect() as con:
            con.execute("CREATE TEMP TABLE IF NOT EXISTS _wanted(key VARCHAR)")
            con.execute("DELETE FROM _wanted")
            con.executemany("INSERT INTO _wanted VALUES (?)", [(k,) for k in keys])
            rows = con.execute(
                f"SELECT g.key, {', '.join('g.' + c for c in _COLS)} FROM generations g "
                "JOIN _wanted w USING (key) WHERE g.error IS NULL"
            ).fetchall()
        return {r[0]: GenerationResult(text=r[1], finish_reason=r[2], prompt_tokens=r[3], completion_tokens=r[4],
                                       latency_s=r[5], model_id=r[6], model_version=r[7], system_fingerprint=r[8],
                                       error=r[9], attempts=r[10] or 1) for r in rows}

    def put(self, request: GenerationRequest, result: GenerationResult) -> None:
        """Store ``result`` for ``request`` in its own committed transaction (upsert by key).

        A successful row is never overwritten by a later error for the same key.
        """
        key = request.cache_key()
        now = datetime.now(timezone.utc).replace(tzinfo=None)  # naive UTC: no ICU extension offline
        values = (key, request.provider, request.model, request.to_json(), result.text, result.finish_reason,
                  result.prompt_tokens, result.completion_tokens, result.latency_s, result.model_id,
                  result.model_version, result.system_fingerprint, now, result.error, result.attempts)
        with self._lock, self._connect() as con:
            con.execute("BEGIN TRANSACTION")
            try:
                existing = con.execute("SELECT error FROM generations WHERE key = ?", [key]).fetchall()
                if existing and existing[0][0] is None and result.error is not None:
                    con.execute("ROLLBACK")
                    return
                con.execute("DELETE FROM generations WHERE key = ?", [key])
                con.execute(f"INSERT INTO generations VALUES ({', '.join('?' * len(values))})", values)
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise

    def known_versions(self, provider: str, model: str) -> set[str]:
        """Distinct provider-reported model versions stored for (provider, model)."""
        with self._lock, self._connect() as con:
            rows = con.execute(
                "SELECT DISTINCT model_version FROM generations WHERE provider = ? AND model = ? "
                "AND error IS NULL AND model_version IS NOT NULL", [provider, model]).fetchall()
        return {r[0] for r in rows}

    def count(self, errors: bool | None = None) -> int:
        """Number of rows (``errors=True``: error rows only; ``False``: successful rows only)."""
        where = "" if errors is None else ("WHERE error IS NOT NULL" if errors else "WHERE error IS NULL")
        with self._lock, self._connect() as con:
            return int(con.execute(f"SELECT count(*) FROM generations {where}").fetchall()[0][0])
