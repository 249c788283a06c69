"""Unit tests of metamorph.studies.wrapper_sensitivity.extract: every expected value is written out by hand."""

from __future__ import annotations

import pytest

from metamorph.errors import ConfigError
from metamorph.studies.wrapper_sensitivity.extract import (
    FAMILIES,
    MODES,
    PARSEABLE_REASONS,
    UNPARSEABLE_REASONS,
    QAExtraction,
    extract_answer,
)
from metamorph.studies.wrapper_sensitivity.answers import canonical_number

ABCDE = ("A", "B", "C", "D", "E")
OPT12 = ("1", "2")


def V(value, reason):  # short constructors for expectations
    return QAExtraction(value, True, reason)


def U(reason):
    return QAExtraction(None, False, reason)


def x(text, answer_type, labels=(), family=None, mode="normalized", finish_reason=None):
    return extract_answer(text, answer_type, labels, family=family, mode=mode, finish_reason=finish_reason)


#: The three reported variants (the paper's extractor, mode ``paper``, is tested in test_paper_extractor.py).
CLASSIC = ("strict", "normalized", "lenient")

SCRATCH = "The question gives two facts.\nCombining them step by step.\n"


# ------------------------------------------------------------------------------------------
# Every family x answer type with a clean answer: ok in every mode


CLEAN = [
    # (family, answer_type, labels, text, value)
    ("plain", "choice", ABCDE, "B", "B"),
    ("plain", "choice", OPT12, "2", "2"),
    ("plain", "boolean", (), "false", "false"),
    ("plain", "numeric", (), "18", "18"),
    ("plain", "numeric", (), "-3", "-3"),
    ("plain", "numeric", (), "0.5", "0.5"),
    ("json", "choice", ABCDE, '{"answer": "B"}', "B"),
    ("json", "choice", OPT12, '{"answer": "2"}', "2"),
    ("json", "choice", OPT12, '{"answer": 2}', "2"),
    ("json", "boolean", (), '{"answer": true}', "true"),
    ("json", "boolean", (), '{"answer": "false"}', "false"),
    ("json", "numeric", (), '{"answer": 18}', "18"),
    ("json", "numeric", (), '{"answer": "18"}', "18"),
    ("json", "numeric", (), '{"answer": -0.5}', "-0.5"),
    ("json", "choice", ABCDE, '{"reasoning": "C is wrong", "answer": "D"}', "D"),
    ("structured", "choice", ABCDE, "Answer: B", "B"),
    ("structured", "choice", OPT12, "Answer: 1", "1"),
    ("structured", "boolean", (), "Answer: true", "true"),
    ("structured", "numeric", (), "Answer: 18", "18"),
    ("structured", "numeric", (), "Some context first.\nAnswer: 42\n", "42"),
    ("structured_delim", "choice", ABCDE, "<answer>E</answer>", "E"),
    ("structured_delim", "choice", OPT12, "<answer>2</answer>", "2"),
    ("structured_delim", "boolean", (), "<answer>false</answer>", "false"),
    ("structured_delim", "numeric", (), "Working.\n<answer>-3</answer>", "-3"),
    ("deliberate", "choice", ABCDE, SCRATCH + "Final answer: C", "C"),
    ("deliberate", "choice", OPT12, SCRATCH + "Final answer: 1", "1"),
    ("deliberate", "boolean", (), SCRATCH + "Final answer: true", "true"),
    ("deliberate", "numeric", (), SCRATCH + "Final answer: 18\n", "18"),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("family", "answer_type", "labels", "text", "value"), CLEAN)
def test_clean_answer_is_ok_in_every_mode(family, answer_type, labels, text, value, mode):
    assert x(text, answer_type, labels, family, mode) == V(value, "ok")


def test_every_family_has_a_clean_case():
    assert {c[0] for c in CLEAN} == set(FAMILIES)
    for fam in FAMILIES:
        assert {c[1] for c in CLEAN if c[0] == fam} == {"choice", "boolean", "numeric"}


@pytest.mark.parametrize(
    ("text", "value"), [("18.0", "18"), ("18.50", "18.5"), ("007", "7"), ("-0", "0"), ("0.500", "0.5")]
)
def test_plain_numbers_are_canonicalised_even_in_strict(text, value):
    assert x(text, "numeric", family="plain", mode="strict") == V(value, "ok")


def test_surrounding_whitespace_of_the_whole_output_is_not_part_of_the_contract():
    assert x("  B\n", "choice", ABCDE, "plain", "strict") == V("B", "ok")


def test_family_none_reads_the_plain_contract():
    assert x("B", "choice", ABCDE, None, "strict") == V("B", "ok")
    assert x("Answer: B", "choice", ABCDE, None, "normalized") == U("not_a_label")


# ------------------------------------------------------------------------------------------
# Normalisation: value under normalized, unparseable under strict

