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

Column types come from the table's declared schema, never from the values of the first write:
:func:`assets._common.validated_output` attaches every output's pandera schema as
``dagster/column_schema`` (pandera dtype names, or a field's ``column_type`` such as ``bytes``), and :data:`DECLARED_TYPES` maps each to its
DuckDB type. A table is created with those types (a column that is all null in the first write —
a model with no failed call, an all-unparseable first run, a provider that reports no
``system_fingerprint`` — is still ``VARCHAR``, not DuckDB's ``"NULL"``, which no later value fits);
a column an older write left typed ``"NULL"`` is altered to its declared type before the insert.
An output without a declared schema takes DuckDB's types of its values, except that a column
with only nulls is refused (:class:`WarehouseWriteError`). A write that fails raises
:class:`WarehouseWriteError`, one line naming the table, the partition, the column and DuckDB's
first error (not the error of a statement run after it in the aborted transaction).

Every write also records, in the same transaction, which run wrote which table (partition) in
the ledger :data:`LEDGER` (``metamorph_meta.table_writes``: table_name ``schema.table``,
partition (``''`` when unpartitioned), run_id, written_at (naive UTC), partial (NULL; set to a
note by :func:`pipelines.partial.mark_partial_run` when that run fails later)), so SQL readers
of the warehouse see the same partial marks as the UI.

A table read whole across the model partitions (a cross-model table reading a per-model one)
holds the registry's models only: with ``registry`` set, the rows of a model partition that is not
a registry entry (a model removed from the registry; a stray partition) are left out when loaded,
and the output the step writes names them in its metadata — ``left_out_models`` (JSON: model →
why, last run id, when) and ``left_out`` (one line per model) — never silently
(:func:`left_out_metadata`). A partition deleted from the instance (``metamorph partitions
--remove``) is one such model too: the stock IO manager already loads only the instance's
partitions, and the ledger names the partitions the table still holds rows of
(:func:`removed_partitions`), so it is named with why ``partition removed``.

It also runs handle_output / load_input inside ``partition_loading_context`` so dynamic
partitions resolve (the multi-partition crash of §4.1).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from contextlib import contextmanager, suppress
from types import SimpleNamespace

import dagster as dg
import duckdb
import pandas as pd
from dagster_duckdb import DuckDBResource

# dagster-duckdb's IO manager is built from a database client and type handlers; Dagster exports
# no public name for the IO manager that joins them (``DbIOManager``), so it is taken from the
# module of dagster-duckdb that builds the stock one, with that module's client.
from dagster_duckdb.io_manager import DbIOManager, DuckDbClient
from dagster_duckdb_pandas import DuckDBPandasIOManager, DuckDBPandasTypeHandler

from resources.paths import home_path, home_relative


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


def table_exists(conn: duckdb.DuckDBPyConnection, schema: str, table: str) -> bool:
    """Whether ``schema.table`` exists (a table or a view) on ``conn``, without raising in a transaction."""
    return bool(
        conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ?", [schema, table]
        ).fetchall()[0][0]
    )


def _database(context) -> str:
    """The warehouse file an IO manager context's config names (``database``, relative to
    ``METAMORPH_HOME`` unless absolute), resolved now (:func:`resources.paths.home_path`)."""
    return home_path(context.resource_config["database"])


class TransactionalDuckDbClient(DuckDbClient):
    """``DuckDbClient`` whose connection is one transaction (commit on success, rollback on error)."""

    @staticmethod
    def delete_table_slice(context, table_slice, connection) -> None:
        # Unpartitioned tables are replaced by the type handler; partitioned slices are deleted here.
        if table_slice.partition_dimensions and table_exists(connection, table_slice.schema, table_slice.table):
            DuckDbClient.delete_table_slice(context, table_slice, connection)

    @staticmethod
    @contextmanager
    def connect(context, table_slice):
        # the stock client opens the file (retrying while another process holds its lock) and closes
        # it after a clean exit; this one closes it also after an error. The stock client reads only
        # the resource config's ``database`` and ``connection_config``: it is given the config with
        # ``database`` resolved against METAMORPH_HOME now (resources.paths.home_path)
        opened = SimpleNamespace(resource_config={**context.resource_config, "database": _database(context)})
        with DuckDbClient.connect(opened, table_slice) as conn:
            try:
                conn.execute("BEGIN TRANSACTION")
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                try:
                    conn.execute("ROLLBACK")
                except duckdb.Error:
                    pass
                conn.close()
                raise


class WarehouseWriteError(Exception):
    """A frame could not be written to its warehouse table. The message is one line: the table
    (``schema.table``), the partition(s) when partitioned, the column and the first error."""


#: DuckDB type of each column type a declared table schema names (pandera's dtype names, as
#: ``dagster/column_schema`` carries them; see the module docstring).
DECLARED_TYPES = {
    "str": "VARCHAR",
    "int64": "BIGINT",
    "Int64": "BIGINT",
    "float64": "DOUBLE",
    "bool": "BOOLEAN",
    "boolean": "BOOLEAN",
    "datetime64[ns]": "TIMESTAMP_NS",
    "bytes": "BLOB",
}

#: The type DuckDB gives a column whose values are all null (no later value can be inserted).
_NULL_TYPE = '"NULL"'


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _duckdb_types(conn: duckdb.DuckDBPyConnection, frame: pd.DataFrame) -> dict[str, str]:
    conn.register("__metamorph_probe", frame.head(0) if len(frame) == 0 else frame)
    try:
        rows = conn.execute("DESCRIBE SELECT * FROM __metamorph_probe").fetchall()
    finally:
        conn.unregister("__metamorph_probe")
    return {r[0]: r[1] for r in rows}


def declared_types(context: dg.OutputContext) -> dict[str, str]:
    """Column -> declared type name of the output's ``dagster/column_schema`` ({} when it has none)."""
    try:
        value = (context.output_metadata or {}).get("dagster/column_schema")
    except Exception:  # a context built outside a run (direct IO manager tests)
        value = None
    schema = getattr(value, "schema", value)
    if not isinstance(schema, dg.TableSchema):
        return {}
    return {c.name: c.type for c in schema.columns}


def _column_types(name: str, conn: duckdb.DuckDBPyConnection, frame: pd.DataFrame, declared: dict[str, str]):
    """DuckDB type of each column of ``frame``: its declared type, else the type of its values.

    Raises:
        WarehouseWriteError: a declared type with no DuckDB type, or an undeclared column of nulls only.
    """
    inferred = _duckdb_types(conn, frame)
    out = {}
    for col in frame.columns:
        if col in declared:
            if declared[col] not in DECLARED_TYPES:
                raise WarehouseWriteError(
                    f"{name}: column {col!r} is declared {declared[col]!r}, which has no DuckDB type "
                    f"(known: {sorted(DECLARED_TYPES)})"
                )
            out[col] = DECLARED_TYPES[declared[col]]
        elif inferred[col] == _NULL_TYPE:
            raise WarehouseWriteError(
                f"{name}: column {col!r} holds only nulls and its type is not declared "
                "(write the frame with its table schema: validated_output)"
            )
        else:
            out[col] = inferred[col]
    return out


def _failing_column(frame: pd.DataFrame, types: dict[str, str]) -> str | None:
    """``column "c" (TYPE): <why>`` for the first column of ``frame`` whose values DuckDB cannot
    store as its type ``types[c]`` (checked on a connection of its own), else None."""
    con = duckdb.connect(":memory:")
    try:
        for col in frame.columns:
            typ = types.get(col)
            if typ is None or typ == _NULL_TYPE:
                continue
            con.register("__metamorph_col", frame[[col]])
            try:
                bad = con.execute(
                    f'SELECT "{col}" FROM __metamorph_col WHERE "{col}" IS NOT NULL AND TRY_CAST("{col}" AS {typ}) IS NULL '
                    "LIMIT 1"
                ).fetchall()
            except duckdb.Error as exc:
                return f'column "{col}" ({typ}): {_first_line(exc)}'
            finally:
                con.unregister("__metamorph_col")
            if bad:
                return f'column "{col}" ({typ}): value {str(bad[0][0])[:80]!r} is not a {typ}'
        return None
    finally:
        con.close()


class ByNamePandasTypeHandler(DuckDBPandasTypeHandler):
    """Writes by column name, with the declared column types; see the module docstring."""

    def handle_output(self, context: dg.OutputContext, table_slice, obj: pd.DataFrame, connection):
        frame = obj.copy()
        for col in frame.columns:
            if isinstance(frame[col].dtype, pd.CategoricalDtype):
                frame[col] = frame[col].astype("string")
        name = f"{table_slice.schema}.{table_slice.table}"
        where = name
        if context.has_asset_partitions:
            where += f" (partition {', '.join(sorted(context.asset_partition_keys))})"
        full = f'"{table_slice.schema}"."{table_slice.table}"'
        types: dict[str, str] = {}
        connection.register("__metamorph_out", frame)
        try:
            types = _column_types(where, connection, frame, declared_types(context))
            exists = table_exists(connection, table_slice.schema, table_slice.table)
            if not exists or not table_slice.partition_dimensions:
                columns = ", ".join(f'"{col}" {typ}' for col, typ in types.items())
                connection.execute(f"CREATE OR REPLACE TABLE {full} ({columns})")
            else:
                have = {r[0]: r[1] for r in connection.execute(f"DESCRIBE {full}").fetchall()}
                for col, typ in types.items():
                    if col not in have:
                        connection.execute(f'ALTER TABLE {full} ADD COLUMN "{col}" {typ}')
                    elif have[col] == _NULL_TYPE and typ != _NULL_TYPE:
                        connection.execute(f'ALTER TABLE {full} ALTER COLUMN "{col}" SET DATA TYPE {typ}')
                    else:
                        types[col] = have[col]
            if len(frame):
                connection.execute(f"INSERT INTO {full} BY NAME SELECT * FROM __metamorph_out")
        except duckdb.Error as exc:
            # the transaction is aborted now: any further statement would fail with "Current transaction
            # is aborted" and hide this error; the column is found on a connection of its own
            why = _failing_column(frame, types) or _first_line(exc)
            raise WarehouseWriteError(f"writing {where}: {why}") from exc
        finally:
            with suppress(duckdb.Error):  # fails in an aborted transaction; the connection is closed after
                connection.unregister("__metamorph_out")
        try:
            run_id = context.run_id
        except Exception:  # a context built outside a run (direct IO manager tests)
            run_id = None
        if run_id:
            partitions = sorted(context.asset_partition_keys) if context.has_asset_partitions else [""]
            record_write(connection, name, partitions, run_id)
        # the table by its SQL name; the warehouse file as its own entry (not glued to the table name)
        context.add_output_metadata(
            {
                **(
                    {"dagster/partition_row_count": len(frame)}
                    if context.has_partition_key
                    else {"dagster/row_count": len(frame)}
                ),
                "dagster/table_name": name,
                "dagster/storage_kind": "duckdb",
                # relative to METAMORPH_HOME: still right after the data directory moves
                "warehouse": dg.MetadataValue.path(home_relative(_database(context))),
            }
        )

    def load_input(self, context: dg.InputContext, table_slice, connection) -> pd.DataFrame:
        if not table_exists(connection, table_slice.schema, table_slice.table):
            raise dg.Failure(missing_table_line(f"{table_slice.schema}.{table_slice.table}", context.asset_key))
        return super().load_input(context, table_slice, connection)


def missing_table_line(table: str, key: dg.AssetKey) -> str:
    """The one line of a step whose input ``table`` (of the asset ``key``, ``<suite>/<asset>``) is
    not in the warehouse — a warehouse written before the asset existed, or a job that never ran:
    the table and the command that builds it, ``metamorph run <study>`` (``--suite <suite>`` for a
    suite other than the study's default; its model jobs build the per-model tables, the generation
    cache serving the replies already made), else the asset to materialize."""
    from metamorph.errors import MetamorphError
    from metamorph.suites import suite_studies

    suite = key.path[0]
    try:
        study = suite_studies().get(suite)
    except MetamorphError:  # the project's suites do not load: name the asset only
        study = None
    head = f"table {table} does not exist yet (the warehouse was written before this asset existed, or no run built it)"
    if study is None:
        return f"{head}: materialize {key.to_user_string()} first"
    command = f"metamorph run {study}" + ("" if suite == study else f" --suite {suite}")
    return (
        f"{head}: build it with `{command}` (its jobs rebuild {key.to_user_string()}; the replies already made "
        "come from the generation cache), or materialize it in the UI"
    )


#: The dynamic partitions of the per-model tables (:data:`assets.partitions.MODEL_PARTITIONS_NAME`).
_MODEL_PARTITIONS = "model"


def last_run(instance: dg.DagsterInstance, keys: Iterable[dg.AssetKey], model_id: str) -> dict:
    """The latest materialization of partition ``model_id`` among ``keys``: ``{"last_run": run id,
    "last_materialized": "YYYY-MM-DD HH:MM UTC"}`` (both None when there is none)."""
    best = None
    for key in keys:
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key, asset_partitions=[model_id]), limit=1
        ).records
        if records and (best is None or records[0].timestamp > best.timestamp):
            best = records[0]
    if best is None:
        return {"last_run": None, "last_materialized": None}
    when = pd.Timestamp(best.timestamp, unit="s", tz="UTC").strftime("%Y-%m-%d %H:%M UTC")
    return {"last_run": best.run_id, "last_materialized": when}


