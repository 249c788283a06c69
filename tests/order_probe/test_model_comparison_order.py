"""OrderProbe upgrade verdicts: per-expression recovery item scores on synthetic paired replies of a
known effect, through the library and through Dagster in process (the asset reads a
``scored_replies`` table written to a real DuckDB warehouse; no model is called)."""

import dagster as dg
import duckdb
import pandas as pd
import pytest

from metamorph.comparison import compare_models
from metamorph.studies.order_probe import report as op_report

PATTERNS = ("BACD", "CDAB", "DCBA", "ADCB")


def synthetic_scored() -> pd.DataFrame:
    """zero_shot only. zh_cn: 8 expressions z0..z7 (base also z8); ja: 4 expressions j0..j3; 4
    scrambled inputs each plus the unperturbed run. base recovers every scrambled input; cand
    misses the first pattern of every zh_cn expression (3 of 4: 0.75) and every ja one is
    recovered. The unperturbed rows go the other way (base wrong, cand right): they must not count."""
    rows = []
    items = [("zh_cn", f"z{i}") for i in range(9)] + [("ja", f"j{i}") for i in range(4)]
    for model in ("base", "cand"):
        for lang, item in items:
            if model == "cand" and item == "z8":
                continue
            for p in PATTERNS:
                correct = not (model == "cand" and lang == "zh_cn" and p == PATTERNS[0])
                rows.append(
                    {
                        "model_id": model,
                        "setting": "zero_shot",
                        "language": lang,
                        "item_id": item,
                        "pattern": p,
                        "input_kind": "scrambled",
                        "correct": correct,
                    }
                )
            rows.append(
                {
                    "model_id": model,
                    "setting": "zero_shot",
                    "language": lang,
                    "item_id": item,
                    "pattern": "ABCD",
                    "input_kind": "unperturbed",
                    "correct": model == "cand",
                }
            )
    return pd.DataFrame(rows).assign(reason="ok")


def test_item_is_the_expression_averaged_over_its_scrambled_inputs():
    s = op_report.comparison_scores(synthetic_scored())
    assert sorted(set(s["slice"])) == [
        "language=ja, setting=zero_shot",
        "language=zh_cn, setting=zero_shot",
        "setting=zero_shot",
    ]
    z0 = s[(s["model_id"] == "cand") & (s["slice"] == "setting=zero_shot") & (s["item_id"] == "zh_cn/z0")]
    assert z0[["value", "n_obs"]].values.tolist() == [[0.75, 4]]  # the unperturbed row is left out
    assert len(s[(s["model_id"] == "base") & (s["slice"] == "setting=zero_shot")]) == 13


def test_a_call_error_is_left_out_of_the_item_score_not_scored_as_not_recovered():
    # cand's z0: its first pattern (the only wrong reply) failed at the provider instead: the expression's
    # value is the mean of its 3 replies (1.0, not 0.75) and n_obs 3
    scored = synthetic_scored()
    first = (scored["model_id"] == "cand") & (scored["item_id"] == "z0") & (scored["pattern"] == PATTERNS[0])
    scored.loc[first, "reason"] = "call_error"
    s = op_report.comparison_scores(scored)
    z0 = s[(s["model_id"] == "cand") & (s["slice"] == "setting=zero_shot") & (s["item_id"] == "zh_cn/z0")]
    assert z0[["value", "n_obs"]].values.tolist() == [[1.0, 3]]


