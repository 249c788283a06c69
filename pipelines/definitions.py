"""The code location: every suite's assets, checks, jobs and schedules, and the resources and sensors.

``workspace.yaml`` and ``[tool.dg]`` both load this module. The suites are the components of the
defs folder ``pipelines/defs/`` (``[tool.dg.project] defs_module``), one ``defs.yaml`` each
(:class:`pipelines.components.StudySuite`), loaded with ``dg.load_from_defs_folder``; a study with
no ``defs.yaml`` for its default suite (a study just added) gets its default suite all the same. All assets that touch the DuckDB
warehouse are in the pool ``duckdb`` (its limit set in ``dagster.yaml`` of the instance); the
executor is in-process by default (one step at a time, no process spawned per step).

Scaling out (docs/scaling-out.md): the executor is chosen by ``METAMORPH_EXECUTOR`` (see
:func:`executor`); with ``METAMORPH_CELERY_BROKER`` set (a Redis URL) it defaults to
dagster-celery's — every step becomes a task for celery workers (``dagster-celery worker start
-A dagster_celery.app -y config/celery-worker.yaml``), which needs an instance in PostgreSQL
(``config/dagster-scaleout.yaml``) and, for the generation cache shared by the workers,
``METAMORPH_CACHE_URL=postgresql://…``.
"""

import os
from pathlib import Path

import dagster as dg
import yaml

from metamorph.datasets import read_text
from metamorph.study import studies

from assets import model_upgrades
from assets.registry import REGISTRY_ENTRY, registry_entry
from pipelines.components import StudySuite, load_project, suite_definitions
from pipelines.inputs import checked_at_launch
from pipelines.jobs import model_upgrades_job
from pipelines.partial import partial_run_sensor
from pipelines.schedules import WEEKLY_CRON
from pipelines.sensors import CROSS_MODEL_AUTOMATION, REGISTRY_AUTOMATION, build_model_registry_sensor
from resources import (
    EncoderResource,
    GenerationCacheResource,
    ModelRegistryResource,
    SafeDuckDBPandasIOManager,
    WarehouseResource,
    registry_path,
)
from resources.paths import CACHE, WAREHOUSE


#: Asset modules that span studies (group model_upgrades: the robustness report card).
CROSS_STUDY = [model_upgrades]
#: The project's folder (``pyproject.toml``): ``dg.load_from_defs_folder`` reads its ``[tool.dg]``.
PROJECT_ROOT = Path(__file__).resolve().parents[1]


#: The celery workers' config (broker, backend, acknowledgement and redelivery settings), also the
#: celery executor's: the runs that send steps and the workers that take them read one file.
CELERY_CONFIG = Path(__file__).resolve().parents[1] / "config" / "celery-worker.yaml"


def celery_executor_config(path: Path = CELERY_CONFIG) -> dict:
    """The ``execution.config`` mapping of a dagster-celery worker config file (``broker``,
    ``backend``, ``config_source``), the config of the executor built by :func:`executor`."""
    return yaml.safe_load(read_text(path, "celery worker config"))["execution"]["config"]


#: ``METAMORPH_EXECUTOR`` values: one process per run, a celery task per step, a Kubernetes Job per step.
EXECUTORS = ("in_process", "celery", "k8s")


def executor() -> dg.ExecutorDefinition:
    """The code location's executor, chosen by ``METAMORPH_EXECUTOR`` (one of :data:`EXECUTORS`);
    unset: ``celery`` when ``METAMORPH_CELERY_BROKER`` is set, else ``in_process``.

    * ``in_process``: every step in the run's process, one at a time;
    * ``celery``: dagster-celery's executor configured from ``config/celery-worker.yaml`` (broker and
      result backend: ``METAMORPH_CELERY_BROKER``, read when a run starts; tasks acknowledged late and
      redelivered after a worker's death);
    * ``k8s``: dagster-k8s's ``k8s_job_executor`` (the optional dependency ``.[k8s]``), each step a
      Kubernetes Job; namespace and ``max_concurrent`` come from the run config's ``execution``.

    Raises :class:`metamorph.errors.ConfigError` naming the variable for any other value.
    """
    from metamorph.errors import ConfigError

    name = os.environ.get("METAMORPH_EXECUTOR") or (
        "celery" if os.environ.get("METAMORPH_CELERY_BROKER") else "in_process"
    )
    if name == "in_process":
        return dg.in_process_executor
    if name == "celery":
        from dagster_celery import celery_executor

        return celery_executor.configured(celery_executor_config(), name="celery")
    if name == "k8s":
        from dagster_k8s import k8s_job_executor

        return k8s_job_executor
    raise ConfigError(f"METAMORPH_EXECUTOR: unknown executor {name!r} (one of {', '.join(EXECUTORS)})")


