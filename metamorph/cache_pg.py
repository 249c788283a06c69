"""The generation cache on PostgreSQL: the same tables, interface and semantics as the DuckDB cache.

:class:`PostgresGenerationCache` is a :class:`metamorph.cache.GenerationCache` whose store is a
PostgreSQL database named by a URL (``postgresql://user@host:port/dbname``; a schema other than
``public`` through the libpq option ``?options=-csearch_path%3D<schema>``). What stays the same
(see :mod:`metamorph.cache`): one row per request key; errors are stored and never served; a
success is never overwritten by an error; group commit by a writer thread (a committed row
survives a SIGKILL, a kill loses at most one commit window); every read flushes first; claims
with leases, ended by the commit of their row, by :meth:`release`, by their owner's exit (same
host) or by lease expiry.

What differs:

* many processes, on many hosts, use the database at once: the connection is held while the cache
  is in use and closed after ``hold_s`` seconds idle (no time slicing, ``yield_s`` is not used);
* claim checks and commits are serialised across every process by one transaction-scoped
  advisory lock (``pg_advisory_xact_lock``), the counterpart of DuckDB's single-writer file:
  without it a key committed by runner A between runner B's look-up of stored rows and its look-up
  of claims would be claimed and requested again by B;
* ``lock_timeout_s`` bounds the wait for the connection (``connect_timeout``) and for a lock held
  by another session (``lock_timeout``); beyond it the call (or :meth:`flush` for queued rows)
  raises ``psycopg2.OperationalError`` (a lock wait: its subclass ``psycopg2.errors.LockNotAvailable``).

Driver: psycopg2 (``psycopg2-binary``), the one dagster-postgres 0.29.27 works with, so one
PostgreSQL driver serves both Dagster's run storage and this cache. (dagster-postgres goes through
SQLAlchemy, whose 2.1 series maps a bare ``postgresql://`` URL to psycopg 3; with psycopg 3 its
event log's ``NOTIFY run_events, %(notify_id)s`` fails — NOTIFY takes no bound parameter — so
Dagster's URL names ``postgresql+psycopg2://``. This cache accepts that form too.) The URL's password, if any, is never
logged or stored: :attr:`path` is the URL with the password replaced by ``***``.
"""

from __future__ import annotations

import threading
from urllib.parse import urlsplit, urlunsplit

from metamorph.cache import RESULT_COLUMNS, COLUMN_TYPES, GenerationCache, results_from_rows
from metamorph.providers.base import GenerationResult

__all__ = [
    "PostgresGenerationCache",
    "is_postgres_url",
    "redact",
]

#: DuckDB column types -> PostgreSQL
_PG_TYPES = {
    "VARCHAR": "TEXT",
    "BIGINT": "BIGINT",
    "DOUBLE": "DOUBLE PRECISION",
    "TIMESTAMP": "TIMESTAMP",
    "INTEGER": "INTEGER",
}
_NOT_NULL = {
    "key": " PRIMARY KEY",
    "provider": " NOT NULL",
    "model": " NOT NULL",
    "request_json": " NOT NULL",
    "created_at": " NOT NULL",
}
_DDL = (
    "CREATE TABLE IF NOT EXISTS generations ("
    + ", ".join(f"{c} {_PG_TYPES[t]}{_NOT_NULL.get(c, '')}" for c, t in COLUMN_TYPES.items())
    + ");"
    "CREATE TABLE IF NOT EXISTS claims (key TEXT PRIMARY KEY, owner TEXT NOT NULL,"
    " expires_at DOUBLE PRECISION NOT NULL);"
    "CREATE TABLE IF NOT EXISTS batches (batch_id TEXT PRIMARY KEY, provider TEXT NOT NULL, base_url TEXT,"
    " model TEXT NOT NULL, keys TEXT[] NOT NULL, requests TEXT[] NOT NULL, status TEXT NOT NULL,"
    " collected BOOLEAN NOT NULL, input_file_id TEXT, submitted_at TIMESTAMP NOT NULL,"
    " updated_at TIMESTAMP NOT NULL);"
)
_UPSERT = (
    f"INSERT INTO generations ({', '.join(COLUMN_TYPES)}) SELECT * FROM unnest("
    + ", ".join(f"%s::{_PG_TYPES[t]}[]" for t in COLUMN_TYPES.values())
    + ") ON CONFLICT (key) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in COLUMN_TYPES if c != "key")
    + " WHERE generations.error IS NOT NULL OR excluded.error IS NULL"
)
_WANTED = "unnest(%s::TEXT[]) AS w(key)"
#: A stored row that serves a request (metamorph.cache._FRESH): a success stored at or after the
#: second and third parameters (the same instant; NULL: any time).
_FRESH = "g.error IS NULL AND (%s::timestamp IS NULL OR g.created_at >= %s::timestamp)"
_RESULT_SELECT = "g.key, " + ", ".join(f"g.{c}" for c in RESULT_COLUMNS[:-1]) + ", coalesce(g.attempts, 1)"
#: the advisory lock that serialises claims and commits of every process (an arbitrary constant)
_LOCK_KEY = 0x6D65_7461  # "meta"


