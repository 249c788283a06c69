"""Upgrade verdicts (metamorph.comparison) on synthetic paired data with hand-checkable p-values."""

import math

import numpy as np
import pandas as pd
import pytest

from metamorph.comparison import (
    COMPARISON_COLUMNS,
    comparison_markdown,
    compare_models,
    item_scores,
    slice_label,
    verdict_summary,
)
from metamorph.stats import paired_bootstrap_diff_ci, paired_permutation_test


def scores(model, metric, values, sl="all"):
    return pd.DataFrame(
        {
            "model_id": model,
            "metric": metric,
            "slice": sl,
            "item_id": [f"i{j}" for j in range(len(values))],
            "value": [float(v) for v in values],
            "n_obs": 1,
        }
    )


def one(df, **where):
    for k, v in where.items():
        df = df[df[k] == v]
    assert len(df) == 1
    return df.iloc[0]


def test_six_items_all_lost_is_a_regression_with_exact_mcnemar_p():
    s = pd.concat([scores("base", "accuracy", [1] * 6), scores("cand", "accuracy", [0] * 6)])
    r = one(compare_models(s, "base", {"accuracy": True}))
    # 6 discordant pairs, all one way: p = 2 * 0.5**6
    assert (r.test, r.statistic, r.p_value, r.p_holm) == ("mcnemar_exact", 0.0, 0.03125, 0.03125)
    assert (r.difference, r.ci_low, r.ci_high) == (-1.0, -1.0, -1.0) and r.ci_note.startswith("all values equal")
    assert (r.n_items, r.n_better, r.n_worse, r.verdict) == (6, 0, 6, "regressed")


def test_holm_over_the_family_turns_a_nominal_p_into_no_detectable_change():
    s = pd.concat(
        [
            scores("base", "accuracy", [1] * 6, "format=csv"),
            scores("cand", "accuracy", [0] * 6, "format=csv"),
            scores("base", "accuracy", [0] * 5, "format=json"),
            scores("cand", "accuracy", [1] * 5, "format=json"),
            scores("base", "accuracy", [1, 0, 1], "format=txt"),
            scores("cand", "accuracy", [1, 0, 1], "format=txt"),
        ]
    )
    out = compare_models(s, "base", {"accuracy": True}).set_index("slice")
    # raw p: 2/64, 2/32, 1 (no discordant pair) -> Holm: 3 * 0.03125, 2 * 0.0625, 1
    assert out["p_value"].tolist() == [0.03125, 0.0625, 1.0]
    assert out["p_holm"].tolist() == [0.09375, 0.125, 1.0]
    assert set(out["verdict"]) == {"no detectable change"}
    assert out.loc["format=json", "difference"] == 1.0  # 5 of 5 gained, yet not detectable at n = 5


def test_known_effect_is_detected_and_no_effect_is_not():
    n = 200
    base = np.array([0 if i % 5 == 0 else 1 for i in range(n)])  # 160 of 200 correct
    lost = base.copy()
    lost[[i for i in range(n) if i % 10 == 1]] = 0  # 20 correct items lost: Δ = -0.10
    swapped = lost.copy()
    swapped[[i for i in range(n) if i % 10 == 0]] = 1  # and 20 wrong items gained: Δ = 0
    s = pd.concat(
        [scores("base", "accuracy", base), scores("worse", "accuracy", lost), scores("same", "accuracy", swapped)]
    )
    out = compare_models(s, "base", {"accuracy": True}, n_resamples=2000, seed=0).set_index("candidate_id")
    w = out.loc["worse"]
    assert w.difference == pytest.approx(-0.10) and w.p_value == pytest.approx(2 * 0.5**20)
    assert w.ci_low < -0.10 < w.ci_high < 0 and w.verdict == "regressed"
    same = out.loc["same"]
    assert (same.difference, same.p_value, same.verdict) == (0.0, 1.0, "no detectable change")
    assert same.ci_low < 0 < same.ci_high and (same.n_better, same.n_worse) == (20, 20)


