"""Decision and evidence extraction for the document-format study (paper §5.1).

The model gets the fixed output instruction of :func:`output_instruction` (identical for every
format) and should answer with one JSON object with the keys ``decision`` (one label of the answer
space) and ``evidence`` (a list of at most :data:`MAX_EVIDENCE` short quotes from the document).
The instruction describes that object in words and shows no example values: a placeholder such
as ``"<short quote>"`` is text a model copies into its answer.

Models often do not: they write prose, wrap the JSON in code fences, stop mid-object, use other
keys or quote letters inside sentences. :func:`extract_decision` recovers what can be recovered
*without guessing* and returns an :class:`Extraction` with

* ``decision`` — exactly one element of the answer space (its canonical spelling) or ``None``;
* ``evidence`` — at most :data:`MAX_EVIDENCE` evidence strings (``()`` when unparseable);
* ``echoed`` — the items of the evidence list that copy the prompt's instructions (given
  ``instruction``; rule in :mod:`metamorph.studies.format_robustness.echo`): kept apart, never in
  ``evidence``, so MR2 and the evidence categories do not see them;
* ``parse_status`` — ``ok`` (a clean JSON object whose decision value *is* a label, up to case,
  whitespace and punctuation), ``repaired`` (something had to be recovered: JSON in code fences
  or prose, lenient JSON repairs, a label found inside the decision value or in prose) or
  ``unparseable``;
* ``truncated`` — the provider cut the reply at the token limit (``finish_reason == "length"``).
  A cut reply whose label is readable keeps that label (status ``repaired``, reason starting
  ``truncated+``); scoring it ⊥ would count every long answer as an MR1 violation against a
  format whose answer happened to be shorter. A cut reply without a readable label is ⊥;
* ``reason`` — for ``ok``/``repaired`` the ``+``-joined steps that were taken, in order:
  where the JSON was (``clean_json`` for ok; ``json_in_code_fence``, ``json_in_prose``,
  ``json_in_list``, ``nested_json``), lenient repairs (``trailing_comma``, ``single_quotes``,
  ``smart_quotes``, ``python_literals``, ``unquoted_keys``, ``control_characters``,
  ``python_literal``, ``truncated_json_closed`` — a cut-off object closed, its unfinished last
  string dropped), how the label was read (``label_in_value``, ``label_in_prose``,
  ``evidence_from_json``) and evidence notes (``no_evidence_field``, ``evidence_not_a_list``,
  ``evidence_capped_12_to_10``). Evidence notes alone keep a clean answer ``ok``. For
  ``unparseable`` the reason is exactly one code of
  :data:`UNPARSEABLE_REASONS`: ``truncated`` (the provider reports ``finish_reason ==
  "length"`` and no label is readable in what was written), ``empty``, ``no_label``,
  ``negated_label`` (only negated labels, e.g. "not eligible" when "not eligible" is no label),
  ``ambiguous`` (two different labels asserted — in two objects, or as two values of the decision
  key in one object, ``{"decision": "A", "decision": "B"}``, which a JSON parser would silently
  resolve to one of them).

Label matching rules (all case/whitespace/punctuation-insensitive):

* an exact match of the whole value wins;
* otherwise labels are searched as complete token sequences and **the complete label wins**: an
  occurrence inside a longer label's occurrence is the longer label ("no default" is never
  "default", "do not refer" never "refer");
* **negations never map to the affirmative label**: a label preceded (in its clause, within four
  words) by not / n't / cannot / no / never / neither / nor / without / non / rather than /
  instead of is negated ("I would not approve", "shouldn't refer", "I don't think we should
  refer"); if the negated form is itself a label (a label that is a negation prefix plus this
  label, e.g. "do not refer" for "refer", "no default" for "default", or the reverse) it maps to
  that label, otherwise the occurrence only marks ``negated_label``. Morphological negations
  ("ineligible") are separate labels, never the negated form of "eligible";
* "no" followed by a word of the same clause is a determiner ("no evidence of fraud"), not the
  answer "no";
* with no JSON, explicit markers ("Decision: ...", "the answer is ...") are read first, then the
  whole text;
* letter / option-number answer spaces ("A".."D", "1".."5") accept, as a JSON value, "B", "(B)",
  "B)", "B.", "B. <option text>", "Option B", "answer: B", "**B**"; in prose only explicit
  patterns ("the answer is B", "Answer: (C)", "Option D", a line that is just "D"); a one-line
  output is read like a JSON value. A letter is never taken out of a word or from an article
  ("A 43-year-old man ..." is not answer A; "Option A is incorrect" is not A either). The
  option *text* ("Transfusion reaction") is not matched: the answer space holds letters only.

How an unparseable output (written ⊥) enters the study:

* **accuracy** — ⊥ counts as *incorrect* (it is in the denominator, never in the numerator);
  an unparseable output is never turned into a decision.
* **MR1** (decision invariance across formats) — ⊥ is an outcome of its own: ⊥ in one format vs
  a label in another is a violation; ⊥ vs ⊥ is not (the outcomes agree).
* **MR2** (evidence consistency) — an unparseable output has the *empty* evidence set, so its
  evidence-category set is ∅ (∅ vs a non-empty set has Jaccard 0).
* **MR3** (repeat stability) — ⊥ is a value like any label when checking that all k repeats
  agree: k ⊥ agree; ⊥ and a label do not.

:attr:`Extraction.outcome` gives the label or :data:`BOTTOM` for these comparisons.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from metamorph.errors import ConfigError
from metamorph.jsonscan import object_spans
from metamorph.studies.format_robustness.echo import split_echoed
from metamorph.studies.format_robustness.json_recovery import (
    DECISION_KEYS,
    EVIDENCE_KEYS,
    json_candidates,
    lower_keys,
    repeated_values,
)
from metamorph.studies.format_robustness.labels import (
    AnswerSpace,
    compile_space,
    match_label,
    match_value,
    option_value_or_prose,
    options_in_prose,
    search_labels,
)
from metamorph.studies.format_robustness.vocab import PARSE_STATUSES, ParseStatus

__all__ = [
    "ANSWER_INSTRUCTION",
    "BOTTOM",
    "DECISION_KEYS",
    "EVIDENCE_KEYS",
    "Extraction",
    "MAX_EVIDENCE",
    "MAX_EVIDENCE_WORDS",
    "ParseStatus",
    "UNPARSEABLE_REASONS",
    "extract_decision",
    "match_label",
    "output_instruction",
]

#: At most this many evidence items are kept; the instruction asks for at most this many
#: ("up to 10 source-grounded evidence items per decision", §5.1).
MAX_EVIDENCE = 10

#: The instruction asks for quotes of at most this many words, so that the longest reply it
#: allows fits the study's ``max_tokens`` (:data:`metamorph.studies.format_robustness.plan.DEFAULT_PARAMS`).
MAX_EVIDENCE_WORDS = 12

#: The outcome of an unparseable output in MR1/MR3 comparisons.
BOTTOM = "⊥"

#: Reasons of an ``unparseable`` extraction (exactly one of them).
UNPARSEABLE_REASONS = ("truncated", "empty", "no_label", "negated_label", "ambiguous")

#: Keys of an evidence *object* read as its text, in order of preference.
_EVIDENCE_TEXT_KEYS = (
    "text",
    "quote",
    "evidence",
    "fact",
    "item",
    "content",
    "value",
    "snippet",
    "description",
    "detail",
    "source",
)

#: Finish reasons that mean the output was cut by the token limit (providers normalise to "length").
_TRUNCATED_FINISH = frozenset({"length", "max_tokens", "max_output_tokens"})

#: The fixed output instruction; ``{labels}``, ``{max_evidence}`` and ``{max_words}`` are filled in
#: by :func:`output_instruction`. Nothing in it depends on the document format, and it holds no
#: example value a model could copy into its reply (no ``"<placeholder>"``, no sample quote).
ANSWER_INSTRUCTION = (
    'Reply with one JSON object and nothing else. The object has two keys. The value of "decision" '
    'is exactly one of these labels: {labels}. The value of "evidence" is a list of at most '
    "{max_evidence} strings; each string is a short quote of at most {max_words} words copied from the "
    "document that supports the decision."
)


def output_instruction(answer_space: Sequence[str], max_evidence: int = MAX_EVIDENCE) -> str:
    """The fixed JSON output instruction for ``answer_space`` (identical for every format).

    Labels are listed as JSON strings in the given order. Raises ``ConfigError`` for an invalid
    answer space (see :func:`extract_decision`) or ``max_evidence < 1``.
    """
    compile_space(answer_space)
    if isinstance(max_evidence, bool) or not isinstance(max_evidence, int) or max_evidence < 1:
        raise ConfigError(f"max_evidence must be an integer >= 1, got {max_evidence!r}")
    labels = ", ".join(json.dumps(str(a), ensure_ascii=False) for a in answer_space)
    return ANSWER_INSTRUCTION.format(labels=labels, max_evidence=max_evidence, max_words=MAX_EVIDENCE_WORDS)


@dataclass(frozen=True)
class Extraction:
    """The decision and evidence recovered from one model output.

    Invariants (checked): ``unparseable`` <=> ``decision is None``; an unparseable extraction has
    no evidence and nothing echoed; at most :data:`MAX_EVIDENCE` items in ``evidence`` and
    ``echoed`` together; an unparseable reason is one of :data:`UNPARSEABLE_REASONS`.
    ``echoed`` holds the items of the reply's evidence list that copy the instructions
    (:mod:`metamorph.studies.format_robustness.echo`); they are not in ``evidence``.
    """

    decision: str | None
    evidence: tuple[str, ...]
    parse_status: ParseStatus
    reason: str
    truncated: bool = False
    echoed: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.parse_status not in PARSE_STATUSES:
            raise ValueError(f"unknown parse_status {self.parse_status!r}")
        if (self.parse_status == "unparseable") != (self.decision is None):
            raise ValueError("decision must be None exactly when parse_status is 'unparseable'")
        if self.parse_status == "unparseable":
            if self.evidence or self.echoed:
                raise ValueError("an unparseable extraction carries no evidence")
            if self.reason not in UNPARSEABLE_REASONS:
                raise ValueError(f"unparseable reason must be one of {UNPARSEABLE_REASONS}, got {self.reason!r}")
        if len(self.evidence) + len(self.echoed) > MAX_EVIDENCE:
            raise ValueError(f"at most {MAX_EVIDENCE} evidence items, got {len(self.evidence) + len(self.echoed)}")
        if self.truncated and self.parse_status == "ok":
            raise ValueError("a truncated reply is never 'ok' (at best 'repaired')")
        if (self.reason == "truncated") and not self.truncated:
            raise ValueError("reason 'truncated' requires truncated=True")

    @property
    def parseable(self) -> bool:
        """True unless the output is unparseable."""
        return self.parse_status != "unparseable"

    @property
    def outcome(self) -> str:
        """The decision, or :data:`BOTTOM` (⊥) when unparseable — the value MR1/MR3 compare."""
        return self.decision if self.decision is not None else BOTTOM


def _unparseable(reason: str) -> Extraction:
    return Extraction(None, (), "unparseable", reason)


def _decision_from_value(v: Any, space: AnswerSpace) -> tuple[str | None, str]:
    if v is None:
        return None, "no_label"
    if isinstance(v, bool):
        for cand in ("yes", "true") if v else ("no", "false"):
            if cand in space.by_norm:
                return space.labels[space.by_norm[cand]], "label_in_value"
        return None, "no_label"
    if isinstance(v, (int, float)):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        lab, how = match_value(str(v), space)  # a number where the instruction asks for a string
        return lab, ("label_in_value" if lab is not None else how)
    if isinstance(v, str):
        return match_value(v, space)
    if isinstance(v, list):
        results = [_decision_from_value(x, space) for x in v]
        labels = {lab for lab, _ in results if lab is not None}
        if len(labels) == 1:
            return labels.pop(), "label_in_value"
        if len(labels) > 1:
            return None, "ambiguous"
        reasons = [r for _, r in results]
        return None, (
            "negated_label" if "negated_label" in reasons else "ambiguous" if "ambiguous" in reasons else "no_label"
        )
    if isinstance(v, dict):
        inner = lower_keys(v)
        for k in (*DECISION_KEYS, "value"):
            if k in inner:
                lab, how = _decision_from_value(inner[k], space)
                return lab, ("label_in_value" if lab is not None else how)
    return None, "no_label"


def _evidence_text(item: Any) -> str | None:
    if item is None:
        return None
    if isinstance(item, str):
        return item.strip() or None
    if isinstance(item, bool):
        return str(item).lower()
    if isinstance(item, (int, float)):
        return str(item)
    if isinstance(item, dict):
        lk = lower_keys(item)
        for k in _EVIDENCE_TEXT_KEYS:
            if isinstance(lk.get(k), (str, int, float)) and not isinstance(lk.get(k), bool):
                return _evidence_text(lk[k])
        for v in item.values():
            if isinstance(v, str) and v.strip():
                return v.strip()
        return None
    if isinstance(item, list):
        parts = [t for t in (_evidence_text(x) for x in item) if t]
        return "; ".join(parts) or None
    return None


def _evidence(d: dict, steps: list[str]) -> tuple[str, ...]:
    lk = lower_keys(d)
    raw = next((lk[k] for k in EVIDENCE_KEYS if k in lk), None)
    if raw is None:
        steps.append("no_evidence_field")
        return ()
    if isinstance(raw, (str, dict)):
        steps.append("evidence_not_a_list")
        raw = [raw]
    elif not isinstance(raw, list):
        steps.append("evidence_not_a_list")
        raw = [raw]
    items = [t for t in (_evidence_text(x) for x in raw) if t]
    if len(items) > MAX_EVIDENCE:
        steps.append(f"evidence_capped_{len(items)}_to_{MAX_EVIDENCE}")
        items = items[:MAX_EVIDENCE]
    return tuple(items)


def _from_record(d: dict, steps: list[str], space: AnswerSpace) -> Extraction:
    lk = lower_keys(d)
    key = next((k for k in DECISION_KEYS if k in lk), None)
    if key is None:
        return _unparseable("no_label")
    label, how = _decision_from_value(lk[key], space)
    if label is None:
        return _unparseable(how)
    given = {_decision_from_value(v, space)[0] for v in repeated_values(d, key)} - {None}
    if len(given) > 1:  # {"decision": "A", "decision": "B"}: two labels asserted in one object
        return _unparseable("ambiguous")
    steps = list(steps)
    if how != "exact":
        steps.append("label_in_value")
    evidence = _evidence(d, steps)
    status: ParseStatus = (
        "ok"
        if not [s for s in steps if s not in ("no_evidence_field",) and not s.startswith("evidence_capped_")]
        else "repaired"
    )
    reason = "+".join(["clean_json", *steps] if status == "ok" else steps)
    return Extraction(label, evidence, status, reason)


_MARKER_RE = re.compile(
    r"(?i)\b(?:final\s+)?(?:decision|answer|label|verdict|recommendation)\b\s*"
    r"(?:is|would\s+be|will\s+be|should\s+be|:|=|-)\s*[*_`\"']*(?P<seg>[^\n.;]{0,80})"
)


def _from_prose(text: str, space: AnswerSpace) -> Extraction:
    if space.option_ids is not None:
        stripped = text.strip()
        if "\n" in stripped:
            how, idx = options_in_prose(text, space)
        else:  # a one-line answer is read like a JSON value ("B", "(B)", "B. <option text>")
            how, idx = option_value_or_prose(stripped, space)
    else:
        idx, how = None, "no_label"
        marked = [search_labels(m.group("seg"), space) for m in _MARKER_RE.finditer(text)]
        hits = {i for h, i in marked if i is not None}
        if len(hits) == 1:
            idx, how = hits.pop(), "found"
        elif len(hits) > 1:
            how = "ambiguous"
        else:
            how, idx = search_labels(text, space)
    if idx is None:
        return _unparseable(how)
    return Extraction(space.labels[idx], (), "repaired", "label_in_prose")


def extract_decision(
    text: str | None,
    answer_space: Sequence[str],
    finish_reason: str | None = None,
    *,
    instruction: str | None = None,
    record: str = "",
) -> Extraction:
    """Recover the decision and evidence of one model output; see the module docstring.

    Args:
        text: the model's completion (``None`` for a call that returned no text).
        answer_space: the allowed labels; the returned decision is one of them, spelled as here.
        finish_reason: the provider's normalised finish reason; ``"length"`` (also
            ``max_tokens`` / ``max_output_tokens``) means the output was cut by the token limit:
            the reply is read as usual and, if a label is readable (a complete decision value;
            the unfinished last string of a cut JSON object is dropped, never completed), it is
            scored with that label, ``parse_status = "repaired"``, ``reason = "truncated+..."``
            and ``truncated = True``; with no readable label it is ``unparseable`` /
            ``truncated`` (also ``truncated = True``).
        instruction: everything the model was told besides the document
            (:func:`metamorph.studies.format_robustness.plan.instruction_text`). Given, the
            evidence items that copy it are moved from ``evidence`` to ``echoed``
            (:func:`metamorph.studies.format_robustness.echo.split_echoed`); ``None`` keeps them all.
        record: the record's field names and values
            (:func:`metamorph.studies.format_robustness.plan.record_text`): an item that quotes
            it is never echoed.

    Raises:
        ConfigError: the answer space has fewer than two labels, a non-string label, a label
            without letters or digits, or two labels equal up to case and punctuation.
    """
    space = compile_space(answer_space)
    got = _extract(text, space)
    if finish_reason is not None and str(finish_reason).strip().lower() in _TRUNCATED_FINISH:
        if got.decision is None:
            return Extraction(None, (), "unparseable", "truncated", truncated=True)
        got = Extraction(got.decision, got.evidence, "repaired", f"truncated+{got.reason}", truncated=True)
    if instruction is None or not got.evidence:
        return got
    evidence, echoed = split_echoed(got.evidence, instruction, record)
    return replace(got, evidence=evidence, echoed=echoed)


def _extract(text: str | None, space: AnswerSpace) -> Extraction:
    if text is None or not str(text).strip():
        return _unparseable("empty")
    text = str(text)
    candidates = json_candidates(text)
    with_decision = [(d, s) for d, s in candidates if any(k in lower_keys(d) for k in DECISION_KEYS)]
    if with_decision:
        results = [_from_record(d, s, space) for d, s in with_decision]
        labels = {r.decision for r in results if r.decision is not None}
        if len(labels) > 1:
            return _unparseable("ambiguous")
        for r in results:
            if r.decision is not None:
                return r
        reasons = [r.reason for r in results]
        return _unparseable(next((x for x in ("ambiguous", "negated_label") if x in reasons), reasons[-1]))
    if not candidates:
        return _from_prose(text, space)
    # JSON objects with evidence but no decision key: the decision is searched in the prose
    # *outside* them (so evidence wording is never read as a decision); their evidence is kept.
    outside = text
    for span in object_spans(text):
        outside = outside.replace(span, " ")
    got = _from_prose(outside, space)
    if got.decision is None:
        return got
    steps: list[str] = []
    evidence = _evidence(candidates[0][0], steps)
    reason = "+".join(["label_in_prose", "evidence_from_json", *steps])
    return Extraction(got.decision, evidence, "repaired", reason)
