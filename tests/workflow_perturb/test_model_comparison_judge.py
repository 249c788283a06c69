"""WorkflowPerturb upgrade verdicts and report-card rows: the LLM judge's per-variant scores of two
judge models on synthetic paired data of a known effect, through the library and through Dagster
in process (``judge_scores`` written to a real DuckDB warehouse; no model is called)."""

import json

import dagster as dg
import duckdb
import pandas as pd
import pytest

from metamorph.comparison import compare_models
from metamorph.studies.workflow_perturb import report as wp_report

GOLDENS = [f"g{i}" for i in range(7)]


def synthetic_judge_scores() -> pd.DataFrame:
    """7 goldens × type missing × severities 0.1 and 0.5. base scores every 0.1 variant 0.8 and
    every 0.5 variant 0.6; cand scores 0.1 variants 0.8 (g6: no valid reply, null) and 0.5
    variants 0.2 — it separates the heavily degraded variants better."""
    rows = []
    for model in ("base", "cand"):
        for g in GOLDENS:
            for p in (0.1, 0.5):
                judge = {0.1: 0.8, 0.5: 0.6 if model == "base" else 0.2}[p]
                null = model == "cand" and g == "g6" and p == 0.1
                rows.append(
                    {
                        "model_id": model,
                        "variant_id": f"{g}-missing-{p}",
                        "golden_id": g,
                        "type": "missing",
                        "severity": p,
                        "judge": None if null else judge,
                        "judge_valid": 0 if null else 3,
                        "judge_invalid": 3 if null else 0,
                        "judge_reasons": json.dumps(["no_json"] * 3 if null else ["ok"] * 3),
                        "generation_keys": json.dumps([f"{model}{g}{p}{k}" for k in range(3)]),
                    }
                )
    return pd.DataFrame(rows).astype({"judge": float})


def test_judge_verdicts_on_a_known_effect():
    s = wp_report.comparison_scores(synthetic_judge_scores())
    # 13 judged variants per (type, severity), 7 goldens per type; the null variant is no item
    assert len(s[s["model_id"] == "cand"]) == 13 + 7
    out = compare_models(s, "base", wp_report.COMPARED_METRICS).set_index("slice")
    mild, severe, pooled = (
        out.loc[k] for k in ("type=missing, severity=0.1", "type=missing, severity=0.5", "type=missing")
    )
    # 0.1: 6 paired variants, no difference; g6 only the baseline judged validly
    assert (mild.n_items, mild.n_baseline_only, mild.difference, mild.test, mild.p_value) == (
        6,
        1,
        0.0,
        "paired_permutation",
        1.0,
    )
    # 0.5: 7 variants, each 0.6 -> 0.2: exact sign-flip p = 2 / 2**7; lower is better -> n_better 7
    assert (severe.n_items, severe.n_better, severe.n_worse, severe.p_value) == (7, 7, 0, 2 / 128)
    assert severe.difference == pytest.approx(-0.4) and not severe.higher_is_better
    # per type the item is the golden (mean of its judged variants): base 0.7 each; cand 0.5 for g0..g5
    # and 0.2 for g6 (its 0.1 variant has no valid reply) -> 7 paired goldens, all lower: p = 2/128
    assert (pooled.n_items, pooled.n_baseline_only, pooled.p_value) == (7, 0, 2 / 128)
    assert pooled.difference == pytest.approx((6 * -0.2 - 0.5) / 7)
    # Holm over 3: 3 · 2/128 = 0.046875 < 0.05 for both -> improved (the candidate scores degraded variants lower)
    assert out["p_holm"].tolist() == [3 * 2 / 128, 1.0, 3 * 2 / 128]  # slices: pooled, 0.1, 0.5
    assert out["verdict"].tolist() == ["improved", "no detectable change", "improved"]