#: Why a model whose partition was deleted from the instance (``metamorph partitions --remove``) is
#: left out (:func:`left_out_metadata`).
PARTITION_REMOVED = "partition removed"


def removed_partitions(conn: duckdb.DuckDBPyConnection, table_name: str, instance: dg.DagsterInstance) -> set[str]:
    """The model partitions the per-model table ``table_name`` (``schema.table``) holds rows of by
    the ledger (:data:`LEDGER`) that are no longer partitions of ``instance`` (deleted with
    ``metamorph partitions --remove``, which deletes no rows). Empty without a ledger."""
    if not table_exists(conn, *LEDGER.split(".")):
        return set()
    written = {
        r[0]
        for r in conn.execute(
            f"SELECT partition FROM {LEDGER} WHERE table_name = ? AND partition <> ''", [table_name]
        ).fetchall()
    }
    return written - set(instance.get_dynamic_partitions(_MODEL_PARTITIONS))


def left_out_why(run: Mapping, registry: str, short: bool = False) -> str:
    """Why a model was left out: :data:`PARTITION_REMOVED` (naming the registry's file) when ``run``
    (a :func:`left_out_metadata` entry) says ``partition_removed``, else ``not in the registry
    <registry>`` (the path; its file name only when ``short``)."""
    if run.get("partition_removed"):
        return f"{PARTITION_REMOVED} (metamorph partitions --remove; not in the registry {Path(registry).name})"
    return f"not in the registry {Path(registry).name if short else registry}"


