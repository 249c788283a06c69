"""What "this model was evaluated in this study" means, read from the Dagster instance.

Every study's per-model generation asset (:attr:`metamorph.study.Study.generations`) records in its
materialization metadata the registry entry's fingerprint (:data:`FINGERPRINT_KEY`) and the model
versions the provider reported (:data:`assets._common.REPORTED_VERSIONS_KEY`), whoever launched
the run. The registry sensor (``pipelines.sensors``) decides what to re-run from them; the
robustness report card (``assets.model_upgrades``) labels each model's rows with the fingerprint.

What running a model in a study costs, for the sensor's requests and the empty states that say
what to run (:func:`planned_run`): the calls of its cost plan (:func:`planned_calls`, with the
study's inputs as last materialized) and, for a local model, about how long they take on this
machine at the seconds per call its generation steps measured (:func:`measured_seconds_per_call`).
"""

from __future__ import annotations

import json
from typing import NamedTuple

import dagster as dg

from assets._common import ALL_ROWS, REPORTED_VERSIONS_KEY, SECONDS_PER_CALL_KEY, fingerprint_of
from metamorph.costplan import plan_calls
from metamorph.models import ModelSpec
from metamorph.study import Options, Study, studies

#: Materialization metadata key of the registry entry's fingerprint (written by the generation assets).
FINGERPRINT_KEY = "registry_fingerprint"
#: Materialization metadata key of the provider-reported versions (written by assets._common).
VERSIONS_KEY = REPORTED_VERSIONS_KEY


class Evaluation(NamedTuple):
    """What the latest materialization of a study's generation asset for one model recorded."""

    fingerprint: str | None  #: registry entry fingerprint (None: recorded none)
    versions: list[str]  #: provider-reported model versions (empty: recorded none)
    timestamp: float  #: when it was materialized (Unix seconds)


def latest_evaluation(
    instance: dg.DagsterInstance, study: str, model_id: str, suite: str | None = None
) -> Evaluation | None:
    """The latest materialization of ``study``'s generation asset (of its suite ``suite``; None: its
    default suite) for partition ``model_id`` (None: never materialized). Raises KeyError for a study
    not declared (:func:`metamorph.study.studies`)."""
    key = dg.AssetKey([suite or study, studies()[study].generations])
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[model_id]), limit=1
    ).records
    if not records:
        return None
    md = records[0].asset_materialization.metadata
    fp, versions = md.get(FINGERPRINT_KEY), md.get(VERSIONS_KEY)
    return Evaluation(
        None if fp is None else fingerprint_of(fp.value),
        [str(v) for v in versions.value] if versions is not None and isinstance(versions.value, list) else [],
        float(records[0].timestamp),
    )


def evaluated_fingerprint(
    instance: dg.DagsterInstance, study: str, model_id: str, suite: str | None = None
) -> str | None:
    """The registry fingerprint recorded by the latest materialization of ``study``'s generation
    asset (of its suite ``suite``; None: its default suite) for partition ``model_id``; None when it
    was never materialized (or recorded none)."""
    ev = latest_evaluation(instance, study, model_id, suite)
    return None if ev is None else ev.fingerprint


def input_options(instance: dg.DagsterInstance, study: Study) -> Options:
    """The options ``study``'s inputs were materialized with: each input asset's config in the run
    of its latest materialization, read back through the options' targets (``limit`` -1, every
    row, is the default); every other option at its default (the sensor's runs carry no config)."""
    by_target = {(a, f): o for o in study.all_options() for a, f in o.targets if a in study.inputs}
    given: dict = {}
    for asset in study.inputs:
        event = instance.get_latest_materialization_event(dg.AssetKey([study.name, asset]))
        run = instance.get_run_by_id(event.run_id) if event is not None else None
        if run is None:
            continue
        op = ((run.run_config or {}).get("ops") or {}).get(f"{study.name}__{asset}") or {}
        for field, value in (op.get("config") or {}).items():
            option = by_target.get((asset, field))
            if option is None or value is None or (option.name == "limit" and value == ALL_ROWS):
                continue
            given[option.name] = value
    return study.values(**given)


#: ``plan_calls`` per (study, registry entry, options) in this process: the plan is a function of them.
_PLANNED: dict[tuple[str, str, str], tuple[int, bool]] = {}


def planned_calls(study: Study, m: ModelSpec, options: Options) -> tuple[int, bool]:
    """:func:`metamorph.costplan.plan_calls` of ``study`` for entry ``m``, remembered per process."""
    key = (study.name, repr(m), json.dumps({n: getattr(options, n) for n in sorted(options.given)}, default=str))
    if key not in _PLANNED:
        if len(_PLANNED) > 512:
            _PLANNED.clear()
        _PLANNED[key] = plan_calls(study.name, m, options)
    return _PLANNED[key]


#: Providers whose calls run on this machine (the time of a run is the machine's, not a provider's).
LOCAL_PROVIDERS = ("llama_cpp",)


def measured_seconds_per_call(instance: dg.DagsterInstance, model_id: str) -> float | None:
    """The seconds per call recorded by the latest generation materialization of partition
    ``model_id`` in any study (``seconds_per_call``); None when no step of it made calls yet."""
    best = None
    for name, study in studies().items():
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey([name, study.generations]), asset_partitions=[model_id]),
            limit=5,
        ).records
        for r in records:
            v = r.asset_materialization.metadata.get(SECONDS_PER_CALL_KEY)
            if v is not None and (best is None or r.timestamp > best[0]):
                best = (r.timestamp, float(v.value))
                break
    return None if best is None else best[1]


def duration_text(seconds: float) -> str:
    """``about 40 s`` / ``about 12 min`` / ``about 2.5 h``."""
    if seconds < 90:
        return f"about {max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"about {round(seconds / 60)} min"
    return f"about {seconds / 3600:.1f} h"


def planned_time(instance: dg.DagsterInstance, spec: ModelSpec, calls: int) -> str | None:
    """How long ``calls`` calls of local model ``spec`` take on this machine, e.g. ``about 12 min on
    this machine (2.9 s per call measured)``; for a local model not run here yet ``time unknown (not
    run on this machine yet)``; None for a provider's model (the time is the provider's)."""
    if spec.provider not in LOCAL_PROVIDERS:
        return None
    pace = measured_seconds_per_call(instance, spec.id)
    if pace is None:
        return "time unknown (not run on this machine yet)"
    return f"{duration_text(calls * pace)} on this machine ({pace:g} s per call measured)"


def planned_run(instance: dg.DagsterInstance, study: Study, specs: list[ModelSpec]) -> str:
    """What running ``study``'s model job for ``specs`` costs, one part per model, e.g.
    ``smollm2: up to 252 calls, about 4 min on this machine (0.95 s per call measured)``: the
    calls of the cost plan with nothing cached (:func:`planned_calls`, the study's inputs as last
    materialized) and, for a local model, :func:`planned_time`. A plan that cannot be made says
    why (a loader's one line)."""
    from metamorph.errors import MetamorphError

    options = input_options(instance, study)
    parts = []
    for spec in specs:
        try:
            calls, upper = planned_calls(study, spec, options)
        except (MetamorphError, ValueError) as exc:
            parts.append(f"{spec.id}: calls not planned ({exc})")
            continue
        when = planned_time(instance, spec, calls)
        parts.append(f"{spec.id}: {'up to ' if upper else ''}{calls:,} calls" + (f", {when}" if when else ""))
    return "; ".join(parts)