NORMALIZED = [
    # (family, answer_type, labels, text, value, normalized reason, strict reason)
    ("plain", "choice", ABCDE, "**B**", "B", "normalized_markup", "not_a_label"),
    ("plain", "choice", ABCDE, "_B_", "B", "normalized_markup", "not_a_label"),
    ("plain", "choice", ABCDE, "`C`", "C", "normalized_markup", "not_a_label"),
    ("plain", "choice", ABCDE, "(B)", "B", "normalized_markup", "not_a_label"),
    ("plain", "choice", ABCDE, "[B]", "B", "normalized_markup", "not_a_label"),
    ("plain", "choice", ABCDE, "B)", "B", "normalized_markup", "not_a_label"),
    ("plain", "choice", ABCDE, "B.", "B", "normalized_markup", "not_a_label"),
    ("plain", "choice", ABCDE, "b", "B", "normalized_markup", "not_a_label"),
    ("plain", "choice", ABCDE, "Option B", "B", "normalized_markup", "not_a_label"),
    ("plain", "choice", ABCDE, "**Option (D)**.", "D", "normalized_markup", "not_a_label"),
    ("plain", "choice", ABCDE, "$\\boxed{A}$", "A", "normalized_markup", "not_a_label"),
    ("plain", "choice", ABCDE, "\\text{E}", "E", "normalized_markup", "not_a_label"),
    ("plain", "choice", ABCDE, "\uff22", "B", "normalized_markup", "not_a_label"),  # fullwidth B
    ("plain", "choice", OPT12, "(2)", "2", "normalized_markup", "not_a_label"),
    ("plain", "choice", OPT12, "Option 1", "1", "normalized_markup", "not_a_label"),
    ("plain", "numeric", (), "\\boxed{18}", "18", "normalized_markup", "not_a_number"),
    ("plain", "numeric", (), "$18$", "18", "normalized_markup", "not_a_number"),
    ("plain", "numeric", (), "\\(18\\)", "18", "normalized_markup", "not_a_number"),
    ("plain", "numeric", (), "$$\\boxed{-3}$$", "-3", "normalized_markup", "not_a_number"),
    ("plain", "numeric", (), "**18**", "18", "normalized_markup", "not_a_number"),
    ("plain", "numeric", (), "(18)", "18", "normalized_markup", "not_a_number"),
    ("plain", "numeric", (), "18.", "18", "normalized_markup", "not_a_number"),
    ("plain", "numeric", (), "**$1,234**", "1234", "normalized_markup", "not_a_number"),
    ("plain", "boolean", (), "True", "true", "normalized_markup", "not_a_boolean"),
    ("plain", "boolean", (), "FALSE", "false", "normalized_markup", "not_a_boolean"),
    ("plain", "boolean", (), "yes", "true", "normalized_yes_no", "not_a_boolean"),
    ("plain", "boolean", (), "No", "false", "normalized_yes_no", "not_a_boolean"),
    ("plain", "boolean", (), "**yes**", "true", "normalized_markup", "not_a_boolean"),
    ("plain", "boolean", (), "no.", "false", "normalized_markup", "not_a_boolean"),
    ("structured", "choice", ABCDE, "Answer: **B**", "B", "normalized_markup", "not_a_label"),
    ("structured", "choice", ABCDE, "Answer: (C).", "C", "normalized_markup", "not_a_label"),
    ("structured", "choice", ABCDE, "**Answer:** B", "B", "normalized_slot", "no_answer"),
    ("structured", "choice", ABCDE, "**Answer**: B", "B", "normalized_slot", "no_answer"),
    ("structured", "choice", ABCDE, "answer: b", "B", "normalized_slot", "no_answer"),
    ("structured", "choice", ABCDE, "Answer:\nB", "B", "normalized_slot", "not_a_label"),
    ("structured", "boolean", (), "Answer: Yes", "true", "normalized_yes_no", "not_a_boolean"),
    ("structured", "numeric", (), "Answer: $18.00", "18", "normalized_number", "not_a_number"),
    ("structured_delim", "choice", ABCDE, "<answer> (C) </answer>", "C", "normalized_markup", "not_a_label"),
    ("structured_delim", "choice", ABCDE, "<answer> C </answer>", "C", "normalized_markup", "not_a_label"),
    ("structured_delim", "choice", ABCDE, "<ANSWER>C</ANSWER>", "C", "normalized_slot", "no_answer"),
    ("structured_delim", "numeric", (), "<answer>[18]</answer>", "18", "normalized_markup", "not_a_number"),
    ("deliberate", "numeric", (), SCRATCH + "Final answer: \\boxed{18}", "18", "normalized_markup", "not_a_number"),
    ("deliberate", "numeric", (), SCRATCH + "Final answer: 18\nHope this helps.", "18", "normalized_slot", "no_answer"),
    ("deliberate", "numeric", (), SCRATCH + "**Final Answer:** 18", "18", "normalized_slot", "no_answer"),
    ("deliberate", "choice", ABCDE, SCRATCH + "Final answer: _B_", "B", "normalized_markup", "not_a_label"),
    ("deliberate", "boolean", (), SCRATCH + "Final answer: No", "false", "normalized_yes_no", "not_a_boolean"),
    ("json", "choice", ABCDE, '{"answer": "(B)"}', "B", "normalized_markup", "not_a_label"),
    ("json", "choice", ABCDE, '{"answer": "Option B"}', "B", "normalized_markup", "not_a_label"),
    ("json", "choice", ABCDE, '{"Answer": "B"}', "B", "normalized_slot", "no_answer"),
    ("json", "boolean", (), '{"answer": "yes"}', "true", "normalized_yes_no", "not_a_boolean"),
    ("json", "numeric", (), '{"answer": "$1,234"}', "1234", "normalized_number", "not_a_number"),
]