def left_out_line(run: Mapping, registry: str) -> str:
    """Why a model was left out and its last run, in one line (``run``: a :func:`left_out_metadata`
    entry): ``not in the registry models.yaml; last run 2026-12-06 00:20 UTC (1a2b3c4d)``."""
    when = run.get("last_run") and f"{run['last_materialized']} ({run['last_run'][:8]})"
    return f"{left_out_why(run, registry, short=True)}; last run {when or 'unknown'}"


def left_out_metadata(left_out: Mapping[str, Mapping], registry: str) -> dict:
    """The metadata naming the models a cross-model table left out (``left_out``: model id →
    :func:`last_run`, with ``partition_removed`` True for a partition deleted from the instance),
    none of which is in the registry file ``registry``: ``left_out_models`` (JSON: model → ``why``,
    ``last_run``, ``last_materialized``) and ``left_out`` (text, one line per model:
    ``m3: not in the registry models.yaml; last run 2026-12-06 00:20 UTC (1a2b3c4d)``;
    ``typo: partition removed (metamorph partitions --remove; not in the registry models.yaml); last
    run unknown``). Empty when nothing was left out."""
    if not left_out:
        return {}
    lines = [f"{m}: {left_out_line(run, registry)}" for m, run in sorted(left_out.items())]
    return {
        "left_out_models": dg.MetadataValue.json(
            {
                m: {
                    "why": left_out_why(run, registry),
                    "last_run": run.get("last_run"),
                    "last_materialized": run.get("last_materialized"),
                }
                for m, run in sorted(left_out.items())
            }
        ),
        "left_out": dg.MetadataValue.text("\n".join(lines)),
    }


