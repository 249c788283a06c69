"""The generation cache: one DuckDB file, one row per request key, written by group commit.

Key: :meth:`GenerationRequest.cache_key` — sha256 of the canonical JSON of everything that
shapes the response (provider, base_url, model, every decoding parameter with explicit 0 kept
distinct from unset, all messages, the sha256 and media type of an attached document,
renderer version, repeat index; the seed is one of the decoding parameters).

Semantics:

* a **hit** (a stored row with ``error IS NULL``) is served without calling the provider;
* an **error** is stored as an error (for the record) and is *not* a hit: the next run calls the
  provider again and overwrites it on success; a success is never overwritten by an error;
* **group commit**: :meth:`GenerationCache.put` queues the row and returns; a writer thread
  commits what is queued every ``commit_interval_s`` seconds or ``commit_rows`` rows, in one
  transaction. A committed row survives a SIGKILL; a kill loses at most the rows queued since the
  last commit (one window). :meth:`~GenerationCache.flush` commits at once and waits; every read
  flushes first, so a process always reads its own writes; a normal interpreter exit commits
  what is queued (the writer is not a daemon thread);
* **one bad row never costs its neighbours**: the text of every result is storable by
  construction (:func:`metamorph.providers.base.storable_text`: lone surrogates and NUL become
  U+FFFD); should the store still refuse a value of a group (a token count out of BIGINT's
  range), the group is committed row by row and the refused row is stored as an error
  (``CacheError: the reply could not be stored (...)``), to be called again by the next run;
* **one connection, time-sliced**: the cache holds one DuckDB connection for lookups, claims and
  commits (opening one costs ~20 ms). DuckDB lets one process at a time open a file read-write,
  so the connection is given up after ``hold_s`` seconds of use (then not reopened for
  ``yield_s`` seconds), when idle for ``hold_s``, and by :meth:`~GenerationCache.release`. A
  second process waiting for the file gets in within about ``hold_s + yield_s``; no lock is held
  while a model is thinking beyond that slice. A process that cannot get the file within
  ``lock_timeout_s`` raises ``duckdb.IOException``;
* **claims** (:meth:`~GenerationCache.claim`): before calling the provider a runner claims the
  keys it is about to request (table ``claims``, committed at once). A key another live runner
  has claimed is left to it, so two runners sharing the file do not pay for one completion twice.
  A claim ends when its row is committed (same transaction), on :meth:`release`, when its owner
  process is gone (same host, pid not alive), or when its lease (``lease_s``, renewed by the
  writer while the owner runs) expires;
* no secret is ever stored: requests carry none (providers read keys from the environment).

Table ``generations`` columns: key, provider, model, request_json, response_text, finish_reason,
prompt_tokens, completion_tokens, latency_s, model_id, model_version, system_fingerprint,
created_at (naive TIMESTAMP in UTC), error, attempts, extracted_text (the text a workflow under test
reported having extracted from its upload; added to an older file when it is opened read-write, and
read as null from an older file opened read-only). Table ``claims``: key, owner
(``host:pid:token``), expires_at (POSIX seconds). Table ``batches`` (provider batch jobs,
:mod:`metamorph.batch`): batch_id, provider, base_url, model, keys (VARCHAR[]: the generation keys,
= the batch's custom_ids), requests (VARCHAR[]: each key's canonical request JSON, same order),
status (the provider's last reported status), collected (its results are in ``generations``),
input_file_id (OpenAI), submitted_at / updated_at (naive UTC). It holds no secret.

The same cache on PostgreSQL, for several processes or hosts at once:
:class:`metamorph.cache_pg.PostgresGenerationCache`; :func:`open_cache` picks the backend from the
location (a ``postgresql://`` URL or a file path).
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import duckdb

from metamorph.errors import InputError
from metamorph.providers.base import GenerationRequest, GenerationResult, storable_text

__all__ = [
    "COLUMN_TYPES",
    "RESULT_COLUMNS",
    "BatchRecord",
    "Claim",
    "GenerationCache",
    "check_cache_file",
    "damaged_cache",
    "open_cache",
    "owner_alive",
    "results_from_rows",
]

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
    attempts INTEGER,
    extracted_text VARCHAR
);
ALTER TABLE generations ADD COLUMN IF NOT EXISTS extracted_text VARCHAR;
CREATE TABLE IF NOT EXISTS claims (
    key VARCHAR PRIMARY KEY,
    owner VARCHAR NOT NULL,
    expires_at DOUBLE NOT NULL
);
CREATE TABLE IF NOT EXISTS batches (
    batch_id VARCHAR PRIMARY KEY,
    provider VARCHAR NOT NULL,
    base_url VARCHAR,
    model VARCHAR NOT NULL,
    keys VARCHAR[] NOT NULL,
    requests VARCHAR[] NOT NULL,
    status VARCHAR NOT NULL,
    collected BOOLEAN NOT NULL,
    input_file_id VARCHAR,
    submitted_at TIMESTAMP NOT NULL,
    updated_at TIMESTAMP NOT NULL
);
"""

