"""Sensors: the model registry sensor keeps what Dagster cannot declare.

* adding a new registry entry as a model partition (dynamic partitions);
* launching a new model in every study that has been run with a model, each run tagged with its
  cost plan (below) — a partition never evaluated is not run by declarative automation.

A registry entry whose definition changed, or whose provider now serves another version, is NOT
handled here: each entry is the observable asset ``model_registry/registry_entry``
(:mod:`assets.registry`: the fingerprint and the served version are its data version), and the
generation partitions of a changed entry are re-run by their automation condition (sensor
``registry_automation``, :data:`pipelines.jobs.REGISTRY_CONDITION`); the cross-model tables follow
once (``cross_model_tables_automation``).

"Already evaluated" is read from what was materialized, not from the sensor's own memory: every
generation asset records the registry entry's fingerprint (``registry_fingerprint``) in its
materialization metadata, whoever launched the run. A model is launched in a study when its
partition has no materialization — and only in studies that have been run with a model at least
once: a study whose inputs were materialized without models (``pipelines.run --no-models``) is not
a request to run models.

Every request carries its cost plan's call count (tag ``metamorph/planned_calls``, e.g. ``288`` or
``up to 252``) and the ``metamorph plan`` command that prints the same number (tag
``metamorph/plan_command``); a local model's request also says about how long its calls take on
this machine at the pace its generation steps measured (tag ``metamorph/planned_time``,
:func:`assets.evaluations.planned_time`). The tick's log lists them with their total, and the
tick's cursor names every request (``<study> × <model>: N calls[, about T on this machine]``;
the sensor never reads it back): the UI's "Preview tick result" shows it as "Computed cursor
value", where its list of requests shows only the job name of each. The plan is that of
the study's inputs as they were last materialized (the options read back from that run's config,
:func:`assets.evaluations.input_options`) and the model job's defaults, with nothing cached
(:func:`metamorph.costplan.plan_calls`): cache hits make a new entry's run call fewer. It is
computed at tick time, not when the definitions load (every run process loads them, and planning
the shipped registry takes about 1.5 s), and once per study, entry and inputs per process.
"""

from __future__ import annotations

import shlex

import dagster as dg

from assets.evaluations import (
    input_options,
    latest_evaluation,
    planned_calls,
    planned_time,
)
from assets.partitions import model_partitions
from metamorph.errors import ConfigError, MetamorphError
from metamorph.models import WORKFLOW_PROVIDERS, ModelSpec, load_registry
from metamorph.study import Options, Study, studies
from pipelines.jobs import MODEL_JOBS
from resources.paths import registry_path

#: The model registry sensor's name (:func:`build_model_registry_sensor`).
REGISTRY_SENSOR = "model_registry_sensor"
#: The automation sensors' names (:mod:`pipelines.definitions`): a changed registry entry's
#: partitions, and the cross-model tables after model runs.
REGISTRY_AUTOMATION = "registry_automation"
CROSS_MODEL_AUTOMATION = "cross_model_tables_automation"
#: Every sensor of the code location by name, and what it is (``partial_run_sensor``:
#: :data:`pipelines.partial.partial_run_sensor`). A suite's schedule cannot take one of these names:
#: Dagster holds a code location's schedules and sensors under one set of names
#: (:func:`pipelines.components.load_project` checks it).
SENSORS = {
    REGISTRY_SENSOR: "the model registry sensor",
    REGISTRY_AUTOMATION: "the automation sensor of changed registry entries",
    CROSS_MODEL_AUTOMATION: "the automation sensor of the cross-model tables",
    "partial_run_sensor": "the sensor marking the tables of failed runs",
}


def studies_with_inputs(instance: dg.DagsterInstance) -> list[str]:
    """Studies whose input assets have been materialized (a model job needs them)."""
    return [
        name
        for name, study in studies().items()
        if all(instance.get_latest_materialization_event(dg.AssetKey([name, n])) is not None for n in study.inputs)
    ]