class _PartitionLoadingIOManager(dg.IOManager):
    """Runs the inner IO manager inside ``partition_loading_context`` (dynamic partitions); with
    ``registry``, a per-model table read whole keeps the registry's models only and the step's
    output names the others (module docstring)."""

    def __init__(self, inner: DbIOManager, registry: str | None = None):
        self._inner = inner
        self._registry = registry
        #: (run id, step key) -> model id -> its last_run(): the models a step's inputs left out
        self._left_out: dict[tuple[str, str], dict[str, dict]] = {}

    @staticmethod
    def _step(context) -> tuple[str, str] | None:
        try:
            return context.step_context.run_id, context.step_context.step.key
        except Exception:  # a context built outside a run (direct IO manager tests)
            return None

    def handle_output(self, context: dg.OutputContext, obj) -> None:
        try:
            instance = context.step_context.instance
        except Exception:  # a context built outside a run (direct IO manager tests)
            instance = None
        with dg.partition_loading_context(dynamic_partitions_store=instance):
            self._inner.handle_output(context, obj)
        left_out = self._left_out.get(self._step(context)) if self._registry else None
        if left_out and not context.has_partition_key:
            context.add_output_metadata(left_out_metadata(left_out, self._registry))

    def load_input(self, context: dg.InputContext):
        try:
            instance = context.instance
        except Exception:
            instance = None
        with dg.partition_loading_context(dynamic_partitions_store=instance):
            frame = self._inner.load_input(context)
        return self._registry_rows(context, instance, frame)

    def _registry_rows(self, context: dg.InputContext, instance, frame):
        """``frame`` less the rows of models not in the registry, when it is a per-model table read
        whole (the step is not a model partition's); the models left out are kept for the output."""
        try:
            partitions = context.asset_partitions_def
        except Exception:  # an input that is no asset
            partitions = None
        if (
            self._registry is None
            or instance is None
            or not isinstance(frame, pd.DataFrame)
            or "model_id" not in frame.columns
            or not isinstance(partitions, dg.DynamicPartitionsDefinition)
            or partitions.name != _MODEL_PARTITIONS
            or context.has_partition_key
        ):
            return frame
        from metamorph.models import load_registry

        ids = {m.id for m in load_registry(self._registry)}
        gone = {m: False for m in set(frame["model_id"].dropna()) - ids}
        # a partition deleted from the instance: the stock load already left its rows out
        key = context.asset_key.path
        table = f"{key[-2] if len(key) > 1 else context.resource_config.get('schema') or 'public'}.{key[-1]}"
        with TransactionalDuckDbClient.connect(context, None) as conn:
            gone.update({m: True for m in removed_partitions(conn, table, instance) - ids})
        if not gone:
            return frame
        step = self._step(context)
        if step is not None:
            seen = self._left_out.setdefault(step, {})
            for m, removed in sorted(gone.items()):
                run = {**last_run(instance, [context.asset_key], m), "partition_removed": removed}
                if m not in seen or (run["last_materialized"] or "") > (seen[m]["last_materialized"] or ""):
                    seen[m] = run
        return frame[frame["model_id"].isin(ids)].reset_index(drop=True)


