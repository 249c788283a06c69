"""Unit tests of metamorph.studies.format_robustness.extract: every expected value is written out by hand."""

from __future__ import annotations

import json

import pytest

from metamorph.errors import ConfigError
from metamorph.studies.format_robustness.extract import (
    BOTTOM,
    MAX_EVIDENCE,
    UNPARSEABLE_REASONS,
    Extraction,
    extract_decision,
    output_instruction,
)
from metamorph.studies.format_robustness.labels import match_label

YN = ("yes", "no")
ABCD = ("A", "B", "C", "D")
CREDIT = ("default", "no default")
TRIAGE = ("refer", "do not refer")
ELIG = ("eligible", "ineligible")


def E(decision, evidence, status, reason):  # noqa: N802 - a short constructor for expectations
    return Extraction(decision, tuple(evidence), status, reason)


def U(reason):  # noqa: N802
    return Extraction(None, (), "unparseable", reason)


# ------------------------------------------------------------------------------------------
# JSON recovery


def test_clean_json_is_ok():
    text = '{"decision": "yes", "evidence": ["strong credit history", "stable employment"]}'
    assert extract_decision(text, YN) == E("yes", ["strong credit history", "stable employment"], "ok", "clean_json")


def test_clean_json_with_surrounding_whitespace_and_label_case_is_ok():
    text = '\n  {"Decision": " No Default ", "EVIDENCE": ["PAY_0: 2"]}  \n'
    assert extract_decision(text, CREDIT) == E("no default", ["PAY_0: 2"], "ok", "clean_json")


def test_fenced_json_is_repaired():
    text = 'Here you go:\n```json\n{"decision": "B", "evidence": ["fever", "pulse 90/min"]}\n```\n'
    assert extract_decision(text, ABCD) == E("B", ["fever", "pulse 90/min"], "repaired", "json_in_code_fence")


def test_json_in_prose_is_repaired():
    text = 'Based on the record, my answer is {"decision": "refer", "evidence": ["spo2_pct: 89"]} as requested.'
    assert extract_decision(text, TRIAGE) == E("refer", ["spo2_pct: 89"], "repaired", "json_in_prose")


def test_trailing_commas_are_repaired():
    text = '{"decision": "no", "evidence": ["income below threshold", "no references",],}'
    assert extract_decision(text, YN) == E(
        "no", ["income below threshold", "no references"], "repaired", "trailing_comma"
    )


def test_single_quotes_and_python_literals_are_repaired():
    text = "{'decision': 'yes', 'evidence': ['clean record'], 'confident': True, 'notes': None}"
    assert extract_decision(text, YN) == E("yes", ["clean record"], "repaired", "single_quotes+python_literals")


def test_fenced_json_with_trailing_comma_lists_both_steps():
    text = '```\n{"decision": "A", "evidence": ["43-year-old woman",]}\n```'
    assert extract_decision(text, ABCD) == E(
        "A", ["43-year-old woman"], "repaired", "json_in_code_fence+trailing_comma"
    )


def test_answer_and_label_keys_are_accepted_case_insensitively():
    assert extract_decision('{"ANSWER": "no", "Evidence_Items": ["x"]}', YN) == E("no", ["x"], "ok", "clean_json")
    assert extract_decision('{"Label": "yes"}', YN) == E("yes", [], "ok", "clean_json+no_evidence_field")


def T(decision, evidence, reason):  # noqa: N802 - a cut reply whose label is readable
    return Extraction(decision, tuple(evidence), "repaired", reason, truncated=True)