@pytest.mark.parametrize(("family", "answer_type", "labels", "text", "value", "reason", "strict_reason"), NORMALIZED)
def test_normalisation(family, answer_type, labels, text, value, reason, strict_reason):
    assert x(text, answer_type, labels, family, "strict") == U(strict_reason)
    assert x(text, answer_type, labels, family, "normalized") == V(value, reason)
    assert x(text, answer_type, labels, family, "lenient") == V(value, reason)


# ------------------------------------------------------------------------------------------
# JSON location

JSON_CASES = [
    # (text, strict, normalized)
    ('Here you go:\n```json\n{"answer": "C"}\n```', U("invalid_json"), V("C", "json_in_code_fence")),
    ('```\n{"answer": "C"}\n```', U("invalid_json"), V("C", "json_in_code_fence")),
    ('```json\n{"Answer": "c"}\n```\nThat is my answer.', U("invalid_json"), V("C", "json_in_code_fence")),
    ('My answer is {"answer": "D"} as requested.', U("invalid_json"), V("D", "json_in_prose")),
    ('{"answer": "A"}\n\nExplanation: A fits best.', U("invalid_json"), V("A", "json_in_prose")),
    ('{"answer": "B"} {"answer": "B"}', U("invalid_json"), V("B", "json_in_prose")),
    ('{"answer": "B"} then {"answer": "C"}', U("invalid_json"), U("ambiguous")),
    ('{"result": "B"}', U("no_answer"), U("no_answer")),
    ('["B"]', U("no_answer"), U("no_answer")),
    ("B", U("invalid_json"), U("no_answer")),
    ('{"answer": "B",}', U("invalid_json"), U("invalid_json")),
    ('{"answer": null}', U("not_a_label"), U("not_a_label")),
    ('{"answer": ["B", "C"]}', U("not_a_label"), U("not_a_label")),
]


@pytest.mark.parametrize(("text", "strict", "normalized"), JSON_CASES)
def test_json_location(text, strict, normalized):
    assert x(text, "choice", ABCDE, "json", "strict") == strict
    assert x(text, "choice", ABCDE, "json", "normalized") == normalized


def test_json_number_in_fence():
    text = '```json\n{"answer": 1234.50}\n```'
    assert x(text, "numeric", family="json", mode="normalized") == V("1234.5", "json_in_code_fence")


#: A code fence inside a JSON string value of a fenced reply does not cut the JSON (the shared
#: scanner, metamorph.jsonscan.fence_bodies): (text, answer_type, expected in paper / normalized /
#: lenient). strict needs the whole reply to be one object, so every one is invalid_json there.
FENCE_IN_STRING = [
    ('```json\n{"answer": "B", "why": "use ```code``` here"}\n```', "choice", V("B", "json_in_code_fence")),
    # the cut fence used to leave the prose object as the "fenced" one: C instead of B
    (
        'Sure.\n```json\n{"why": "see ```", "answer": "B"}\n```\nAlso {"answer": "C"}',
        "choice",
        V("B", "json_in_code_fence"),
    ),
    # the fence after the object closes it; the second fenced object is read too -> two answers
    ('```\n{"answer": "B", "why": "a ``` b"}\n``` and ```json\n{"answer": "C"}\n```', "choice", U("ambiguous")),
    # an escaped JSON object inside the string is not a second answer
    ('```json\n{"answer": "B", "why": "```{\\"answer\\": \\"C\\"}```"}\n```', "choice", V("B", "json_in_code_fence")),
    ('```json\n{"answer": 18, "work": "```python\\nprint(3*6)\\n```"}\n```', "numeric", V("18", "json_in_code_fence")),
    ('```json\n{"note": "``` true ```", "answer": false}\n```', "boolean", V("false", "json_in_code_fence")),
]


@pytest.mark.parametrize(("text", "answer_type", "expected"), FENCE_IN_STRING)
def test_code_fence_inside_a_json_string_does_not_cut_the_fenced_json(text, answer_type, expected):
    labels = ABCDE if answer_type == "choice" else ()
    assert x(text, answer_type, labels, "json", "strict") == U("invalid_json")
    for mode in ("paper", "normalized", "lenient"):
        assert x(text, answer_type, labels, "json", mode) == expected


def test_code_fence_inside_a_python_literal_in_a_fence():
    """Not JSON, so only lenient reads it (its Python-literal repair scans string-aware too)."""
    text = "```python\n{'answer': 'B', 'why': 'use ```code``` here'}\n```"
    for mode in ("paper", "strict", "normalized"):
        assert x(text, "choice", ABCDE, "json", mode) == U("invalid_json")
    assert x(text, "choice", ABCDE, "json", "lenient") == V("B", "lenient_json_repaired")


