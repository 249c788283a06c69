"""Task-aware answer extraction for the prompt-wrapper study (issue #3; FSI paper §3.5).

Every item has an ``answer_type``:

* ``choice`` — the answer is one of the item's labels: letters (``"A"`` .. ``"E"``) or option
  numbers (``"1"``, ``"2"`` for WinoGrande / PIQA);
* ``boolean`` — ``"true"`` or ``"false"``;
* ``numeric`` — a canonical decimal string: no sign for positives, no exponent, no thousands
  separators, no trailing zeros (``"18"``, ``"0.5"``, ``"-3"``; see :func:`canonical_number`).

Gold answers are in the same canonical form, so ``correct = parseable and value == gold``
(:meth:`QAExtraction.is_correct`).

The five prompt-wrapper families and the slot each one's output contract defines:

* ``plain`` — just the answer: the slot is the whole output (surrounding whitespace aside);
* ``json`` — a JSON object ``{"answer": <value>}`` (other keys allowed): the slot is its
  ``answer`` value (a JSON string, number or boolean);
* ``structured`` — a line ``Answer: <value>``: the slot is the rest of that line (other lines
  allowed);
* ``structured_delim`` — ``<answer>`` *value* ``</answer>``: the slot is the text between the tags;
* ``deliberate`` — scratchpad reasoning, then a final line ``Final answer: <value>``: the slot is
  the rest of that line. The scratchpad is never read in ``strict`` or ``normalized`` mode.

``family=None`` reads the output under the ``plain`` contract.

The three modes (paper §3.5) differ only in how much of the contract they require:

* ``strict`` — the family's contract exactly: the whole output must parse as one JSON object
  with the key ``answer``; the ``Answer:`` / ``Final answer:`` key is spelled exactly so at the start of its
  line, and for ``deliberate`` that line is the last non-empty line; the tags are exactly
  ``<answer>`` / ``</answer>``. The committed value is exactly a label (as given), ``true`` /
  ``false`` (or a JSON boolean), or a plain ASCII number ``-?[0-9]+(\\.[0-9]+)?`` (or a JSON
  number). A plain number is still canonicalised: ``"18.0"`` is ``"18"`` in every mode.
* ``normalized`` — the same contract after normalisation. The slot: key case and markdown
  (``answer: B``, ``**Answer:** B``), a value on the line after a bare key, tag case and spacing
  (``<ANSWER>``, ``< answer >``), a ``Final answer:`` line that is not the last line, JSON in
  code fences or surrounded by prose, JSON key case. The value (repeatedly, in any order):
  Unicode NFKC (fullwidth ``１８`` -> ``18``), case, surrounding whitespace, markdown emphasis
  (``**B**``, ``_B_``, `` `B` ``), LaTeX (``\\boxed{18}``, ``\\text{B}``, ``$18$``, ``\\(18\\)``),
  one level of parentheses / brackets / braces / quotes (``(B)``, ``[B]``), a lone closing
  parenthesis (``B)``), an ``Option`` / ``Choice`` prefix (``Option B``), trailing punctuation
  ``. , ; : !``; for booleans ``yes`` / ``no`` -> ``true`` / ``false``; for numbers a currency
  symbol ($, €, £, ¥; before or after), thousands separators (``1,234``, LaTeX ``1{,}234``,
  ``1\\,234``), Unicode minus (``−5``), a leading ``+``, a trailing unit of up to four words or
  ``%`` (``18 dollars``, ``18 km/h``, ``18kg``, ``50%`` -> ``50``; scale words such as
  *thousand* / *million* / *k* / *half* are not units, so ``18 million`` is not ``18``).
  The option *text* is never matched: the extractor gets the labels only, so ``B. Paris`` (which
  might contradict option B's text) is not a normalisation; it is read in ``lenient`` mode.
* ``lenient`` — ``normalized`` first; when the contract's slot is **missing**, the whole output
  is searched: a committed label in explicit patterns (``the answer is C``, ``Answer: (C)``,
  ``Option C``, ``\\boxed{C}``, a line that is just ``C`` / ``**C**`` / ``(C)``), a boolean in the
  same patterns or else a boolean word (``yes`` / ``no`` / ``true`` / ``false`` that is neither
  negated — ``not true`` — nor a modifier — ``no evidence``, ``false positive``), a number in
  the same patterns or else the LAST number of the text. A Python-literal object
  (``{'answer': 'B'}``) counts as the JSON slot; an unclosed ``<answer>`` tag counts as the delim
  slot (its rest of text). When the slot is **present** but its value does not normalise, only
  the slot is searched (the same patterns, plus a label at the start of the slot — ``B. Paris``,
  ``C) because ...`` — or a parenthesised label in it — ``Paris (B)``); a committed but
  unreadable slot is never overridden by the scratchpad. The ``plain`` slot is the whole output,
  so lenient ``plain`` searches the whole output with these slot rules.

Rules common to every mode:

* **An unparseable answer never becomes a value**: ``value is None`` exactly when
  ``parseable`` is false, and it then counts as incorrect (in the denominator, never in the
  numerator).
* ``finish_reason == "length"`` (also ``max_tokens`` / ``max_output_tokens``) is ``truncated``
  in every mode, before anything is read — **even when a complete ``Final answer:`` line came
  before the cut**: the output is incomplete (the review notes max_tokens=24 cuts the deliberate
  wrapper), so it is reported, never guessed. Empty or ``None`` text is ``empty``.
* Two different committed answers (two slots, two explicit patterns, two boolean words) are
  ``ambiguous``; a wider mode never resolves an ambiguity. Parseability is monotone
  (strict ⊆ normalized ⊆ lenient) except that normalisation can reveal a second, conflicting slot
  (``Answer: B`` plus ``answer: C`` is ``ok`` in strict and ``ambiguous`` in normalized).
  Several slots with the same value, or with one readable value and unreadable others, are fine.
* A letter is never taken out of a word (``Apple``), and ``A`` / ``I`` / a lower-case letter
  not in brackets only counts when nothing word-like follows (``A 43-year-old man`` is not A;
  ``the answer is A.`` / ``A because ...`` are). A label followed by *is incorrect* / *not* /
  *wrong* is not asserted (``Option A is incorrect``); a verb-less mention only counts when the
  label ends the clause or *is* / *because* follows (``Option C describes ...`` is no answer,
  ``Option C.`` / ``Option C is correct`` are). ``B or C`` / ``B/C`` / ``B and C`` is
  ``ambiguous``. Numbers and booleans need ``answer is`` / ``answer:`` before them. An option
  number is never taken out of a larger number or a decimal (``12`` is neither ``1`` nor ``2``;
  ``1.5`` is not ``1``).
* Numbers in free text (lenient search) are never read out of an identifier or a compound:
  a number glued to a letter, ``_``, ``#``, ``@`` or ``^`` (``A1``, ``x_2``, ``#12``, ``12B``,
  ``COVID-19``, ``v2.0``, ``x^2``, ordinals ``3rd``) or joined to another number by ``/ : - .``
  (fractions, ratios, times, dates, ranges, versions: ``1/2``, ``3:4``, ``2024-01-05``,
  ``3-5``, ``1.2.3``) is skipped; LaTeX ``\\frac{..}{..}`` is skipped. Glued units are numbers
  (``18kg``, ``18%``, ``18-year-old``). Only ASCII letters and digits count as glue, so CJK text
  around a number does not hide it (``合計は１８個`` reads 18). A ``-`` after a digit or a closing
  bracket is a subtraction, not a sign (``18 - 2`` ends in 2, not -2).
* Fractions are not numbers here (gold is a decimal string): ``1/2`` and ``\\frac{1}{2}`` are
  ``not_a_number`` in every mode.
* A slot value longer than 1000 characters is never normalised (no label or number is that long);
  every search is linear in the output length.

Labels given with a non-choice ``answer_type`` are ignored.

Reason codes (exactly one per extraction; :data:`PARSEABLE_REASONS`, :data:`UNPARSEABLE_REASONS`).
Parseable, where the slot was found winning over how the value was normalised:

* ``ok`` — the strict contract holds (returned by every mode for such an output);
* ``json_in_code_fence`` / ``json_in_prose`` — the JSON object was inside ``` fences / prose;
* ``normalized_slot`` — the slot itself needed normalisation (key/tag case or markdown, value on
  the next line, ``Final answer:`` not on the last line, JSON key case);
* ``normalized_markup`` — the value needed case / whitespace / markdown / LaTeX / bracket /
  ``Option`` / punctuation normalisation;
* ``normalized_number`` — currency, separators, Unicode minus or digits, ``+``, a unit;
* ``normalized_yes_no`` — ``yes`` / ``no`` read as ``true`` / ``false``;
* ``lenient_json_repaired`` — the JSON slot came from a Python-literal object;
* ``lenient_unclosed_tag`` — the delim slot came from an unclosed ``<answer>`` tag;
* ``lenient_answer_phrase`` — an explicit pattern (``the answer is``, ``Answer:``, ``Option``,
  ``\\boxed{}``);
* ``lenient_label_line`` — a line that is just a label;
* ``lenient_label_in_slot`` — a label at the start of / in brackets inside the slot;
* ``lenient_boolean_word`` — the one boolean word of the text;
* ``lenient_last_number`` — the last number of the text (or of the slot).

Unparseable: ``truncated``, ``empty``, ``no_answer`` (no slot), ``invalid_json`` (json family:
no JSON object parses), ``not_a_label`` / ``not_a_boolean`` / ``not_a_number`` (a slot whose
value cannot be read in this mode), ``ambiguous``. When the lenient search finds nothing, the
``normalized`` reason is kept.
"""

