"""Tests of metamorph.studies.format_robustness.metrics with small frames and hand-computed answers."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sst
from statsmodels.stats.contingency_tables import cochrans_q as sm_cochrans_q
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
from statsmodels.stats.multitest import multipletests

from metamorph import stats
from metamorph.studies.format_robustness import metrics as fr
from metamorph.studies.format_robustness import analysis as fan
from metamorph.studies.format_robustness import fairness as ffair
from metamorph.studies.format_robustness import mitigations as mit
from metamorph.studies.format_robustness import plan as fs
from metamorph.studies.format_robustness import schemas as sch

BOT = None  # ⊥: unparseable decision


def make_gen(
    spec: dict, gold: dict | None = None, wf: str = "wf", ds: str = "ds", favorable: str = "yes"
) -> pd.DataFrame:
    """spec: instance -> format -> list over repeats of (decision, categories)."""
    rows = []
    for iid, by_fmt in spec.items():
        g = None if gold is None else gold.get(iid)
        for fmt, reps in by_fmt.items():
            for r, (dec, cats) in enumerate(reps, start=1):
                rows.append(
                    dict(
                        workflow_id=wf,
                        dataset=ds,
                        instance_id=iid,
                        format=fmt,
                        repeat=r,
                        decision=dec,
                        gold=g,
                        is_correct=(dec is not None and g is not None and dec == g),
                        categories=list(cats),
                        favorable=None if dec is None else dec == favorable,
                    )
                )
    return pd.DataFrame(rows)


# Main fixture: 3 instances x 4 formats x k = 2 (categories of repeat 2 = those of repeat 1).
#   i1: all "yes"; category sets txt {a,b}, md {a,b}, json {b,c}, csv {a}
#   i2: txt yes/yes, md no/yes, json yes/yes, csv yes/yes; every set {a}
#   i3: ⊥ everywhere except json repeat 2 = "no"; every set ∅
MAIN = {
    "i1": {
        "txt": [("yes", "ab")] * 2,
        "md": [("yes", "ab")] * 2,
        "json": [("yes", "bc")] * 2,
        "csv": [("yes", "a")] * 2,
    },
    "i2": {
        "txt": [("yes", "a")] * 2,
        "md": [("no", "a"), ("yes", "a")],
        "json": [("yes", "a")] * 2,
        "csv": [("yes", "a")] * 2,
    },
    "i3": {"txt": [(BOT, "")] * 2, "md": [(BOT, "")] * 2, "json": [(BOT, ""), ("no", "")], "csv": [(BOT, "")] * 2},
}
MAIN_GOLD = {"i1": "yes", "i2": "yes", "i3": "no"}


@pytest.fixture
def gen() -> pd.DataFrame:
    return make_gen(MAIN, MAIN_GOLD)


# --------------------------------------------------------------------------- validation


def test_missing_columns_named():
    df = make_gen(MAIN, MAIN_GOLD).drop(columns=["categories", "favorable"])
    with pytest.raises(ValueError, match=r"categories.*favorable|favorable.*categories"):
        fr.mr_flags(df)


def test_duplicates_and_bad_repeats_raise(gen):
    with pytest.raises(ValueError, match="generation key"):
        fr.mr_flags(pd.concat([gen, gen.iloc[[0]]]))
    with pytest.raises(ValueError, match="1..k"):
        fr.mr_flags(gen[~((gen.instance_id == "i1") & (gen.format == "md") & (gen.repeat == 1))])
    with pytest.raises(ValueError, match="same number of repeats"):
        fr.mr_flags(gen[~((gen.instance_id == "i1") & (gen.format == "md") & (gen.repeat == 2))])
    with pytest.raises(ValueError, match="categories"):
        fr.mr_flags(gen.assign(categories="a"))


def test_input_not_modified(gen):
    before = gen.copy()
    fr.mr_flags(gen)
    mit.format_routing_simulated(gen)
    mit.vote_aggregation(gen)
    mit.routing_choice(gen)
    pd.testing.assert_frame_equal(gen, before)


# --------------------------------------------------------------------------- MR flags / M_i


def test_mr_flags_hand_computed(gen):
    flags = fr.mr_flags(gen)
    sch.MRFlags.validate(flags)
    # Unit = group (instance, repeat), §5.2. Repeat 2's categories equal repeat 1's.
    # i1 r1, r2: decisions all yes -> MR1 no. Jaccard {b,c}/{a} = 0 < 0.3 -> MR2 yes.
    # i2 r1: md says no -> MR1 yes; r2: all yes -> MR1 no. All sets {a} -> MR2 no.
    # i3 r1: ⊥ everywhere -> MR1 no; r2: json "no" vs ⊥ -> MR1 yes (a flip in repeat 2 counts).
    # MR3 is the instance's: i1 all stable -> no; i2 md (no, yes) unstable -> yes; i3 json (⊥, no) -> yes.
    assert list(zip(flags["instance_id"], flags["repeat"])) == [
        ("i1", 1),
        ("i1", 2),
        ("i2", 1),
        ("i2", 2),
        ("i3", 1),
        ("i3", 2),
    ]
    assert flags["mr1"].tolist() == [False, False, True, False, False, True]
    assert flags["mr2"].tolist() == [True, True, False, False, False, False]
    assert flags["mr3"].tolist() == [False, False, True, True, True, True]
    assert flags["n_formats"].tolist() == [4] * 6 and flags["k"].tolist() == [2] * 6


def test_mr_flags_legacy_unit_is_repeat_one_per_instance(gen):
    flags = fr.mr_flags(gen, unit="instance_repeat1")
    assert flags["instance_id"].tolist() == ["i1", "i2", "i3"] and flags["repeat"].tolist() == [1, 1, 1]
    assert flags["mr1"].tolist() == [False, True, False]  # i3's repeat-2 flip is not seen
    assert flags["mr2"].tolist() == [True, False, False]
    assert flags["mr3"].tolist() == [False, True, True]
    with pytest.raises(ValueError, match="unit must be one of"):
        fr.mr_flags(gen, unit="instance")


def test_mr1_counts_a_flip_in_any_repeat_over_groups():
    # 2 instances x k = 3; only repeat 3 of x2 flips: M1 = 1/6 over groups (not 0 as on repeat 1)
    spec = {
        "x1": {"txt": [("yes", "a")] * 3, "md": [("yes", "a")] * 3},
        "x2": {"txt": [("yes", "a")] * 3, "md": [("yes", "a"), ("yes", "a"), ("no", "a")]},
    }
    v = fr.mr_violations(fr.mr_flags(make_gen(spec))).set_index("relation")
    assert v.loc["MR1", "violation_pct"] == pytest.approx(100 / 6)
    assert (v.loc["MR1", "n_groups"], v.loc["MR1", "n_instances"]) == (6, 2)
    # MR3: x2's md is unstable, txt stable -> the instance violates; its 3 groups carry it -> 3/6
    assert v.loc["MR3", "violation_pct"] == pytest.approx(50.0)
    legacy = fr.mr_violations(fr.mr_flags(make_gen(spec), unit="instance_repeat1")).set_index("relation")
    assert legacy.loc["MR1", "violation_pct"] == 0.0 and legacy.loc["MR1", "n_groups"] == 2


def test_mr1_bottom_vs_label_and_mr2_threshold():
    spec = {
        "x1": {"txt": [(BOT, "ab")], "md": [("yes", "ab")]},  # ⊥ vs label -> MR1
        "x2": {"txt": [("yes", "ab")], "md": [("yes", "bc")]},  # J = 1/3 >= 0.3 -> no MR2
        "x3": {"txt": [("yes", "abcd")], "md": [("yes", "d")]},  # J = 1/4 < 0.3 -> MR2
        "x4": {"txt": [("yes", "")], "md": [("yes", "a")]},  # ∅ vs {a}: J = 0 -> MR2
        "x5": {"txt": [("yes", "")], "md": [("yes", "")]},  # ∅ vs ∅: J = 1 -> no MR2
        "x6": {"txt": [("yes", "abc")], "md": [("yes", "abcdefghij")]},  # J = 3/10 = θ -> not below -> no MR2
    }
    flags = fr.mr_flags(make_gen(spec)).set_index("instance_id")
    assert flags["mr1"].tolist() == [True, False, False, False, False, False]
    assert flags["mr2"].tolist() == [False, False, True, True, False, False]
    # k = 1: MR3 would compare each reply with itself; not measurable (never 0)
    assert flags["mr3"].isna().all() and set(flags["mr3_note"]) == {fr.NOT_MEASURABLE_ONE_REPEAT}


def test_mr3_compares_consistency_not_stability():
    spec = {
        # every format flips between repeats: S = (F, F) -> same consistency -> MR3 not violated
        "u1": {"txt": [("yes", "a"), ("no", "a")], "md": [(BOT, "a"), ("yes", "a")]},
        # only md flips: S = (T, F) -> MR3 violated
        "u2": {"txt": [("yes", "a"), ("yes", "a")], "md": [("yes", "a"), ("no", "a")]},
        # ⊥ repeated is consistent: S = (T, T) -> not violated (MR1 is: ⊥ vs yes)
        "u3": {"txt": [(BOT, "a"), (BOT, "a")], "md": [("yes", "a"), ("yes", "a")]},
    }
    flags = fr.mr_flags(make_gen(spec))
    # groups (u1,1) (u1,2) (u2,1) (u2,2) (u3,1) (u3,2); MR3 is the instance's flag on both groups
    assert flags["mr3"].tolist() == [False, False, True, True, False, False]
    # MR1: u1 r1 yes vs ⊥, r2 no vs yes; u2 r1 yes/yes, r2 yes/no; u3 ⊥ vs yes twice
    assert flags["mr1"].tolist() == [True, True, False, True, True, True]


def test_single_format_instance_is_undefined_not_dropped():
    spec = {"a": {"txt": [("yes", "a")], "md": [("no", "a")]}, "b": {"txt": [("yes", "a")]}}
    flags = fr.mr_flags(make_gen(spec))
    assert flags["mr1"].isna().tolist() == [False, True]
    v = fr.mr_violations(flags).set_index("relation")
    assert v.loc["MR1", "n_instances"] == 1 and v.loc["MR1", "n_undefined"] == 1
    assert v.loc["MR1", "violation_pct"] == 100.0
    assert pd.isna(v.loc["MR1", "ci_low_pct"]) and v.loc["MR1", "ci_note"].startswith("n=1")


def test_mr_violations_hand_computed(gen):
    v = fr.mr_violations(fr.mr_flags(gen), n_resamples=500, seed=3)
    sch.MRViolations.validate(v)
    v = v.set_index("relation")
    # over 6 groups: M1 = 2/6 ((i2,1), (i3,2)), M2 = 2/6 (i1 both), M3 = 4/6 (i2, i3 both groups), in %
    assert v["violation_pct"].tolist() == pytest.approx([100 / 3, 100 / 3, 200 / 3])
    assert v["n_groups"].tolist() == [6, 6, 6] and v["n_instances"].tolist() == [3, 3, 3]
    # the CI resamples instances: per-instance MR1 rates i1 0/2, i2 1/2, i3 1/2
    ci = stats.bootstrap_mean_ci([0.0, 0.5, 0.5], n_resamples=500, seed=3)
    assert v.loc["MR1", "ci_low_pct"] == pytest.approx(100 * ci.low)
    assert v.loc["MR1", "ci_high_pct"] == pytest.approx(100 * ci.high)
    again = fr.mr_violations(fr.mr_flags(gen), n_resamples=500, seed=3).set_index("relation")
    pd.testing.assert_frame_equal(v, again)


def test_bootstrap_ratio_ci_resamples_clusters():
    # equal cluster sizes: identical to the mean of the per-cluster rates
    a = stats.bootstrap_ratio_ci([1, 2, 0, 3], [3, 3, 3, 3], n_resamples=200, seed=5)
    b = stats.bootstrap_mean_ci([1 / 3, 2 / 3, 0.0, 1.0], n_resamples=200, seed=5)
    assert (a.mean, a.low, a.high, a.n) == (b.mean, b.low, b.high, 4)
    # unequal sizes: the ratio of sums, and every resample ratio is a ratio of cluster sums
    c = stats.bootstrap_ratio_ci([1, 2, 0], [3, 2, 3], n_resamples=200, seed=0)
    assert c.mean == pytest.approx(3 / 8) and c.n == 3 and 0.0 <= c.low <= c.mean <= c.high <= 1.0
    with pytest.raises(ValueError, match="denominator"):
        stats.bootstrap_ratio_ci([1], [0])


def test_mr_violations_ci_uses_the_seed():
    n = 40  # 13 violations of MR1
    flags = pd.DataFrame(
        {
            "workflow_id": "w",
            "dataset": "d",
            "instance_id": [str(i) for i in range(n)],
            "mr1": [True] * 13 + [False] * 27,
            "mr2": False,
            "mr3": False,
        }
    )
    v0 = fr.mr_violations(flags, n_resamples=50, seed=0).set_index("relation").loc["MR1"]
    v1 = fr.mr_violations(flags, n_resamples=50, seed=1).set_index("relation").loc["MR1"]
    assert v0["violation_pct"] == pytest.approx(32.5)  # 13/40
    ref = stats.bootstrap_mean_ci([1.0] * 13 + [0.0] * 27, n_resamples=50, seed=0)
    assert (v0["ci_low_pct"], v0["ci_high_pct"]) == pytest.approx((100 * ref.low, 100 * ref.high))
    assert (v0["ci_low_pct"], v0["ci_high_pct"]) != (v1["ci_low_pct"], v1["ci_high_pct"])


def test_mr_violations_all_equal_boundary():
    flags = pd.DataFrame(
        {
            "workflow_id": ["w"] * 3,
            "dataset": ["d"] * 3,
            "instance_id": ["1", "2", "3"],
            "mr1": [False] * 3,
            "mr2": [True] * 3,
            "mr3": [False] * 3,
        }
    )
    v = fr.mr_violations(flags).set_index("relation")
    assert (v.loc["MR1", "ci_low_pct"], v.loc["MR1", "ci_high_pct"]) == (0.0, 0.0)
    assert (v.loc["MR2", "ci_low_pct"], v.loc["MR2", "ci_high_pct"]) == (100.0, 100.0)
    assert "all values equal" in v.loc["MR2", "ci_note"]


# --------------------------------------------------------------------------- Acc / Stb


def test_accuracy_by_format_hand_computed(gen):
    acc = fr.accuracy_by_format(gen)
    sch.AccuracyByFormat.validate(acc)
    # 6 generations per format (3 instances x k=2); ⊥ is incorrect.
    # txt: i1 2 + i2 2 + i3 0 = 4/6; md: 2 + 1 + 0 = 3/6; json: 2 + 2 + 1 ("no" = gold) = 5/6; csv 4/6
    assert acc["format"].tolist() == ["txt", "md", "json", "csv"]
    assert acc["accuracy_pct"].tolist() == pytest.approx([400 / 6, 50.0, 500 / 6, 400 / 6])
    assert acc["n"].tolist() == [6] * 4
    assert acc["n_unparseable"].tolist() == [2, 2, 1, 2]
    # majority-label baseline: gold is "yes" on i1 and i2 (4 of the 6 generations per format)
    assert acc["majority_baseline_pct"].tolist() == pytest.approx([400 / 6] * 4)


def test_accuracy_unparseable_is_incorrect_even_if_flagged_correct():
    g = make_gen({"u": {"txt": [(BOT, "")], "md": [("yes", "")]}}, {"u": "yes"})
    g["is_correct"] = True  # inconsistent input: ⊥ must still count as incorrect
    acc = fr.accuracy_by_format(g).set_index("format")
    assert acc["accuracy_pct"].tolist() == [0.0, 100.0]
    assert acc["n_unparseable"].tolist() == [1, 0]


def test_accuracy_without_gold_gives_no_rows():
    assert len(fr.accuracy_by_format(make_gen(MAIN, gold=None))) == 0


def test_stability_by_format_hand_computed(gen):
    stb = fr.stability_by_format(gen)
    sch.StabilityByFormat.validate(stb)
    # txt: all 3 stable (⊥,⊥ agrees) = 100; md: i2 unstable -> 2/3; json: i3 unstable -> 2/3; csv 100
    assert stb["stability_pct"].tolist() == pytest.approx([100.0, 200 / 3, 200 / 3, 100.0])
    assert stb["n_instances"].tolist() == [3] * 4 and stb["k_max"].tolist() == [2] * 4


# --------------------------------------------------------------------------- drift


def test_evidence_drift_hand_computed(gen):
    d = fr.evidence_drift(gen)
    sch.EvidenceDrift.validate(d)
    d = d.set_index("format")
    assert d.index.tolist() == ["md", "json", "csv"]
    # Category counts over both repeats: txt {a:4, b:2}; md {a:4, b:2}; json {a:2, b:2, c:2}; csv {a:4}
    # md = txt -> JS 0
    # json: P=(1/3,1/3,1/3), Q=(2/3,1/3,0), M=(1/2,1/3,1/6):
    #   KL(P||M) = 1/3 log2(2/3) + 1/3 log2(2) = (2 - log2 3)/3 ; KL(Q||M) = 2/3 log2(4/3) = 2(2 - log2 3)/3
    #   JS = 1/2 (2 - log2 3) = 1 - log2(3)/2
    # csv: P=(1,0), Q=(2/3,1/3), M=(5/6,1/6): KL(P||M) = log2(6/5); KL(Q||M) = 2/3 log2(4/5) + 1/3 log2(2)
    js_json = 1 - math.log2(3) / 2
    js_csv = 0.5 * (math.log2(6 / 5) + 2 / 3 * math.log2(4 / 5) + 1 / 3)
    assert d["js_divergence"].tolist() == pytest.approx([0.0, js_json, js_csv], abs=1e-12)
    # ΔAcc = Acc_f - Acc_txt: md 50 - 66.67, json 83.33 - 66.67, csv 0
    assert d["delta_acc_pct"].tolist() == pytest.approx([-100 / 6, 100 / 6, 0.0])
    # Flip, paired per group (instance, repeat) against txt: txt (r1, r2) = i1 (yes, yes), i2 (yes, yes),
    # i3 (⊥, ⊥). md: i2 r1 "no" -> 1 of 6 groups; json: i3 r2 "no" vs ⊥ -> 1 of 6 (a flip in repeat 2
    # counts; on repeat 1 only it was 0); csv: 0 of 6.
    assert d["flip_rate_pct"].tolist() == pytest.approx([100 / 6, 100 / 6, 0.0])
    assert d["n_groups"].tolist() == [6, 6, 6] and d["n_instances"].tolist() == [3, 3, 3]
    assert d["n_category_items_baseline"].tolist() == [6, 6, 6]
    # CI resamples instances (clusters of 2 groups): md's per-instance flips (0, 1, 0) of (2, 2, 2)
    ci = stats.bootstrap_ratio_ci([0, 1, 0], [2, 2, 2], n_resamples=1000, seed=0)
    assert (d.loc["md", "flip_ci_low_pct"], d.loc["md", "flip_ci_high_pct"]) == pytest.approx(
        (100 * ci.low, 100 * ci.high)
    )
    # Resampling 3 instances, the rate is (times i2 is drawn)/6: 0 w.p. 8/27, 1/6 w.p. 12/27, 1/3 w.p. 6/27 and
    # 1/2 w.p. 1/27 = 3.7% > 2.5% -> the 95% percentile interval is [0, 1/2].
    assert (ci.low, ci.high) == (0.0, 0.5)
    # csv never flips: every instance rate is 0 -> CI [0, 0] with its note
    assert (d.loc["csv", "flip_ci_low_pct"], d.loc["csv", "flip_ci_high_pct"]) == (0.0, 0.0)
    assert d.loc["csv", "flip_ci_note"] == stats.NOTE_ALL_EQUAL


def test_flipped_groups_are_the_flip_rates_numerator(gen):
    """The groups behind a flip cell (the UI's rows): md flips in i2 r1, json in i3 r2 (a flip in
    repeat 2, unseen on repeat 1 only), csv never — the 1 of 6 groups of each flip rate above."""
    cols = ["workflow_id", "dataset", "instance_id", "repeat"]
    assert fr.flipped_groups(gen, "md").values.tolist() == [["wf", "ds", "i2", 1]]
    assert fr.flipped_groups(gen, "json").values.tolist() == [["wf", "ds", "i3", 2]]
    assert fr.flipped_groups(gen, "json", unit="instance_repeat1").empty
    csv = fr.flipped_groups(gen, "csv")
    assert csv.empty and csv.columns.tolist() == cols
    # an instance missing the format is not a flip (no pair), as in n_groups
    assert fr.flipped_groups(gen[~((gen.instance_id == "i2") & (gen.format == "md"))], "md").empty


def test_evidence_drift_repeat_one_option(gen):
    d = fr.evidence_drift(gen, unit="instance_repeat1").set_index("format")
    # repeat 1 vs txt (yes, yes, ⊥): md (yes, no, ⊥) -> 1/3; json (yes, yes, ⊥) -> 0: i3's repeat-2 flip unseen
    assert d["flip_rate_pct"].tolist() == pytest.approx([100 / 3, 0.0, 0.0])
    assert d["n_groups"].tolist() == [3, 3, 3] and d["n_instances"].tolist() == [3, 3, 3]
    with pytest.raises(ValueError, match="unit must be one of"):
        fr.evidence_drift(gen, unit="instance")


def test_evidence_drift_no_gold_and_missing_baseline(gen):
    d = fr.evidence_drift(make_gen(MAIN, gold=None))
    assert d["delta_acc_pct"].isna().all() and d["js_divergence"].notna().all()
    with pytest.raises(ValueError, match="baseline"):
        fr.evidence_drift(gen[gen.format != "txt"])


# --------------------------------------------------------------------------- fairness


MAIN_SEX = pd.DataFrame(
    {"dataset": "ds", "instance_id": ["i1", "i2", "i3"], "attribute": "sex", "value": ["F", "M", "F"]}
)


def test_fds_over_every_repeat_hand_computed(gen):
    f = ffair.fairness_disparity(gen, MAIN_SEX)
    sch.FairnessDisparity.validate(f)
    # Affirmative rates over the parseable responses of every group (instance, repeat), §5.2's unit:
    # txt F {i1: yes, yes} 100, M {i2: yes, yes} 100 -> Sen 0 (i3 is ⊥ in both repeats)
    # md  F 100, M {i2: no, yes} 50 -> Sen 50
    # json F {i1: yes, yes; i3 r2: no} = 2/3, M 100 -> Sen 100/3 (i3's repeat-2 answer counts; on repeat 1 it is 0)
    # csv F 100, M 100 -> Sen 0
    assert f["sen_pp"].tolist() == pytest.approx([0.0, 50.0, 100 / 3, 0.0])
    # mu = (50 + 100/3)/4 = 125/6; MAD = (125/6 + 175/6 + 75/6 + 125/6)/4 = 125/6
    # FDS = (Sen - mu)/MAD: txt -1, md 175/125 = 1.4, json 75/125 = 0.6, csv -1
    assert f["fds"].tolist() == pytest.approx([-1.0, 1.4, 0.6, -1.0])
    assert f["n_groups"].tolist() == [2] * 4
    assert f["n_responses"].tolist() == [4, 4, 5, 4] and f["n_instances"].tolist() == [2, 2, 3, 2]
    assert f["min_group_n"].tolist() == [2, 2, 2, 2]
    with pytest.raises(ValueError, match="unit must be one of"):
        ffair.fairness_disparity(gen, MAIN_SEX, unit="instance")


def test_fds_main_fixture_repeat_one_hand_computed(gen):
    sens = MAIN_SEX
    f = ffair.fairness_disparity(gen, sens, dispersion="std", unit="instance_repeat1")
    sch.FairnessDisparity.validate(f)
    # Repeat-1 favourable among parseable (i3 is ⊥ in every format at repeat 1):
    # txt F{i1:1}=100, M{i2:1}=100 -> Sen 0; md F 100, M{i2: no}=0 -> Sen 100; json 0; csv 0
    # mu = 25; population sigma = sqrt((3*25^2 + 75^2)/4) = sqrt(1875) = 25*sqrt(3)
    # FDS md = 75/(25 sqrt 3) = sqrt 3; others = -25/(25 sqrt 3) = -1/sqrt 3
    assert f["format"].tolist() == ["txt", "md", "json", "csv"]
    assert f["sen_pp"].tolist() == pytest.approx([0.0, 100.0, 0.0, 0.0])
    r3 = math.sqrt(3)
    assert f["fds"].tolist() == pytest.approx([-1 / r3, r3, -1 / r3, -1 / r3])
    # Default (mean absolute deviation): MAD = (25 + 75 + 25 + 25)/4 = 37.5 -> md 75/37.5 = 2.00,
    # the "FDS up to 2.00" of §5.3 for "CSV has a disparity, the other formats none".
    mad = ffair.fairness_disparity(gen, sens, unit="instance_repeat1")
    assert mad["fds"].tolist() == pytest.approx([-2 / 3, 2.0, -2 / 3, -2 / 3])
    # sample sd: sqrt((3*625 + 5625)/3) = 50 -> 75/50 = 1.5
    assert ffair.fairness_disparity(gen, sens, dispersion="sample_std", unit="instance_repeat1")[
        "fds"
    ].tolist() == pytest.approx([-0.5, 1.5, -0.5, -0.5])
    with pytest.raises(ValueError, match="dispersion"):
        ffair.fairness_disparity(gen, sens, dispersion="range")
    assert f["n_groups"].tolist() == [2] * 4 and f["min_group_n"].tolist() == [1] * 4
    assert f["n_responses"].tolist() == [2] * 4 and f["n_instances"].tolist() == [2] * 4


def test_fds_pairs_and_three_formats():
    # txt: y y n y ⊥ n ; md: y y y n n n ; json: y y y y y ⊥   (k = 1)
    dec = {
        "txt": ["yes", "yes", "no", "yes", BOT, "no"],
        "md": ["yes", "yes", "yes", "no", "no", "no"],
        "json": ["yes", "yes", "yes", "yes", "yes", BOT],
    }
    ids = [f"p{i}" for i in range(1, 7)]
    spec = {iid: {fmt: [(dec[fmt][n], "a")] for fmt in dec} for n, iid in enumerate(ids)}
    sex = ["F", "F", "F", "M", "M", "M"]
    age = ["young", "old", "young", "old", "young", "old"]
    sens = pd.concat(
        [
            pd.DataFrame({"dataset": "ds", "instance_id": ids, "attribute": "sex", "value": sex}),
            pd.DataFrame({"dataset": "ds", "instance_id": ids, "attribute": "age", "value": age}),
        ]
    )
    f = ffair.fairness_disparity(make_gen(spec), sens, dispersion="std").set_index(["factor", "format"])
    assert sorted(set(f.index.get_level_values(0))) == ["age", "age:sex", "sex"]
    # MAD: (200 + 550 + 350)/9/3 = 1100/27 -> FDS = dev * 27/1100
    fm = ffair.fairness_disparity(make_gen(spec), sens).set_index(["factor", "format"])
    assert fm.loc["sex", "fds"].tolist() == pytest.approx([-6 / 11, 1.5, -21 / 22])
    # sex: txt F (1,1,0) = 66.67 [n3], M (1, ⊥, 0) = 50 [n2] -> Sen 50/3
    #      md F 100, M 0 -> Sen 100 ; json F 100 [3], M (1,1,⊥) = 100 [2] -> Sen 0
    # mu = (50/3 + 100 + 0)/3 = 350/9 ; deviations -200/9, 550/9, -350/9
    # sigma = sqrt((200^2 + 550^2 + 350^2)/81/3) = sqrt(155000)/9
    sex = f.loc["sex"]
    assert sex["sen_pp"].tolist() == pytest.approx([50 / 3, 100.0, 0.0])
    s = math.sqrt(155000)
    assert sex["fds"].tolist() == pytest.approx([-200 / s, 550 / s, -350 / s])
    assert sex["min_group_n"].tolist() == [2, 3, 2]
    # age: txt young (1, 0, ⊥) = 50, old (1, 1, 0) = 66.67 -> 50/3; md young (1,1,0), old (1,0,0) -> 100/3
    assert f.loc["age", "sen_pp"].tolist()[:2] == pytest.approx([50 / 3, 100 / 3])
    # age:sex txt: (old,F) p2 = 100 [1]; (old,M) p4, p6 = 50; (young,F) p1, p3 = 50; (young,M) p5 = ⊥ only
    #   -> 3 groups, Sen 50, min n 1. md: (old,F) 100, (old,M) 0, (young,F) 100, (young,M) 0 -> 4 groups, Sen 100
    pair = f.loc["age:sex"]
    assert pair["n_groups"].tolist()[:2] == [3, 4]
    assert pair["sen_pp"].tolist()[:2] == pytest.approx([50.0, 100.0])
    assert pair["min_group_n"].tolist()[:2] == [1, 1]


def test_fairness_single_group_has_no_sen():
    spec = {"a": {"txt": [("yes", "a")], "md": [("no", "a")]}, "b": {"txt": [("no", "a")], "md": [("no", "a")]}}
    sens = pd.DataFrame({"dataset": "ds", "instance_id": ["a", "b"], "attribute": "sex", "value": "F"})
    f = ffair.fairness_disparity(make_gen(spec), sens)
    assert f["sen_pp"].isna().all() and f["fds"].isna().all()
    assert f["n_groups"].tolist() == [1, 1] and f["min_group_n"].tolist() == [2, 2]


def test_fairness_rejects_conflicting_attribute_values(gen):
    sens = pd.DataFrame({"dataset": "ds", "instance_id": ["i1", "i1"], "attribute": "sex", "value": ["F", "M"]})
    with pytest.raises(ValueError, match="several values"):
        ffair.fairness_disparity(gen, sens)
    with pytest.raises(ValueError, match="value"):
        ffair.fairness_disparity(gen, sens.drop(columns="value"))


# --------------------------------------------------------------------------- silent


def test_silent_violations_hand_computed(gen):
    flags = pd.DataFrame(
        {
            "workflow_id": "w",
            "dataset": ["d"] * 5 + ["e"] * 2,
            "instance_id": list("1234567"),
            "mr1": [True, False, False, True, False, True, False],
            "mr2": [True, True, True, False, False, False, False],
            "mr3": [False] * 7,
        }
    )
    s = fr.silent_violations(flags).set_index("dataset")
    sch.SilentViolations.validate(s.reset_index())
    # d: MR2 on 1, 2, 3; of those MR1 holds on 2, 3 -> 2/3 silent
    assert s.loc["d", "silent_pct"] == pytest.approx(200 / 3)
    assert (s.loc["d", "n_silent"], s.loc["d", "n_mr2"], s.loc["d", "n_instances"]) == (2, 3, 5)
    assert pd.isna(s.loc["e", "silent_pct"]) and s.loc["e", "n_mr2"] == 0
    # main fixture: the only MR2 violation (i1) keeps its decision -> 100 %
    assert fr.silent_violations(fr.mr_flags(gen))["silent_pct"].tolist() == [100.0]


# --------------------------------------------------------------------------- tests


def test_format_tests_over_every_repeat_hand_computed(gen):
    t = fan.format_tests(gen)
    sch.FormatTests.validate(t)
    # Correctness per group (instance, repeat) in (txt, md, json, csv); gold i1 yes, i2 yes, i3 no:
    # i1 r1 (1,1,1,1)  i1 r2 (1,1,1,1)  i2 r1 (1,0,1,1)  i2 r2 (1,1,1,1)  i3 r1 (0,0,0,0)  i3 r2 (0,0,1,0)
    # C = (4,3,5,4): sum C^2 = 66; N = 16; R = (4,4,3,4,0,1): sum R^2 = 58
    # Q = 3 * (4*66 - 256)/(4*16 - 58) = 3 * 8/6 = 4 (repeat 1 only: 3), df 3
    q = t[t.test == "cochran_q"].iloc[0]
    assert (q["statistic"], q["n"], q["n_instances"]) == (pytest.approx(4.0), 6, 3)
    # The instance is the cluster: its two blocks permute their formats together. Instance sums
    # i1 (2,2,2,2) fixed; i2 (2,1,2,2) puts its missing 1 on any format a, i3 (0,0,1,0) its 1 on any b:
    # C = (4,4,4,4) - e_a + e_b, sum C^2 = 64 if a = b else 66 = observed -> p = P(a != b) = 12/16 = 0.75
    # (blocks as independent: chi2.sf(4, 3) = 0.26).
    assert q["p_value"] == pytest.approx(0.75)
    mat = np.array([[1, 1, 1, 1], [1, 1, 1, 1], [1, 0, 1, 1], [1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 1, 0]])
    assert q["statistic"] == pytest.approx(float(sm_cochrans_q(mat).statistic))
    # McNemar md vs json: md wrong & json right in i2 r1 and i3 r2 (b = 0, c = 2) -> exact p = 2 * 0.5^2 = 0.5
    # (repeat 1 only: one discordant pair, p = 1); every other pair has <= 1 discordant group -> p = 1.
    # Holm: 0.5 * 6 -> 1, so every p_holm is 1.
    mc = t[t.test == "mcnemar"].set_index("comparison")
    assert mc["p_value"].tolist() == pytest.approx([1.0, 1.0, 1.0, 0.5, 1.0, 1.0])
    assert mc.loc["md vs json", "statistic"] == 0.0
    assert mc["p_holm"].tolist() == pytest.approx([1.0] * 6)
    assert mc["n"].tolist() == [6] * 6 and mc["n_instances"].tolist() == [3] * 6
    assert t.loc[t.test == "spearman", "n_instances"].isna().all()
    with pytest.raises(ValueError, match="unit must be one of"):
        fan.format_tests(gen, unit="instance")


def test_format_tests_repeat_one_hand_computed_and_statsmodels(gen):
    t = fan.format_tests(gen, unit="instance_repeat1")
    sch.FormatTests.validate(t)
    q = t[t.test == "cochran_q"].iloc[0]
    # Repeat-1 correctness (txt, md, json, csv): i1 (1,1,1,1), i2 (1,0,1,1), i3 (0,0,0,0)
    # C = (2,1,2,2): sum C^2 = 13; N = 7; R = (4,3,0): sum R^2 = 25
    # Q = 3 * (4*13 - 49)/(4*7 - 25) = 3 * 3/3 = 3, df 3
    assert q["comparison"] == "txt,md,json,csv"
    assert q["statistic"] == pytest.approx(3.0) and q["n"] == 3 and q["n_instances"] == 3
    assert q["p_value"] == pytest.approx(sst.chi2.sf(3.0, 3))
    mat = np.array([[1, 1, 1, 1], [1, 0, 1, 1], [0, 0, 0, 0]])
    assert q["statistic"] == pytest.approx(float(sm_cochrans_q(mat).statistic))

    mc = t[t.test == "mcnemar"]
    assert mc["comparison"].tolist() == [
        "txt vs md",
        "txt vs json",
        "txt vs csv",
        "md vs json",
        "md vs csv",
        "json vs csv",
    ]
    direct = []
    for a, b in [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]:
        x, y = mat[:, a].astype(bool), mat[:, b].astype(bool)
        table = np.array([[(x & y).sum(), (x & ~y).sum()], [(~x & y).sum(), (~x & ~y).sum()]])
        direct.append(sm_mcnemar(table, exact=True).pvalue)
    # txt vs md: one discordant pair -> exact p = 2 * 0.5 = 1; no discordance elsewhere -> 1
    assert mc["p_value"].tolist() == pytest.approx(direct) == [1.0] * 6
    assert mc["p_holm"].tolist() == pytest.approx(list(multipletests(direct, method="holm")[1]))

    sp = t[t.test == "spearman"].iloc[0]
    # (JS, ΔAcc): md (0, -16.7), json (0.2075, 16.7), csv (0.1909, 0): same ranks -> rho = 1
    assert sp["statistic"] == pytest.approx(1.0) and sp["n"] == 3 and pd.isna(sp["note"])


def test_format_tests_spearman_too_few_points_and_no_gold():
    spec = {"a": {"txt": [("yes", "a")], "md": [("no", "b")]}, "b": {"txt": [("no", "a")], "md": [("no", "a")]}}
    t = fan.format_tests(make_gen(spec, {"a": "yes", "b": "no"}))
    sp = t[t.test == "spearman"].iloc[0]
    assert pd.isna(sp["statistic"]) and "fewer than 3" in sp["note"]
    assert len(fan.format_tests(make_gen(spec))) == 0


def test_format_tests_q_undefined_note():
    spec = {"a": {"txt": [("yes", "a")], "md": [("yes", "a")], "json": [("yes", "a")]}}
    t = fan.format_tests(make_gen(spec, {"a": "yes"}))
    q = t[t.test == "cochran_q"].iloc[0]
    assert pd.isna(q["statistic"]) and "discordant" in q["note"]


# --------------------------------------------------------------------------- mitigations


VOTE = {
    # before (groups): r1 yes/no MR1, r2 and r3 agree. Vote: txt yes, md (no, yes, yes) -> yes: agree
    "j1": {"txt": [("yes", "")] * 3, "md": [("no", ""), ("yes", ""), ("yes", "")]},
    # before: r1 yes/⊥, r2 no/⊥, r3 ⊥/yes: 3 violations. Vote: txt (yes, no, ⊥) 3-way tie, md (⊥, ⊥, yes) -> ⊥
    "j2": {"txt": [("yes", ""), ("no", ""), (BOT, "")], "md": [(BOT, ""), (BOT, ""), ("yes", "")]},
    # before: r2 no/yes only. Vote: txt (no, no, yes) -> no, md (no, yes, yes) -> yes -> MR1 after
    "j3": {"txt": [("no", ""), ("no", ""), ("yes", "")], "md": [("no", ""), ("yes", ""), ("yes", "")]},
}


def test_vote_aggregation_reports_delta_m1_m2_m3_with_first_seen_tie_rule():
    v = mit.vote_aggregation(make_gen(VOTE))
    sch.VoteAggregation.validate(v)
    v = v.set_index("relation")
    # M1 before = (1 + 3 + 1)/9 groups = 55.56; after (tie -> first seen: j2 txt = yes vs md ⊥): j2, j3 -> 2/3
    assert v.loc["MR1", "before_pct"] == pytest.approx(500 / 9)
    assert v.loc["MR1", "after_pct"] == pytest.approx(200 / 3)
    assert v.loc["MR1", "delta_pp"] == pytest.approx(500 / 9 - 200 / 3)  # -11.11: voting can hurt (Alibaba MedQA)
    # M2: no evidence anywhere -> 0 before, unchanged after, Δ = 0 (§5.5 "Δ𝑀2 remains 0.00%")
    assert (v.loc["MR2", "before_pct"], v.loc["MR2", "after_pct"], v.loc["MR2", "delta_pp"]) == (0.0, 0.0, 0.0)
    # M3: j1 (txt stable, md not) violates on its 3 groups -> 3/9; after voting 0 -> Δ = M3 (Table 3 Vot. ΔM3 = M3)
    assert v.loc["MR3", "before_pct"] == pytest.approx(100 / 3) and v.loc["MR3", "after_pct"] == 0.0
    assert v.loc["MR3", "delta_pp"] == pytest.approx(100 / 3)
    assert (
        v["n_before"].tolist() == [9, 9, 9] and v["n_after"].tolist() == [3, 3, 3] and v["n_ties"].tolist() == [1] * 3
    )


def test_vote_tie_rules():
    assert mit._majority(["yes", "no", "maybe"]) == ("yes", True)
    assert mit._majority(["no", "yes", "yes"]) == ("yes", False)
    assert mit._majority(["no", "yes"], tie="bottom") == (fr.BOTTOM, True)
    v = mit.vote_aggregation(make_gen(VOTE), tie="bottom").set_index("relation")
    # j2 txt tie -> ⊥ = md's ⊥ -> agree; only j3 -> 1/3
    assert v.loc["MR1", "after_pct"] == pytest.approx(100 / 3)
    with pytest.raises(ValueError, match="tie must be one of"):
        mit.vote_aggregation(make_gen(VOTE), tie="random")


def test_vote_aggregation_main_fixture(gen):
    # k = 2: md/i2 (no, yes) ties -> "no" (first seen); json/i3 (⊥, no) ties -> ⊥.
    # after: i1 all yes; i2 yes, no, yes, yes -> MR1; i3 all ⊥ -> 1/3. before: 2/6 groups.
    m = mit.vote_aggregation(gen).set_index("relation").loc["MR1"]
    assert m["before_pct"] == pytest.approx(100 / 3) and m["after_pct"] == pytest.approx(100 / 3)
    assert m["n_ties"] == 2


def test_calibration_split_is_seeded_hash():
    ids = [f"r{i:02d}" for i in range(1, 7)]
    split = mit.calibration_split(ids, 0.3, seed=0)
    for iid in ids:
        u = int.from_bytes(hashlib.sha256(f"0:{iid}".encode()).digest()[:8], "big") / 2**64
        assert split[iid] == (u < 0.3)
    assert split == {"r01": True, "r02": True, "r03": False, "r04": False, "r05": False, "r06": False}
    assert mit.calibration_split(ids, 0.3, seed=0) == split
    assert mit.calibration_split(ids, 0.3, seed=1) != split


ROUTING = {
    # calibration (seed 0, fraction 0.3): r01, r02
    "r01": {"txt": [("no", "")] * 2, "md": [("yes", "")] * 2, "json": [("yes", ""), ("no", "")]},
    "r02": {"txt": [("yes", "")] * 2, "md": [("yes", "")] * 2, "json": [("yes", "")] * 2},
    # held-out: r03..r06
    "r03": {"txt": [("yes", "")] * 2, "md": [("yes", "")] * 2, "json": [("yes", "")] * 2},
    "r04": {"txt": [("no", "")] * 2, "md": [("yes", ""), ("no", "")], "json": [("yes", "")] * 2},
    "r05": {"txt": [("yes", "")] * 2, "md": [("yes", "")] * 2, "json": [("no", "")] * 2},
    "r06": {"txt": [(BOT, "")] * 2, "md": [("yes", "")] * 2, "json": [("yes", "")] * 2},
}


ROUTING_GOLD = {f"r{i:02d}": "yes" for i in range(1, 7)}


def test_routing_choice_all_instances_and_calibration_option():
    gen = make_gen(ROUTING, ROUTING_GOLD)
    c = mit.routing_choice(gen)
    sch.RoutingChoice.validate(c)
    r = c.iloc[0]
    # accuracy over all 12 generations: txt 6/12, md 11/12 (r04 repeat 2 wrong), json 9/12 -> md
    assert (r["best_format"], r["criterion"], r["n_instances"], r["selection"]) == ("md", "accuracy", 6, "all")
    assert r["score_pct"] == pytest.approx(1100 / 12)
    cal = mit.routing_choice(gen, selection="calibration", calibration_fraction=0.3, seed=0).iloc[0]
    # calibration r01, r02: txt 2/4, md 4/4, json 3/4
    assert (cal["best_format"], cal["score_pct"], cal["n_instances"]) == ("md", 100.0, 2)
    nogold = mit.routing_choice(make_gen(ROUTING), selection="calibration", calibration_fraction=0.3).iloc[0]
    # Stb_f on calibration: txt 100, md 100, json 50 -> tie -> baseline-first order -> txt
    assert (nogold["best_format"], nogold["criterion"]) == ("txt", "stability")
    none = mit.routing_choice(make_gen(ROUTING), selection="calibration", calibration_fraction=0.0).iloc[0]
    assert (none["best_format"], none["criterion"], none["n_instances"]) == ("txt", "default", 0)
    with pytest.raises(ValueError, match="selection"):
        mit.routing_choice(gen, selection="heldout")


# The routed run: every input converted to md (source md = the original md answers).
ROUTED = {
    "r01": {f: [("yes", "")] * 2 for f in ("txt", "md", "json")},
    "r02": {f: [("yes", "")] * 2 for f in ("txt", "md", "json")},
    "r03": {f: [("yes", "")] * 2 for f in ("txt", "md", "json")},
    "r04": {"txt": [("yes", ""), ("no", "")], "md": [("yes", ""), ("no", "")], "json": [("yes", "")] * 2},
    "r05": {f: [("yes", "")] * 2 for f in ("txt", "md", "json")},
    "r06": {"txt": [("yes", "a")] * 2, "md": [("yes", "a")] * 2, "json": [("yes", "")] * 2},
}


def test_format_routing_measures_delta_m1_m2_m3_on_the_routed_run():
    gen = make_gen(ROUTING, ROUTING_GOLD)
    out = mit.format_routing(gen, make_gen(ROUTED, ROUTING_GOLD), mit.routing_choice(gen))
    sch.FormatRouting.validate(out)
    o = out.set_index("relation")
    # before, 12 groups: MR1 in r01 (both), r04 (both), r05 (both), r06 (both) = 8/12
    # after: only (r04, 2): no, no, yes -> 1/12
    assert (o.loc["MR1", "before_pct"], o.loc["MR1", "after_pct"]) == pytest.approx((800 / 12, 100 / 12))
    assert o.loc["MR1", "delta_pp"] == pytest.approx(700 / 12)
    # MR2: no evidence before (0); after r06's json answers cite nothing vs {a}: 2/12 -> Δ = -16.67
    assert (o.loc["MR2", "before_pct"], o.loc["MR2", "after_pct"]) == pytest.approx((0.0, 200 / 12))
    # MR3 before: r01 (json unstable), r04 (md unstable) -> 4/12; after: r04 (txt, md unstable; json not) -> 2/12
    assert (o.loc["MR3", "before_pct"], o.loc["MR3", "after_pct"]) == pytest.approx((400 / 12, 200 / 12))
    assert o["best_format"].tolist() == ["md"] * 3 and o["n_instances"].tolist() == [6] * 3
    assert o["n_before"].tolist() == [12] * 3 and o["n_after"].tolist() == [12] * 3


def test_format_routing_needs_a_choice_and_known_instances():
    gen = make_gen(ROUTING, ROUTING_GOLD)
    with pytest.raises(ValueError, match="no routing choice"):
        mit.format_routing(gen, make_gen(ROUTED, ROUTING_GOLD, wf="other"), mit.routing_choice(gen))
    extra = {**ROUTED, "r99": ROUTED["r01"]}
    with pytest.raises(ValueError, match="not in gen"):
        mit.format_routing(gen, make_gen(extra, ROUTING_GOLD), mit.routing_choice(gen))


def test_format_routing_simulated_is_kept_as_an_option():
    out = mit.format_routing_simulated(make_gen(ROUTING, ROUTING_GOLD), calibration_fraction=0.3, seed=0)
    sch.FormatRoutingSimulated.validate(out)
    r = out.iloc[0]
    assert (r["best_format"], r["criterion"], r["calibration_score_pct"]) == ("md", "accuracy", 100.0)
    # held-out MR1 before (repeat 1): r03 no; r04 yes; r05 yes; r06 ⊥ vs yes -> 3/4; after: md unstable on r04 -> 1/4
    assert (r["mrv_before_pct"], r["mrv_after_pct"]) == pytest.approx((75.0, 25.0))


# --------------------------------------------------------------------------- schemas


def test_schemas_are_strict_and_described():
    import pandera.pandas as pa

    models = {
        n: m
        for n, m in vars(sch).items()
        if isinstance(m, type) and issubclass(m, pa.DataFrameModel) and not n.startswith("_")
    }
    assert {"MRFlags", "MRViolations", "FormatRouting", "SourceInstances", "GenerationOutcomes"} <= set(models)
    for name, model in models.items():
        schema = model.to_schema()
        assert schema.strict is True and schema.coerce is True, name
        for col, c in schema.columns.items():
            assert c.description, f"{name}.{col} has no description"
    with pytest.raises(Exception):
        sch.MRFlags.validate(fr.mr_flags(make_gen(MAIN)).assign(extra=1))


def _shared_keys(gen: pd.DataFrame) -> pd.DataFrame:
    """The generation keys a run stores when every (instance, format)'s k repeats are one computation."""
    return gen.assign(generation_key=[f"{r.instance_id}/{r.format}" for r in gen.itertuples()])


