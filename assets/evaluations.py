"""What "this model was evaluated in this study" means, read from the Dagster instance.

Every study's per-model generation asset (:attr:`metamorph.study.Study.generations`) records in its
materialization metadata the registry entry's fingerprint (:data:`FINGERPRINT_KEY`) and the model
versions the provider reported (:data:`assets._common.REPORTED_VERSIONS_KEY`), whoever launched
the run. The registry sensor (``pipelines.sensors``) decides what to re-run from them; the
robustness report card (``assets.model_upgrades``) labels each model's rows with the fingerprint.
"""

from __future__ import annotations

from typing import NamedTuple

import dagster as dg

from assets._common import REPORTED_VERSIONS_KEY
from metamorph.study import studies

#: Materialization metadata key of the registry entry's fingerprint (written by the generation assets).
FINGERPRINT_KEY = "registry_fingerprint"
#: Materialization metadata key of the provider-reported versions (written by assets._common).
VERSIONS_KEY = REPORTED_VERSIONS_KEY


class Evaluation(NamedTuple):
    """What the latest materialization of a study's generation asset for one model recorded."""

    fingerprint: str | None  #: registry entry fingerprint (None: recorded none)
    versions: list[str]  #: provider-reported model versions (empty: recorded none)
    timestamp: float  #: when it was materialized (Unix seconds)


def latest_evaluation(instance: dg.DagsterInstance, study: str, model_id: str) -> Evaluation | None:
    """The latest materialization of ``study``'s generation asset for partition ``model_id``
    (None: never materialized). Raises KeyError for a study not declared (:func:`metamorph.study.studies`)."""
    key = dg.AssetKey([study, studies()[study].generations])
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[model_id]), limit=1
    ).records
    if not records:
        return None
    md = records[0].asset_materialization.metadata
    fp, versions = md.get(FINGERPRINT_KEY), md.get(VERSIONS_KEY)
    return Evaluation(
        None if fp is None else str(fp.value),
        [str(v) for v in versions.value] if versions is not None and isinstance(versions.value, list) else [],
        float(records[0].timestamp),
    )


def evaluated_fingerprint(instance: dg.DagsterInstance, study: str, model_id: str) -> str | None:
    """The registry fingerprint recorded by the latest materialization of ``study``'s generation
    asset for partition ``model_id``; None when it was never materialized (or recorded none)."""
    ev = latest_evaluation(instance, study, model_id)
    return None if ev is None else ev.fingerprint