def test_lower_is_better_metric_regresses_when_violations_rise():
    s = pd.concat([scores("base", "MR1", [0] * 8), scores("cand", "MR1", [1] * 8)])
    r = one(compare_models(s, "base", {"MR1": False}))
    assert (r.difference, r.p_value, r.n_worse, r.verdict) == (1.0, 2 * 0.5**8, 8, "regressed")
    r = one(compare_models(s, "cand", {"MR1": False}))
    assert (r.candidate_id, r.difference, r.verdict) == ("base", -1.0, "improved")


def test_non_binary_item_values_use_the_exact_sign_flip_test():
    # repeat-averaged correctness: differences +1/3, +1/3, +1/3, -1/3; of the 16 sign patterns,
    # 10 have |sum| >= 2/3 -> p = 10/16
    s = pd.concat([scores("base", "accuracy", [0, 0, 0, 1 / 3]), scores("cand", "accuracy", [1 / 3, 1 / 3, 1 / 3, 0])])
    r = one(compare_models(s, "base", {"accuracy": True}))
    assert r.test == "paired_permutation" and r.p_value == pytest.approx(0.625)
    assert r.statistic == pytest.approx(1 / 6) and (r.n_better, r.n_worse) == (3, 1)


def test_mcnemar_and_sign_flip_agree_on_binary_items():
    b = [1, 0, 1, 1, 0, 1, 0, 1, 1, 1]
    c = [1, 1, 1, 0, 1, 1, 1, 1, 1, 1]  # 3 gained, 1 lost: exact McNemar p = 2 * 5/16
    r = one(compare_models(pd.concat([scores("b", "acc", b), scores("c", "acc", c)]), "b", {"acc": True}))
    assert r.p_value == pytest.approx(0.625) and paired_permutation_test(b, c)[1] == pytest.approx(0.625)
    ci = paired_bootstrap_diff_ci(b, c, 2000, 0)
    assert ci.mean == pytest.approx(0.2) and ci.low < 0 < 0.2 < ci.high and ci.n == 10
    assert paired_bootstrap_diff_ci(b, c, 2000, 0) == ci  # seeded
    assert paired_bootstrap_diff_ci([1], [0]).note.startswith("n=1") and paired_bootstrap_diff_ci([], []).n == 0
    # the paired resample of items is a resample of their differences: the interval scipy gives
    # for bootstrap(paired=True) on (b, c) with statistic mean(c - b), computed here directly
    from scipy import stats as sst

    res = sst.bootstrap(
        (np.asarray(b, float), np.asarray(c, float)),
        lambda x, y, axis=-1: np.mean(y - x, axis=axis),
        paired=True,
        vectorized=True,
        n_resamples=2000,
        method="percentile",
        rng=np.random.default_rng(0),
    )
    assert (ci.low, ci.high) == pytest.approx((res.confidence_interval.low, res.confidence_interval.high))


def test_unshared_items_are_counted_and_an_unshared_slice_is_not_comparable():
    s = pd.concat(
        [
            scores("base", "acc", [1, 1, 0]),
            scores("cand", "acc", [1, 0]).assign(item_id=["i1", "i9"]),
            scores("base", "acc", [1], "dataset=medqa"),
        ]
    )
    out = compare_models(s, "base", {"acc": True}).set_index("slice")
    assert out.loc["all", ["n_items", "n_baseline_only", "n_candidate_only"]].tolist() == [1, 2, 1]
    assert out.loc["all", "ci_note"].startswith("n=1")
    med = out.loc["dataset=medqa"]
    assert med.verdict == "not comparable" and med.n_items == 0 and math.isnan(med.p_holm)
    assert list(compare_models(s, "base", {"acc": True}).columns) == COMPARISON_COLUMNS


