"""Finding JSON objects inside model output (code fences, prose around them, truncation).

The one scanner every study that reads JSON replies uses: objects are found string-aware, so
braces or code fences inside a JSON string value neither split nor end an object.
"""

from __future__ import annotations

import re

__all__ = [
    "fence_bodies",
    "object_spans",
]


def _object_end(s: str, i: int) -> int:
    """Index of the ``}`` closing the object that opens at ``s[i] == "{"`` (string-aware), or
    ``len(s) - 1`` when it is never closed."""
    depth, j, n, quote, esc, prev = 0, i, len(s), None, False, "{"
    while j < n:
        c = s[j]
        if quote:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == quote:
                quote = None
                prev = c
        elif c == '"' or (c == "'" and prev in "{[,:"):
            quote = c
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return j
        if not quote and not c.isspace():
            prev = c
        j += 1
    return n - 1


def object_spans(s: str) -> list[str]:
    """Top-level ``{...}`` substrings of ``s`` in order, string-aware (braces inside JSON strings,
    and inside single-quoted strings after ``{ [ , :``, do not count); an unclosed one runs to the end."""
    spans = []
    i = s.find("{")
    while i >= 0:
        j = _object_end(s, i)
        spans.append(s[i : j + 1])
        i = s.find("{", j + 1)
    return spans


_FENCE_OPEN_RE = re.compile(r"```[ \t]*[\w+-]*[ \t]*\r?\n?")

_LEAD_RE = re.compile(r"\s*")


def fence_bodies(text: str) -> list[str]:
    """Bodies of the ```` ``` ```` code fences of ``text``, in order (an opening fence may name a
    language: ```` ```json ````).

    A body that starts with ``{`` (after whitespace) is the JSON object that starts there, found
    string-aware (:func:`object_spans`), so a code fence *inside a JSON string value* (an evidence
    quote of a document that holds ```` ``` ````, a ``"why"`` that shows code) does not end the
    fence; the closing fence is the first one after the object, and an object never closed runs to
    the end of the text. Any other body runs to the next fence (or the end of the text).
    """
    bodies: list[str] = []
    pos = 0
    while True:
        m = _FENCE_OPEN_RE.search(text, pos)
        if m is None:
            return bodies
        start = _LEAD_RE.match(text, m.end()).end()
        if text.startswith("{", start):
            end = _object_end(text, start) + 1
            bodies.append(text[start:end])
            close = text.find("```", end)
        else:
            close = text.find("```", m.end())
            bodies.append(text[m.end() :] if close < 0 else text[m.end() : close])
        pos = len(text) if close < 0 else close + 3
