"""The paper's extractor (mode ``paper``, FSI paper §3.5 as the review reports it): first choice
letter, boolean map, last number, inside the wrapper's slot; truncated replies read only when the
answer is visible. Every expected value is written out by hand."""

from __future__ import annotations

import pytest

from metamorph.studies.wrapper_sensitivity.extract import (
    DEFAULT_MODE,
    MODES,
    PARSEABLE_REASONS,
    UNPARSEABLE_REASONS,
    QAExtraction,
    extract_answer,
)

ABCD = ("A", "B", "C", "D")
OPT12 = ("1", "2")


def V(value, reason):
    return QAExtraction(value, True, reason)


def U(reason):
    return QAExtraction(None, False, reason)


def paper(text, answer_type, labels=(), family="plain", finish_reason="stop"):
    return extract_answer(text, answer_type, labels, family=family, mode="paper", finish_reason=finish_reason)


def test_paper_is_the_default_mode():
    assert DEFAULT_MODE == "paper" and MODES == ("paper", "strict", "normalized", "lenient")
    assert extract_answer("D. Most multicellular organisms", "choice", ABCD) == V("D", "paper_first_label")
    for r in ("paper_first_label", "paper_boolean_word", "paper_last_number", "paper_answer_phrase", "paper_cut_slot"):
        assert r in PARSEABLE_REASONS and r not in UNPARSEABLE_REASONS


# ------------------------------------------------------------------------------------------
# Complete replies (finish_reason "stop"): the examples and their classes

CHOICE = [
    # (family, text, expected)
    ("plain", "D. Most multicellular organisms are made of many cells.", V("D", "paper_first_label")),
    ("plain", "The correct answer is B.", V("B", "paper_first_label")),
    ("plain", "B) Paris is the capital of France.", V("B", "paper_first_label")),
    ("plain", "(C) evaporation", V("C", "paper_first_label")),
    ("plain", "A 43-year-old man has a rash; the best answer is C.", V("C", "paper_first_label")),  # article A
    ("plain", "A. The sun heats the water.", V("A", "paper_first_label")),
    ("plain", "I think the answer is D.", V("D", "paper_first_label")),  # I is not a label here
    ("plain", "Option A is incorrect. C is right.", V("C", "paper_first_label")),
    ("plain", "Not (A). Answer: D", V("D", "paper_first_label")),
    ("plain", "B or C, probably B.", V("B", "paper_first_label")),  # the paper's rule: first letter
    ("plain", "The answer is $\\boxed{C}$", V("C", "paper_first_label")),
    ("plain", "\\textbf{D} is correct", V("D", "paper_first_label")),
    ("plain", "B", V("B", "ok")),  # whole value: normalized, same reason
    ("plain", "**(C)**", V("C", "normalized_markup")),
    ("plain", "Apples and bananas are fruits.", U("not_a_label")),  # no letter out of a word
    ("json", '{"answer": "B"}', V("B", "ok")),
    ("json", '{"answer": "B) Paris"}', V("B", "paper_first_label")),
    ("json", "The answer is B.", U("no_answer")),  # no object: JSON compliance failure
    ("json", "{'answer': 'B'}", U("invalid_json")),  # a Python literal is not JSON
    ("structured", "Answer: C. Respiration releases energy.", V("C", "paper_first_label")),
    ("structured", "C. Respiration releases energy.", U("no_answer")),  # no Answer: line
    ("structured_delim", "<answer>The answer is A.</answer>", V("A", "paper_first_label")),
    ("structured_delim", "<answer>B</answer> and <answer>C</answer>", U("ambiguous")),  # two slots
    ("structured_delim", "<answer>B", U("no_answer")),  # unclosed, not cut: not repaired
    ("deliberate", "A and B are wrong.\nFinal answer: D, the mitochondria", V("D", "paper_first_label")),
    ("deliberate", "B looks right. D is wrong.", U("no_answer")),  # the scratchpad is never read
]


@pytest.mark.parametrize(("family", "text", "expected"), CHOICE)
def test_choice_first_label(family, text, expected):
    assert paper(text, "choice", ABCD, family) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2. The second option, because ice floats.", V("2", "paper_first_label")),
        ("Option 1 takes 12 minutes.", V("1", "paper_first_label")),
        ("It takes 12 minutes or 1.5 hours.", U("not_a_label")),  # never 1 or 2 out of 12 / 1.5
    ],
)
def test_choice_option_numbers(text, expected):
    assert paper(text, "choice", OPT12) == expected


BOOLEAN = [
    ("plain", "True. The four seasons are caused by the tilt of the Earth.", V("true", "paper_boolean_word")),
    ("plain", "No, the passage says the river flows north.", V("false", "paper_boolean_word")),
    ("plain", "Yes it is.", V("true", "paper_boolean_word")),
    ("plain", "There is no evidence for it, so false.", V("false", "paper_boolean_word")),  # 'no evidence' modifier
    ("plain", "That is not true; the answer is false.", V("false", "paper_boolean_word")),  # negated 'true'
    ("plain", "The passage does not say.", U("not_a_boolean")),
    ("plain", "false", V("false", "ok")),
    ("plain", "Yes", V("true", "normalized_yes_no")),
    ("json", '{"answer": true}', V("true", "ok")),
    ("json", '{"answer": "True, because of the dam"}', V("true", "paper_boolean_word")),
    ("structured", "Answer: false. The text contradicts it.", V("false", "paper_boolean_word")),
    ("deliberate", "The passage mentions a dam.\nFinal answer: yes, it does", V("true", "paper_boolean_word")),
]