def test_repeats_that_are_one_computation_make_m3_and_voting_not_measurable():
    # i1: yes/yes in txt, no/no in md (MR1 violated in both groups); i2: yes everywhere
    spec = {
        "i1": {"txt": [("yes", ["a"])] * 2, "md": [("no", ["a"])] * 2},
        "i2": {"txt": [("yes", ["a"])] * 2, "md": [("yes", ["b"])] * 2},
    }
    shared = _shared_keys(make_gen(spec))
    assert fr.shared_repeat_workflows(shared) == {("wf", "ds")}
    flags = fr.mr_flags(shared)
    assert flags["mr1"].tolist() == [True, True, False, False] and flags["mr2"].tolist() == [False, False, True, True]
    assert flags["mr3"].isna().all() and set(flags["mr3_note"]) == {fr.NOT_MEASURABLE_DETERMINISTIC}
    mrv = fr.mr_violations(flags).set_index("relation")
    assert mrv.loc["MR1", "violation_pct"] == 50.0 and pd.isna(mrv.loc["MR1", "not_measurable"])
    assert math.isnan(mrv.loc["MR3", "violation_pct"]) and mrv.loc["MR3", "n_groups"] == 0
    assert mrv.loc["MR3", "not_measurable"] == fr.NOT_MEASURABLE_DETERMINISTIC
    vote = mit.vote_aggregation(shared).set_index("relation")
    assert vote["before_pct"].tolist()[:2] == [50.0, 50.0]
    assert vote["after_pct"].isna().all() and vote["delta_pp"].isna().all()
    assert set(vote["not_measurable"]) == {fr.NOT_MEASURABLE_DETERMINISTIC}
    # the same replies as k independent draws (a key per repeat): M3 is measured (0 of 2 instances)
    distinct = shared.assign(generation_key=[f"{k}/{r}" for k, r in zip(shared["generation_key"], shared["repeat"])])
    assert fr.shared_repeat_workflows(distinct) == set()
    m3 = fr.mr_violations(fr.mr_flags(distinct)).set_index("relation").loc["MR3"]
    assert m3["violation_pct"] == 0.0 and pd.isna(m3["not_measurable"])
    assert mit.vote_aggregation(distinct)["not_measurable"].isna().all()


