"""Sensors: the model registry sensor adds partitions and re-evaluates new or changed models."""

from __future__ import annotations

import json

import dagster as dg

from metamorph.errors import ConfigError
from metamorph.models import load_registry
from pipelines.jobs import format_robustness_model_job
from pipelines.partitions import model_partitions
from resources.paths import registry_path


@dg.sensor(job=format_robustness_model_job, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Watches the model registry (METAMORPH_MODELS). A new model id becomes a partition and is "
                       "evaluated; a changed entry (e.g. a new snapshot name) is re-evaluated.")
def model_registry_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
    try:
        models = load_registry(registry_path())
    except ConfigError as exc:
        return dg.SkipReason(f"registry unreadable: {exc}")
    seen: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    existing = set(context.instance.get_dynamic_partitions(model_partitions.name))
    new_ids = [m.id for m in models if m.id not in existing]
    runs = [dg.RunRequest(partition_key=m.id, run_key=f"{m.id}:{m.fingerprint()[:16]}",
                          tags={"metamorph/reason": "new model" if m.id not in seen else "registry entry changed"})
            for m in models if seen.get(m.id) != m.fingerprint()]
    cursor = json.dumps({m.id: m.fingerprint() for m in models}, sort_keys=True)
    if not runs and not new_ids:
        return dg.SkipReason("registry unchanged")
    return dg.SensorResult(run_requests=runs, cursor=cursor,
                           dynamic_partitions_requests=[model_partitions.build_add_request(new_ids)] if new_ids else [])