def studies_in_use(instance: dg.DagsterInstance) -> list[str]:
    """Studies with inputs whose generation asset has been materialized for at least one model."""
    return [
        s
        for s in studies_with_inputs(instance)
        if instance.get_latest_materialization_event(dg.AssetKey([s, studies()[s].generations])) is not None
    ]


#: The run tags holding a request's planned calls and the command that prints them.
PLANNED_CALLS_TAG = "metamorph/planned_calls"
PLAN_COMMAND_TAG = "metamorph/plan_command"
#: The run tag with how long a local model's planned calls take on this machine (:func:`assets.evaluations.planned_time`).
PLANNED_TIME_TAG = "metamorph/planned_time"


def plan_command(study: Study, model_id: str, options: Options) -> str:
    """``metamorph plan <study> --models <id>`` with the given ``options`` spelled as its flags."""
    words = ["metamorph", "plan", study.name, "--models", model_id]
    for o in study.all_options():
        if o.name not in options.given or o.name == "models":
            continue
        value = getattr(options, o.name)
        if o.flag:
            words += [o.flag_name] if value else []
        elif o.repeat:
            for v in value:
                words += [o.flag_name, str(v)]
        elif isinstance(value, (list, tuple)):
            words += [o.flag_name, *map(str, value)]
        else:
            words += [o.flag_name, str(value)]
    return shlex.join(words)


def _names(study: str, model_id: str) -> dict[str, str]:
    return {"metamorph/model": model_id, "metamorph/study": study}


SENSOR_RULE = (
    "Watches the model registry (METAMORPH_MODELS). A new model id becomes a partition; a new "
    "entry is evaluated in every study that has been run with a model. A changed entry, or one whose "
    "provider (OpenAI, Anthropic) now serves another version, is re-run by the sensor registry_automation "
    "(its generation partitions are stale), not by this one."
)


def sensor_description(registry: str | None = None) -> str:
    """The registry sensor's description: its rule, then what turning it on launches for the
    registry at ``registry`` (default: ``METAMORPH_MODELS``): at most one run of each study's
    model job per model (models × studies), each run named by its model partition, and where each
    run's planned calls are (its tags and the tick's log: :func:`evaluate_registry`)."""
    path = registry or registry_path()
    try:
        models = load_registry(path)
    except ConfigError as exc:
        return f"{SENSOR_RULE} Registry unreadable, so it launches nothing: {exc}"
    studies = list(MODEL_JOBS)
    ids = [m.id for m in models]
    return (
        f"{SENSOR_RULE} Turned on, it launches at most {len(ids)} model(s) × {len(studies)} studies = "
        f"{len(ids) * len(studies)} runs: one run of <study>_model_job per registered model ({', '.join(ids)}) "
        "in each study that has been run with a model, minus the models already evaluated; each request names its model (partition, tag metamorph/model, run key "
        "<study>:<model>:<fingerprint>). Each request also carries its cost plan's call count (tag "
        f"{PLANNED_CALLS_TAG}: the calls of the study's inputs as last materialized, nothing cached) and the "
        f"command printing the same number with tokens and cost (tag {PLAN_COMMAND_TAG}, `metamorph plan <study> "
        "--models <id>` with the inputs' options); a local model's request also says about how long its calls "
        f"take on this machine (tag {PLANNED_TIME_TAG}); the tick's log lists them with their total, and the "
        "tick's cursor names each request with its calls (Preview tick result shows it as the computed cursor "
        "value; its list shows only each request's job). They are "
        "planned when the sensor ticks, not here: the definitions load in every run process. To see them "
        "before turning it on: Preview tick result on this page evaluates a tick without launching."
    )


