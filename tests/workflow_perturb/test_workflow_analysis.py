"""WorkflowPerturb analysis (arXiv 2602.17990 §5–6, App. C): hand-computed tables.

Every expected number below is computed by hand in the comments; no encoder, no model.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from metamorph.studies.workflow_perturb import gate
from metamorph.studies.workflow_perturb import analysis as wp
from metamorph.studies.workflow_perturb.perturb import target_score
from metamorph.studies.workflow_perturb.workflows import size_stratum

EPS = 1e-12


def row(
    gid: str, ptype: str, p: float, *, n_nodes: int = 6, op: str = "deterministic", status: str = "valid", **metrics
) -> dict:
    r = {
        "golden_id": gid,
        "variant_id": f"{gid}::{ptype}@{round(p * 100)}",
        "type": ptype,
        "severity": p,
        "n_nodes": n_nodes,
        "stratum": size_stratum(n_nodes),
        "operator": op,
        "status": status,
        "target_score": target_score(ptype, p),
    }
    r.update({m: metrics.get(m) for m in wp.METRICS})
    return r


def frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows)


def cell(df: pd.DataFrame, **keys) -> pd.Series:
    m = pd.Series(True, index=df.index)
    for k, v in keys.items():
        m &= df[k] == v
    sub = df[m]
    assert len(sub) == 1, (keys, sub)
    return sub.iloc[0]


# --------------------------------------------------------------------------- validation


def test_validate_names_missing_columns():
    df = frame([row("g1", "missing", 0.1, chain_f1=0.9)]).drop(columns=["judge", "stratum"])
    with pytest.raises(ValueError, match=r"missing required column\(s\) \['stratum', 'judge'\]"):
        wp.severity_table(df)


@pytest.mark.parametrize(
    "col,value,msg",
    [
        ("kendall_tau", 1.5, "kendall_tau' must be in \\[-1, 1\\]"),
        ("bleu", -0.1, "bleu' must be in \\[0, 1\\]"),
        ("severity", 0.2, "severity' must be one of"),
        ("stratum", "16+", "stratum' must be size_stratum"),
        ("target_score", 1.0, "target_score' must be target_score"),
        ("graph_f1", "high", "graph_f1' must be numeric"),
    ],
)
def test_validate_rejects_bad_values(col, value, msg):
    df = frame([row("g1", "missing", 0.1, chain_f1=0.9)])
    df[col] = df[col].astype(object)
    df.loc[0, col] = value
    with pytest.raises(ValueError, match=msg):
        wp.validate_scores(df)


def test_validate_rejects_duplicate_keys():
    df = frame([row("g1", "missing", 0.1), row("g1", "missing", 0.1)])
    with pytest.raises(ValueError, match="share a \\(golden_id, variant_id, operator\\) key"):
        wp.validate_scores(df)


def test_negative_tau_is_valid():
    df = frame([row("g1", "compressed", 0.1, kendall_tau=-0.4)])
    assert wp.validate_scores(df)["kendall_tau"].iloc[0] == -0.4


# --------------------------------------------------------------------------- severity table


def severity_rows() -> list[dict]:
    return [
        # missing @ 10%: chain_f1 0.9, 0.7 and one null; judge null everywhere
        row("g1", "missing", 0.1, chain_f1=0.9),
        row("g2", "missing", 0.1, chain_f1=0.7),
        row("g3", "missing", 0.1, chain_f1=None),
        # an invalid variant (excluded by default)
        row("g4", "missing", 0.1, chain_f1=0.0, status="invalid"),
        # missing @ 30%: one value -> sd undefined
        row("g1", "missing", 0.3, chain_f1=0.5),
    ]


def test_severity_table_mean_sd_n_with_null():
    t = wp.severity_table(frame(severity_rows()))
    c = cell(t, operator="deterministic", metric="chain_f1", type="missing", severity=0.1)
    # mean(0.9, 0.7) = 0.8; sd = sqrt(((0.1)^2 + (0.1)^2) / (2 - 1)) = sqrt(0.02)
    assert c["mean"] == pytest.approx(0.8, abs=EPS)
    assert c["sd"] == pytest.approx(math.sqrt(0.02), abs=EPS)
    assert (c["n"], c["n_null"]) == (2, 1)
    assert c["target_score"] == pytest.approx(0.9, abs=EPS)
    assert c["mean_residual"] == pytest.approx(-0.1, abs=EPS)
    one = cell(t, metric="chain_f1", type="missing", severity=0.3)
    assert one["mean"] == pytest.approx(0.5, abs=EPS) and pd.isna(one["sd"]) and one["n"] == 1
    judge = cell(t, metric="judge", type="missing", severity=0.1)
    assert pd.isna(judge["mean"]) and pd.isna(judge["sd"]) and (judge["n"], judge["n_null"]) == (0, 3)
    # 7 metrics x 2 (type, severity) cells present
    assert len(t) == 14
    assert list(t["metric"].unique()) == list(wp.METRICS)


def test_severity_table_include_invalid():
    t = wp.severity_table(frame(severity_rows()), include_invalid=True)
    c = cell(t, metric="chain_f1", type="missing", severity=0.1)
    # mean(0.9, 0.7, 0.0) = 1.6 / 3
    assert c["mean"] == pytest.approx(1.6 / 3, abs=EPS) and (c["n"], c["n_null"]) == (3, 1)


def test_severity_table_keeps_operators_apart():
    rows = [row("g1", "missing", 0.1, chain_f1=0.9), row("g1", "missing", 0.1, chain_f1=0.5, op="llm")]
    t = wp.severity_table(frame(rows))
    assert cell(t, operator="deterministic", metric="chain_f1")["mean"] == pytest.approx(0.9, abs=EPS)
    assert cell(t, operator="llm", metric="chain_f1")["mean"] == pytest.approx(0.5, abs=EPS)


# --------------------------------------------------------------------------- sensitivity


def test_sensitivity_deltas_exact():
    rows = [
        row("g1", "missing", 0.1, graph_f1=0.9),
        row("g2", "missing", 0.1, graph_f1=0.8),  # s10 = 0.85
        row("g1", "missing", 0.3, graph_f1=0.6),  # s30 = 0.6
        row("g1", "missing", 0.5, graph_f1=0.5),
        row("g2", "missing", 0.5, graph_f1=0.3),
        row("g3", "missing", 0.5, graph_f1=None),  # s50 = 0.4 (n 2)
    ]
    s = wp.sensitivity_matrix(frame(rows))
    c = cell(s, metric="graph_f1", type="missing")
    assert c["delta_avg"] == pytest.approx(2.5 * (0.85 - 0.4), abs=EPS)  # 1.125
    assert c["delta_1"] == pytest.approx(0.25, abs=EPS)  # 0.85 - 0.6
    assert c["delta_2"] == pytest.approx(0.2, abs=EPS)  # 0.6 - 0.4
    assert c["delta_1_per_unit"] == pytest.approx(1.25, abs=EPS)
    assert c["delta_2_per_unit"] == pytest.approx(1.0, abs=EPS)
    assert c["delta_avg"] == pytest.approx((c["delta_1_per_unit"] + c["delta_2_per_unit"]) / 2, abs=EPS)
    assert (c["n_10"], c["n_30"], c["n_50"]) == (2, 1, 2)
    assert c["target_delta_avg"] == pytest.approx(1.0, abs=EPS)
    # no defined score at any severity -> every delta null
    j = cell(s, metric="judge", type="missing")
    assert pd.isna(j["delta_avg"]) and pd.isna(j["delta_1"]) and j["n_10"] == 0


def test_sensitivity_missing_severity_gives_null_and_description_target():
    rows = [row("g1", "description", 0.1, bleu=0.8), row("g1", "description", 0.5, bleu=0.4)]
    c = cell(wp.sensitivity_matrix(frame(rows)), metric="bleu", type="description")
    assert c["delta_avg"] == pytest.approx(1.0, abs=EPS)  # 2.5 * 0.4
    assert pd.isna(c["delta_1"]) and pd.isna(c["delta_2"]) and c["n_30"] == 0
    assert c["target_delta_avg"] == 0.0


# --------------------------------------------------------------------------- strata


def test_strata_table_exact():
    rows = [
        row("a", "missing", 0.1, n_nodes=6, chain_f1=0.9),
        row("b", "missing", 0.1, n_nodes=10, chain_f1=0.8),
        row("c", "missing", 0.1, n_nodes=15, chain_f1=0.6),
        row("d", "missing", 0.1, n_nodes=20, chain_f1=None),
    ]
    t = wp.strata_table(frame(rows))
    small = cell(t, metric="chain_f1", stratum="5-7")
    mid = cell(t, metric="chain_f1", stratum="8-15")
    big = cell(t, metric="chain_f1", stratum="16+")
    assert small["mean"] == pytest.approx(0.9, abs=EPS) and small["n"] == 1 and pd.isna(small["sd"])
    assert mid["mean"] == pytest.approx(0.7, abs=EPS) and mid["n"] == 2
    assert mid["sd"] == pytest.approx(math.sqrt(0.02), abs=EPS)
    assert pd.isna(big["mean"]) and (big["n"], big["n_null"]) == (0, 1)
    assert list(t[t["metric"] == "chain_f1"]["stratum"]) == ["5-7", "8-15", "16+"]


# --------------------------------------------------------------------------- recalibration


def recal_rows() -> list[dict]:
    mild = [0.9, 0.8, 0.7, 0.6, 1.0]
    moderate = [0.5, 0.4, 0.3, 0.2, 0.6]
    return [row(f"g{i}", "missing", 0.1, graph_f1=v, chain_f1=1.0) for i, v in enumerate(mild)] + [
        row(f"g{i}", "missing", 0.3, graph_f1=v, chain_f1=None) for i, v in enumerate(moderate)
    ]


def test_recalibrate_midpoint_exact():
    r = wp.recalibrate(frame(recal_rows()), percentile=10)
    c = cell(r, failure_mode="missing", metric="graph_f1")
    # mild sorted 0.6 0.7 0.8 0.9 1.0: Q(10) at position 0.1*4 = 0.4 -> 0.6 + 0.4*0.1 = 0.64
    # moderate sorted 0.2 0.3 0.4 0.5 0.6: Q(90) at position 3.6 -> 0.5 + 0.6*0.1 = 0.56
    assert c["mild_quantile"] == pytest.approx(0.64, abs=EPS)
    assert c["moderate_quantile"] == pytest.approx(0.56, abs=EPS)
    assert c["threshold"] == pytest.approx(0.60, abs=EPS)
    assert c["rule"] == "midpoint" and c["percentile"] == 10.0 and c["role"] == "primary"
    assert c["default_threshold"] == 0.75 and bool(c["separated"]) is True
    assert (c["n_mild"], c["n_moderate"]) == (5, 5)
    # breach = strictly below 0.60: mild none (0.6 is not < 0.6); moderate 0.2 0.3 0.4 0.5 -> 80 %
    assert c["mild_breach_pct"] == 0.0 and c["moderate_breach_pct"] == pytest.approx(80.0, abs=EPS)
    # chain_f1 has no defined moderate score -> null threshold with a note
    ch = cell(r, failure_mode="missing", metric="chain_f1")
    assert pd.isna(ch["threshold"]) and ch["n_moderate"] == 0 and "moderate" in ch["note"]
    assert ch["mild_quantile"] == pytest.approx(1.0, abs=EPS)
    # every bundle metric has a row (2 + 1 missing, 1 + 2 compressed, 2 + 1 description)
    assert len(r) == 9


def test_recalibrate_mild_rule_exact():
    c = cell(wp.recalibrate(frame(recal_rows()), percentile=10, rule="mild"), failure_mode="missing", metric="graph_f1")
    assert c["threshold"] == pytest.approx(0.64, abs=EPS) and c["rule"] == "mild"
    # mild: 0.6 < 0.64 -> 1 of 5 = 20 %; moderate: all 5 below -> 100 %
    assert c["mild_breach_pct"] == pytest.approx(20.0, abs=EPS) and c["moderate_breach_pct"] == 100.0


def test_recalibrated_thresholds_round_trip(tmp_path):
    import json

    table = wp.recalibrate(frame(recal_rows()), percentile=10)
    doc = wp.recalibrated_thresholds(table)
    assert doc["failure_modes"]["missing"]["primary"]["graph_f1"] == pytest.approx(0.60, abs=EPS)
    assert doc["failure_modes"]["missing"]["primary"]["chain_f1"] == 0.75  # kept (undefined)
    assert doc["calibration"]["rule"] == "midpoint" and doc["calibration"]["percentile"] == 10.0
    kept = {(k["failure_mode"], k["metric"]) for k in doc["calibration"]["kept_default"]}
    assert ("missing", "chain_f1") in kept
    p = tmp_path / "recal.json"
    p.write_text(json.dumps(doc))
    th = gate.load_thresholds(p)
    assert dict(th.bundle("missing").primary)["graph_f1"] == pytest.approx(0.60, abs=EPS)


def test_recalibrate_rejects_bad_arguments():
    with pytest.raises(ValueError, match="rule"):
        wp.recalibrate(frame(recal_rows()), rule="median")
    with pytest.raises(ValueError, match="percentile"):
        wp.recalibrate(frame(recal_rows()), percentile=60)


# --------------------------------------------------------------------------- firing matrix


def firing_rows() -> list[dict]:
    return [
        # missing @ 30 %
        row("r1", "missing", 0.3, graph_f1=0.7, chain_f1=0.8, kendall_tau=1.0, bleu=0.9, gleu=0.6),
        row("r2", "missing", 0.3, graph_f1=0.6, chain_f1=0.6, kendall_tau=0.5),
        row("r3", "missing", 0.3, graph_f1=0.75, chain_f1=0.75, kendall_tau=0.65),  # exactly at thresholds
        row("r4", "missing", 0.3, graph_f1=None, chain_f1=0.5),
        row("r5", "missing", 0.3),  # nothing defined
        # description @ 10 %
        row("d1", "description", 0.1, graph_f1=1.0, chain_f1=1.0, kendall_tau=1.0, bleu=0.69, gleu=0.71),
        row("d2", "description", 0.1, graph_f1=1.0, chain_f1=1.0, kendall_tau=1.0, bleu=0.5, gleu=0.5),
    ]


def test_firing_matrix_any_exact():
    f = wp.firing_matrix(frame(firing_rows()), mode="any")
    m = cell(f, failure_mode="missing", type="missing", severity=0.3)
    # r1 (graph 0.7), r2, r4 (chain 0.5) fire; r3 sits on the threshold; r5 is not evaluable
    assert (m["n_instances"], m["n_evaluable"], m["n_fired"]) == (5, 4, 3)
    assert m["firing_pct"] == pytest.approx(75.0, abs=EPS) and bool(m["on_target"])
    c = cell(f, failure_mode="compressed", type="missing", severity=0.3)
    # tau defined for r1 (1.0), r2 (0.5 fires), r3 (0.65, no breach) -> 1 / 3
    assert (c["n_evaluable"], c["n_fired"]) == (3, 1)
    assert c["firing_pct"] == pytest.approx(100 / 3, abs=EPS) and not bool(c["on_target"])
    d = cell(f, failure_mode="description", type="missing", severity=0.3)
    assert (d["n_evaluable"], d["n_fired"]) == (1, 1)  # r1: gleu 0.6 breaches
    dd = cell(f, failure_mode="description", type="description", severity=0.1)
    assert (dd["n_evaluable"], dd["n_fired"], dd["firing_pct"]) == (2, 2, 100.0)
    md = cell(f, failure_mode="missing", type="description", severity=0.1)
    assert (md["n_evaluable"], md["n_fired"], md["firing_pct"]) == (2, 0, 0.0)
    assert len(f) == 3 * 2 and set(f["mode"]) == {"any"}


def test_firing_matrix_joint_exact():
    f = wp.firing_matrix(frame(firing_rows()), mode="joint")
    m = cell(f, failure_mode="missing", type="missing", severity=0.3)
    # r2 (both below) and r4 (the only defined primary breaches) fire; r1 has chain 0.8
    assert (m["n_evaluable"], m["n_fired"]) == (4, 2) and m["firing_pct"] == pytest.approx(50.0, abs=EPS)
    d = cell(f, failure_mode="description", type="missing", severity=0.3)
    assert d["n_fired"] == 0  # r1: bleu 0.9 does not breach
    dd = cell(f, failure_mode="description", type="description", severity=0.1)
    assert (dd["n_fired"], dd["firing_pct"]) == (1, 50.0)  # only d2 has both below
    c = cell(f, failure_mode="compressed", type="missing", severity=0.3)
    assert c["n_fired"] == 1  # one primary: joint == any


def test_firing_matrix_not_evaluable_is_null():
    f = wp.firing_matrix(frame([row("x", "compressed", 0.5)]))
    c = cell(f, failure_mode="compressed", type="compressed", severity=0.5)
    assert (c["n_instances"], c["n_evaluable"], c["n_fired"]) == (1, 0, 0) and pd.isna(c["firing_pct"])


def test_firing_matrix_uses_given_thresholds():
    th = gate.thresholds_from_dict({"failure_modes": {"missing": {"primary": {"graph_f1": 0.95}}}})
    f = wp.firing_matrix(frame(firing_rows()), th)
    m = cell(f, failure_mode="missing", type="description", severity=0.1)
    assert m["n_fired"] == 0  # graph 1.0 is not < 0.95
    mm = cell(f, failure_mode="missing", type="missing", severity=0.3)
    assert (mm["n_evaluable"], mm["n_fired"]) == (3, 3)  # r1 0.7, r2 0.6, r3 0.75 < 0.95
    assert set(f["failure_mode"]) == {"missing"}


# --------------------------------------------------------------------------- the judge's rows


def test_judge_severity_table_leaves_failed_calls_out_and_says_why_a_cell_is_null():
    scores = frame(
        [
            row("g1", "missing", 0.1, chain_f1=0.9),
            row("g2", "missing", 0.1, chain_f1=0.8),
            row("g1", "missing", 0.3, chain_f1=0.7),
            row("g2", "missing", 0.3, chain_f1=0.6),
            row("g1", "missing", 0.5, chain_f1=0.6),
        ]
    )
    # g1@10: 2 valid replies, 1 failed call; g2@10: every call failed; @30: every call failed for both;
    # g1@50 not judged
    judged = pd.DataFrame(
        {
            "variant_id": ["g1::missing@10", "g2::missing@10", "g1::missing@30", "g2::missing@30"],
            "judge": [0.8, None, None, None],
            "judge_valid": [2, 0, 0, 0],
            "judge_invalid": [0, 0, 0, 0],
            "n_call_errors": [1, 3, 3, 3],
        }
    )
    t = wp.judge_severity_table(scores, judged, model_id="j")
    c10 = cell(t, type="missing", severity=0.1)
    assert (c10["mean"], c10["n"], c10["n_null"], c10["n_call_errors"], c10["not_measurable"]) == (
        pytest.approx(0.8),
        1,
        1,
        4,
        None,
    )
    c30 = cell(t, type="missing", severity=0.3)
    assert pd.isna(c30["mean"]) and (c30["n"], c30["n_call_errors"]) == (0, 6)
    assert c30["not_measurable"] == "not measurable: every call failed (6 of 6)"
    c50 = cell(t, type="missing", severity=0.5)
    assert pd.isna(c50["mean"]) and c50["n_call_errors"] == 0
    assert c50["not_measurable"] == "not measurable: no variant of the cell judged"
    invalid = judged.assign(judge_invalid=[0, 0, 1, 0], n_call_errors=[1, 3, 2, 3])
    c30 = cell(wp.judge_severity_table(scores, invalid, model_id="j"), type="missing", severity=0.3)
    assert c30["not_measurable"] == "not measurable: no reply parsed (1 of 1 unparseable)"


def test_attach_judge_gives_the_judge_row_null_never_zero():
    scores = frame(
        [
            row("g1", "missing", 0.1, chain_f1=0.9),
            row("g2", "missing", 0.1, chain_f1=0.8),
            row("g1", "missing", 0.5, chain_f1=0.6),
            row("g2", "missing", 0.5, chain_f1=0.5),
        ]
    )
    judged = pd.DataFrame(
        {"variant_id": ["g1::missing@10", "g2::missing@10", "g1::missing@50"], "judge": [0.8, None, 0.4]}
    )  # g2@10: no valid reply; g2@50: not judged
    s = wp.attach_judge(scores, judged)
    assert s["judge"].isna().tolist() == [False, True, False, True]
    sev = wp.severity_table(s)
    c10 = cell(sev, metric="judge", type="missing", severity=0.1)
    assert (c10["mean"], c10["n"], c10["n_null"]) == (pytest.approx(0.8), 1, 1)
    c50 = cell(sev, metric="judge", type="missing", severity=0.5)
    assert (c50["mean"], c50["n"], c50["n_null"]) == (pytest.approx(0.4), 1, 1)
    d = cell(wp.sensitivity_matrix(s), metric="judge", type="missing")
    assert d["delta_avg"] == pytest.approx(2.5 * (0.8 - 0.4))
    with pytest.raises(ValueError, match="not in the scores frame"):
        wp.attach_judge(scores, pd.DataFrame({"variant_id": ["zz::missing@10"], "judge": [0.2]}))
    with pytest.raises(ValueError, match="judged twice"):
        wp.attach_judge(scores, pd.DataFrame({"variant_id": ["g1::missing@10"] * 2, "judge": [0.2, 0.4]}))
    with pytest.raises(ValueError, match="missing column 'judge'"):
        wp.attach_judge(scores, pd.DataFrame({"variant_id": []}))
