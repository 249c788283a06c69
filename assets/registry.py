"""The model registry's entries as an observable source asset (group ``model_registry``).

``model_registry/registry_entry`` is partitioned by model (:data:`assets.partitions.model_partitions`):
observing it reads the registry (``METAMORPH_MODELS``) and reports, for every model partition whose
id is a registry entry, the entry's fingerprint (:meth:`metamorph.models.ModelSpec.fingerprint`)
as the partition's data version. Every study's generation asset depends on it partition by
partition (:func:`pipelines.components.suite_definitions`), so an entry whose definition changed
makes its generation partitions stale in the UI, and their automation condition
(:data:`pipelines.jobs.REGISTRY_CONDITION`) re-runs exactly those partitions. A partition that is
no registry entry (a stray one) is not reported.

It is observed every :data:`OBSERVE_CRON` tick while the sensor ``registry_automation`` is on
(its automation condition), or on demand with its Observe button in the UI.
"""

from __future__ import annotations

import warnings

import dagster as dg

from assets.partitions import model_partitions
from metamorph.models import load_registry

#: The observable asset's key.
REGISTRY_ENTRY = dg.AssetKey(["model_registry", "registry_entry"])
#: How often the registry is observed while ``registry_automation`` is on (every 5 minutes).
OBSERVE_CRON = "*/5 * * * *"


# observable_source_asset is marked beta in this Dagster release; its warning would reach every
# command's stderr (the definitions load in each)
warnings.filterwarnings(
    "ignore", message="Function `observable_source_asset` is currently in beta", category=dg.BetaWarning
)


@dg.observable_source_asset(
    key=REGISTRY_ENTRY,
    partitions_def=model_partitions,
    group_name="model_registry",
    required_resource_keys={"model_registry"},
    automation_condition=dg.AutomationCondition.cron_tick_passed(OBSERVE_CRON).with_label(
        "observe the registry every 5 minutes"
    ),
    description="One registry entry per model partition; its data version is the entry's fingerprint (every "
    "field that shapes outputs). A changed entry makes its generation partitions stale, and the sensor "
    "registry_automation re-runs them.",
)
def registry_entry(context) -> dg.DataVersionsByPartition:
    """``{model id: DataVersion(fingerprint)}`` for every model partition that is a registry entry.
    Raises :class:`metamorph.errors.ConfigError` (file, row, field) for an unreadable registry."""
    partitions = set(context.instance.get_dynamic_partitions(model_partitions.name))
    entries = load_registry(context.resources.model_registry.path)
    return dg.DataVersionsByPartition({m.id: dg.DataVersion(m.fingerprint()) for m in entries if m.id in partitions})