from __future__ import annotations

import ast
import json
import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

from metamorph.jsonscan import object_spans
from metamorph.errors import ConfigError

__all__ = [
    "ANSWER_TYPES",
    "FAMILIES",
    "MODES",
    "PARSEABLE_REASONS",
    "UNPARSEABLE_REASONS",
    "AnswerType",
    "Family",
    "Mode",
    "QAExtraction",
    "canonical_number",
    "extract_answer",
]

AnswerType = Literal["choice", "boolean", "numeric"]
Mode = Literal["strict", "normalized", "lenient"]
Family = Literal["plain", "json", "structured", "structured_delim", "deliberate"]

ANSWER_TYPES: tuple[str, ...] = ("choice", "boolean", "numeric")
FAMILIES: tuple[str, ...] = ("plain", "json", "structured", "structured_delim", "deliberate")
MODES: tuple[str, ...] = ("strict", "normalized", "lenient")

#: Reasons of a parseable extraction.
PARSEABLE_REASONS: tuple[str, ...] = (
    "ok", "json_in_code_fence", "json_in_prose", "normalized_slot", "normalized_markup",
    "normalized_number", "normalized_yes_no", "lenient_json_repaired", "lenient_unclosed_tag",
    "lenient_answer_phrase", "lenient_label_line", "lenient_label_in_slot", "lenient_boolean_word",
    "lenient_last_number",
)
#: Reasons of an unparseable extraction.
UNPARSEABLE_REASONS: tuple[str, ...] = (
    "truncated", "empty", "no_answer", "invalid_json", "not_a_label", "not_a_boolean",
    "not_a_number", "ambiguous",
)

