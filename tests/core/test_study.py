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
        assert _option_strings(plan[name]) == _option_strings(run[name]) | {"--registry", "--cache"}, name
    assert _option_strings(run["format_robustness"]) == {
        "--source",
        "--limit",
        "--max-tokens",
        "--models",
        "--budget-usd",
        "--no-models",
        "--k",
        "--no-routing",
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
        checked == 19
    )  # limit, max_tokens, budget_usd (× its assets) of the four studies, k, settings, seeds, goldens, variants


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
        assert f"{name}_model_job" in sensed
        assert defs.resolve_schedule_def(f"{name}_weekly").job_name == f"{name}_model_job"
        assert CARD_SOURCES[name] == study.card
        for t in study.card[0]:
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
