"""The paper's answer extractor (FSI paper §3.5 as the public review reports it): mode ``paper``.

Source: review of arXiv 2607.09665 (``/work/shared/papers/004_*``), axiom ledger: "Task-aware
answer extraction (first letter for MC, boolean map, last number for numeric) defines the
ground-truth parse"; §3.5: "Outputs that cannot be mapped are marked unparseable and scored as
incorrect". The paper's text of §3.5 is not available; where the summary is ambiguous the reading
taken is stated here (see also :mod:`metamorph.studies.wrapper_sensitivity.extract`).

Where the answer is read (the *scope*)
--------------------------------------
Reading taken: the wrapper's output contract says where the answer is, and the task-aware rule
reads inside it. The paper measures *schema compliance* (PSI) and reports wrapper-specific parse
collapses (Phi-4 under JSON: parseability 2.8%), which a rule run on the whole reply could not
produce; so:

* ``plain`` — the whole reply;
* ``json`` — the ``answer`` value of a JSON object (found as in ``normalized``: in fences, in
  prose, key case); no object with an ``answer`` key -> unparseable (``invalid_json`` /
  ``no_answer``);
* ``structured`` / ``deliberate`` — the rest of the ``Answer:`` / ``Final answer:`` line (found as
  in ``normalized``); the ``deliberate`` scratchpad is never read; no such line -> ``no_answer``;
* ``structured_delim`` — the text between ``<answer>`` tags (as in ``normalized``).

A slot value that normalises as a whole (the ``normalized`` rules) is read exactly so, with the
``normalized`` reason; on any reply the ``normalized`` mode reads, ``paper`` returns the same
extraction (``paper`` ⊇ ``normalized``). Otherwise the task-aware rule reads the scope:

* ``choice`` — the **first** choice label standing alone in the scope (``D. Most
  multicellular ...`` -> D; ``The correct answer is B`` -> B). A label is never taken out of a
  word or a larger number; ``A`` / ``I`` / a lower-case letter not in brackets only when nothing
  word-like follows (``A 43-year-old`` is the article); a label the text rejects (``A is
  incorrect``, ``not (A)``, ``rather than C``) is skipped; LaTeX marks around it are removed
  (``$\\boxed{C}$``, ``\\(B\\)``, ``\\textbf{D}``). ``B or C`` is B (the paper's rule is "first").
* ``boolean`` — the boolean map on the **first** boolean word (``true`` / ``yes`` -> true,
  ``false`` / ``no`` -> false; ``True. The four seasons ...`` -> true), skipping a negated word
  (``not true``) and a modifier (``no evidence``, ``false positive``).
* ``numeric`` — the **last** number of the scope (``The answer to this question is 18.`` -> 18),
  with the free-text number rules of ``lenient`` (no number out of an identifier, a fraction,
  a date; LaTeX spacing ``9{,}500`` undone). A justification after the answer therefore wins
  (``18, because 3 x 6`` -> 6): that is the paper's rule, kept as such.

Truncated replies (``finish_reason`` ``length``)
------------------------------------------------
Reading taken: a reply cut by the token limit is read when its answer is
*visible*, i.e. when nothing the cut removed could change what the rule reads:

* a slot that ended before the cut (a closed JSON object or tag, an ``Answer:`` /
  ``Final answer:`` line followed by a line break) is read as above;
* a slot cut inside (an unclosed ``<answer>`` tag, a JSON object cut after its ``answer`` value
  — the value a closed string, a boolean or a number followed by ``,`` / ``}`` / a space) or the
  ``plain`` reply: the *first* label / boolean word counts only when the clause it stands in
  ended before the cut (a ``.`` ``,`` ``;`` ``:`` ``!`` ``?`` ``)`` ``]``, the ``<`` of a tag or a
  line break follows it) —
  so ``D. Most multicellular orga`` is D; the *last* number is never read from a cut scope
  (the next token could be a later number): a number counts only after an explicit answer
  pattern (``the answer is``, ``answer to this question is``, ``Answer:``, ``answer =``,
  ``####``, ``\\boxed{}``) when something other than a digit or a decimal mark follows it;
* otherwise the reply is ``truncated`` (unparseable).

A slot the model itself left broken (an unclosed tag or an invalid object in a reply that was
*not* cut) is not repaired: that is a compliance failure.

Reason codes: the ``normalized`` ones when the slot value normalises, else
``paper_first_label`` / ``paper_boolean_word`` / ``paper_last_number`` /
``paper_answer_phrase`` (a number after an answer pattern in a cut scope) or ``paper_cut_slot``
(the value came from a slot cut by the token limit). Unparseable: the ``normalized`` reason, or
``truncated`` when the reply was cut and no answer is visible, or ``ambiguous`` when two slots
read differently.
"""