def test_one_repeat_makes_m3_and_voting_not_measurable():
    """k = 1: MR3 would compare each reply with itself (M3 0.0 [0.0, 0.0], read as perfect
    stability) and the vote of one draw is that draw (ΔM = 0 by construction): both are null with
    the reason; MR1 and MR2 are measured as usual (i1 flips between txt and md, i2 does not)."""
    spec = {
        "i1": {"txt": [("yes", ["a"])], "md": [("no", ["a"])]},
        "i2": {"txt": [("yes", ["a"])], "md": [("yes", ["b"])]},
    }
    gen = make_gen(spec).assign(generation_key=lambda d: [f"{i}/{f}" for i, f in zip(d["instance_id"], d["format"])])
    assert fr.single_repeat_workflows(gen) == {("wf", "ds")} and fr.shared_repeat_workflows(gen) == set()
    assert fr.repeats_not_measurable(gen) == {("wf", "ds"): fr.NOT_MEASURABLE_ONE_REPEAT}
    flags = fr.mr_flags(gen)
    assert flags["mr1"].tolist() == [True, False] and flags["mr2"].tolist() == [False, True]
    assert flags["mr3"].isna().all() and set(flags["mr3_note"]) == {fr.NOT_MEASURABLE_ONE_REPEAT}
    mrv = fr.mr_violations(flags).set_index("relation")
    assert mrv.loc["MR1", "violation_pct"] == 50.0 and mrv.loc["MR2", "violation_pct"] == 50.0
    assert (
        math.isnan(mrv.loc["MR3", "violation_pct"]) and mrv.loc["MR3", "not_measurable"] == fr.NOT_MEASURABLE_ONE_REPEAT
    )
    vote = mit.vote_aggregation(gen)
    assert vote["after_pct"].isna().all() and set(vote["not_measurable"]) == {fr.NOT_MEASURABLE_ONE_REPEAT}
    # one instance with k = 2 in a format makes the series measurable again
    more = pd.concat([gen, gen[(gen.instance_id == "i1") & (gen.format == "txt")].assign(repeat=2)], ignore_index=True)
    assert fr.single_repeat_workflows(more) == set()


