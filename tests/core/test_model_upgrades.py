"""Model upgrades on Dagster, in process, against a real DuckDB warehouse: the format study's
upgrade verdicts and the report card for two models behind the local HTTP stub (the only boundary
replaced; each model has its own scripted route), a new version of the candidate, and the wrapper
study's verdicts on a synthetic scored table (no model at all)."""

import json
import math
import re

import dagster as dg
import duckdb
import pandas as pd
import pytest

from metamorph.cli import main
from metamorph.models import load_registry
from metamorph.report_card import trend_series
from metamorph.studies.wrapper_sensitivity import metrics as wm
from metamorph.studies.wrapper_sensitivity.wrappers import FAMILIES
from tests.format_robustness.test_e2e_stub import chat

#: a figure's metadata (assets._common.figure_md): its title, its inline PNG and the full-size one it
#: links to, on the default figure server
FIGURE = re.compile(
    r"\[!\[(.+)\]\(http://127\.0\.0\.1:3001/[0-9a-f]{16}\.png\)\]\(http://127\.0\.0\.1:3001/[0-9a-f]{16}\.png\)"
)

REFER, NOT = "refer", "do not refer"


def answer(decision):
    return chat(json.dumps({"decision": decision, "evidence": ["patient has fever"]}))


def write_registry(path, url, cand_params=""):
    path.write_text(
        "models:\n"
        f"  - id: base\n    provider: openai_compatible\n    model: base-model\n    base_url: {url}/base/v1\n"
        "    api_key_env: STUB_KEY\n    max_concurrency: 1\n    status: approved\n"
        f"  - id: cand\n    provider: openai_compatible\n    model: cand-model\n    base_url: {url}/cand/v1\n"
        f"    api_key_env: STUB_KEY\n    max_concurrency: 1\n    status: candidate\n{cand_params}"
    )


def table(db, name):
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(f"SELECT * FROM {name}").df()
    finally:
        con.close()


def regression_checks(result):
    """The no_blocking_regression evaluations of a run."""
    return [c for c in result.get_asset_check_evaluations() if c.check_name == "no_blocking_regression"]


@pytest.fixture
def two_stub_models(stub, metamorph_home, tmp_path, monkeypatch):
    reg = tmp_path / "models.yaml"
    write_registry(reg, stub.url)
    monkeypatch.setenv("METAMORPH_MODELS", str(reg))
    monkeypatch.setenv("STUB_KEY", "k")
    return stub, reg