def build_model_registry_sensor(registry: str | None = None, jobs=None) -> dg.SensorDefinition:
    """The model registry sensor (:func:`evaluate_registry`), off by default, with
    :func:`sensor_description` of ``registry``; it launches ``jobs`` (default :data:`MODEL_JOBS`:
    the model jobs of the studies' default suites; pass the objects the code location holds)."""
    # Off by default: the shipped registry holds more models than `make demo` runs, and opening the UI
    # must not spend CPU or API money unasked. Turning it on evaluates every entry.
    return dg.sensor(
        name=REGISTRY_SENSOR,
        jobs=list(MODEL_JOBS.values()) if jobs is None else list(jobs),
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=sensor_description(registry),
    )(evaluate_registry)


def evaluate_registry(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
    """One tick of the registry sensor: partitions to add and runs to request (each tagged with its
    ``metamorph/model``, ``metamorph/study`` and ``metamorph/reason``)."""
    try:
        models = load_registry(registry_path())
    except ConfigError as exc:
        return dg.SkipReason(f"registry unreadable: {exc}")
    existing = set(context.instance.get_dynamic_partitions(model_partitions.name))
    new_ids = [m.id for m in models if m.id not in existing]
    in_use = studies_in_use(context.instance)
    runs = []
    plans: list[int | None] = []  # each request's planned calls (None: not planned)
    summary: list[str] = []  # each planned request in a few words, for the tick's cursor

    def plan_tags(study: Study, m: ModelSpec, options: Options, reason: str) -> dict[str, str]:
        command = plan_command(study, m.id, options)
        try:
            calls, upper = planned_calls(study, m, options)
        except (MetamorphError, ValueError) as exc:  # a loader's error names file, row, field
            context.log.warning(f"{study.name} × {m.id}: calls not planned: {exc}")
            plans.append(None)
            return {PLAN_COMMAND_TAG: command}
        plans.append(calls)
        up = "up to " if upper else ""
        when = planned_time(context.instance, m, calls)
        summary.append(f"{study.name} × {m.id}: {up}{calls:,} calls" + (f", {when}" if when else ""))
        context.log.info(f"{study.name} × {m.id} ({reason}): {up}{calls:,} calls with nothing cached (`{command}`)")
        return {
            PLANNED_CALLS_TAG: f"{up}{calls}",
            PLAN_COMMAND_TAG: command,
            **({PLANNED_TIME_TAG: when} if when else {}),
        }

    for s in in_use:
        study = studies()[s]
        options = input_options(context.instance, study)
        for m in models:
            if m.provider in WORKFLOW_PROVIDERS and not study.takes_documents:
                continue  # a workflow under test answers documents; this study sends prompts
            fp = m.fingerprint()
            ev = latest_evaluation(context.instance, s, m.id)
            if ev is not None and ev.fingerprint is not None:
                continue  # evaluated: a changed entry or served version is re-run by registry_automation
            reason = "new model"
            runs.append(
                dg.RunRequest(
                    job_name=MODEL_JOBS[s].name,
                    partition_key=m.id,
                    run_key=f"{s}:{m.id}:{fp[:16]}",
                    tags={**_names(s, m.id), "metamorph/reason": reason, **plan_tags(study, m, options, reason)},
                )
            )
    if plans:
        known = [c for c in plans if c is not None]
        context.log.info(
            f"{len(plans)} run(s) requested, {sum(known):,} planned calls in all"
            + (f" ({len(plans) - len(known)} not planned)" if len(known) < len(plans) else "")
            + " (Dagster launches each run key once)"
        )
    if not runs and not new_ids:
        return dg.SkipReason(
            "every model is evaluated (a changed registry entry is re-run by registry_automation)"
            if in_use
            else "no study has been run with a model yet"
        )
    return dg.SensorResult(
        run_requests=runs,
        dynamic_partitions_requests=[model_partitions.build_add_request(new_ids)] if new_ids else [],
        # never read back: "Preview tick result" shows it ("Computed cursor value"), naming each request's
        # study, model and planned calls, where its list shows only the job name per request
        cursor="; ".join(summary) if summary else None,
    )


model_registry_sensor = build_model_registry_sensor()