from __future__ import annotations

import re
from typing import Any

from metamorph.studies.wrapper_sensitivity.answers import (
    COPULA,
    FRAC_RE,
    MARKS,
    NUM_TOKEN_RE,
    AnswerSpec,
    normalized_value,
    prep_text,
)
from metamorph.studies.wrapper_sensitivity.lenient import (
    BOOL_WORD_RE,
    BOXED_RE,
    NEGATED_BEFORE,
    is_modifier,
    label_at,
    number_of,
    slot_text,
    unwrap_math,
)
from metamorph.studies.wrapper_sensitivity.slots import (
    FINAL_NORM_RE,
    NEXT_LINE_RE,
    STRUCT_NORM_RE,
    TAG_NORM_RE,
    QAExtraction,
    json_slots,
    parsed,
    read_slots,
    tag_values,
    unparseable,
)

__all__ = ["paper_extract"]

#: A candidate choice label: a single letter or a one/two-digit option number standing alone.
_LABEL_TOKEN_RE = re.compile(r"(?<![\w'\u2019])(?P<id>[A-Za-z]|[0-9]{1,2})(?![\w'\u2019])")

#: What must follow a label / boolean word in a cut scope: the clause ended before the cut.
_CLAUSE_END_RE = re.compile(r"[^\n.,;:!?)\]<]*[\n.,;:!?)\]<]")

#: Explicit answer patterns before a number (read in a cut scope only).
_NUM_PHRASE_RE = re.compile(
    r"(?i:\banswer\b(?:\s+to\s+(?:this|the)\s+(?:question|problem))?" + MARKS + COPULA + r"|####)"
    r"[ \t*_`\"'$\\(]*"
)

#: After a number in a cut scope: settled unless a digit or a decimal mark + digit could follow.
_NUM_SETTLED_RE = re.compile(r"[.,]?[^\d.,]")

#: ``"answer": <value>`` of a JSON (or Python-literal) object cut by the token limit.
_PARTIAL_JSON_RE = re.compile(
    r"""(?P<q>["'])answer(?P=q)\s*:\s*(?:"(?P<dq>[^"\\\n]*)"|'(?P<sq>[^'\\\n]*)'"""
    r"""|(?P<lit>true|false|True|False)\b|(?P<num>-?[0-9][0-9,]*(?:\.[0-9]+)?)(?=\s*[,}\s]))""",
    re.IGNORECASE,
)


def _prep_scope(scope: str) -> str:
    return unwrap_math(prep_text(scope))


def _first_label(scope: str, spec: AnswerSpec, complete: bool) -> str | None:
    s = _prep_scope(scope)
    for m in _LABEL_TOKEN_RE.finditer(s):
        start = m.start("id")
        bracketed = start > 0 and s[start - 1] in "(["
        label = label_at(s, m, spec, bracketed=bracketed)
        if label is None:
            continue
        if not complete and not _CLAUSE_END_RE.match(s, m.end()):
            return None  # the clause was cut: what follows could reject or extend it
        return label
    return None


def _first_boolean(scope: str, complete: bool) -> str | None:
    s = _prep_scope(scope)
    for m in BOOL_WORD_RE.finditer(s):
        w = m.group("w").casefold()
        if NEGATED_BEFORE.search(s[max(0, m.start() - 16) : m.start()]):
            continue
        if not complete and not _CLAUSE_END_RE.match(s, m.end()):
            return None
        if w != "yes" and is_modifier(s, m.end()):
            continue
        return "true" if w in ("true", "yes") else "false"
    return None


def _last_number(scope: str) -> str | None:
    cleaned = FRAC_RE.sub(" ", _prep_scope(scope))
    numbers = [v for v in map(number_of, NUM_TOKEN_RE.finditer(cleaned)) if v is not None]
    return numbers[-1] if numbers else None


