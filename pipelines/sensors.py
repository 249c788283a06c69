"""Sensors: the model registry sensor adds partitions and re-evaluates new or changed models.

"Already evaluated" is read from what was materialized, not from the sensor's own memory: every
generation asset records the registry entry's fingerprint (``registry_fingerprint``) in its
materialization metadata, whoever launched the run (this sensor, a schedule, the UI or
``python -m pipelines.run``). A model is (re)launched in a study when the latest materialization
of its partition is missing or carries another fingerprint — and only in studies that have been
run with a model at least once: a study whose inputs were materialized without models
(``pipelines.run --no-models``) is not a request to run models.
"""

from __future__ import annotations

import dagster as dg

from metamorph.errors import ConfigError
from metamorph.models import load_registry
from pipelines.jobs import MODEL_JOBS, STUDY_GENERATIONS, STUDY_INPUTS
from pipelines.partitions import model_partitions
from resources.paths import registry_path

FINGERPRINT_KEY = "registry_fingerprint"


def studies_with_inputs(instance: dg.DagsterInstance) -> list[str]:
    """Studies whose input assets have been materialized (a model job needs them)."""
    return [s for s, names in STUDY_INPUTS.items()
            if all(instance.get_latest_materialization_event(dg.AssetKey([s, n])) is not None for n in names)]


def studies_in_use(instance: dg.DagsterInstance) -> list[str]:
    """Studies with inputs whose generation asset has been materialized for at least one model."""
    return [s for s in studies_with_inputs(instance)
            if instance.get_latest_materialization_event(dg.AssetKey([s, STUDY_GENERATIONS[s]])) is not None]


def evaluated_fingerprint(instance: dg.DagsterInstance, study: str, model_id: str) -> str | None:
    """The registry fingerprint recorded by the latest materialization of ``study``'s generation
    asset for partition ``model_id``; None when it was never materialized (or recorded none)."""
    key = dg.AssetKey([study, STUDY_GENERATIONS[study]])
    records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key, asset_partitions=[model_id]),
                                              limit=1).records
    if not records:
        return None
    value = records[0].asset_materialization.metadata.get(FINGERPRINT_KEY)
    return None if value is None else str(value.value)


# Off by default: the shipped registry holds more models than `make demo` runs, and opening the UI
# must not spend CPU or API money unasked (issue #12). Turning it on evaluates every entry.
@dg.sensor(jobs=list(MODEL_JOBS.values()), minimum_interval_seconds=60,
           default_status=dg.DefaultSensorStatus.STOPPED,
           description="Watches the model registry (METAMORPH_MODELS). A new model id becomes a partition; a new or "
                       "changed entry is evaluated in every study that has been run with a model. Models whose "
                       "latest materialization records the current registry entry are not re-run.")
def model_registry_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
    try:
        models = load_registry(registry_path())
    except ConfigError as exc:
        return dg.SkipReason(f"registry unreadable: {exc}")
    existing = set(context.instance.get_dynamic_partitions(model_partitions.name))
    new_ids = [m.id for m in models if m.id not in existing]
    studies = studies_in_use(context.instance)
    runs = []
    for s in studies:
        for m in models:
            done = evaluated_fingerprint(context.instance, s, m.id)
            if done != m.fingerprint():
                runs.append(dg.RunRequest(job_name=MODEL_JOBS[s].name, partition_key=m.id,
                                          run_key=f"{s}:{m.id}:{m.fingerprint()[:16]}",
                                          tags={"metamorph/reason": "new model" if done is None
                                                else "registry entry changed"}))
    if not runs and not new_ids:
        return dg.SkipReason("every model is evaluated with its current registry entry" if studies
                             else "no study has been run with a model yet")
    return dg.SensorResult(run_requests=runs,
                           dynamic_partitions_requests=[model_partitions.build_add_request(new_ids)] if new_ids else [])
