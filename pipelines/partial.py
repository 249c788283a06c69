"""Partial state after a failed run: the tables a failed run wrote are marked, in the UI and for readers.

The IO manager writes each asset's table when its step ends (one transaction per table,
``resources.storage``), so a run that fails at step Y leaves the tables of the steps before Y
updated and those from Y on as they were. Dagster records which run wrote each table (the
materialization's run id); this module makes the mixed state visible instead of undoing it:

* :func:`mark_partial_run` reports one ``AssetObservation`` per (asset, partition) the failed run
  materialized, with metadata ``partial`` (one sentence: which run, which step failed, which assets
  of the run were left as they were), ``failed_run`` (a link to the run), ``failed_step`` and
  ``not_updated``. The asset's page in the UI lists it among its events (observations are not
  materializations: the asset's latest materialization stays that of the failed run). The run gets the tag :data:`MARKED_TAG`, so marking twice is a no-op;
* :func:`partial_assets` answers "which tables are partial now": an (asset, partition) whose latest
  materialization came from a run that failed. A later successful materialization clears it;
* :data:`partial_run_sensor` marks runs launched from the UI or by the daemon when they fail;
  ``python -m pipelines.run`` marks its own failed runs (it runs jobs in-process, without the
  daemon) and the runs of killed processes it reclaims;
* in the warehouse, the ledger ``metamorph_meta.table_writes`` (written by the IO manager with
  each table, ``resources.storage``) gets the same mark in its ``partial`` column, read by
  :func:`warehouse_partial` (``pipelines.run`` prints it under the headline).
"""

from __future__ import annotations

from dataclasses import dataclass

import dagster as dg

from resources.paths import warehouse_path

#: Run tag set once a failed run's tables are marked (value: the number of (asset, partition) marked).
MARKED_TAG = "metamorph/partial_marked"
#: Metadata key of the marker observation (its text says which run failed where).
PARTIAL_KEY = "partial"


@dataclass(frozen=True)
class PartialTable:
    """One (asset, partition) whose latest materialization came from a failed run.

    ``asset``: the asset key as ``schema/table`` (the DuckDB table ``schema.table``); ``partition``:
    the partition key or ``None``; ``run_id``: the failed run; ``failed_step``: its first failed
    step (``None`` when the run failed outside a step, e.g. its process was killed).
    """

    asset: str
    partition: str | None
    run_id: str
    failed_step: str | None


def _events(instance: dg.DagsterInstance, run_id: str, kind: dg.DagsterEventType) -> list:
    return [r.event_log_entry for r in instance.get_records_for_run(run_id, of_type=kind).records]


def mark_partial_run(instance: dg.DagsterInstance, run_id: str, warehouse: str | None = None) -> list[PartialTable]:
    """Mark every (asset, partition) that the failed run ``run_id`` materialized (module docstring):
    an observation per asset (partition) in the instance, and ``partial`` on the rows of the
    warehouse ledger that run still holds (``warehouse``: the DuckDB file, default
    ``resources.paths.warehouse_path()``).

    Returns what was marked, in materialization order; ``[]`` when the run did not fail, wrote
    nothing, or was marked already (:data:`MARKED_TAG`).
    """
    run = instance.get_run_by_id(run_id)
    if run is None or run.status != dg.DagsterRunStatus.FAILURE or MARKED_TAG in run.tags:
        return []
    failures = _events(instance, run_id, dg.DagsterEventType.STEP_FAILURE)
    failed_step = failures[0].step_key if failures else None
    written: dict[tuple[str, str | None], dg.AssetKey] = {}
    for e in _events(instance, run_id, dg.DagsterEventType.ASSET_MATERIALIZATION):
        mat = e.asset_materialization
        written.setdefault((mat.asset_key.to_user_string(), mat.partition), mat.asset_key)
    planned = [
        e.dagster_event.asset_key.to_user_string()
        for e in _events(instance, run_id, dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED)
    ]
    done = {a for a, _ in written}
    not_updated = sorted(set(planned) - done)
    where = f"at step {failed_step}" if failed_step else "outside a step (its process ended)"
    marked = []
    for (asset, partition), key in written.items():
        text = (
            f"run {run_id} (job {run.job_name}) failed {where}. This table"
            f"{f' (partition {partition})' if partition else ''} was written by that run before it failed; "
            f"{len(not_updated)} other asset(s) of the run were not updated and still hold an earlier run's "
            f"rows: {', '.join(not_updated) or 'none'}. Re-run the job to make them consistent."
        )
        instance.report_runless_asset_event(
            dg.AssetObservation(
                asset_key=key,
                partition=partition,
                description=text,
                metadata={
                    PARTIAL_KEY: dg.MetadataValue.text(text),
                    "failed_run": dg.MetadataValue.dagster_run(run_id),
                    "failed_step": dg.MetadataValue.text(failed_step or ""),
                    "not_updated": dg.MetadataValue.json(not_updated),
                },
            )
        )
        marked.append(PartialTable(asset, partition, run_id, failed_step))
    if marked:
        flag_warehouse(
            warehouse or warehouse_path(),
            run_id,
            f"run {run_id} failed {where}; the other tables of that run were not updated",
        )
    instance.add_run_tags(run_id, {MARKED_TAG: str(len(marked))})
    return marked


