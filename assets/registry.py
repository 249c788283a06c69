"""The model registry's entries as an observable source asset (group ``model_registry``).

``model_registry/registry_entry`` is partitioned by model (:data:`assets.partitions.model_partitions`):
observing it reads the registry (``METAMORPH_MODELS``) and reports, for every model partition whose
id is a registry entry, the partition's data version (:func:`entry_version`): the entry's
fingerprint (:meth:`metamorph.models.ModelSpec.fingerprint`) and, for an ``openai`` / ``anthropic``
entry whose ``api_key_env`` variable is set, the version its provider serves now (read from the
provider's ``models.list`` by the rule of :mod:`metamorph.providers.versions`: one call per
endpoint and key per observation, :data:`VERSION_POLL_TIMEOUT_S` each). Every study's generation
asset depends on it partition by partition (:func:`pipelines.components.suite_definitions`), so an
entry whose definition changed, or whose provider now serves another version, makes its generation
partitions stale in the UI (the observation's data version says which), and their automation
condition (:data:`pipelines.jobs.REGISTRY_CONDITION`) re-runs exactly those partitions. A partition
that is no registry entry (a stray one) is not reported. A listing that fails is logged (never the
key), and an entry whose served version is not known this time (listing failed, key unset) keeps the
served version of its last observation: no judgement, so nothing becomes stale.

The request to a model name is the same before and after a provider-side change, so the re-run
would read the old version's completions from the generation cache: a generation step calls again
every completion cached before the observation that first saw the served version change
(:func:`provider_changed_at`, used by :func:`assets._common.runner_options`).

It is observed every :data:`OBSERVE_CRON` tick while the sensor ``registry_automation`` is on
(its automation condition), or on demand with its Observe button in the UI.
"""

from __future__ import annotations

import os
import time
import warnings
from datetime import datetime, timezone

import dagster as dg

from assets.partitions import model_partitions
from metamorph.models import ModelSpec, load_registry
from metamorph.providers.versions import POLLED_PROVIDERS, ListedVersion, VersionPollError, current_version, list_models

#: The observable asset's key.
REGISTRY_ENTRY = dg.AssetKey(["model_registry", "registry_entry"])
#: How often the registry is observed while ``registry_automation`` is on (every 5 minutes).
OBSERVE_CRON = "*/5 * * * *"
#: Seconds one ``models.list`` poll may take (all its pages) before the observation gives up on it.
VERSION_POLL_TIMEOUT_S = 10.0
#: Seconds of polling per observation; endpoints left when it is spent are not polled this time.
VERSION_POLL_BUDGET_S = 30.0
#: What separates the fingerprint from the served version in a data version (:func:`entry_version`).
SERVED = " served "


# observable_source_asset is marked beta in this Dagster release; its warning would reach every
# command's stderr (the definitions load in each)
warnings.filterwarnings(
    "ignore", message="Function `observable_source_asset` is currently in beta", category=dg.BetaWarning
)


class Catalogues:
    """``models.list`` per (provider, base_url, api_key_env), polled at most once per observation;
    None for an endpoint whose listing failed, was not attempted (budget spent) or has no key."""

    def __init__(self, log) -> None:
        self.log = log
        self.polled: dict[tuple, dict[str, int] | None] = {}
        self.started = time.monotonic()

    def get(self, m: ModelSpec) -> dict[str, int] | None:
        ident = (m.provider, m.base_url, m.api_key_env)
        if ident in self.polled:
            return self.polled[ident]
        key = os.environ.get(m.api_key_env or "")
        result = None
        if time.monotonic() - self.started > VERSION_POLL_BUDGET_S:
            self.log.warning(
                f"model {m.id!r}: {m.provider} models.list not polled this time "
                f"(polling budget of {VERSION_POLL_BUDGET_S:g} s spent)"
            )
        elif key:
            try:
                result = list_models(m.provider, key, m.base_url, timeout_s=VERSION_POLL_TIMEOUT_S)
            except VersionPollError as exc:  # its text never holds the key
                self.log.warning(f"model {m.id!r}: provider version not checked: {exc}")
        self.polled[ident] = result
        return result