#: generations columns in table order with their SQL types (the batch upsert unnests one list per column).
COLUMN_TYPES = {
    "key": "VARCHAR",
    "provider": "VARCHAR",
    "model": "VARCHAR",
    "request_json": "VARCHAR",
    "response_text": "VARCHAR",
    "finish_reason": "VARCHAR",
    "prompt_tokens": "BIGINT",
    "completion_tokens": "BIGINT",
    "latency_s": "DOUBLE",
    "model_id": "VARCHAR",
    "model_version": "VARCHAR",
    "system_fingerprint": "VARCHAR",
    "created_at": "TIMESTAMP",
    "error": "VARCHAR",
    "attempts": "INTEGER",
    "extracted_text": "VARCHAR",
}
#: generations columns read back into a :class:`GenerationResult`, in its field order.
RESULT_COLUMNS = (
    "response_text",
    "finish_reason",
    "prompt_tokens",
    "completion_tokens",
    "latency_s",
    "model_id",
    "model_version",
    "system_fingerprint",
    "error",
    "attempts",
    "extracted_text",
)
_UPSERT = (
    f"INSERT INTO generations ({', '.join(COLUMN_TYPES)}) SELECT "
    + ", ".join(f"unnest(${i + 1}::{t}[])" for i, t in enumerate(COLUMN_TYPES.values()))
    + " ON CONFLICT (key) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in COLUMN_TYPES if c != "key")
    + " WHERE generations.error IS NOT NULL OR excluded.error IS NULL"
)
_WANTED = "(SELECT unnest($1::VARCHAR[]) AS key)"
#: A stored row that serves a request: a success, stored at or after $2 (NULL: any time).
_FRESH = "g.error IS NULL AND ($2::TIMESTAMP IS NULL OR g.created_at >= $2::TIMESTAMP)"
_HOST = socket.gethostname()
log = logging.getLogger(__name__)

# One lock per cache file and process: every instance on the file serialises its DuckDB work on it
# (DuckDB shares one database instance per file within a process).
_FILE_LOCKS: dict[str, threading.RLock] = {}
_FILE_LOCKS_GUARD = threading.Lock()


def _file_lock(path: str) -> threading.RLock:
    with _FILE_LOCKS_GUARD:
        return _FILE_LOCKS.setdefault(os.path.realpath(path), threading.RLock())


#: SELECT list of a stored result: the key, then GenerationResult's fields in its own order.
_RESULT_SELECT = "g.key, " + ", ".join(
    "coalesce(g.attempts, 1)" if c == "attempts" else f"g.{c}" for c in RESULT_COLUMNS
)


#: Words of DuckDB's errors that mean the file itself is damaged (cut short, overwritten), not a
#: lock, a full disk or a bad query.
_DAMAGE = ("could not read enough bytes", "corrupt", "checksum")


def damaged_cache(path: str, exc: BaseException) -> InputError | None:
    """The one-line :class:`InputError` for a DuckDB error that says the generation cache file at
    ``path`` is damaged (truncated or corrupt, :data:`_DAMAGE`), naming the file and what to do;
    ``None`` for any other error."""
    first = (str(exc).splitlines() or [""])[0]
    if "not a valid duckdb database" in first.lower():  # maybe another file given as the cache: not "delete it"
        return InputError(
            path,
            f"cannot open the generation cache: {first} If it is the generation cache, it is damaged: move it "
            "away and run again (the replies it held are requested again)",
        )
    if not any(w in first.lower() for w in _DAMAGE):
        return None
    return _damaged(path, first)


