"""Schedules: a weekly re-evaluation of every registered model partition."""

from __future__ import annotations

import dagster as dg

from pipelines.jobs import format_robustness_model_job
from pipelines.partitions import model_partitions


@dg.schedule(job=format_robustness_model_job, cron_schedule="0 3 * * 1", execution_timezone="UTC",
             description="Every Monday 03:00 UTC: re-run every model partition. Cache hits make unchanged "
                         "requests free; provider-reported model version changes are logged.")
def weekly_reevaluation(context: dg.ScheduleEvaluationContext):
    keys = context.instance.get_dynamic_partitions(model_partitions.name)
    if not keys:
        return dg.SkipReason("no model partitions registered yet")
    day = context.scheduled_execution_time.strftime("%Y-%m-%d")
    return [dg.RunRequest(partition_key=k, run_key=f"weekly:{day}:{k}") for k in keys]