#: Finish reasons that mean the output was cut by the token limit.
_TRUNCATED_FINISH = frozenset({"length", "max_tokens", "max_output_tokens"})


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


def _u(reason: str) -> QAExtraction:
    return QAExtraction(None, False, reason)


def _p(value: str, reason: str) -> QAExtraction:
    return QAExtraction(value, True, reason)


# ------------------------------------------------------------------------------------------
# Answer spaces


@dataclass(frozen=True)
class _Spec:
    kind: str
    labels: tuple[str, ...]
    by_key: dict[str, str]  # casefolded label -> label as given
    digits: bool
    fail: str


_SPEC_CACHE: dict[tuple[str, tuple[str, ...]], _Spec] = {}
_FAIL = {"choice": "not_a_label", "boolean": "not_a_boolean", "numeric": "not_a_number"}


def _spec(answer_type: str, labels: Sequence[str]) -> _Spec:
    if answer_type not in ANSWER_TYPES:
        raise ConfigError(f"answer_type must be one of {ANSWER_TYPES}, got {answer_type!r}")
    if answer_type != "choice":
        labels = ()
    elif isinstance(labels, str):
        raise ConfigError(f"labels must be a sequence of labels, not the string {labels!r}")
    key = (answer_type, tuple(labels))
    cached = _SPEC_CACHE.get(key)
    if cached is not None:
        return cached
    labs = key[1]
    digits = False
    if answer_type == "choice":
        if len(labs) < 2 or not all(isinstance(a, str) for a in labs):
            raise ConfigError(f"a choice item needs at least two string labels, got {labs!r}")
        letters = all(re.fullmatch(r"[A-Za-z]", a) for a in labs)
        digits = all(re.fullmatch(r"[0-9]{1,2}", a) for a in labs)
        if not (letters or digits):
            raise ConfigError(f"choice labels must all be single letters or all option numbers, got {labs!r}")
        if len({a.casefold() for a in labs}) != len(labs):
            raise ConfigError(f"choice labels must be distinct up to case, got {labs!r}")
    spec = _Spec(answer_type, labs, {a.casefold(): a for a in labs}, digits, _FAIL[answer_type])
    _SPEC_CACHE[key] = spec
    return spec


# ------------------------------------------------------------------------------------------
# Numbers

_PLAIN_NUMBER_RE = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")
_MINUS_RE = re.compile("[\u2212\u2012\u2013\ufe63\uff0d]")  # − ‒ – ﹣ －
_SCALE_WORDS = frozenset({
    "k", "bn", "mn", "mil", "and", "or", "plus", "minus", "times", "to", "point", "half", "halves",
    "third", "thirds", "quarter", "quarters", "hundred", "hundreds", "thousand", "thousands",
    "million", "millions", "billion", "billions", "trillion", "trillions", "dozen", "dozens",
    "lakh", "crore", "e", "x", "over", "divided", "st", "nd", "rd", "th"})
_VALUE_NUMBER_RE = re.compile(
    r"(?P<s1>[-+]?)[ \t]*(?P<cur>[$€£¥]?)[ \t]*(?P<s2>[-+]?)"
    r"(?P<num>[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?|[0-9]+(?:\.[0-9]+)?|\.[0-9]+)"
    r"(?:[ \t]*(?P<unit>%|[$€£¥]|[^\W\d_]+(?:[ \t/-][^\W\d_]+){0,3}))?")