def _phrase_number(scope: str) -> str | None:
    """The number after the first explicit answer pattern whose number is settled (cut scope)."""
    s = _prep_scope(scope)
    boxed = [(m.start(), m.group("body")) for m in BOXED_RE.finditer(s)]
    phrases = [(m.end(), None) for m in _NUM_PHRASE_RE.finditer(s)]
    for pos, body in sorted(boxed + phrases, key=lambda t: t[0]):
        if body is not None:
            v = _last_number(body)
            if v is not None:
                return v
            continue
        n = NUM_TOKEN_RE.match(s, pos)
        if n and _NUM_SETTLED_RE.match(s, n.end()):
            return number_of(n)
    return None


def _rule(scope: str, spec: AnswerSpec, complete: bool) -> tuple[str | None, str]:
    """The task-aware rule on a scope: ``(value, reason)`` or ``(None, "")``."""
    if spec.kind == "choice":
        return _first_label(scope, spec, complete), "paper_first_label"
    if spec.kind == "boolean":
        return _first_boolean(scope, complete), "paper_boolean_word"
    if complete:
        return _last_number(scope), "paper_last_number"
    return _phrase_number(scope), "paper_answer_phrase"


def _line_slots(text: str, rx: re.Pattern[str], truncated: bool) -> list[tuple[str, bool]]:
    """``(value, complete)`` of key lines (a bare key takes the next line); in a cut reply a line
    is complete when a line break follows it."""
    out = []
    for m in rx.finditer(text):
        v, end = m.group(1), m.end()
        if not v.strip(" \t*_`"):
            nm = NEXT_LINE_RE.match(text, m.end())
            nxt = nm.group("line").strip() if nm else ""
            if nxt and not rx.match(nxt):
                v, end = nxt, nm.end()
        out.append((v, not truncated or text[end : end + 2].lstrip("\r").startswith("\n")))
    return out


def _slots(text: str, family: str, truncated: bool) -> tuple[list[tuple[Any, bool, bool]], str]:
    """``([(value, complete, cut_slot)], missing_reason)`` of the family's answer slots."""
    if family == "plain":
        return [(text.strip(), not truncated, False)], ""
    if family == "json":
        values, _, missing = json_slots(text, strict=False)
        if values:
            return [(v, True, False) for v in values], ""
        if truncated:
            m = _PARTIAL_JSON_RE.search(text)
            if m:
                v = next(g for g in (m.group("dq"), m.group("sq"), m.group("lit"), m.group("num")) if g is not None)
                return [(v, True, True)], ""
        return [], missing
    if family == "structured_delim":
        values, open_end = tag_values(text, TAG_NORM_RE)
        if values:
            return [(v, True, False) for v in values], ""
        if truncated and open_end is not None:
            return [(text[open_end:], False, True)], ""
        return [], "no_answer"
    rx = STRUCT_NORM_RE if family == "structured" else FINAL_NORM_RE
    found = _line_slots(text, rx, truncated)
    return [(v, c, False) for v, c in found], ("" if found else "no_answer")


def paper_extract(text: str, family: str, spec: AnswerSpec, truncated: bool) -> QAExtraction:
    """Mode ``paper`` on a non-empty reply (see the module docstring). ``truncated``: the reply
    was cut by the token limit."""
    if not truncated:
        normalized = read_slots(text, family, spec, strict=False)
        if normalized.parseable or normalized.reason == "ambiguous":
            return normalized
        fail = normalized.reason
    else:
        fail = "truncated"
    slots, missing = _slots(text, family, truncated)
    if not slots:
        return unparseable(fail if truncated else missing)
    hits: list[tuple[str, str]] = []
    for v, complete, cut in slots:
        if complete:
            value, step = normalized_value(v, spec)
            if value is not None:
                hits.append((value, "paper_cut_slot" if cut else (step or "ok")))
                continue
        value, reason = _rule(slot_text(v), spec, complete)
        if value is not None:
            hits.append((value, "paper_cut_slot" if cut else reason))
    if not hits:
        return unparseable(fail)
    if len({v for v, _ in hits}) > 1:
        return unparseable("ambiguous")
    return parsed(hits[0][0], hits[0][1])