def test_format_verdicts_and_report_card_across_a_new_candidate_version(two_stub_models, metamorph_home, capsys):
    from pipelines.definitions import build_definitions

    stub, reg = two_stub_models
    # construct, 4 records (gold: refer, do not refer, refer, do not refer), 4 formats, k = 1.
    # base always answers "refer". cand, per record in txt/md/json/csv order: csv flips record 0,
    # record 2 is always wrong; the routing calls that follow repeat the last reply.
    stub.script("POST", "/base/v1/chat/completions", answer(REFER))
    stub.script(
        "POST",
        "/cand/v1/chat/completions",
        *[answer(d) for d in [REFER, REFER, REFER, NOT] + [NOT] * 4 + [NOT] * 4 + [NOT] * 4],
    )
    defs = build_definitions()
    cfg = {"ops": {"format_robustness__workflow_generations": {"config": {"k": 1}}}}
    db = metamorph_home / "metamorph.duckdb"
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["base", "cand"])
        assert (
            defs.resolve_job_def("format_robustness_inputs_job")
            .execute_in_process(
                instance=instance,
                run_config={
                    "ops": {"format_robustness__source_instances": {"config": {"sources": ["construct"], "limit": 4}}}
                },
            )
            .success
        )
        model_job = defs.resolve_job_def("format_robustness_model_job")
        tables_job = defs.resolve_job_def("format_robustness_tables_job")
        assert model_job.execute_in_process(instance=instance, partition_key="base", run_config=cfg).success
        base_run = tables_job.execute_in_process(instance=instance)  # the cross-model tables
        assert base_run.success
        # only the baseline evaluated: no verdict yet, and the table and its check say what to run
        assert table(db, "format_robustness.model_comparison").empty
        todo = (
            "candidate registered but not evaluated: cand — run `format_robustness_model_job` for its partition "
            "(command line: `metamorph run format_robustness --models cand`)"
        )
        md = base_run.asset_materializations_for_node("format_robustness__model_comparison")[0].metadata
        assert md["next_step"].value == todo
        planned = md["planned"].value
        assert planned.startswith("nothing cached: cand: ") and planned.endswith(" calls")  # an API model: no time
        assert md["comparison"].value == f"_no comparison: {todo}_\n\n_planned, {planned}_"
        [check] = regression_checks(base_run)
        assert (check.passed, check.metadata["summary"].value) == (True, f"nothing compared: {todo}")
        capsys.readouterr()  # Dagster's run log
        assert main(["verdict", "--model", "cand", "--study", "format_robustness"]) == 2
        assert capsys.readouterr().err == (
            "metamorph verdict: error: not evaluated in format_robustness: cand — run "
            "`format_robustness_model_job` for its partition (command line: `metamorph run format_robustness "
            "--models cand`)\n"
        )
        assert model_job.execute_in_process(instance=instance, partition_key="cand", run_config=cfg).success
        cand_run = tables_job.execute_in_process(instance=instance)
        assert cand_run.success
        assert len(stub.requests_to("/cand/v1/chat/completions")) >= 16
        [check] = regression_checks(cand_run)
        assert (check.passed, check.metadata["summary"].value, check.metadata["regressed_rows"].value) == (
            True,
            "no candidate regressed on a blocking metric",
            [],
        )
        assert (
            "next_step"
            not in cand_run.asset_materializations_for_node("format_robustness__model_comparison")[0].metadata
        )
        # the verdict command agrees: nothing regressed, exit 0
        capsys.readouterr()
        assert main(["verdict", "--model", "cand"]) == 0
        assert capsys.readouterr().out.splitlines()[-1] == "no blocking regression"

        cmp = table(db, "format_robustness.model_comparison").set_index(["metric", "slice"])
        s = "ingestion=inline, dataset=construct"
        # k = 1: M3 is not measurable (mr_flags' mr3_note), so it has no verdict row
        assert cmp.index.tolist() == [("M1", s), ("M2", s), ("accuracy", s)] + [
            ("accuracy", f"{s}, format={f}") for f in ("csv", "json", "md", "txt")
        ]
        assert set(cmp["candidate_id"]) == {"cand"} and set(cmp["baseline_id"]) == {"base"}
        # per-record correctness base [1,0,1,0]; cand txt/md/json [1,1,0,1], csv [0,1,0,1]
        assert cmp.loc[("accuracy", f"{s}, format=txt"), ["difference", "n_better", "n_worse", "test"]].tolist() == [
            0.25,
            2,
            1,
            "mcnemar_exact",
        ]
        assert cmp.loc[("accuracy", f"{s}, format=csv"), "difference"] == 0.0
        # pooled over formats, cand's record 0 is 3/4 correct: not 0/1, so the sign-flip test (p = 16/16)
        assert cmp.loc[("accuracy", s), ["difference", "test", "p_value"]].tolist() == [
            0.1875,
            "paired_permutation",
            1.0,
        ]
        assert cmp.loc[("M1", s), ["baseline_mean", "candidate_mean", "n_worse", "p_value"]].tolist() == [
            0.0,
            0.25,
            1,
            1.0,
        ]
        assert cmp.loc[("M2", s), "difference"] == 0.0
        assert set(cmp["verdict"]) == {"no detectable change"} and set(cmp["p_holm"]) == {1.0}

        upgrades = defs.resolve_job_def("model_upgrades_job")
        assert upgrades.execute_in_process(instance=instance).success
        fp = {m.id: m.fingerprint() for m in load_registry(reg)}
        card = table(db, "model_upgrades.robustness_report_card")
        fmt = card[card["study"] == "format_robustness"].set_index(["model_id", "metric"])
        assert fmt.loc[("base", "accuracy"), ["value", "n", "version"]].tolist() == [50.0, 4, fp["base"]]
        assert fmt.loc[("cand", "accuracy"), ["value", "version"]].tolist() == [68.75, fp["cand"]]  # 11 of 16
        assert fmt.loc[("cand", "M1"), "value"] == 25.0 and fmt.loc[("base", "M1"), ["value", "ci_low"]].tolist() == [
            0.0,
            0.0,
        ]
        assert fmt["slice"].unique().tolist() == ["ingestion=inline"] and fmt["is_current"].all()
        assert fmt["previous_version"].isna().all()

        # a new version of the candidate (another decoding setting), now always answering "refer"
        write_registry(reg, stub.url, "    params: {temperature: 0.5}\n")
        stub.script("POST", "/cand/v1/chat/completions", answer(REFER))
        assert model_job.execute_in_process(instance=instance, partition_key="cand", run_config=cfg).success
        assert tables_job.execute_in_process(instance=instance).success
        assert upgrades.execute_in_process(instance=instance).success
        new_fp = {m.id: m.fingerprint() for m in load_registry(reg)}["cand"]
        materialization = instance.get_latest_materialization_event(
            dg.AssetKey(["model_upgrades", "robustness_report_card"])
        ).asset_materialization
    card = table(db, "model_upgrades.robustness_report_card")
    cand = card[(card["study"] == "format_robustness") & (card["model_id"] == "cand")]
    now = cand[cand["is_current"]].set_index("metric")
    assert now.loc["accuracy", ["value", "version", "previous_version", "previous_value", "delta"]].tolist() == [
        50.0,
        new_fp,
        fp["cand"],
        68.75,
        -18.75,
    ]
    assert now.loc["M1", ["value", "delta"]].tolist() == [0.0, -25.0]
    old = cand[~cand["is_current"]].set_index("metric")
    assert old.loc["accuracy", ["value", "version"]].tolist() == [68.75, fp["cand"]]
    base = card[(card["model_id"] == "base") & card["is_current"]]
    assert base["previous_version"].isna().all() and (~card[card["model_id"] == "base"]["is_current"]).sum() == 0
    md = materialization.metadata
    assert "| accuracy (ingestion=inline) | 50.0 [" in md["report_card"].value
    assert f"| -18.8 vs {fp['cand'][:8]} |" in md["report_card"].value
    assert md["studies"].value == {
        "included": ["format_robustness"],
        "missing": ["order_probe", "workflow_perturb", "wrapper_sensitivity"],
    }
    assert md["models_with_previous_version"].value == ["cand"]
    assert (
        FIGURE.fullmatch(md["plot"].value).group(1) == "Headline metrics per study and model (current versions, 95% CI)"
    )
    # the trend: one point per registry fingerprint of cand, oldest first, with its CI; the current value as a float
    series = trend_series(card)
    acc = series[
        (series["model_id"] == "cand") & (series["study"] == "format_robustness") & (series["metric"] == "accuracy")
    ]
    assert acc[["version", "value", "is_current"]].values.tolist() == [[fp["cand"], 68.75, False], [new_fp, 50.0, True]]
    assert acc["ci_low"].notna().all() and (acc["ci_low"] <= acc["value"]).all()
    assert md["cand/FR/accuracy/inline"].value == 50.0
    assert md["cand/FR/M1/inline"].value == 0.0
    assert FIGURE.fullmatch(md["trend"].value).group(1) == "Headline metrics across each model's versions (95% CI)"
    assert md["regressed_candidates"].value == []


