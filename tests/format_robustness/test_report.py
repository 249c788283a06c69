"""The printed headline of the format study (report.py) on a small synthetic warehouse; every
number is counted by hand."""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest

from metamorph.studies.format_robustness import metrics as fr
from metamorph.studies.format_robustness import report

# 3 instances × 2 formats × k = 1, workflow "wf", dataset "ds"; gold i1, i2 = refer, i3 = do not refer.
#   decision          txt     md            truncated   n_evidence / n_echoed (txt; md)
#   i1               refer   refer          no          2/1 ; 1/0
#   i2               refer   ⊥ (truncated)  md          1/0 ; 0/0
#   i3               refer   refer          no          1/0 ; 1/2
DECISIONS = [
    ("i1", "txt", "refer", "clean_json", False, 2, 1),
    ("i1", "md", "refer", "clean_json", False, 1, 0),
    ("i2", "txt", "refer", "clean_json", False, 1, 0),
    ("i2", "md", None, "truncated", True, 0, 0),
    ("i3", "txt", "refer", "clean_json", False, 1, 0),
    ("i3", "md", "refer", "clean_json", False, 1, 2),
]
GOLD = {"i1": "refer", "i2": "refer", "i3": "do not refer"}


@pytest.fixture
def con(tmp_path):
    dec = pd.DataFrame(
        DECISIONS, columns=["instance_id", "format", "decision", "parse_reason", "truncated", "n_evidence", "n_echoed"]
    )
    dec = dec.assign(workflow_id="wf", dataset="ds", repeat=1, gold=dec["instance_id"].map(GOLD))
    gen = dec.assign(is_correct=dec["decision"] == dec["gold"], categories=[[]] * len(dec), favorable=None)
    # M1 = 1 of 3 groups (i2: refer vs ⊥); M2 as written here (hand-made CIs); M3 not measurable
    # (the repeats are one computation: metrics.mr_violations leaves it null with the reason)
    mrv = pd.DataFrame(
        {
            "workflow_id": "wf",
            "dataset": "ds",
            "relation": ["MR1", "MR2", "MR3"],
            "violation_pct": [100 / 3, 200 / 3, None],
            "ci_low_pct": [0.0, 0.0, None],
            "ci_high_pct": [100.0, 100.0, None],
            "n_groups": 3,
            "n_instances": 3,
            "not_measurable": [None, None, fr.NOT_MEASURABLE_DETERMINISTIC],
        }
    )
    acc = fr.accuracy_by_format(gen)
    # Table 3 as mitigations.mitigation_table writes it: per cell, with the Avg. margins (not printed)
    mit = pd.DataFrame(
        [
            (s, r, d, w, v)
            for s, vals in (("vote", (None, None, None)), ("routing", (100 / 3, 200 / 3, 0.0)))
            for r, v in zip(("MR1", "MR2", "MR3"), vals)
            for d, w in (("ds", "wf"), ("Avg.", "wf"), ("ds", "Avg."))
        ],
        columns=["strategy", "relation", "dataset", "workflow_id", "delta_pp"],
    )
    route = pd.DataFrame({"workflow_id": ["wf"], "dataset": ["ds"], "best_format": ["txt"]})
    c = duckdb.connect(str(tmp_path / "w.duckdb"))
    c.execute("CREATE SCHEMA format_robustness")
    for name, df in (
        ("extracted_decisions", dec),
        ("mr_violations", mrv),
        ("accuracy_by_format", acc),
        ("mitigation_table", mit),
        ("routing_choice", route),
    ):
        c.register("df", df)
        c.execute(f"CREATE TABLE format_robustness.{name} AS SELECT * FROM df")
        c.unregister("df")
    yield c
    c.close()


