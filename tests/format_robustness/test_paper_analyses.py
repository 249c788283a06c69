"""The analyses of §5.2–5.5 with hand-computed values, and the paper's own table
margins recomputed from its cells."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from scipy import stats as sst
from statsmodels.stats.contingency_tables import cochrans_q as sm_cochrans_q

from metamorph import stats
from metamorph.models import ModelSpec
from metamorph.studies.format_robustness import metrics as fr
from metamorph.studies.format_robustness import analysis as fan
from metamorph.studies.format_robustness import mitigations as mit
from metamorph.studies.format_robustness import schemas as sch
from metamorph.studies.format_robustness.plan import plan_generations, plan_routing
from metamorph.studies.format_robustness.renderers import DEFAULT_FORMATS, render
from metamorph.studies.format_robustness.sources import construct_dataset
from tests.format_robustness.test_metrics_format import BOT, make_gen

WF = ["OpenAI", "Anthropic", "Google", "Alibaba"]
DS = ["MedQA", "Construct", "DiscrimEval", "Credit Card"]

# Table 1 of the paper, cells only (M1, M2, M3 per dataset; columns OpenAI, Anthropic, Google, Alibaba)
TABLE1 = {
    "MedQA": {
        "MR1": [65.86, 76.44, 17.40, 41.96],
        "MR2": [16.80, 12.00, 19.70, 17.20],
        "MR3": [71.37, 88.80, 15.73, 31.85],
    },
    "Construct": {
        "MR1": [29.47, 44.53, 21.47, 57.20],
        "MR2": [7.60, 64.90, 6.40, 1.20],
        "MR3": [86.40, 64.80, 4.80, 63.20],
    },
    "DiscrimEval": {
        "MR1": [17.07, 8.80, 12.27, 21.73],
        "MR2": [37.60, 16.90, 53.10, 34.50],
        "MR3": [35.20, 0.40, 11.60, 21.20],
    },
    "Credit Card": {
        "MR1": [52.93, 25.47, 91.60, 77.07],
        "MR2": [53.60, 0.00, 14.40, 46.40],
        "MR3": [78.80, 30.80, 36.00, 84.40],
    },
}
# Table 1's printed margins: Avg. column per dataset, Avg. row per workflow + corner
TABLE1_AVG_COL = {
    "MedQA": [50.42, 16.43, 51.94],
    "Construct": [38.17, 20.03, 54.80],
    "DiscrimEval": [14.97, 35.52, 17.10],
    "Credit Card": [61.77, 28.60, 57.50],
}
TABLE1_AVG_ROW = {
    "MR1": [41.33, 38.81, 35.69, 49.49, 41.33],
    "MR2": [28.90, 23.45, 23.40, 24.83, 25.14],
    "MR3": [67.94, 46.20, 17.03, 50.16, 45.33],
}


def _table1_cells() -> pd.DataFrame:
    return pd.DataFrame(
        [
            dict(workflow_id=w, dataset=d, relation=rel, violation_pct=v)
            for d, by in TABLE1.items()
            for rel, vals in by.items()
            for w, v in zip(WF, vals)
        ]
    )


def test_table1_avg_row_and_column_are_unweighted_means_of_the_papers_cells():
    t = fan.mr_table(_table1_cells())
    sch.MRTable.validate(t)
    cell = t.set_index(["relation", "dataset", "workflow_id"])["violation_pct"]
    for d, vals in TABLE1_AVG_COL.items():
        for rel, want in zip(("MR1", "MR2", "MR3"), vals):
            # DiscrimEval M2: (37.60 + 16.90 + 53.10 + 34.50)/4 = 35.525, printed 35.52
            assert cell[(rel, d, fan.AVG)] == pytest.approx(want, abs=0.0051)
    for rel, vals in TABLE1_AVG_ROW.items():
        got = [round(cell[(rel, fan.AVG, w)] + 1e-9, 2) for w in WF + [fan.AVG]]
        # the paper's margins are means of its rounded cells; one printed digit may differ by 0.01
        assert got == pytest.approx(vals, abs=0.011)
    # exact, hand-computed: MedQA M1 Avg = (65.86 + 76.44 + 17.40 + 41.96)/4 = 50.415
    assert cell[("MR1", "MedQA", fan.AVG)] == pytest.approx(50.415)
    assert cell[("MR1", fan.AVG, "OpenAI")] == pytest.approx(165.33 / 4)
    assert len(t) == 3 * (16 + 4 + 4 + 1)


def test_with_avg_rejects_duplicates_and_reserved_key():
    cells = pd.DataFrame({"r": ["a", "a"], "c": ["x", "x"], "v": [1.0, 2.0]})
    with pytest.raises(ValueError, match="twice"):
        fan.with_avg(cells, "r", "c", "v")
    with pytest.raises(ValueError, match="already"):
        fan.with_avg(pd.DataFrame({"r": [fan.AVG], "c": ["x"], "v": [1.0]}), "r", "c", "v")
    # incomplete table: margins skip the missing cell
    t = fan.with_avg(pd.DataFrame({"r": ["a", "a", "b"], "c": ["x", "y", "x"], "v": [1.0, 3.0, 5.0]}), "r", "c", "v")
    got = {(r, c): v for r, c, v in t.itertuples(index=False)}
    assert (
        got[("a", fan.AVG)],
        got[("b", fan.AVG)],
        got[(fan.AVG, "x")],
        got[(fan.AVG, "y")],
        got[(fan.AVG, fan.AVG)],
    ) == (2.0, 5.0, 3.0, 3.0, 3.0)


# Table 3 (ΔMRV, pp): per dataset, relation -> [(Vot, Rte) for OpenAI, Anthropic, Google, Alibaba], printed Avg.
TABLE3 = {
    ("Construct", "MR1"): ([(13.73, 29.33), (10.93, 44.53), (-0.13, 21.47), (-1.60, 57.20)], (5.73, 38.13)),
    ("Construct", "MR2"): ([(0.00, 7.60), (0.00, 64.90), (0.00, 6.40), (0.00, 1.20)], (0.00, 20.03)),
    ("Construct", "MR3"): ([(86.40, 86.00), (64.80, 64.80), (4.80, 2.80), (63.20, 63.20)], (54.80, 54.20)),
    ("MedQA", "MR2"): ([(0.00, 16.80), (0.00, 12.00), (0.00, 19.70), (0.00, 17.20)], (0.00, 16.43)),
    ("MedQA", "MR3"): ([(71.37, 68.95), (88.80, 87.97), (15.73, 9.68), (31.85, 7.25)], (51.94, 43.46)),
}


def _table3(medqa_m1_alibaba_vote: float) -> pd.DataFrame:
    t = dict(TABLE3)
    t[("MedQA", "MR1")] = (
        [(2.80, 65.20), (21.71, 76.67), (4.93, 17.38), (medqa_m1_alibaba_vote, 41.87)],
        (8.43, 50.28),
    )
    vote, rte = [], []
    for (d, rel), (cells, _) in t.items():
        for w, (v, r) in zip(WF, cells):
            vote.append(dict(workflow_id=w, dataset=d, relation=rel, delta_pp=v))
            rte.append(dict(workflow_id=w, dataset=d, relation=rel, delta_pp=r))
    return mit.mitigation_table(pd.DataFrame(vote), pd.DataFrame(rte))


def test_table3_avg_rows_are_unweighted_means_of_the_papers_cells():
    t = _table3(-4.27)
    sch.MitigationTable.validate(t)
    cell = t.set_index(["strategy", "relation", "dataset", "workflow_id"])["delta_pp"]
    for (d, rel), (_, (v_avg, r_avg)) in TABLE3.items():
        assert round(cell[("vote", rel, d, fan.AVG)] + 1e-9, 2) == v_avg
        assert round(cell[("routing", rel, d, fan.AVG)] + 1e-9, 2) == r_avg
    # Construct ΔM1 Vot. Avg. = (13.73 + 10.93 − 0.13 − 1.60)/4 = 5.7325 (signed mean, not of |Δ|)
    assert cell[("vote", "MR1", "Construct", fan.AVG)] == pytest.approx(5.7325)
    # Avg. block (mean over MedQA and Construct): OpenAI ΔM1 Vot. (2.80 + 13.73)/2 = 8.265 -> 8.27,
    # Rte. (65.20 + 29.33)/2 = 47.265 -> 47.27; Anthropic 16.32 / 60.60; corner Rte. 44.205 -> 44.21
    assert cell[("vote", "MR1", fan.AVG, "OpenAI")] == pytest.approx(8.265)
    assert cell[("routing", "MR1", fan.AVG, "Anthropic")] == pytest.approx(60.60)
    assert cell[("routing", "MR1", fan.AVG, fan.AVG)] == pytest.approx(353.65 / 8)  # 44.206 -> 44.21
    assert cell[("routing", "MR2", fan.AVG, fan.AVG)] == pytest.approx((16.43 * 4 + 20.03 * 4) / 8, abs=0.005)  # 18.23


def test_table3_medqa_vote_avg_only_reproduces_with_alibaba_at_plus_4_27():
    # The paper prints Alibaba MedQA ΔM1 Vot. = −4.27 (and says voting degrades it), but its
    # Avg. 8.43 and the Avg.-block 1.33 are the means with +4.27: a sign slip in the paper.
    signed = _table3(-4.27).set_index(["strategy", "relation", "dataset", "workflow_id"])["delta_pp"]
    assert signed[("vote", "MR1", "MedQA", fan.AVG)] == pytest.approx(6.2925)
    assert signed[("vote", "MR1", fan.AVG, "Alibaba")] == pytest.approx(-2.935)
    plus = _table3(4.27).set_index(["strategy", "relation", "dataset", "workflow_id"])["delta_pp"]
    assert round(plus[("vote", "MR1", "MedQA", fan.AVG)], 2) == 8.43
    assert round(plus[("vote", "MR1", fan.AVG, "Alibaba")] + 1e-9, 2) == 1.34  # printed 1.33 (1.335 rounded down)
    assert round(plus[("vote", "MR1", fan.AVG, fan.AVG)], 2) == 7.08
    # the corner: (2.80 + 21.71 + 4.93 + 4.27 + 13.73 + 10.93 - 0.13 - 1.60)/8 = 56.64/8 = 7.08 (printed);
    # with the printed -4.27 it is 48.10/8 = 6.0125
    assert signed[("vote", "MR1", fan.AVG, fan.AVG)] == pytest.approx(48.10 / 8)


# --------------------------------------------------------------------------- denominators of Table 1


def _fits(value: float, n: int) -> bool:
    """``value`` (a printed percentage, 2 decimals) is k/n for some integer k, rounded."""
    return abs(100 * round(value * n / 100) / n - value) < 0.005 + 1e-9


def test_table1_denominators_of_the_papers_cells():
    """Which printed cells of Table 1 are k/750 (250 instances x k = 3 groups, §5.2), k/250 or k/1000
    (docs/definitions.md, "Paper cells that do not reproduce")."""
    cells = [(d, rel, w, v) for d, by in TABLE1.items() for rel, vals in by.items() for w, v in zip(WF, vals)]
    not_750 = {(d, rel, w): v for d, rel, w, v in cells if not _fits(v, 750)}
    assert not_750 == {
        # MedQA M1: no cell fits 250 or 750 (e.g. 65.86 x 7.5 = 493.95; 494/750 = 65.87)
        ("MedQA", "MR1", "OpenAI"): 65.86,
        ("MedQA", "MR1", "Anthropic"): 76.44,
        ("MedQA", "MR1", "Google"): 17.40,
        ("MedQA", "MR1", "Alibaba"): 41.96,
        # MedQA M3: two cells fit neither 250 nor 750 nor 1000
        ("MedQA", "MR3", "OpenAI"): 71.37,
        ("MedQA", "MR3", "Alibaba"): 31.85,
        # five M2 cells are multiples of 1/1000 only
        ("MedQA", "MR2", "Google"): 19.70,
        ("Construct", "MR2", "Anthropic"): 64.90,
        ("DiscrimEval", "MR2", "Anthropic"): 16.90,
        ("DiscrimEval", "MR2", "Google"): 53.10,
        ("DiscrimEval", "MR2", "Alibaba"): 34.50,
    }
    assert not any(_fits(v, 250) for v in TABLE1["MedQA"]["MR1"])
    assert [_fits(v, 1000) for v in TABLE1["MedQA"]["MR1"]] == [False, False, True, False]  # 17.40 = 174/1000
    # no single denominator up to 1000 gives all four MedQA M1 cells
    assert [n for n in range(1, 1001) if all(_fits(v, n) for v in TABLE1["MedQA"]["MR1"])] == []
    m2_odd = [v for key, v in not_750.items() if key[1] == "MR2"]
    assert all(_fits(v, 1000) and not _fits(v, 250) for v in m2_odd)
    # the rest reproduce: M1 of the other datasets is k/750; M3 of the other datasets is k/250
    for d in ("Construct", "DiscrimEval", "Credit Card"):
        assert all(_fits(v, 750) for v in TABLE1[d]["MR1"])
        assert all(_fits(v, 250) for v in TABLE1[d]["MR3"])


def test_table3_agrees_with_table1_where_a_strategy_zeroes_a_relation():
    """Voting leaves one decision per instance and format, so after it M3 = 0 and Vot. ΔM3 = M3 of
    Table 1; routing sends one format, so Rte. ΔM2 = M2 of Table 1. The printed cells agree, which
    ties Table 3 to Table 1's before values; the Alibaba MedQA Vot. ΔM1 = -4.27 is checked against
    the Avg. cells in test_table3_medqa_vote_avg_only_reproduces_with_alibaba_at_plus_4_27."""
    for d in ("MedQA", "Construct"):
        cells = TABLE3[(d, "MR3")][0]
        assert [v for v, _ in cells] == TABLE1[d]["MR3"]
        assert [r for _, r in TABLE3[(d, "MR2")][0]] == TABLE1[d]["MR2"]
        assert [v for v, _ in TABLE3[(d, "MR2")][0]] == [0.0] * 4


# --------------------------------------------------------------------------- Spearman


def test_spearman_exact_small_n_is_never_zero():
    r = stats.spearman_exact([0.1, 0.2, 0.3], [3.0, 2.0, 1.0])
    assert (r.rho, r.p_value, r.n) == (-1.0, pytest.approx(1 / 3), 3)
    # n = 4, rho = 0.2: |rho| >= 0.2 in 22 of the 24 pairings
    r4 = stats.spearman_exact([1, 2, 3, 4], [3, 2, 1, 5])
    assert r4.rho == pytest.approx(0.2) and r4.p_value == pytest.approx(22 / 24)
    # beyond the exact limit: spearmanr's p
    x, y = list(range(12)), [3, 1, 2, 6, 5, 4, 9, 8, 7, 12, 10, 11]
    assert stats.spearman_exact(x, y).p_value == pytest.approx(sst.spearmanr(x, y).pvalue)


def test_spearman_exact_enumerates_n_factorial_pairings_at_the_limit():
    # n = 9 (EXACT_PERMUTATION_MAX_N), reversed order: rho = -1 is reached by 1 of the 9! = 362,880
    # pairings (and +1 by 1), so the two-sided p is 2 / 9!. Enumerating (9!)^2 arrangements of both
    # samples instead would not finish.
    r = stats.spearman_exact(list(range(9)), list(range(9, 0, -1)))
    assert (r.rho, r.n) == (-1.0, 9) and r.p_value == pytest.approx(2 / 362_880)


# Table 2 (JS, ΔAcc) of the paper: MedQA then Construct; rows JSON, MD, CSV; workflows in WF order
TABLE2 = {
    "MedQA": [
        (0.18, 0.27),
        (0.18, 1.47),
        (0.14, -0.13),
        (0.15, -16.56),
        (0.10, 0.80),
        (0.13, -0.41),
        (0.10, -0.81),
        (0.14, -0.53),
        (0.52, -52.34),
        (0.68, -25.20),
        (0.19, -1.21),
        (0.32, 1.60),
    ],
    "Construct": [
        (0.15, -7.88),
        (0.19, 6.94),
        (0.16, -4.95),
        (0.17, -1.20),
        (0.12, 0.00),
        (0.63, -3.07),
        (0.16, 4.97),
        (0.09, -3.33),
        (0.32, -28.76),
        (0.21, -11.63),
        (0.19, -3.75),
        (0.33, -56.00),
    ],
}


def test_drift_correlation_pools_every_setting():
    rows = [
        dict(workflow_id=WF[i % 4], dataset=d, format=("json", "md", "csv")[i // 4], js_divergence=js, delta_acc_pct=da)
        for d, pts in TABLE2.items()
        for i, (js, da) in enumerate(pts)
    ]
    rows.append(dict(workflow_id="OpenAI", dataset="DiscrimEval", format="csv", js_divergence=0.2, delta_acc_pct=None))
    c = fan.drift_correlation(pd.DataFrame(rows)).set_index("scope")
    sch.DriftCorrelation.validate(c.reset_index())
    allx = [p for d in TABLE2.values() for p in d]
    ref = sst.spearmanr([p[0] for p in allx], [p[1] for p in allx])
    assert c.loc["all", "rho"] == pytest.approx(ref.statistic) and c.loc["all", "p_value"] == pytest.approx(ref.pvalue)
    assert (c.loc["all", "n"], c.loc["all", "n_left_out"]) == (24, 1)
    # the paper's −0.470 is not recoverable from its rounded Table 2: −0.385, p = 0.063
    assert round(c.loc["all", "rho"], 3) == -0.385 and round(c.loc["all", "p_value"], 3) == 0.063
    assert c.loc["dataset:MedQA", "n"] == 12 and round(c.loc["dataset:MedQA", "rho"], 3) == -0.292
    assert c.loc["dataset:DiscrimEval", "note"].startswith("fewer than 3")


def test_format_tests_per_setting_spearman_has_the_exact_p():
    # one setting, 3 non-baseline formats, perfectly anti-monotone JS vs ΔAcc -> rho −1, exact p = 1/3
    spec = {}
    # accuracy: txt 100; md 75; json 50; csv 25 (4 instances, k = 1); categories drive JS up
    dec = {"txt": "yyyy", "md": "yyyn", "json": "yynn", "csv": "ynnn"}
    cats = {"txt": "a", "md": "ab", "json": "abc", "csv": "bc"}  # JS vs txt: 0.311 < 0.5 < 1
    for n in range(4):
        spec[f"s{n}"] = {f: [("yes" if dec[f][n] == "y" else "no", cats[f])] for f in dec}
    gen = make_gen(spec, {f"s{n}": "yes" for n in range(4)})
    t = fan.format_tests(gen)
    sp = t[t["test"] == "spearman"].iloc[0]
    d = fr.evidence_drift(gen)
    assert d["delta_acc_pct"].tolist() == [-25.0, -50.0, -75.0]
    assert d["js_divergence"].is_monotonic_increasing
    assert (sp["statistic"], sp["p_value"], sp["n"]) == (-1.0, pytest.approx(1 / 3), 3)


# --------------------------------------------------------------------------- Cochran's Q across workflows


def _two_workflows():
    a = {
        "i1": {"txt": [("yes", "a")] * 2, "md": [("no", "a")] * 2},
        "i2": {"txt": [("yes", "a")] * 2, "md": [("yes", "")] * 2},
        "i3": {"txt": [("yes", "a")] * 2, "md": [("yes", "a"), ("no", "a")]},
    }
    b = {
        "i1": {"txt": [("yes", "a")] * 2, "md": [("yes", "a")] * 2},
        "i2": {"txt": [("yes", "a")] * 2, "md": [("yes", "a")] * 2},
        "i3": {"txt": [("yes", "a")] * 2, "md": [("yes", "a")] * 2},
    }
    c = {
        "i1": {"txt": [("yes", "a")] * 2, "md": [("no", "a"), ("yes", "a")]},
        "i2": {"txt": [("yes", "")] * 2, "md": [("yes", "a")] * 2},
        "i3": {"txt": [("yes", "a")] * 2, "md": [("yes", "a")] * 2},
    }
    return pd.concat([make_gen(a, wf="A"), make_gen(b, wf="B"), make_gen(c, wf="C")], ignore_index=True)


def test_workflow_tests_cochran_q_on_groups_for_m2_and_instances_for_m3():
    flags = fr.mr_flags(_two_workflows())
    t = fan.workflow_tests(flags).set_index("relation")
    sch.WorkflowTests.validate(t.reset_index())
    # MR2 blocks = 6 groups; A violates (i2,1),(i2,2); B none; C (i2,1),(i2,2) -> rows [1,0,1] x2, rest 0
    m2 = [[0, 0, 0], [0, 0, 0], [1, 0, 1], [1, 0, 1], [0, 0, 0], [0, 0, 0]]
    ref = sm_cochrans_q(m2)
    assert t.loc["MR2", "statistic"] == pytest.approx(ref.statistic) and t.loc["MR2", "n"] == 6
    # Q = (k-1)(k ΣC² − N²)/(k N − ΣR²) = 2(3·8 − 16)/(3·4 − 8) = 4
    assert t.loc["MR2", "statistic"] == pytest.approx(4.0)
    assert t.loc["MR2", "p_value"] == pytest.approx(math.exp(-2.0))  # chi2(2) tail at 4
    # MR3 blocks = 3 instances: A i3 (md unstable) and C i1 (md unstable) -> [0,0,1],[0,0,0],[1,0,0]
    assert t.loc["MR3", "n"] == 3 and t.loc["MR3", "unit"] == "instance"
    assert t.loc["MR3", "statistic"] == pytest.approx(sm_cochrans_q([[0, 0, 1], [0, 0, 0], [1, 0, 0]]).statistic)
    assert t.loc["MR1", "workflows"] == "A,B,C"


# --------------------------------------------------------------------------- silent violations per dataset


def test_silent_violations_by_dataset_pools_workflows():
    g = _two_workflows()
    g2 = make_gen({"z": {"txt": [("yes", "a")], "md": [("yes", "a")]}}, wf="A", ds="other")
    s = fan.silent_violations_by_dataset(fr.mr_flags(pd.concat([g, g2], ignore_index=True))).set_index("dataset")
    sch.SilentByDataset.validate(s.reset_index())
    # ds: MR2 groups: A (i2,1),(i2,2) with MR1 no (yes/yes) -> silent 2; C (i2,1),(i2,2): MR1 no -> silent 2
    assert (s.loc["ds", "n_mr2"], s.loc["ds", "n_silent"], s.loc["ds", "silent_pct"]) == (4, 4, 100.0)
    assert (s.loc["ds", "n_groups"], s.loc["ds", "n_workflows"]) == (18, 3)
    assert math.isnan(s.loc["other", "silent_pct"]) and s.loc["*", "n_groups"] == 19


# --------------------------------------------------------------------------- Figure 3 and §5.3 shares


def test_flip_error_distribution_counts_errors_of_flip_groups_by_format():
    spec = {
        "f1": {
            "txt": [("yes", "")] * 2,
            "md": [("yes", "")] * 2,
            "csv": [("no", ""), ("yes", "")],
        },  # r1 flip: csv wrong
        "f2": {"txt": [("no", "")] * 2, "md": [("yes", "")] * 2, "csv": [(BOT, "")] * 2},  # r1, r2 flips: txt, csv
        "f3": {"txt": [("no", "")] * 2, "md": [("no", "")] * 2, "csv": [("no", "")] * 2},  # all wrong: no flip
    }
    e = fan.flip_error_distribution(make_gen(spec, {"f1": "yes", "f2": "yes", "f3": "yes"}))
    sch.FlipErrors.validate(e)
    assert e["format"].tolist() == ["txt", "md", "csv"]
    assert e["n_flip_groups"].tolist() == [3, 3, 3]
    assert e["n_errors"].tolist() == [2, 0, 3]
    assert e["error_pct"].tolist() == pytest.approx([200 / 3, 0.0, 100.0])
    assert len(fan.flip_error_distribution(make_gen(spec))) == 0  # no gold, no rows


def test_evidence_change_share_by_format():
    spec = {
        "e1": {"txt": [("yes", "ab")], "md": [("yes", "ab")], "json": [("yes", "c")], "csv": [("yes", "")]},
        "e2": {"txt": [("yes", "a")], "md": [("yes", "ab")], "json": [("yes", "a")], "csv": [("yes", "d")]},
    }
    # vs txt: e1 md J=1, json J=0 (change), csv ∅ vs {a,b} J=0 (change); e2 md J=1/2, json 1, csv 0 (change)
    out = fan.evidence_change_share(pd.concat([make_gen(spec), make_gen(spec, wf="w2")], ignore_index=True))
    sch.EvidenceChangeShare.validate(out)
    cell = out[out["workflow_id"] == "wf"].set_index("format")
    assert cell["n_changes"].tolist() == [0, 1, 2] and cell["n_groups"].tolist() == [2, 2, 2]
    assert cell["share_pct"].tolist() == pytest.approx([0.0, 100 / 3, 200 / 3])
    pooled = out[(out["workflow_id"] == "*") & (out["dataset"] == "*")].set_index("format")
    assert pooled["n_changes"].tolist() == [0, 2, 4] and pooled["share_pct"].tolist() == pytest.approx(
        [0, 100 / 3, 200 / 3]
    )


# --------------------------------------------------------------------------- routing requests


def test_plan_routing_converts_every_input_and_makes_new_calls():
    xs = construct_dataset(n=2, seed=0)
    docs = [render(x, f) for x in xs for f in DEFAULT_FORMATS]
    model = ModelSpec(id="local", provider="llama_cpp", model="m.gguf")
    orig = plan_generations(xs, docs, model, k=2)
    routed = plan_routing(xs, docs, model, {("local/inline", "construct"): "md"}, k=2)
    assert len(routed) == 2 * 4 * 2
    x0 = [p for p in routed if p.instance_id == xs[0].instance_id]
    md_doc = render(xs[0], "md")
    # every routed request carries the md document and the md prompt
    assert {p.document_sha256 for p in x0} == {md_doc.sha256} and {p.routed_format for p in x0} == {"md"}
    assert [(p.format, p.repeat, p.request.repeat_index) for p in x0] == [
        ("md", 1, 1),
        ("md", 2, 2),
        ("txt", 1, 3),
        ("txt", 2, 4),
        ("json", 1, 5),
        ("json", 2, 6),
        ("csv", 1, 7),
        ("csv", 2, 8),
    ]
    # the md input is the original md call (same cache key); the others are new calls
    orig_md = {p.repeat: p.request.cache_key() for p in orig if p.instance_id == xs[0].instance_id and p.format == "md"}
    assert [p.request.cache_key() for p in x0[:2]] == [orig_md[1], orig_md[2]]
    keys = {p.request.cache_key() for p in routed}
    assert len(keys) == len(routed)
    assert all(p.request.messages == x0[0].request.messages for p in x0)
    with pytest.raises(ValueError, match="no best format"):
        plan_routing(xs, docs, model, {}, k=2)
    with pytest.raises(ValueError, match="has no 'xml' document"):
        plan_routing(xs, docs, model, {("local/inline", "construct"): "xml"}, k=2)