def test_per_type_comparison_pairs_goldens_not_their_severities():
    # 3 goldens x 3 severities; cand scores every variant 0.2 lower. Variants as items: 9 nonzero
    # differences, exact p = 2/512; the golden is the cluster: 3 items, p = 2/8 = 0.25.
    rows = [
        {
            "model_id": m,
            "variant_id": f"{g}-missing-{p}",
            "golden_id": g,
            "type": "missing",
            "severity": p,
            "judge": 0.8 - (0.2 if m == "cand" else 0.0),
        }
        for m in ("base", "cand")
        for g in ("g0", "g1", "g2")
        for p in (0.1, 0.3, 0.5)
    ]
    out = compare_models(wp_report.comparison_scores(pd.DataFrame(rows)), "base", wp_report.COMPARED_METRICS)
    per_type = out.set_index("slice").loc["type=missing"]
    assert (per_type.n_items, per_type.p_value) == (3, pytest.approx(0.25))
    assert per_type.difference == pytest.approx(-0.2)


def test_card_rows_mean_judge_score_with_a_ci_over_goldens():
    card = wp_report.card_rows(synthetic_judge_scores()).set_index("model_id")
    assert card.loc["base", ["study", "metric", "slice", "unit", "value", "ci_low", "ci_high", "n"]].tolist() == [
        "workflow_perturb",
        "judge",
        "all",
        "%",
        pytest.approx(70.0),
        pytest.approx(70.0),
        pytest.approx(70.0),
        7,
    ]
    # cand: 6 goldens at (0.8 + 0.2) and g6 at 0.2 alone: 100 · 6.2 / 13
    assert card.loc["cand", "value"] == pytest.approx(100 * 6.2 / 13) and card.loc["cand", "n"] == 7
    assert card.loc["cand", "ci_low"] < card.loc["cand", "value"] < card.loc["cand", "ci_high"]
    assert not card["higher_is_better"].any()


def test_missing_column_is_named():
    with pytest.raises(ValueError, match="golden_id"):
        wp_report.card_rows(synthetic_judge_scores().drop(columns=["golden_id"]))
    with pytest.raises(ValueError, match="severity"):
        wp_report.comparison_scores(synthetic_judge_scores().drop(columns=["severity"]))


def test_comparison_and_card_materialize_on_a_judge_table(metamorph_home, tmp_path, monkeypatch):
    from pipelines.definitions import build_definitions

    reg = tmp_path / "models.yaml"
    reg.write_text(
        "models:\n  - {id: base, provider: llama_cpp, model: base.gguf, status: approved}\n"
        "  - {id: cand, provider: llama_cpp, model: cand.gguf}\n"
    )
    monkeypatch.setenv("METAMORPH_MODELS", str(reg))
    db = metamorph_home / "metamorph.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE SCHEMA workflow_perturb")
    con.register("j", synthetic_judge_scores())
    con.execute("CREATE TABLE workflow_perturb.judge_scores AS SELECT * FROM j")
    con.close()
    defs = build_definitions()
    keys = [
        dg.AssetKey(["workflow_perturb", "model_comparison"]),
        dg.AssetKey(["model_upgrades", "robustness_report_card"]),
    ]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("model", ["base", "cand"])
        job = defs.resolve_implicit_global_asset_job_def()
        # the card reads the verdicts from the warehouse (no upstream asset): built in a run after them
        assert job.execute_in_process(asset_selection=keys[:1], instance=instance).success
        res = job.execute_in_process(asset_selection=keys[1:], instance=instance)
        assert res.success
        studies = res.asset_materializations_for_node("model_upgrades__robustness_report_card")[0].metadata["studies"]
    assert studies.value["included"] == ["workflow_perturb"]
    con = duckdb.connect(str(db), read_only=True)
    cmp = con.execute("SELECT * FROM workflow_perturb.model_comparison ORDER BY slice").df()
    card = con.execute("SELECT * FROM model_upgrades.robustness_report_card ORDER BY model_id").df()
    con.close()
    assert cmp["verdict"].tolist() == ["improved", "no detectable change", "improved"]
    assert cmp["p_holm"].tolist() == [3 * 2 / 128, 1.0, 3 * 2 / 128]
    assert card["model_id"].tolist() == ["base", "cand"] and set(card["metric"]) == {"judge"}
    assert card["value"].tolist() == pytest.approx([70.0, 100 * 6.2 / 13])
    assert set(card["version"]) == {"unrecorded"}  # no perturbations_llm materialization recorded one


