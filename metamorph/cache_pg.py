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
  raises ``psycopg2.OperationalError`` (a lock wait: its subclass ``psycopg2.errors.LockNotAvailable``);
* a lost server (a restart, a failover, a dropped connection: refused or broken connections, SQLSTATE
  classes 08 and 57P) is waited out: every statement or transaction that failed on it is run again on a
  new connection every 0.5 s until the server answers, for at most ``lock_timeout_s`` counted from the
  first failure of the outage. Queued rows stay queued meanwhile (nothing received is lost, nothing is
  requested again), claims are kept, and the outage and the reconnection are logged (logger
  ``metamorph.cache_pg``: a warning when it starts, an info line with its length and cause when it ends). A
  transaction cut at its COMMIT is run again whole, which is harmless: an upsert of the same rows, the
  same claims by the same owner. Beyond ``lock_timeout_s`` the call raises ``psycopg2.OperationalError``
  whose message starts ``generation cache <url>: PostgreSQL unreachable for <n> s``; rows queued then
  stay queued, and later calls try once each until the server is back.

Driver: psycopg2 (``psycopg2-binary``), the one dagster-postgres 0.29.27 works with, so one
PostgreSQL driver serves both Dagster's run storage and this cache. (dagster-postgres goes through
SQLAlchemy, whose 2.1 series maps a bare ``postgresql://`` URL to psycopg 3; with psycopg 3 its
event log's ``NOTIFY run_events, %(notify_id)s`` fails — NOTIFY takes no bound parameter — so
Dagster's URL names ``postgresql+psycopg2://``. This cache accepts that form too.) The URL's password, if any, is never
logged or stored: :attr:`path` is the URL with the password replaced by ``***``.
"""

from __future__ import annotations

import logging
import threading
import time
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
    "ALTER TABLE generations ADD COLUMN IF NOT EXISTS extracted_text TEXT;"
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
_RESULT_SELECT = "g.key, " + ", ".join(
    "coalesce(g.attempts, 1)" if c == "attempts" else f"g.{c}" for c in RESULT_COLUMNS
)
#: the advisory lock that serialises claims and commits of every process (an arbitrary constant)
_LOCK_KEY = 0x6D65_7461  # "meta"


#: seconds between two attempts to reach a lost server
_RECONNECT_EVERY_S = 0.5
log = logging.getLogger(__name__)

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


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class _Connection:
    """A psycopg2 connection in autocommit mode with DuckDB's ``execute(...).fetchall()`` shape."""

    def __init__(self, raw):
        self.raw = raw
        self.cur = raw.cursor()

    def execute(self, query: str, params=None):
        if query == "ROLLBACK" and self.raw.closed:  # nothing to roll back on a lost connection
            return self.cur
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
        self._outage_lock = threading.Lock()
        self._down_since: float | None = None  # monotonic time of the first failure of the current outage
        self._down_cause = ""  # the first line of the error that began it
        self._connected_at = 0.0  # monotonic time of the last connection made
        super().__init__(redact(self._url), lock_timeout_s, **kw)

    # ------------------------------------------------------------------ a lost server

    def _lost(self, exc: BaseException) -> bool:
        """Whether ``exc`` says the server is out of reach (not a lock wait, a cancelled statement or an
        error of the statement itself)."""
        import psycopg2

        if not isinstance(exc, (psycopg2.OperationalError, psycopg2.InterfaceError)):
            return False
        if isinstance(exc, (psycopg2.errors.LockNotAvailable, psycopg2.errors.QueryCanceled)):
            return False
        code = getattr(exc, "pgcode", None) or ""
        con = self._con
        return con is None or bool(con.raw.closed) or code.startswith(("08", "57P"))

    def _reconnecting(self, fn):
        """``fn()``, run again on a new connection while the server is lost (module docstring), for at
        most ``lock_timeout_s`` from the first failure of the outage.

        Raises:
            psycopg2.OperationalError: the server did not answer within ``lock_timeout_s``.
        """
        import psycopg2

        while True:
            try:
                out = fn()
            except (psycopg2.OperationalError, psycopg2.InterfaceError) as exc:
                if str(exc).startswith(f"generation cache {self.path}: ") or not self._lost(exc):
                    raise
                self._close_connection(pause=False)  # a connection to a lost server is of no further use
                self._end_outage()
                now = time.monotonic()
                with self._outage_lock:
                    if self._down_since is None:
                        self._down_since, self._down_cause = now, _first_line(exc)
                        log.warning(
                            "generation cache %s: PostgreSQL connection lost (%s); reconnecting every %.1f s for up "
                            "to %.0f s, queued completions are kept",
                            self.path,
                            _first_line(exc),
                            _RECONNECT_EVERY_S,
                            self.lock_timeout_s,
                        )
                    down = now - self._down_since
                if down >= self.lock_timeout_s:
                    raise psycopg2.OperationalError(
                        f"generation cache {self.path}: PostgreSQL unreachable for {down:.0f} s "
                        f"(lock_timeout_s {self.lock_timeout_s:.0f} s): {_first_line(exc)}"
                    ) from exc
                time.sleep(min(_RECONNECT_EVERY_S, self.lock_timeout_s - down))
                continue
            self._end_outage()
            return out

    def _end_outage(self) -> None:
        """The current outage (if any) is over once a connection was made after it began."""
        with self._outage_lock:
            if self._down_since is not None and self._connected_at > self._down_since:
                log.info(  # the cause again: the warning may not have reached a log stored on the lost server
                    "generation cache %s: reconnected to PostgreSQL after %.1f s (lost: %s)",
                    self.path,
                    self._connected_at - self._down_since,
                    self._down_cause,
                )
                self._down_since = None

    # every operation on the store, waiting out a lost server

    def release(self) -> None:
        self._reconnecting(super().release)

    def _housekeep(self) -> None:
        self._reconnecting(super()._housekeep)

    def record_batch(self, batch) -> None:
        parent = super().record_batch
        self._reconnecting(lambda: parent(batch))

    def update_batch(self, batch_id: str, status: str, collected: bool = False) -> None:
        parent = super().update_batch
        self._reconnecting(lambda: parent(batch_id, status, collected))

    def open_batches(self, provider: str, base_url: str | None, model: str):
        parent = super().open_batches
        return self._reconnecting(lambda: parent(provider, base_url, model))

    def batches(self):
        return self._reconnecting(super().batches)

    def get_many(self, keys, stale_before=None) -> dict[str, GenerationResult]:
        keys, parent = list(keys), super().get_many
        return self._reconnecting(lambda: parent(keys, stale_before))

    def claim(self, keys, stale_before=None):
        keys, parent = list(keys), super().claim
        return self._reconnecting(lambda: parent(keys, stale_before))

    def known_versions(self, provider: str, model: str) -> set[str]:
        parent = super().known_versions
        return self._reconnecting(lambda: parent(provider, model))

    def count(self, errors: bool | None = None) -> int:
        parent = super().count
        return self._reconnecting(lambda: parent(errors))

    # ------------------------------------------------------------------ the backend hooks

    def _init_storage(self) -> None:
        self._db_lock = threading.RLock()
        self._reconnecting(self._create_tables)

    def _create_tables(self) -> None:
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
        self._connected_at = time.monotonic()
        return con

    def _slice_over(self, now: float) -> bool:
        return now - self._used_at >= self.hold_s  # idle only: the database has no single-writer lock

    @staticmethod
    def _sql(query: str) -> str:
        return query.replace("?", "%s")

    def _row_errors(self) -> tuple[type[BaseException], ...]:
        """psycopg2's conversion of a value (a NUL in a str: ValueError; an unencodable str) and
        PostgreSQL's data errors (SQLSTATE class 22: a number out of range, an invalid character)."""
        import psycopg2

        return (ValueError, OverflowError, psycopg2.DataError)

    def _commit_rows(self, rows: list[tuple]) -> None:
        self._reconnecting(lambda: self._commit_rows_once(rows))

    def _commit_rows_once(self, rows: list[tuple]) -> None:
        columns = [list(col) for col in zip(*rows)]
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