def served_version(catalogues: Catalogues, m: ModelSpec) -> ListedVersion | None:
    """The version entry ``m``'s provider serves now, or None (not an openai/anthropic entry, no key
    set, the listing unavailable, or the model not listed)."""
    if m.provider not in POLLED_PROVIDERS or not m.api_key_env or not os.environ.get(m.api_key_env):
        return None
    catalogue = catalogues.get(m)
    if catalogue is None:
        return None
    found = current_version(m.model, catalogue)
    if found is None:
        catalogues.log.info(
            f"model {m.id!r}: {m.model!r} is not in the {m.provider} models.list; provider version not checked"
        )
    return found


def entry_version(fingerprint: str, served: ListedVersion | None) -> str:
    """A registry entry's data version: its fingerprint, then (when known) the served version and
    when the provider published it (Unix seconds), e.g. ``<fingerprint> served gpt-4o-2024-08-06 at
    1722902400``."""
    return fingerprint if served is None else f"{fingerprint}{SERVED}{served.id} at {served.created}"


def _served_part(data_version: str | None) -> str | None:
    """The served-version part of a data version of :func:`entry_version` (None: none)."""
    if not data_version or SERVED not in data_version:
        return None
    return data_version.split(SERVED, 1)[1]


def provider_changed_at(instance: dg.DagsterInstance, model_id: str, limit: int = 500) -> datetime | None:
    """When the registry entry ``model_id`` was first observed served by the version it is served
    by now, after an observation of another served version (naive UTC); None when no observation
    reported a served version, or every one reported the same. The completions cached before it
    were made by another version. Reads the latest ``limit`` observations of the partition."""
    records = instance.fetch_observations(
        dg.AssetRecordsFilter(asset_key=REGISTRY_ENTRY, asset_partitions=[model_id]), limit=limit
    ).records  # newest first
    parts = [_served_part(r.asset_observation.tags.get("dagster/data_version")) for r in records]
    if not parts or parts[0] is None:
        return None
    since = None
    for record, part in zip(records, parts):
        if part is None:
            continue  # observed before any listing: no judgement
        if part != parts[0]:
            return since
        since = datetime.fromtimestamp(record.timestamp, timezone.utc).replace(tzinfo=None)
    return None


@dg.observable_source_asset(
    key=REGISTRY_ENTRY,
    partitions_def=model_partitions,
    group_name="model_registry",
    required_resource_keys={"model_registry"},
    automation_condition=dg.AutomationCondition.cron_tick_passed(OBSERVE_CRON).with_label(
        "observe the registry every 5 minutes"
    ),
    description="One registry entry per model partition; its data version is the entry's fingerprint (every "
    "field that shapes outputs) and, for an OpenAI / Anthropic entry whose key is set, the version its provider "
    "serves now (models.list). A changed entry or served version makes its generation partitions stale, and the "
    "sensor registry_automation re-runs them.",
)
def registry_entry(context) -> dg.DataVersionsByPartition:
    """``{model id: DataVersion(entry_version)}`` for every model partition that is a registry entry.
    Raises :class:`metamorph.errors.ConfigError` (file, row, field) for an unreadable registry."""
    partitions = set(context.instance.get_dynamic_partitions(model_partitions.name))
    entries = [m for m in load_registry(context.resources.model_registry.path) if m.id in partitions]
    catalogues = Catalogues(context.log)
    versions = {}
    for m in entries:
        version = entry_version(m.fingerprint(), served_version(catalogues, m))
        if SERVED not in version:  # not known this time (no key, listing failed): no judgement, the last one kept
            last = _served_part(_latest_version(context.instance, m.id))
            version += f"{SERVED}{last}" if last else ""
        versions[m.id] = dg.DataVersion(version)
    return dg.DataVersionsByPartition(versions)


def _latest_version(instance: dg.DagsterInstance, model_id: str) -> str | None:
    """The data version of the latest observation of ``model_id``'s registry entry (None: never observed)."""
    records = instance.fetch_observations(
        dg.AssetRecordsFilter(asset_key=REGISTRY_ENTRY, asset_partitions=[model_id]), limit=1
    ).records
    return records[0].asset_observation.tags.get("dagster/data_version") if records else None
