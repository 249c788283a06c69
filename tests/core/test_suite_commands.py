"""`metamorph trace`, `metamorph verdict` and the report card take a suite: two suites of
format_robustness on the MedQA sample, evaluated by two scripted models on the local HTTP stub with
different replies, and each command with --suite prints that suite's own rows and numbers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import duckdb

from tests.conftest import shared_sample
from tests.core.test_suites import REPO, chat, dg_project

METAMORPH = Path(sys.executable).with_name("metamorph")


def decision(letter: str):
    return chat(json.dumps({"decision": letter, "evidence": ["fever"]}))


def project_copy(root: Path, suites: dict[str, str]) -> Path:
    """The project's ``pipelines`` package, ``pyproject.toml``, ``workspace.yaml`` and ``config/`` at
    ``root`` with the suites ``suites`` (folder → defs.yaml) added to its defs folder; the rest of
    the project (``metamorph``, ``assets``, ``resources``, ``sql``) is this checkout's: a command run
    in the copy has ``PYTHONPATH`` = the copy, then :data:`REPO` (the editable install may point at
    another checkout)."""
    shutil.copytree(REPO / "pipelines", root / "pipelines", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "config", root / "config")
    for f in ("pyproject.toml", "workspace.yaml"):
        shutil.copy2(REPO / f, root / f)
    for name, text in suites.items():
        (root / "pipelines" / "defs" / name).mkdir()
        (root / "pipelines" / "defs" / name / "defs.yaml").write_text(text)
    return root


def copy_cli(copy: Path, tmp_path: Path, env: dict[str, str], drop: tuple[str, ...] = ()):
    """``cli(*args)``: ``metamorph *args`` run in the project copy ``copy`` (``PYTHONPATH`` = the copy,
    then :data:`REPO`; ``DAGSTER_HOME`` under ``tmp_path``), with this process's environment less
    ``drop`` and plus ``env``; returns the completed process (stdout and stderr captured)."""
    full = {
        **{k: v for k, v in os.environ.items() if k not in drop},
        "PYTHONPATH": os.pathsep.join([str(copy), str(REPO)]),
        "DAGSTER_HOME": str(tmp_path / "dagster_home"),
        "OMP_WAIT_POLICY": "PASSIVE",
        **env,
    }

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(METAMORPH), *args], cwd=copy, env=full, capture_output=True, text=True, timeout=900)

    return cli


def card_accuracy(db: Path) -> dict[tuple[str, str], float]:
    """(model, slice) → value of the current format_robustness accuracy rows of the report card."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute(
            "SELECT model_id, slice, value FROM model_upgrades.robustness_report_card "
            "WHERE is_current AND study = 'format_robustness' AND metric = 'accuracy'"
        ).fetchall()
    finally:
        con.close()
    return {(m, s): round(v, 4) for m, s, v in rows}