#: A number in free text, never out of an identifier or a compound (see the module docstring).
_NUM_TOKEN_RE = re.compile(
    r"(?<![A-Za-z0-9_.,/:#@^])(?<![A-Za-z0-9_]-)"
    r"(?P<s1>-)?(?P<cur>[$€£¥])?(?P<s2>-)?"
    r"(?P<num>[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?|[0-9]+(?:\.[0-9]+)?)"
    r"(?:%|(?:kg|km|cm|mm|ml|mg|lbs|lb|oz|ft|hrs|hr|mins|min|mph|sec|g|m|s|h|l)\b"
    r"|(?![A-Za-z0-9_]|[.,/:-][0-9]))")
_FRAC_RE = re.compile(r"\\[dt]?frac\s*\{[^{}]*\}\s*\{[^{}]*\}")


def _canon(d: Decimal) -> str | None:
    if not d.is_finite():
        return None
    d = d.normalize()
    if d == 0:
        return "0"
    return format(d, "f")


def _signed(sign_neg: bool, num: str) -> str | None:
    try:
        d = Decimal(num.replace(",", ""))
    except InvalidOperation:
        return None
    return _canon(-d if sign_neg else d)


def _latex_number_cleanup(s: str) -> str:
    s = s.replace("{,}", ",").replace("\\%", "%").replace("\\$", "$")
    return re.sub(r"\\[,;:! ]", "", s)


def _parse_number_value(s: str) -> tuple[str | None, bool]:
    """A whole normalised value read as a number: ``(canonical, plain)`` or ``(None, False)``."""
    if _PLAIN_NUMBER_RE.fullmatch(s):
        return _signed(False, s), True
    s = _latex_number_cleanup(s)
    m = _VALUE_NUMBER_RE.fullmatch(s.strip())
    if not m or (m.group("s1") and m.group("s2")):
        return None, False
    unit = m.group("unit")
    if unit and unit not in ("%", "$", "€", "£", "¥"):
        words = re.split(r"[ \t/-]", unit)
        if unit in ("K", "M", "B") or any(w.casefold() in _SCALE_WORDS for w in words):
            return None, False
    neg = "-" in (m.group("s1"), m.group("s2"))
    return _signed(neg, m.group("num")), False


def canonical_number(text: str) -> str | None:
    """The canonical decimal string of a number written as a whole value, or ``None``.

    Applies the ``normalized`` number rules (NFKC, Unicode minus, currency, separators, units):
    ``canonical_number("$1,234.50") == "1234.5"``, ``canonical_number("18.0") == "18"``,
    ``canonical_number("−0.50") == "-0.5"``. Useful to bring gold answers into canonical form.
    """
    s = _MINUS_RE.sub("-", unicodedata.normalize("NFKC", str(text))).strip()
    return _parse_number_value(s)[0]


# ------------------------------------------------------------------------------------------
# Values

_WRAP_RES = tuple(re.compile(p, re.DOTALL) for p in (
    r"\\boxed\s*\{(.*)\}",
    r"\\(?:text|textbf|textrm|mathrm|mathbf|fbox|emph)\s*\{(.*)\}",
    r"\$\$(.*)\$\$", r"\$(.*)\$", r"\\\((.*)\\\)", r"\\\[(.*)\\\]",
    r"\((.*)\)", r"\[(.*)\]", r"\{(.*)\}",
    r'"(.*)"', r"'(.*)'", "\u201c(.*)\u201d", "\u2018(.*)\u2019",
))
_OPTION_PREFIX_RE = re.compile(r"(?:option|choice)\s*[:#.]?\s*(\S.*)", re.IGNORECASE | re.DOTALL)
_TRAIL_PUNCT_RE = re.compile(r"[\s.,;:!]+$")


def _prep(s: str) -> str:
    """NFKC (fullwidth -> ASCII, NBSP -> space) and Unicode minus signs -> ``-``."""
    return _MINUS_RE.sub("-", unicodedata.normalize("NFKC", s))


def _strip_markup(s: str, spec: _Spec) -> str:
    prev = None
    while s != prev:
        prev = s
        s = s.strip().strip("*_`~").strip()
        s = _TRAIL_PUNCT_RE.sub("", s)
        for rx in _WRAP_RES:
            m = rx.fullmatch(s)
            if m:
                s = m.group(1)
                break
        else:
            if spec.kind == "choice":
                m = _OPTION_PREFIX_RE.fullmatch(s)
                if m:
                    s = m.group(1)
                elif s.endswith(")") and "(" not in s:
                    s = s[:-1]
    return s


