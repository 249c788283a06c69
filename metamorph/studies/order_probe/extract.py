"""Parse a reply into the recovered expression and its explanation (paper §4.1 "exact match";
the release has no parser — release notes §2 — so these rules are this project's).

Rules, in order:

1. No text (``None`` or only whitespace) → ``empty_reply``.
2. NFKC-normalize (fullwidth ASCII → ASCII, U+3000 → space, fullwidth colon → ``:``).
3. Lines: the *answer line* is the first line that starts with an expression label
   (:data:`EXPRESSION_LABELS`, e.g. ``成语:``, ``四字熟語:``, ``사자성어:``, ``Answer:``); without
   a labelled line, the first non-empty line that is not a reasoning line (``分析:`` …).
   The *explanation* is the text after an explanation label (:data:`EXPLANATION_LABELS`) on
   any later line, else the next non-empty line after the answer line, else empty.
4. On the answer line, after its label is removed, every character that is not a unit of the
   language's script (whitespace incl. U+3000, quotes, brackets, ASCII and fullwidth
   punctuation, Latin letters, digits) separates tokens; a *candidate* is a token of exactly
   four units. A label word anywhere on the line (``사자성어``, ``四字熟語`` and ``四字成語`` are
   themselves four units) is not a candidate — the local model often repeats the label
   mid-line (``말면: 사자성어: 골상쟁육``).
   For the Chinese and Japanese scripts (``zh_cn``, ``zh_tw``, ``ja``), whitespace between
   *single* units is layout, not a separator: four single units separated only by whitespace
   (``画 蛇 添 足``, ``画　蛇　添　足``) are read as the four-unit token ``画蛇添足`` before
   candidates are taken (:func:`join_spaced_units`); a run of three or five such units, or
   multi-unit tokens (``画蛇 添足``), are left as they are. Korean keeps the release's rules: a
   space separates Hangul words, so ``화 사 첨 족`` is four one-syllable tokens, no candidate.
5. Exactly one distinct candidate (it may repeat) → parsed. No candidate → ``no_candidate``
   (the line has script tokens but none of four units) or ``malformed`` (no script text at all);
   two or more different candidates → ``several_candidates``. A failed parse is never turned
   into a value: ``expression`` is ``None`` and the reply counts as incorrect.

Traditional and Simplified forms are NOT equated: :func:`is_correct` compares the parsed
expression with the gold exactly, unless a character mapping (``script_map``, e.g. a t2s table)
is configured, which is then applied to both sides.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass

from metamorph.studies.order_probe.sources import is_unit
from metamorph.studies.order_probe.vocab import PARSE_REASONS, SPACELESS

__all__ = [
    "EXPLANATION_LABELS",
    "EXPRESSION_LABELS",
    "PARSE_REASONS",
    "REASONING_LABELS",
    "SPACELESS",
    "Parsed",
    "is_correct",
    "join_spaced_units",
    "normalize",
    "parse_reply",
    "tokens",
]

#: labels of the expression line (NFKC forms; compared case-insensitively, colon optional)
EXPRESSION_LABELS = (
    "成语",
    "成語",
    "四字熟語",
    "熟語",
    "四字成語",
    "사자성어",
    "성어",
    "答案",
    "答え",
    "정답",
    "answer",
    "expression",
    "idiom",
)
#: labels of the explanation line
EXPLANATION_LABELS = ("解释", "解釋", "含义", "含義", "意味", "説明", "뜻", "의미", "설명", "explanation", "meaning")
#: labels of a reasoning line (chain-of-thought), never the answer line
REASONING_LABELS = ("分析", "思考", "推理", "분석", "생각", "analysis", "reasoning", "thinking process")


def _label_re(labels) -> re.Pattern:
    alts = "|".join(re.escape(x) for x in sorted(labels, key=len, reverse=True))
    return re.compile(rf"^\s*[\W_]*\s*(?:{alts})\s*[:：]?\s*", re.IGNORECASE)


_LABEL_WORDS = {w.lower() for w in (*EXPRESSION_LABELS, *EXPLANATION_LABELS, *REASONING_LABELS)}
_EXPR_RE, _EXPL_RE, _REASON_RE = (
    _label_re(EXPRESSION_LABELS),
    _label_re(EXPLANATION_LABELS),
    _label_re(REASONING_LABELS),
)


@dataclass(frozen=True)
class Parsed:
    """The parse of one reply.

    Attributes:
        expression: the unique four-unit candidate, or ``None`` when the parse failed.
        explanation: the explanation text (NFKC, stripped; ``""`` when absent).
        reason: one of :data:`PARSE_REASONS` (``ok`` iff ``expression`` is not ``None``).
        candidates: the distinct candidates found on the answer line, in order.
    """

    expression: str | None
    explanation: str
    reason: str
    candidates: tuple[str, ...]


def normalize(text: str) -> str:
    """NFKC, with every line's surrounding whitespace (incl. U+3000) stripped."""
    return "\n".join(line.strip() for line in unicodedata.normalize("NFKC", text).splitlines())