def test_trace_verdict_and_the_card_read_the_suite_they_are_given(stub, metamorph_home, tmp_path, monkeypatch, capsys):
    from metamorph.cli import main
    from pipelines.definitions import build_definitions

    # the sample's rows a limit of 2 takes: medqa-635 (B), medqa-989 (B); of 3: medqa-635 (B), medqa-273 (A), medqa-989 (B)
    sample = shared_sample("medqa")
    suite_yaml = (
        "type: pipelines.components.StudySuite\n"
        "attributes:\n"
        "  study: format_robustness\n"
        "  suite: medqa_weekly\n"
        f'  sources: ["medqa:{sample}"]\n'
        "  options: {limit: 3, k: 1, no_routing: true, max_tokens: 32}\n"
        "  models: [base, cand]\n"
    )
    default_yaml = (REPO / "pipelines" / "defs" / "format_robustness" / "defs.yaml").read_text()
    reg = tmp_path / "models.yaml"
    reg.write_text(
        "models:\n"
        + "".join(
            f"  - id: {m}\n    provider: openai_compatible\n    model: stub-model\n    status: {status}\n"
            f"    base_url: {stub.url}/{m}/v1\n    api_key_env: STUB_KEY\n    max_concurrency: 1\n"
            for m, status in (("base", "approved"), ("cand", "candidate"))
        )
    )
    monkeypatch.setenv("METAMORPH_MODELS", str(reg))
    monkeypatch.setenv("STUB_KEY", "k")
    db = metamorph_home / "metamorph.duckdb"

    # the default suite, in process: 2 MedQA rows (B, B); base and cand both answer B (2 of 2)
    stub.script("POST", "/base/v1/chat/completions", decision("B"))
    stub.script("POST", "/cand/v1/chat/completions", decision("B"))
    project = dg_project(tmp_path / "proj", "suites_cmds", {"format_robustness": default_yaml}, monkeypatch)
    defs = build_definitions(project)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["base", "cand"])
        config = {"sources": [f"medqa:{sample}"], "limit": 2}
        for job, run_config, partition in (
            (
                "format_robustness_inputs_job",
                {"ops": {"format_robustness__source_instances": {"config": config}}},
                None,
            ),
            (
                "format_robustness_model_job",
                {"ops": {"format_robustness__workflow_generations": {"config": {"k": 1}}}},
                "base",
            ),
            (
                "format_robustness_model_job",
                {"ops": {"format_robustness__workflow_generations": {"config": {"k": 1}}}},
                "cand",
            ),
            ("format_robustness_tables_job", {}, None),
            ("model_upgrades_job", {}, None),
        ):
            res = defs.resolve_job_def(job).execute_in_process(
                instance=instance, run_config=run_config, partition_key=partition, raise_on_error=False
            )
            assert res.success, job
    default_card = card_accuracy(db)
    assert default_card == {("base", "ingestion=inline"): 100.0, ("cand", "ingestion=inline"): 100.0}

    # the suite medqa_weekly, by `metamorph run --suite` in a copy of the project that declares it:
    # 3 MedQA rows (B, A, B), base answers C (0 of 3), cand A (1 of 3)
    stub.script("POST", "/base/v1/chat/completions", decision("C"))
    stub.script("POST", "/cand/v1/chat/completions", decision("A"))
    copy = project_copy(tmp_path / "copy", {"medqa_weekly": suite_yaml})
    cli = copy_cli(copy, tmp_path, {})

    out = cli("run", "format_robustness", "--suite", "medqa_weekly")
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    # the card of a run of the suite reads the suite's tables for format_robustness
    suite_card = card_accuracy(db)
    assert suite_card == {("base", "ingestion=inline"): 0.0, ("cand", "ingestion=inline"): 33.3333}

    # trace: the suite's 3 rows and cand's replies there (A); the default suite's 2 rows (B)
    traced = cli(
        *("trace", "--study", "format_robustness", "--suite", "medqa_weekly", "--metric", "accuracy"),
        *("--model", "cand", "--where", "format=txt", "--json"),
    )
    assert traced.returncode == 0, traced.stderr
    suite_trace = json.loads(traced.stdout)
    assert (suite_trace["view"], suite_trace["total"]) == ("medqa_weekly.decision_lineage", 3)
    assert sorted((r["instance_id"], json.loads(r["response_text"])["decision"]) for r in suite_trace["rows"]) == [
        ("medqa-273", "A"),
        ("medqa-635", "A"),
        ("medqa-989", "A"),
    ]
    capsys.readouterr()
    argv = ["trace", "--study", "format_robustness", "--metric", "accuracy", "--model", "cand", "--where", "format=txt"]
    assert main([*argv, "--json"]) == 0
    default_trace = json.loads(capsys.readouterr().out)
    assert (default_trace["view"], default_trace["total"]) == ("format_robustness.decision_lineage", 2)
    assert sorted((r["instance_id"], json.loads(r["response_text"])["decision"]) for r in default_trace["rows"]) == [
        ("medqa-635", "B"),
        ("medqa-989", "B"),
    ]

    # verdict: cand - base accuracy is +1/3 in the suite, 0 in the default suite
    verdict = cli("verdict", "--model", "cand", "--suite", "medqa_weekly", "--json")
    assert verdict.returncode == 0, verdict.stderr
    suite_verdict = json.loads(verdict.stdout)
    assert suite_verdict["suites"] == {"format_robustness": "medqa_weekly"}
    accuracy = [r for r in suite_verdict["rows"] if r["metric"] == "accuracy"]
    assert {(r["n_items"], r["difference"]) for r in accuracy} == {(3, 0.333)}  # +33.3 pp, as printed
    assert main(["verdict", "--model", "cand", "--study", "format_robustness", "--json"]) == 0
    default_verdict = json.loads(capsys.readouterr().out)
    assert "suites" not in default_verdict
    accuracy = [r for r in default_verdict["rows"] if r["metric"] == "accuracy"]
    assert {(r["n_items"], r["difference"]) for r in accuracy} == {(2, 0.0)}

    # an unknown suite: one line naming the study's suites, exit 2
    bad = cli(*argv, "--suite", "nosuch")
    assert (bad.returncode, bad.stderr.strip()) == (
        2,
        "metamorph trace: error: --suite 'nosuch': format_robustness has no suite 'nosuch'; the suites of "
        "format_robustness are ['format_robustness', 'medqa_weekly'] (pipelines/defs/<suite>/defs.yaml)",
    )
    bad = cli("verdict", "--model", "cand", "--study", "format_robustness", "--suite", "nosuch")
    assert (bad.returncode, bad.stderr.strip()) == (
        2,
        "metamorph verdict: error: --suite 'nosuch': format_robustness has no suite 'nosuch'; the suites of "
        "format_robustness are ['format_robustness', 'medqa_weekly'] (pipelines/defs/<suite>/defs.yaml)",
    )


