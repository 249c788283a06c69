"""Suites (pipelines.components.StudySuite): a second suite of a study, declared in a defs.yaml beside
the study's default suite, has its own asset keys, group, jobs, config defaults and warehouse tables;
both run against a scripted model on the local HTTP stub. A bad suite is one line naming the file
and the attribute. `dg list defs` and `dg check defs` work from the project root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from tests.conftest import shared_sample
from tests.core.stub_http import Reply

REPO = Path(__file__).resolve().parents[2]
DG = Path(sys.executable).with_name("dg")


def chat(text):
    return Reply(
        200,
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "stub-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        },
    )


def dg_project(root: Path, package: str, suites: dict[str, str | bytes | None], monkeypatch) -> Path:
    """A dg project at ``root`` whose defs folder ``<package>/defs/`` holds one ``defs.yaml`` per suite
    (its text, its bytes, or ``None``: a directory named ``defs.yaml``); the package importable (``sys.path``)."""
    root.mkdir(parents=True)
    (root / "pyproject.toml").write_text(
        f'[tool.dg]\ndirectory_type = "project"\n\n[tool.dg.project]\nroot_module = "{package}"\n'
        f'defs_module = "{package}.defs"\n'
    )
    (root / package / "defs").mkdir(parents=True)
    (root / package / "__init__.py").write_text("")
    (root / package / "defs" / "__init__.py").write_text("")
    for name, text in suites.items():
        (root / package / "defs" / name).mkdir()
        target = root / package / "defs" / name / "defs.yaml"
        if text is None:
            target.mkdir()
        elif isinstance(text, bytes):
            target.write_bytes(text)
        else:
            target.write_text(text)
    monkeypatch.syspath_prepend(str(root))
    return root


def medqa_weekly(sample: Path, options: str = "{limit: 3, k: 2, no_routing: true}") -> str:
    """The suite's defs.yaml; ``options`` ending in ``# <name>`` names the suite <name> instead."""
    suite = options.split("# ")[1] if "# " in options else "medqa_weekly"
    return (
        "type: pipelines.components.StudySuite\n"
        "attributes:\n"
        "  study: format_robustness\n"
        f"  suite: {suite}\n"
        f'  sources: ["medqa:{sample}"]\n'
        f"  options: {options}\n"
        "  models: [stub]\n"
        '  schedule: {cron_schedule: "0 4 * * 1"}\n'
    )


def counts(db: Path, schema: str, tables: list[str]) -> dict[str, int]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return {t: con.execute(f'SELECT count(*) FROM "{schema}"."{t}"').fetchall()[0][0] for t in tables}
    finally:
        con.close()


#: A suite of order_probe named ``s`` (a schedule line may follow).
SUITE = "type: pipelines.components.StudySuite\nattributes:\n  study: order_probe\n  suite: s\n"

TABLES = ["source_instances", "rendered_documents", "workflow_generations", "extracted_decisions", "mr_flags"]


