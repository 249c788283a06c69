"""Kubernetes configuration checked without a cluster (docs/kubernetes.md):
config/dagster-k8s.yaml (the instance), deploy/k8s/values.yaml (Dagster Helm chart values),
deploy/k8s/Containerfile (the code location's image) and the executor chosen by METAMORPH_EXECUTOR.

The dagster-k8s checks need the optional dependency ``.[k8s]`` (dagster-k8s 0.29.27, the library
release of dagster 1.13.27) and are skipped without it, naming the install command. No image is
built here: that needs a container engine.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._config import validate_config
from dagster._core.instance.config import dagster_instance_config

REPO = Path(__file__).resolve().parents[2]
K8S_MISSING = "dagster-k8s not installed: pip install -e '.[k8s]'"


def load(rel: str) -> dict:
    return yaml.safe_load((REPO / rel).read_text())


def test_the_k8s_instance_yaml_loads_and_shares_storage_pools_monitoring_and_logs_with_the_scaleout_instance(
    tmp_path, monkeypatch
):
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text((REPO / "config" / "dagster-k8s.yaml").read_text())
    monkeypatch.setenv("METAMORPH_DAGSTER_PG_URL", "postgresql+psycopg2://dagster@db:5432/dagster")
    config, _ = dagster_instance_config(str(home))  # validates against Dagster's instance schema
    assert config["run_launcher"]["module"] == "dagster_k8s.launcher"
    assert config["run_launcher"]["class"] == "K8sRunLauncher"
    k8s, local = load("config/dagster-k8s.yaml"), load("config/dagster-scaleout.yaml")
    for key in ("storage", "concurrency", "run_monitoring", "python_logs", "telemetry", "nux"):
        assert k8s[key] == local[key], key
    assert (config["telemetry"], config["nux"]) == ({"enabled": False}, {"enabled": False})


def test_the_helm_values_use_the_charts_documented_keys_and_the_instance_settings_of_the_scaleout_yaml():
    """deploy/k8s/values.yaml against the Dagster chart's documented value keys (helm/dagster/values.yaml
    and its schema, chart 1.13): only these top-level keys and, for the parts set here, these fields."""
    values = load("deploy/k8s/values.yaml")
    top = {
        "global",
        "rbacEnabled",
        "serviceAccount",
        "dagster-user-deployments",
        "runLauncher",
        "postgresql",
        "generatePostgresqlPasswordSecret",
        "additionalInstanceConfig",
        "concurrency",
        "dagsterDaemon",
        "pythonLogs",
        "telemetry",
        "dagsterWebserver",
        "imagePullSecrets",
        "computeLogManager",
        "scheduler",
        "ingress",
        "retention",
        "migrate",
        "busybox",
        "rabbitmq",
        "redis",
        "flower",
        "generateCeleryConfigSecret",
    }
    assert set(values) <= top, set(values) - top
    user = values["dagster-user-deployments"]
    assert set(user) <= {"enabled", "enableSubchart", "imagePullSecrets", "deployments"}
    assert user["enabled"] is True and user["enableSubchart"] is True
    [dep] = user["deployments"]
    deployment_keys = {
        "name",
        "image",
        "dagsterApiGrpcArgs",
        "codeServerArgs",
        "includeConfigInLaunchedRuns",
        "port",
        "env",
        "envConfigMaps",
        "envSecrets",
        "annotations",
        "nodeSelector",
        "affinity",
        "tolerations",
        "podSecurityContext",
        "securityContext",
        "resources",
        "livenessProbe",
        "readinessProbe",
        "startupProbe",
        "labels",
        "volumeMounts",
        "volumes",
        "schedulerName",
    }
    assert set(dep) <= deployment_keys and {"name", "image", "port"} <= set(dep)
    assert set(dep["image"]) == {"repository", "tag", "pullPolicy"} and dep["image"]["pullPolicy"] in {
        "Always",
        "IfNotPresent",
        "Never",
    }
    assert dep["dagsterApiGrpcArgs"] == ["-m", "pipelines.definitions", "-a", "defs"]
    assert dep["env"]["METAMORPH_EXECUTOR"] == "k8s" and all(isinstance(v, str) for v in dep["env"].values())
    launcher = values["runLauncher"]
    assert set(launcher) == {"type", "config"} and launcher["type"] == "K8sRunLauncher"
    assert set(launcher["config"]) == {"k8sRunLauncher"}
    launcher_keys = {
        "image",
        "imagePullPolicy",
        "jobNamespace",
        "loadInclusterConfig",
        "kubeconfigFile",
        "envConfigMaps",
        "envSecrets",
        "envVars",
        "volumeMounts",
        "volumes",
        "labels",
        "failPodOnRunFailure",
        "resources",
        "schedulerName",
        "securityContext",
        "runK8sConfig",
    }
    k8s_launcher = launcher["config"]["k8sRunLauncher"]
    assert set(k8s_launcher) <= launcher_keys
    # required by the chart's schema
    assert {
        "imagePullPolicy",
        "loadInclusterConfig",
        "envConfigMaps",
        "envSecrets",
        "envVars",
        "volumeMounts",
        "volumes",
    } <= set(k8s_launcher)
    assert set(values["postgresql"]) <= {
        "image",
        "enabled",
        "postgresqlHost",
        "postgresqlUsername",
        "postgresqlPassword",
        "postgresqlDatabase",
        "postgresqlParams",
        "postgresqlScheme",
        "service",
    }
    assert values["postgresql"]["enabled"] is False and set(values["postgresql"]["service"]) == {"port"}
    assert set(values["pythonLogs"]) <= {"pythonLogLevel", "managedPythonLoggers", "dagsterHandlerConfig"}
    assert set(values["concurrency"]) <= {"enabled", "pools", "runs"}
    # the chart's runMonitoring/concurrency are off; the instance gets the scale-out settings verbatim
    assert values["concurrency"]["enabled"] is False and values["dagsterDaemon"]["runMonitoring"]["enabled"] is False
    local = load("config/dagster-scaleout.yaml")
    assert values["additionalInstanceConfig"] == {
        "concurrency": local["concurrency"],
        "run_monitoring": local["run_monitoring"],
        "nux": local["nux"],
    }
    assert values["telemetry"] == local["telemetry"] == {"enabled": False}
    assert values["pythonLogs"] == {
        "managedPythonLoggers": local["python_logs"]["managed_python_loggers"],
        "pythonLogLevel": local["python_logs"]["python_log_level"],
    }


def test_the_containerfile_installs_offline_from_the_wheels_built_in_its_first_stage_and_serves_the_code_location():
    text = (REPO / "deploy" / "k8s" / "Containerfile").read_text()
    stages = [line.split()[-1] for line in text.splitlines() if line.startswith("FROM ")]
    assert stages == ["wheels", "runtime"]
    runtime = text[text.index("AS runtime") :]
    installs = [line for line in runtime.replace("\\\n", " ").splitlines() if "pip install" in line]
    assert installs and all(part.count("--no-index") == part.count("pip install") for part in installs), (
        installs
    )  # nothing fetched in the runtime stage
    assert "HF_HUB_OFFLINE=1" in runtime and "PIP_NO_INDEX=1" in runtime
    assert '"-m", "pipelines.definitions", "-a", "defs"' in runtime
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {".venv", ".git", "data"} <= set(ignored)


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({}, "in_process"),
        ({"METAMORPH_CELERY_BROKER": "redis://h:1/0"}, "celery"),
        ({"METAMORPH_CELERY_BROKER": "redis://h:1/0", "METAMORPH_EXECUTOR": "in_process"}, "in_process"),
    ],
)
def test_the_executor_is_chosen_by_the_environment(env, name, monkeypatch):
    from pipelines.definitions import executor

    for var in ("METAMORPH_CELERY_BROKER", "METAMORPH_EXECUTOR"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    assert executor().name == name


def test_an_unknown_executor_is_one_clear_error(monkeypatch):
    from metamorph.errors import ConfigError
    from pipelines.definitions import executor

    monkeypatch.setenv("METAMORPH_EXECUTOR", "dask")
    with pytest.raises(ConfigError) as err:
        executor()
    assert str(err.value) == "METAMORPH_EXECUTOR: unknown executor 'dask' (one of in_process, celery, k8s)"


def test_the_k8s_run_launcher_config_of_the_instance_validates_against_dagster_k8s():
    k8s = pytest.importorskip("dagster_k8s", reason=K8S_MISSING)
    assert k8s.__version__ == "0.29.27"
    launcher = load("config/dagster-k8s.yaml")["run_launcher"]
    res = validate_config(dg.Shape(k8s.K8sRunLauncher.config_type()), launcher["config"])
    assert res.success, [e.message for e in res.errors]
    # a misspelt key is caught (the check can fail)
    bad = validate_config(dg.Shape(k8s.K8sRunLauncher.config_type()), {**launcher["config"], "job_namespaces": "x"})
    assert not bad.success


def test_with_metamorph_executor_k8s_a_model_job_runs_each_step_as_a_k8s_job_and_its_run_config_validates(monkeypatch):
    pytest.importorskip("dagster_k8s", reason=K8S_MISSING)
    from pipelines.definitions import build_definitions

    monkeypatch.setenv("METAMORPH_EXECUTOR", "k8s")
    monkeypatch.delenv("METAMORPH_CELERY_BROKER", raising=False)
    job = build_definitions().resolve_job_def("order_probe_model_job")
    assert job.executor_def.name == "k8s"
    dg.validate_run_config(job, {"execution": {"config": {"job_namespace": "metamorph", "max_concurrent": 4}}})
    with pytest.raises(dg.DagsterInvalidConfigError):
        dg.validate_run_config(job, {"execution": {"config": {"max_concurrency": 4}}})