def test_routing_of_one_computation_says_what_its_after_values_are():
    spec = {"i1": {"txt": [("yes", ["a"])] * 2, "md": [("no", ["a"])] * 2}}
    gen = make_gen(spec).assign(generation_key=lambda d: [f"{f}/{r}" for f, r in zip(d["format"], d["repeat"])])
    # every routed input (source format txt or md, repeat 1..2) is the one txt computation
    routed = make_gen({"i1": {"txt": [("yes", ["a"])] * 2, "md": [("yes", ["a"])] * 2}}).assign(generation_key="txt/1")
    choice = pd.DataFrame({"workflow_id": ["wf"], "dataset": ["ds"], "best_format": ["txt"], "selection": ["all"]})
    out = mit.format_routing(gen, routed, choice).set_index("relation")
    assert out["after_pct"].tolist()[:2] == [0.0, 0.0] and math.isnan(out.loc["MR3", "after_pct"])
    assert out.loc["MR1", "delta_pp"] == 100.0 and set(out["note"]) == {mit.ROUTING_DETERMINISTIC_NOTE}


def test_verdict_scores_of_a_not_measurable_m3_have_no_m3_rows_and_warn_nothing():
    import json
    import warnings

    from metamorph.studies.format_robustness import report

    spec = {
        "i1": {"txt": [("yes", ["a"])] * 2, "md": [("no", ["a"])] * 2},
        "i2": {"txt": [("yes", ["a"])] * 2, "md": [("yes", ["b"])] * 2},
    }
    gen = _shared_keys(make_gen(spec, gold={"i1": "yes", "i2": "yes"}, wf="m/inline"))
    flags = fr.mr_flags(gen)
    outcomes = gen.assign(model_id="m", parse_status="ok", categories_json=[json.dumps(c) for c in gen["categories"]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # pandas' FutureWarning on concatenating an empty frame
        scores = report.comparison_scores(outcomes, flags)
    assert sorted(scores["metric"].unique()) == ["M1", "M2", "accuracy"]


def test_instance_stability_is_the_unit_of_stb_f_with_bottom_as_a_value():
    # i: A A A (stable); j: A ⊥ A (unstable); b: ⊥ ⊥ ⊥ (k ⊥s agree); one: a single repeat (trivially stable)
    gen = pd.DataFrame(
        {
            "workflow_id": ["w"] * 10,
            "dataset": ["d"] * 10,
            "instance_id": ["i", "i", "i", "j", "j", "j", "b", "b", "b", "one"],
            "format": ["txt"] * 10,
            "decision": ["A", "A", "A", "A", None, "A", None, None, None, "B"],
        }
    )
    got = fr.instance_stability(gen).sort_values("instance_id").reset_index(drop=True)
    assert got[["instance_id", "stable", "k"]].values.tolist() == [
        ["b", True, 3],
        ["i", True, 3],
        ["j", False, 3],
        ["one", True, 1],
    ]
    # an all-⊥ column read as floats (NaN) is the same three ⊥s
    nan = gen[gen["instance_id"] == "b"].assign(decision=[float("nan")] * 3)
    assert fr.instance_stability(nan)[["instance_id", "stable", "k"]].values.tolist() == [["b", True, 3]]
    with pytest.raises(ValueError, match="instance_stability: missing required column"):
        fr.instance_stability(gen.drop(columns=["decision"]))


def test_the_rows_behind_a_flip_cell_are_the_flipped_groups_of_every_repeat(gen):
    """The UI's rows behind an ``evidence_drift`` flip cell (assets.format_robustness): the format's
    and the baseline's generations of the flipped groups — json's flip is in repeat 2 (the earlier
    pick read repeat 1 only and showed none), and an instance missing the format is no flip."""
    import json

    from assets.format_robustness import _flipped

    outcomes = gen.assign(categories_json=[json.dumps(c) for c in gen["categories"]]).drop(columns=["categories"])
    rows = _flipped(outcomes, {"format": "json", "baseline": "txt"})
    assert rows[["instance_id", "repeat", "format", "decision"]].values.tolist() == [
        ["i3", 2, "json", "no"],
        ["i3", 2, "txt", None],
    ]
    no_md_i2 = outcomes[~((outcomes.instance_id == "i2") & (outcomes.format == "md"))]
    assert _flipped(no_md_i2, {"format": "md", "baseline": "txt"}).empty


def _decisions(model: str, spec: dict) -> pd.DataFrame:
    """``extracted_decisions`` rows of ``model``'s workflow ``<model>/inline`` answering ``spec``."""
    g = make_gen(spec, ROUTING_GOLD, wf=f"{model}/inline")
    g["model_id"] = model
    g["generation_key"] = [f"{model}-{r.instance_id}-{r.format}-{r.repeat}" for r in g.itertuples()]
    g["parse_status"] = ["ok" if d is not None else "unparseable" for d in g["decision"]]
    g["parse_reason"] = [None if d is not None else "no_label" for d in g["decision"]]
    g["is_correct"] = g["is_correct"].astype("boolean")
    g["favorable"] = g["favorable"].astype("boolean")
    g["not_sent"] = False
    return g.drop(columns=["categories"])


def test_routing_choice_per_model_is_the_pooled_choice_model_by_model():
    """Each model's routing choice from its own generations: model a as ROUTING (md best), model b with
    md and json swapped (json best); pooled, they are routing_choice over both models' generations,
    with every selection."""
    swapped = {i: {"txt": f["txt"], "md": f["json"], "json": f["md"]} for i, f in ROUTING.items()}
    decisions = {"a": _decisions("a", ROUTING), "b": _decisions("b", swapped)}
    no_evidence = pd.DataFrame({"generation_key": [], "categories_json": []})
    both = fs.metric_input(fs.generation_outcomes(pd.concat(decisions.values(), ignore_index=True), no_evidence))
    for kw in ({}, {"selection": "calibration", "calibration_fraction": 0.3, "seed": 0}):
        per_model = pd.concat(
            [mit.routing_choice_per_model(d, no_evidence, model_id=m, **kw) for m, d in decisions.items()],
            ignore_index=True,
        )
        assert per_model["model_id"].tolist() == ["a", "b"]
        pooled = mit.pooled_routing_choice(per_model.iloc[::-1])
        assert pooled["best_format"].tolist() == ["md", "json"]
        pd.testing.assert_frame_equal(pooled, mit.routing_choice(both, **kw), check_exact=True)
    with pytest.raises(ValueError, match=r"rows of model\(s\) \['b'\] in the generations of 'a'"):
        mit.routing_choice_per_model(decisions["b"], no_evidence, model_id="a")
    with pytest.raises(ValueError, match="'a/inline', dataset 'ds' chosen twice"):
        mit.pooled_routing_choice(pd.concat([per_model, per_model.iloc[:1]]))


def test_one_format_makes_every_relation_not_measurable_saying_why():
    """--formats txt: no instance has two formats to compare, so M1, M2 and M3 are not measurable,
    and each says why (not a bare null)."""
    spec = {"i1": {"txt": [("yes", "a"), ("no", "a")]}, "i2": {"txt": [("yes", "a"), ("yes", "a")]}}
    mr = fr.mr_violations(fr.mr_flags(make_gen(spec))).set_index("relation")
    for rel in ("MR1", "MR2", "MR3"):
        assert math.isnan(mr.loc[rel, "violation_pct"]), rel
        assert mr.loc[rel, "not_measurable"] == (
            f"not measurable: every instance has fewer than 2 formats (2 of 2); {rel} compares formats"
        )