class SafeDuckDBPandasIOManager(DuckDBPandasIOManager):
    """dagster-duckdb's pandas IO manager with transactional, by-name writes (module docstring).

    Config as the stock one: ``database`` (path: relative to ``METAMORPH_HOME``, resolved when a
    step opens it, or absolute), ``schema`` (default schema), ``connection_config``; and
    ``registry_models_only``: a per-model table read whole keeps the models of the model registry
    (``METAMORPH_MODELS`` or config/models.yaml, read when a step opens the IO manager, so no path is
    part of the launchpad; module docstring); False keeps every partition.
    """

    registry_models_only: bool = False

    @staticmethod
    def type_handlers() -> Sequence[DuckDBPandasTypeHandler]:
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
        from resources.paths import registry_path

        return _PartitionLoadingIOManager(inner, registry_path() if self.registry_models_only else None)


class WarehouseResource(DuckDBResource):
    """dagster-duckdb's ``DuckDBResource`` (the warehouse for SQL steps: lineage views, trace
    cells, the report card) whose connection is closed also when the block raises.

    The stock ``get_connection`` closes its connection only after a clean exit: a step whose SQL
    failed left the file open in the process, with the resource's configuration, until the
    traceback was collected — and DuckDB refuses a second connection to an open file with another
    configuration, so marking the failed run's tables partial (:mod:`pipelines.partial`) failed
    with ``ConnectionException`` instead of the step's own error.

    ``database``: the file, relative to ``METAMORPH_HOME`` (resolved when a connection opens,
    :attr:`path`) or absolute."""

    @property
    def path(self) -> str:
        """The warehouse file, absolute: ``database`` resolved against ``METAMORPH_HOME`` now."""
        return home_path(self.database)

    @contextmanager
    def get_connection(self):
        # the stock resource opens ``database`` as given (retrying while another process holds the
        # lock): a stock one names the resolved file
        stock = DuckDBResource(database=self.path, connection_config=self.connection_config)
        with stock.get_connection() as conn:
            try:
                yield conn
            except BaseException:
                conn.close()
                raise