def _connect(database: str, timeout_s: float = 300.0):
    import time

    import duckdb

    deadline, pause = time.monotonic() + timeout_s, 0.1
    while True:
        try:
            return duckdb.connect(database)
        except duckdb.IOException:  # another process writes the warehouse: wait for it
            if time.monotonic() > deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 1.5, 0.5)


def flag_warehouse(database: str, run_id: str, note: str) -> int:
    """Set ``partial = note`` on the ledger rows (``resources.storage.LEDGER``) still held by
    ``run_id``; returns how many. A missing warehouse or ledger flags nothing (0)."""
    import os

    from resources.storage import LEDGER

    if not os.path.exists(database):
        return 0
    con = _connect(database)
    try:
        if not con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'metamorph_meta' "
            "AND table_name = 'table_writes'"
        ).fetchall()[0][0]:
            return 0
        return len(
            con.execute(f"UPDATE {LEDGER} SET partial = ? WHERE run_id = ? RETURNING 1", [note, run_id]).fetchall()
        )
    finally:
        con.close()


def warehouse_partial(con, schema: str | None = None) -> list[tuple[str, str, str, str]]:
    """Rows of the ledger marked partial, as (table_name, partition, run_id, note) sorted by table
    and partition, for the tables of ``schema`` (all when ``None``); ``[]`` without a ledger.
    ``con``: an open DuckDB connection to the warehouse."""
    from resources.storage import LEDGER

    if not con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'metamorph_meta' "
        "AND table_name = 'table_writes'"
    ).fetchall()[0][0]:
        return []
    rows = con.execute(
        f"SELECT table_name, partition, run_id, partial FROM {LEDGER} WHERE partial IS NOT NULL "
        "AND (? IS NULL OR table_name LIKE ? || '.%') ORDER BY table_name, partition",
        [schema, schema],
    ).fetchall()
    return [tuple(r) for r in rows]


def partial_assets(instance: dg.DagsterInstance, asset_keys: list[dg.AssetKey]) -> list[PartialTable]:
    """The (asset, partition) pairs among ``asset_keys`` whose latest materialization came from a
    failed run (every partition of a partitioned asset is looked at), sorted by asset and partition."""
    out = []
    for key in asset_keys:
        partitions = instance.get_materialized_partitions(key) or {None}
        for p in sorted(partitions, key=lambda x: x or ""):
            flt = dg.AssetRecordsFilter(asset_key=key, asset_partitions=[p] if p is not None else None)
            records = instance.fetch_materializations(flt, limit=1).records
            if not records:
                continue
            run = instance.get_run_by_id(records[0].run_id)
            if run is None or run.status != dg.DagsterRunStatus.FAILURE:
                continue
            failures = _events(instance, run.run_id, dg.DagsterEventType.STEP_FAILURE)
            out.append(PartialTable(key.to_user_string(), p, run.run_id, failures[0].step_key if failures else None))
    return out


@dg.run_failure_sensor(
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
    description="Marks the tables a failed run wrote before it failed as partial (an asset "
    "observation with metadata 'partial' naming the run and its failed step). "
    "Launches nothing.",
)
def partial_run_sensor(context: dg.RunFailureSensorContext) -> None:
    marked = mark_partial_run(context.instance, context.dagster_run.run_id)
    if marked:
        context.log.info(f"marked {len(marked)} table(s) of failed run {context.dagster_run.run_id} as partial")
