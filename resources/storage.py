"""DuckDB storage: dagster-duckdb's pandas IO manager with safe writes.

The stock ``DuckDBPandasIOManager`` (dagster-duckdb 0.29.27) deletes the old slice in autocommit
mode and then inserts *by position* (``shared/notes/dagster.md`` §4.2): a reordered column is
silently swapped, an added column fails after the old rows were deleted, an empty first output
never creates the table, categoricals freeze into ENUMs. :class:`SafeDuckDBPandasIOManager`
keeps the stock IO manager (table = asset name, schema = key prefix, partition filtering on
load) and replaces the two pieces that write:

* :class:`TransactionalDuckDbClient` — one ``BEGIN … COMMIT`` around the delete and the write,
  ``ROLLBACK`` on any error, the connection closed in ``finally``; the delete checks that the
  table exists instead of catching ``CatalogException`` (a caught error would abort the
  transaction);
* :class:`ByNamePandasTypeHandler` — unpartitioned tables are ``CREATE OR REPLACE``d (a new,
  dropped or reordered column just works); partitioned tables get ``ALTER TABLE … ADD COLUMN``
  for new columns and ``INSERT … BY NAME``; an empty frame still creates the table with its
  columns; categoricals are written as strings.

Every write also records, in the same transaction, which run wrote which table (partition) in
the ledger :data:`LEDGER` (``metamorph_meta.table_writes``: table_name ``schema.table``,
partition (``''`` when unpartitioned), run_id, written_at (naive UTC), partial (NULL; set to a
note by :func:`pipelines.partial.mark_partial_run` when that run fails later)), so SQL readers
of the warehouse see the same partial marks as the UI.

It also runs handle_output / load_input inside ``partition_loading_context`` so dynamic
partitions resolve (the multi-partition crash of §4.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager

import dagster as dg
import duckdb
import pandas as pd
from dagster._core.definitions.metadata import TableMetadataSet
from dagster._core.storage.db_io_manager import DbIOManager, DbTypeHandler, TableSlice
from dagster._utils.backoff import backoff
from dagster_duckdb.io_manager import DuckDbClient
from dagster_duckdb_pandas import DuckDBPandasIOManager, DuckDBPandasTypeHandler

from resources.paths import home_relative


#: The write ledger (module docstring): one row per (table, partition), the run that last wrote it.
LEDGER = "metamorph_meta.table_writes"
_LEDGER_DDL = f"""
CREATE SCHEMA IF NOT EXISTS metamorph_meta;
CREATE TABLE IF NOT EXISTS {LEDGER} (
    table_name VARCHAR NOT NULL,
    partition VARCHAR NOT NULL,
    run_id VARCHAR NOT NULL,
    written_at TIMESTAMP NOT NULL,
    partial VARCHAR,
    PRIMARY KEY (table_name, partition)
);
"""


def record_write(conn: duckdb.DuckDBPyConnection, table_name: str, partitions: Sequence[str], run_id: str) -> None:
    """Upsert the ledger rows of ``table_name`` (``schema.table``) for ``partitions`` (``['']`` when
    unpartitioned): written by ``run_id`` now, not partial. Runs in the caller's transaction."""
    from datetime import datetime, timezone

    now = datetime.now(timezone.utc).replace(tzinfo=None)
    conn.execute(_LEDGER_DDL)
    conn.executemany(
        f"INSERT INTO {LEDGER} VALUES (?, ?, ?, ?, NULL) ON CONFLICT (table_name, partition) DO UPDATE "
        "SET run_id = excluded.run_id, written_at = excluded.written_at, partial = NULL",
        [[table_name, p, run_id, now] for p in partitions],
    )


def _table_exists(conn: duckdb.DuckDBPyConnection, schema: str, table: str) -> bool:
    return bool(
        conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ?", [schema, table]
        ).fetchall()[0][0]
    )


class TransactionalDuckDbClient(DuckDbClient):
    """``DuckDbClient`` whose connection is one transaction (commit on success, rollback on error)."""

    @staticmethod
    def delete_table_slice(context, table_slice: TableSlice, connection) -> None:
        # Unpartitioned tables are replaced by the type handler; partitioned slices are deleted here.
        if table_slice.partition_dimensions and _table_exists(connection, table_slice.schema, table_slice.table):
            DuckDbClient.delete_table_slice(context, table_slice, connection)

    @staticmethod
    @contextmanager
    def connect(context, _):
        config = {"custom_user_agent": "dagster", **context.resource_config["connection_config"]}
        conn = backoff(
            fn=duckdb.connect,
            retry_on=(RuntimeError, duckdb.IOException),
            kwargs={"database": context.resource_config["database"], "read_only": False, "config": config},
            max_retries=10,
        )
        try:
            conn.execute("BEGIN TRANSACTION")
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            try:
                conn.execute("ROLLBACK")
            except duckdb.Error:
                pass
            raise
        finally:
            conn.close()