def tokens(text: str, language: str) -> list[str]:
    """Maximal runs of ``language``'s units in ``text`` (everything else separates)."""
    out, cur = [], []
    for ch in text:
        if is_unit(ch, language):
            cur.append(ch)
        elif cur:
            out.append("".join(cur))
            cur = []
    if cur:
        out.append("".join(cur))
    return out


def join_spaced_units(text: str, language: str) -> str:
    """``text`` with every maximal run of exactly four single units separated only by whitespace
    joined into one four-unit token (``"成语: 画 蛇 添 足"`` → ``"成语: 画蛇添足"``), for the
    :data:`SPACELESS` languages; other languages' text is returned unchanged (module doc, rule 4)."""
    if language not in SPACELESS:
        return text
    spans = [m.span() for m in re.finditer(r"\S+|\s+", text)]
    singles = [(a, b) for a, b in spans if b - a == 1 and is_unit(text[a], language)]
    out, runs, run = [], [], []
    for a, b in singles:  # group single units whose gap is whitespace only
        if run and text[run[-1][1] : a].strip() == "" and text[run[-1][1] : a] != "":
            run.append((a, b))
        else:
            runs.append(run)
            run = [(a, b)]
    runs.append(run)
    pos = 0
    for r in runs:
        if len(r) != 4:
            continue
        out.append(text[pos : r[0][0]])
        out.append("".join(text[a] for a, _ in r))
        pos = r[-1][1]
    out.append(text[pos:])
    return "".join(out)


def parse_reply(text: str | None, language: str) -> Parsed:
    """Parse one reply (module doc). ``language`` picks the unit script (zh_cn, zh_tw, ja, ko)."""
    if text is None or not text.strip():
        return Parsed(None, "", "empty_reply", ())
    lines = [ln for ln in normalize(text).split("\n")]
    idx = next((i for i, ln in enumerate(lines) if _EXPR_RE.match(ln)), None)
    if idx is None:
        idx = next(
            (i for i, ln in enumerate(lines) if ln and not _REASON_RE.match(ln) and not _EXPL_RE.match(ln)), None
        )
    if idx is None:  # only reasoning / explanation lines
        answer, idx = "", -1
    else:
        answer = _EXPR_RE.sub("", lines[idx], count=1)
    explanation = ""
    for ln in lines[idx + 1 :]:
        if _EXPL_RE.match(ln):
            explanation = _EXPL_RE.sub("", ln, count=1).strip()
            break
    else:
        rest = [ln for ln in lines[idx + 1 :] if ln and not _REASON_RE.match(ln)]
        explanation = rest[0] if rest else ""
    toks = tokens(join_spaced_units(answer, language), language)
    cands = tuple(dict.fromkeys(t for t in toks if len(t) == 4 and t.lower() not in _LABEL_WORDS))
    if len(cands) == 1:
        return Parsed(cands[0], explanation, "ok", cands)
    if len(cands) > 1:
        return Parsed(None, explanation, "several_candidates", cands)
    return Parsed(None, explanation, "no_candidate" if toks else "malformed", ())


def is_correct(expression: str | None, gold: str, script_map: Mapping[str, str] | None = None) -> bool:
    """Exact match of a parsed expression with the gold; ``None`` (a failed parse) is incorrect.
    With ``script_map`` (character → character), both sides are mapped first."""
    if expression is None:
        return False
    if script_map:
        expression = "".join(script_map.get(c, c) for c in expression)
        gold = "".join(script_map.get(c, c) for c in gold)
    return expression == gold