def test_code_fence_inside_a_json_string_of_a_cut_reply():
    """A reply cut by the token limit inside the fenced object: ``paper`` reads the answer
    written before the cut (after the in-string fence), the other modes say ``truncated``."""
    text = '```json\n{"why": "a ``` b", "answer": "C", "x'
    assert x(text, "choice", ABCDE, "json", "paper", "length") == V("C", "paper_cut_slot")
    for mode in CLASSIC:
        assert x(text, "choice", ABCDE, "json", mode, "length") == U("truncated")
    closed = '```json\n{"why": "a ``` b", "answer": "C"}\n```'
    assert x(closed, "choice", ABCDE, "json", "paper", "length") == V("C", "ok")


def test_json_boolean_value_is_not_a_number():
    assert x('{"answer": true}', "numeric", family="json", mode="lenient") == U("not_a_number")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{'answer': 'B'}", V("B", "lenient_json_repaired")),  # Python literal
        ('{"answer": "B",}', V("B", "lenient_json_repaired")),  # trailing comma
        ('{"answer": "B", "why": "cut', V("B", "lenient_answer_phrase")),  # unclosed, phrase search
        ("B", V("B", "lenient_label_line")),  # no JSON at all: a line that is just B
        ('{"answer": "B) Paris"}', V("B", "lenient_label_in_slot")),  # slot present, read inside it
        ('{"answer": "B or C"}', U("ambiguous")),
        ('{"answer": "not sure"}', U("not_a_label")),
    ],
)
def test_json_lenient(text, expected):
    assert x(text, "choice", ABCDE, "json", "lenient") == expected


# ------------------------------------------------------------------------------------------
# Numbers

NUMBERS = [
    # (text, value) under normalized, reason normalized_number; strict: not_a_number
    ("$18", "18"),
    ("\u20ac1,234.50", "1234.5"),
    ("\u00a30.50", "0.5"),
    ("18 \u20ac", "18"),
    ("1,234,567", "1234567"),
    ("\u22125", "-5"),  # unicode minus
    ("\u2212$5", "-5"),
    ("$-5", "-5"),
    ("+7", "7"),
    ("\uff11\uff18", "18"),  # fullwidth digits
    ("\uff0d\uff13", "-3"),  # fullwidth minus and digit
    ("18 dollars", "18"),
    ("18 km/h", "18"),
    ("18 miles per hour", "18"),
    ("18kg", "18"),
    ("50%", "50"),
    ("1{,}234", "1234"),
    ("1\\,234", "1234"),
    (".5", "0.5"),
]


@pytest.mark.parametrize(("text", "value"), NUMBERS)
def test_number_normalisation(text, value):
    assert x(text, "numeric", family="plain", mode="strict") == U("not_a_number")
    assert x(text, "numeric", family="plain", mode="normalized") == V(value, "normalized_number")
    assert x(f"Answer: {text}", "numeric", family="structured", mode="normalized") == V(value, "normalized_number")


@pytest.mark.parametrize(
    "text",
    [
        "18 million",
        "18 thousand",
        "5k",
        "18M",
        "1/2",
        "18 or 20",
        "x = 18",
        "1,23",
        "12B",
        "3rd",
        "18 and a half",
        "about 18",
        "1e5",
        "18?",
    ],
)
def test_not_a_number_under_normalized(text):
    assert x(text, "numeric", family="plain", mode="normalized") == U("not_a_number")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("$1,234.50", "1234.5"),
        ("18.0", "18"),
        ("\u22120.50", "-0.5"),
        ("\uff11\uff18", "18"),
        ("42 apples", "42"),
        ("-0", "0"),
        ("1000000", "1000000"),
    ],
)
def test_canonical_number(text, value):
    assert canonical_number(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1/2", "18 million", "1,23"])
def test_canonical_number_none(text):
    assert canonical_number(text) is None


# ------------------------------------------------------------------------------------------
# Lenient: the last number of a scratchpad

EGGS = "Tom has 3 bags of 6 apples: 3 * 6 = 18 apples.\nHe eats 2, so 18 - 2 = 16 apples remain."


def test_lenient_last_number_in_deliberate_scratchpad_without_final_line():
    assert x(EGGS, "numeric", family="deliberate", mode="strict") == U("no_answer")
    assert x(EGGS, "numeric", family="deliberate", mode="normalized") == U("no_answer")
    assert x(EGGS, "numeric", family="deliberate", mode="lenient") == V("16", "lenient_last_number")


def test_truncated_scratchpad_is_truncated_not_last_number():
    assert x(EGGS, "numeric", family="deliberate", mode="lenient", finish_reason="length") == U("truncated")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        # identifiers and compounds are skipped: #42, B12, v2.0, COVID-19, 2024-01-05, 1/2, x^2, x_3, 12B, 3rd
        (
            (
                "She sells 18 eggs at $2 each: 18 * 2 = $36.\nSee ticket #42, item B12, v2.0, COVID-19, "
                "2024-01-05, 1/2, x^2, x_3, room 12B, the 3rd."
            ),
            "36",
        ),
        ("The temperature drops to \u22125 degrees.", "-5"),
        ("The total is $1,234.50 in all.", "1234.5"),
        ("\u5408\u8a08\u306f\uff11\uff18\u500b\u3067\u3059\u3002", "18"),  # CJK text glued to fullwidth 18
        ("She is an 18-year-old student.", "18"),
        ("It weighs 18kg.", "18"),
        ("Half of it: \\frac{1}{2} of 30 is 15, so 15 remain. \\frac{3}{4}", "15"),
        ("The answer is 18. Check: 18 - 3 = 15.", "18"),  # an explicit phrase beats the last number
        ("So far 18 - 2", "2"),  # a subtraction, not the number -2
        ("(4 + 5) - 3", "3"),
        ("It drops to -5", "-5"),
        ("Total: 20 = -5 + 25, final -5", "-5"),
    ],
)
def test_lenient_number_search(text, value):
    got = x(text, "numeric", family="deliberate", mode="lenient")
    assert got.value == value and got.parseable


