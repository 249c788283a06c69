"""Recovering a JSON answer object from a reply, for the document-format study's extraction.

Finds candidate objects in code fences, in prose and in lists (:func:`json_candidates`), and
parses them leniently (:func:`_loads_lenient`): trailing commas, single or smart quotes, Python
literals, unquoted keys, control characters, and an object cut off at ``max_tokens`` (closed,
its unfinished last string dropped). Each repair is reported by name so that the extraction's
``reason`` says what was done.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from metamorph.jsonscan import fence_bodies, object_spans

__all__ = ["DECISION_KEYS", "EVIDENCE_KEYS", "json_candidates", "lower_keys", "repeated_values"]

#: JSON keys (case-insensitive) read as the decision, in order of preference.
DECISION_KEYS = ("decision", "answer", "label")

#: JSON keys (case-insensitive) read as the evidence list, in order of preference.
EVIDENCE_KEYS = ("evidence", "evidence_items")


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


class _Repeats(dict):
    """A JSON object giving a key more than once (compared stripped and lower-cased, as
    :func:`lower_keys` reads keys): ``repeats`` maps each such key to all its values, in order.
    A plain dict would keep one of them silently (the last, or the first spelling). (Not named
    ``values``: that would hide :meth:`dict.values` of the object.)"""

    repeats: dict[str, list[Any]]


def _pairs(pairs: list[tuple[Any, Any]]) -> dict:
    """``object_pairs_hook`` of :func:`_loads_lenient`: a dict, or a :class:`_Repeats` when a key repeats."""
    obj = dict(pairs)
    seen: dict[str, list[Any]] = {}
    for k, v in pairs:
        if isinstance(k, str):
            seen.setdefault(k.strip().lower(), []).append(v)
    if all(len(vs) == 1 for vs in seen.values()):
        return obj
    out = _Repeats(obj)
    out.repeats = {k: vs for k, vs in seen.items() if len(vs) > 1}
    return out


def repeated_values(d: dict, key: str) -> list[Any]:
    """Every value ``d`` gave the (lower-case) ``key`` when the reply's object gave it more than
    once (``{"decision": "A", "decision": "B"}``, or ``"decision"`` and ``"Decision"``); ``[]``
    when it gave it once."""
    return list(d.repeats.get(key, [])) if isinstance(d, _Repeats) else []


def _loads(s: str) -> Any:
    return json.loads(s, object_pairs_hook=_pairs)


def _loads_lenient(s: str) -> tuple[Any, list[str]] | None:
    """Parse ``s`` as JSON: strictly, then with lenient repairs, then as a Python literal, then by
    closing a truncated object. Returns ``(value, repairs)`` (``[]`` = strict JSON) or ``None``."""
    try:
        return _loads(s), []
    except (ValueError, RecursionError):
        pass
    fixed, repairs = _lenient_transform(s)
    if repairs:
        try:
            return _loads(fixed), repairs
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
            return _loads(cand), [*repairs, "truncated_json_closed"]
        except (ValueError, RecursionError):
            continue
    return None


def lower_keys(d: dict) -> dict[str, Any]:
    """``d`` with its string keys stripped and lower-cased (the first of colliding keys kept;
    non-string keys dropped)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(k, str):
            out.setdefault(k.strip().lower(), v)
    return out


def _has_keys(d: dict) -> bool:
    lk = lower_keys(d)
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


def json_candidates(text: str) -> list[tuple[dict, list[str]]]:
    """Answer objects recovered from ``text`` with the steps taken (``[]`` = clean JSON)."""
    stripped = text.strip()
    if stripped[:1] in "{[":
        got = _loads_lenient(stripped)
        if got is not None:
            recs = [(d, [*steps, *got[1]]) for d, steps in _records(got[0])]
            if recs:
                return recs
    found: list[tuple[dict, list[str]]] = []
    for body in fence_bodies(text):
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