def synthetic_scored():
    """12 boolean items × the 5 standard wrappers × seed 0, paper extractor: base always right;
    cand right except under the json wrapper, where nothing parses."""
    rows = []
    for model in ("base", "cand"):
        for w in FAMILIES:
            for i in range(12):
                broken = model == "cand" and w == "json"
                rows.append(
                    {
                        "model_id": model,
                        "task": "t_bool",
                        "answer_type": "boolean",
                        "wrapper": w,
                        "item_id": f"q{i:02d}",
                        "seed": 0,
                        "mode": "paper",
                        "value": None if broken else "yes",
                        "parseable": not broken,
                        "correct": not broken,
                        "reason": "no_answer" if broken else "ok",
                        "finish_reason": "stop",
                        "prompt_tokens": 20,
                        "n_choices": None,
                        "generation_key": f"{model}{w}{i}".ljust(64, "0"),
                    }
                )
    df = pd.DataFrame(rows)
    df["prompt_tokens"] = df["prompt_tokens"].astype("Int64")
    df["n_choices"] = df["n_choices"].astype("Int64")
    return df


WRAPPER_REGISTRY = (
    "models:\n  - {id: base, provider: llama_cpp, model: base.gguf, status: approved}\n"
    "  - {id: cand, provider: llama_cpp, model: cand.gguf%s}\n"
)