def test_known_effect_gives_hand_computed_p_values_and_a_regression():
    out = compare_models(op_report.comparison_scores(synthetic_scored()), "base", op_report.COMPARED_METRICS)
    out = out.set_index("slice")
    zh, ja, pooled = (
        out.loc[k] for k in ("language=zh_cn, setting=zero_shot", "language=ja, setting=zero_shot", "setting=zero_shot")
    )
    # zh_cn: 8 paired expressions, each 1 -> 0.75: exact sign-flip p = 2 / 2**8
    assert (zh.n_items, zh.n_baseline_only, zh.n_worse, zh.test) == (8, 1, 8, "paired_permutation")
    assert (zh.difference, zh.ci_low, zh.ci_high, zh.p_value) == (-0.25, -0.25, -0.25, 2 / 256)
    # ja: every value 1 for both: 0/1 data, exact McNemar with no discordant pair
    assert (ja.n_items, ja.difference, ja.test, ja.p_value) == (4, 0.0, "mcnemar_exact", 1.0)
    # pooled: 12 items, 8 at -0.25 and 4 at 0 (2**12 sign patterns, exact): the same p; mean -2/12
    assert (pooled.n_items, pooled.n_baseline_only, pooled.baseline_mean) == (12, 1, 1.0)
    assert pooled.difference == pytest.approx(-1 / 6) and pooled.candidate_mean == pytest.approx(10 / 12)
    assert pooled.p_value == 2 / 256
    # Holm over 3: 3 · 2/256 for both, 1 for ja
    assert out["p_holm"].tolist() == [1.0, 3 * 2 / 256, 3 * 2 / 256]
    assert out["verdict"].tolist() == ["no detectable change", "regressed", "regressed"]


def test_missing_column_is_named():
    with pytest.raises(ValueError, match="input_kind"):
        op_report.comparison_scores(synthetic_scored().drop(columns=["input_kind"]))


def test_model_comparison_asset_materializes_on_a_scored_table(metamorph_home, tmp_path, monkeypatch):
    from pipelines.definitions import build_definitions

    reg = tmp_path / "models.yaml"
    reg.write_text(
        "models:\n  - {id: base, provider: llama_cpp, model: base.gguf, status: approved}\n"
        "  - {id: cand, provider: llama_cpp, model: cand.gguf}\n"
        "  - {id: later, provider: llama_cpp, model: SmolLM2-135M-Instruct.Q4_1.gguf}\n"
    )
    monkeypatch.setenv("METAMORPH_MODELS", str(reg))
    db = metamorph_home / "metamorph.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE SCHEMA order_probe")
    con.register("s", synthetic_scored())
    con.execute("CREATE TABLE order_probe.scored_replies AS SELECT * FROM s")
    con.close()
    defs = build_definitions()
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["base", "cand", "later"])
        res = defs.resolve_implicit_global_asset_job_def().execute_in_process(
            asset_selection=[dg.AssetKey(["order_probe", "model_comparison"])], instance=instance
        )
        assert res.success  # cand regressed: the check fails (ERROR), the run does not
        md = res.asset_materializations_for_node("order_probe__model_comparison")[0].metadata
        [check] = res.get_asset_check_evaluations()
    assert md["baseline"].value == "base" and md["candidates_not_evaluated"].value == ["later"]
    assert md["next_step"].value == (
        "candidate registered but not evaluated: later — run `order_probe_model_job` for its partition "
        "(command line: `metamorph run order_probe --models later`)"
    )
    # and what running it costs: the study's default inputs (none materialized), nothing cached —
    # 4 idioms × (23 scrambles + the unperturbed input) × 3 settings = 288 calls; a local model not run here yet
    assert md["planned"].value == "nothing cached: later: 288 calls, time unknown (not run on this machine yet)"
    assert (check.check_name, check.passed) == ("no_blocking_regression", False)
    assert [(r["candidate_id"], r["metric"], r["p_holm"]) for r in check.metadata["regressed_rows"].value] == [
        ("cand", "recovery", 0.0234)  # 3 × 2 / 256 = 0.0234375, to 3 significant digits as the table prints it
    ] * 2
    con = duckdb.connect(str(db), read_only=True)
    cmp = con.execute("SELECT * FROM order_probe.model_comparison ORDER BY slice").df()
    con.close()
    assert cmp["candidate_id"].unique().tolist() == ["cand"] and cmp["metric"].unique().tolist() == ["recovery"]
    assert cmp["verdict"].tolist() == ["no detectable change", "regressed", "regressed"]
    assert cmp["p_holm"].tolist() == [1.0, 3 * 2 / 256, 3 * 2 / 256]