def test_lenient_phrase_reason_and_boxed():
    text = "Working: 3 * 6 = 18. So $\\boxed{18}$. Then 20 more minutes pass."
    assert x(text, "numeric", family="deliberate", mode="lenient") == V("18", "lenient_answer_phrase")
    text = "The answer is 18. On reflection the answer is 20."
    assert x(text, "numeric", family="deliberate", mode="lenient") == U("ambiguous")


def test_lenient_plain_numeric_uses_the_whole_output():
    assert x("I count 3 + 4 = 7", "numeric", family="plain", mode="normalized") == U("not_a_number")
    assert x("I count 3 + 4 = 7", "numeric", family="plain", mode="lenient") == V("7", "lenient_last_number")


def test_lenient_deliberate_without_any_number():
    assert x("I cannot tell.", "numeric", family="deliberate", mode="lenient") == U("no_answer")
    assert x("Ticket #42 for COVID-19.", "numeric", family="deliberate", mode="lenient") == U("no_answer")


# ------------------------------------------------------------------------------------------
# Letters never out of words, option numbers never out of numbers

VIGNETTE = "A 43-year-old man presents with fever and a cough."


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("family", "text", "expected"),
    [
        ("plain", VIGNETTE, U("not_a_label")),
        ("plain", "Apple", U("not_a_label")),
        ("plain", "Apples are red.", U("not_a_label")),
        ("deliberate", VIGNETTE + "\nAll five diagnoses are plausible.", U("no_answer")),
        ("structured", "Answer: A 43-year-old man", U("not_a_label")),
        ("structured_delim", "<answer>Apple</answer>", U("not_a_label")),
    ],
)
def test_no_letter_out_of_a_word(family, text, expected, mode):
    assert x(text, "choice", ABCDE, family, mode) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The answer is A.", V("A", "lenient_answer_phrase")),
        ("The answer is A because of the rash.", V("A", "lenient_answer_phrase")),
        ("The answer is a bit unclear.", U("no_answer")),
        ("Option A is incorrect; the answer is D.", V("D", "lenient_answer_phrase")),
        ("Option A is wrong.\nOption B is right.", V("B", "lenient_answer_phrase")),
        (VIGNETTE + "\nThe best answer is (C).", V("C", "lenient_answer_phrase")),
        (VIGNETTE + "\nAnswer: **E**", V("E", "lenient_answer_phrase")),
        (VIGNETTE + "\n\nC", V("C", "lenient_label_line")),
        (VIGNETTE + "\n**(C)**", V("C", "lenient_label_line")),
        ("Apple is a fruit. Final answer is B", V("B", "lenient_answer_phrase")),
        ("I think it's A because the patient is 43.", U("no_answer")),
        ("The answer is B. On reflection, the answer is C.", U("ambiguous")),
        ("The answer is B or C.", U("ambiguous")),
        ("Option C describes a different disease.", U("no_answer")),  # a verb-less mention is no answer
        ("\\boxed{D}", V("D", "lenient_answer_phrase")),
    ],
)
def test_lenient_choice_search_in_a_deliberate_scratchpad(text, expected):
    assert x(text, "choice", ABCDE, "deliberate", "lenient") == expected


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("family", "text"),
    [
        ("plain", "12"),
        ("plain", "12."),
        ("plain", "1.5"),
        ("plain", "21"),
        ("json", '{"answer": 12}'),
        ("json", '{"answer": "12"}'),
        ("structured", "Answer: 12"),
        ("structured_delim", "<answer>12</answer>"),
        ("deliberate", "It takes 12 minutes.\nFinal answer: 12"),
    ],
)
def test_no_option_number_out_of_a_larger_number(family, text, mode):
    assert x(text, "choice", OPT12, family, mode) == U("not_a_label")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The answer is 12.", U("no_answer")),
        ("The answer is 1.5", U("no_answer")),
        ("Option 1 takes 12 minutes and option 2 takes 21.\nSo the answer is 1.", V("1", "lenient_answer_phrase")),
        ("The answer is 2.", V("2", "lenient_answer_phrase")),
        ("It takes 12 minutes.\n2", V("2", "lenient_label_line")),
        ("It takes 12 minutes, or 21.", U("no_answer")),
    ],
)
def test_lenient_option_numbers(text, expected):
    assert x(text, "choice", OPT12, "deliberate", "lenient") == expected


# ------------------------------------------------------------------------------------------
# Lenient inside a present slot: the slot is searched, never the rest of the output