def suites_definitions(project_root: Path = PROJECT_ROOT) -> dg.Definitions:
    """Every suite: the components of the project's defs folder, plus the default suite
    (:class:`StudySuite` of the study alone, weekly schedule) of each study the folder has no
    ``<study>_inputs_job`` for."""
    found = load_project(project_root)[1]  # dg.ComponentTree: the folder, as dg.load_from_defs_folder loads it
    declared = {j.name for j in found.jobs or ()}
    implicit = [
        suite_definitions(StudySuite(study=name, schedule={"cron_schedule": WEEKLY_CRON, "name": f"{name}_weekly"}))
        for name in studies()
        if f"{name}_inputs_job" not in declared
    ]
    return dg.Definitions.merge(found, *implicit)


def build_definitions(project_root: Path = PROJECT_ROOT) -> dg.Definitions:
    """The code location's definitions: :func:`suites_definitions` of the dg project at
    ``project_root`` (default: this one), the report card, the sensors, the resources and the
    executor. Every asset config class is checked when a run is launched, whatever job launches it
    (:func:`pipelines.inputs.checked_at_launch`)."""
    suites = suites_definitions(project_root)
    # the registry sensor launches the default suites' model jobs, as the suites' definitions hold them
    model_jobs = [j for j in suites.jobs or () if j.name in {f"{s}_model_job" for s in studies()}]
    tables = [j.selection for j in suites.jobs or () if j.name.endswith("_tables_job")]
    per_model = [j.selection for j in suites.jobs or () if j.name.endswith("_model_job")]
    return dg.Definitions.merge(suites, _shared_definitions(model_jobs, tables, per_model))


def _union(selections) -> dg.AssetSelection:
    target = selections[0]
    for sel in selections[1:]:
        target = target | sel
    return target


def registry_automation_sensor(selections) -> dg.AutomationConditionSensorDefinition:
    """The sensor evaluating the registry entries' observation (:mod:`assets.registry`) and the
    per-model assets' conditions (:data:`pipelines.jobs.REGISTRY_CONDITION`) over the union of
    ``selections`` (every suite's ``<suite>_model_job`` selection): an entry whose fingerprint or
    served provider version changed. Off by default: its runs call providers."""
    return dg.AutomationConditionSensorDefinition(
        REGISTRY_AUTOMATION,
        target=_union(selections) | dg.AssetSelection.assets(REGISTRY_ENTRY),
        default_status=dg.DefaultSensorStatus.STOPPED,
        description="Observes the model registry every 5 minutes (model_registry/registry_entry: each entry's "
        "fingerprint and the version its provider serves are its partition's data version) and re-runs the "
        "generation partitions, with their per-model tables, of every entry whose fingerprint or served version "
        "changed, in every suite that evaluated it. Off by default: its runs call providers.",
    )


def cross_model_tables_sensor(selections) -> dg.AutomationConditionSensorDefinition:
    """The sensor evaluating the cross-model tables' automation condition
    (:func:`pipelines.jobs.cross_model_condition`) over the union of ``selections`` (every suite's
    ``<suite>_tables_job`` selection). On by default: it requests runs only after model partitions
    were updated, and the tables cost no provider call."""
    return dg.AutomationConditionSensorDefinition(
        CROSS_MODEL_AUTOMATION,
        target=_union(selections),
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Builds each suite's cross-model metric tables and model_comparison once after its model "
        "runs: when a model partition (or an input) was updated and no model run of the suite is in progress.",
    )


def _shared_definitions(model_jobs, tables, per_model) -> dg.Definitions:
    return dg.Definitions(
        assets=[checked_at_launch(a) for a in dg.load_assets_from_modules(CROSS_STUDY)] + [registry_entry],
        jobs=[model_upgrades_job],
        sensors=[
            build_model_registry_sensor(registry_path(), model_jobs),
            partial_run_sensor,
            # no suite with cross-model tables: nothing for the sensor to build
            *([cross_model_tables_sensor(tables)] if tables else []),
            registry_automation_sensor(per_model),
        ],
        resources={
            # the warehouse relative to METAMORPH_HOME, resolved when a run opens it (resources.paths)
            "io_manager": SafeDuckDBPandasIOManager(database=WAREHOUSE, registry_models_only=True),
            "model_registry": ModelRegistryResource(path=registry_path()),
            # relative to METAMORPH_HOME, or METAMORPH_CACHE_URL read in the run (never shown)
            "generation_cache": GenerationCacheResource(
                path=dg.EnvVar("METAMORPH_CACHE_URL") if os.environ.get("METAMORPH_CACHE_URL") else CACHE
            ),
            "warehouse": WarehouseResource(database=WAREHOUSE),
            "encoder": EncoderResource(),
        },
        executor=executor(),
    )


defs = build_definitions()
