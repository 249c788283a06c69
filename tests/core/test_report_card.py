"""The report card's pure parts (metamorph.report_card): rates with cluster CIs, versions and history."""

import math

import pandas as pd
import pytest

from metamorph.report_card import CARD_COLUMNS, build_card, card_markdown, clustered_rate_rows, study_tag, trend_key


def row(value, model="a", metric="M1", ci=(5.0, 15.0)):
    return {
        "model_id": model,
        "study": "s",
        "metric": metric,
        "slice": "all",
        "unit": "%",
        "value": value,
        "ci_low": ci[0],
        "ci_high": ci[1],
        "n": 4,
        "higher_is_better": False,
    }


T = [
    pd.Timestamp("2026-12-01 10:00"),
    pd.Timestamp("2026-12-02 10:00"),
    pd.Timestamp("2026-12-03 10:00"),
    pd.Timestamp("2026-12-04 10:00"),
]


def test_versions_history_and_delta_against_the_latest_earlier_version():
    c1 = build_card(pd.DataFrame([row(10.0)]), {("a", "s"): "v1"}, T[0])
    assert list(c1.columns) == CARD_COLUMNS
    assert c1[["version", "is_current", "previous_version"]].values.tolist() == [["v1", True, None]]
    assert math.isnan(c1.loc[0, "delta"])
    c2 = build_card(pd.DataFrame([row(12.0)]), {("a", "s"): "v2"}, T[1], c1)
    assert c2[["version", "is_current", "previous_version", "previous_value", "delta", "recorded_at"]].iloc[
        0
    ].tolist() == ["v2", True, "v1", 10.0, 2.0, T[1]]
    # the earlier version stays as history, unchanged (it had no predecessor)
    assert c2[["version", "is_current", "value", "previous_version", "recorded_at"]].iloc[1].tolist() == [
        "v1",
        False,
        10.0,
        None,
        T[0],
    ]
    # re-running the same version replaces it: it never becomes its own predecessor
    c3 = build_card(pd.DataFrame([row(12.5)]), {("a", "s"): "v2"}, T[2], c2)
    assert c3[["version", "is_current", "value"]].values.tolist() == [["v2", True, 12.5], ["v1", False, 10.0]]
    assert (c3.loc[0, "previous_version"], c3.loc[0, "delta"]) == ("v1", 2.5)
    # a third version compares with the most recent earlier one (v2), and both are kept as history
    c4 = build_card(pd.DataFrame([row(9.0)]), {("a", "s"): "v3"}, T[3], c3)
    assert c4[["version", "is_current"]].values.tolist() == [["v3", True], ["v1", False], ["v2", False]]
    assert (c4.loc[0, "previous_version"], c4.loc[0, "previous_value"], c4.loc[0, "delta"]) == ("v2", 12.5, -3.5)


def test_a_model_seen_for_the_first_time_has_no_previous_version():
    c1 = build_card(pd.DataFrame([row(10.0)]), {("a", "s"): "v1"}, T[0])
    c2 = build_card(pd.DataFrame([row(10.0), row(30.0, model="b")]), {("a", "s"): "v1", ("b", "s"): "w1"}, T[1], c1)
    assert c2[["model_id", "is_current", "previous_version"]].values.tolist() == [["a", True, None], ["b", True, None]]


def test_bad_rows_are_named():
    with pytest.raises(ValueError, match=r"no version for \(model, study\) \[\('a', 's'\)\]"):
        build_card(pd.DataFrame([row(1.0)]), {}, T[0])
    with pytest.raises(ValueError, match="duplicate card cell"):
        build_card(pd.DataFrame([row(1.0), row(2.0)]), {("a", "s"): "v"}, T[0])


def test_clustered_rate_is_pooled_over_observations_and_resamples_clusters():
    obs = pd.DataFrame(
        {
            "model_id": ["m", "m", "m", "m", "m"],
            "dataset": ["d"] * 5,
            "instance_id": ["x", "x", "y", "z", "z"],
            "flag": [True, False, True, True, True],
        }
    )
    (r,) = clustered_rate_rows(
        obs, study="s", metric="M1", value="flag", cluster=["dataset", "instance_id"], higher_is_better=False
    ).to_dict(orient="records")
    assert (r["value"], r["n"], r["unit"], r["slice"], r["higher_is_better"]) == (80.0, 3, "%", "all", False)
    # cluster rates are 1/2, 1 and 1: every resample lies in [50, 100]
    assert 50.0 <= r["ci_low"] <= 80.0 <= r["ci_high"] <= 100.0
    same = clustered_rate_rows(
        obs.assign(flag=True), study="s", metric="M1", value="flag", cluster=["instance_id"], slices=["dataset"]
    )
    assert same[["slice", "value", "ci_low", "ci_high"]].values.tolist() == [["dataset=d", 100.0, 100.0, 100.0]]
    with pytest.raises(ValueError, match="1 row\\(s\\) with a missing 'flag'"):
        clustered_rate_rows(
            obs.assign(flag=[True, None, True, True, True]),
            study="s",
            metric="M1",
            value="flag",
            cluster=["instance_id"],
        )


def test_markdown_is_narrow_one_section_per_model_and_study_with_ci_and_delta():
    c1 = build_card(
        pd.DataFrame([row(10.0), row(50.0, metric="accuracy", ci=(math.nan, math.nan))]),
        {("a", "s"): "v1aaaaaaaaaa"},
        T[0],
    )
    c2 = build_card(
        pd.DataFrame([row(12.0), row(50.0, metric="accuracy", ci=(math.nan, math.nan))]),
        {("a", "s"): "v2bbbbbbbbbb"},
        T[1],
        c1,
    )
    assert card_markdown(c2).splitlines() == [
        "**a** · s · version v2bbbbbb",
        "",
        "| metric | value [95% CI] | Δ |",
        "|---|---|---|",
        "| M1 | 12.0 [5.0, 15.0] | +2.0 vs v1aaaaaa |",
        "| accuracy | 50.0 | +0.0 vs v1aaaaaa |",
    ]
    assert card_markdown(c2.iloc[0:0]) == "_no model has been evaluated in any study yet_"


def test_markdown_fits_a_limit_leaving_out_whole_sections_and_saying_so():
    rows = pd.DataFrame([row(10.0, model=m) for m in ("a", "b", "c")])
    card = build_card(rows, {(m, "s"): "v1" for m in ("a", "b", "c")}, T[0])
    section = "**a** · s · version v1\n\n| metric | value [95% CI] | Δ |\n|---|---|---|\n| M1 | 10.0 [5.0, 15.0] | – |"
    assert len(section) == 22 + 2 + 31 + 1 + 13 + 1 + 29 == 99
    full = card_markdown(card)
    assert len(full) == 3 * 99 + 2 * 2
    assert card_markdown(card, limit=len(full) + 1) == full
    # one section and the line naming the two left out: 99 + 2 + 68 characters
    cut = card_markdown(card, limit=200)
    assert cut == section + "\n\n_2 of 3 model × study sections not shown here: the table holds them_"
    assert len(cut) == 169


def test_trend_keys_are_short():
    assert trend_key("smollm2", "format_robustness", "M1", "ingestion=inline") == "smollm2/FR/M1/inline"
    assert trend_key("m", "order_probe", "recovery", "language=en, setting=cot") == "m/OP/recovery/en/cot"
    assert trend_key("m", "wrapper_sensitivity", "FSI", "all") == "m/WS/FSI"
    from metamorph.study import studies

    assert len({study_tag(s) for s in studies()}) == len(studies())  # a tag names one study