def _strict_value(v: Any, spec: _Spec) -> tuple[str | None, str]:
    """The value of a slot under the strict contract: ``(value, "")`` or ``(None, failure)``."""
    if spec.kind == "choice":
        if isinstance(v, str) and v in spec.labels:
            return v, ""
        if type(v) is int and spec.digits and str(v) in spec.labels:
            return str(v), ""
    elif spec.kind == "boolean":
        if isinstance(v, bool):
            return ("true" if v else "false"), ""
        if isinstance(v, str) and v in ("true", "false"):
            return v, ""
    else:
        if isinstance(v, (int, Decimal)) and not isinstance(v, bool):
            c = _canon(Decimal(v))
            if c is not None:
                return c, ""
        if isinstance(v, str) and _PLAIN_NUMBER_RE.fullmatch(v):
            return _signed(False, v), ""
    return None, spec.fail


def _normalized_value(v: Any, spec: _Spec) -> tuple[str | None, str]:
    """The value of a slot after normalisation: ``(value, step)`` with step ``""`` (nothing to
    normalise), ``normalized_markup``, ``normalized_number`` or ``normalized_yes_no``; or
    ``(None, failure)``."""
    if not isinstance(v, str):
        if isinstance(v, bool):
            return _strict_value(v, spec)
        if isinstance(v, (int, Decimal)):
            if spec.kind == "numeric":
                return _strict_value(v, spec)
            if spec.kind == "choice" and spec.digits:
                c = _canon(Decimal(v))
                if c in spec.labels:
                    return c, ("" if type(v) is int else "normalized_markup")
        return None, spec.fail
    if len(v) > _MAX_VALUE_CHARS:
        return None, spec.fail
    p = _prep(v)
    prepped = p != v
    t = _strip_markup(p, spec)
    marked = t != p  # surrounding whitespace, markup, brackets, punctuation
    if spec.kind == "choice":
        lab = spec.by_key.get(t.casefold())
        if lab is None:
            return None, spec.fail
        return lab, ("normalized_markup" if prepped or marked or t != lab else "")
    if spec.kind == "boolean":
        key = t.casefold()
        if key not in ("true", "false", "yes", "no"):
            return None, spec.fail
        val = "true" if key in ("true", "yes") else "false"
        if prepped or marked:
            return val, "normalized_markup"
        if key in ("yes", "no"):
            return val, "normalized_yes_no"
        return val, ("" if t == key else "normalized_markup")
    num, plain = _parse_number_value(t)
    if num is None:
        return None, spec.fail
    if marked:
        return num, "normalized_markup"
    return num, ("" if plain and not prepped else "normalized_number")


# ------------------------------------------------------------------------------------------
# JSON

_FENCE_RE = re.compile(r"```[ \t]*[\w+-]*[ \t]*\r?\n?(?P<body>.*?)(?:```|\Z)", re.DOTALL)


def _loads(s: str) -> tuple[bool, Any]:
    try:
        return True, json.loads(s, parse_float=Decimal)
    except (ValueError, RecursionError):
        return False, None


def _answer_key(d: Any, exact: bool) -> tuple[bool, Any, bool]:
    """``(found, value, key_exact)`` for the ``answer`` key of a dict."""
    if not isinstance(d, dict):
        return False, None, False
    if "answer" in d:
        return True, d["answer"], True
    if exact:
        return False, None, False
    for k, v in d.items():
        if isinstance(k, str) and k.strip().casefold() == "answer":
            return True, v, False
    return False, None, False


def _json_slots(text: str, strict: bool) -> tuple[list[Any], str | None, str]:
    if strict:
        ok, obj = _loads(text.strip())
        if not ok:
            return [], None, "invalid_json"
        found, v, _ = _answer_key(obj, exact=True)
        return ([v], None, "") if found else ([], None, "no_answer")
    failed = False
    stripped = text.strip()
    if stripped.startswith("{"):
        ok, obj = _loads(stripped)
        failed = not ok
        found, v, exact = _answer_key(obj, exact=False)
        if found:
            return [v], (None if exact else "normalized_slot"), ""
    for where, bodies in (("json_in_code_fence", [m.group("body") for m in _FENCE_RE.finditer(text)]),
                          ("json_in_prose", [text])):
        values = []
        for body in bodies:
            for span in object_spans(body):
                ok, obj = _loads(span)
                failed = failed or not ok
                found, v, _ = _answer_key(obj, exact=False)
                if found:
                    values.append(v)
        if values:
            return values, where, ""
    return [], None, ("invalid_json" if failed else "no_answer")


def _literal_json_values(text: str) -> list[Any]:
    """``answer`` values of Python-literal objects (single quotes, True/False/None)."""
    values = []
    for span in object_spans(text):
        if len(span) > 100_000:
            continue
        try:
            obj = ast.literal_eval(span)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        found, v, _ = _answer_key(obj, exact=False)
        if found:
            values.append(v)
    return values


# ------------------------------------------------------------------------------------------
# Slots of the line and tag families

_STRUCT_STRICT_RE = re.compile(r"^Answer:[ \t]*(.*?)[ \t]*\r?$", re.MULTILINE)
_STRUCT_NORM_RE = re.compile(r"^[ \t>#*_-]*answer[ \t*_]*[:\uff1a][ \t]*(.*?)[ \t]*\r?$",
                             re.MULTILINE | re.IGNORECASE)