@pytest.mark.parametrize(
    ("family", "text", "normalized", "lenient"),
    [
        ("deliberate", SCRATCH + "Final answer: B. Paris", U("not_a_label"), V("B", "lenient_label_in_slot")),
        (
            "deliberate",
            SCRATCH + "Final answer: C, because D is wrong",
            U("not_a_label"),
            V("C", "lenient_label_in_slot"),
        ),
        ("structured_delim", "<answer>Paris (B)</answer>", U("not_a_label"), V("B", "lenient_label_in_slot")),
        ("structured", "Answer: the answer is D", U("not_a_label"), V("D", "lenient_answer_phrase")),
        ("structured", "Answer: I'm not sure\nActually the answer is B.", U("not_a_label"), U("not_a_label")),
        ("structured", "Answer: B or C", U("not_a_label"), U("ambiguous")),
        ("plain", "B. Paris", U("not_a_label"), V("B", "lenient_label_in_slot")),
        ("plain", "B\n\nParis is the capital of France.", U("not_a_label"), V("B", "lenient_label_line")),
        ("plain", "Paris (B) is the capital.", U("not_a_label"), V("B", "lenient_label_in_slot")),
        ("structured_delim", "<answer>B", U("no_answer"), V("B", "lenient_unclosed_tag")),
        ("structured_delim", "<answer>B) Paris", U("no_answer"), V("B", "lenient_unclosed_tag")),
    ],
)
def test_lenient_in_slot(family, text, normalized, lenient):
    assert x(text, "choice", ABCDE, family, "normalized") == normalized
    assert x(text, "choice", ABCDE, family, "lenient") == lenient


def test_lenient_numeric_in_slot_takes_the_slots_last_number_not_the_scratchpad():
    text = "First 3 + 4 = 7.\nFinal answer: 2 * 9 = 18 eggs\nLater note: 99"
    assert x(text, "numeric", family="deliberate", mode="normalized") == U("not_a_number")
    assert x(text, "numeric", family="deliberate", mode="lenient") == V("18", "lenient_last_number")


# ------------------------------------------------------------------------------------------
# Ambiguity


@pytest.mark.parametrize(
    ("family", "text", "answer_type", "labels", "modes"),
    [
        ("structured", "Answer: B\nAnswer: C", "choice", ABCDE, MODES),
        ("structured_delim", "<answer>B</answer> or maybe <answer>C</answer>", "choice", ABCDE, MODES),
        ("deliberate", "Final answer: 18\nWait, I made an error.\nFinal answer: 20", "numeric", (), MODES),
        (
            "json",
            '```json\n{"answer": true}\n```\n```json\n{"answer": false}\n```',
            "boolean",
            (),
            ("normalized", "lenient"),
        ),
        ("structured", "Answer: B\nanswer: C", "choice", ABCDE, ("normalized", "lenient")),
        ("plain", "Yes. No.", "boolean", (), ("lenient",)),
        ("plain", "B or C", "choice", ABCDE, ("lenient",)),
        ("plain", "B/C", "choice", ABCDE, ("lenient",)),
    ],
)
def test_two_different_committed_answers_are_ambiguous(family, text, answer_type, labels, modes):
    for mode in modes:
        assert x(text, answer_type, labels, family, mode) == U("ambiguous"), mode


def test_normalisation_can_reveal_a_conflicting_second_slot():
    text = "Answer: B\nanswer: C"
    assert x(text, "choice", ABCDE, "structured", "strict") == V("B", "ok")
    assert x(text, "choice", ABCDE, "structured", "normalized") == U("ambiguous")


@pytest.mark.parametrize(
    ("family", "text", "value", "reason"),
    [
        ("structured", "Answer: B\nAnswer: B", "B", "ok"),
        ("structured", "Answer: B\nanswer: b", "B", "normalized_slot"),
        ("structured", "Answer: not sure yet\nAnswer: B", "B", "ok"),
        ("deliberate", "Final answer: B\nChecking again.\nFinal answer: B", "B", "ok"),
    ],
)
def test_agreeing_or_unreadable_extra_slots_are_not_ambiguous(family, text, value, reason):
    assert x(text, "choice", ABCDE, family, "normalized") == V(value, reason)


# ------------------------------------------------------------------------------------------
# Empty and truncated


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("text", [None, float("nan"), "", "   ", "\n\t\n"])
def test_empty(text, family, mode):
    assert x(text, "choice", ABCDE, family, mode) == U("empty")


CLEAN_BY_FAMILY = {
    "plain": "B",
    "json": '{"answer": "B"}',
    "structured": "Answer: B",
    "structured_delim": "<answer>B</answer>",
    "deliberate": SCRATCH + "Final answer: B",
}


@pytest.mark.parametrize("mode", CLASSIC)
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("finish_reason", ["length", "LENGTH", "max_tokens", "max_output_tokens"])
def test_truncated_even_with_a_complete_answer(family, mode, finish_reason):
    assert x(CLEAN_BY_FAMILY[family], "choice", ABCDE, family, mode, finish_reason) == U("truncated")


@pytest.mark.parametrize("mode", MODES)
def test_truncated_wins_over_empty(mode):
    assert x("", "numeric", family="deliberate", mode=mode, finish_reason="length") == U("truncated")


