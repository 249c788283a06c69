"""Label matching for the document-format study's extraction (paper §5.1): finds which label
of the answer space a value or a prose reply asserts.

The rules (case-, whitespace- and punctuation-insensitive) are listed in
:mod:`metamorph.studies.format_robustness.extract` under "Label matching rules": whole-value
match first; the complete (longest) label wins; negations never map to the affirmative label;
"no" before a word is a determiner; letter / option-number answer spaces accept only explicit
patterns. :func:`match_label` is the entry for one value; :func:`compile_space` and the matchers on a
compiled :class:`AnswerSpace` are shared with the extractor.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from metamorph.errors import ConfigError

__all__ = [
    "AnswerSpace",
    "compile_space",
    "match_label",
    "match_value",
    "option_value_or_prose",
    "options_in_prose",
    "search_labels",
]

_TOKEN_RE = re.compile(r"[^\W_]+|[.,;:!?()\[\]{}|/\n]")

#: Words that negate a following label (after contraction expansion: "shouldn't" -> "should not").
_NEGATORS = frozenset({"not", "no", "never", "neither", "nor", "without", "non", "cannot"})

_NEGATOR_BIGRAMS = frozenset({("rather", "than"), ("instead", "of")})

#: Words that end a clause for the negation window (punctuation tokens end it too).
_CLAUSE_WORDS = frozenset(
    {
        "but",
        "however",
        "although",
        "though",
        "whereas",
        "while",
        "yet",
        "so",
        "therefore",
        "thus",
        "hence",
        "because",
        "since",
        "and",
        "or",
    }
)

_NEGATION_WINDOW = 4


def _expand(text: str) -> str:
    t = unicodedata.normalize("NFKC", text).casefold()
    t = t.replace("\u2019", "'").replace("\u2018", "'").replace("`", "'")
    t = re.sub(r"\bwon't\b", "will not", t)
    t = re.sub(r"\bshan't\b", "shall not", t)
    t = re.sub(r"\bcan't\b|\bcannot\b", "can not", t)
    t = re.sub(r"\bain't\b", "is not", t)
    return re.sub(r"n't\b", " not", t)


def _tokens(text: str) -> list[str]:
    """Lower-cased word tokens plus clause-boundary punctuation tokens."""
    return _TOKEN_RE.findall(_expand(text))


def _is_word(tok: str) -> bool:
    return tok[0].isalnum()


def _norm(text: str) -> str:
    """Case/whitespace/punctuation-insensitive form: the word tokens joined by one space."""
    return " ".join(t for t in _tokens(text) if _is_word(t))


@dataclass(frozen=True)
class AnswerSpace:
    """A compiled answer space: the labels, their tokens, the normalised label -> index map, the
    negation partners (negating label i asserts label ``partner[i]``), and for letter /
    option-number spaces the upper-cased option id -> index map. Built by :func:`compile_space`."""

    labels: tuple[str, ...]
    tokens: tuple[tuple[str, ...], ...]
    by_norm: dict[str, int]
    partner: dict[int, int]  # negating label i gives label partner[i]
    option_ids: dict[str, int] | None  # upper-cased id -> index, for letter/number spaces


_SPACE_CACHE: dict[tuple[str, ...], AnswerSpace] = {}


def compile_space(answer_space: Sequence[str]) -> AnswerSpace:
    """The (cached) compiled form of ``answer_space``.

    Raises:
        ConfigError: a string instead of a sequence, non-string or empty labels, fewer than two
            labels, or labels equal after normalisation.
    """
    if isinstance(answer_space, str):
        raise ConfigError(f"answer space must be a sequence of labels, not the string {answer_space!r}")
    answer_space = tuple(answer_space)
    if not all(isinstance(a, str) for a in answer_space):
        raise ConfigError(f"answer-space labels must be strings, got {answer_space!r}")
    cached = _SPACE_CACHE.get(answer_space)
    if cached is not None:
        return cached
    if len(answer_space) < 2:
        raise ConfigError(f"answer space needs at least two labels, got {answer_space!r}")
    toks: list[tuple[str, ...]] = []
    by_norm: dict[str, int] = {}
    for i, label in enumerate(answer_space):
        t = tuple(w for w in _tokens(label) if _is_word(w))
        if not t:
            raise ConfigError(f"answer-space label {label!r} has no letters or digits")
        key = " ".join(t)
        if key in by_norm:
            raise ConfigError(
                f"answer-space labels {answer_space[by_norm[key]]!r} and {label!r} are the same up to case/punctuation"
            )
        by_norm[key] = i
        toks.append(t)
    partner: dict[int, int] = {}
    for i, ti in enumerate(toks):
        for j, tj in enumerate(toks):
            if i == j:
                continue
            # tj = <negation prefix> + ti  -> negated ti is tj; and the reverse.
            if (
                len(tj) > len(ti)
                and tj[-len(ti) :] == ti
                and len(tj) - len(ti) <= 3
                and _NEGATORS.intersection(tj[: len(tj) - len(ti)])
            ):
                partner.setdefault(i, j)
                partner.setdefault(j, i)
    option_ids = None
    if all(re.fullmatch(r"[A-Za-z]", a.strip()) for a in answer_space) or all(
        re.fullmatch(r"\d{1,2}", a.strip()) for a in answer_space
    ):
        option_ids = {a.strip().upper(): i for i, a in enumerate(answer_space)}
    space = AnswerSpace(tuple(answer_space), tuple(toks), by_norm, partner, option_ids)
    _SPACE_CACHE[answer_space] = space
    return space


def _negated(tokens: list[str], start: int) -> bool:
    """Is the label occurrence starting at ``start`` negated within its clause?"""
    words = 0
    i = start - 1
    while i >= 0 and words < _NEGATION_WINDOW:
        tok = tokens[i]
        if not _is_word(tok) or tok in _CLAUSE_WORDS:
            return False
        if tok in _NEGATORS:
            return True
        if i > 0 and (tokens[i - 1], tok) in _NEGATOR_BIGRAMS:
            return True
        words += 1
        i -= 1
    return False


def search_labels(text: str, space: AnswerSpace) -> tuple[str, int | None]:
    """Search the labels in free text: ``("found", i)`` or ``(reason, None)``."""
    tokens = _tokens(text)
    occ: list[tuple[int, int, int]] = []
    for li, lt in enumerate(space.tokens):
        n = len(lt)
        for s in range(len(tokens) - n + 1):
            if tuple(tokens[s : s + n]) == lt:
                occ.append((s, s + n, li))
    # The complete label wins: drop occurrences inside a strictly longer occurrence.
    kept = [a for a in occ if not any(b[0] <= a[0] and a[1] <= b[1] and (b[1] - b[0]) > (a[1] - a[0]) for b in occ)]
    asserted: set[int] = set()
    negated_any = False
    for s, e, li in kept:
        # "no" followed by a word in the same clause is a determiner ("no evidence"), not an answer.
        if space.tokens[li] == ("no",) and e < len(tokens) and _is_word(tokens[e]) and tokens[e] not in _CLAUSE_WORDS:
            continue
        if _negated(tokens, s):
            if li in space.partner:
                asserted.add(space.partner[li])
            else:
                negated_any = True
        else:
            asserted.add(li)
    if len(asserted) == 1:
        return "found", asserted.pop()
    if len(asserted) > 1:
        return "ambiguous", None
    return ("negated_label" if negated_any else "no_label"), None


# Letter / option-number answer spaces.
_MD = "*_`#"

_OPT_VALUE_RE = re.compile(
    r"^(?:(?:the\s+)?(?:(?:correct|final|best|right)\s+)?(?:answer|option|choice|decision|label)"
    r"(?:\s+is)?\s*[:=\-]?\s*)?"
    r"(?:(?P<br>[\(\[])\s*(?P<bid>[A-Za-z]|\d{1,2})\s*[\)\]].*"
    r"|(?P<id>[A-Za-z]|\d{1,2})(?![.,]\d)(?:\s*[.:)\-\u2013]\s*.*|\s*[.!]?))$",
    re.IGNORECASE | re.DOTALL,
)

_OPT_PROSE_RE = re.compile(
    r"(?i:\b(?:the\s+)?(?:(?:correct|final|best|right|most\s+likely)\s+)?(?:answer|option|choice)\b"
    r"(?:\s+(?:is|would\s+be|will\s+be|should\s+be))?\s*[:=\-]?\s*)"
    r"[*_`\s]*(?P<br>[\(\[])?[*_`]*(?P<id>[A-Za-z]|\d{1,2})[*_`]*(?(br)[\)\]])"
    r"(?=(?P<after>.{0,40}))",
    re.DOTALL,
)

_OPT_LINE_RE = re.compile(
    r"^[ \t>*_`#-]*(?P<br>[\(\[])?[*_`]*(?P<id>[A-Z]|\d{1,2})[*_`]*(?(br)[\)\]])"
    r"[ \t]*[.:]?[*_`]*[ \t]*$",
    re.MULTILINE,
)

_ARTICLE_OK_AFTER = re.compile(
    r"^\s*(?:$|[.,;:!?)\]*_`\"'\n]|(?:because|since|as|given|due|which|with)\b)", re.IGNORECASE
)

_NEGATIVE_AFTER = re.compile(
    r"^[\s)\]*_`]*(?:is|was|would\s+be)?\s*(?:not|incorrect|wrong|false|unlikely)\b", re.IGNORECASE
)


def _option_from_value(value: str, space: AnswerSpace) -> int | None:
    assert space.option_ids is not None
    v = value.strip().strip(_MD).strip()
    m = _OPT_VALUE_RE.match(v)
    if not m:
        return None
    oid = (m.group("bid") or m.group("id")).upper()
    return space.option_ids.get(oid)


def option_value_or_prose(value: str, space: AnswerSpace) -> tuple[str, int | None]:
    """An option id read from a whole value ("B", "(B)", "Option B", "B. <text>"), checked
    against the explicit prose patterns inside it (a second, different id -> ambiguous)."""
    idx = _option_from_value(value, space)
    how, pidx = options_in_prose(value, space)
    if idx is None:
        return how, pidx
    if how == "ambiguous" or (pidx is not None and pidx != idx):
        return "ambiguous", None
    return "found", idx


def options_in_prose(text: str, space: AnswerSpace) -> tuple[str, int | None]:
    """Explicit option ids asserted in free text (``the answer is B``, a line ``(B)``) of a
    letter / option-number space: ``("found", i)``, ``("ambiguous", None)`` or
    ``("no_label", None)``."""
    assert space.option_ids is not None
    found: set[int] = set()
    for m in _OPT_PROSE_RE.finditer(text):
        oid, after = m.group("id"), m.group("after")
        if _NEGATIVE_AFTER.match(after):
            continue
        if not m.group("br"):
            if oid.isdigit():
                if re.match(r"^[.,]\d|^\d", after):
                    continue
            elif oid.islower() or oid in ("A", "I"):
                # an article / pronoun / lower-case letter only counts when nothing word-like follows
                if not _ARTICLE_OK_AFTER.match(after):
                    continue
            elif re.match(r"^[\w'\u2019-]", after):
                continue
        idx = space.option_ids.get(oid.upper())
        if idx is not None:
            found.add(idx)
    for m in _OPT_LINE_RE.finditer(text):
        idx = space.option_ids.get(m.group("id").upper())
        if idx is not None:
            found.add(idx)
    if len(found) == 1:
        return "found", found.pop()
    return ("ambiguous" if found else "no_label"), None


def match_label(value: str, answer_space: Sequence[str]) -> tuple[str | None, str]:
    """Map a decision *value* (e.g. the JSON ``decision`` string) to a label.

    Returns ``(label, "exact")`` for a whole-value match, ``(label, "label_in_value")`` for a label
    found inside the value, or ``(None, reason)`` with reason ``no_label`` / ``negated_label`` /
    ``ambiguous``. See the module docstring for the rules.
    """
    space = compile_space(answer_space)
    return match_value(value, space)


def match_value(value: str, space: AnswerSpace) -> tuple[str | None, str]:
    """:func:`match_label` on an already compiled space."""
    key = _norm(value)
    if key in space.by_norm:
        return space.labels[space.by_norm[key]], "exact"
    if space.option_ids is not None:
        how, idx = option_value_or_prose(value, space)
    else:
        how, idx = search_labels(value, space)
    if idx is not None:
        return space.labels[idx], "label_in_value"
    return None, how
