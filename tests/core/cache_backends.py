"""The two generation-cache backends as test parameters: a DuckDB file, or a fresh schema of the
PostgreSQL test server (scripts/services.sh). Each gives the cache's location, opens caches on it
and reads its tables directly (the test's own view of what was committed)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from contextlib import contextmanager
from pathlib import Path

import duckdb

from metamorph.cache import open_cache


class DuckDBStore:
    name = "duckdb"

    def __init__(self, path: Path):
        self.location = str(path)

    def open(self, **kw):
        return open_cache(self.location, **kw)

    def rows(self, sql: str, params=None, read_only: bool = False) -> list[tuple]:
        con = duckdb.connect(self.location, read_only=read_only)
        try:
            return con.execute(sql, params or []).fetchall()
        finally:
            con.close()

    def try_rows(self, sql: str, params=None) -> list[tuple] | None:
        """Rows, or ``None`` while another process holds the file or before the table exists."""
        try:
            return self.rows(sql, params, read_only=True)
        except (duckdb.IOException, duckdb.CatalogException):
            return None

    def executemany(self, sql: str, rows: list[tuple]) -> None:
        con = duckdb.connect(self.location)
        con.executemany(sql, rows)
        con.close()

    #: what a commit blocked by another process's hold on the store raises, and its message
    lock_error = (duckdb.IOException, "lock")
    #: a process that holds the store so that no other process can write; prints "holding"
    HOLDER = textwrap.dedent("""
        import sys, duckdb
        con = duckdb.connect(sys.argv[1])
        print("holding", flush=True)
        sys.stdin.read()
    """)

    @contextmanager
    def held_by_another_process(self):
        holder = subprocess.Popen(
            [sys.executable, "-c", self.HOLDER, self.location], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            assert holder.stdout.readline() == "holding\n"
            yield
        finally:
            holder.communicate("")


class PostgresStore(DuckDBStore):
    name = "postgres"

    def __init__(self, url: str):
        self.location = url

    def rows(self, sql: str, params=None, read_only: bool = False) -> list[tuple]:
        import psycopg2

        con = psycopg2.connect(self.location)
        try:
            with con, con.cursor() as cur:
                cur.execute(sql.replace("?", "%s"), params or None)
                return cur.fetchall() if cur.description else []
        finally:
            con.close()

    def try_rows(self, sql: str, params=None) -> list[tuple] | None:
        import psycopg2

        try:
            return self.rows(sql, params)
        except psycopg2.errors.UndefinedTable:
            return None

    def executemany(self, sql: str, rows: list[tuple]) -> None:
        import psycopg2

        con = psycopg2.connect(self.location)
        try:
            with con, con.cursor() as cur:
                cur.executemany(sql.replace("?", "%s"), rows)
        finally:
            con.close()

    @property
    def lock_error(self):
        import psycopg2

        return (psycopg2.errors.LockNotAvailable, "lock timeout")

    HOLDER = textwrap.dedent("""
        import sys, psycopg2
        con = psycopg2.connect(sys.argv[1])
        cur = con.cursor()  # a transaction that holds the table until stdin closes
        cur.execute("LOCK TABLE generations IN ACCESS EXCLUSIVE MODE")
        print("holding", flush=True)
        sys.stdin.read()
        con.rollback()
    """)