def test_the_default_suites_yaml_options_apply_without_suite_and_the_command_line_wins(stub, tmp_path):
    """`metamorph plan|run <study>` without --suite take the sources, options and models of the
    study's default defs.yaml (pipelines/defs/<study>/defs.yaml); options on the command line win."""
    sample = shared_sample("medqa")
    default_yaml = (
        "type: pipelines.components.StudySuite\n"
        "attributes:\n"
        "  study: format_robustness\n"
        f'  sources: ["medqa:{sample}"]\n'
        "  options: {limit: 2, k: 2, no_routing: true}\n"
        "  models: [stub]\n"
    )
    copy = project_copy(tmp_path / "copy", {})
    (copy / "pipelines" / "defs" / "format_robustness" / "defs.yaml").write_text(default_yaml)
    reg = tmp_path / "models.yaml"
    reg.write_text(
        "models:\n"
        + "".join(
            f"  - id: {m}\n    provider: openai_compatible\n    model: stub-model\n"
            f"    base_url: {stub.url}/{m}/v1\n    api_key_env: {key}\n    max_concurrency: 1\n"
            for m, key in (("stub", "STUB_KEY"), ("other", "METAMORPH_TEST_UNSET_KEY"))
        )
    )
    cli = copy_cli(
        copy,
        tmp_path,
        {"METAMORPH_HOME": str(tmp_path / "home"), "METAMORPH_MODELS": str(reg), "STUB_KEY": "k"},
        drop=("METAMORPH_TEST_UNSET_KEY",),
    )

    def generations(out: subprocess.CompletedProcess) -> list[str]:
        assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
        return [line.split(",")[0] for line in out.stdout.splitlines() if " workflow_generations: " in line]

    # the YAML's: 2 MedQA records x 4 formats x k = 2, for its model stub only
    assert generations(cli("plan", "format_robustness")) == ["  stub workflow_generations: 16 requests"]
    # the command line's k and models over the YAML's (its sources and limit kept)
    assert generations(cli("plan", "format_robustness", "--k", "1", "--models", "other")) == [
        "  other workflow_generations: 8 requests"
    ]
    # the run: the YAML's model only (the other entry's key is not set: it is not checked), its sources,
    # limit and k, routing left out (no_routing)
    stub.script("POST", "/stub/v1/chat/completions", decision("B"))
    out = cli("run", "format_robustness")
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    assert len(stub.requests_to("/stub/v1/chat/completions")) == 16
    con = duckdb.connect(str(tmp_path / "home" / "metamorph.duckdb"), read_only=True)
    try:
        assert con.execute(
            "SELECT count(*), count(DISTINCT source) FROM format_robustness.source_instances"
        ).fetchall() == [(2, 1)]
        assert con.execute("SELECT count(*) FROM format_robustness.workflow_generations").fetchall() == [(16,)]
        tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        assert "routed_generations" not in tables
    finally:
        con.close()


def test_the_plans_restate_no_default():
    """The plans take an option's default from its declaration (or the study's DEFAULT_PARAMS), never
    from a number written after ``or`` (``options.k or 3``), which drifts from the run's, nor from a
    ``max_tokens`` written as a number (the study's ``max_tokens_default`` or its option's default
    is the declaration)."""
    import re

    restated = re.compile(r"options\.\w+\)?\s+or\s+-?\d|[\"']max_tokens[\"']\s*:\s*-?\d")
    found = []
    for path in [*sorted((REPO / "metamorph" / "studies").glob("*/plan.py")), REPO / "metamorph" / "costplan.py"]:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if restated.search(code) and not code.strip().startswith(('"', "'")):
                found.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert found == []


