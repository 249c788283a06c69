"""M2 where no reply gave evidence is not measurable: the upgrade verdicts and the report card
leave it out, as the headline M1/M2/M3 table does, instead of comparing two 0 % rates."""

from __future__ import annotations

import json

import pandas as pd

from metamorph.studies.format_robustness import metrics as fr
from metamorph.studies.format_robustness import report as fr_report
from tests.format_robustness.test_metrics_format import make_gen

#: Two instances x two formats x k = 1; "base" and "cand" answer with no evidence at all,
#: "ev" gives evidence: i1 txt {a}, md {b} (Jaccard 0 < 0.3: MR2 violated), i2 {a} in both (kept).
SPEC_EMPTY = {"i1": {"txt": [("yes", "")], "md": [("no", "")]}, "i2": {"txt": [("yes", "")], "md": [("yes", "")]}}
SPEC_EVIDENCE = {
    "i1": {"txt": [("yes", "a")], "md": [("no", "b")]},
    "i2": {"txt": [("yes", "a")], "md": [("yes", "a")]},
}
GOLD = {"i1": "yes", "i2": "yes"}


def generations():
    return pd.concat(
        [
            make_gen(SPEC_EMPTY, GOLD, wf="base/inline"),
            make_gen(SPEC_EMPTY, GOLD, wf="cand/inline"),
            make_gen(SPEC_EVIDENCE, GOLD, wf="ev/inline"),
        ],
        ignore_index=True,
    )


def test_m2_without_any_evidence_is_neither_compared_nor_carded():
    gen = generations()
    flags = fr.mr_flags(gen)
    mr = fr.mr_violations(flags).set_index(["workflow_id", "relation"])
    assert mr.loc[("base/inline", "MR2"), "not_measurable"] == "not measurable: no reply gave evidence (0 of 4 replies)"
    assert mr.loc[("ev/inline", "MR2"), "violation_pct"] == 50.0

    outcomes = gen.assign(categories_json=[json.dumps(c) for c in gen["categories"]])
    scores = fr_report.comparison_scores(outcomes, flags)
    m2 = scores[scores["metric"] == "M2"]
    assert sorted(m2["model_id"].unique()) == ["ev"]
    assert sorted(m2["value"].tolist()) == [0.0, 1.0]
    assert sorted(scores[scores["metric"] == "M1"]["model_id"].unique()) == ["base", "cand", "ev"]

    card = fr_report.card_rows(outcomes, flags)
    m2_card = card[card["metric"] == "M2"]
    assert m2_card["model_id"].tolist() == ["ev"]
    assert m2_card["value"].tolist() == [50.0]
