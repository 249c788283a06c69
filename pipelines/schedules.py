"""Schedules: a weekly re-evaluation of every registered model partition (a registry model id) in every study."""

from __future__ import annotations

import dagster as dg

from metamorph.models import load_registry
from pipelines.jobs import MODEL_JOBS
from resources.paths import registry_path
from assets.partitions import model_partitions
from pipelines.sensors import studies_in_use


def _weekly(study: str) -> dg.ScheduleDefinition:
    job = MODEL_JOBS[study]

    @dg.schedule(
        name=f"{study}_weekly",
        job=job,
        cron_schedule="0 3 * * 1",
        execution_timezone="UTC",
        description=f"Every Monday 03:00 UTC: re-run every model partition of {study}. Cache hits make "
        "unchanged requests free; provider-reported model version changes are logged.",
    )
    def weekly(context: dg.ScheduleEvaluationContext):
        # a partition that is not a registry id (added by hand) is left out: its launch is refused
        registered = {m.id for m in load_registry(registry_path())}
        keys = [k for k in context.instance.get_dynamic_partitions(model_partitions.name) if k in registered]
        if not keys:
            return dg.SkipReason("no model partitions registered yet")
        if study not in studies_in_use(context.instance):
            return dg.SkipReason(f"{study} has not been run with a model yet")
        day = context.scheduled_execution_time.strftime("%Y-%m-%d")
        return [dg.RunRequest(partition_key=k, run_key=f"{study}:weekly:{day}:{k}") for k in keys]

    return weekly


WEEKLY_SCHEDULES = [_weekly(s) for s in MODEL_JOBS]