_FINAL_STRICT_RE = re.compile(r"Final answer:[ \t]*(.*?)[ \t]*")
_FINAL_NORM_RE = re.compile(r"^[ \t>#*_-]*final[ \t]+answer[ \t*_]*[:\uff1a][ \t]*(.*?)[ \t]*\r?$",
                            re.MULTILINE | re.IGNORECASE)
_TAG_STRICT_RE = re.compile(r"<(/?)answer>")
_TAG_NORM_RE = re.compile(r"<\s*(/?)\s*answer\s*>", re.IGNORECASE)
_NEXT_LINE_RE = re.compile(r"[ \t]*\r?\n(?:[ \t]*\r?\n)*(?P<line>[^\n]*)")
#: Longest value that is normalised; a longer slot is never a single label or number.
_MAX_VALUE_CHARS = 1000
#: How far after a label / boolean word the context rules look.
_AFTER_WINDOW = 200


def _tag_values(text: str, rx: re.Pattern[str]) -> tuple[list[str], int | None]:
    """Texts between an opening tag and the next closing tag (one linear scan), and the end of
    the last opening tag left unclosed (``None`` if every opening tag is closed)."""
    values: list[str] = []
    open_end: int | None = None
    for m in rx.finditer(text):
        if not m.group(1):
            open_end = m.end()
        elif open_end is not None:
            values.append(text[open_end:m.start()])
            open_end = None
    return values, open_end


def _line_values(text: str, rx: re.Pattern[str]) -> list[str]:
    """Values of key lines; a bare key takes the next non-empty line."""
    values = []
    for m in rx.finditer(text):
        v = m.group(1)
        if not v.strip(" \t*_`"):
            nm = _NEXT_LINE_RE.match(text, m.end())
            nxt = nm.group("line").strip() if nm else ""
            if nxt and not rx.match(nxt):
                v = nxt
        values.append(v)
    return values


def _find_slots(text: str, family: str, strict: bool) -> tuple[list[Any], str | None, str]:
    """``(slot values, where, missing_reason)``; ``where`` is ``None`` when the slots are the
    strict contract's, else a parseable reason code."""
    if family == "plain":
        return [text.strip()], None, ""
    if family == "json":
        return _json_slots(text, strict)
    if family == "structured":
        values = [m.group(1) for m in _STRUCT_STRICT_RE.finditer(text)] if strict \
            else _line_values(text, _STRUCT_NORM_RE)
    elif family == "structured_delim":
        values = _tag_values(text, _TAG_STRICT_RE if strict else _TAG_NORM_RE)[0]
    else:  # deliberate
        if strict:
            lines = [ln.rstrip("\r") for ln in text.strip().splitlines()]
            if not _FINAL_STRICT_RE.fullmatch(lines[-1]):
                return [], None, "no_answer"
            values = [m.group(1) for m in map(_FINAL_STRICT_RE.fullmatch, lines) if m]
        else:
            values = _line_values(text, _FINAL_NORM_RE)
    if not values:
        return [], None, "no_answer"
    if strict:
        return values, None, ""
    return values, (None if values == _find_slots(text, family, True)[0] else "normalized_slot"), ""


def _read(text: str, family: str, spec: _Spec, strict: bool) -> QAExtraction:
    values, where, missing = _find_slots(text, family, strict)
    if not values:
        return _u(missing)
    read = _strict_value if strict else _normalized_value
    results = [read(v, spec) for v in values]
    found = [(v, step) for v, step in results if v is not None]
    if len({v for v, _ in found}) > 1:
        return _u("ambiguous")
    if not found:
        return _u(results[0][1])
    value, step = found[0]
    return _p(value, "ok" if strict else (where or step or "ok"))


# ------------------------------------------------------------------------------------------
# Lenient search

_PHRASE_RE = re.compile(
    r"(?i:\b(?:the\s+)?(?:(?:correct|final|best|right|most\s+likely)\s+)?"
    r"(?P<kw>answer|option|choice)\b)"
    r"[ \t*_`\"']*"
    r"(?P<verb>(?i:is|would\s+be|will\s+be|should\s+be)\b|[:=\uff1a]|[-\u2013](?=\s))?"
    r"[ \t*_`\"':]*"
    r"(?=(?P<tail>[^\n]{0,200}))")
_BOXED_RE = re.compile(r"\\boxed\s*\{(?P<body>[^{}]*(?:\{[^{}]*\}[^{}]*)*)\}")
_LEAD_LABEL_RE = re.compile(
    r"[ \t*_`\"']*(?:(?i:option|choice)[ \t]*)?(?P<open>[(\[])?[ \t*_`]*"
    r"(?P<id>[A-Za-z]|[0-9]{1,2})[*_`]*(?(open)[ \t]*[)\]][*_`]*)")