def test_truncated_reply_with_a_readable_label_keeps_it_and_is_flagged():
    text = '{"decision": "yes", "evidence": ["strong credit history"]}'
    assert extract_decision(text, YN, finish_reason="length") == T(
        "yes", ["strong credit history"], "truncated+clean_json"
    )
    cut = '{"decision": "yes", "evidence": ["strong credit history", "stable empl'
    assert extract_decision(cut, YN, finish_reason="max_tokens") == T(
        "yes", ["strong credit history"], "truncated+truncated_json_closed"
    )
    assert extract_decision("The answer is D.", ABCD, finish_reason="length") == T("D", [], "truncated+label_in_prose")
    # an ordinary stop is not truncated
    assert extract_decision(text, YN, finish_reason="stop") == E("yes", ["strong credit history"], "ok", "clean_json")


@pytest.mark.parametrize(
    "text",
    [
        '{"decision": "do not re',
        '{"evidence": ["spo2 88"], "decision": "do not',
        "",
        None,
        "Let me think about the vitals first",
    ],
)
def test_truncated_reply_without_a_readable_label_is_bottom_truncated(text):
    got = extract_decision(text, TRIAGE, finish_reason="length")
    assert got == Extraction(None, (), "unparseable", "truncated", truncated=True)
    assert got.outcome == BOTTOM


def test_truncated_invariants():
    with pytest.raises(ValueError):
        Extraction("yes", (), "ok", "clean_json", truncated=True)
    with pytest.raises(ValueError):
        Extraction(None, (), "unparseable", "truncated")


def test_cut_json_without_length_reason_is_closed_and_drops_the_fragment():
    text = '{"decision": "yes", "evidence": ["strong credit history", "stable empl'
    assert extract_decision(text, YN) == E("yes", ["strong credit history"], "repaired", "truncated_json_closed")


@pytest.mark.parametrize("text", [None, "", "   ", "\n\t\n"])
def test_empty_output(text):
    assert extract_decision(text, YN) == U("empty")


def test_evidence_is_capped_at_ten_and_the_cut_is_recorded():
    items = [f"fact {i}" for i in range(12)]
    text = json.dumps({"decision": "no", "evidence": items})
    got = extract_decision(text, YN)
    assert got == E("no", items[:10], "ok", "clean_json+evidence_capped_12_to_10")
    assert MAX_EVIDENCE == 10


def test_exactly_ten_evidence_items_are_not_capped():
    items = [f"fact {i}" for i in range(10)]
    assert extract_decision(json.dumps({"decision": "no", "evidence": items}), YN) == E("no", items, "ok", "clean_json")


def test_evidence_objects_take_a_text_field():
    text = json.dumps(
        {
            "decision": "C",
            "evidence": [
                {"quote": "temperature is 39.5°C", "source": "vitals"},
                {"Text": "blood pressure 125/90 mm Hg"},
                {"fact": "received packed red blood cells"},
                {"weird": "only string value"},
                {"n": 3},  # no text -> dropped
                "  plain string  ",
                "",  # empty -> dropped
                None,  # dropped
            ],
        }
    )
    assert extract_decision(text, ABCD) == E(
        "C",
        [
            "temperature is 39.5°C",
            "blood pressure 125/90 mm Hg",
            "received packed red blood cells",
            "only string value",
            "plain string",
        ],
        "ok",
        "clean_json",
    )


def test_evidence_string_instead_of_list_is_repaired():
    text = '{"decision": "yes", "evidence": "no criminal record"}'
    assert extract_decision(text, YN) == E("yes", ["no criminal record"], "repaired", "evidence_not_a_list")


def test_echoed_template_and_a_real_answer():
    text = (
        'Format: {"decision": "<one label from the answer space>", "evidence": []}\n{"decision": "no", "evidence": []}'
    )
    assert extract_decision(text, YN) == E("no", [], "repaired", "json_in_prose")


def test_two_json_answers_with_different_labels_are_ambiguous():
    assert extract_decision('{"decision": "yes"} or maybe {"decision": "no"}', YN) == U("ambiguous")


