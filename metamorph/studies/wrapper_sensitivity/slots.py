"""The answer slots of the five wrapper families' output contracts, and the extraction record.

Shared by every extraction mode (:mod:`metamorph.studies.wrapper_sensitivity.extract` states the
contracts and the rules): :func:`find_slots` finds where a family's contract puts the answer
(strict or normalized), :func:`read_slots` reads their values, :class:`QAExtraction` is the
result; the slot regexes and :func:`json_slots` / :func:`tag_values` are reused by the lenient
search (:mod:`.lenient`) and the paper's extractor (:mod:`.paper`).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from metamorph.jsonscan import fence_bodies, object_spans
from metamorph.studies.wrapper_sensitivity.answers import AnswerSpec, normalized_value, strict_value
from metamorph.studies.wrapper_sensitivity.vocab import PARSEABLE_REASONS, UNPARSEABLE_REASONS

__all__ = [
    "AFTER_WINDOW",
    "FINAL_NORM_RE",
    "NEXT_LINE_RE",
    "STRUCT_NORM_RE",
    "TAG_NORM_RE",
    "QAExtraction",
    "find_slots",
    "json_slots",
    "literal_json_values",
    "parsed",
    "read_slots",
    "tag_values",
    "unparseable",
]


@dataclass(frozen=True)
class QAExtraction:
    """The answer read from one model output.

    Invariants (checked): ``parseable`` <=> ``value is not None``; the reason is one of
    :data:`PARSEABLE_REASONS` / :data:`UNPARSEABLE_REASONS` accordingly.
    """

    value: str | None
    parseable: bool
    reason: str

    def __post_init__(self) -> None:
        if self.parseable != (self.value is not None):
            raise ValueError("value must be None exactly when the answer is unparseable")
        allowed = PARSEABLE_REASONS if self.parseable else UNPARSEABLE_REASONS
        if self.reason not in allowed:
            raise ValueError(f"reason must be one of {allowed}, got {self.reason!r}")

    def is_correct(self, gold: str) -> bool:
        """``parseable and value == gold`` (gold in canonical form)."""
        return self.parseable and self.value == gold


def unparseable(reason: str) -> QAExtraction:
    """An unparseable extraction with ``reason`` (one of :data:`UNPARSEABLE_REASONS`)."""
    return QAExtraction(None, False, reason)


def parsed(value: str, reason: str) -> QAExtraction:
    """A parseable extraction of ``value`` with ``reason`` (one of :data:`PARSEABLE_REASONS`)."""
    return QAExtraction(value, True, reason)


class _Pairs(dict):
    """A JSON object as written: ``pairs`` keeps every (key, value), so a key given twice
    (``{"answer": "A", "answer": "B"}``) is two answer slots, not the last value kept silently."""

    pairs: list[tuple[Any, Any]]


def _object(pairs: list[tuple[Any, Any]]) -> dict:
    obj = _Pairs(pairs)
    obj.pairs = pairs
    return obj


def _loads(s: str) -> tuple[bool, Any]:
    try:
        return True, json.loads(s, parse_float=Decimal, object_pairs_hook=_object)
    except (ValueError, RecursionError):
        return False, None


def _answer_key(d: Any, exact: bool) -> tuple[bool, list[Any], bool]:
    """``(found, values, key_exact)`` for the ``answer`` key of a dict: every value given to it
    (one, unless the object repeats the key); not ``exact``: the first key equal to ``answer`` up
    to case and surrounding space, with its repeats in any spelling."""
    if not isinstance(d, dict):
        return False, [], False
    pairs = d.pairs if isinstance(d, _Pairs) else list(d.items())
    if "answer" in d:
        same = [v for k, v in pairs if k == "answer"] if exact else [v for k, v in pairs if _is_answer(k)]
        return True, same, True
    if exact:
        return False, [], False
    values = [v for k, v in pairs if _is_answer(k)]
    return (True, values, False) if values else (False, [], False)


def _is_answer(k: Any) -> bool:
    return isinstance(k, str) and k.strip().casefold() == "answer"


def json_slots(text: str, strict: bool) -> tuple[list[Any], str | None, str]:
    """The ``json`` family's slots: ``(answer values, where, missing_reason)``. Strict: the whole
    text is one JSON object with the key ``answer``. Otherwise the object may be in code fences
    (``where = "json_in_code_fence"``) or prose (``"json_in_prose"``), the key in any case
    (``"normalized_slot"``); ``missing_reason`` is ``invalid_json`` or ``no_answer``."""
    if strict:
        ok, obj = _loads(text.strip())
        if not ok:
            return [], None, "invalid_json"
        found, vs, _ = _answer_key(obj, exact=True)
        return (vs, None, "") if found else ([], None, "no_answer")
    failed = False
    stripped = text.strip()
    if stripped.startswith("{"):
        ok, obj = _loads(stripped)
        failed = not ok
        found, vs, exact = _answer_key(obj, exact=False)
        if found:
            return vs, (None if exact and vs == _answer_key(obj, exact=True)[1] else "normalized_slot"), ""
    for where, bodies in (("json_in_code_fence", fence_bodies(text)), ("json_in_prose", [text])):
        values = []
        for body in bodies:
            for span in object_spans(body):
                ok, obj = _loads(span)
                failed = failed or not ok
                found, vs, _ = _answer_key(obj, exact=False)
                if found:
                    values += vs
        if values:
            return values, where, ""
    return [], None, ("invalid_json" if failed else "no_answer")


def literal_json_values(text: str) -> list[Any]:
    """``answer`` values of Python-literal objects (single quotes, True/False/None); objects
    longer than 100,000 characters are skipped."""
    values = []
    for span in object_spans(text):
        if len(span) > 100_000:
            continue
        try:
            obj = ast.literal_eval(span)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        found, vs, _ = _answer_key(obj, exact=False)
        if found:
            values += vs
    return values


_STRUCT_STRICT_RE = re.compile(r"^Answer:[ \t]*(.*?)[ \t]*\r?$", re.MULTILINE)

#: The normalized ``Answer:`` line (key case, markdown, list marks); group 1 is the value.
STRUCT_NORM_RE = re.compile(r"^[ \t>#*_-]*answer[ \t*_]*[:\uff1a][ \t]*(.*?)[ \t]*\r?$", re.MULTILINE | re.IGNORECASE)

_FINAL_STRICT_RE = re.compile(r"Final answer:[ \t]*(.*?)[ \t]*")

#: The normalized ``Final answer:`` line; group 1 is the value.
FINAL_NORM_RE = re.compile(
    r"^[ \t>#*_-]*final[ \t]+answer[ \t*_]*[:\uff1a][ \t]*(.*?)[ \t]*\r?$", re.MULTILINE | re.IGNORECASE
)

_TAG_STRICT_RE = re.compile(r"<(/?)answer>")

#: An ``<answer>`` / ``</answer>`` tag in any case and spacing; group 1 is ``/`` for a closing tag.
TAG_NORM_RE = re.compile(r"<\s*(/?)\s*answer\s*>", re.IGNORECASE)

#: The next non-empty line after a bare key (group ``line``).
NEXT_LINE_RE = re.compile(r"[ \t]*\r?\n(?:[ \t]*\r?\n)*(?P<line>[^\n]*)")

#: How far after a label / boolean word the context rules look.
AFTER_WINDOW = 200


def tag_values(text: str, rx: re.Pattern[str]) -> tuple[list[str], int | None]:
    """Texts between an opening tag and the next closing tag (one linear scan), and the end of
    the last opening tag left unclosed (``None`` if every opening tag is closed)."""
    values: list[str] = []
    open_end: int | None = None
    for m in rx.finditer(text):
        if not m.group(1):
            open_end = m.end()
        elif open_end is not None:
            values.append(text[open_end : m.start()])
            open_end = None
    return values, open_end


def _line_values(text: str, rx: re.Pattern[str]) -> list[str]:
    """Values of key lines; a bare key takes the next non-empty line."""
    values = []
    for m in rx.finditer(text):
        v = m.group(1)
        if not v.strip(" \t*_`"):
            nm = NEXT_LINE_RE.match(text, m.end())
            nxt = nm.group("line").strip() if nm else ""
            if nxt and not rx.match(nxt):
                v = nxt
        values.append(v)
    return values


def find_slots(text: str, family: str, strict: bool) -> tuple[list[Any], str | None, str]:
    """``(slot values, where, missing_reason)``; ``where`` is ``None`` when the slots are the
    strict contract's, else a parseable reason code."""
    if family == "plain":
        return [text.strip()], None, ""
    if family == "json":
        return json_slots(text, strict)
    if family == "structured":
        values = (
            [m.group(1) for m in _STRUCT_STRICT_RE.finditer(text)] if strict else _line_values(text, STRUCT_NORM_RE)
        )
    elif family == "structured_delim":
        values = tag_values(text, _TAG_STRICT_RE if strict else TAG_NORM_RE)[0]
    else:  # deliberate
        if strict:
            lines = [ln.rstrip("\r") for ln in text.strip().splitlines()]
            if not _FINAL_STRICT_RE.fullmatch(lines[-1]):
                return [], None, "no_answer"
            values = [m.group(1) for m in map(_FINAL_STRICT_RE.fullmatch, lines) if m]
        else:
            values = _line_values(text, FINAL_NORM_RE)
    if not values:
        return [], None, "no_answer"
    if strict:
        return values, None, ""
    return values, (None if values == find_slots(text, family, True)[0] else "normalized_slot"), ""


def read_slots(text: str, family: str, spec: AnswerSpec, strict: bool) -> QAExtraction:
    """The ``strict`` (or, with ``strict=False``, the ``normalized``) extraction of ``text``
    under ``family``'s contract: two different slot values are ``ambiguous``; no readable slot
    gives the first slot's failure reason or the missing reason."""
    values, where, missing = find_slots(text, family, strict)
    if not values:
        return unparseable(missing)
    read = strict_value if strict else normalized_value
    results = [read(v, spec) for v in values]
    found = [(v, step) for v, step in results if v is not None]
    if len({v for v, _ in found}) > 1:
        return unparseable("ambiguous")
    if not found:
        return unparseable(results[0][1])
    value, step = found[0]
    return parsed(value, "ok" if strict else (where or step or "ok"))
