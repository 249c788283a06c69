"""A study is one value (``metamorph.study.Study``): discovered from its package, iterated by the jobs,
sensors, schedules, report card and both commands; ``metamorph run`` and ``metamorph plan`` take the
same options, checked by the same parser, with the words the launchpad uses."""

from __future__ import annotations

import argparse

import pytest

from metamorph.cli import _parser, main
from metamorph.study import Option, studies

STUDIES = sorted(studies())


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def _command(name: str) -> argparse.ArgumentParser:
    return _subparsers(_parser())[name]


def _option_strings(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings} - {"-h", "--help"}


def test_the_studies_are_the_four_packages():
    assert STUDIES == ["format_robustness", "order_probe", "workflow_perturb", "wrapper_sensitivity"]
    for name, study in studies().items():
        assert study.name == name and study.sql_dir.is_dir(), name


def test_run_and_plan_take_the_same_options_for_every_study():
    run, plan = _subparsers(_command("run")), _subparsers(_command("plan"))
    assert sorted(run) == sorted(plan) == STUDIES
    for name in STUDIES:
        assert _option_strings(plan[name]) == _option_strings(run[name]) | {
            "--registry",
            "--cache",
            "--detect",
            "--alpha",
            "--power",
            "--discordance",
        }, name
    assert _option_strings(run["format_robustness"]) == {
        "--suite",
        "--source",
        "--limit",
        "--max-tokens",
        "--models",
        "--budget-usd",
        "--no-models",
        "--k",
        "--no-routing",
        "--formats",
        "--sample-seed",
        "--sequential",
        "--batch",
    }
    assert _option_strings(run["workflow_perturb"]) - _option_strings(run["format_robustness"]) == {
        "--llm-goldens",
        "--judge-variants",
        "--judge-constrained",
    }


#: (study, bad option, the message after "error: ")
BAD = [
    ("format_robustness", ["--k", "0"], "argument --k: must be a whole number from 1 to 100, got '0'"),
    ("format_robustness", ["--limit", "0"], "argument --limit: must be a whole number >= 1, got '0'"),
    ("format_robustness", ["--max-tokens", "-5"], "argument --max-tokens: must be a whole number >= 1, got '-5'"),
    (
        "format_robustness",
        ["--formats", "txt,odt"],
        "argument --formats: unknown format 'odt'; the known formats are txt, md, json, csv, html, yaml, pdf, docx, "
        "xlsx",
    ),
    (
        "format_robustness",
        ["--budget-usd", "nan"],
        "argument --budget-usd: must be an amount in USD >= 0, or -1 for no budget; got 'nan'",
    ),
    (
        "order_probe",
        ["--budget-usd", "-5"],
        "argument --budget-usd: must be an amount in USD >= 0, or -1 for no budget; got '-5'",
    ),
    (
        "order_probe",
        ["--settings", "bogus"],
        "argument --settings: invalid choice: 'bogus' (choose from 'zero_shot', 'cot', 'few_shot')",
    ),
    ("workflow_perturb", ["--max-tokens", "8"], "argument --max-tokens: must be a whole number >= 16, got '8'"),
    ("workflow_perturb", ["--judge-variants", "0"], "argument --judge-variants: must be a whole number >= 1, got '0'"),
    (
        "wrapper_sensitivity",
        ["--seeds", "0", "-1"],
        "argument --seeds: must be a whole number from 0 to 2147483647, got '-1'",
    ),
]


@pytest.mark.parametrize(("study", "argv", "message"), BAD, ids=[f"{s}{a[0]}" for s, a, _ in BAD])
def test_a_bad_value_is_the_same_line_and_exit_2_in_run_and_plan_and_writes_nothing(
    study, argv, message, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("METAMORPH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dh"))
    for command in ("run", "plan"):
        assert main([command, study, *argv]) == 2
        out = capsys.readouterr()
        prog = f"metamorph {command} {study}"
        assert (out.out, out.err) == ("", f"{prog}: error: {message}  (see: {prog} --help)\n")
    assert not (tmp_path / "home").exists() and not (tmp_path / "dh").exists()