@pytest.mark.parametrize("finish_reason", [None, "stop", "end_turn"])
def test_other_finish_reasons_read_normally(finish_reason):
    assert x("Answer: B", "choice", ABCDE, "structured", "strict", finish_reason) == V("B", "ok")


def test_truncated_deliberate_at_24_tokens():
    text = "Let me work through this. First, the patient is 43 and presents with"
    assert x(text, "choice", ABCDE, "deliberate", "lenient", "length") == U("truncated")


# ------------------------------------------------------------------------------------------
# Booleans


@pytest.mark.parametrize(
    ("text", "strict", "normalized"),
    [
        ("true", V("true", "ok"), V("true", "ok")),
        ("false", V("false", "ok"), V("false", "ok")),
        ("yes", U("not_a_boolean"), V("true", "normalized_yes_no")),
        ("no", U("not_a_boolean"), V("false", "normalized_yes_no")),
        ("Yes", U("not_a_boolean"), V("true", "normalized_yes_no")),
        ("NO", U("not_a_boolean"), V("false", "normalized_yes_no")),
        ("True", U("not_a_boolean"), V("true", "normalized_markup")),
        ("FALSE", U("not_a_boolean"), V("false", "normalized_markup")),
        ("'true'", U("not_a_boolean"), V("true", "normalized_markup")),
        ("maybe", U("not_a_boolean"), U("not_a_boolean")),
        ("1", U("not_a_boolean"), U("not_a_boolean")),
    ],
)
def test_boolean_values(text, strict, normalized):
    assert x(text, "boolean", family="plain", mode="strict") == strict
    assert x(text, "boolean", family="plain", mode="normalized") == normalized
    assert x(f"<answer>{text}</answer>", "boolean", family="structured_delim", mode="strict") == strict


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"answer": true}', V("true", "ok")),
        ('{"answer": false}', V("false", "ok")),
        ('{"answer": "True"}', V("true", "normalized_markup")),
        ('{"answer": "No"}', V("false", "normalized_yes_no")),
        ('{"answer": 1}', U("not_a_boolean")),
    ],
)
def test_boolean_json(text, expected):
    assert x(text, "boolean", family="json", mode="normalized") == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Yes, it is.", V("true", "lenient_boolean_word")),
        ("No, there is no evidence of that.", V("false", "lenient_boolean_word")),
        ("It is not true.", U("not_a_boolean")),
        ("That would be a false positive. Yes.", V("true", "lenient_boolean_word")),
        ("Yes. No.", U("ambiguous")),
        ("The answer is no because the dates differ. Yes, I am sure.", V("false", "lenient_answer_phrase")),
        ("Answer: TRUE", V("true", "lenient_answer_phrase")),
        ("I cannot say.", U("not_a_boolean")),
        ("yesterday nobody came", U("not_a_boolean")),
    ],
)
def test_boolean_lenient_plain(text, expected):
    assert x(text, "boolean", family="plain", mode="normalized").parseable is False
    assert x(text, "boolean", family="plain", mode="lenient") == expected


def test_boolean_lenient_deliberate_without_final_line():
    text = "Is the sky green? Considering the physics.\nSo, no."
    assert x(text, "boolean", family="deliberate", mode="normalized") == U("no_answer")
    assert x(text, "boolean", family="deliberate", mode="lenient") == V("false", "lenient_boolean_word")


# ------------------------------------------------------------------------------------------
# Modes are nested: what strict reads, normalized reads the same (barring a revealed conflict);
# what normalized reads, lenient reads the same.

CORPUS = (
    [(c[0], c[1], c[2], c[3]) for c in CLEAN]
    + [(c[0], c[1], c[2], c[3]) for c in NORMALIZED]
    + [("json", "choice", ABCDE, c[0]) for c in JSON_CASES]
    + [("plain", "numeric", (), t) for t, _ in NUMBERS]
    + [("deliberate", "numeric", (), EGGS), ("plain", "choice", ABCDE, VIGNETTE)]
)


@pytest.mark.parametrize(("family", "answer_type", "labels", "text"), CORPUS)
def test_modes_are_nested(family, answer_type, labels, text):
    s, n, lenient, paper = (x(text, answer_type, labels, family, m) for m in CLASSIC + ("paper",))
    if s.parseable:
        assert n == s or n == U("ambiguous")
    if n.parseable or n.reason == "ambiguous":
        assert lenient == n
        assert paper == n  # the paper's extractor reads whatever normalized reads, the same way
    for r in (s, n, lenient, paper):
        assert r.reason in (PARSEABLE_REASONS if r.parseable else UNPARSEABLE_REASONS)


# ------------------------------------------------------------------------------------------
# Result type and configuration errors