def _damaged(path: str, detail: str) -> InputError:
    return InputError(
        path,
        f"the generation cache is damaged (truncated or corrupt: {detail}); move it away or delete it and "
        "run again (the replies it held are requested again)",
    )


#: Bytes of a DuckDB file before its first block (three 4 KiB headers).
_DUCKDB_HEADER_BYTES = 3 * 4096


def _check_whole(path: str, con: duckdb.DuckDBPyConnection) -> None:
    """Raise the :func:`damaged_cache` error when the file is shorter than the blocks in use its
    header lists: a file cut short opens, and only the reads that reach a missing block would fail.
    Free blocks are not counted: DuckDB truncates the free blocks at the end of the file at a
    checkpoint while its header still counts them (a later read never reaches them)."""
    block_size, used_blocks = con.execute("SELECT block_size, used_blocks FROM pragma_database_size()").fetchall()[0]
    need = _DUCKDB_HEADER_BYTES + int(block_size) * int(used_blocks)
    have = os.path.getsize(path)
    if have < need:
        raise _damaged(path, f"the file has {have:,} bytes, the {used_blocks} blocks in use it lists need {need:,}")


def results_from_rows(rows: list[tuple]) -> dict[str, GenerationResult]:
    """key -> result for rows ``(key, *RESULT_COLUMNS)`` as selected by the cache backends
    (positional: ~35% faster than keywords)."""
    return {r[0]: GenerationResult(*r[1:]) for r in rows}


def _unstorable(row: tuple, exc: BaseException) -> tuple:
    """The error row stored in place of a generations row the store refused: the request's
    columns and ``created_at`` kept, the reply's columns null, ``error`` saying why."""
    why = storable_text((str(exc).strip().splitlines() or [""])[0])[:300]
    error = f"CacheError: the reply could not be stored ({type(exc).__name__}: {why})"
    log.warning("generation cache: key %s: %s; stored as an error, the next run calls it again", row[0], error)
    return (*row[:4], *(None,) * 8, row[12], error, row[14], None)