def test_a_second_suite_of_a_study_runs_beside_the_default_one(stub, metamorph_home, tmp_path, monkeypatch, capsys):
    from metamorph.study import studies
    from pipelines.definitions import build_definitions
    from pipelines.run import print_headline

    sample = shared_sample("medqa")
    default_yaml = (REPO / "pipelines" / "defs" / "format_robustness" / "defs.yaml").read_text()
    project = dg_project(
        tmp_path / "proj",
        "suites_two",
        {"format_robustness": default_yaml, "medqa_weekly": medqa_weekly(sample)},
        monkeypatch,
    )
    reg = tmp_path / "models.yaml"
    reg.write_text(
        f"models:\n  - id: stub\n    provider: openai_compatible\n    model: stub-model\n"
        f"    base_url: {stub.url}/v1\n    api_key_env: STUB_KEY\n    max_concurrency: 1\n"
    )
    monkeypatch.setenv("METAMORPH_MODELS", str(reg))
    monkeypatch.setenv("STUB_KEY", "k")
    stub.script("POST", "/v1/chat/completions", chat(json.dumps({"decision": "A", "evidence": ["fever"]})))

    defs = build_definitions(project)
    dg.Definitions.validate_loadable(defs)
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {"format_robustness/source_instances", "medqa_weekly/source_instances"} <= keys
    assert defs.resolve_asset_graph().get(dg.AssetKey(["medqa_weekly", "mr_flags"])).group_name == "medqa_weekly"
    assert defs.resolve_schedule_def("medqa_weekly_schedule").job_name == "medqa_weekly_model_job"
    assert defs.resolve_schedule_def("format_robustness_weekly").job_name == "format_robustness_model_job"
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["stub"])
        # the default suite as before: its run config names the ops <study>__<asset>
        for job, run_config, partition in (
            (
                "format_robustness_inputs_job",
                {"ops": {"format_robustness__source_instances": {"config": {"sources": ["construct"], "limit": 2}}}},
                None,
            ),
            (
                "format_robustness_model_job",
                {"ops": {"format_robustness__workflow_generations": {"config": {"k": 1}}}},
                "stub",
            ),
            ("format_robustness_tables_job", {}, None),
            # the suite's jobs with no run config: the defs.yaml's sources, limit and k are the defaults
            ("medqa_weekly_inputs_job", {}, None),
            ("medqa_weekly_model_job", {}, "stub"),
            ("medqa_weekly_tables_job", {}, None),
        ):
            res = defs.resolve_job_def(job).execute_in_process(
                instance=instance, run_config=run_config, partition_key=partition, raise_on_error=False
            )
            assert res.success, job
        # each suite's history is its own
        suite_gen = instance.fetch_materializations(dg.AssetKey(["medqa_weekly", "workflow_generations"]), limit=5)
        default_gen = instance.fetch_materializations(
            dg.AssetKey(["format_robustness", "workflow_generations"]), limit=5
        )
        assert (len(suite_gen.records), len(default_gen.records)) == (1, 1)
    db = metamorph_home / "metamorph.duckdb"
    # default: 2 construct records x 4 formats x k = 1 (mr_flags: one row per record and repeat, and
    # routing re-ran); suite: 3 MedQA rows x 4 formats x k = 2, routing left out (no_routing)
    assert counts(db, "format_robustness", [*TABLES, "routed_generations"]) == dict(
        zip([*TABLES, "routed_generations"], [2, 8, 8, 8, 2, 8])
    )
    assert counts(db, "medqa_weekly", TABLES) == dict(zip(TABLES, [3, 12, 24, 24, 6]))
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert con.execute("SELECT DISTINCT source FROM medqa_weekly.source_instances").fetchall() == [
            (f"medqa:{sample}",)
        ]
        assert con.execute("SELECT DISTINCT source FROM format_robustness.source_instances").fetchall() == [
            ("construct",)
        ]
        # the suite's lineage views read the suite's tables (24 generations), the default's its own (8)
        assert con.execute("SELECT count(*) FROM medqa_weekly.decision_lineage").fetchall() == [(24,)]
        assert con.execute("SELECT count(*) FROM format_robustness.decision_lineage").fetchall() == [(8,)]
        suite_tables = {
            r[0]
            for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'medqa_weekly'").fetchall()
        }
        assert "routed_generations" not in suite_tables and "workflow_generations" in suite_tables
    finally:
        con.close()
    # `metamorph run --suite`'s headline reads the suite's tables, the default's its own
    study = studies()["format_robustness"]
    capsys.readouterr()
    print_headline(study, str(db), study.values(no_routing=True), "medqa_weekly")
    suite_lines = capsys.readouterr().out.splitlines()
    print_headline(study, str(db), study.values(), None)
    default_lines = capsys.readouterr().out.splitlines()
    answered = [line.split("|")[1:5] for line in suite_lines if line.startswith("| stub/inline ")]
    assert [c.strip() for c in answered[0]] == ["stub/inline", "medqa", "3", "6"]  # instances, groups
    assert "| stub/inline   | medqa     | A         |  24 |" in suite_lines  # 3 rows x 4 formats x k = 2
    assert not any("construct" in line for line in suite_lines)
    assert not any("medqa" in line for line in default_lines) and any("construct" in line for line in default_lines)
    # the default suite: 8 calls, then routing's 8 rows (each document sent again in the best format)
    # of which the 2 already in that format are cache hits; the suite: 24 calls (other documents)
    assert len(stub.requests_to("/v1/chat/completions")) == 8 + 6 + 24