def synthetic_wrapper_warehouse(metamorph_home, tmp_path, monkeypatch, cand_extra=""):
    """The warehouse holds wrapper_sensitivity.scored_answers and mean_fsi_psi of
    :func:`synthetic_scored` (as the study's assets write them); returns the registry path."""
    reg = tmp_path / "models.yaml"
    reg.write_text(WRAPPER_REGISTRY % cand_extra)
    monkeypatch.setenv("METAMORPH_MODELS", str(reg))
    scored = synthetic_scored()
    mean = wm.mean_indices(wm.fsi_psi(wm.cell_metrics(scored)), n_resamples=1000, seed=0)
    con = duckdb.connect(str(metamorph_home / "metamorph.duckdb"))
    con.execute("CREATE SCHEMA wrapper_sensitivity")
    con.register("s", scored)
    con.register("m", mean)
    con.execute("CREATE TABLE wrapper_sensitivity.scored_answers AS SELECT * FROM s")
    con.execute("CREATE TABLE wrapper_sensitivity.mean_fsi_psi AS SELECT * FROM m")
    con.close()
    return reg


#: The four rows cand regressed on in :func:`synthetic_scored` (metric, slice, difference = CI bounds):
#: json: 12 of 12 items lost (exact McNemar p = 2 · 2**-12); pooled over the 5 wrappers every item
#: drops from 1 to 0.8 (all 12 sign-flip differences equal: p = 2 / 2**12). Holm over 12 rows: 12 · 2**-11.
REGRESSED = [
    ("accuracy", "task=t_bool", -0.2),
    ("accuracy", "task=t_bool, wrapper=json", -1.0),
    ("parseability", "task=t_bool", -0.2),
    ("parseability", "task=t_bool, wrapper=json", -1.0),
]