_SCHEMES = ("postgresql://", "postgres://", "postgresql+psycopg2://")


def is_postgres_url(location: str) -> bool:
    """Whether a cache location is a PostgreSQL URL (``postgresql://``, ``postgres://`` or
    SQLAlchemy's ``postgresql+psycopg2://``)."""
    return str(location).startswith(_SCHEMES)


def redact(url: str) -> str:
    """The URL with its password (if any) replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))


class _Connection:
    """A psycopg2 connection in autocommit mode with DuckDB's ``execute(...).fetchall()`` shape."""

    def __init__(self, raw):
        self.raw = raw
        self.cur = raw.cursor()

    def execute(self, query: str, params=None):
        self.cur.execute(query, params)
        return self.cur

    def close(self) -> None:
        try:
            self.cur.close()
        finally:
            self.raw.close()


class PostgresGenerationCache(GenerationCache):
    """A generation cache in the PostgreSQL database at ``url`` (tables created on first use).

    Arguments and methods as :class:`metamorph.cache.GenerationCache` (``url`` in place of the
    file path); see the module docstring for what differs. Thread-safe within a process; any number
    of processes may share the database.

    Raises:
        psycopg2.OperationalError: the server cannot be reached within ``lock_timeout_s``.
    """

    def __init__(self, url: str, lock_timeout_s: float = 120.0, **kw):
        self._url = str(url)
        super().__init__(redact(self._url), lock_timeout_s, **kw)

    def _init_storage(self) -> None:
        self._db_lock = threading.RLock()
        with self._use() as con:
            con.execute("BEGIN")
            try:  # concurrent CREATE TABLE IF NOT EXISTS can collide in the catalog: serialise it
                con.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])
                con.execute(_DDL)
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise

    def _connect(self) -> _Connection:
        import psycopg2

        url = self._url.replace("postgresql+psycopg2://", "postgresql://", 1)  # libpq's form
        raw = psycopg2.connect(
            url, connect_timeout=max(1, int(round(self.lock_timeout_s))), application_name="metamorph-cache"
        )
        raw.autocommit = True
        con = _Connection(raw)
        con.execute("SET lock_timeout = %s", [f"{int(self.lock_timeout_s * 1000)}ms"])
        return con

    def _slice_over(self, now: float) -> bool:
        return now - self._used_at >= self.hold_s  # idle only: the database has no single-writer lock

    @staticmethod
    def _sql(query: str) -> str:
        return query.replace("?", "%s")

    def _commit(self, batch: list[tuple]) -> None:
        best: dict[str, tuple] = {}
        for row in batch:  # one row per key: the last success, else the last error
            if row[0] not in best or row[13] is None or best[row[0]][13] is not None:
                best[row[0]] = row
        columns = [list(col) for col in zip(*best.values())]
        with self._use() as con:
            con.execute("BEGIN")
            try:
                con.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])
                con.execute(_UPSERT, columns)
                con.execute("DELETE FROM claims WHERE owner = %s AND key = ANY(%s::TEXT[])", [self.owner, columns[0]])
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        self._claimed.difference_update(columns[0])

    # the statements of GenerationCache.get_many / claim in PostgreSQL's dialect

    def _stored(self, con, keys, stale_before) -> dict[str, GenerationResult]:
        return results_from_rows(
            con.execute(
                f"SELECT {_RESULT_SELECT} FROM generations g JOIN {_WANTED} USING (key) WHERE {_FRESH}",
                [keys, stale_before, stale_before],
            ).fetchall()
        )

    def _begin_claim(self, con) -> None:
        con.execute("BEGIN")

    def _lock_claims(self, con) -> None:
        con.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])

    def _held(self, con, keys) -> list[tuple]:
        return con.execute(
            f"SELECT c.key, c.owner, c.expires_at FROM claims c JOIN {_WANTED} USING (key) WHERE c.owner <> %s",
            [keys, self.owner],
        ).fetchall()

    def _insert_claims(self, con, keys, expires_at: float) -> None:
        con.execute(
            "INSERT INTO claims SELECT key, %s, %s FROM unnest(%s::TEXT[]) AS w(key) "
            "ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at",
            [self.owner, expires_at, keys],
        )
