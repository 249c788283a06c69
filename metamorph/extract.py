"""Decision and evidence extraction for the document-format study (paper §5.1).

The model gets the fixed output instruction of :func:`output_instruction` (identical for every
format) and should answer with one JSON object::

    {"decision": "<one label from the answer space>", "evidence": ["<short quote or fact>", ...]}

Models often do not: they write prose, wrap the JSON in code fences, stop mid-object, use other
keys or quote letters inside sentences. :func:`extract_decision` recovers what can be recovered
*without guessing* and returns an :class:`Extraction` with

* ``decision`` — exactly one element of the answer space (its canonical spelling) or ``None``;
* ``evidence`` — at most :data:`MAX_EVIDENCE` evidence strings (``()`` when unparseable);
* ``parse_status`` — ``ok`` (a clean JSON object whose decision value *is* a label, up to case,
  whitespace and punctuation), ``repaired`` (something had to be recovered: JSON in code fences
  or prose, lenient JSON repairs, a label found inside the decision value or in prose) or
  ``unparseable``;
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
  "length"``: the answer was cut, even if a label is visible), ``empty``, ``no_label``,
  ``negated_label`` (only negated labels, e.g. "not eligible" when "not eligible" is no label),
  ``ambiguous`` (two different labels asserted).

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

import ast
import json
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from metamorph.jsonscan import object_spans
from metamorph.errors import ConfigError

__all__ = [
    "ANSWER_INSTRUCTION",
    "BOTTOM",
    "DECISION_KEYS",
    "EVIDENCE_KEYS",
    "Extraction",
    "MAX_EVIDENCE",
    "ParseStatus",
    "UNPARSEABLE_REASONS",
    "extract_decision",
    "match_label",
    "output_instruction",
]

ParseStatus = Literal["ok", "repaired", "unparseable"]

#: At most this many evidence items are kept (the instruction asks for at most 10).
MAX_EVIDENCE = 10

#: The outcome of an unparseable output in MR1/MR3 comparisons.
BOTTOM = "⊥"

#: Reasons of an ``unparseable`` extraction (exactly one of them).
UNPARSEABLE_REASONS = ("truncated", "empty", "no_label", "negated_label", "ambiguous")

#: JSON keys (case-insensitive) read as the decision, in order of preference.
DECISION_KEYS = ("decision", "answer", "label")
#: JSON keys (case-insensitive) read as the evidence list, in order of preference.
EVIDENCE_KEYS = ("evidence", "evidence_items")
#: Keys of an evidence *object* read as its text, in order of preference.
_EVIDENCE_TEXT_KEYS = ("text", "quote", "evidence", "fact", "item", "content", "value", "snippet",
                       "description", "detail", "source")

#: Finish reasons that mean the output was cut by the token limit (providers normalise to "length").
_TRUNCATED_FINISH = frozenset({"length", "max_tokens", "max_output_tokens"})

#: The fixed output instruction; ``{labels}`` and ``{max_evidence}`` are filled in by
#: :func:`output_instruction`. Nothing in it depends on the document format.
ANSWER_INSTRUCTION = (
    "Answer with a single JSON object and nothing else, in exactly this form:\n"
    '{{"decision": "<one label from the answer space>", '
    '"evidence": ["<short quote or fact from the document>", ...]}}\n'
    "The answer space is: {labels}. The value of \"decision\" must be exactly one of these labels. "
    "\"evidence\" lists at most {max_evidence} short quotes or facts taken from the document that "
    "support the decision."
)


def output_instruction(answer_space: Sequence[str], max_evidence: int = MAX_EVIDENCE) -> str:
    """The fixed JSON output instruction for ``answer_space`` (identical for every format).

    Labels are listed as JSON strings in the given order. Raises ``ConfigError`` for an invalid
    answer space (see :func:`extract_decision`) or ``max_evidence < 1``.
    """
    _compile_space(answer_space)
    if isinstance(max_evidence, bool) or not isinstance(max_evidence, int) or max_evidence < 1:
        raise ConfigError(f"max_evidence must be an integer >= 1, got {max_evidence!r}")
    labels = ", ".join(json.dumps(str(a), ensure_ascii=False) for a in answer_space)
    return ANSWER_INSTRUCTION.format(labels=labels, max_evidence=max_evidence)


@dataclass(frozen=True)
class Extraction:
    """The decision and evidence recovered from one model output.

    Invariants (checked): ``unparseable`` <=> ``decision is None``; an unparseable extraction has
    no evidence; at most :data:`MAX_EVIDENCE` evidence items; an unparseable reason is one of
    :data:`UNPARSEABLE_REASONS`.
    """

    decision: str | None
    evidence: tuple[str, ...]
    parse_status: ParseStatus
    reason: str

    def __post_init__(self) -> None:
        if self.parse_status not in ("ok", "repaired", "unparseable"):
            raise ValueError(f"unknown parse_status {self.parse_status!r}")
        if (self.parse_status == "unparseable") != (self.decision is None):
            raise ValueError("decision must be None exactly when parse_status is 'unparseable'")
        if self.parse_status == "unparseable":
            if self.evidence:
                raise ValueError("an unparseable extraction carries no evidence")
            if self.reason not in UNPARSEABLE_REASONS:
                raise ValueError(f"unparseable reason must be one of {UNPARSEABLE_REASONS}, got {self.reason!r}")
        if len(self.evidence) > MAX_EVIDENCE:
            raise ValueError(f"at most {MAX_EVIDENCE} evidence items, got {len(self.evidence)}")

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


# ------------------------------------------------------------------------------------------
# Tokens and label matching

_TOKEN_RE = re.compile(r"[^\W_]+|[.,;:!?()\[\]{}|/\n]")
#: Words that negate a following label (after contraction expansion: "shouldn't" -> "should not").
_NEGATORS = frozenset({"not", "no", "never", "neither", "nor", "without", "non", "cannot"})
_NEGATOR_BIGRAMS = frozenset({("rather", "than"), ("instead", "of")})
#: Words that end a clause for the negation window (punctuation tokens end it too).
_CLAUSE_WORDS = frozenset({"but", "however", "although", "though", "whereas", "while", "yet", "so",
                           "therefore", "thus", "hence", "because", "since", "and", "or"})
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
class _Space:
    labels: tuple[str, ...]
    tokens: tuple[tuple[str, ...], ...]
    by_norm: dict[str, int]
    partner: dict[int, int]      # negating label i gives label partner[i]
    option_ids: dict[str, int] | None  # upper-cased id -> index, for letter/number spaces


_SPACE_CACHE: dict[tuple[str, ...], _Space] = {}


def _compile_space(answer_space: Sequence[str]) -> _Space:
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
            raise ConfigError(f"answer-space labels {answer_space[by_norm[key]]!r} and {label!r} are "
                              "the same up to case/punctuation")
        by_norm[key] = i
        toks.append(t)
    partner: dict[int, int] = {}
    for i, ti in enumerate(toks):
        for j, tj in enumerate(toks):
            if i == j:
                continue
            # tj = <negation prefix> + ti  -> negated ti is tj; and the reverse.
            if len(tj) > len(ti) and tj[-len(ti):] == ti and len(tj) - len(ti) <= 3 and \
                    _NEGATORS.intersection(tj[: len(tj) - len(ti)]):
                partner.setdefault(i, j)
                partner.setdefault(j, i)
    option_ids = None
    if all(re.fullmatch(r"[A-Za-z]", a.strip()) for a in answer_space) or \
            all(re.fullmatch(r"\d{1,2}", a.strip()) for a in answer_space):
        option_ids = {a.strip().upper(): i for i, a in enumerate(answer_space)}
    space = _Space(tuple(answer_space), tuple(toks), by_norm, partner, option_ids)
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


def _search_labels(text: str, space: _Space) -> tuple[str, int | None]:
    """Search the labels in free text: ``("found", i)`` or ``(reason, None)``."""
    tokens = _tokens(text)
    occ: list[tuple[int, int, int]] = []
    for li, lt in enumerate(space.tokens):
        n = len(lt)
        for s in range(len(tokens) - n + 1):
            if tuple(tokens[s:s + n]) == lt:
                occ.append((s, s + n, li))
    # The complete label wins: drop occurrences inside a strictly longer occurrence.
    kept = [a for a in occ
            if not any(b[0] <= a[0] and a[1] <= b[1] and (b[1] - b[0]) > (a[1] - a[0]) for b in occ)]
    asserted: set[int] = set()
    negated_any = False
    for s, e, li in kept:
        # "no" followed by a word in the same clause is a determiner ("no evidence"), not an answer.
        if space.tokens[li] == ("no",) and e < len(tokens) and _is_word(tokens[e]) \
                and tokens[e] not in _CLAUSE_WORDS:
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
_OPT_LINE_RE = re.compile(r"^[ \t>*_`#-]*(?P<br>[\(\[])?[*_`]*(?P<id>[A-Z]|\d{1,2})[*_`]*(?(br)[\)\]])"
                          r"[ \t]*[.:]?[*_`]*[ \t]*$", re.MULTILINE)
_ARTICLE_OK_AFTER = re.compile(
    r"^\s*(?:$|[.,;:!?)\]*_`\"'\n]|(?:because|since|as|given|due|which|with)\b)", re.IGNORECASE)
_NEGATIVE_AFTER = re.compile(r"^[\s)\]*_`]*(?:is|was|would\s+be)?\s*(?:not|incorrect|wrong|false|unlikely)\b",
                             re.IGNORECASE)


def _option_from_value(value: str, space: _Space) -> int | None:
    assert space.option_ids is not None
    v = value.strip().strip(_MD).strip()
    m = _OPT_VALUE_RE.match(v)
    if not m:
        return None
    oid = (m.group("bid") or m.group("id")).upper()
    return space.option_ids.get(oid)


def _option_value_or_prose(value: str, space: _Space) -> tuple[str, int | None]:
    """An option id read from a whole value ("B", "(B)", "Option B", "B. <text>"), checked
    against the explicit prose patterns inside it (a second, different id -> ambiguous)."""
    idx = _option_from_value(value, space)
    how, pidx = _options_in_prose(value, space)
    if idx is None:
        return how, pidx
    if how == "ambiguous" or (pidx is not None and pidx != idx):
        return "ambiguous", None
    return "found", idx


def _options_in_prose(text: str, space: _Space) -> tuple[str, int | None]:
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
    space = _compile_space(answer_space)
    return _match_value(value, space)


def _match_value(value: str, space: _Space) -> tuple[str | None, str]:
    key = _norm(value)
    if key in space.by_norm:
        return space.labels[space.by_norm[key]], "exact"
    if space.option_ids is not None:
        how, idx = _option_value_or_prose(value, space)
    else:
        how, idx = _search_labels(value, space)
    if idx is not None:
        return space.labels[idx], "label_in_value"
    return None, how


# ------------------------------------------------------------------------------------------
# JSON recovery

_FENCE_RE = re.compile(r"```[ \t]*[\w+-]*[ \t]*\r?\n?(?P<body>.*?)(?:```|\Z)", re.DOTALL)
_MAX_CLOSE_ATTEMPTS = 60


def _lenient_transform(s: str) -> tuple[str, list[str]]:
    """Rewrite JSON-ish text as JSON: single/smart quotes, trailing commas, Python literals,
    unquoted keys, raw control characters in strings. Returns the text and the repairs made.
    An unterminated string is left unterminated (see :func:`_closings`)."""
    out: list[str] = []
    repairs: list[str] = []

    def note(r: str) -> None:
        if r not in repairs:
            repairs.append(r)

    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c in "\"'\u201c\u201d":
            if c == '"':
                close = '"'
            elif c == "'":
                close = "'"
                note("single_quotes")
            else:
                close = "\u201d\u201c"
                note("smart_quotes")
            buf = ['"']
            i += 1
            while i < n and s[i] not in close:
                ch = s[i]
                if ch == "\\" and i + 1 < n:
                    nxt = s[i + 1]
                    if close == "'" and nxt == "'":
                        buf.append("'")
                    else:
                        buf.append(ch + nxt)
                    i += 2
                    continue
                if ch == "\\":  # dangling backslash at the very end (truncated)
                    i += 1
                    continue
                if ch == '"' and close != '"':
                    buf.append('\\"')
                elif ch in "\n\r\t":
                    buf.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch])
                    note("control_characters")
                else:
                    buf.append(ch)
                i += 1
            if i < n:
                buf.append('"')
                i += 1
            out.append("".join(buf))
            continue
        if c == ",":
            j = i + 1
            while j < n and s[j].isspace():
                j += 1
            if j < n and s[j] in "}]":
                note("trailing_comma")
                i += 1
                continue
            out.append(c)
            i += 1
            continue
        if c.isalpha() or c == "_":
            j = i
            while j < n and (s[j].isalnum() or s[j] == "_"):
                j += 1
            word = s[i:j]
            if word in ("True", "False", "None"):
                out.append({"True": "true", "False": "false", "None": "null"}[word])
                note("python_literals")
            elif word in ("true", "false", "null"):
                out.append(word)
            else:
                k = j
                while k < n and s[k] in " \t":
                    k += 1
                if k < n and s[k] == ":":
                    out.append(json.dumps(word))
                    note("unquoted_keys")
                else:
                    out.append(word)
            i = j
            continue
        out.append(c)
        i += 1
    return "".join(out), repairs


def _closings(s: str) -> list[str]:
    """Candidate completions of a truncated JSON text (already through the lenient transform):
    close it at the end, then cut it back at each earlier comma and close it there."""
    stack: list[str] = []
    in_str = esc = False
    cuts: list[tuple[int, list[str]]] = []
    for i, c in enumerate(s):
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
            continue
        if c == '"':
            in_str = True
        elif c in "{[":
            stack.append("}" if c == "{" else "]")
        elif c in "}]":
            if stack:
                stack.pop()
        elif c == ",":
            cuts.append((i, list(stack)))
    if not stack and not in_str:
        return []
    end = s + ('"' if in_str else "")
    end = end.rstrip()
    while end.endswith((",", ":")):
        end = end[:-1].rstrip()
    at_end = [end + "".join(reversed(stack))]
    at_commas = [s[:pos] + "".join(reversed(st)) for pos, st in reversed(cuts[-_MAX_CLOSE_ATTEMPTS:]) if st]
    # A string cut in the middle is a fragment: prefer dropping it (cut at the last comma).
    return at_commas + at_end if in_str else at_end + at_commas


def _loads_lenient(s: str) -> tuple[Any, list[str]] | None:
    """Parse ``s`` as JSON: strictly, then with lenient repairs, then as a Python literal, then by
    closing a truncated object. Returns ``(value, repairs)`` (``[]`` = strict JSON) or ``None``."""
    try:
        return json.loads(s), []
    except (ValueError, RecursionError):
        pass
    fixed, repairs = _lenient_transform(s)
    if repairs:
        try:
            return json.loads(fixed), repairs
        except (ValueError, RecursionError):
            pass
    if len(s) < 100_000:
        try:
            val = ast.literal_eval(s.strip())
            if isinstance(val, (dict, list)):
                return val, ["python_literal"]
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            pass
    for cand in _closings(fixed):
        try:
            return json.loads(cand), [*repairs, "truncated_json_closed"]
        except (ValueError, RecursionError):
            continue
    return None


def _lower_keys(d: dict) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(k, str):
            out.setdefault(k.strip().lower(), v)
    return out


def _has_keys(d: dict) -> bool:
    lk = _lower_keys(d)
    return any(k in lk for k in DECISION_KEYS + EVIDENCE_KEYS)


def _records(obj: Any) -> list[tuple[dict, list[str]]]:
    """The answer objects in a parsed JSON value (a dict, a list of dicts, or one nested dict)."""
    if isinstance(obj, dict):
        if _has_keys(obj):
            return [(obj, [])]
        nested = [v for v in obj.values() if isinstance(v, dict) and _has_keys(v)]
        if len(nested) == 1:
            return [(nested[0], ["nested_json"])]
        return []
    if isinstance(obj, list):
        return [(d, ["json_in_list"]) for d in obj if isinstance(d, dict) and _has_keys(d)]
    return []


def _json_candidates(text: str) -> list[tuple[dict, list[str]]]:
    """Answer objects recovered from ``text`` with the steps taken (``[]`` = clean JSON)."""
    stripped = text.strip()
    if stripped[:1] in "{[":
        got = _loads_lenient(stripped)
        if got is not None:
            recs = [(d, [*steps, *got[1]]) for d, steps in _records(got[0])]
            if recs:
                return recs
    found: list[tuple[dict, list[str]]] = []
    for m in _FENCE_RE.finditer(text):
        body = m.group("body")
        for span in object_spans(body) or ([body.strip()] if body.strip()[:1] == "[" else []):
            got = _loads_lenient(span)
            if got is not None:
                found += [(d, ["json_in_code_fence", *steps, *got[1]]) for d, steps in _records(got[0])]
    if found:
        return found
    for span in object_spans(text):
        got = _loads_lenient(span)
        if got is not None:
            found += [(d, ["json_in_prose", *steps, *got[1]]) for d, steps in _records(got[0])]
    return found


# ------------------------------------------------------------------------------------------
# Decision and evidence from an answer object


def _decision_from_value(v: Any, space: _Space) -> tuple[str | None, str]:
    if v is None:
        return None, "no_label"
    if isinstance(v, bool):
        for cand in (("yes", "true") if v else ("no", "false")):
            if cand in space.by_norm:
                return space.labels[space.by_norm[cand]], "label_in_value"
        return None, "no_label"
    if isinstance(v, (int, float)):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        lab, how = _match_value(str(v), space)  # a number where the instruction asks for a string
        return lab, ("label_in_value" if lab is not None else how)
    if isinstance(v, str):
        return _match_value(v, space)
    if isinstance(v, list):
        results = [_decision_from_value(x, space) for x in v]
        labels = {lab for lab, _ in results if lab is not None}
        if len(labels) == 1:
            return labels.pop(), "label_in_value"
        if len(labels) > 1:
            return None, "ambiguous"
        reasons = [r for _, r in results]
        return None, ("negated_label" if "negated_label" in reasons else
                      "ambiguous" if "ambiguous" in reasons else "no_label")
    if isinstance(v, dict):
        inner = _lower_keys(v)
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
        lk = _lower_keys(item)
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
    lk = _lower_keys(d)
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


def _from_record(d: dict, steps: list[str], space: _Space) -> Extraction:
    lk = _lower_keys(d)
    key = next((k for k in DECISION_KEYS if k in lk), None)
    if key is None:
        return _unparseable("no_label")
    label, how = _decision_from_value(lk[key], space)
    if label is None:
        return _unparseable(how)
    steps = list(steps)
    if how != "exact":
        steps.append("label_in_value")
    evidence = _evidence(d, steps)
    status: ParseStatus = "ok" if not [s for s in steps if s not in ("no_evidence_field",)
                                       and not s.startswith("evidence_capped_")] else "repaired"
    reason = "+".join(["clean_json", *steps] if status == "ok" else steps)
    return Extraction(label, evidence, status, reason)


# ------------------------------------------------------------------------------------------
# Prose

_MARKER_RE = re.compile(
    r"(?i)\b(?:final\s+)?(?:decision|answer|label|verdict|recommendation)\b\s*"
    r"(?:is|would\s+be|will\s+be|should\s+be|:|=|-)\s*[*_`\"']*(?P<seg>[^\n.;]{0,80})")


def _from_prose(text: str, space: _Space) -> Extraction:
    if space.option_ids is not None:
        stripped = text.strip()
        if "\n" in stripped:
            how, idx = _options_in_prose(text, space)
        else:  # a one-line answer is read like a JSON value ("B", "(B)", "B. <option text>")
            how, idx = _option_value_or_prose(stripped, space)
    else:
        idx, how = None, "no_label"
        marked = [_search_labels(m.group("seg"), space) for m in _MARKER_RE.finditer(text)]
        hits = {i for h, i in marked if i is not None}
        if len(hits) == 1:
            idx, how = hits.pop(), "found"
        elif len(hits) > 1:
            how = "ambiguous"
        else:
            how, idx = _search_labels(text, space)
    if idx is None:
        return _unparseable(how)
    return Extraction(space.labels[idx], (), "repaired", "label_in_prose")


# ------------------------------------------------------------------------------------------
# Entry point


def extract_decision(text: str | None, answer_space: Sequence[str],
                     finish_reason: str | None = None) -> Extraction:
    """Recover the decision and evidence of one model output; see the module docstring.

    Args:
        text: the model's completion (``None`` for a call that returned no text).
        answer_space: the allowed labels; the returned decision is one of them, spelled as here.
        finish_reason: the provider's normalised finish reason; ``"length"`` means the output
            was cut by the token limit and makes it ``unparseable`` / ``truncated``.

    Raises:
        ConfigError: the answer space has fewer than two labels, a non-string label, a label
            without letters or digits, or two labels equal up to case and punctuation.
    """
    space = _compile_space(answer_space)
    if finish_reason is not None and str(finish_reason).strip().lower() in _TRUNCATED_FINISH:
        return _unparseable("truncated")
    if text is None or not str(text).strip():
        return _unparseable("empty")
    text = str(text)
    candidates = _json_candidates(text)
    with_decision = [(d, s) for d, s in candidates if any(k in _lower_keys(d) for k in DECISION_KEYS)]
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