def test_bad_input_is_named():
    s = pd.concat([scores("b", "acc", [1]), scores("b", "acc", [0])])
    with pytest.raises(ValueError, match="duplicate item score.*model 'b' metric 'acc'"):
        compare_models(s, "b", {"acc": True})
    with pytest.raises(ValueError, match=r"no direction.*\['acc'\]"):
        compare_models(scores("b", "acc", [1]), "b", {})
    with pytest.raises(ValueError, match="alpha"):
        compare_models(scores("b", "acc", [1]), "b", {"acc": True}, alpha=1.5)


def test_item_scores_average_repeats_per_item_and_label_slices():
    gen = pd.DataFrame(
        {
            "model_id": ["m"] * 5,
            "dataset": ["d"] * 5,
            "format": ["csv", "csv", "csv", "json", "json"],
            "instance_id": ["x", "x", "y", "x", "x"],
            "is_correct": [True, False, True, True, True],
        }
    )
    out = item_scores(gen, metric="accuracy", value="is_correct", item=["instance_id"], slices=["dataset", "format"])
    assert out[["slice", "item_id", "value", "n_obs"]].values.tolist() == [
        ["dataset=d, format=csv", "x", 0.5, 2],
        ["dataset=d, format=csv", "y", 1.0, 1],
        ["dataset=d, format=json", "x", 1.0, 2],
    ]
    pooled = item_scores(gen, metric="accuracy", value="is_correct", item=["format", "instance_id"])
    assert pooled["slice"].unique().tolist() == ["all"] and pooled["item_id"].tolist() == ["csv/x", "csv/y", "json/x"]
    with pytest.raises(ValueError, match="1 row\\(s\\) with a missing 'is_correct'"):
        item_scores(
            gen.assign(is_correct=[True, None, True, True, True]), metric="a", value="is_correct", item=["instance_id"]
        )
    assert slice_label({}) == "all"
    by_task = item_scores(
        gen, metric="accuracy", value="is_correct", item=["dataset", "instance_id"], slices=["dataset"]
    )
    assert by_task[["slice", "item_id", "value"]].values.tolist() == [
        ["dataset=d", "d/x", 0.75],
        ["dataset=d", "d/y", 1.0],
    ]


def test_summary_and_markdown_put_regressions_first():
    s = pd.concat(
        [
            scores("base", "acc", [1] * 7, "s=a"),
            scores("cand", "acc", [0] * 7, "s=a"),
            scores("base", "acc", [1, 0], "s=b"),
            scores("cand", "acc", [1, 0], "s=b"),
        ]
    )
    out = compare_models(s, "base", {"acc": True})
    assert out["p_holm"].tolist() == [2 * 2 * 0.5**7, 1.0]
    assert verdict_summary(out).iloc[0].tolist() == ["cand", 1, 0, 1, 0]
    md = comparison_markdown(out).splitlines()
    assert md[2].startswith("| cand | acc | s=a | 7 | -100.0 | [-100.0, -100.0] | mcnemar_exact | 0.0312 |")
    assert md[2].endswith("**regressed** |") and "**no detectable change**" in md[3]


def test_a_row_on_fewer_than_20_items_says_its_interval_is_unreliable():
    # 4 items (each the cluster of its repeats): base (1, 1, 0, 1), cand (0, 1, 1, 0) -> the interval is
    # printed, with the note; 20 items of the same pattern -> no note.
    s = pd.concat([scores("base", "acc", [1, 1, 0, 1]), scores("cand", "acc", [0, 1, 1, 0])])
    r = one(compare_models(s, "base", {"acc": True}))
    assert r.n_items == 4 and not math.isnan(r.ci_low) and r.ci_low < r.ci_high
    assert r.ci_note == "n=4 clusters (< 20): interval unreliable"
    s20 = pd.concat([scores("base", "acc", [1, 1, 0, 1] * 5), scores("cand", "acc", [0, 1, 1, 0] * 5)])
    assert one(compare_models(s20, "base", {"acc": True})).ci_note is None