def test_extraction_invariants_and_is_correct():
    with pytest.raises(ValueError):
        QAExtraction("B", False, "ok")
    with pytest.raises(ValueError):
        QAExtraction(None, True, "ok")
    with pytest.raises(ValueError):
        QAExtraction("B", True, "ambiguous")
    with pytest.raises(ValueError):
        QAExtraction(None, False, "ok")
    assert V("18", "ok").is_correct("18")
    assert not V("18", "ok").is_correct("18.0")
    assert not U("empty").is_correct("18")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"answer_type": "letters"},
        {"answer_type": "choice", "labels": ()},
        {"answer_type": "choice", "labels": ("A",)},
        {"answer_type": "choice", "labels": ("A", "1")},
        {"answer_type": "choice", "labels": ("AB", "C")},
        {"answer_type": "choice", "labels": ("A", "a")},
        {"answer_type": "choice", "labels": "AB"},
        {"answer_type": "choice", "labels": (1, 2)},
        {"answer_type": "numeric", "family": "xml"},
        {"answer_type": "numeric", "mode": "loose"},
    ],
)
def test_config_errors(kwargs):
    args = {"text": "B", "labels": (), "family": None, "mode": "normalized", **kwargs}
    with pytest.raises(ConfigError):
        extract_answer(**args)


def test_labels_are_ignored_for_other_answer_types():
    assert x("18", "numeric", labels=("A", "B"), family="plain", mode="strict") == V("18", "ok")


# ------------------------------------------------------------------------------------------
# Lenient fault classes: LaTeX marks around a label, LaTeX number spacing after an
# answer phrase, a rejected option mentioned before the explicit answer


@pytest.mark.parametrize("family", ["plain", "deliberate"])
@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("The answer is $\\boxed{C}$.", "C"),
        ("The answer is \\(B\\).", "B"),
        ("The answer is \\[B\\]", "B"),
        ("The answer is $B$", "B"),
        ("The answer is $$ B $$.", "B"),
        ("The answer is \\textbf{D}.", "D"),
        ("The correct option is \\text{D}", "D"),
        ("Answer: \\(\\textbf{B}\\)", "B"),  # nested marks
        ("Answer: $\\mathrm{E}$ because it fits.", "E"),
    ],
)
def test_lenient_latex_marks_around_a_label(text, value, family):
    reply = text if family == "plain" else "Let me compare the options.\n" + text
    assert x(reply, "choice", ABCDE, family, "lenient") == V(value, "lenient_answer_phrase")
    assert not x(reply, "choice", ABCDE, family, "normalized").parseable


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("The answer is 9{,}500.", "9500"),
        ("The answer is 1\\,234 apples", "1234"),
        ("So the answer is $9{,}500$ dollars", "9500"),
        ("Answer: \\$1\\,234\\,567", "1234567"),
        ("The final answer is 12{,}000{,}000, I think", "12000000"),
    ],
)
def test_lenient_latex_thousands_separators_after_an_answer_phrase(text, value):
    assert x(text, "numeric", family="deliberate", mode="lenient") == V(value, "lenient_answer_phrase")
    assert x(text, "numeric", family="plain", mode="lenient") == V(value, "lenient_answer_phrase")


@pytest.mark.parametrize(
    ("family", "text", "expected"),
    [
        ("plain", "Not (A). Answer: D", V("D", "lenient_answer_phrase")),
        ("plain", "It is not A.\nThe answer is D.", V("D", "lenient_answer_phrase")),
        ("plain", "B is tempting, but the answer is C.", V("C", "lenient_answer_phrase")),
        ("plain", "(A) rather than (D)", V("A", "lenient_label_in_slot")),  # no phrase: the rejected D is skipped
        ("plain", "Not (A), but (D)", V("D", "lenient_label_in_slot")),
        ("plain", "Not (A).", U("not_a_label")),  # only a rejection: no answer
        ("deliberate", "Not (A).\nAnswer: D", V("D", "lenient_answer_phrase")),
        ("structured_delim", "<answer>not (A) but (D)</answer>", V("D", "lenient_label_in_slot")),
        # two explicit answers still disagree
        ("plain", "Not (A). Answer: D. On reflection the answer is B.", U("ambiguous")),
    ],
)
def test_lenient_a_rejected_option_before_the_answer(family, text, expected):
    assert x(text, "choice", ABCDE, family, "lenient") == expected


@pytest.mark.parametrize("mode", ["paper", "strict", "normalized", "lenient"])
def test_a_json_answer_key_given_twice_with_two_values_is_two_slots(mode):
    """json.loads would keep the last value ("B") silently; the object asserts two answers."""
    from metamorph.studies.wrapper_sensitivity.extract import QAExtraction, extract_answer

    abcd = ["A", "B", "C", "D"]
    two = extract_answer('{"answer": "A", "answer": "B"}', "choice", abcd, family="json", mode=mode)
    assert two == QAExtraction(None, False, "ambiguous")
    assert extract_answer('{"answer": 3, "answer": 5}', "numeric", family="json", mode=mode) == QAExtraction(
        None, False, "ambiguous"
    )
    same = extract_answer('{"answer": "C", "answer": "C"}', "choice", abcd, family="json", mode=mode)
    assert same == QAExtraction("C", True, "ok")
    # a second spelling is a slot of the normalized reading only (as "Answer: B" plus "answer: C")
    spelled = extract_answer('{"answer": "A", "Answer": "B"}', "choice", abcd, family="json", mode=mode)
    assert spelled == (QAExtraction("A", True, "ok") if mode == "strict" else QAExtraction(None, False, "ambiguous"))