def test_wrapper_verdicts_fail_the_blocking_check_and_head_the_card(metamorph_home, tmp_path, monkeypatch):
    from pipelines.definitions import build_definitions

    synthetic_wrapper_warehouse(metamorph_home, tmp_path, monkeypatch)
    db = metamorph_home / "metamorph.duckdb"
    defs = build_definitions()  # its warehouse is METAMORPH_HOME's: the tables written above
    cmp_key = dg.AssetKey(["wrapper_sensitivity", "model_comparison"])
    card_key = dg.AssetKey(["model_upgrades", "robustness_report_card"])
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["base", "cand"])
        job = defs.resolve_implicit_global_asset_job_def()
        res = job.execute_in_process(asset_selection=[cmp_key], instance=instance)
        # the check fails (ERROR); the run does not. The card (it reads the verdicts from the
        # warehouse: no upstream asset, so it runs after them in its own run) shows the regression
        assert res.success
        verdicts = res.asset_materializations_for_node("wrapper_sensitivity__model_comparison")[0].metadata["verdicts"]
        [check] = res.get_asset_check_evaluations()
        card_run = job.execute_in_process(asset_selection=[card_key], instance=instance)
        assert card_run.success
        [card_check] = card_run.get_asset_check_evaluations()
        assert (check.asset_key, check.check_name, check.passed, check.severity) == (
            cmp_key,
            "no_blocking_regression",
            False,
            dg.AssetCheckSeverity.ERROR,
        )
        rows = check.metadata["regressed_rows"].value
        assert [(r["candidate_id"], r["metric"], r["slice"]) for r in rows] == [
            ("cand", m, sl) for m, sl, _ in REGRESSED
        ]
        # as the table prints them: pp to one decimal, p (Holm) to 3 significant digits (12 × 2⁻¹¹ = 0.005859375)
        assert [[r["difference_pp"], r["ci_low_pp"], r["ci_high_pp"], r["p_holm"]] for r in rows] == [
            [-20.0, -20.0, -20.0, 0.00586],
            [-100.0, -100.0, -100.0, 0.00586],
            [-20.0, -20.0, -20.0, 0.00586],
            [-100.0, -100.0, -100.0, 0.00586],
        ]
        assert check.metadata["regressed_candidates"].value == ["cand"]
        assert (
            check.metadata["summary"].value == "4 regressed row(s) on blocking metrics: cand (accuracy, parseability)"
        )
        card_md = card_run.asset_materializations_for_node("model_upgrades__robustness_report_card")[0].metadata
    cmp = table(db, "wrapper_sensitivity.model_comparison").set_index(["metric", "slice"])
    assert len(cmp) == 12  # {accuracy, parseability} × (5 wrappers + the task pooled over them)
    hit = [(m, sl) for m, sl, _ in REGRESSED]
    for cell in hit:
        assert cmp.loc[cell, "p_value"] == pytest.approx(2**-11)
        assert cmp.loc[cell, "p_holm"] == pytest.approx(12 * 2**-11)
        assert cmp.loc[cell, "verdict"] == "regressed"
    assert cmp.loc[("accuracy", "task=t_bool, wrapper=json"), ["difference", "ci_low", "ci_high", "test"]].tolist() == [
        -1.0,
        -1.0,
        -1.0,
        "mcnemar_exact",
    ]
    assert cmp.loc[("accuracy", "task=t_bool"), ["difference", "test"]].tolist() == [
        pytest.approx(-0.2),
        "paired_permutation",
    ]
    rest = cmp.drop(index=hit)
    assert set(rest["verdict"]) == {"no detectable change"} and set(rest["p_holm"]) == {1.0}
    assert [c.strip() for c in verdicts.value.splitlines()[2].split("|")[1:-1]] == ["cand", "4", "0", "8", "0"]

    # the card's own check fails on the study's regression, and the card opens with it
    assert (card_check.asset_key, card_check.check_name, card_check.passed, card_check.severity) == (
        card_key,
        "no_candidate_regressed",
        False,
        dg.AssetCheckSeverity.ERROR,
    )
    assert card_check.metadata["regressed_candidates"].value == {"wrapper_sensitivity": ["cand"]}
    assert card_md["regressed_candidates"].value == ["cand"]
    assert card_md["report_card"].value.splitlines()[:2] == [
        "**Regressed candidates** (blocking regressions after Holm; every row: the card's check):",
        "- **cand** in wrapper_sensitivity: 4 regression(s), largest accuracy (task=t_bool, wrapper=json) "
        "-100.0 pp [-100.0, -100.0], p (Holm) 0.00586",
    ]
    assert card_md["next_step"].value == (
        "not in the card: format_robustness, order_probe, workflow_perturb — run `format_robustness_inputs_job` then "
        "`format_robustness_model_job`, `order_probe_inputs_job` then `order_probe_model_job`, "
        "`workflow_perturb_inputs_job` then `workflow_perturb_model_job` for the registered models' partitions, "
        "then `model_upgrades_job`"
    )
    # every headline cell is float metadata (Dagster plots it across materializations) and in the trend plot
    assert card_md["cand/WS/accuracy"].value == 80.0
    assert card_md["base/WS/FSI"].value == 0.0
    # what the UI shows in place: the card under its 1,000-character limit, narrow, keys short;
    # every current cell in full in the JSON entry
    shown = card_md["report_card"].value
    assert len(shown) < 1000
    tables = [line for line in shown.splitlines() if line.startswith("| ")]
    assert tables and max(len(line) for line in tables) <= 60, shown
    assert max(len(k) for k in card_md) == len("models_with_previous_version"), max(card_md, key=len)
    assert FIGURE.fullmatch(card_md["trend"].value).group(1) == "Headline metrics across each model's versions (95% CI)"

    card = table(db, "model_upgrades.robustness_report_card").set_index(["model_id", "metric"])
    assert card.loc[("cand", "accuracy"), ["value", "ci_low", "ci_high", "n"]].tolist() == [80.0, 80.0, 80.0, 12]
    assert card.loc[("base", "parseability"), "value"] == 100.0
    assert card.loc[("cand", "FSI"), ["value", "unit", "n"]].tolist() == [100.0, "pp", 1]
    assert math.isnan(card.loc[("cand", "FSI"), "ci_low"]) and card.loc[("base", "FSI"), "value"] == 0.0
    assert set(card["version"]) == {"unrecorded"}  # no wrapper_generations materialization recorded one
    assert len(card_md["card (in full)"].value) == int(card["is_current"].sum())
    # its numbers rounded as the card shows them (one decimal), its versions at 8 characters
    floats = [v for r in card_md["card (in full)"].value for v in r.values() if isinstance(v, float)]
    assert floats and [v for v in floats if v != round(v, 1)] == [], floats
    assert {r["version"] for r in card_md["card (in full)"].value} == {"unrecorded"}


