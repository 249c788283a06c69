"""Finding JSON objects inside model output (code fences, prose around them, truncation)."""

from __future__ import annotations


def object_spans(s: str) -> list[str]:
    """Top-level ``{...}`` substrings of ``s`` in order, string-aware (braces inside JSON strings,
    and inside single-quoted strings after ``{ [ , :``, do not count); an unclosed one runs to the end."""
    spans = []
    i, n = 0, len(s)
    while i < n:
        if s[i] != "{":
            i += 1
            continue
        depth, j, quote, esc, prev = 0, i, None, False, "{"
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
                    break
            if not quote and not c.isspace():
                prev = c
            j += 1
        spans.append(s[i:j + 1])
        i = j + 1
    return spans