def test_the_assets_restate_no_plan_default():
    """A generation asset's own config field (``study_config(..., field=(type, Field(default=…)))``)
    takes its default from the study's plan module (``DEFAULT_PARAMS``, its constants), which
    ``metamorph plan`` plans with: never a number or a list of numbers written again in the asset."""
    import ast

    def literal(node) -> bool:
        if isinstance(node, ast.UnaryOp):
            node = node.operand
        if isinstance(node, (ast.List, ast.Tuple)):
            return bool(node.elts) and all(literal(e) for e in node.elts)
        return isinstance(node, ast.Constant) and type(node.value) in (int, float)

    found = []
    for path in sorted((REPO / "assets").glob("*.py")):
        for call in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "study_config"):
                continue
            for kw in call.keywords:
                for field in ast.walk(kw.value):
                    if isinstance(field, ast.Call) and getattr(field.func, "id", None) == "Field":
                        default = next((k.value for k in field.keywords if k.arg == "default"), None)
                        if default is not None and literal(default):
                            found.append(f"{path.relative_to(REPO)}:{field.lineno}: {kw.arg}")
    assert found == []


def test_a_suites_unknown_model_id_is_one_line_naming_its_defs_yaml(tmp_path):
    """A suite whose ``models`` names an id the registry lacks: `metamorph plan|run --suite` print
    one line naming the suite's defs.yaml and the attribute, exit 2, and write nothing; the same id
    given with --models is the command line's (no defs.yaml named)."""
    suite_yaml = (
        "type: pipelines.components.StudySuite\n"
        "attributes:\n"
        "  study: format_robustness\n"
        "  suite: mine\n"
        "  models: [smollm2, nosuch]\n"
    )
    copy = project_copy(tmp_path / "copy", {"mine": suite_yaml})
    reg = tmp_path / "models.yaml"
    reg.write_text("models:\n  - {id: m1, provider: openai_compatible, model: x, base_url: 'http://127.0.0.1:9/v1'}\n")
    cli = copy_cli(copy, tmp_path, {"METAMORPH_HOME": str(tmp_path / "home"), "METAMORPH_MODELS": str(reg)})

    line = (
        f"error: {copy / 'pipelines' / 'defs' / 'mine' / 'defs.yaml'}: models: unknown model id(s) "
        "['nosuch', 'smollm2']; the registry has ['m1']"
    )
    for command in ("plan", "run"):
        out = cli(command, "format_robustness", "--suite", "mine")
        assert (out.returncode, out.stdout, out.stderr) == (2, "", line + "\n"), command
    out = cli("plan", "format_robustness", "--suite", "mine", "--models", "nosuch")
    assert (out.returncode, out.stderr) == (2, "error: unknown model id(s) ['nosuch']; the registry has ['m1']\n")
    assert not (tmp_path / "home").exists() and not (tmp_path / "dagster_home").exists()


def test_definitions_that_do_not_load_are_one_line_before_anything_is_written(tmp_path):
    """A module of the defs folder that defines a sensor under the name of one of the project's
    (Dagster: "Duplicate definition found for …", raised when the repository is first built): `metamorph
    run` prints Dagster's one line and exits 2 before DAGSTER_HOME or METAMORPH_HOME is created (it
    was a traceback from the first job, after both were)."""
    copy = project_copy(tmp_path / "copy", {})
    (copy / "pipelines" / "defs" / "extra").mkdir()
    (copy / "pipelines" / "defs" / "extra" / "sensors.py").write_text(
        "import dagster as dg\n\n\n"
        '@dg.sensor(name="model_registry_sensor")\n'
        "def my_sensor(context):\n"
        '    return dg.SkipReason("never")\n'
    )
    out = copy_cli(copy, tmp_path, {"METAMORPH_HOME": str(tmp_path / "home")})(
        "run", "format_robustness", "--no-models"
    )
    assert (out.returncode, out.stdout, out.stderr) == (
        2,
        "",
        "error: the code location's definitions do not load: Duplicate definition found for model_registry_sensor\n",
    )
    assert not (tmp_path / "home").exists() and not (tmp_path / "dagster_home").exists()