def _duckdb_types(conn: duckdb.DuckDBPyConnection, frame: pd.DataFrame) -> dict[str, str]:
    conn.register("__metamorph_probe", frame.head(0) if len(frame) == 0 else frame)
    try:
        rows = conn.execute("DESCRIBE SELECT * FROM __metamorph_probe").fetchall()
    finally:
        conn.unregister("__metamorph_probe")
    return {r[0]: r[1] for r in rows}


class ByNamePandasTypeHandler(DuckDBPandasTypeHandler):
    """Writes by column name; see the module docstring."""

    def handle_output(self, context: dg.OutputContext, table_slice: TableSlice, obj: pd.DataFrame, connection):
        frame = obj.copy()
        for col in frame.columns:
            if isinstance(frame[col].dtype, pd.CategoricalDtype):
                frame[col] = frame[col].astype("string")
        full = f'"{table_slice.schema}"."{table_slice.table}"'
        connection.register("__metamorph_out", frame)
        try:
            exists = _table_exists(connection, table_slice.schema, table_slice.table)
            if not exists or not table_slice.partition_dimensions:
                connection.execute(f"CREATE OR REPLACE TABLE {full} AS SELECT * FROM __metamorph_out")
            else:
                have = {r[0] for r in connection.execute(f"DESCRIBE {full}").fetchall()}
                for col, typ in _duckdb_types(connection, frame).items():
                    if col not in have:
                        connection.execute(f'ALTER TABLE {full} ADD COLUMN "{col}" {typ}')
                if len(frame):
                    connection.execute(f"INSERT INTO {full} BY NAME SELECT * FROM __metamorph_out")
        finally:
            connection.unregister("__metamorph_out")
        # the table by its SQL name; the warehouse file as its own entry (not glued to the table name)
        name = f"{table_slice.schema}.{table_slice.table}"
        try:
            run_id = context.run_id
        except Exception:  # a context built outside a run (direct IO manager tests)
            run_id = None
        if run_id:
            partitions = sorted(context.asset_partition_keys) if context.has_asset_partitions else [""]
            record_write(connection, name, partitions, run_id)
        context.add_output_metadata(
            {
                **(
                    TableMetadataSet(partition_row_count=len(frame), storage_kind="duckdb", table_name=name)
                    if context.has_partition_key
                    else TableMetadataSet(row_count=len(frame), storage_kind="duckdb", table_name=name)
                ),
                # relative to METAMORPH_HOME: still right after the data directory moves
                "warehouse": dg.MetadataValue.path(home_relative(context.resource_config["database"])),
            }
        )

    def load_input(self, context: dg.InputContext, table_slice: TableSlice, connection) -> pd.DataFrame:
        if not _table_exists(connection, table_slice.schema, table_slice.table):
            raise dg.Failure(
                f"table {table_slice.schema}.{table_slice.table} does not exist yet: materialize "
                f"{context.asset_key.to_user_string()} first"
            )
        return super().load_input(context, table_slice, connection)


class _PartitionLoadingIOManager(dg.IOManager):
    """Runs the inner IO manager inside ``partition_loading_context`` (dynamic partitions)."""

    def __init__(self, inner: DbIOManager):
        self._inner = inner

    def handle_output(self, context: dg.OutputContext, obj) -> None:
        try:
            instance = context.step_context.instance
        except Exception:  # a context built outside a run (direct IO manager tests)
            instance = None
        with dg.partition_loading_context(dynamic_partitions_store=instance):
            self._inner.handle_output(context, obj)

    def load_input(self, context: dg.InputContext):
        try:
            instance = context.instance
        except Exception:
            instance = None
        with dg.partition_loading_context(dynamic_partitions_store=instance):
            return self._inner.load_input(context)


class SafeDuckDBPandasIOManager(DuckDBPandasIOManager):
    """dagster-duckdb's pandas IO manager with transactional, by-name writes (module docstring).

    Config as the stock one: ``database`` (path), ``schema`` (default schema), ``connection_config``.
    """

    @staticmethod
    def type_handlers() -> Sequence[DbTypeHandler]:
        return [ByNamePandasTypeHandler()]

    def create_io_manager(self, context) -> dg.IOManager:
        inner = DbIOManager(
            db_client=TransactionalDuckDbClient(),
            database=self.database,
            schema=self.schema_,
            type_handlers=self.type_handlers(),
            default_load_type=pd.DataFrame,
            io_manager_name="SafeDuckDBPandasIOManager",
        )
        return _PartitionLoadingIOManager(inner)
