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
from metamorph.studies.wrapper_sensitivity.vocab import ANSWER_TYPES

__all__ = [
    "COPULA",
    "FRAC_RE",
    "MARKS",
    "NUM_TOKEN_RE",
    "AnswerSpec",
    "answer_spec",
    "canonical_number",
    "latex_number_cleanup",
    "normalized_value",
    "prep_text",
    "signed_number",
    "strict_value",
]

#: Longest value that is normalised; a longer slot is never a single label or number.
_MAX_VALUE_CHARS = 1000


@dataclass(frozen=True)
class AnswerSpec:
    """A task's compiled answer space: its answer type (``kind``), the choice labels as given and
    by casefolded key, whether the labels are option numbers (``digits``), and the failure reason
    of a value outside the space (``not_a_label`` / ``not_a_boolean`` / ``not_a_number``). Built
    by :func:`answer_spec`."""

    kind: str
    labels: tuple[str, ...]
    by_key: dict[str, str]  # casefolded label -> label as given
    digits: bool
    fail: str


_SPEC_CACHE: dict[tuple[str, tuple[str, ...]], AnswerSpec] = {}

_FAIL = {"choice": "not_a_label", "boolean": "not_a_boolean", "numeric": "not_a_number"}


def answer_spec(answer_type: str, labels: Sequence[str]) -> AnswerSpec:
    """The (cached) answer space of ``answer_type`` with ``labels`` (ignored unless ``choice``).

    Raises:
        ConfigError: unknown answer type; choice labels that are a string, fewer than two, not
            all single letters / all option numbers, or not distinct up to case.
    """
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
    spec = AnswerSpec(answer_type, labs, {a.casefold(): a for a in labs}, digits, _FAIL[answer_type])
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
NUM_TOKEN_RE = re.compile(
    r"(?<![A-Za-z0-9_.,/:#@^])(?<![A-Za-z0-9_]-)"
    r"(?P<s1>-)?(?P<cur>[$€£¥])?(?P<s2>-)?"
    r"(?P<num>[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?|[0-9]+(?:\.[0-9]+)?)"
    r"(?:%|(?:kg|km|cm|mm|ml|mg|lbs|lb|oz|ft|hrs|hr|mins|min|mph|sec|g|m|s|h|l)\b"
    r"|(?![A-Za-z0-9_]|[.,/:-][0-9]))"
)

#: A LaTeX fraction ``\\frac{..}{..}`` (not a number here: gold answers are decimals).
FRAC_RE = re.compile(r"\\[dt]?frac\s*\{[^{}]*\}\s*\{[^{}]*\}")


def _canon(d: Decimal) -> str | None:
    if not d.is_finite():
        return None
    d = d.normalize()
    if d == 0:
        return "0"
    return format(d, "f")


def signed_number(sign_neg: bool, num: str) -> str | None:
    """The canonical decimal string of the digits ``num`` (``,`` separators allowed), negated when
    ``sign_neg``; ``None`` when ``num`` is not a finite number."""
    try:
        d = Decimal(num.replace(",", ""))
    except InvalidOperation:
        return None
    return _canon(-d if sign_neg else d)


def latex_number_cleanup(s: str) -> str:
    """``s`` with LaTeX number spacing undone: ``9{,}500`` -> ``9,500``, ``1\\,234`` -> ``1234``,
    ``\\%`` -> ``%``, ``\\$`` -> ``$``."""
    s = s.replace("{,}", ",").replace("\\%", "%").replace("\\$", "$")
    return re.sub(r"\\[,;:! ]", "", s)


def _parse_number_value(s: str) -> tuple[str | None, bool]:
    """A whole normalised value read as a number: ``(canonical, plain)`` or ``(None, False)``."""
    if _PLAIN_NUMBER_RE.fullmatch(s):
        return signed_number(False, s), True
    s = latex_number_cleanup(s)
    m = _VALUE_NUMBER_RE.fullmatch(s.strip())
    if not m or (m.group("s1") and m.group("s2")):
        return None, False
    unit = m.group("unit")
    if unit and unit not in ("%", "$", "€", "£", "¥"):
        words = re.split(r"[ \t/-]", unit)
        if unit in ("K", "M", "B") or any(w.casefold() in _SCALE_WORDS for w in words):
            return None, False
    neg = "-" in (m.group("s1"), m.group("s2"))
    return signed_number(neg, m.group("num")), False


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


def prep_text(s: str) -> str:
    """NFKC (fullwidth -> ASCII, NBSP -> space) and Unicode minus signs -> ``-``."""
    return _MINUS_RE.sub("-", unicodedata.normalize("NFKC", s))


def _strip_markup(s: str, spec: AnswerSpec) -> str:
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


def strict_value(v: Any, spec: AnswerSpec) -> tuple[str | None, str]:
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
            return signed_number(False, v), ""
    return None, spec.fail


def normalized_value(v: Any, spec: AnswerSpec) -> tuple[str | None, str]:
    """The value of a slot after normalisation: ``(value, step)`` with step ``""`` (nothing to
    normalise), ``normalized_markup``, ``normalized_number`` or ``normalized_yes_no``; or
    ``(None, failure)``."""
    if not isinstance(v, str):
        if isinstance(v, bool):
            return strict_value(v, spec)
        if isinstance(v, (int, Decimal)):
            if spec.kind == "numeric":
                return strict_value(v, spec)
            if spec.kind == "choice" and spec.digits:
                c = _canon(Decimal(v))
                if c in spec.labels:
                    return c, ("" if type(v) is int else "normalized_markup")
        return None, spec.fail
    if len(v) > _MAX_VALUE_CHARS:
        return None, spec.fail
    p = prep_text(v)
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
