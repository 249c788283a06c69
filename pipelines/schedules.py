"""Schedules: the re-evaluation of a suite's models on a cron schedule.

Every suite may declare one (``schedule:`` in its ``defs.yaml``, :mod:`pipelines.components`): each tick
launches ``<suite>_model_job`` once per model partition that is one of the suite's models (a registry
model id; ``models: registry`` = every registry entry, approved and candidates). The studies' default
suites run weekly, Monday 03:00 UTC (:data:`WEEKLY_SCHEDULES`, ``<study>_weekly``).
"""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg

from metamorph.models import load_registry
from metamorph.study import Study, studies
from pipelines.jobs import MODEL_JOBS
from resources.paths import registry_path
from assets.partitions import model_partitions

#: The default suites' schedule: every Monday 03:00 UTC.
WEEKLY_CRON = "0 3 * * 1"


def suite_in_use(instance: dg.DagsterInstance, study: Study, suite: str) -> bool:
    """``suite``'s inputs and its generation asset have been materialized (the latter for at least one model)."""
    return all(
        instance.get_latest_materialization_event(dg.AssetKey([suite, n])) is not None
        for n in (*study.inputs, study.generations)
    )


def suite_schedule(
    study: Study,
    job: dg.UnresolvedAssetJobDefinition,
    *,
    suite: str | None = None,
    name: str | None = None,
    cron_schedule: str = WEEKLY_CRON,
    execution_timezone: str = "UTC",
    models: Sequence[str] | None = None,
) -> dg.ScheduleDefinition:
    """A schedule named ``name`` (default ``<suite>_schedule``) launching ``job`` (the suite's model
    job) once per model partition on ``cron_schedule``: the partitions that are registry model ids
    and, when ``models`` is given, among them (``None``: every registry model). A tick skips, with
    the reason, when there is no such partition, when a model of ``models`` is not in the registry,
    or when the suite has not been run with a model yet. Run keys: ``<suite>:<schedule>:<day>:<model>``
    (the default suites: ``<study>:weekly:<day>:<model>``)."""
    suite = suite or study.name
    name = name or f"{suite}_schedule"
    kind = name.removeprefix(f"{suite}_") if name.startswith(f"{suite}_") else name
    wanted = None if models is None else list(models)
    who = "every model partition" if wanted is None else f"the model partitions {', '.join(wanted)}"

    @dg.schedule(
        name=name,
        job=job,
        cron_schedule=cron_schedule,
        execution_timezone=execution_timezone,
        description=f"On '{cron_schedule}' ({execution_timezone}): re-run {who} of {suite}. Cache hits make "
        "unchanged requests free; provider-reported model version changes are logged.",
    )
    def scheduled(context: dg.ScheduleEvaluationContext):
        # a partition that is not a registry id (added by hand) is left out: its launch is refused
        registered = {m.id for m in load_registry(registry_path())}
        if wanted is not None:
            unknown = [m for m in wanted if m not in registered]
            if unknown:
                return dg.SkipReason(f"{suite}: model(s) {unknown} not in the registry {registry_path()}")
        keys = [
            k
            for k in context.instance.get_dynamic_partitions(model_partitions.name)
            if k in registered and (wanted is None or k in wanted)
        ]
        if not keys:
            return dg.SkipReason("no model partitions registered yet")
        if not suite_in_use(context.instance, study, suite):
            return dg.SkipReason(f"{suite} has not been run with a model yet")
        day = context.scheduled_execution_time.strftime("%Y-%m-%d")
        return [dg.RunRequest(partition_key=k, run_key=f"{suite}:{kind}:{day}:{k}") for k in keys]

    return scheduled


#: ``<study>_weekly`` of every study's default suite.
WEEKLY_SCHEDULES = [suite_schedule(studies()[s], MODEL_JOBS[s], name=f"{s}_weekly") for s in MODEL_JOBS]
