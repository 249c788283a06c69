"""The lenient search of the wrapper study's extraction: answer phrases and explicit markers
anywhere in a reply, used when the normalized mode reads nothing (see
:mod:`metamorph.studies.wrapper_sensitivity.extract` for the modes).
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

from metamorph.studies.wrapper_sensitivity.answers import (
    FRAC_RE,
    MARKS,
    NUM_TOKEN_RE,
    AnswerSpec,
    latex_number_cleanup,
    normalized_value,
    prep_text,
    signed_number,
)
from metamorph.studies.wrapper_sensitivity.slots import (
    AFTER_WINDOW,
    TAG_NORM_RE,
    QAExtraction,
    find_slots,
    literal_json_values,
    parsed,
    tag_values,
    unparseable,
)

__all__ = [
    "BOOL_WORD_RE",
    "BOXED_RE",
    "NEGATED_BEFORE",
    "is_modifier",
    "label_at",
    "lenient_extract",
    "number_of",
    "slot_text",
    "unwrap_math",
]

_PHRASE_RE = re.compile(
    r"(?i:\b(?:the\s+)?(?:(?:correct|final|best|right|most\s+likely)\s+)?"
    r"(?P<kw>answer|option|choice)\b)"
    + MARKS
    + r"(?P<verb>(?i:is|would\s+be|will\s+be|should\s+be)\b|[:=\uff1a]|[-\u2013](?=\s))?"
    r"[ \t*_`\"':]*"
    r"(?=(?P<tail>[^\n]{0,200}))"
)

#: An explicit ``\\boxed{...}`` answer marker (group ``body``; one level of nested braces).
BOXED_RE = re.compile(r"\\boxed\s*\{(?P<body>[^{}]*(?:\{[^{}]*\}[^{}]*)*)\}")

_LEAD_LABEL_RE = re.compile(
    MARKS + r"(?:(?i:option|choice)[ \t]*)?(?P<open>[(\[])?[ \t*_`]*"
    r"(?P<id>[A-Za-z]|[0-9]{1,2})[*_`]*(?(open)[ \t]*[)\]][*_`]*)"
)

_PAREN_LABEL_RE = re.compile(r"(?<!\w)[(\[][ \t]*(?P<id>[A-Za-z]|[0-9]{1,2})[ \t]*[)\]]")

_ARTICLE_OK_AFTER = re.compile(
    r"\s*(?:$|[.,;:!?)\]*_`\"'\n]|(?:because|since|as|given|due|which|with|is|was|would|seems|looks)\b)", re.IGNORECASE
)

_NEGATIVE_AFTER = re.compile(
    r"[\s)\]*_`]*(?:is|was|would\s+be|seems)?\s*(?:not|incorrect|wrong|false|unlikely|eliminated|ruled\s+out)\b",
    re.IGNORECASE,
)

_BOOL_LEAD_RE = re.compile(r"[ \t*_`\"'(\[]*(?P<w>true|false|yes|no)(?![\w'\u2019-])", re.IGNORECASE)

#: A boolean word standing alone (not inside a word or a contraction); group ``w``.
BOOL_WORD_RE = re.compile(r"(?<![\w'\u2019-])(?P<w>true|false|yes|no)(?![\w'\u2019-])", re.IGNORECASE)

#: A negation right before a word (``not``, ``n't``): searched at the end of the preceding text.
NEGATED_BEFORE = re.compile(r"(?:\bnot|n['\u2019]t)[ \t]*$", re.IGNORECASE)

#: A boolean word followed by one of these is still an answer ("no, because", "yes it is").
_MODIFIER_OK_NEXT = re.compile(
    r"[ \t]+(?:because|since|as|so|but|it|this|that|i|we|they|he|she|and|or|then|therefore|for|given)\b", re.IGNORECASE
)

_MODIFIER_NEXT = re.compile(r"[ \t]+[a-z]")

_LIST_MARK_RE = re.compile(r"^[>#\-\u2022\s]+")

#: LaTeX math / text marks around one short token (no whitespace inside): ``$B$``, ``$$B$$``,
#: ``\(B\)``, ``\[B\]``, ``\textbf{D}``, ``\text{D}``, ``\mathrm{D}``, ``$9{,}500$``. ``\boxed`` is
#: kept: it is an explicit answer marker of its own (:data:`BOXED_RE`).
_MATH_MARK_RES = (
    re.compile(r"\$\$[ \t]*([^$\s]{1,40}?)[ \t]*\$\$"),
    re.compile(r"\$[ \t]*([^$\s]{1,40}?)[ \t]*\$"),
    re.compile(r"\\\([ \t]*(\S{1,40}?)[ \t]*\\\)"),
    re.compile(r"\\\[[ \t]*(\S{1,40}?)[ \t]*\\\]"),
    re.compile(r"\\(?:text|textbf|textrm|textit|mathrm|mathbf|mathit|emph)[ \t]*\{[ \t]*([^{}\s]{1,40})[ \t]*\}"),
)

#: A label mention the text itself rejects before it: ``Not (A)``, ``isn't B``, ``rather than C``.
_REJECTED_BEFORE = re.compile(
    r"(?:\bnot|n['\u2019]t|\bnever|\brather[ \t]+than|\binstead[ \t]+of|\bexcept)[ \t]*(?:(?i:option|choice)[ \t]*)?"
    r"[(\[*_`\"']*[ \t]*$",
    re.IGNORECASE,
)


def unwrap_math(scope: str) -> str:
    """``scope`` with LaTeX math / text marks around short tokens removed (repeatedly, so
    ``\\(\\textbf{B}\\)`` is ``B``) and LaTeX number spacing undone (``9{,}500`` -> ``9,500``,
    ``1\\,234`` -> ``1234``). Each pass shortens the text, so this is at most linear passes of
    linear regexes; in practice one or two."""
    prev = None
    s = latex_number_cleanup(scope)
    while s != prev:
        prev = s
        for rx in _MATH_MARK_RES:
            s = rx.sub(r"\1", s)
    return s


def label_at(text: str, m: re.Match[str], spec: AnswerSpec, bracketed: bool) -> str | None:
    """The label of an id match, unless it is part of a word/number, an article or negated."""
    oid, after = m.group("id"), text[m.end() : m.end() + AFTER_WINDOW]
    if oid.isdigit():
        if re.match(r"[0-9]|[.,][0-9]", after):
            return None
    else:
        if re.match(r"[\w'\u2019-]", after):
            return None
        if not bracketed and (oid.islower() or oid in ("A", "I")) and not _ARTICLE_OK_AFTER.match(after):
            return None
    if _NEGATIVE_AFTER.match(after):
        return None
    if _REJECTED_BEFORE.search(text[max(0, m.start("id") - 40) : m.start("id")]):
        return None
    return spec.by_key.get(oid.casefold())


_ALTERNATIVE_RE = re.compile(r"[ \t]*(?:/|&|,|(?i:or|and)\b)[ \t]*")

#: After a verb-less "Option B" only these may follow for it to count as the answer.
_BARE_OK_AFTER = re.compile(r"[*_`\"')\]]*[ \t]*(?:$|[.,;:!?\n]|(?i:is|was|would|because|since|as)\b)")


def _lead_labels(tail: str, spec: AnswerSpec, bare: bool = False) -> list[str]:
    """The label at the start of ``tail`` (``[]`` if none); an alternative listed right after it
    ("B or C", "B/C", "B and C") is returned too, so two different labels are ambiguous."""
    m = _LEAD_LABEL_RE.match(tail)
    if not m:
        return []
    label = label_at(tail, m, spec, bracketed=bool(m.group("open")))
    if label is None:
        return []
    after = tail[m.end() :]
    alt = _ALTERNATIVE_RE.match(after)
    if alt:
        m2 = _LEAD_LABEL_RE.match(after, alt.end())
        if m2:
            other = label_at(after, m2, spec, bracketed=bool(m2.group("open")))
            if other is not None:
                return [label, other]
    if bare and not _BARE_OK_AFTER.match(after):
        return []
    return [label]


def is_modifier(text: str, end: int) -> bool:
    """Whether the boolean word ending at ``end`` modifies a following word (``no evidence``,
    ``false positive``) rather than answering (``no, because``, ``yes it is``)."""
    after = text[end : end + AFTER_WINDOW]
    return bool(_MODIFIER_NEXT.match(after)) and not _MODIFIER_OK_NEXT.match(after)


def _lead_boolean(tail: str) -> str | None:
    m = _BOOL_LEAD_RE.match(tail)
    if not m:
        return None
    w = m.group("w").casefold()
    if w != "yes" and is_modifier(tail, m.end()):
        return None
    return "true" if w in ("true", "yes") else "false"


_BINARY_MINUS_BEFORE = re.compile(r"[0-9)\]}%][ \t]*$")


def number_of(m: re.Match[str]) -> str | None:
    """The canonical number of a :data:`NUM_TOKEN_RE` match; a ``-`` after a digit or a closing
    bracket is a subtraction, not a sign (``18 - 2`` is 2)."""
    neg = "-" in (m.group("s1"), m.group("s2"))
    if m.group("s1") and _BINARY_MINUS_BEFORE.search(m.string[max(0, m.start() - 8) : m.start()]):
        neg = m.group("s2") == "-"  # "18 - 2": a subtraction, the number is 2
    return signed_number(neg, m.group("num"))


def _lead_number(tail: str) -> str | None:
    t = tail.lstrip(" \t*_`\"'([{$\\")
    m = NUM_TOKEN_RE.match(t)
    return number_of(m) if m else None


def _phrase_values(scope: str, spec: AnswerSpec) -> list[str]:
    found = []
    for m in BOXED_RE.finditer(scope):
        v, _ = normalized_value(m.group("body"), spec)
        if v is not None:
            found.append(v)
    for m in _PHRASE_RE.finditer(scope):
        if spec.kind != "choice" and (m.group("kw").casefold() != "answer" or not m.group("verb")):
            continue  # a number or boolean needs "answer is / answer:" before it
        tail = m.group("tail")
        if spec.kind == "choice":
            found += _lead_labels(tail, spec, bare=not m.group("verb"))
            continue
        if spec.kind == "boolean":
            v = _lead_boolean(tail)
        else:
            v = _lead_number(tail)
        if v is not None:
            found.append(v)
    return found


def _search(scope: str, spec: AnswerSpec, in_slot: bool) -> list[tuple[str, str]]:
    """Lenient hits ``(value, reason)`` in ``scope``, in order of preference."""
    scope = unwrap_math(prep_text(scope))
    hits = [(v, "lenient_answer_phrase") for v in _phrase_values(scope, spec)]
    if spec.kind == "choice":
        if hits:  # an explicit answer wins over labels merely mentioned ("Not (A). Answer: D")
            return hits
        for line in scope.splitlines():
            s = _LIST_MARK_RE.sub("", line).strip()
            if s and len(s) <= 30:
                v, _ = normalized_value(s, spec)
                if v is not None:
                    hits.append((v, "lenient_label_line"))
        if in_slot:
            hits += [(v, "lenient_label_in_slot") for v in _lead_labels(scope, spec)]
            for m in _PAREN_LABEL_RE.finditer(scope):
                v = label_at(scope, m, spec, bracketed=True)
                if v is not None:
                    hits.append((v, "lenient_label_in_slot"))
        return hits
    if hits:
        return hits
    if spec.kind == "boolean":
        for m in BOOL_WORD_RE.finditer(scope):
            w = m.group("w").casefold()
            if NEGATED_BEFORE.search(scope[max(0, m.start() - 16) : m.start()]):
                continue
            if w != "yes" and is_modifier(scope, m.end()):
                continue
            hits.append(("true" if w in ("true", "yes") else "false", "lenient_boolean_word"))
        return hits
    cleaned = FRAC_RE.sub(" ", latex_number_cleanup(scope))
    numbers = [v for v in map(number_of, NUM_TOKEN_RE.finditer(cleaned)) if v is not None]
    return [(numbers[-1], "lenient_last_number")] if numbers else []


def _decide(hits: list[tuple[str, str]], reason: str | None = None) -> QAExtraction | None:
    if not hits:
        return None
    if len({v for v, _ in hits}) > 1:
        return unparseable("ambiguous")
    return parsed(hits[0][0], reason or hits[0][1])


def slot_text(v: Any) -> str:
    """A slot value as text: strings as they are, JSON values (numbers, booleans, objects) in
    JSON spelling."""
    if isinstance(v, str):
        return v
    if isinstance(v, Decimal):
        return str(v)
    try:
        return json.dumps(v, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(v)


def _search_slots(values: list[Any], spec: AnswerSpec, reason: str | None = None) -> QAExtraction | None:
    hits: list[tuple[str, str]] = []
    for v in values:
        hits += _search(slot_text(v), spec, in_slot=True)
    return _decide(hits, reason)


def lenient_extract(text: str, family: str, spec: AnswerSpec, normalized: QAExtraction) -> QAExtraction:
    """Mode ``lenient`` after the ``normalized`` extraction ``normalized`` read nothing: a slot
    that is present is searched inside only; a missing slot lets the whole reply be searched
    (a Python-literal object for ``json``, an unclosed tag for ``structured_delim``). Returns
    ``normalized`` when the search finds nothing (rules: :mod:`.extract`)."""
    values, _, _ = find_slots(text, family, strict=False)
    if values:  # a committed slot whose value did not normalise: search only inside it
        return _search_slots(values, spec) or normalized
    if family == "json":
        repaired = literal_json_values(text)
        if repaired:
            results = [normalized_value(v, spec) for v in repaired]
            found = {v for v, _ in results if v is not None}
            if len(found) > 1:
                return unparseable("ambiguous")
            if found:
                return parsed(found.pop(), "lenient_json_repaired")
            return _search_slots(repaired, spec) or unparseable(results[0][1])
    if family == "structured_delim":
        open_end = tag_values(text, TAG_NORM_RE)[1]
        if open_end is not None:
            rest = text[open_end:]
            v, _ = normalized_value(rest, spec)
            if v is not None:
                return parsed(v, "lenient_unclosed_tag")
            got = _search_slots([rest], spec, reason="lenient_unclosed_tag")
            if got is not None:
                return got
    return _decide(_search(text, spec, in_slot=False)) or normalized
