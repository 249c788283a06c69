"""The code location: every study's assets, resources, jobs, schedules and sensors.

``workspace.yaml`` and ``[tool.dg]`` both load this module. All assets that touch the DuckDB
warehouse are in the pool ``duckdb`` (limit 1, set in ``dagster.yaml`` of the instance); the
executor is in-process (one step at a time; no process spawn per step on 2 cores).

Scaling out (README "Scaling out"): with ``METAMORPH_CELERY_BROKER`` set (a Redis URL) the executor
is dagster-celery's — every step becomes a task for celery workers (``dagster-celery worker start
-A dagster_celery.app -y config/celery-worker.yaml``), which needs an instance in PostgreSQL
(``config/dagster-scaleout.yaml``) and, for the generation cache shared by the workers,
``METAMORPH_CACHE_URL=postgresql://…``.
"""

import os
from pathlib import Path

import dagster as dg
import yaml
from dagster_duckdb import DuckDBResource

from assets import format_robustness, model_upgrades, order_probe, workflow_perturb, wrapper_sensitivity
from pipelines.jobs import INPUT_JOBS, MODEL_JOBS, model_upgrades_job
from pipelines.partial import partial_run_sensor
from pipelines.schedules import WEEKLY_SCHEDULES
from pipelines.sensors import build_model_registry_sensor
from resources import (EncoderResource, GenerationCacheResource, ModelRegistryResource, SafeDuckDBPandasIOManager, cache_path,
                       registry_path, warehouse_path)


STUDIES = [format_robustness, wrapper_sensitivity, workflow_perturb, order_probe]
#: Asset modules that span studies (group model_upgrades: the robustness report card).
CROSS_STUDY = [model_upgrades]


#: The celery workers' config (broker, backend, acknowledgement and redelivery settings), also the
#: celery executor's: the runs that send steps and the workers that take them read one file.
CELERY_CONFIG = Path(__file__).resolve().parents[1] / "config" / "celery-worker.yaml"


def celery_executor_config(path: Path = CELERY_CONFIG) -> dict:
    """The ``execution.config`` mapping of a dagster-celery worker config file (``broker``,
    ``backend``, ``config_source``), the config of the executor built by :func:`executor`."""
    return yaml.safe_load(path.read_text())["execution"]["config"]


def executor() -> dg.ExecutorDefinition:
    """In-process, or dagster-celery's executor when ``METAMORPH_CELERY_BROKER`` is set, configured
    from ``config/celery-worker.yaml`` (broker and result backend: that URL, read from the environment
    when a run starts; tasks acknowledged late and redelivered after a worker's death)."""
    if not os.environ.get("METAMORPH_CELERY_BROKER"):
        return dg.in_process_executor
    from dagster_celery import celery_executor

    return celery_executor.configured(celery_executor_config(), name="celery")


def build_definitions() -> dg.Definitions:
    return dg.Definitions(
        assets=dg.load_assets_from_modules([*STUDIES, *CROSS_STUDY]),
        asset_checks=dg.load_asset_checks_from_modules(STUDIES),
        jobs=[*INPUT_JOBS.values(), *MODEL_JOBS.values(), model_upgrades_job],
        schedules=WEEKLY_SCHEDULES,
        sensors=[build_model_registry_sensor(registry_path()), partial_run_sensor],
        resources={
            "io_manager": SafeDuckDBPandasIOManager(database=warehouse_path()),
            "model_registry": ModelRegistryResource(path=registry_path()),
            "generation_cache": GenerationCacheResource(path=cache_path()),
            "warehouse": DuckDBResource(database=warehouse_path()),
            "encoder": EncoderResource(),
        },
        executor=executor(),
    )


defs = build_definitions()
