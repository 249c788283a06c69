"""The Description Changes operator's rule-based rewording of one step (WorkflowPerturb §3.1):
:func:`paraphrase_text` with its synonym table :data:`VERB_SYNONYMS`. Deterministic, no model.
"""

from __future__ import annotations

import re

from metamorph.studies.workflow_perturb.workflows import normalize_text

__all__ = [
    "VERB_SYNONYMS",
    "paraphrase_text",
]

#: Leading imperative verbs and their replacements (lower case; the original capitalisation is kept).
VERB_SYNONYMS: dict[str, str] = {
    "go": "head",
    "take": "grab",
    "put": "place",
    "place": "set",
    "open": "pull open",
    "close": "shut",
    "click": "press",
    "tap": "press",
    "select": "choose",
    "choose": "pick",
    "find": "locate",
    "locate": "find",
    "check": "verify",
    "verify": "confirm",
    "confirm": "verify",
    "make": "create",
    "create": "make",
    "get": "obtain",
    "buy": "purchase",
    "use": "utilize",
    "add": "include",
    "remove": "take out",
    "clean": "wash",
    "heat": "warm",
    "cool": "chill",
    "turn": "switch",
    "start": "begin",
    "begin": "start",
    "run": "execute",
    "execute": "run",
    "write": "draft",
    "draft": "write",
    "calculate": "compute",
    "compute": "calculate",
    "determine": "figure out",
    "decide": "determine",
    "identify": "pinpoint",
    "cut": "slice",
    "chop": "dice",
    "mix": "combine",
    "retrieve": "fetch",
    "fetch": "retrieve",
    "contact": "reach out to",
    "collect": "gather",
    "gather": "collect",
    "build": "construct",
    "book": "reserve",
    "review": "go over",
    "cook": "prepare",
    "give": "hand",
    "consider": "think about",
    "avoid": "steer clear of",
    "ensure": "make sure",
    "stay": "remain",
    "try": "attempt",
    "navigate": "go",
    "type": "enter",
    "install": "set up",
    "submit": "send in",
    "practice": "rehearse",
}

_LEADING_CLAUSE = re.compile(
    r"^(If|When|Once|After|Before|While|In|For|During|With|Using|To)\b([^,]+),\s*(.+?)([.!?]?)$",
    re.IGNORECASE | re.DOTALL,
)


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def _low(s: str) -> str:
    """Lower-case the first letter unless the first word looks like an acronym or a name (``VLC``)."""
    word = s.split(" ", 1)[0]
    return s[:1].lower() + s[1:] if len(word) > 1 and word[1:].islower() or len(word) == 1 else s


def paraphrase_text(text: str) -> str:
    """Deterministic rule-based rewording of one step (the Description Changes operator's core).

    The first rule that applies:

    1. synonym: a leading imperative verb in :data:`VERB_SYNONYMS` followed by a space is
       replaced (``take pillow 1 from sofa 1`` → ``grab pillow 1 from sofa 1``; ``Click File`` →
       ``Press File``);
    2. leading clause moved to the end: ``If/When/Once/After/Before/While/In/For/During/With/Using/To
       X, Y`` → ``Y x`` (``In Jewish Law, precedence is given`` → ``Precedence is given in Jewish Law``);
    3. otherwise ``Next, `` is prefixed (first letter lower-cased unless the first word looks
       like a name or an acronym: ``Next, cook the spaghetti``, ``Next, VLC opens``).

    The result always differs from ``text`` after :func:`normalize_text` (case, spacing and final
    punctuation ignored); rule 3 is used when an earlier one would not change it. Action syntax such
    as ``search[...]`` or ``click[...]`` is never split (rule 1 needs a space after the verb).
    """
    s = text.strip()
    m = re.match(r"^([A-Za-z]+)(\s.*)$", s, re.DOTALL)
    candidates = []
    if m and m.group(1).lower() in VERB_SYNONYMS:
        new = VERB_SYNONYMS[m.group(1).lower()]
        candidates.append((_cap(new) if m.group(1)[0].isupper() else new) + m.group(2))
    m = _LEADING_CLAUSE.match(s)
    if m and m.group(2).strip() and m.group(3).strip():
        candidates.append(f"{_cap(m.group(3).strip())} {_low(m.group(1) + m.group(2)).strip()}{m.group(4)}")
    candidates.append(f"Next, {_low(s)}")
    return next(c for c in candidates if normalize_text(c) != normalize_text(s))