@pytest.mark.parametrize(
    "options, line",
    [
        ("{limit: 3, k: 0}", "options.k: must be a whole number from 1 to 100, got '0'"),
        (
            "{limit: 3, kk: 2}",
            "options.kk: format_robustness has no option 'kk'; it has ['budget_usd', 'formats', 'k', 'limit', "
            "'max_tokens', 'no_routing', 'sample_seed', 'sources']",
        ),
        (
            "{formats: [md]}",
            "options.formats: must include the baseline format txt (every metric compares a format with it): txt,md",
        ),
        ("{limit: 0}", "options.limit: must be a whole number >= 1, got '0'"),
        (
            "{} # metamorph_meta",
            "suite: 'metamorph_meta' is taken (the warehouse's write ledger); name the suite otherwise",
        ),
        ("{} # order_probe", "suite: 'order_probe' is the name of a study; name the suite otherwise"),
        (
            "{} # temp",
            "suite: 'temp' is a name DuckDB keeps for itself (a catalog of every connection); name the suite otherwise",
        ),
        (
            "{} # metamorph",
            "suite: 'metamorph' is a name DuckDB keeps for itself (the warehouse's catalog); name the suite otherwise",
        ),
        (
            "{} # order",
            "suite: 'order' is a name DuckDB keeps for itself (a reserved SQL keyword); name the suite otherwise",
        ),
        (
            "{} # information_schema",
            "suite: 'information_schema' is a name DuckDB keeps for itself (a system catalog); "
            "name the suite otherwise",
        ),
    ],
)
def test_a_bad_suite_is_one_line_naming_the_file_and_the_attribute(tmp_path, monkeypatch, options, line):
    """The component's error (the cause of Dagster's ComponentTreeException, which shows the tree)."""
    from metamorph.errors import ConfigError
    from pipelines.definitions import build_definitions

    package = "suites_" + tmp_path.name.rsplit("_", 1)[-1]  # one package per case (sys.modules keeps it)
    project = dg_project(tmp_path / "proj", package, {"medqa_weekly": medqa_weekly(tmp_path, options)}, monkeypatch)
    with pytest.raises(Exception) as info:
        build_definitions(project)
    exc = info.value
    while exc is not None and not isinstance(exc, ConfigError):
        exc = exc.__cause__ or exc.__context__
    assert str(exc) == f"{project / package / 'defs' / 'medqa_weekly' / 'defs.yaml'}: {line}"


