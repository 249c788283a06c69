"""``metamorph verdict`` on a real DuckDB warehouse holding the wrapper study's scored table
(tests.core.test_model_upgrades.synthetic_scored, written as the study's assets write it): exit 1
and the regressed rows when the candidate regressed, 0 when it did not (or when its registry entry
lets none of them block), 2 with one line naming what to run for bad input."""

from __future__ import annotations

import json

import pytest

from metamorph.cli import main
from tests.core.test_model_upgrades import REGRESSED, WRAPPER_REGISTRY, synthetic_scored, synthetic_wrapper_warehouse

NOT_RUN = {s: f"{s} has not been run: run `{s}_inputs_job`, then `{s}_model_job` for partitions base, cand"
           for s in ("format_robustness", "order_probe", "workflow_perturb")}


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
        ("wrapper_sensitivity", m, sl) for m, sl, _ in REGRESSED]
    for r, (_, _, d) in zip(v["blocking_regressions"], REGRESSED):
        assert [r["difference"], r["ci_low"], r["ci_high"], r["p_holm"]] == pytest.approx([d, d, d, 12 * 2 ** -11])
    assert len(v["rows"]) == 12 and {r["verdict"] for r in v["rows"]} == {"regressed", "no detectable change"}
    assert v["skipped"] == NOT_RUN

    code, out, _ = verdict(capsys, "--model", "cand", "--study", "wrapper_sensitivity")
    assert code == 1
    assert out.splitlines()[:3] == ["candidate cand against the approved baseline base", "", "## wrapper_sensitivity"]
    assert out.splitlines()[-1] == (
        "REGRESSED: 4 row(s) on blocking metrics: wrapper_sensitivity accuracy (task=t_bool) -20.0 pp, p (Holm) 0.00586; "
        "wrapper_sensitivity accuracy (task=t_bool, wrapper=json) -100.0 pp, p (Holm) 0.00586; "
        "wrapper_sensitivity parseability (task=t_bool) -20.0 pp, p (Holm) 0.00586; "
        "wrapper_sensitivity parseability (task=t_bool, wrapper=json) -100.0 pp, p (Holm) 0.00586")


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
        (["--model", "gemma"], f"model 'gemma' is not in the registry {reg} (registered: base, cand); add its entry "
                               "there, then run the studies' model jobs for its partition"),
        (["--model", "base"], "base is the approved baseline; name a candidate (cand)"),
        (["--model", "cand", "--study", "order_probe"], NOT_RUN["order_probe"]),
        (["--model", "cand", "--warehouse", str(tmp_path / "none.duckdb")],
         f"no warehouse {tmp_path / 'none.duckdb'}: run `format_robustness_model_job` for partitions base, cand "
         "(after `format_robustness_inputs_job`)"),
    ]
    for args, line in cases:
        assert verdict(capsys, *args) == (2, "", f"metamorph verdict: error: {line}\n"), args

    reg.write_text(WRAPPER_REGISTRY.replace("status: approved", "status: candidate") % "")
    assert verdict(capsys, "--model", "cand") == (2, "", "metamorph verdict: error: no approved baseline (none): set "
                                                         f"`status: approved` on exactly one entry of {reg}\n")
    # evaluated in no study with the baseline: each study's next step, on one line
    reg.write_text(WRAPPER_REGISTRY % "" + "  - {id: later, provider: llama_cpp, model: later.gguf}\n")
    code, out, err = verdict(capsys, "--model", "later")
    assert (code, out) == (2, "")
    assert err == ("metamorph verdict: error: later has not been compared with base in any study: "
                   + "; ".join([NOT_RUN["format_robustness"].replace("cand", "later"),
                                NOT_RUN["order_probe"].replace("cand", "later"),
                                NOT_RUN["workflow_perturb"].replace("cand", "later"),
                                "not evaluated in wrapper_sensitivity: later — run `wrapper_sensitivity_model_job` "
                                "for its partition"]) + "\n")