def test_violation_table_puts_truncation_beside_m1_and_echoed_items_beside_m2(con):
    got = report.violation_table(con)
    assert got.columns.tolist() == [
        "workflow_id",
        "dataset",
        "n_instances",
        "n_groups",
        "M1 %",
        "truncated %",
        "M2 %",
        "echoed",
        "M3 %",
    ]
    # truncated: 1 of 6 replies = 16.7 %; echoed: 1 + 2 = 3 of (2+1) + 1 + 1 + 0 + 1 + (1+2) = 9 items
    assert got.iloc[0].tolist() == [
        "wf",
        "ds",
        3,
        3,
        "33.3 [0.0, 100.0]",
        "16.7",
        "66.7 [0.0, 100.0]",
        "3 of 9",
        "not measurable: deterministic decoding",
    ]


def test_headline_says_when_its_intervals_rest_on_fewer_than_20_instances(con):
    # mr_violations on 3 instances: MR1 and MR2 have intervals, MR3 none (not measurable)
    text = report.headline(con)
    line = (
        "Unreliable intervals: the bootstrap CIs above rest on fewer than 20 instances (the resampled unit) "
        "for wf on ds: 3 instances; they are too narrow to read as bounds."
    )
    assert text.count(line) == 1
    assert text.index("| 33.3 [0.0, 100.0]") < text.index(line) < text.index("Accuracy Acc_f")
    con.execute("UPDATE format_robustness.mr_violations SET n_instances = 20")
    assert "Unreliable intervals" not in report.headline(con)


def test_a_format_whose_every_call_failed_prints_a_dash_and_why_never_nan(con):
    con.execute("ALTER TABLE format_robustness.accuracy_by_format ALTER not_measurable TYPE VARCHAR")
    con.execute(
        "UPDATE format_robustness.accuracy_by_format SET accuracy_pct = NULL, majority_baseline_pct = NULL, n = 0, "
        "n_unparseable = 0, n_call_errors = 3, not_measurable = 'not measurable: every call failed (3 of 3)' "
        "WHERE format = 'md'"
    )
    text = report.headline(con)
    row = next(line for line in text.splitlines() if line.startswith("| wf ") and "| md " in line)
    assert [c.strip() for c in row.strip("|").split("|")] == [
        "wf", "ds", "md", "–", "–", "0", "0", "3", "not measurable: every call failed (3 of 3)",
    ]  # fmt: skip
    assert "nan" not in text


def test_headline_defines_its_numbers_and_prints_the_majority_baseline(con):
    text = report.headline(con)
    assert report.LEGEND in text
    assert len(report.LEGEND.splitlines()) == 10 and max(len(line) for line in report.LEGEND.splitlines()) <= 100
    assert "M3 and voting are printed as 'not measurable'" in report.LEGEND
    for term in (
        "M1, M2, M3 = violation rates",
        "MR1",
        "MR2",
        "MR3",
        "truncated % = replies cut at max_tokens",
        "echoed = evidence items that copy the prompt's instructions",
        "majority_baseline_pct = the accuracy",
    ):
        assert term in text
    acc = con.execute(report.SECTIONS[0][1]).df()
    # txt: i1, i2 right, i3 wrong = 66.7; md: i1 right, i2 ⊥, i3 wrong = 33.3; baseline "refer" = 2 of 3
    assert acc[["format", "accuracy_pct", "majority_baseline_pct", "n", "n_unparseable"]].values.tolist() == [
        ["txt", 66.7, 66.7, 3, 0],
        ["md", 33.3, 66.7, 3, 1],
    ]
    answered = con.execute(report.SECTIONS[1][1]).df()
    assert answered[["outcome", "n"]].values.tolist() == [["refer", 5], ["⊥ (truncated)", 1]]
    # Table 3 per workflow × dataset (margins left out), ΔM in pp rounded to 0.1; routing names its
    # format; a null Δ (a vote over repeats that are one computation) reads "not measurable"
    mitigations = con.execute(report.SECTIONS[2][1]).df()
    assert mitigations.values.tolist() == [
        ["wf", "ds", "vote", "–"] + ["not measurable"] * 3,
        ["wf", "ds", "routing", "txt", "33.3", "66.7", "0.0"],
    ]
    assert "ΔM = M before − M after, in percentage points" in text