def test_one_object_giving_the_decision_key_twice_with_two_labels_is_ambiguous():
    """json.loads keeps the last value ("no"), _lower_keys the first spelling ("yes"): either is a guess."""
    assert extract_decision('{"decision": "yes", "decision": "no", "evidence": []}', YN) == U("ambiguous")
    assert extract_decision('{"decision": "yes", "Decision": "no"}', YN) == U("ambiguous")
    assert extract_decision('```json\n{"answer": "no", "answer": "yes"}\n```', YN) == U("ambiguous")
    # the same label twice, or a second value that is no label, asserts one label
    assert extract_decision('{"decision": "yes", "decision": "yes", "evidence": []}', YN) == E(
        "yes", [], "ok", "clean_json"
    )
    assert extract_decision('{"decision": "maybe", "decision": "no", "evidence": []}', YN) == E(
        "no", [], "ok", "clean_json"
    )


def test_an_object_repeating_a_key_that_is_no_answer_key_is_read_like_any_other_object():
    """SmolLM2 without constrained decoding echoes the record as JSON, giving one key many times:
    no answer (⊥ no_label), not a crash of the whole extraction step; an answer nested in such an
    object is still found."""
    echoed = 'The record is:\n\n```json\n{"id": 1, "religion": "Hindu", "religion": "Hindu"}\n```'
    assert extract_decision(echoed, TRIAGE) == U("no_label")
    assert extract_decision('{"id": 1, "note": "a", "note": "b"}', TRIAGE) == U("no_label")
    nested = '{"result": {"decision": "refer", "evidence": ["spo2_pct: 88"]}, "note": "a", "note": "b"}'
    assert extract_decision(nested, TRIAGE) == E("refer", ["spo2_pct: 88"], "repaired", "nested_json")


def test_json_without_decision_key_falls_back_to_prose_outside_the_json():
    text = 'Yes.\n{"evidence": ["no criminal record", "no history of rule violations"]}'
    assert extract_decision(text, YN) == E(
        "yes", ["no criminal record", "no history of rule violations"], "repaired", "label_in_prose+evidence_from_json"
    )


# ------------------------------------------------------------------------------------------
# Label matching: complete label wins, negation, ambiguity


def test_no_default_is_never_default():
    assert extract_decision('{"decision": "no default", "evidence": []}', CREDIT) == E(
        "no default", [], "ok", "clean_json"
    )
    assert extract_decision("Prediction: no default.", CREDIT) == E("no default", [], "repaired", "label_in_prose")
    assert extract_decision("The client will default next month.", CREDIT) == E(
        "default", [], "repaired", "label_in_prose"
    )


def test_negated_default_maps_to_no_default():
    assert extract_decision("The client will not default.", CREDIT) == E("no default", [], "repaired", "label_in_prose")


def test_do_not_refer_is_never_refer():
    assert extract_decision('{"decision": "Do not refer"}', TRIAGE).decision == "do not refer"
    assert extract_decision("Decision: do not refer", TRIAGE) == E("do not refer", [], "repaired", "label_in_prose")
    assert extract_decision("I recommend we don't refer this patient.", TRIAGE).decision == "do not refer"
    assert extract_decision("We shouldn't refer.", TRIAGE).decision == "do not refer"
    assert extract_decision("Refer the patient now.", TRIAGE).decision == "refer"


def test_not_eligible_without_such_label_is_negated_label():
    assert extract_decision("not eligible", ELIG) == U("negated_label")
    assert extract_decision('{"decision": "not eligible"}', ELIG) == U("negated_label")
    # the morphological negation is its own label
    assert extract_decision("The applicant is ineligible.", ELIG) == E("ineligible", [], "repaired", "label_in_prose")


def test_not_eligible_maps_to_a_not_eligible_label_when_there_is_one():
    assert extract_decision("The applicant is not eligible.", ("eligible", "not eligible")).decision == "not eligible"


def test_negated_affirmative_never_maps_to_it():
    assert extract_decision("I would not approve this.", ("approve", "deny")) == U("negated_label")
    assert extract_decision("They should never approve it.", ("approve", "deny")) == U("negated_label")


