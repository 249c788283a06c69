"""Echoed evidence (metamorph.studies.format_robustness.echo): every value below is counted by hand."""

from __future__ import annotations

import pytest

from metamorph.studies.format_robustness import plan as fs
from metamorph.studies.format_robustness.echo import ECHO_THRESHOLD, is_echoed, overlap, split_echoed, tokens
from metamorph.studies.format_robustness.extract import Extraction, extract_decision
from metamorph.studies.format_robustness.sources import construct_dataset

TRIAGE = ("refer", "do not refer")

# 27 tokens: reply with one json object the value of evidence is a list of short quotes copied from
# the document decide refer if temperature_c is 38.5 or higher
INSTRUCTION = (
    'Reply with one JSON object. The value of "evidence" is a list of short quotes copied from the '
    "document. Decide 'refer' if temperature_c is 38.5 or higher."
)
# tokens: age 45 temperature_c 38.5 chief_complaint chest pain
RECORD = "age 45\ntemperature_c 38.5\nchief_complaint chest pain"

COPY = "a list of short quotes copied from the document"  # 9 of 9 tokens in the instruction
NEAR_COPY = "short quotes taken from the document"  # 5 of 6 ("taken" is not)
GENUINE = "chest pain for 3 days"  # 0 of 5
RULE_COPY = "temperature_c is 38.5 or higher"  # 5 of 5; record: 2 of 5
GROUNDED = "temperature_c 38.5"  # 2 of 2 in both texts


def test_tokens_are_lower_case_words_and_decimal_numbers():
    assert tokens('<Short quote> from the "document": 38.5') == ["short", "quote", "from", "the", "document", "38.5"]
    assert tokens("spo2_pct: 91, HR 120/80") == ["spo2_pct", "91", "hr", "120", "80"]
    assert tokens("— …") == []


def test_overlap_is_the_share_of_item_tokens_found_in_the_text():
    assert overlap(COPY, INSTRUCTION) == 1.0
    assert overlap(NEAR_COPY, INSTRUCTION) == 5 / 6
    assert overlap("quotes taken from the patient record", INSTRUCTION) == 3 / 6
    assert overlap(GENUINE, INSTRUCTION) == 0.0
    assert overlap(RULE_COPY, RECORD) == 2 / 5
    assert overlap("the the the document", "the") == 3 / 4  # tokens are counted with repetition
    assert overlap("...", INSTRUCTION) is None


def test_copy_and_near_copy_are_echoed_genuine_and_grounded_items_are_not():
    assert ECHO_THRESHOLD == 0.8
    assert is_echoed(COPY, INSTRUCTION, RECORD)
    assert is_echoed(NEAR_COPY, INSTRUCTION, RECORD)  # 0.833 >= 0.8
    assert is_echoed(RULE_COPY, INSTRUCTION, RECORD)  # record overlap 0.4 < 0.8
    assert is_echoed("refer", INSTRUCTION, RECORD)  # a label copied as evidence
    assert not is_echoed("quotes taken from the patient record", INSTRUCTION, RECORD)  # 0.5
    assert not is_echoed(GENUINE, INSTRUCTION, RECORD)
    assert not is_echoed(GROUNDED, INSTRUCTION, RECORD)  # quotes the record too
    assert not is_echoed("—", INSTRUCTION, RECORD)  # no token
    assert is_echoed(NEAR_COPY, INSTRUCTION, RECORD, threshold=0.8)
    assert not is_echoed(NEAR_COPY, INSTRUCTION, RECORD, threshold=0.9)
    with pytest.raises(ValueError, match="threshold"):
        is_echoed(COPY, INSTRUCTION, RECORD, threshold=0)


def test_split_keeps_input_order():
    items = [GENUINE, COPY, GROUNDED, NEAR_COPY]
    assert split_echoed(items, INSTRUCTION, RECORD) == ((GENUINE, GROUNDED), (COPY, NEAR_COPY))
    assert split_echoed([], INSTRUCTION, RECORD) == ((), ())


def test_extraction_moves_echoed_items_out_of_the_evidence():
    text = (
        '{"decision": "refer", "evidence": ["'
        + COPY
        + '", "'
        + GENUINE
        + '", "'
        + GROUNDED
        + '", "'
        + NEAR_COPY
        + '"]}'
    )
    got = extract_decision(text, TRIAGE, instruction=INSTRUCTION, record=RECORD)
    assert got == Extraction("refer", (GENUINE, GROUNDED), "ok", "clean_json", echoed=(COPY, NEAR_COPY))
    # without the instruction nothing is echoed (the caller did not ask)
    assert extract_decision(text, TRIAGE).evidence == (COPY, GENUINE, GROUNDED, NEAR_COPY)
    # a reply cut inside its last item keeps its readable label and the echo split of the complete items
    cut = extract_decision(text[: text.index(NEAR_COPY) + 5], TRIAGE, "length", instruction=INSTRUCTION, record=RECORD)
    assert (cut.decision, cut.evidence, cut.echoed, cut.truncated) == ("refer", (GENUINE, GROUNDED), (COPY,), True)


def test_extraction_counts_echoed_items_against_the_evidence_cap():
    with pytest.raises(ValueError, match="at most 10"):
        Extraction("refer", ("x",) * 6, "ok", "clean_json", echoed=("y",) * 5)
    with pytest.raises(ValueError, match="no evidence"):
        Extraction(None, (), "unparseable", "empty", echoed=("y",))


def test_the_demo_reply_that_copied_the_old_placeholder_is_all_echo():
    """The reply SmolLM2 gave on construct with the p1 prompt: both items copy instruction text
    (7 tokens of "<short quote or fact from the document>": all but "fact" are in the p2 instruction)."""
    x = construct_dataset(n=1, seed=0)[0]
    text = '{"decision": "refer", "evidence": ["<short quote or fact from the document>", "evidence: "]}'
    got = fs.extract_reply(x, text, "stop")
    assert overlap("<short quote or fact from the document>", fs.instruction_text(x)) == 6 / 7
    assert (got.decision, got.evidence, got.echoed) == (
        "refer",
        (),
        ("<short quote or fact from the document>", "evidence:"),
    )
    # the record's own field names are quotes of the record, not echoes, though the rule names them
    fields = '{"decision": "refer", "evidence": ["temperature_c", "spo2_pct", "do not refer"]}'
    got = fs.extract_reply(x, fields, "stop")
    assert (got.evidence, got.echoed) == (("temperature_c", "spo2_pct"), ("do not refer",))