def test_gate_card_rows_are_the_on_target_firing_rate_of_each_generators_perturbations():
    """Per generator and perturbation type: the % of its valid LLM perturbations on which the
    bundle of that type fires (mode "any", so the firing cases of test_firing_matrix_any_exact
    hold): gen-a's missing@30 variants r1, r2, r4 fire, r3 sits on the thresholds, r5 has no
    defined primary metric (left out) → 3 of 4 = 75 %; its description variants d1, d2 both fire
    → 100 %; gen-b's one missing variant (r3's scores) does not fire → 0 %."""
    from metamorph.studies.workflow_perturb.report import gate_card_rows
    from tests.workflow_perturb.test_workflow_analysis import firing_rows, row

    rows = [*firing_rows(), row("b3", "missing", 0.3, graph_f1=0.75, chain_f1=0.75, kendall_tau=0.65)]
    scores = pd.DataFrame(rows).assign(operator="llm")
    scores["model_id"] = ["gen-b" if g == "b3" else "gen-a" for g in scores["golden_id"]]
    card = gate_card_rows(scores, mode="any")
    got = {(r.model_id, r.slice): (r.value, r.n, r.higher_is_better) for r in card.itertuples()}
    assert got == {
        ("gen-a", "type=description"): (100.0, 2, True),
        ("gen-a", "type=missing"): (75.0, 4, True),
        ("gen-b", "type=missing"): (0.0, 1, True),
    }
    assert set(card["metric"]) == {"gate_firing"} and set(card["study"]) == {"workflow_perturb"}
    desc = card[card["slice"].eq("type=description")].iloc[0]
    assert (desc["ci_low"], desc["ci_high"]) == (100.0, 100.0)  # every golden fires: a degenerate bootstrap
    one = card[card["model_id"].eq("gen-b")].iloc[0]
    assert pd.isna(one["ci_low"]) and pd.isna(one["ci_high"])  # one golden: no bootstrap CI
    miss = card[(card["model_id"] == "gen-a") & (card["slice"] == "type=missing")].iloc[0]
    assert 0.0 <= miss["ci_low"] <= 75.0 <= miss["ci_high"] <= 100.0


def test_gate_card_rows_read_the_stored_perturbation_scores_llm_which_have_no_judge_column():
    """``perturbation_scores_llm`` as the asset stores it carries the non-judge metrics only (the
    judge is its own partitioned table): the card is built from it, the judge read as not measured.
    With the judge column dropped from the rows above, the firing rates are the same (no bundle's
    primary metric is the judge); the report card failed with "missing required column(s) ['judge']"."""
    from metamorph.studies.workflow_perturb.report import gate_card_rows
    from metamorph.studies.workflow_perturb.schemas import PerturbationScores
    from tests.workflow_perturb.test_workflow_analysis import firing_rows, row

    rows = [*firing_rows(), row("b3", "missing", 0.3, graph_f1=0.75, chain_f1=0.75, kendall_tau=0.65)]
    scores = pd.DataFrame(rows).assign(operator="llm").drop(columns=["judge"])
    scores["model_id"] = ["gen-b" if g == "b3" else "gen-a" for g in scores["golden_id"]]
    assert "judge" not in PerturbationScores.to_schema().columns
    card = gate_card_rows(scores, mode="any")
    got = {(r.model_id, r.slice): (r.value, r.n) for r in card.itertuples()}
    assert got == {
        ("gen-a", "type=description"): (100.0, 2),
        ("gen-a", "type=missing"): (75.0, 4),
        ("gen-b", "type=missing"): (0.0, 1),
    }