def test_metrics_that_do_not_block_pass_the_check(metamorph_home, tmp_path, monkeypatch):
    """The candidate's registry entry lets only parseability block in the wrapper study: its
    accuracy regressions are listed as not blocking, its parseability ones still fail the check;
    with [] nothing blocks and the check passes."""
    from pipelines.definitions import build_definitions

    reg = synthetic_wrapper_warehouse(
        metamorph_home, tmp_path, monkeypatch, ", blocking_metrics: {wrapper_sensitivity: [parseability]}"
    )
    cmp_key = dg.AssetKey(["wrapper_sensitivity", "model_comparison"])
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["base", "cand"])
        res = (
            build_definitions()
            .resolve_implicit_global_asset_job_def()
            .execute_in_process(asset_selection=[cmp_key], instance=instance)
        )
        [check] = res.get_asset_check_evaluations()
        assert res.success and not check.passed
        assert [(r["metric"], r["slice"]) for r in check.metadata["regressed_rows"].value] == [
            (m, sl) for m, sl, _ in REGRESSED[2:]
        ]
        assert [(r["metric"], r["slice"]) for r in check.metadata["regressed_rows_not_blocking"].value] == [
            (m, sl) for m, sl, _ in REGRESSED[:2]
        ]

        reg.write_text(WRAPPER_REGISTRY % ", blocking_metrics: {wrapper_sensitivity: []}")
        res = (
            build_definitions()
            .resolve_implicit_global_asset_job_def()
            .execute_in_process(asset_selection=[cmp_key], instance=instance)
        )
        [check] = res.get_asset_check_evaluations()
    assert res.success and check.passed
    assert check.metadata["regressed_rows"].value == []
    assert check.metadata["summary"].value == (
        "no candidate regressed on a blocking metric (4 regressed row(s) on metrics that do not block)"
    )


def test_the_card_has_no_upstream_study_tables_and_builds_when_no_study_was_run(metamorph_home):
    """The card reads the studies' tables from the warehouse when present: none of them is an
    upstream asset (the UI would warn at Materialize about every study not run), its description
    says how it is rebuilt, and with no study run it is built and names every study as missing."""
    from metamorph.study import studies
    from pipelines.definitions import build_definitions

    defs = build_definitions()
    key = dg.AssetKey(["model_upgrades", "robustness_report_card"])
    assert defs.resolve_asset_graph().get(key).parent_keys == set()
    description = defs.resolve_assets_def(key).specs_by_key[key].description
    assert "Built at the end of every `metamorph run`; rebuild it with `model_upgrades_job`" in description
    with dg.instance_for_test() as instance:
        res = defs.resolve_job_def("model_upgrades_job").execute_in_process(instance=instance)
    assert res.success
    md = res.asset_materializations_for_node("model_upgrades__robustness_report_card")[0].metadata
    assert md["studies"].value == {"included": [], "missing": sorted(studies())}
    assert md["next_step"].value.startswith("not in the card: " + ", ".join(sorted(studies())) + " — run ")


def test_the_card_json_rounds_numbers_and_shortens_fingerprints_as_the_card_shows_them():
    from assets.model_upgrades import card_records

    row = {
        "model_id": "m",
        "study": "format_robustness",
        "metric": "M1",
        "slice": "ingestion=inline",
        "unit": "%",
        "value": 30.555555555555554,
        "ci_low": 11.11111111111111,
        "ci_high": float("nan"),
        "version": "a3f9" * 16,
        "previous_version": None,
        "delta": -2.25001,
        "is_current": True,
    }
    assert card_records(pd.DataFrame([row, {**row, "version": "unrecorded"}])) == [
        {
            "model_id": "m",
            "study": "format_robustness",
            "metric": "M1",
            "slice": "ingestion=inline",
            "unit": "%",
            "value": 30.6,
            "ci_low": 11.1,
            "ci_high": None,
            "version": "a3f9a3f9",
            "previous_version": None,
            "delta": -2.3,
        },
        {
            "model_id": "m",
            "study": "format_robustness",
            "metric": "M1",
            "slice": "ingestion=inline",
            "unit": "%",
            "value": 30.6,
            "ci_low": 11.1,
            "ci_high": None,
            "version": "unrecorded",
            "previous_version": None,
            "delta": -2.3,
        },
    ]
