"""Renderers T(C_x, f): one record, four surface forms (paper §4.2).

Each renderer turns a :class:`~metamorph.studies.format_robustness.records.SourceInstance` into document bytes and has a
parser that recovers the ordered (field, value-text) pairs, so the three constraints of §4.2
can be checked on every instance:

* **semantic invariance** — ``parse(render(x)) == [(k, canonical_text(v)) for k, v in x.fields]``
  for every format (:func:`check_semantic_invariance`);
* **representational faithfulness** — CSV puts each field in its own cell (a header row of field
  names and one data row), JSON is one object, MD is a two-column table, TXT is ``field: value``
  lines;
* **instruction isolation** — the task prompt P is never written into the document; it travels
  in the chat message and is identical for every format.

A field value may hold any text, including every Unicode line break (:data:`LINE_BREAKS`,
also ``\\r\\n``): TXT and MD escape them (:func:`_one_line`), JSON escapes them as ``\\u``
sequences, CSV quotes the cell; every parser gives the exact value back.

The registry (:data:`RENDERERS`, :func:`register_renderer`) can be extended with more formats.
A renderer's ``version`` is part of every cache key that used it (``GenerationRequest.
renderer_version``): any change of a renderer's output must bump it, so the cache never serves
an old reply to a new document (tests/format_robustness/test_renderers.py pins the output of
each version on a fixture).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Callable

from metamorph.datasets import csv_reader
from metamorph.errors import InputError
from metamorph.providers.base import sha256_hex
from metamorph.studies.format_robustness.records import SourceInstance, canonical_text
from metamorph.studies.format_robustness.vocab import FORMATS

__all__ = [
    "DEFAULT_FORMATS",
    "LINE_BREAKS",
    "RENDERERS",
    "RenderedDocument",
    "Renderer",
    "check_semantic_invariance",
    "expected_pairs",
    "parse_csv",
    "parse_json",
    "parse_md",
    "parse_txt",
    "register_renderer",
    "render",
    "render_csv",
    "render_json",
    "render_md",
    "render_txt",
]


@dataclass(frozen=True)
class Renderer:
    """A document format: ``render`` -> str, ``parse`` -> ordered (field, value-text) pairs."""

    name: str
    media_type: str
    extension: str
    version: str
    render: Callable[[SourceInstance], str]
    parse: Callable[[str], list[tuple[str, str]]]


@dataclass(frozen=True)
class RenderedDocument:
    """A rendered document with its provenance (a row of ``rendered_documents``)."""

    instance_id: str
    dataset: str
    format: str
    media_type: str
    renderer_version: str
    text: str

    @property
    def content(self) -> bytes:
        return self.text.encode("utf-8")

    @property
    def sha256(self) -> str:
        return sha256_hex(self.content)

    @property
    def filename(self) -> str:
        return f"{self.instance_id}.{RENDERERS[self.format].extension}"


#: Every character :meth:`str.splitlines` treats as a line boundary (``\r\n`` is CR + LF).
#: TXT and MD are line-oriented, so none of them may appear raw inside a value.
LINE_BREAKS = ("\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")

_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r"}
_ESCAPES.update({b: f"\\u{ord(b):04x}" for b in LINE_BREAKS if b not in _ESCAPES})


def _one_line(value: str) -> str:
    """Escape ``value`` onto one line: ``\\`` -> ``\\\\``, LF -> ``\\n``, CR -> ``\\r`` and every
    other line break of :data:`LINE_BREAKS` (VT, FF, FS, GS, RS, NEL, LS, PS) -> ``\\uXXXX``
    (4 lowercase hex digits). :func:`_undo_one_line` inverts it exactly."""
    return "".join(_ESCAPES.get(c, c) for c in value)


def _undo_one_line(value: str) -> str:
    out, i = [], 0
    while i < len(value):
        c = value[i]
        if c == "\\" and i + 1 < len(value):
            nxt = value[i + 1]
            if (
                nxt == "u"
                and re.fullmatch(r"[0-9a-f]{4}", value[i + 2 : i + 6])
                and chr(int(value[i + 2 : i + 6], 16)) in LINE_BREAKS
            ):
                out.append(chr(int(value[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append({"n": "\n", "r": "\r", "\\": "\\", "|": "|"}.get(nxt, "\\" + nxt))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


# --- TXT: "field: value" lines -------------------------------------------------------------
def render_txt(x: SourceInstance) -> str:
    return "".join(f"{k}: {_one_line(canonical_text(v))}\n" for k, v in x.fields)


def parse_txt(text: str) -> list[tuple[str, str]]:
    pairs = []
    for line in text.splitlines():
        if not line:
            continue
        key, sep, value = line.partition(": ")
        if not sep:  # an empty value renders as "key: " and may lose its trailing space
            key, sep, value = line.rstrip().partition(":")
        pairs.append((key, _undo_one_line(value)))
    return pairs


# --- MD: a two-column table ------------------------------------------------------------------
def _md_cell(value: str) -> str:
    return _one_line(value).replace("|", "\\|")


def render_md(x: SourceInstance) -> str:
    lines = ["| Field | Value |", "| --- | --- |"]
    lines += [f"| {_md_cell(k)} | {_md_cell(canonical_text(v))} |" for k, v in x.fields]
    return "\n".join(lines) + "\n"


def _split_md_row(line: str) -> list[str]:
    body = line.strip()
    if not (body.startswith("|") and body.endswith("|")):
        raise ValueError(f"not a table row: {line!r}")
    body = body[1:-1]
    cells, cur, i = [], [], 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            cur.append(body[i : i + 2])
            i += 2
            continue
        if c == "|":
            cells.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    cells.append("".join(cur))
    # one space of padding each side is part of the syntax, not of the value
    return [
        _undo_one_line(cell[1:-1] if cell.startswith(" ") and cell.endswith(" ") and len(cell) >= 2 else cell.strip())
        for cell in cells
    ]


def parse_md(text: str) -> list[tuple[str, str]]:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) < 2:
        raise ValueError("markdown table needs a header and a separator row")
    rows = [_split_md_row(ln) for ln in lines[2:]]
    return [(r[0], r[1]) for r in rows]


# --- JSON: one object -----------------------------------------------------------------------
#: Line breaks JSON allows raw inside strings but many readers (ECMAScript before 2019, line
#: splitters) break on: written as ``\\uXXXX`` escapes (JSON already escapes every C0 control).
_JSON_RAW_BREAKS = {"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def render_json(x: SourceInstance) -> str:
    text = json.dumps(dict(x.fields), ensure_ascii=False, indent=2) + "\n"
    return "".join(_JSON_RAW_BREAKS.get(c, c) for c in text)


def parse_json(text: str) -> list[tuple[str, str]]:
    obj = json.loads(text)
    if not isinstance(obj, dict):
        raise ValueError("JSON document must be an object")
    return [(k, canonical_text(v)) for k, v in obj.items()]


# --- CSV: header row of field names, one data row; each field in its own cell -----------------
def _csv_cell(value: str, alone: bool) -> str:
    # RFC 4180 quoting. Python's csv writer with lineterminator "\n" leaves a lone CR unquoted,
    # which a reader then takes as a row break: quote on CR too. A lone empty cell is quoted
    # ("") so the row is not read as blank.
    if any(c in value for c in ',"\r\n') or (alone and value == ""):
        return '"' + value.replace('"', '""') + '"'
    return value


def render_csv(x: SourceInstance) -> str:
    alone = len(x.fields) == 1
    header = ",".join(_csv_cell(k, alone) for k, _ in x.fields)
    row = ",".join(_csv_cell(canonical_text(v), alone) for _, v in x.fields)
    return f"{header}\n{row}\n"


def parse_csv(text: str) -> list[tuple[str, str]]:
    rows = list(csv_reader(text))  # a cell may hold up to MAX_FIELD_CHARS (csv's own limit is 131,072)
    if len(rows) != 2 or len(rows[0]) != len(rows[1]):
        raise ValueError("CSV document must have one header row and one data row of equal width")
    return list(zip(rows[0], rows[1]))


RENDERERS: dict[str, Renderer] = {}


def register_renderer(renderer: Renderer) -> None:
    """Add a format to the registry (raises ``ValueError`` if the name is taken)."""
    if renderer.name in RENDERERS:
        raise ValueError(f"renderer {renderer.name!r} is already registered")
    RENDERERS[renderer.name] = renderer


for _r in (
    # -2: every Unicode line break inside a value is escaped (was: only LF/CR; others were rejected).
    Renderer("txt", "text/plain", "txt", "txt-2", render_txt, parse_txt),
    Renderer("md", "text/markdown", "md", "md-2", render_md, parse_md),
    # -2: NEL, LS and PS are written as \\u escapes.
    Renderer("json", "application/json", "json", "json-2", render_json, parse_json),
    # -2: a cell holding a lone CR is quoted (was written bare and read back as a row break).
    Renderer("csv", "text/csv", "csv", "csv-2", render_csv, parse_csv),
):
    register_renderer(_r)

#: The study's formats in baseline-first order (TXT is the baseline of Table 2; :data:`.vocab.FORMATS`).
DEFAULT_FORMATS = FORMATS


def expected_pairs(x: SourceInstance) -> list[tuple[str, str]]:
    return [(k, canonical_text(v)) for k, v in x.fields]


def check_semantic_invariance(x: SourceInstance, doc: RenderedDocument) -> None:
    """Raise :class:`InputError` unless the format's parser recovers exactly ``x.fields``.

    Also enforces instruction isolation: the task prompt must not occur in the document.
    """
    r = RENDERERS[doc.format]
    try:
        got = r.parse(doc.text)
    except Exception as exc:  # a parser failure is an invariance failure
        raise InputError(
            x.dataset, f"{doc.format} parser failed on the rendered document: {exc}", field=f"instance {x.instance_id}"
        ) from exc
    want = expected_pairs(x)
    if got != want:
        diff = next(((i, w, g) for i, (w, g) in enumerate(zip(want, got)) if w != g), (len(got), None, None))
        raise InputError(
            x.dataset,
            f"{doc.format} round trip changed the record at pair {diff[0]}: expected {diff[1]!r}, parsed {diff[2]!r}",
            field=f"instance {x.instance_id}",
        )
    if x.task_prompt and x.task_prompt.strip() and x.task_prompt.strip() in doc.text:
        raise InputError(
            x.dataset, "task prompt leaked into the document (instruction isolation)", field=f"instance {x.instance_id}"
        )


def render(x: SourceInstance, fmt: str, *, check: bool = True) -> RenderedDocument:
    """Render ``x`` as ``fmt`` (a key of :data:`RENDERERS`); verify invariance when ``check``.

    Raises ``KeyError`` for an unknown format and :class:`InputError` when the round trip fails.
    """
    if fmt not in RENDERERS:
        raise KeyError(f"unknown format {fmt!r}; registered: {sorted(RENDERERS)}")
    r = RENDERERS[fmt]
    doc = RenderedDocument(x.instance_id, x.dataset, fmt, r.media_type, r.version, r.render(x))
    if check:
        check_semantic_invariance(x, doc)
    return doc
