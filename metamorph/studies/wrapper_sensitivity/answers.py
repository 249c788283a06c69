"""Answer spaces, numbers and values for the wrapper study's extraction.

Compiles a task's answer space (choice letters, booleans, numeric) and normalises a candidate
value to it: choice labels, the boolean map, and numbers written with signs, separators,
fractions or units. Used by every extraction mode of
:mod:`metamorph.studies.wrapper_sensitivity.extract`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from metamorph.errors import ConfigError

#: Answer types of a QA item.
ANSWER_TYPES: tuple[str, ...] = ("choice", "boolean", "numeric")

#: Longest value that is normalised; a longer slot is never a single label or number.
_MAX_VALUE_CHARS = 1000


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


#: Regex fragment: markdown emphasis/code marks, quotes and blanks that may wrap an answer
#: (``**B**``, ``"B"``, `` `B` ``); shared by the lenient and the paper extractors.
MARKS = r"[ \t*_`\"']*"
#: Regex fragment: the copula of an answer phrase ("is", "would be", "will be", a colon or "=").
COPULA = r"(?:is|would\s+be|will\s+be|[:\uff1a=])"

_PLAIN_NUMBER_RE = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")

_MINUS_RE = re.compile("[\u2212\u2012\u2013\ufe63\uff0d]")  # − ‒ – ﹣ －

_SCALE_WORDS = frozenset(
    {
        "k",
        "bn",
        "mn",
        "mil",
        "and",
        "or",
        "plus",
        "minus",
        "times",
        "to",
        "point",
        "half",
        "halves",
        "third",
        "thirds",
        "quarter",
        "quarters",
        "hundred",
        "hundreds",
        "thousand",
        "thousands",
        "million",
        "millions",
        "billion",
        "billions",
        "trillion",
        "trillions",
        "dozen",
        "dozens",
        "lakh",
        "crore",
        "e",
        "x",
        "over",
        "divided",
        "st",
        "nd",
        "rd",
        "th",
    }
)

_VALUE_NUMBER_RE = re.compile(
    r"(?P<s1>[-+]?)[ \t]*(?P<cur>[$€£¥]?)[ \t]*(?P<s2>[-+]?)"
    r"(?P<num>[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?|[0-9]+(?:\.[0-9]+)?|\.[0-9]+)"
    r"(?:[ \t]*(?P<unit>%|[$€£¥]|[^\W\d_]+(?:[ \t/-][^\W\d_]+){0,3}))?"
)

#: A number in free text, never out of an identifier or a compound (see the module docstring).
_NUM_TOKEN_RE = re.compile(
    r"(?<![A-Za-z0-9_.,/:#@^])(?<![A-Za-z0-9_]-)"
    r"(?P<s1>-)?(?P<cur>[$€£¥])?(?P<s2>-)?"
    r"(?P<num>[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?|[0-9]+(?:\.[0-9]+)?)"
    r"(?:%|(?:kg|km|cm|mm|ml|mg|lbs|lb|oz|ft|hrs|hr|mins|min|mph|sec|g|m|s|h|l)\b"
    r"|(?![A-Za-z0-9_]|[.,/:-][0-9]))"
)

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


_WRAP_RES = tuple(
    re.compile(p, re.DOTALL)
    for p in (
        r"\\boxed\s*\{(.*)\}",
        r"\\(?:text|textbf|textrm|mathrm|mathbf|fbox|emph)\s*\{(.*)\}",
        r"\$\$(.*)\$\$",
        r"\$(.*)\$",
        r"\\\((.*)\\\)",
        r"\\\[(.*)\\\]",
        r"\((.*)\)",
        r"\[(.*)\]",
        r"\{(.*)\}",
        r'"(.*)"',
        r"'(.*)'",
        "\u201c(.*)\u201d",
        "\u2018(.*)\u2019",
    )
)

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
