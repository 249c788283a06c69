"""``metamorph verdict`` on a real DuckDB warehouse holding the wrapper study's scored table
(tests.core.test_model_upgrades.synthetic_scored, written as the study's assets write it): exit 1
and the regressed rows when the candidate regressed, 0 when it did not (or when its registry entry
lets none of them block), 2 with one line naming what to run for bad input."""

from __future__ import annotations

import json

from metamorph.cli import main
from metamorph.comparison import COMPARISON_COLUMNS
from metamorph.study import studies
from tests.core.test_model_upgrades import REGRESSED, WRAPPER_REGISTRY, synthetic_scored, synthetic_wrapper_warehouse

#: Every study but the one the synthetic warehouse holds (wrapper sensitivity) -> why it is skipped.
NOT_RUN = {
    s: f"{s} has not been run: run `{s}_inputs_job`, then `{s}_model_job` for partitions base, cand"
    for s in sorted(set(studies()) - {"wrapper_sensitivity"})
}


def verdict(capsys, *args):
    code = main(["verdict", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_regressed_candidate_exits_1_with_its_rows(metamorph_home, tmp_path, monkeypatch, capsys):
    synthetic_wrapper_warehouse(metamorph_home, tmp_path, monkeypatch)
    code, out, err = verdict(capsys, "--model", "cand", "--json")
    assert (code, err) == (1, "")
    v = json.loads(out)
    assert (v["candidate"], v["baseline"], v["regressed"]) == ("cand", "base", True)
    assert [(r["study"], r["metric"], r["slice"]) for r in v["blocking_regressions"]] == [
        ("wrapper_sensitivity", m, sl) for m, sl, _ in REGRESSED
    ]
    for r, (_, _, d) in zip(v["blocking_regressions"], REGRESSED):
        assert [r["difference"], r["ci_low"], r["ci_high"], r["p_holm"]] == [d, d, d, 0.00586]  # 12 · 2**-11, 3 digits
    assert len(v["rows"]) == 12 and {r["verdict"] for r in v["rows"]} == {"regressed", "no detectable change"}
    assert v["skipped"] == NOT_RUN

    code, out, _ = verdict(capsys, "--model", "cand", "--study", "wrapper_sensitivity")
    assert code == 1
    assert out.splitlines()[:3] == ["candidate cand against the approved baseline base", "", "## wrapper_sensitivity"]
    assert out.splitlines()[-1] == (
        "REGRESSED: 4 row(s) on blocking metrics: wrapper_sensitivity accuracy (task=t_bool) -20.0 pp, p (Holm) 0.00586; "
        "wrapper_sensitivity accuracy (task=t_bool, wrapper=json) -100.0 pp, p (Holm) 0.00586; "
        "wrapper_sensitivity parseability (task=t_bool) -20.0 pp, p (Holm) 0.00586; "
        "wrapper_sensitivity parseability (task=t_bool, wrapper=json) -100.0 pp, p (Holm) 0.00586"
    )


def test_metrics_that_do_not_block_exit_0(metamorph_home, tmp_path, monkeypatch, capsys):
    synthetic_wrapper_warehouse(metamorph_home, tmp_path, monkeypatch, ", blocking_metrics: {wrapper_sensitivity: []}")
    code, out, _ = verdict(capsys, "--model", "cand", "--study", "wrapper_sensitivity")
    assert code == 0
    lines = out.splitlines()
    assert "(metrics that do not block for cand: accuracy, parseability)" in lines
    assert lines[-1] == "no blocking regression"


def test_no_regression_exits_0(metamorph_home, tmp_path, monkeypatch, capsys):
    import duckdb

    synthetic_wrapper_warehouse(metamorph_home, tmp_path, monkeypatch)
    # the candidate answers exactly as the baseline: every difference is 0
    scored = synthetic_scored()
    base = scored[scored["model_id"] == "base"]
    same = base.assign(model_id="cand", generation_key=base["generation_key"].str.replace("base", "cand"))
    con = duckdb.connect(str(metamorph_home / "metamorph.duckdb"))
    con.register("s", __import__("pandas").concat([base, same]))
    con.execute("CREATE OR REPLACE TABLE wrapper_sensitivity.scored_answers AS SELECT * FROM s")
    con.close()
    code, out, _ = verdict(capsys, "--model", "cand", "--json")
    v = json.loads(out)
    assert (code, v["regressed"], v["blocking_regressions"]) == (0, False, [])
    assert {(r["verdict"], r["difference"], r["p_holm"]) for r in v["rows"]} == {("no detectable change", 0.0, 1.0)}


def test_bad_input_exits_2_saying_what_to_run(metamorph_home, tmp_path, monkeypatch, capsys):
    reg = synthetic_wrapper_warehouse(metamorph_home, tmp_path, monkeypatch)
    cases = [
        (
            ["--model", "gemma"],
            f"model 'gemma' is not in the registry {reg} (registered: base, cand); add its entry "
            "there, then run the studies' model jobs for its partition",
        ),
        (["--model", "base"], "base is the approved baseline; name a candidate (cand)"),
        (["--model", "cand", "--study", "order_probe"], NOT_RUN["order_probe"]),
        (
            ["--model", "cand", "--warehouse", str(tmp_path / "none.duckdb")],
            f"no warehouse {tmp_path / 'none.duckdb'}: run `format_robustness_model_job` for partitions base, cand "
            "(after `format_robustness_inputs_job`)",
        ),
    ]
    # a path that is not a warehouse: a directory, an empty file, a JSONL file
    (tmp_path / "adir").mkdir()
    (tmp_path / "empty.duckdb").write_bytes(b"")
    (tmp_path / "rows.jsonl").write_text('{"id": "a"}\n')
    cases += [
        (
            ["--model", "cand", "--warehouse", str(tmp_path / "adir")],
            f"{tmp_path / 'adir'} is a directory, not a warehouse file",
        ),
        *(
            (
                ["--model", "cand", "--warehouse", str(tmp_path / name)],
                f"{tmp_path / name} is not a DuckDB database file (a warehouse is the .duckdb file a run writes)",
            )
            for name in ("empty.duckdb", "rows.jsonl")
        ),
    ]
    for args, line in cases:
        assert verdict(capsys, *args) == (2, "", f"metamorph verdict: error: {line}\n"), args

    reg.write_text(WRAPPER_REGISTRY.replace("status: approved", "status: candidate") % "")
    assert verdict(capsys, "--model", "cand") == (
        2,
        "",
        "metamorph verdict: error: no approved baseline (no entry has "
        f"`status: approved`): set it on exactly one entry of {reg}\n",
    )
    # evaluated in no study with the baseline: each study's next step, on one line
    reg.write_text(WRAPPER_REGISTRY % "" + "  - {id: later, provider: llama_cpp, model: later.gguf}\n")
    code, out, err = verdict(capsys, "--model", "later")
    assert (code, out) == (2, "")
    assert err == (
        "metamorph verdict: error: later has not been compared with base in any study: "
        + "; ".join(
            [
                NOT_RUN["format_robustness"].replace("cand", "later"),
                NOT_RUN["order_probe"].replace("cand", "later"),
                NOT_RUN["workflow_perturb"].replace("cand", "later"),
                "not evaluated in wrapper_sensitivity: later — run `wrapper_sensitivity_model_job` for its partition "
                "(command line: `metamorph run wrapper_sensitivity --models later`)",
            ]
        )
        + "\n"
    )


def registry(tmp_path, text):
    from metamorph.models import load_registry

    path = tmp_path / "models.yaml"
    path.write_text("models:\n" + text)
    return path, load_registry(path)


def test_comparison_next_step_names_the_missing_partitions_and_the_job(tmp_path):
    from metamorph.verdict import comparison_next_step

    job = "`format_robustness_model_job`"
    path, models = registry(
        tmp_path,
        "  - {id: smollm2, provider: llama_cpp, model: a.gguf, status: approved}\n"
        "  - {id: gemma3-270m, provider: llama_cpp, model: b.gguf}\n"
        "  - {id: smollm2-greedy, provider: llama_cpp, model: a.gguf}\n",
    )
    assert comparison_next_step("format_robustness", models, {"smollm2"}) == (
        "candidates registered but not evaluated: gemma3-270m, smollm2-greedy — run "
        f"{job} for their partitions (command line: `metamorph run format_robustness --models gemma3-270m "
        "smollm2-greedy`)"
    )
    assert comparison_next_step("format_robustness", models, {"gemma3-270m"}) == (
        f"approved baseline not evaluated: smollm2 — run {job} for its partition (command line: "
        "`metamorph run format_robustness --models smollm2`); "
        f"candidate registered but not evaluated: smollm2-greedy — run {job} for its partition "
        "(command line: `metamorph run format_robustness --models smollm2-greedy`)"
    )
    assert comparison_next_step("format_robustness", models, {m.id for m in models}) is None

    path, models = registry(tmp_path, "  - {id: base, provider: llama_cpp, model: a.gguf, status: approved}\n")
    assert comparison_next_step("order_probe", models, {"base"}) == (
        f"no candidate registered: add an entry to {path} (status: candidate is the default), then run "
        "`order_probe_model_job` for its partition"
    )


def test_an_empty_report_card_says_which_studies_to_run(metamorph_home, tmp_path, monkeypatch):
    import dagster as dg

    from pipelines.definitions import build_definitions

    path, _ = registry(
        tmp_path,
        "  - {id: base, provider: llama_cpp, model: SmolLM2-135M-Instruct.Q4_1.gguf, status: approved}\n"
        "  - {id: api, provider: openai, model: gpt-x, api_key_env: NO_SUCH_KEY}\n",
    )
    monkeypatch.setenv("METAMORPH_MODELS", str(path))
    with dg.instance_for_test() as instance:
        res = build_definitions().resolve_job_def("model_upgrades_job").execute_in_process(instance=instance)
        md = res.asset_materializations_for_node("model_upgrades__robustness_report_card")[0].metadata
        [check] = res.get_asset_check_evaluations()
    todo = (
        "not in the card: format_robustness, order_probe, workflow_perturb, wrapper_sensitivity — run "
        "`format_robustness_inputs_job` then `format_robustness_model_job`, `order_probe_inputs_job` then "
        "`order_probe_model_job`, `workflow_perturb_inputs_job` then `workflow_perturb_model_job`, "
        "`wrapper_sensitivity_inputs_job` then `wrapper_sensitivity_model_job` for the registered models' "
        "partitions, then `model_upgrades_job`"
    )
    assert md["next_step"].value == todo
    # what running each costs: the cost plan's calls for both entries, nothing cached (the inputs
    # never materialized: each study's defaults); the local one's time is not known before it ran here
    local = "time unknown (not run on this machine yet)"
    planned = {
        "format_robustness": f"base: up to 48 calls, {local}; api: up to 252 calls",
        "order_probe": f"base: 288 calls, {local}; api: 288 calls",
        "workflow_perturb": f"base: up to 39 calls, {local}; api: up to 57 calls",
        "wrapper_sensitivity": f"base: 600 calls, {local}; api: 600 calls",
    }
    assert md["planned"].value == {s: f"nothing cached: {text}" for s, text in planned.items()}
    assert md["report_card"].value == (
        f"_no model has been evaluated in any study yet_\n\n_{todo}_\n\n_planned, nothing cached:_\n"
        + "\n".join(f"- {s}: {text}" for s, text in planned.items())
    )
    assert len(md["report_card"].value) < 1000  # shown in place
    assert md["trend"].value == "_no headline numbers to plot_"
    assert (check.check_name, check.passed, md["regressed_candidates"].value) == ("no_candidate_regressed", True, [])


def test_a_model_whose_every_call_failed_is_told_to_fix_and_rerun_not_to_run(
    metamorph_home, tmp_path, monkeypatch, capsys
):
    import duckdb

    from tests.core.test_model_upgrades import WRAPPER_REGISTRY

    reg = tmp_path / "models.yaml"
    reg.write_text(WRAPPER_REGISTRY % "")
    monkeypatch.setenv("METAMORPH_MODELS", str(reg))
    scored = synthetic_scored()
    dead = scored["model_id"] == "cand"  # every call of cand failed at the provider: rows, no replies
    scored.loc[dead, ["value", "parseable", "correct", "reason"]] = [None, False, False, "call_error"]
    con = duckdb.connect(str(metamorph_home / "metamorph.duckdb"))
    con.execute("CREATE SCHEMA wrapper_sensitivity")
    con.register("s", scored)
    con.execute("CREATE TABLE wrapper_sensitivity.scored_answers AS SELECT * FROM s")
    con.close()
    code, out, err = verdict(capsys, "--model", "cand", "--study", "wrapper_sensitivity")
    assert (code, out) == (2, "")
    assert err == (
        "metamorph verdict: error: run in wrapper_sensitivity but no item was measurable for cand: every call "
        "failed at the provider or was not sent (the generation table's `error` column says why); fix that, "
        "then run `metamorph run wrapper_sensitivity --models cand` again (only the failed calls are made)\n"
    )


def test_regression_records_are_rounded_as_the_comparison_table_prints_them():
    """The check metadata held fractions such as -0.13000000000000003 and 0.30555555555555554
    beside a table printing -13.0 pp; the records hold the table's numbers: percentage points to one
    decimal, p (Holm) to 3 significant digits, a missing bound None."""
    import math

    import pandas as pd

    from metamorph.verdict import regression_records

    rows = pd.DataFrame(
        {
            "candidate_id": ["cand", "cand"],
            "metric": ["accuracy", "M1"],
            "slice": ["task=boolq", "all"],
            "difference": [-0.13000000000000003, -0.30555555555555554],
            "ci_low": [-0.2, math.nan],
            "ci_high": [-0.06999999999999999, -0.0004],
            "p_holm": [0.018, 3 * 2 / 256],
            "verdict": ["regressed", "regressed"],
        }
    )
    assert regression_records(rows) == [
        {
            "candidate_id": "cand",
            "metric": "accuracy",
            "slice": "task=boolq",
            "difference_pp": -13.0,
            "ci_low_pp": -20.0,
            "ci_high_pp": -7.0,
            "p_holm": 0.018,
        },
        {
            "candidate_id": "cand",
            "metric": "M1",
            "slice": "all",
            "difference_pp": -30.6,
            "ci_low_pp": None,
            "ci_high_pp": -0.0,
            "p_holm": 0.0234,
        },
    ]


def test_json_rounds_every_float_as_the_table_prints_it(metamorph_home, tmp_path, monkeypatch, capsys):
    """``--json`` printed unrounded floats (p (Holm) 0.005859375, p 0.00048828125, an MDE of
    0.80166…); it rounds as the table and the regression records do — fractions to 0.1 pp, p-values
    to 3 significant digits — with the same keys."""
    synthetic_wrapper_warehouse(metamorph_home, tmp_path, monkeypatch)
    code, out, _ = verdict(capsys, "--model", "cand", "--json")
    v = json.loads(out)
    assert code == 1
    assert v["blocking_regressions"] == [
        {
            "study": "wrapper_sensitivity",
            "candidate_id": "cand",
            "metric": m,
            "slice": sl,
            "difference": d,
            "ci_low": d,
            "ci_high": d,
            "p_holm": 0.00586,
        }
        for m, sl, d in REGRESSED
    ]
    same = {
        "study": "wrapper_sensitivity",
        "candidate_id": "cand",
        "baseline_id": "base",
        "metric": "accuracy",
        "higher_is_better": True,
        "n_items": 12,
        "n_baseline_only": 0,
        "n_candidate_only": 0,
        "baseline_mean": 1.0,
        "ci_note": "all values equal: degenerate bootstrap distribution, CI = [v, v]",
        "n_better": 0,
        "test": "mcnemar_exact",
        "statistic": 0.0,
        "alpha": 0.05,
        "blocks": True,
    }
    assert v["rows"][1:3] == [
        {
            **same,
            "slice": "task=t_bool, wrapper=deliberate",
            "candidate_mean": 1.0,
            "difference": 0.0,
            "ci_low": 0.0,
            "ci_high": 0.0,
            "n_worse": 0,
            "p_value": 1.0,
            "p_holm": 1.0,
            "verdict": "no detectable change",
            "mde": 0.802,
            "mde_note": "exact McNemar power 0.8 at α/m = 0.00417 (m = 12), observed discordance 0",
        },
        {
            **same,
            "slice": "task=t_bool, wrapper=json",
            "candidate_mean": 0.0,
            "difference": -1.0,
            "ci_low": -1.0,
            "ci_high": -1.0,
            "n_worse": 12,
            "p_value": 0.000488,
            "p_holm": 0.00586,
            "verdict": "regressed",
            "mde": 0.963,
            "mde_note": "exact McNemar power 0.8 at α/m = 0.00417 (m = 12), observed discordance 1",
        },
    ]
    assert [list(r) for r in v["rows"]] == [["study", *COMPARISON_COLUMNS, "blocks"]] * 12  # the keys unchanged


def test_json_number_rounds_by_column():
    from metamorph.verdict import json_number

    assert [
        json_number("difference", -0.13000000000000003),
        json_number("candidate_mean", 0.30555555555555554),
        json_number("p_holm", 0.005859375),
        json_number("p_anytime", 0.123456),
        json_number("e_max", 30.555555555555554),
        json_number("ci_low", float("nan")),
        json_number("n_items", 12),
        json_number("higher_is_better", True),
    ] == [-0.13, 0.306, 0.00586, 0.123, 30.56, None, 12, True]