def test_dg_lists_and_checks_the_suites_from_the_project_root():
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "400"}
    listed = subprocess.run(
        [str(DG), "list", "defs", "--json"], cwd=REPO, capture_output=True, text=True, timeout=300, env=env
    )
    assert listed.returncode == 0, listed.stderr[-2000:]
    found = json.loads(listed.stdout)
    jobs = {j["name"] for j in found["jobs"]}
    from metamorph.study import studies

    assert {f"{s}_{kind}_job" for s in studies() for kind in ("inputs", "model")} <= jobs
    assert {s["name"] for s in found["schedules"]} == {f"{s}_weekly" for s in studies()}
    checked = subprocess.run([str(DG), "check", "defs"], cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert checked.returncode == 0, checked.stderr[-2000:]
    assert "All definitions loaded successfully" in checked.stdout + checked.stderr


def test_every_command_of_the_suites_page_runs_verbatim(tmp_path):
    """docs/suites.md's ```bash block in one ``bash -e`` from the root of a copy of the project (its
    files as git lists them), the virtualenv's ``bin`` on ``PATH`` (the page says it is active) and the
    copy first on ``PYTHONPATH`` (the editable install points at this checkout): the suite is
    scaffolded, checked, listed and planned, its inputs written to its own tables, nothing else."""
    import re
    import shutil

    block = re.findall(r"```bash\n(.*?)```", (REPO / "docs" / "suites.md").read_text(), flags=re.S)
    assert len(block) == 1
    copy = tmp_path / "project"
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    for f in files:
        if (REPO / f).is_file() and not f.startswith(("data/", "pipelines/defs/medqa_weekly")):
            (copy / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, copy / f)
    env = {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(copy),
        "METAMORPH_HOME": str(tmp_path / "home"),
        "DAGSTER_HOME": str(tmp_path / "dagster_home"),
        "OMP_WAIT_POLICY": "PASSIVE",
        "HF_HUB_OFFLINE": "1",
    }
    out = subprocess.run(["bash", "-e", "-c", block[0]], cwd=copy, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, (out.stdout + out.stderr)[-6000:]
    lines = out.stdout.splitlines()
    assert "All definitions loaded successfully." in lines
    assert "['medqa_weekly_inputs_job', 'medqa_weekly_model_job', 'medqa_weekly_tables_job']" in lines
    [plan] = [line for line in lines if line.startswith("  smollm2 workflow_generations:")]
    assert plan.startswith("  smollm2 workflow_generations: 16 requests, 0 cache hits, 16 calls, ")
    assert "Inputs materialized (medqa_weekly); no model was run, so there are no new metric tables." in lines
    con = duckdb.connect(str(tmp_path / "home" / "metamorph.duckdb"), read_only=True)
    try:
        tables = con.execute(
            "SELECT schema_name, table_name FROM duckdb_tables() WHERE schema_name <> 'metamorph_meta'"
        ).fetchall()
        assert sorted(tables) == [("medqa_weekly", "rendered_documents"), ("medqa_weekly", "source_instances")]
        assert counts(
            tmp_path / "home" / "metamorph.duckdb", "medqa_weekly", ["source_instances", "rendered_documents"]
        ) == {
            "source_instances": 2,
            "rendered_documents": 8,
        }
    finally:
        con.close()


def test_a_suite_that_is_not_one_of_the_study_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    """`metamorph plan|run <study> --suite <name>` with a name that is no suite of the study: one line
    naming the study's suites, exit 2, nothing written (no DAGSTER_HOME, no warehouse)."""
    from metamorph.cli import main

    monkeypatch.setenv("METAMORPH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    line = (
        "error: --suite 'nosuch': format_robustness has no suite 'nosuch'; the suites of format_robustness are "
        "['format_robustness'] (pipelines/defs/<suite>/defs.yaml)"
    )
    for command in ("plan", "run"):
        capsys.readouterr()
        assert main([command, "format_robustness", "--suite", "nosuch", "--no-models"]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [line]
    # a suite of another study
    assert main(["plan", "order_probe", "--suite", "format_robustness"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --suite 'format_robustness': a suite of format_robustness, not of order_probe; the suites of "
        "order_probe are ['order_probe'] (pipelines/defs/<suite>/defs.yaml)"
    )
    assert not (tmp_path / "home").exists() and not (tmp_path / "dagster_home").exists()


@pytest.mark.parametrize(
    "suites, line",
    [
        (
            {"broken": "type: pipelines.components.StudySuite\nattributes:\n  study: format_robustnes\n"},
            "broken/defs.yaml: study: no study 'format_robustnes'; the studies are ['format_robustness', "
            "'order_probe', 'workflow_perturb', 'wrapper_sensitivity']",
        ),
        (
            {"broken": "type: pipelines.components.StudySuite\nattributes:\n  options: {k: 2\n"},
            "broken/defs.yaml:4: YAML syntax: while parsing a flow mapping: expected ',' or '}', but got "
            "'<stream end>'",
        ),
        (
            {"broken": "type: pipelines.components.StudySuite\nattributes: {}\n"},
            "broken/defs.yaml: study: Field required",
        ),
        (
            {"broken": "type: pipelines.components.StudySuite\nattributes:\n  study: order_probe\n  sutie: s\n"},
            "broken/defs.yaml:4: sutie: Extra inputs are not permitted",
        ),
        (
            {
                "a": "type: pipelines.components.StudySuite\nattributes:\n  study: format_robustness\n  suite: s\n",
                "b": "type: pipelines.components.StudySuite\nattributes:\n  study: order_probe\n  suite: s\n",
            },
            "b/defs.yaml: suite: 's' is also the suite of {defs_dir}/a/defs.yaml; each suite needs its own name "
            "(it names the suite's tables, jobs and schedule)",
        ),
        (
            {"broken": SUITE + "  schedule: {cron_schedule: 'every monday'}\n"},
            "broken/defs.yaml: schedule.cron_schedule: 'every monday' is not a cron expression (five fields: "
            "minute hour day-of-month month day-of-week, e.g. '0 4 * * 1')",
        ),
        (
            {"broken": SUITE + "  schedule: {cron_schedule: '0 4 * * 1', execution_timezone: Mars/Olympus}\n"},
            "broken/defs.yaml: schedule.execution_timezone: 'Mars/Olympus' is not a time zone (an IANA name such "
            "as 'UTC' or 'Europe/Paris')",
        ),
        (
            {"broken": SUITE + "  schedule: {cron_schedule: '0 4 * * 1', name: 'nightly run'}\n"},
            "broken/defs.yaml: schedule.name: 'nightly run' is not a schedule name (letters, digits and _)",
        ),
        (
            {
                "a": SUITE.replace("suite: s", "suite: a")
                + "  schedule: {cron_schedule: '0 4 * * 1', name: nightly}\n",
                "b": SUITE.replace("suite: s", "suite: b")
                + "  schedule: {cron_schedule: '0 5 * * 1', name: nightly}\n",
            },
            "b/defs.yaml: schedule.name: 'nightly' is also the schedule of {defs_dir}/a/defs.yaml; each schedule "
            "needs its own name",
        ),
        (
            {"broken": SUITE + "  schedule: {cron_schedule: '0 4 * * 1', name: order_probe_weekly}\n"},
            "broken/defs.yaml: schedule.name: 'order_probe_weekly' is the weekly schedule of the default suite of "
            "order_probe; each schedule needs its own name",
        ),
        (
            {"broken": ""},
            "broken/defs.yaml: no suite in it (the file is empty or only comments); a defs.yaml declares "
            "type: pipelines.components.StudySuite and its attributes (docs/suites.md)",
        ),
        ({"broken": "# later\n"}, None),  # the same line
        ({"broken": None}, "broken/defs.yaml: is a directory, expected a suite's YAML file"),
        (
            {"broken": SUITE.encode() + b"  sources: ['medqa:caf\xe9.jsonl']\n"},
            "broken/defs.yaml:5: not valid UTF-8: byte 0xe9 at column 23 (invalid continuation byte)",
        ),
        (
            {"broken": SUITE + "  models: [nosuch]\n  models: registry\n"},
            "broken/defs.yaml:6: models: given twice (lines 5 and 6); YAML would keep the last one silently",
        ),
        (
            {"broken": "- study: order_probe\n"},
            "broken/defs.yaml:1: a suite is a mapping of type and attributes, got a list",
        ),
        (
            {"broken": SUITE.replace("StudySuite", "StudySuit")},
            "broken/defs.yaml:1: type: 'pipelines.components.StudySuit' is not a component type (module "
            "pipelines.components has no StudySuit); a suite's type is pipelines.components.StudySuite",
        ),
        (
            {"broken": SUITE.replace("pipelines.components", "pipelines.componets")},
            "broken/defs.yaml:1: type: 'pipelines.componets.StudySuite' is not a component type (no module "
            "pipelines.componets); a suite's type is pipelines.components.StudySuite",
        ),
        (
            {"broken": SUITE + "  models: 5\n"},
            "broken/defs.yaml:5: models: must be 'registry' or a list of registry model ids, got 5",
        ),
        (
            {"broken": SUITE + "  options: [k, 2]\n"},
            "broken/defs.yaml:5: options: must be a mapping of option names to values, got ['k', 2]",
        ),
        (
            {"broken": SUITE + "  schedule: weekly\n"},
            "broken/defs.yaml: schedule: must be a mapping with cron_schedule (and optionally execution_timezone, "
            "name), got 'weekly'",
        ),
        (
            {"broken": SUITE + "  schedule: {cron_schedule: '0 4 * * 1', name: model_registry_sensor}\n"},
            "broken/defs.yaml: schedule.name: 'model_registry_sensor' is the name of a sensor (the model registry "
            "sensor); each schedule needs a name no sensor or other schedule takes",
        ),
        (
            {"broken": SUITE + "  schedule: {cron_schedule: '0 4 * * 1', name: cross_model_tables_automation}\n"},
            "broken/defs.yaml: schedule.name: 'cross_model_tables_automation' is the name of a sensor (the "
            "automation sensor of the cross-model tables); each schedule needs a name no sensor or other schedule "
            "takes",
        ),
    ],
)
def test_a_broken_defs_folder_is_one_line_for_plan_and_run(tmp_path, monkeypatch, suites, line):
    """Any suite of the folder that does not load (a bad attribute, YAML syntax, a missing or unknown
    attribute, a name two suites take) is one ConfigError line naming its file, for `--suite` and for
    the code location alike, instead of Dagster's tree and stack frames."""
    from metamorph.errors import ConfigError
    from metamorph.study import get
    from pipelines.components import chosen_suite
    from pipelines.definitions import build_definitions

    package = "broken_" + tmp_path.name.rsplit("_", 1)[-1]
    project = dg_project(tmp_path / "proj", package, suites, monkeypatch)
    defs_dir = project / package / "defs"
    if line is None:  # a file of comments only: as an empty one
        line = (
            "broken/defs.yaml: no suite in it (the file is empty or only comments); a defs.yaml declares "
            "type: pipelines.components.StudySuite and its attributes (docs/suites.md)"
        )
    line = f"{defs_dir}/{line}".replace("{defs_dir}", str(defs_dir))
    with pytest.raises(ConfigError) as info:
        chosen_suite(get("order_probe"), "other", project_root=project)
    assert str(info.value) == line
    with pytest.raises(ConfigError) as info:
        build_definitions(project)
    assert str(info.value) == line


def test_dg_scaffold_writes_a_suite_that_loads(tmp_path):
    """`dg scaffold defs pipelines.components.StudySuite <name>` wrote `attributes: {}`, which no
    suite loads from (study is required); it now writes a suite of format_robustness named <name>."""
    import yaml as pyyaml
    from dagster.components.scaffold.scaffold import ScaffoldRequest

    from pipelines.components import StudySuite, StudySuiteScaffolder

    target = tmp_path / "medqa_weekly"
    target.mkdir()
    request = ScaffoldRequest(
        type_name="pipelines.components.StudySuite",
        target_path=target,
        scaffold_format="yaml",
        project_root=REPO,
        params=None,
    )
    StudySuiteScaffolder().scaffold(request)
    written = pyyaml.safe_load((target / "defs.yaml").read_text())
    assert written == {
        "type": "pipelines.components.StudySuite",
        "attributes": {"study": "format_robustness", "suite": "medqa_weekly", "models": "registry"},
    }
    assert StudySuite(**written["attributes"]).name == "medqa_weekly"


def test_the_sensor_names_a_schedule_cannot_take_are_the_code_locations_sensors():
    """pipelines.sensors.SENSORS (what a suite's schedule name is checked against) names every
    sensor of the code location, and nothing else."""
    from pipelines.definitions import defs
    from pipelines.sensors import SENSORS

    assert (
        sorted(SENSORS)
        == sorted(s.name for s in defs.sensors)
        == [
            "cross_model_tables_automation",
            "model_registry_sensor",
            "partial_run_sensor",
            "registry_automation",
        ]
    )


def test_a_bad_source_of_a_suite_names_its_defs_yaml(tmp_path):
    """A source the suite's defs.yaml gives that does not load (here: no such file) is one line naming
    the defs.yaml and the attribute before the source's own error; a source given on the command
    line is named alone."""
    from metamorph.errors import InputError
    from metamorph.study import get
    from pipelines.components import StudySuite, suite_values

    study = get("format_robustness")
    suite = StudySuite(study="format_robustness", suite="mine", sources=[f"medqa:{tmp_path / 'mine.jsonl'}"])
    suite._file = tmp_path / "defs" / "mine" / "defs.yaml"
    with pytest.raises(InputError) as e:
        study.sources_of(suite_values(study, suite, {}))
    assert str(e.value) == f"{suite._file}: sources: {tmp_path / 'mine.jsonl'}: file does not exist"
    with pytest.raises(InputError) as e:
        study.sources_of(suite_values(study, suite, {"sources": [f"medqa:{tmp_path / 'other.jsonl'}"]}))
    assert str(e.value) == f"{tmp_path / 'other.jsonl'}: file does not exist"
