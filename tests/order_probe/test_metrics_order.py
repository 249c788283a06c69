"""Recovery, CIs, breakdowns, error categories, S_* and the Logit, with hand-computed values."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from metamorph.studies.order_probe import metrics as om
from metamorph.studies.order_probe import semantic as sem
from metamorph.studies.order_probe.regression import recovery_logit
from metamorph.studies.order_probe.sources import OrderItem


def row(
    item_id,
    pattern="ABDC",
    correct=False,
    parse_ok=True,
    expression=None,
    language="zh_cn",
    setting="zero_shot",
    canonical="针头线脑",
    structure="Subject-Predicate",
    frequency=None,
    kept=1,
    kind="scrambled",
):
    return {
        "model_id": "m",
        "setting": setting,
        "language": language,
        "item_id": item_id,
        "pattern": pattern,
        "input_kind": kind,
        "canonical": canonical,
        "structure": structure,
        "frequency": frequency,
        "kept_adjacent": kept,
        "expression": expression,
        "parse_ok": parse_ok,
        "reason": "ok" if parse_ok else "no_candidate",
        "correct": correct,
    }


def test_cluster_bootstrap_resamples_items():
    # two items with rates 1 and 0: resampled pairs give 0, 1/2, 1 with probabilities 1/4, 1/2, 1/4
    lo, hi, note = om.cluster_bootstrap_ci([1, 0], [1, 1])
    assert (lo, hi, note) == (0.0, 1.0, None)
    assert om.cluster_bootstrap_ci([0, 0, 0], [23, 20, 23]) == (0.0, 0.0, om.NOTE_EQUAL)
    assert om.cluster_bootstrap_ci([5], [23]) == (None, None, om.NOTE_SINGLE)
    with pytest.raises(ValueError, match="k_i <= n_i"):
        om.cluster_bootstrap_ci([3], [2])
    # the interval is over items, not inputs: 10 items each 1/2 recovered -> every resample gives 1/2
    assert om.cluster_bootstrap_ci([1] * 10, [2] * 10)[:2] == (0.5, 0.5)


def test_recovery_rates_exact():
    rows = [
        row("a", "ABDC", True, expression="针头线脑"),
        row("a", "DCBA", False, expression="线针头脑"),
        row("b", "ABDC", False, parse_ok=False),
        row("b", "ABCD", True, kind="unperturbed", kept=3),
        row("c", "ABDC", False, expression="一二三四", language="ko"),
    ]
    df = om.recovery_rates(pd.DataFrame(rows))
    zh = df[df.language == "zh_cn"].iloc[0]
    assert (zh.n_items, zh.n_inputs, zh.n_correct) == (2, 3, 1)
    assert zh.recovery_pct == pytest.approx(100 / 3) and zh.parse_failure_pct == pytest.approx(100 / 3)
    assert zh.unperturbed_recovery_pct == 100.0
    pooled = df[df.language == "all"].iloc[0]
    assert (pooled.n_items, pooled.n_inputs, pooled.n_correct, pooled.recovery_pct) == (3, 4, 1, 25.0)


def test_breakdowns_and_frequency_bins():
    rows = [
        row(i, p, c, frequency=f, kept=k)
        for i, p, c, f, k in [
            ("a", "ABDC", True, 30.0, 1),
            ("a", "DCBA", False, 30.0, 0),
            ("b", "ABDC", False, 20.0, 1),
            ("c", "ABDC", False, 10.0, 1),
            ("d", "ABDC", True, None, 1),
        ]
    ]
    scored = pd.DataFrame(rows)
    assert om.frequency_bins(scored).tolist() == ["high", "high", "mid", "low", "unknown"]
    df = om.recovery_breakdown(scored)
    zh = df[df.language == "zh_cn"].set_index(["dimension", "level"])
    assert zh.loc[("pattern", "ABDC"), "recovery_pct"] == 50.0 and zh.loc[("pattern", "DCBA"), "recovery_pct"] == 0.0
    assert zh.loc[("kept_adjacent", "1"), "n_inputs"] == 4 and zh.loc[("kept_adjacent", "0"), "n_inputs"] == 1
    assert zh.loc[("frequency_bin", "high"), "recovery_pct"] == 50.0
    assert zh.loc[("frequency_bin", "unknown"), "recovery_pct"] == 100.0


def test_error_categories_rules():
    lex = {"一鸣惊人"}
    c = "针头线脑"
    assert om.categorize("针头线脑", c, True, lex) == "exact"
    assert om.categorize(None, c, False, lex) == "malformed"
    assert om.categorize("线脑针头", c, True, lex) == "literal_recombination"
    assert om.categorize("针头线团", c, True, lex) == "related_non_canonical"
    assert om.categorize("一鸣惊人", c, True, lex) == "valid_unrelated"
    assert om.categorize("一鸣惊头", c, True, lex) == "other"  # shares one unit, not in the lexicon
    df = om.error_categories(pd.DataFrame([row("a", correct=True, expression=c), row("b", parse_ok=False)]), lex)
    got = df[df.language == "zh_cn"].set_index("category")["pct"].to_dict()
    assert got == {
        "exact": 50.0,
        "malformed": 50.0,
        "literal_recombination": 0.0,
        "related_non_canonical": 0.0,
        "valid_unrelated": 0.0,
        "other": 0.0,
    }


def test_content_fbeta_rouge_and_verbosity_by_hand():
    # pred {多,余,事} (的 is a function character); ref {做,多,余,事,情}: P = 1, R = 3/5
    assert sem.content_fbeta("多余的事", "做了多余的事情", "zh_cn") == pytest.approx(5 * 0.6 / (4 + 0.6))
    assert sem.content_fbeta("", "做了多余的事情", "zh_cn") == 0.0
    # ko: word tokens, punctuation stripped: {두, 가지} of 3 ref words {두, 가지, 이익}: P = 2/3, R = 2/3
    assert sem.content_fbeta("두 가지, 손해", "두 가지 이익", "ko") == pytest.approx(2 / 3)
    # LCS of [多,余,的,事] in [做,了,多,余,的,事,情] is 4 -> precision 1, no penalty (4 <= 7)
    assert sem.s_info("多余的事", ["做了多余的事情"], "zh_cn") == (1.0, 1.0, 1.0)
    # a 14-token explanation against a 7-token reference: penalty exp(1 - 14/7) = e^-1
    long = "做了多余的事情" * 2
    info, p, vp = sem.s_info(long, ["做了多余的事情"], "zh_cn")
    assert (p, vp) == (0.5, pytest.approx(math.exp(-1))) and info == pytest.approx(0.5 * math.exp(-1))
    assert sem.verbosity_penalty(3, 7) == 1.0


def test_cross_encoder_logit_goes_through_one_sigmoid_and_nli_direction():
    seen = []
    scorers = sem.Scorers(
        cross_encoder=lambda pairs: [0.0 for _ in pairs],
        nli=lambda premise, hyp: seen.append((premise, hyp)) or 0.25,
        names={"cross_encoder": "ce", "nli": "nli"},
    )
    out = sem.score_explanation("做了多余的事情", ["做了多余的事情", "别的"], "zh_cn", scorers)
    # weights 0.5 (ce) and 0.2 (F-beta) renormalized: (0.5·sigmoid(0) + 0.2·1) / 0.7
    assert out["s_acc"] == pytest.approx((0.5 * 0.5 + 0.2) / 0.7)
    assert out["s_logic"] == 0.25 and seen == [("做了多余的事情", "做了多余的事情"), ("做了多余的事情", "别的")]
    plain = sem.score_explanation("多余的事", ["做了多余的事情"], "zh_cn", sem.Scorers())
    assert (
        plain["s_acc"] == pytest.approx(3 / 4.6)
        and plain["s_logic"] is None
        and "no local NLI" in plain["s_logic_note"]
    )


def test_s_cons_mdr_mda_s_struct_s_rob_by_hand():
    # item 1: max 1, E = (0 + .5 + .5)/3, R = .5 -> (2/3)(1/2); item 2: constant -> 1
    assert sem.s_cons({"a": [1.0, 0.5, 0.5], "b": [0.8, 0.8]}) == pytest.approx((1 / 3 + 1) / 2)
    scr = pd.DataFrame(
        {
            "item_id": ["a", "a", "b", "b", "c"],
            "pattern": ["P1", "P2", "P1", "P2", "P1"],
            "s_acc": [0.4, 0.8, 0.5, 0.0, 0.3],
        }
    )
    # drops: a: .5, 0; b: 0, 1; c excluded (S_orig = 0). d_P1 = .25, d_P2 = .5
    mdr, mda, excluded = sem.mdr_mda({"a": 0.8, "b": 0.5, "c": 0.0}, scr)
    assert (mdr, mda, excluded) == (pytest.approx(0.375), pytest.approx(0.5), 1)
    # per-structure means .3 and .6: sigma .15 / mean .45 = 1/3
    st = sem.s_struct(pd.Series([0.2, 0.4, 0.6]), pd.Series(["S1", "S1", "S2"]))
    assert st == pytest.approx(2 / 3)
    assert sem.s_struct(pd.Series([0.2, 0.4]), pd.Series(["S1", "S1"])) is None
    seq = 1 - (0.5 * 0.375 + 0.5 * 0.5)
    assert sem.harmonic(seq, st) == pytest.approx(2 * seq * (2 / 3) / (seq + 2 / 3))
    assert sem.harmonic(1.2, 0.5) == pytest.approx(2 * 1 * 0.5 / 1.5)  # S_seq above 1 is clipped
    assert sem.harmonic(None, 0.5) is None and sem.harmonic(0.0, 0.0) == 0.0


def test_diagnostics_use_the_unperturbed_reply_as_s_orig():
    items = [
        OrderItem("a", "zh_cn", "针头线脑", ("做了多余的事情",), "Subject-Predicate", None, "t"),
        OrderItem("j", "ja", "一石二鳥", (), "Parallel (Coordinate)", None, "t"),
    ]
    scored = pd.DataFrame(
        [
            {
                "model_id": "m",
                "setting": "cot",
                "language": "zh_cn",
                "item_id": "a",
                "pattern": "ABCD",
                "explanation": "做了多余的事情",
                "reason": "ok",
            },
            {
                "model_id": "m",
                "setting": "cot",
                "language": "zh_cn",
                "item_id": "a",
                "pattern": "ABDC",
                "explanation": "多余的事",
                "reason": "ok",
            },
            {
                "model_id": "m",
                "setting": "cot",
                "language": "ja",
                "item_id": "j",
                "pattern": "ABDC",
                "explanation": "x",
                "reason": "ok",
            },
        ]
    )
    s = sem.semantic_scores(scored, items, sem.Scorers())
    assert s["s_acc"].tolist()[:2] == [1.0, pytest.approx(3 / 4.6)] and pd.isna(s["s_acc"].iloc[2])
    assert s["note"].iloc[2] == "no reference meanings"
    d = sem.diagnostics(s).set_index("language")
    drop = 1 - 3 / 4.6
    assert d.loc["zh_cn", "mdr"] == pytest.approx(drop) and d.loc["zh_cn", "mda"] == pytest.approx(drop)
    assert d.loc["zh_cn", "s_seq"] == pytest.approx(1 - drop) and d.loc["zh_cn", "s_cons"] == 1.0
    assert pd.isna(d.loc["ja", "s_acc_mean"]) and "no reference meanings" in d.loc["ja", "note"]
    assert pd.isna(d.loc["zh_cn", "s_logic"]) and "no local NLI model" in d.loc["zh_cn", "note"]
    assert "degenerate" not in d.loc["zh_cn", "note"]
    # only the scrambled replies count: all 0 is flagged even though the unperturbed reply scores 1
    zero = sem.diagnostics(s.assign(s_acc=s["s_acc"].where(s["pattern"] == "ABCD", 0.0))).set_index("language")
    assert "every S_Acc < 0.05" in zero.loc["zh_cn", "note"]
    flat = sem.diagnostics(s.assign(s_acc=0.01)).set_index("language")
    assert "every S_Acc < 0.05: S_Cons (near 1) and S_struct" in flat.loc["zh_cn", "note"]


def test_logit_coefficient_is_the_log_odds_ratio():
    rows = [row(f"z{i}", correct=i < 2, language="zh_cn") for i in range(4)] + [
        row(f"k{i}", correct=i < 1, language="ko") for i in range(4)
    ]
    df = recovery_logit(pd.DataFrame(rows)).set_index("term")
    # zh_cn odds 2/2 = 1 -> intercept 0; ko odds 1/3 -> coefficient log(1/3)
    assert df.loc["Intercept", "coef"] == pytest.approx(0.0, abs=1e-6)
    assert df.loc["C(language, Treatment('zh_cn'))[T.ko]", "coef"] == pytest.approx(math.log(1 / 3), abs=1e-6)
    assert "log_frequency dropped" in df["note"].iloc[0] and "structure dropped" in df["note"].iloc[0]
    none = recovery_logit(pd.DataFrame([row("a"), row("b", language="ko")]))
    assert none["term"].isna().all() and "no variation" in none["note"].iloc[0]


def test_configured_model_that_is_not_installed_is_an_error_not_a_zero(tmp_path):
    with pytest.raises(ValueError, match="could not be loaded locally"):
        sem.load_scorers(nli_model_path=str(tmp_path / "no-such-model"))
    with pytest.raises(ValueError, match="needs bertscore_num_layers"):
        sem.load_scorers(bertscore_model_path=str(tmp_path / "bert"))
    assert sem.load_scorers().describe().startswith("S_Acc: fbeta(beta=2")


# ------------------------------------------------------------------------------------------
# Call errors (the provider failed, no reply) are not replies: left out of every n


def failed(item_id, pattern="ABDC", language="zh_cn", kind="scrambled", kept=1, setting="zero_shot"):
    """A scored row of a call that failed at the provider (score_generations' shape)."""
    return {
        **row(item_id, pattern, False, parse_ok=False, language=language, kind=kind, kept=kept, setting=setting),
        "reason": "call_error",
    }


def test_recovery_rates_leave_call_errors_out_of_numerator_and_denominator():
    rows = [
        row("a", "ABDC", True, expression="针头线脑"),
        row("a", "DCBA", False, parse_ok=False),
        failed("a", "BADC"),
        failed("b", "ABDC"),
        row("b", "ABCD", True, kind="unperturbed", kept=3),
        failed("a", "ABCD", kind="unperturbed", kept=3),
        # ko: every call failed
        failed("k", "ABDC", language="ko"),
        failed("k", "DCBA", language="ko"),
        failed("k", "ABCD", language="ko", kind="unperturbed", kept=3),
    ]
    df = om.recovery_rates(pd.DataFrame(rows)).set_index("language")
    zh = df.loc["zh_cn"]
    # 2 replies of 1 item (b's only scrambled call failed): 1 of 2 recovered, 1 of 2 unparseable
    assert (zh.n_items, zh.n_inputs, zh.n_correct, zh.recovery_pct) == (1, 2, 1, 50.0)
    assert (zh.parse_failure_pct, zh.unperturbed_recovery_pct) == (50.0, 100.0)
    assert (zh.n_call_errors, zh.not_measurable) == (3, None)
    ko = df.loc["ko"]
    assert (ko.n_items, ko.n_inputs, ko.n_correct, ko.n_call_errors) == (0, 0, 0, 3)
    assert pd.isna(ko.recovery_pct) and pd.isna(ko.parse_failure_pct) and pd.isna(ko.unperturbed_recovery_pct)
    assert ko.not_measurable == "not measurable: every call failed (3 of 3)"
    pooled = df.loc["all"]
    assert (pooled.n_inputs, pooled.n_correct, pooled.recovery_pct, pooled.n_call_errors) == (2, 1, 50.0, 6)
    assert pooled.not_measurable is None


def test_breakdown_cell_of_failed_calls_is_not_measurable():
    rows = [row("a", "ABDC", True, expression="针头线脑"), failed("a", "DCBA", kept=0), failed("b", "ABDC")]
    df = om.recovery_breakdown(pd.DataFrame(rows))
    zh = df[df.language == "zh_cn"].set_index(["dimension", "level"])
    dcba = zh.loc[("pattern", "DCBA")]
    assert (dcba.n_inputs, dcba.n_call_errors, dcba.not_measurable) == (
        0,
        1,
        "not measurable: every call failed (1 of 1)",
    )
    assert pd.isna(dcba.recovery_pct)
    abdc = zh.loc[("pattern", "ABDC")]
    assert (abdc.n_inputs, abdc.recovery_pct, abdc.n_call_errors, abdc.not_measurable) == (1, 100.0, 1, None)


def test_error_categories_put_a_call_error_in_no_category():
    c = "针头线脑"
    rows = [row("a", correct=True, expression=c), row("b", parse_ok=False), failed("c"), failed("d")]
    rows += [failed("k", language="ko"), failed("k", "DCBA", language="ko")]
    df = om.error_categories(pd.DataFrame(rows), set())
    zh = df[df.language == "zh_cn"].set_index("category")
    assert zh["n"].to_dict() == {
        "exact": 1,
        "malformed": 1,
        "literal_recombination": 0,
        "related_non_canonical": 0,
        "valid_unrelated": 0,
        "other": 0,
    }
    assert zh.loc["exact", "pct"] == 50.0 and zh.loc["malformed", "pct"] == 50.0
    assert set(zh["n_call_errors"]) == {2} and zh["not_measurable"].isna().all()
    ko = df[df.language == "ko"]
    assert ko["n"].sum() == 0 and ko["pct"].isna().all() and set(ko["n_call_errors"]) == {2}
    assert set(ko["not_measurable"]) == {"not measurable: every call failed (2 of 2)"}


def test_logit_leaves_call_errors_out_and_says_when_every_call_failed():
    rows = [row(f"z{i}", correct=i < 2, language="zh_cn") for i in range(4)] + [
        row(f"k{i}", correct=i < 1, language="ko") for i in range(4)
    ]
    rows += [failed("z9"), failed("k9", language="ko")]
    df = recovery_logit(pd.DataFrame(rows)).set_index("term")
    assert df.loc["C(language, Treatment('zh_cn'))[T.ko]", "coef"] == pytest.approx(math.log(1 / 3), abs=1e-6)
    assert set(df["n_obs"]) == {8} and set(df["n_call_errors"]) == {2} and df["not_measurable"].isna().all()
    none = recovery_logit(pd.DataFrame([failed("a"), failed("b", language="ko")]))
    assert none[["term", "n_obs", "n_call_errors"]].values.tolist() == [[None, 0, 2]]
    assert none["not_measurable"].tolist() == ["not measurable: every call failed (2 of 2)"]


def test_diagnostics_count_call_errors_apart_from_unparsed_replies():
    items = [OrderItem("a", "zh_cn", "针头线脑", ("做了多余的事情",), "Subject-Predicate", None, "t")]
    base = {"model_id": "m", "language": "zh_cn", "item_id": "a"}
    scored = pd.DataFrame(
        [
            {**base, "setting": "cot", "pattern": "ABCD", "explanation": "做了多余的事情", "reason": "ok"},
            {**base, "setting": "cot", "pattern": "ABDC", "explanation": "多余的事", "reason": "ok"},
            {**base, "setting": "cot", "pattern": "DCBA", "explanation": None, "reason": "call_error"},
            {**base, "setting": "zero_shot", "pattern": "ABDC", "explanation": None, "reason": "call_error"},
            {**base, "setting": "zero_shot", "pattern": "DCBA", "explanation": None, "reason": "call_error"},
            {**base, "setting": "few_shot", "pattern": "ABDC", "explanation": None, "reason": "no_candidate"},
            {**base, "setting": "few_shot", "pattern": "DCBA", "explanation": None, "reason": "call_error"},
        ]
    )
    s = sem.semantic_scores(scored, items, sem.Scorers())
    assert s["note"].tolist() == [None, None, sem.CALL_ERROR_NOTE, sem.CALL_ERROR_NOTE, sem.CALL_ERROR_NOTE] + [
        sem.NO_EXPLANATION_NOTE,
        sem.CALL_ERROR_NOTE,
    ]
    d = sem.diagnostics(s)
    d = d[d.language == "zh_cn"].set_index("setting")
    assert (d.loc["cot", "s_acc_mean"], d.loc["cot", "n_call_errors"]) == (pytest.approx(3 / 4.6), 1)
    assert d.loc["cot", "not_measurable"] is None
    assert pd.isna(d.loc["zero_shot", "s_acc_mean"]) and d.loc["zero_shot", "n_call_errors"] == 2
    assert d.loc["zero_shot", "not_measurable"] == "not measurable: every call failed (2 of 2)"
    assert pd.isna(d.loc["few_shot", "s_acc_mean"]) and d.loc["few_shot", "n_call_errors"] == 1
    assert d.loc["few_shot", "not_measurable"] == "not measurable: no reply parsed (1 of 1 unparseable)"