def test_no_i_would_not_approve_is_no():
    assert extract_decision("No, I would not approve the loan.", YN) == E("no", [], "repaired", "label_in_prose")


def test_yes_or_no_is_ambiguous():
    assert extract_decision("yes or no", YN) == U("ambiguous")
    assert extract_decision('{"decision": "yes/no"}', YN) == U("ambiguous")
    assert extract_decision('{"decision": ["yes", "no"]}', YN) == U("ambiguous")


def test_no_as_determiner_is_not_an_answer():
    assert extract_decision("There is no evidence of fraud, so yes.", YN) == E("yes", [], "repaired", "label_in_prose")


def test_decision_value_with_extra_words_is_repaired():
    assert extract_decision('{"decision": "Yes, approve it", "evidence": []}', YN) == E(
        "yes", [], "repaired", "label_in_value"
    )


def test_unknown_label_is_no_label():
    assert extract_decision('{"decision": "maybe", "evidence": ["x"]}', YN) == U("no_label")
    assert extract_decision("I cannot decide based on this document.", YN) == U("no_label")
    assert extract_decision('{"evidence": ["x"]}', YN) == U("no_label")


def test_json_bool_maps_to_yes_no():
    assert extract_decision('{"decision": true}', YN) == E("yes", [], "repaired", "label_in_value+no_evidence_field")
    assert extract_decision('{"decision": true}', CREDIT) == U("no_label")


def test_match_label_direct():
    assert match_label("No Default!", CREDIT) == ("no default", "exact")
    assert match_label("will not default", CREDIT) == ("no default", "label_in_value")
    assert match_label("not eligible", ELIG) == (None, "negated_label")


# ------------------------------------------------------------------------------------------
# Letter answer spaces


@pytest.mark.parametrize(
    "value", ["B", "b", "(B)", "B)", "B.", "Option B", "answer: B", "**B**", "B. Malignant hyperthermia", "[B]"]
)
def test_letter_values_in_json(value):
    got = extract_decision(json.dumps({"decision": value, "evidence": []}), ABCD)
    assert got.decision == "B"
    assert got.parse_status in ("ok", "repaired")


def test_letter_value_status():
    assert extract_decision('{"decision": "(B)", "evidence": []}', ABCD) == E("B", [], "ok", "clean_json")
    assert extract_decision('{"decision": "Option B", "evidence": []}', ABCD) == E(
        "B", [], "repaired", "label_in_value"
    )


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("(B)", "B"),
        ("**C**", "C"),
        ("The answer is D.", "D"),
        ("Answer: (C)", "C"),
        ("After weighing the findings, the correct answer is **A** because of the fever.", "A"),
        ("Reasoning about the options...\nD\n", "D"),
        ("Option A is incorrect. The answer is C", "C"),
    ],
)
def test_letters_in_prose(text, label):
    assert extract_decision(text, ABCD) == E(label, [], "repaired", "label_in_prose")


@pytest.mark.parametrize(
    "text",
    [
        "A 43-year-old man presents with fever and chills.",
        "A patient with fever most likely has an infection.",
        "The answer is a transfusion reaction.",
        "Based on the options given, I am not sure.",
    ],
)
def test_letters_are_never_taken_from_words_or_articles(text):
    assert extract_decision(text, ABCD) == U("no_label")


def test_article_a_in_json_value_is_not_answer_a():
    assert extract_decision('{"decision": "A 43-year-old man presents"}', ABCD) == U("no_label")


def test_two_letters_asserted_are_ambiguous():
    assert extract_decision("The answer is B. Final answer: C.", ABCD) == U("ambiguous")


def test_letter_outside_space_is_no_label():
    assert extract_decision('{"decision": "E"}', ABCD) == U("no_label")