_PAREN_LABEL_RE = re.compile(r"(?<!\w)[(\[][ \t]*(?P<id>[A-Za-z]|[0-9]{1,2})[ \t]*[)\]]")
_ARTICLE_OK_AFTER = re.compile(
    r"\s*(?:$|[.,;:!?)\]*_`\"'\n]|(?:because|since|as|given|due|which|with|is|was|would|seems|looks)\b)",
    re.IGNORECASE)
_NEGATIVE_AFTER = re.compile(
    r"[\s)\]*_`]*(?:is|was|would\s+be|seems)?\s*(?:not|incorrect|wrong|false|unlikely|eliminated|ruled\s+out)\b",
    re.IGNORECASE)
_BOOL_LEAD_RE = re.compile(r"[ \t*_`\"'(\[]*(?P<w>true|false|yes|no)(?![\w'\u2019-])", re.IGNORECASE)
_BOOL_WORD_RE = re.compile(r"(?<![\w'\u2019-])(?P<w>true|false|yes|no)(?![\w'\u2019-])", re.IGNORECASE)
_NEGATED_BEFORE = re.compile(r"(?:\bnot|n['\u2019]t)[ \t]*$", re.IGNORECASE)
#: A boolean word followed by one of these is still an answer ("no, because", "yes it is").
_MODIFIER_OK_NEXT = re.compile(
    r"[ \t]+(?:because|since|as|so|but|it|this|that|i|we|they|he|she|and|or|then|therefore|for|given)\b",
    re.IGNORECASE)
_MODIFIER_NEXT = re.compile(r"[ \t]+[a-z]")
_LIST_MARK_RE = re.compile(r"^[>#\-\u2022\s]+")


def _label_at(text: str, m: re.Match[str], spec: _Spec, bracketed: bool) -> str | None:
    """The label of an id match, unless it is part of a word/number, an article or negated."""
    oid, after = m.group("id"), text[m.end():m.end() + _AFTER_WINDOW]
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
    return spec.by_key.get(oid.casefold())


_ALTERNATIVE_RE = re.compile(r"[ \t]*(?:/|&|,|(?i:or|and)\b)[ \t]*")
#: After a verb-less "Option B" only these may follow for it to count as the answer.
_BARE_OK_AFTER = re.compile(r"[*_`\"')\]]*[ \t]*(?:$|[.,;:!?\n]|(?i:is|was|would|because|since|as)\b)")


def _lead_labels(tail: str, spec: _Spec, bare: bool = False) -> list[str]:
    """The label at the start of ``tail`` (``[]`` if none); an alternative listed right after it
    ("B or C", "B/C", "B and C") is returned too, so two different labels are ambiguous."""
    m = _LEAD_LABEL_RE.match(tail)
    if not m:
        return []
    label = _label_at(tail, m, spec, bracketed=bool(m.group("open")))
    if label is None:
        return []
    after = tail[m.end():]
    alt = _ALTERNATIVE_RE.match(after)
    if alt:
        m2 = _LEAD_LABEL_RE.match(after, alt.end())
        if m2:
            other = _label_at(after, m2, spec, bracketed=bool(m2.group("open")))
            if other is not None:
                return [label, other]
    if bare and not _BARE_OK_AFTER.match(after):
        return []
    return [label]


def _is_modifier(text: str, end: int) -> bool:
    after = text[end:end + _AFTER_WINDOW]
    return bool(_MODIFIER_NEXT.match(after)) and not _MODIFIER_OK_NEXT.match(after)


def _lead_boolean(tail: str) -> str | None:
    m = _BOOL_LEAD_RE.match(tail)
    if not m:
        return None
    w = m.group("w").casefold()
    if w != "yes" and _is_modifier(tail, m.end()):
        return None
    return "true" if w in ("true", "yes") else "false"


_BINARY_MINUS_BEFORE = re.compile(r"[0-9)\]}%][ \t]*$")


def _number_of(m: re.Match[str]) -> str | None:
    neg = "-" in (m.group("s1"), m.group("s2"))
    if m.group("s1") and _BINARY_MINUS_BEFORE.search(m.string[max(0, m.start() - 8):m.start()]):
        neg = m.group("s2") == "-"  # "18 - 2": a subtraction, the number is 2
    return _signed(neg, m.group("num"))


def _lead_number(tail: str) -> str | None:
    t = tail.lstrip(" \t*_`\"'([{$\\")
    m = _NUM_TOKEN_RE.match(t)
    return _number_of(m) if m else None


def _phrase_values(scope: str, spec: _Spec) -> list[str]:
    found = []
    for m in _BOXED_RE.finditer(scope):
        v, _ = _normalized_value(m.group("body"), spec)
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