def owner_alive(owner: str) -> bool:
    """Whether the process named by a claim owner ``host:pid:token`` may still be running.

    Same host: the pid is checked (``False`` once it has exited). Another host: ``True`` (only
    the lease can end its claims).
    """
    host, _, rest = owner.partition(":")
    if host != _HOST:
        return True
    try:
        os.kill(int(rest.partition(":")[0]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):
        return True
    return True


@dataclass(frozen=True)
class BatchRecord:
    """One row of table ``batches``: a provider batch job and the generation keys it carries.

    ``keys[i]`` is the custom_id of request i and ``requests[i]`` its canonical request JSON (what
    ``generations.request_json`` stores); ``status`` is the provider's last reported status
    (OpenAI: validating / in_progress / finalizing / completed / failed / expired / cancelling /
    cancelled; Anthropic: in_progress / canceling / ended; ours: ``submit_failed``, ``lost``);
    ``submitted_at`` is naive UTC.
    """

    batch_id: str
    provider: str
    base_url: str | None
    model: str
    keys: tuple[str, ...]
    requests: tuple[str, ...]
    status: str
    collected: bool
    input_file_id: str | None
    submitted_at: datetime


@dataclass
class Claim:
    """What :meth:`GenerationCache.claim` found for the keys asked about.

    ``claimed``: keys now claimed by this cache (call the provider for them); ``done``: keys with a
    stored success (e.g. just written by another runner), with their result; ``busy``: keys a live
    other runner has claimed (ask again later).
    """

    claimed: list[str] = field(default_factory=list)
    done: dict[str, GenerationResult] = field(default_factory=dict)
    busy: list[str] = field(default_factory=list)


class GenerationCache:
    """A DuckDB-backed generation cache at ``path`` (created on first use); see the module docstring.

    Args:
        path: the cache's DuckDB file (its own file, never the warehouse).
        lock_timeout_s: how long to wait for another process's hold on the file before
            ``duckdb.IOException`` is raised (by the call, or by :meth:`flush` for queued writes).
        commit_interval_s: a commit happens when the oldest queued row has waited
            ``commit_interval_s`` seconds or ``commit_rows`` rows are queued, whichever is first.
        commit_rows: see ``commit_interval_s``.
        hold_s: the connection is closed after ``hold_s`` seconds of use (or idleness) and
            not reopened for ``yield_s`` seconds, so other processes get the file.
        yield_s: see ``hold_s``.
        lease_s: how long a claim stays valid without renewal.
        read_only: open the file read-only (``metamorph plan``, which writes nothing): it must
            exist and hold the table ``generations``; nothing is created, so a read-only
            ``METAMORPH_HOME`` serves lookups. :meth:`put` and :meth:`claim` raise ``RuntimeError``.

    Raises:
        InputError: ``path`` is a directory, or a file that is not a DuckDB database, or one that
            is damaged (truncated or corrupt: when it is opened or when a read finds it), one line
            naming the file and what to do (:func:`damaged_cache`); read-only: a missing file or
            one without the table ``generations``. Named at once: only another process's lock on
            the file is waited for.

    Thread-safe within a process.
    """

    def __init__(
        self,
        path: str | Path,
        lock_timeout_s: float = 120.0,
        *,
        commit_interval_s: float = 0.5,
        commit_rows: int = 512,
        hold_s: float = 2.0,
        yield_s: float = 0.25,
        lease_s: float = 60.0,
        read_only: bool = False,
    ):
        self.path = str(path)
        self.read_only = read_only
        self.lock_timeout_s = lock_timeout_s
        self.commit_interval_s = commit_interval_s
        self.commit_rows = commit_rows
        self.hold_s = hold_s
        self.yield_s = yield_s
        self.lease_s = lease_s
        self.owner = f"{_HOST}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self._con: duckdb.DuckDBPyConnection | None = None
        self._opened_at = self._used_at = self._reopen_at = 0.0
        self._cond = threading.Condition()
        self._pending: list[tuple] = []
        self._oldest = 0.0  # monotonic time the oldest queued row arrived
        self._queued = self._committed = 0  # rows ever queued / committed (flush waits for the count)
        self._flush_now = False
        self._error: BaseException | None = None
        self._writer: threading.Thread | None = None
        self._claimed: set[str] = set()
        self._renewed_at = 0.0
        self._result_select = _RESULT_SELECT
        self._init_storage()

    def _init_storage(self) -> None:
        """Backend hook: the lock serialising this process's work on the store, and the tables."""
        if Path(self.path).is_dir():
            raise InputError(self.path, "is a directory, expected the generation cache's DuckDB file")
        self._db_lock = _file_lock(self.path)
        if self.read_only:
            if not Path(self.path).is_file():
                raise InputError(self.path, "the generation cache does not exist")
            with self._use() as con:
                _check_whole(self.path, con)
                tables = con.execute(
                    "SELECT count(*) FROM information_schema.tables WHERE table_name = 'generations'"
                ).fetchall()
            if not tables[0][0]:
                raise InputError(
                    self.path, "is a DuckDB file without the table 'generations'; it is not a generation cache"
                )
            with self._use() as con:
                have = {r[0] for r in con.execute("SELECT name FROM pragma_table_info('generations')").fetchall()}
            if "extracted_text" not in have:  # a file written before the column: read it as null
                self._result_select = _RESULT_SELECT.replace("g.extracted_text", "NULL")
            return
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        with self._use() as con:
            _check_whole(self.path, con)
            con.execute(_DDL)

    # ------------------------------------------------------------------ connection

    def _connect(self) -> duckdb.DuckDBPyConnection:
        deadline = time.monotonic() + self.lock_timeout_s
        while True:
            try:
                return duckdb.connect(self.path, read_only=self.read_only)
            except duckdb.ConnectionException as exc:
                # this process already holds the file read-write (a run's cache not yet released): DuckDB
                # shares one configuration per file and process, so share it; writes stay refused (_writable)
                if not self.read_only or "different configuration" not in str(exc):
                    raise
                return duckdb.connect(self.path)
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower():  # not another process's hold: waiting cannot help
                    raise damaged_cache(self.path, exc) or InputError(
                        self.path, f"cannot open the generation cache: {str(exc).splitlines()[0]}"
                    ) from None
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.03 + random.random() * 0.05)  # short polls: holders yield for `yield_s`

    @contextmanager
    def _use(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """The held connection (opened if needed), under the file's in-process lock."""
        with self._db_lock:
            if self._con is None:
                pause = self._reopen_at - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                self._con = self._connect()
                self._opened_at = time.monotonic()
                self._start_writer()
            try:
                yield self._con
            except duckdb.Error as exc:  # a read that finds the file truncated or corrupt: one line, what to do
                damaged = damaged_cache(self.path, exc)
                if damaged is None:
                    raise
                self._close_connection(pause=False)
                raise damaged from None
            finally:
                self._used_at = time.monotonic()

    def _close_connection(self, pause: bool) -> None:
        with self._db_lock:
            if self._con is not None:
                self._con.close()
                self._con = None
                self._reopen_at = time.monotonic() + (self.yield_s if pause else 0.0)

    def release(self) -> None:
        """Commit what is queued, end this cache's claims and close the connection (the file is free
        for other processes). The cache stays usable: the next call reopens it."""
        self.flush()
        with self._db_lock:
            if self._claimed:
                with self._use() as con:
                    con.execute(self._sql("DELETE FROM claims WHERE owner = ?"), [self.owner])
                self._claimed.clear()
            self._close_connection(pause=False)

    close = release

    def __enter__(self) -> "GenerationCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    # ------------------------------------------------------------------ writes

    def _writable(self) -> None:
        if self.read_only:
            raise RuntimeError(f"the generation cache {self.path} was opened read-only")

    def put(self, request: GenerationRequest, result: GenerationResult) -> None:
        """Queue ``result`` for ``request`` (upsert by key); committed within one commit window.

        A successful row is never overwritten by a later error for the same key. The claim on the
        key (if any) ends in the transaction that commits the row.
        """
        self.put_row(request.cache_key(), request.provider, request.model, request.to_json(), result)

    def put_row(self, key: str, provider: str, model: str, request_json: str, result: GenerationResult) -> None:
        """:meth:`put` for a request known by its key and canonical JSON (e.g. a batch result whose
        request was persisted with the batch, :meth:`record_batch`)."""
        self._writable()
        now = datetime.now(timezone.utc).replace(tzinfo=None)  # naive UTC: no ICU extension offline
        row = (
            key,
            provider,
            model,
            request_json,
            result.text,
            result.finish_reason,
            result.prompt_tokens,
            result.completion_tokens,
            result.latency_s,
            result.model_id,
            result.model_version,
            result.system_fingerprint,
            now,
            result.error,
            result.attempts,
            result.extracted_text,
        )
        with self._cond:
            if not self._pending:
                self._oldest = time.monotonic()
            self._pending.append(row)
            self._queued += 1
            if len(self._pending) >= self.commit_rows:
                self._cond.notify_all()
            self._start_writer()

    def flush(self) -> None:
        """Commit every queued row now and wait for it.

        Raises:
            duckdb.Error: the commit failed (e.g. another process held the file longer than
                ``lock_timeout_s``); the rows stay queued and the next flush tries again.
        """
        with self._cond:
            target = self._queued
            if self._committed >= target:
                return
            self._error = None
            self._flush_now = True
            self._start_writer()
            self._cond.notify_all()
            while self._committed < target:
                if self._error is not None:
                    raise self._error
                self._cond.wait(0.05)

    def _start_writer(self) -> None:
        with self._cond:
            if self._writer is None or not self._writer.is_alive():
                self._writer = threading.Thread(target=self._write_loop, name=f"cache-writer {self.path}")
                self._writer.start()

    def _write_loop(self) -> None:
        """Commits queued rows by window, renews claims, gives the connection up; exits when idle.

        Never holds ``_cond`` while it takes the file lock (``_use`` takes them the other way round).
        """
        main = threading.main_thread()
        while True:
            batch = None
            with self._cond:
                now = time.monotonic()
                exiting = not main.is_alive()  # the interpreter is shutting down: commit now, then stop
                if self._pending and (
                    self._flush_now
                    or exiting
                    or len(self._pending) >= self.commit_rows
                    or now - self._oldest >= self.commit_interval_s
                ):
                    batch, self._pending, self._flush_now = self._pending, [], False
                elif exiting or (self._con is None and not self._pending and not self._claimed):
                    self._writer = None
                    break
                else:  # wake at least every 0.1 s: to see the interpreter exit, and for the slice and leases
                    left = self.commit_interval_s - (now - self._oldest) if self._pending else self.commit_interval_s
                    self._cond.wait(min(max(0.005, left), 0.1))
            if batch is not None:
                try:
                    self._commit(batch)
                except BaseException as exc:  # keep the rows; flush() reports the error
                    with self._cond:
                        self._pending[:0] = batch
                        self._error = exc
                        self._writer = None
                        self._cond.notify_all()
                    self._close_connection(pause=False)
                    return
                with self._cond:
                    self._committed += len(batch)
                    self._cond.notify_all()
            try:
                self._housekeep()
            except BaseException as exc:  # a flush waiting on this thread must not wait for ever: it reports it
                with self._cond:
                    self._error = exc
                    self._writer = None
                    self._cond.notify_all()
                self._close_connection(pause=False)
                return
        if exiting:
            self._close_connection(pause=False)

    def _housekeep(self) -> None:
        """Renew this cache's claims every ``lease_s / 3``; close the connection after its slice."""
        now = time.monotonic()
        if self._claimed and now - self._renewed_at >= self.lease_s / 3:
            with self._use() as con:
                con.execute(
                    self._sql("UPDATE claims SET expires_at = ? WHERE owner = ?"),
                    [time.time() + self.lease_s, self.owner],
                )
            self._renewed_at = now
        with self._db_lock:
            if self._con is not None and self._slice_over(now):
                self._close_connection(pause=now - self._used_at < self.hold_s)

    def _slice_over(self, now: float) -> bool:
        """Whether the held connection is given up now: after ``hold_s`` of use or of idleness (DuckDB
        lets one process at a time hold the file)."""
        return now - self._opened_at >= self.hold_s or now - self._used_at >= self.hold_s

    @staticmethod
    def _sql(query: str) -> str:
        """A query with ``?`` placeholders in this backend's parameter style (DuckDB: unchanged)."""
        return query

    def _row_errors(self) -> tuple[type[BaseException], ...]:
        """Errors that lie in a row's values, not in the store (the file, the lock, the server):
        Python's conversion of a value (an unencodable str, an int out of range) and DuckDB's."""
        return (ValueError, OverflowError, duckdb.DataError, duckdb.InvalidInputException)

    def _commit(self, batch: list[tuple]) -> None:
        """Commit the queued rows ``batch`` (one per key: the last success, else the last error) in
        one transaction. When the store refuses a value of the group (:meth:`_row_errors`), each row
        is committed on its own, and a row refused alone is stored as an error in its place (its key
        is called again by the next run), so one bad row never costs its neighbours."""
        best: dict[str, tuple] = {}
        for row in batch:  # one row per key: the last success, else the last error
            if row[0] not in best or row[13] is None or best[row[0]][13] is not None:
                best[row[0]] = row
        rows = list(best.values())
        try:
            self._commit_rows(rows)
            return
        except self._row_errors() as exc:
            if len(rows) == 1:
                self._commit_rows([_unstorable(rows[0], exc)])
                return
        for row in rows:
            try:
                self._commit_rows([row])
            except self._row_errors() as exc:
                self._commit_rows([_unstorable(row, exc)])

    def _commit_rows(self, rows: list[tuple]) -> None:
        """Upsert ``rows`` (one per key) and end their claims, in one transaction."""
        columns = [list(col) for col in zip(*rows)]
        with self._use() as con:
            con.execute("BEGIN TRANSACTION")
            try:
                con.execute(_UPSERT, columns)
                con.execute(f"DELETE FROM claims WHERE owner = $2 AND key IN {_WANTED}", [columns[0], self.owner])
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        self._claimed.difference_update(columns[0])

    # ------------------------------------------------------------------ provider batches

    def record_batch(self, batch: "BatchRecord") -> None:
        """Persist a submitted provider batch (committed at once, before any result is awaited), so a
        restarted run resumes polling it instead of submitting its keys again."""
        with self._use() as con:
            con.execute(
                self._sql("INSERT INTO batches VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                [
                    batch.batch_id,
                    batch.provider,
                    batch.base_url,
                    batch.model,
                    list(batch.keys),
                    list(batch.requests),
                    batch.status,
                    batch.collected,
                    batch.input_file_id,
                    batch.submitted_at,
                    batch.submitted_at,
                ],
            )

    def update_batch(self, batch_id: str, status: str, collected: bool = False) -> None:
        """Store a batch's last seen ``status``; ``collected=True`` once its results are committed
        (call :meth:`flush` first: a batch is never marked collected before its rows are stored)."""
        now = datetime.now(timezone.utc).replace(tzinfo=None)
        with self._use() as con:
            con.execute(
                self._sql("UPDATE batches SET status = ?, collected = ?, updated_at = ? WHERE batch_id = ?"),
                [status, collected, now, batch_id],
            )

    def open_batches(self, provider: str, base_url: str | None, model: str) -> list["BatchRecord"]:
        """Batches of (provider, base_url, model) whose results are not collected yet, oldest first."""
        with self._use() as con:
            rows = con.execute(
                self._sql(
                    "SELECT batch_id, provider, base_url, model, keys, requests, status, collected, input_file_id, "
                    "submitted_at FROM batches WHERE provider = ? AND model = ? AND base_url IS NOT DISTINCT FROM ? "
                    "AND NOT collected ORDER BY submitted_at"
                ),
                [provider, model, base_url],
            ).fetchall()
        return [BatchRecord(r[0], r[1], r[2], r[3], tuple(r[4]), tuple(r[5]), r[6], r[7], r[8], r[9]) for r in rows]

    def batches(self) -> list["BatchRecord"]:
        """Every persisted batch, oldest first."""
        with self._use() as con:
            rows = con.execute(
                "SELECT batch_id, provider, base_url, model, keys, requests, status, collected, "
                "input_file_id, submitted_at FROM batches ORDER BY submitted_at, batch_id"
            ).fetchall()
        return [BatchRecord(r[0], r[1], r[2], r[3], tuple(r[4]), tuple(r[5]), r[6], r[7], r[8], r[9]) for r in rows]

    # ------------------------------------------------------------------ reads

    def get(self, key: str) -> GenerationResult | None:
        """The stored successful result for ``key``, or ``None`` (miss, or only an error stored)."""
        return self.get_many([key]).get(key)

    def get_many(self, keys: Iterable[str], stale_before: datetime | None = None) -> dict[str, GenerationResult]:
        """Successful results for the given keys (errors are not hits), in one query.

        ``stale_before`` (naive UTC): a success stored before that instant is not a hit either — a
        re-evaluation after the provider changed the model behind a name (``metamorph.runner``)."""
        keys = list(dict.fromkeys(keys))
        if not keys:
            return {}
        self.flush()
        with self._use() as con:
            return self._stored(con, keys, stale_before)

    # The SQL of a claim, one method per statement (PostgresGenerationCache writes them in its dialect).

    def _stored(self, con, keys: list[str], stale_before: datetime | None) -> dict[str, GenerationResult]:
        """Stored successes of ``keys`` (at or after ``stale_before``) through ``con``."""
        return results_from_rows(
            con.execute(
                f"SELECT {self._result_select} FROM generations g JOIN {_WANTED} w USING (key) WHERE {_FRESH}",
                [keys, stale_before],
            ).fetchall()
        )

    def _begin_claim(self, con) -> None:
        """Start the transaction of a claim."""
        con.execute("BEGIN TRANSACTION")

    def _lock_claims(self, con) -> None:
        """First statement in a claim's transaction: nothing for the DuckDB file (one writer at a
        time); PostgreSQL takes the advisory lock that serialises claims and commits."""

    def _held(self, con, keys: list[str]) -> list[tuple]:
        """(key, owner, expires_at) of the claims on ``keys`` by other owners."""
        return con.execute(
            f"SELECT c.key, c.owner, c.expires_at FROM claims c JOIN {_WANTED} w USING (key) WHERE c.owner <> $2",
            [keys, self.owner],
        ).fetchall()

    def _insert_claims(self, con, keys: list[str], expires_at: float) -> None:
        con.execute(
            f"INSERT INTO claims SELECT key, $2, $3 FROM {_WANTED} ON CONFLICT (key) DO UPDATE "
            "SET owner = excluded.owner, expires_at = excluded.expires_at",
            [keys, self.owner, expires_at],
        )

    def claim(self, keys: Iterable[str], stale_before: datetime | None = None) -> Claim:
        """Claim ``keys`` for this cache's owner, in one committed transaction (see :class:`Claim`).

        A key with a stored success (stored at or after ``stale_before``, when given) is ``done``;
        a key claimed by another owner that is alive and whose lease has not expired is ``busy``;
        every other key (unclaimed, claimed by this owner, by a process that is gone, or expired)
        is claimed with a lease of ``lease_s`` seconds. Rows this cache has queued but not committed
        yet are not looked at (a runner claims a key before it calls it, never after).
        """
        self._writable()
        keys = list(dict.fromkeys(keys))
        if not keys:
            return Claim()
        out = Claim()
        now = time.time()
        with self._use() as con:
            self._begin_claim(con)
            try:
                self._lock_claims(con)
                out.done = self._stored(con, keys, stale_before)
                held = self._held(con, keys)
                busy = {k for k, owner, expires in held if expires > now and owner_alive(owner)}
                out.busy = [k for k in keys if k in busy and k not in out.done]
                out.claimed = [k for k in keys if k not in busy and k not in out.done]
                if out.claimed:
                    self._insert_claims(con, out.claimed, now + self.lease_s)
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        if out.claimed:
            self._claimed.update(out.claimed)
            self._renewed_at = time.monotonic()
            self._start_writer()
        return out

    def known_versions(self, provider: str, model: str) -> set[str]:
        """Distinct provider-reported model versions stored for (provider, model)."""
        self.flush()
        with self._use() as con:
            rows = con.execute(
                self._sql(
                    "SELECT DISTINCT model_version FROM generations WHERE provider = ? AND model = ? "
                    "AND error IS NULL AND model_version IS NOT NULL"
                ),
                [provider, model],
            ).fetchall()
        return {r[0] for r in rows}

    def count(self, errors: bool | None = None) -> int:
        """Number of rows (``errors=True``: error rows only; ``False``: successful rows only)."""
        where = "" if errors is None else ("WHERE error IS NOT NULL" if errors else "WHERE error IS NULL")
        self.flush()
        with self._use() as con:
            return int(con.execute(f"SELECT count(*) FROM generations {where}").fetchall()[0][0])


def check_cache_file(location: str | Path) -> None:
    """Refuse a generation cache file that is damaged before a run writes anything: opened
    read-only, briefly (:class:`GenerationCache` with ``read_only=True``). Nothing is checked for a
    PostgreSQL URL, a file that does not exist yet (the run creates it), or a file another process
    holds for longer than 5 s (the run waits for it as usual).

    Raises:
        InputError: the file is a directory, not DuckDB, truncated or corrupt (one line naming it
            and what to do), or has no table ``generations``.
    """
    from metamorph.cache_pg import is_postgres_url

    if is_postgres_url(str(location)) or not Path(location).exists():
        return
    try:
        GenerationCache(location, lock_timeout_s=5.0, read_only=True).release()
    except (duckdb.IOException, duckdb.ConnectionException):  # held by another process, or open here: not damage
        return


def open_cache(location: str | Path, **kw) -> GenerationCache:
    """The generation cache at ``location``: a PostgreSQL URL (``postgresql://…`` or
    ``postgres://…``) opens :class:`metamorph.cache_pg.PostgresGenerationCache`, anything else is the
    path of a DuckDB file (:class:`GenerationCache`). Keyword arguments go to the class."""
    from metamorph.cache_pg import PostgresGenerationCache, is_postgres_url

    if is_postgres_url(str(location)):
        return PostgresGenerationCache(str(location), **kw)
    return GenerationCache(location, **kw)