@pytest.mark.parametrize(("family", "text", "expected"), BOOLEAN)
def test_boolean_map(family, text, expected):
    assert paper(text, "boolean", (), family) == expected


NUMERIC = [
    ("plain", "The answer to this question is 18.", V("18", "paper_last_number")),
    ("plain", "Janet has 16 eggs and eats 3, so 13 remain.", V("13", "paper_last_number")),
    ("plain", "She makes $18 every day.", V("18", "paper_last_number")),
    ("plain", "The total is 9{,}500 dollars.", V("9500", "paper_last_number")),
    ("plain", "It costs $1,234.50 in 2024-01-05 prices.", V("1234.5", "paper_last_number")),  # the date is skipped
    ("plain", "18, because 3 x 6", V("6", "paper_last_number")),  # the paper's rule: the LAST number
    ("plain", "Half of it: \\frac{1}{2}", U("not_a_number")),  # a fraction is not a number here
    ("plain", "18", V("18", "ok")),
    ("json", '{"answer": 18}', V("18", "ok")),
    ("json", '{"answer": "18 eggs, 2 left over"}', V("2", "paper_last_number")),
    ("structured", "Answer: 72 clips\nShe sold 48 then 24.", V("72", "normalized_number")),
    ("structured", "Answer: 48 + 24 = 72", V("72", "paper_last_number")),
    ("deliberate", "48 / 2 = 24.\n48 + 24 = 72.\nFinal answer: 72", V("72", "ok")),
    ("deliberate", "48 / 2 = 24.\n48 + 24 = 72.", U("no_answer")),  # no Final answer line
]


@pytest.mark.parametrize(("family", "text", "expected"), NUMERIC)
def test_numeric_last_number(family, text, expected):
    assert paper(text, "numeric", (), family) == expected


# ------------------------------------------------------------------------------------------
# Truncated replies (finish_reason "length"): read only when the answer is visible before the cut

TRUNCATED = [
    # (family, answer_type, labels, text, expected)
    # visible
    ("plain", "choice", ABCD, "D. Most multicellular orga", V("D", "paper_first_label")),
    ("plain", "choice", ABCD, "The answer is (B) because the", V("B", "paper_first_label")),
    ("plain", "boolean", (), "True. The four seasons are", V("true", "paper_boolean_word")),
    ("plain", "boolean", (), "No, the river flows", V("false", "paper_boolean_word")),
    ("plain", "numeric", (), "The answer to this question is 18. Let me explain: 3", V("18", "paper_answer_phrase")),
    ("plain", "numeric", (), "The answer is 9{,}500 dollars and", V("9500", "paper_answer_phrase")),
    ("plain", "numeric", (), "#### 72\nExplanation: 48", V("72", "paper_answer_phrase")),
    ("plain", "numeric", (), "So \\boxed{72} is what she sold in total, which is 4", V("72", "paper_answer_phrase")),
    ("json", "choice", ABCD, '{"answer": "B", "reasoning": "Photosynthesis needs li', V("B", "paper_cut_slot")),
    ("json", "numeric", (), '{"answer": 72, "steps": "48 + 2', V("72", "paper_cut_slot")),
    ("json", "boolean", (), '{"answer": false, "why": "the pass', V("false", "paper_cut_slot")),
    ("json", "choice", ABCD, '{"answer": "C"}', V("C", "ok")),  # a closed object before the cut
    ("structured", "choice", ABCD, "Answer: C\nBecause the leaves", V("C", "ok")),
    ("structured_delim", "choice", ABCD, "<answer>B</ans", V("B", "paper_cut_slot")),
    ("deliberate", "numeric", (), "48 + 24 = 72\nFinal answer: 72\nCheck: 4", V("72", "ok")),
    # not visible
    ("plain", "choice", ABCD, "The best option here is B becau", U("truncated")),  # the clause was cut
    ("plain", "choice", ABCD, "Let me think about the", U("truncated")),
    ("plain", "boolean", (), "The passage says that the dam was", U("truncated")),
    ("plain", "numeric", (), "Janet has 16 eggs and eats 3", U("truncated")),  # the last number is not settled
    ("plain", "numeric", (), "The answer is 1", U("truncated")),  # could be 18
    ("plain", "numeric", (), "The answer is 18.", U("truncated")),  # could be 18.5
    ("json", "choice", ABCD, '{"reasoning": "Plants need light, so the ans', U("truncated")),
    ("json", "numeric", (), '{"answer": 7', U("truncated")),  # could be 72
    ("structured", "choice", ABCD, "Answer: C", U("truncated")),  # the line may go on
    ("structured_delim", "choice", ABCD, "<answer>", U("truncated")),
    ("deliberate", "numeric", (), "Step 1: 48 / 2 = 24.\nStep 2: 48 + 24 =", U("truncated")),
    ("deliberate", "choice", ABCD, "Option A is wrong because", U("truncated")),  # scratchpad never read
    ("plain", "choice", ABCD, "", U("truncated")),
]


@pytest.mark.parametrize(("family", "answer_type", "labels", "text", "expected"), TRUNCATED)
def test_truncated_reply_read_only_when_the_answer_is_visible(family, answer_type, labels, text, expected):
    assert paper(text, answer_type, labels, family, finish_reason="length") == expected
    # the three reported variants never read a cut reply
    for mode in ("strict", "normalized", "lenient"):
        assert extract_answer(text, answer_type, labels, family=family, mode=mode, finish_reason="length") == U(
            "truncated"
        )


def test_same_reply_stop_vs_length():
    text = "Janet has 16 eggs and eats 3, so 13"
    assert paper(text, "numeric") == V("13", "paper_last_number")
    assert paper(text, "numeric", finish_reason="length") == U("truncated")