def _search(scope: str, spec: _Spec, in_slot: bool) -> list[tuple[str, str]]:
    """Lenient hits ``(value, reason)`` in ``scope``, in order of preference."""
    scope = _prep(scope)
    hits = [(v, "lenient_answer_phrase") for v in _phrase_values(scope, spec)]
    if spec.kind == "choice":
        for line in scope.splitlines():
            s = _LIST_MARK_RE.sub("", line).strip()
            if s and len(s) <= 30:
                v, _ = _normalized_value(s, spec)
                if v is not None:
                    hits.append((v, "lenient_label_line"))
        if in_slot:
            hits += [(v, "lenient_label_in_slot") for v in _lead_labels(scope, spec)]
            for m in _PAREN_LABEL_RE.finditer(scope):
                v = _label_at(scope, m, spec, bracketed=True)
                if v is not None:
                    hits.append((v, "lenient_label_in_slot"))
        return hits
    if hits:
        return hits
    if spec.kind == "boolean":
        for m in _BOOL_WORD_RE.finditer(scope):
            w = m.group("w").casefold()
            if _NEGATED_BEFORE.search(scope[max(0, m.start() - 16):m.start()]):
                continue
            if w != "yes" and _is_modifier(scope, m.end()):
                continue
            hits.append(("true" if w in ("true", "yes") else "false", "lenient_boolean_word"))
        return hits
    cleaned = _FRAC_RE.sub(" ", _latex_number_cleanup(scope))
    numbers = [v for v in map(_number_of, _NUM_TOKEN_RE.finditer(cleaned)) if v is not None]
    return [(numbers[-1], "lenient_last_number")] if numbers else []


def _decide(hits: list[tuple[str, str]], reason: str | None = None) -> QAExtraction | None:
    if not hits:
        return None
    if len({v for v, _ in hits}) > 1:
        return _u("ambiguous")
    return _p(hits[0][0], reason or hits[0][1])


def _slot_text(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, Decimal):
        return str(v)
    try:
        return json.dumps(v, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(v)


def _search_slots(values: list[Any], spec: _Spec, reason: str | None = None) -> QAExtraction | None:
    hits: list[tuple[str, str]] = []
    for v in values:
        hits += _search(_slot_text(v), spec, in_slot=True)
    return _decide(hits, reason)


def _lenient(text: str, family: str, spec: _Spec, normalized: QAExtraction) -> QAExtraction:
    values, _, _ = _find_slots(text, family, strict=False)
    if values:  # a committed slot whose value did not normalise: search only inside it
        return _search_slots(values, spec) or normalized
    if family == "json":
        repaired = _literal_json_values(text)
        if repaired:
            results = [_normalized_value(v, spec) for v in repaired]
            found = {v for v, _ in results if v is not None}
            if len(found) > 1:
                return _u("ambiguous")
            if found:
                return _p(found.pop(), "lenient_json_repaired")
            return _search_slots(repaired, spec) or _u(results[0][1])
    if family == "structured_delim":
        open_end = _tag_values(text, _TAG_NORM_RE)[1]
        if open_end is not None:
            rest = text[open_end:]
            v, _ = _normalized_value(rest, spec)
            if v is not None:
                return _p(v, "lenient_unclosed_tag")
            got = _search_slots([rest], spec, reason="lenient_unclosed_tag")
            if got is not None:
                return got
    return _decide(_search(text, spec, in_slot=False)) or normalized


# ------------------------------------------------------------------------------------------
# Entry point


def extract_answer(text: str | None, answer_type: AnswerType, labels: Sequence[str] = (),
                   family: Family | None = None, mode: Mode = "normalized",
                   finish_reason: str | None = None) -> QAExtraction:
    """Read the answer of one model output; see the module docstring for every rule.

    Args:
        text: the completion (``None`` — or a float NaN from a table — for a call that returned
            no text).
        answer_type: ``choice``, ``boolean`` or ``numeric``.
        labels: the choice labels (letters or option numbers), returned spelled as given;
            ignored for the other answer types.
        family: the prompt-wrapper family whose output contract is read (``None``: ``plain``).
        mode: ``strict``, ``normalized`` or ``lenient``.
        finish_reason: the provider's normalised finish reason; ``"length"`` -> ``truncated``.

    Raises:
        ConfigError: unknown answer type, family or mode; choice labels that are fewer than two,
            not all single letters / all option numbers, or not distinct up to case.
    """
    spec = _spec(answer_type, labels)
    fam = "plain" if family is None else family
    if fam not in FAMILIES:
        raise ConfigError(f"family must be one of {FAMILIES} or None, got {family!r}")
    if mode not in MODES:
        raise ConfigError(f"mode must be one of {MODES}, got {mode!r}")
    if finish_reason is not None and str(finish_reason).strip().lower() in _TRUNCATED_FINISH:
        return _u("truncated")
    if text is None or (isinstance(text, float) and math.isnan(text)) or not str(text).strip():
        return _u("empty")  # None, a pandas NaN for a missing text, or only whitespace
    text = str(text)
    if mode == "strict":
        return _read(text, fam, spec, strict=True)
    normalized = _read(text, fam, spec, strict=False)
    if mode == "normalized" or normalized.parseable or normalized.reason == "ambiguous":
        return normalized
    return _lenient(text, fam, spec, normalized)