def test_an_option_of_another_study_is_unrecognized_in_run_and_plan(capsys):
    for command in ("run", "plan"):
        assert main([command, "order_probe", "--no-routing"]) == 2
        assert capsys.readouterr().err == (
            "metamorph: error: unrecognized arguments: --no-routing  (see: metamorph --help)\n"
        )


def test_budget_minus_one_is_no_budget_in_both():
    for command in ("run", "plan"):
        args = _parser().parse_args([command, "order_probe", "--budget-usd", "-1"])
        options = studies()["order_probe"].from_args(args)
        assert options.budget_usd is None and "budget_usd" not in options.given


def test_the_help_of_a_study_lists_its_options_only_grouped_common_and_its_title(capsys):
    assert main(["run", "format_robustness", "--help"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: metamorph run format_robustness ")
    title = studies()["format_robustness"].title
    assert "\ncommon:\n" in text and f"\n{title}:\n" in text
    common, own = text.index("\ncommon:\n"), text.index(f"\n{title}:\n")
    assert common < text.index("  --source SOURCE ", common) < own < text.index("  --k K ", own)
    assert "repeats per document (1 to 100) (default: 3)" in text
    for other in ("--seeds", "--settings", "--llm-goldens", "--judge-variants", "--constrained-arm"):
        assert other not in text
    assert main(["plan", "order_probe", "--help"]) == 0
    text = capsys.readouterr().out
    assert "--settings {zero_shot,cot,few_shot}" in text and "--k" not in text and "--registry REGISTRY" in text


def _config_classes():
    from pipelines.definitions import defs
    from pipelines.inputs import config_class

    out = {}
    for name in STUDIES:
        for a in defs.resolve_all_asset_specs():
            if a.group_name == name:
                op = defs.resolve_assets_def(a.key).op
                out[(name, a.key.path[-1])] = config_class(op)
    return out


#: A bad value of each option with a target, as text for the command line and as the config value.
BAD_VALUES = {
    "limit": ("0", 0),
    "max_tokens": ("-5", -5),
    "budget_usd": ("nan", float("nan")),
    "k": ("101", 101),
    "seeds": ("-1", [-1]),
    "llm_goldens": ("0", 0),
    "judge_variants": ("0", 0),
    "settings": ("bogus", ["bogus"]),
    "formats": ("txt,odt", ["txt", "odt"]),
}


def test_every_option_target_is_a_config_field_that_rejects_what_the_command_line_rejects():
    """Each (asset, field) an option writes to exists in that asset's config class, and a bad value
    fails there with the command line's words (the launchpad and ``metamorph run`` agree)."""
    import pydantic

    from pipelines.inputs import one_line

    classes = _config_classes()
    checked = 0
    for name, study in studies().items():
        for o in study.all_options():
            for asset, fld in o.targets:
                cls = classes[(name, asset)]
                assert cls is not None and fld in cls.model_fields, (name, asset, fld)
                if o.name not in BAD_VALUES:
                    continue
                text, value = BAD_VALUES[o.name]
                with pytest.raises(argparse.ArgumentTypeError) as cli:
                    if o.choices is not None and text not in o.choices:
                        raise argparse.ArgumentTypeError(
                            f"invalid choice: {text!r} (choose from {', '.join(map(repr, o.choices))})"
                        )
                    o.parse(text)
                with pytest.raises(pydantic.ValidationError) as cfg:
                    cls(**{fld: value})
                assert one_line(cfg.value) == f"{fld}: {cli.value}", (name, asset, fld)
                checked += 1
    assert (
        checked == 20
    )  # limit, max_tokens, budget_usd (× its assets) of the four studies, k, settings, seeds, goldens, variants, formats


def test_every_study_has_its_jobs_sensor_schedule_card_and_plan():
    """What a study's ``Study`` declares is all the shared machinery needs: its two jobs, the
    registry sensor's and the weekly schedule's targets, its report-card tables (assets of the
    study) and its run config (every option target an asset of the study's group)."""
    import dagster as dg

    from assets.model_upgrades import CARD_SOURCES
    from pipelines.definitions import defs

    sensor = defs.resolve_sensor_def("model_registry_sensor")
    sensed = {j.name for j in sensor.jobs}
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    for name, study in studies().items():
        inputs = defs.resolve_job_def(f"{name}_inputs_job")
        model = defs.resolve_job_def(f"{name}_model_job")
        assert {k.path[-1] for k in inputs.asset_layer.executable_asset_keys} == set(study.inputs)
        assert dg.AssetKey([name, study.generations]) in model.asset_layer.executable_asset_keys
        # the model job materializes per-model assets; the tables job the cross-model ones, with their condition
        tables = defs.resolve_job_def(f"{name}_tables_job").asset_layer.executable_asset_keys
        assert dg.AssetKey([name, "model_comparison"]) in tables
        assert not tables & model.asset_layer.executable_asset_keys
        graph = defs.resolve_asset_graph()
        assert all(graph.get(k).partitions_def is None and graph.get(k).automation_condition for k in tables)
        assert f"{name}_model_job" in sensed
        assert defs.resolve_schedule_def(f"{name}_weekly").job_name == f"{name}_model_job"
        assert CARD_SOURCES[name] == study.card
        for t in study.card.tables:
            assert f"{name}/{t}" in keys, (name, t)
        for asset in study.target_assets() | {study.source_asset} | set(study.budget_assets):
            assert f"{name}/{asset}" in keys, (name, asset)


def test_options_are_the_defaults_unless_given():
    study = studies()["format_robustness"]
    options = study.values(k=2)
    assert (options.k, options.sources, options.limit, options.no_routing, options.budget_usd) == (
        2,
        ["construct"],
        None,
        False,
        None,
    )
    assert options.given == {"k"}
    with pytest.raises(TypeError, match=r"format_robustness has no option\(s\) \['seeds'\]"):
        study.values(seeds=[0])
    assert Option("llm_goldens", "").flag_name == "--llm-goldens"


def deferred_parts(value) -> list:
    """Every :class:`metamorph.study.Deferred` in a study's fields (and its Card and Comparison)."""
    import dataclasses

    from metamorph.study import Deferred

    if isinstance(value, Deferred):
        return [value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [d for f in dataclasses.fields(value) for d in deferred_parts(getattr(value, f.name))]
    return []


def test_every_deferred_part_of_every_study_resolves_and_pickles():
    import pickle

    from metamorph.study import Deferred

    found = {name: sorted(d.target for d in deferred_parts(study)) for name, study in studies().items()}
    assert found["format_robustness"] == [
        "metamorph.studies.format_robustness.lineage:TRACES",
        "metamorph.studies.format_robustness.plan:cost_steps",
        "metamorph.studies.format_robustness.plan:not_sent_notes",
        "metamorph.studies.format_robustness.report:card_rows",
        "metamorph.studies.format_robustness.report:comparison_scores",
        "metamorph.studies.format_robustness.report:planned_cells",
    ]
    assert "metamorph.studies.workflow_perturb.cli:COMMANDS" in found["workflow_perturb"]
    for study in studies().values():
        for part in deferred_parts(study):
            assert part.resolve() is not None, part.target
            assert pickle.loads(pickle.dumps(part)) == part and hash(part) == hash(Deferred(part.target, part.value))
    traces = studies()["order_probe"].lineage()
    assert isinstance(traces, dict) and traces  # value=True: the table itself, not a call of it
    with pytest.raises(ModuleNotFoundError):
        Deferred("metamorph.studies.no_such_module:f")()


#: The throwaway study's package: docs/adding-a-study.md's files, every field of its ``Study`` set.
TOY_PACKAGE = {
    "__init__.py": "",
    "vocab.py": """
__all__ = ["WIDTHS"]

WIDTHS = ("narrow", "wide")
""",
    "report.py": """
import pandas as pd

__all__ = ["card_rows", "comparison_scores", "headline", "planned_cells"]


def headline(con):
    return "toy headline"


def card_rows(generations, extra=None):
    return generations


def comparison_scores(generations):
    return generations


def planned_cells(options, specs=()):
    return pd.DataFrame({"metric": ["width_ok"], "slice": ["all"], "n_items": [2], "outcomes": [1]})
""",
    "lineage.py": """
from metamorph.trace import MetricTrace

__all__ = ["TRACES"]

TRACES = {
    "width_ok": MetricTrace(
        view="width_lineage", model="model_id", id="item", slices={}, input="item", answer="item", reason="''"
    )
}
""",
    "cli.py": """
__all__ = ["COMMANDS"]


def _add_arguments(parser):
    parser.add_argument("--name", default="toy")


def _run(args):
    print(f"hello from {args.name}")
    return 0


COMMANDS = {"toy-hello": ("say hello", "The toy study's own command.", _add_arguments, _run)}
""",
    "study.py": """
from pathlib import Path

from metamorph.study import Card, Comparison, Deferred, Option, Study, positive
from metamorph.studies.toy_study import vocab


def _load_sources(specs, limit):
    items = [f"{spec}-{i}" for spec in specs for i in range(3)]
    return items[:limit] if limit else items


def _cost_steps(spec, options):
    from metamorph.costplan import PlanStep

    return [PlanStep.exact("toy_generations", [])]


def _plan_notes(spec, options):
    return [f"toy note for {spec.id}"]


def _headline(con, options):
    from metamorph.studies.toy_study.report import headline

    return headline(con)


STUDY = Study(
    name="toy_study",
    title="Toy study",
    description="A study made of the files docs/adding-a-study.md names.",
    inputs=("toy_items",),
    source_asset="toy_items",
    generations="toy_generations",
    budget_assets=("toy_generations",),
    default_sources=("toy",),
    limit_rule="the first N items",
    sources_help="Toy specs.",
    limit_help="Keep the first N ≥ 1 items of each source; -1 = every item.",
    max_tokens_default=8,
    max_tokens_help="Completion limit (N ≥ 1).",
    load_sources=_load_sources,
    cost_steps=_cost_steps,
    plan_notes=_plan_notes,
    headline=_headline,
    headline_without_models=False,
    takes_documents=False,
    sequential=False,
    card=Card(
        ("toy_generations", "toy_extra"),
        Deferred("metamorph.studies.toy_study.report:card_rows"),
        optional=("toy_extra",),
    ),
    options=(
        Option(
            "width",
            "items per prompt",
            positive,
            default=2,
            targets=(("toy_generations", "width"),),
            config_help="Items per prompt (N ≥ 1).",
        ),
    ),
    vocab=vocab,
    compared_metrics={"width_ok": True},
    comparison=Comparison(
        ("toy_generations",),
        Deferred("metamorph.studies.toy_study.report:comparison_scores"),
        Deferred("metamorph.studies.toy_study.report:planned_cells"),
    ),
    lineage=Deferred("metamorph.studies.toy_study.lineage:TRACES", value=True),
    commands=Deferred("metamorph.studies.toy_study.cli:COMMANDS", value=True),
    sql_dir=Path(__file__).resolve().parents[2] / "sql" / "toy_study",
    assets_module="assets.toy_study",
    sampling=(),
)
""",
}

TOY_ASSETS = """
import dagster as dg
import pandas as pd
from pydantic import Field

from assets._common import BudgetConfig, LimitConfig, study_config
from metamorph.studies.toy_study.study import STUDY
from assets.partitions import model_partitions

ItemsConfig = study_config(STUDY, "toy_items", LimitConfig, name="ItemsConfig", module=__name__)


@dg.asset(key_prefix=["toy_study"], group_name="toy_study", pool="duckdb")
def toy_items(config: ItemsConfig) -> pd.DataFrame:
    return pd.DataFrame({"item": STUDY.load(config.sources, config.row_limit)})


GenerationConfig = study_config(
    STUDY,
    "toy_generations",
    BudgetConfig,
    name="GenerationConfig",
    module=__name__,
    temperature=(float, Field(default=0.0, description="Sampling temperature.")),
)


@dg.asset(
    key_prefix=["toy_study"],
    group_name="toy_study",
    pool="duckdb",
    partitions_def=model_partitions,
    metadata={"partition_expr": "model_id"},
)
def toy_generations(context, config: GenerationConfig, toy_items: pd.DataFrame) -> pd.DataFrame:
    return toy_items.assign(model_id=context.partition_key)


@dg.asset(
    key_prefix=["toy_study"],
    group_name="toy_study",
    pool="duckdb",
    partitions_def=model_partitions,
    metadata={"partition_expr": "model_id"},
)
def toy_extra(toy_generations: pd.DataFrame) -> pd.DataFrame:
    return toy_generations
"""

TOY_CHECK = """
import sys
from pathlib import Path

import assets
import metamorph.studies

root = Path(sys.argv[1])
metamorph.studies.__path__.append(str(root / "studies"))
assets.__path__.append(str(root / "assets"))

from metamorph.cli import main
from metamorph.study import studies

assert "toy_study" in studies()
from assets.model_upgrades import CARD_SOURCES
from pipelines.definitions import defs

assert "toy_study" in CARD_SOURCES
print(sorted(k.to_user_string() for k in defs.resolve_job_def("toy_study_inputs_job").asset_layer.executable_asset_keys))
print(sorted(k.to_user_string() for k in defs.resolve_job_def("toy_study_model_job").asset_layer.executable_asset_keys))
print("toy_study_model_job" in {j.name for j in defs.resolve_sensor_def("model_registry_sensor").jobs})
print(defs.resolve_schedule_def("toy_study_weekly").job_name)

# every part of the study is read from its fields: the verdict sources, the traces, the commands
from metamorph.sql import sql_path
from metamorph.trace import study_traces
from metamorph.verdict import sources

print(sources()["toy_study"].tables, sources()["toy_study"].directions, sorted(study_traces()["toy_study"]))
print(sql_path("toy_study", "lineage_views").parent == root / "sql" / "toy_study")

# the layout tests see the study
import tests.core.test_layout as layout

assert "toy_study" in layout.STUDIES
layout.test_no_module_finds_a_part_of_a_study_by_its_module_name()
layout.test_each_study_declares_its_vocabulary_once_in_its_vocab_module()
layout.test_no_study_restates_an_options_declared_default()
layout.test_the_studies_are_discovered_in_one_place()
print("layout ok")

assert main(["toy-hello", "--name", "docs"]) == 0
assert main(["plan", "toy_study", "--models", "smollm2", "--width", "3"]) == 0
assert main(["run", "toy_study", "--width", "0"]) == 2
sys.exit(main(["run", "toy_study", "--limit", "2", "--no-models"]))
"""


def test_a_throwaway_study_is_picked_up_everywhere(tmp_path):
    """docs/adding-a-study.md's checklist and nothing else: a study package with its ``study.py``
    (every field of :class:`metamorph.study.Study` set), ``vocab.py``, ``report.py``, ``lineage.py``,
    ``cli.py``, its SQL folder and an ``assets/<name>.py`` (here in a temporary directory added to
    the two packages' paths) has its two jobs, the registry sensor's target, a weekly schedule, a
    report-card entry, its verdict sources, traces and command, a ``metamorph plan`` and a
    ``metamorph run`` sub-command with its own option, passes the layout tests, and runs."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    package = tmp_path / "studies" / "toy_study"
    package.mkdir(parents=True)
    for name, text in TOY_PACKAGE.items():
        (package / name).write_text(text, encoding="utf-8")
    (tmp_path / "sql" / "toy_study").mkdir(parents=True)
    (tmp_path / "sql" / "toy_study" / "lineage_views.sql").write_text(
        "CREATE OR REPLACE VIEW toy_study.width_lineage AS SELECT * FROM toy_study.toy_generations;\n"
    )
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "toy_study.py").write_text(TOY_ASSETS, encoding="utf-8")
    (tmp_path / "check.py").write_text(TOY_CHECK, encoding="utf-8")
    repo = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": str(repo),
        "METAMORPH_HOME": str(tmp_path / "home"),
        "DAGSTER_HOME": str(tmp_path / "dh"),
    }
    out = subprocess.run(
        [sys.executable, str(tmp_path / "check.py"), str(tmp_path)],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[:8] == [
        "['toy_study/toy_items']",
        "['toy_study/toy_extra', 'toy_study/toy_generations']",
        "True",
        "toy_study_model_job",
        "('toy_generations',) {'width_ok': True} ['width_ok']",
        "True",
        "layout ok",
        "hello from docs",
    ]
    assert "Plan of toy_study" in lines[8]
    assert "  smollm2 toy_generations: 0 requests, 0 cache hits, 0 calls, " in out.stdout
    assert "toy note for smollm2" in out.stdout
    assert out.stderr.splitlines()[0] == (
        "metamorph run toy_study: error: argument --width: must be a whole number >= 1, got '0'  "
        "(see: metamorph run toy_study --help)"
    )
    assert "Inputs materialized (toy_study); no model was run, so there are no new metric tables." in out.stdout
    import duckdb

    con = duckdb.connect(str(tmp_path / "home" / "metamorph.duckdb"), read_only=True)
    try:
        assert con.execute("SELECT item FROM toy_study.toy_items").fetchall() == [("toy-0",), ("toy-1",)]
    finally:
        con.close()


def test_the_throwaway_study_sets_every_field_and_follows_the_page():
    """The throwaway study's ``Study(...)`` sets every field of :class:`metamorph.study.Study`, and
    every keyword and import of the page's ``study.py`` example (docs/adding-a-study.md) is one the
    throwaway study uses, as is the page's ``study_config`` of ``assets/<name>.py``."""
    import ast
    import dataclasses
    import re
    from pathlib import Path

    from metamorph.study import Study

    def study_call(code: str) -> ast.Call:
        [call] = [
            n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "Study"
        ]
        return call

    def imported(code: str) -> set[str]:
        return {a.name for n in ast.walk(ast.parse(code)) if isinstance(n, ast.ImportFrom) for a in n.names}

    toy = study_call(TOY_PACKAGE["study.py"])
    assert {k.arg for k in toy.keywords} == {f.name for f in dataclasses.fields(Study)}
    page = (Path(__file__).resolve().parents[2] / "docs" / "adding-a-study.md").read_text(encoding="utf-8")
    blocks = [b.replace("<name>", "toy_study") for b in re.findall(r"```python\n(.*?)```", page, flags=re.S)]
    blocks = ["\n".join(line[3:] if line.startswith("   ") else line for line in b.splitlines()) for b in blocks]
    [example] = [b for b in blocks if "STUDY = Study(" in b]
    assert {k.arg for k in study_call(example).keywords} <= {k.arg for k in toy.keywords}
    assert imported(example) <= imported(TOY_PACKAGE["study.py"])
    assert set(TOY_PACKAGE) >= {"study.py", "vocab.py", "report.py", "lineage.py", "cli.py"}
    [assets_example] = [b for b in blocks if "study_config(" in b]
    assert imported(assets_example) <= imported(TOY_ASSETS)


@pytest.mark.parametrize(
    ("study", "sample", "spec", "message"),
    [
        (
            "wrapper_sensitivity",
            "boolq",
            "boolq:{path}",
            "item 'boolq-45' of task 'boolq' was already loaded from boolq:",
        ),
        ("workflow_perturb", "worfbench", "{path}", "workflow 'alfworld_1613' was already loaded from "),
    ],
)
def test_the_same_source_twice_is_one_line_exit_2_before_anything_is_written(
    study, sample, spec, message, tmp_path, monkeypatch, capsys
):
    """The study's launch check (``Study.load_sources``: the command line and the inputs job's
    config mapping) refuses a source given twice, naming the second spec, its row and field ``id``;
    it passed the check and the run then failed on the items table's uniqueness check."""
    from tests.conftest import shared_sample

    src = spec.format(path=shared_sample(sample))
    monkeypatch.setenv("METAMORPH_HOME", str(tmp_path / "home"))
    code = main(["run", study, "--source", src, "--source", src, "--limit", "2", "--no-models"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert message in err[0] and "row 1" in err[0] and "field 'id'" in err[0], err[0]
    assert not (tmp_path / "home").exists()
