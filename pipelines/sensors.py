"""Sensors: the model registry sensor adds partitions and re-evaluates new or changed models."""

from __future__ import annotations

import json

import dagster as dg

from metamorph.errors import ConfigError
from metamorph.models import load_registry
from pipelines.jobs import MODEL_JOBS, STUDY_INPUTS
from pipelines.partitions import model_partitions
from resources.paths import registry_path


def studies_with_inputs(instance: dg.DagsterInstance) -> list[str]:
    """Studies whose input assets have been materialized (a model job needs them)."""
    return [s for s, names in STUDY_INPUTS.items()
            if all(instance.get_latest_materialization_event(dg.AssetKey([s, n])) is not None for n in names)]


@dg.sensor(jobs=list(MODEL_JOBS.values()), minimum_interval_seconds=60,
           default_status=dg.DefaultSensorStatus.RUNNING,
           description="Watches the model registry (METAMORPH_MODELS). A new model id becomes a partition and is "
                       "evaluated in every study whose inputs exist; a changed entry is re-evaluated.")
def model_registry_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
    try:
        models = load_registry(registry_path())
    except ConfigError as exc:
        return dg.SkipReason(f"registry unreadable: {exc}")
    # cursor: {"<study>|<model id>": fingerprint of the entry last launched for that study}
    seen: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    existing = set(context.instance.get_dynamic_partitions(model_partitions.name))
    new_ids = [m.id for m in models if m.id not in existing]
    studies = studies_with_inputs(context.instance)
    runs, cursor = [], dict(seen)
    for s in studies:
        for m in models:
            key = f"{s}|{m.id}"
            if seen.get(key) != m.fingerprint():
                runs.append(dg.RunRequest(job_name=MODEL_JOBS[s].name, partition_key=m.id,
                                          run_key=f"{s}:{m.id}:{m.fingerprint()[:16]}",
                                          tags={"metamorph/reason": "registry entry changed" if key in seen
                                                else "new model or study"}))
                cursor[key] = m.fingerprint()
    if not runs and not new_ids:
        return dg.SkipReason("registry unchanged" if studies else "no study has materialized inputs yet")
    return dg.SensorResult(run_requests=runs, cursor=json.dumps(cursor, sort_keys=True),
                           dynamic_partitions_requests=[model_partitions.build_add_request(new_ids)] if new_ids else [])