def test_option_numbers():
    space = ("1", "2", "3", "4")
    assert extract_decision('{"decision": 2}', space) == E("2", [], "repaired", "label_in_value+no_evidence_field")
    assert extract_decision('{"decision": "2"}', space) == E("2", [], "ok", "clean_json+no_evidence_field")
    assert extract_decision("The answer is 3.", space).decision == "3"
    assert extract_decision("The answer is 2.5 mg.", space) == U("no_label")


# ------------------------------------------------------------------------------------------
# Invariants, ⊥, the instruction


def test_unparseable_never_carries_a_decision_or_evidence():
    with pytest.raises(ValueError):
        Extraction("yes", (), "unparseable", "ambiguous")
    with pytest.raises(ValueError):
        Extraction(None, ("x",), "unparseable", "no_label")
    with pytest.raises(ValueError):
        Extraction(None, (), "ok", "clean_json")
    with pytest.raises(ValueError):
        Extraction(None, (), "unparseable", "because")
    assert set(UNPARSEABLE_REASONS) == {"truncated", "empty", "no_label", "negated_label", "ambiguous"}


def test_outcome_is_bottom_for_unparseable():
    assert extract_decision("", YN).outcome == BOTTOM == "⊥"
    assert extract_decision('{"decision": "no"}', YN).outcome == "no"


def test_decision_is_always_canonical_spelling():
    space = ("Approve", "Deny")
    assert extract_decision('{"decision": "APPROVE"}', space).decision == "Approve"
    assert extract_decision("i would deny", space).decision == "Deny"


def test_invalid_answer_spaces_raise():
    with pytest.raises(ConfigError):
        extract_decision("yes", ("yes",))
    with pytest.raises(ConfigError):
        extract_decision("yes", ("Yes", "yes!"))
    with pytest.raises(ConfigError):
        extract_decision("yes", "yes/no")
    with pytest.raises(ConfigError):
        extract_decision("yes", ("yes", "?"))


def test_output_instruction_text():
    got = output_instruction(["yes", "no"])
    assert got == (
        'Reply with one JSON object and nothing else. The object has two keys. The value of "decision" is exactly '
        'one of these labels: "yes", "no". The value of "evidence" is a list of at most 10 strings; each string is '
        "a short quote of at most 12 words copied from the document that supports the decision."
    )
    assert "at most 3 strings" in output_instruction(ABCD, max_evidence=3)
    assert '"A", "B", "C", "D"' in output_instruction(ABCD)
    with pytest.raises(ConfigError):
        output_instruction(YN, max_evidence=0)


def test_output_instruction_holds_no_value_a_model_could_copy():
    """No placeholder (``<...>``), no example object, no ellipsis: nothing to paste into a reply."""
    for space in (YN, ABCD, CREDIT, TRIAGE):
        got = output_instruction(space)
        assert "<" not in got and ">" not in got and "{" not in got and "[" not in got and "..." not in got


def test_instruction_answer_round_trips():
    """An answer written exactly as the instruction asks parses as ok for every study space."""
    for space in (YN, ABCD, CREDIT, TRIAGE):
        for label in space:
            text = json.dumps({"decision": label, "evidence": ["a fact"]})
            assert extract_decision(text, space) == E(label, ["a fact"], "ok", "clean_json")


def test_code_fence_inside_a_json_string_does_not_cut_the_fenced_json():
    text = (
        'Here it is:\n```json\n{"decision": "B", "evidence": ["the note says ```code``` here", '
        '"a ```", "fact 2"]}\n```\nDone.'
    )
    assert extract_decision(text, ABCD) == E(
        "B", ["the note says ```code``` here", "a ```", "fact 2"], "repaired", "json_in_code_fence"
    )
    # the fence after the object still closes it: a second fenced object is found too
    two = '```\n{"decision": "refer", "evidence": ["x ```y"]}\n```\ntext\n```json\n{"decision": "do not refer"}\n```'
    assert extract_decision(two, TRIAGE) == U("ambiguous")
