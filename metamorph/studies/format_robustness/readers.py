"""Independent readers of the rendered documents: what a document workflow gets back from a file.

Every format's document is read back here with a library other than the one that wrote it, so the
semantic-invariance check (:func:`metamorph.studies.format_robustness.renderers.check_semantic_invariance`)
does not trust a renderer's own code:

| format | written by | read back by | extraction (:data:`EXTRACTIONS`) |
| --- | --- | --- | --- |
| ``pdf`` | reportlab | pypdf (``extract_text``, layout mode) | ``extract:pypdf`` |
| ``docx`` | python-docx (writer) | python-docx (a new ``Document`` read) | ``extract:docx`` |
| ``xlsx`` | openpyxl (writer) | openpyxl (``load_workbook``) | ``extract:openpyxl`` |
| ``html`` | the standard library | ``html.parser.HTMLParser`` | none (HTML is text) |
| ``yaml`` | PyYAML ``safe_dump`` | PyYAML ``safe_load`` | none (YAML is text) |

Two functions per format:

* :func:`read_pairs` ``(format, data) -> [(field, value text), ...]``: the record's ordered pairs as
  the reader recovers them (value text as :func:`~metamorph.studies.format_robustness.records.canonical_text`
  writes it);
* :func:`read_back` ``(format, data) -> str``: the plain text a text-only pipeline extracts from a
  binary document (pdf, docx, xlsx): pypdf's page text; the table rows of the Word file and the
  sheet rows as tab-separated cells, one row a line. The model reads this text when the document
  reaches it ``inline`` (:func:`metamorph.studies.format_robustness.plan.build_messages`).

Cells and PDF lines hold a value in the *escaped text* of the TXT format, extended to every control
character: ``\\\\`` is a backslash, ``\\n`` / ``\\r`` are LF / CR, ``\\uXXXX`` (4 lowercase hex
digits) any other character that has no glyph or no place in XML (line breaks, C0/C1 controls, a
PDF line's trailing white space). :func:`unescape` is this module's own inverse of it. A PDF line
that ends in an odd number of backslashes continues on the next line (a long value is wrapped).

Errors: :class:`ValueError` (or the reader library's own exception) when a document is not of
the expected shape; the renderers' check turns it into an :class:`~metamorph.errors.InputError`
naming the instance and format.
"""

from __future__ import annotations

import io
import re
from html.parser import HTMLParser
from typing import Any

from metamorph.studies.format_robustness.records import canonical_text

__all__ = [
    "BINARY_FORMATS",
    "EXTRACTIONS",
    "READERS",
    "read_back",
    "read_pairs",
    "unescape",
]

#: The formats whose document is bytes (not text): stored in ``rendered_documents.document_bytes``.
BINARY_FORMATS: tuple[str, ...] = ("pdf", "docx", "xlsx")

#: The named extraction that turns a binary document into the text a text-only model reads.
EXTRACTIONS: dict[str, str] = {"pdf": "extract:pypdf", "docx": "extract:docx", "xlsx": "extract:openpyxl"}

_ESCAPE = re.compile(r"\\(u[0-9a-f]{4}|.)", re.DOTALL)


def unescape(text: str) -> str:
    """The value an escaped cell or PDF line stands for: ``\\\\`` -> ``\\``, ``\\n`` -> LF,
    ``\\r`` -> CR, ``\\uXXXX`` -> that character. Raises ``ValueError`` for any other backslash
    sequence or a lone trailing backslash (the writer never leaves one)."""

    def one(m: re.Match) -> str:
        s = m.group(1)
        if s.startswith("u") and len(s) == 5:
            return chr(int(s[1:], 16))
        if s in ("\\", "n", "r"):
            return {"\\": "\\", "n": "\n", "r": "\r"}[s]
        raise ValueError(f"unknown escape \\{s!r} in {text[:60]!r}")

    if (len(text) - len(text.rstrip("\\"))) % 2:
        raise ValueError(f"lone trailing backslash in {text[:60]!r}")
    return _ESCAPE.sub(one, text)


def _key_value(line: str, where: str) -> tuple[str, str]:
    key, sep, value = line.partition(": ")
    if not sep:  # an empty value reads back as "key:" (trailing space of the line dropped)
        if not line.endswith(":"):
            raise ValueError(f"{where}: line {line[:60]!r} is not 'field: value'")
        key, value = line[:-1], ""
    return unescape(key), unescape(value)


# --- PDF: pypdf -------------------------------------------------------------------------------
def _pdf_text(data: bytes) -> str:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    # layout mode keeps the writing order of right-to-left runs (the plain mode reverses them)
    return "\n".join(p.extract_text(extraction_mode="layout", layout_mode_space_vertically=False) for p in reader.pages)


def _pdf_pairs(data: bytes) -> list[tuple[str, str]]:
    logical, cur = [], ""
    for line in _pdf_text(data).split("\n"):
        if not line and not cur:
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:  # wrapped: the line continues on the next one
            cur += line[:-1]
            continue
        logical.append(cur + line)
        cur = ""
    if cur:
        raise ValueError("pdf: the last line ends in a continuation mark")
    return [_key_value(ln, "pdf") for ln in logical]


# --- DOCX: python-docx ------------------------------------------------------------------------
def _docx_rows(data: bytes) -> list[list[str]]:
    from docx import Document

    doc = Document(io.BytesIO(data))
    if len(doc.tables) != 1:
        raise ValueError(f"docx: expected one table, found {len(doc.tables)}")
    return [[c.text for c in row.cells] for row in doc.tables[0].rows]


def _docx_pairs(data: bytes) -> list[tuple[str, str]]:
    rows = _docx_rows(data)
    if not rows or rows[0] != ["Field", "Value"] or any(len(r) != 2 for r in rows):
        raise ValueError("docx: the table must have the header Field | Value and two cells a row")
    return [(unescape(k), unescape(v)) for k, v in rows[1:]]


# --- XLSX: openpyxl ---------------------------------------------------------------------------
def _xlsx_rows(data: bytes) -> list[list[Any]]:
    from openpyxl import load_workbook

    wb = load_workbook(io.BytesIO(data), read_only=True, data_only=False)
    try:
        return [list(r) for r in wb.worksheets[0].iter_rows(values_only=True)]
    finally:
        wb.close()


def _xlsx_cell(v: Any) -> str:
    return unescape(v) if isinstance(v, str) else canonical_text(v)


def _xlsx_pairs(data: bytes) -> list[tuple[str, str]]:
    rows = _xlsx_rows(data)
    if len(rows) != 2 or len(rows[0]) != len(rows[1]):
        raise ValueError("xlsx: the sheet must have one header row and one data row of equal width")
    return [(_xlsx_cell(k), _xlsx_cell(v)) for k, v in zip(rows[0], rows[1])]


# --- HTML: html.parser ------------------------------------------------------------------------
class _TableReader(HTMLParser):
    """The rows of ``<tbody>``: each row's ``<th>``/``<td>`` texts (character references resolved)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.rows: list[list[str]] = []
        self._in_body = False
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "tbody":
            self._in_body = True
        elif self._in_body and tag == "tr":
            self.rows.append([])
        elif self._in_body and tag in ("th", "td"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "tbody":
            self._in_body = False
        elif self._cell is not None and tag in ("th", "td"):
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _html_pairs(data: bytes | str) -> list[tuple[str, str]]:
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    p = _TableReader()
    p.feed(text)
    p.close()
    if any(len(r) != 2 for r in p.rows):
        raise ValueError("html: every table body row must have a field and a value cell")
    return [(k, v) for k, v in p.rows]


# --- YAML: PyYAML -----------------------------------------------------------------------------
def _yaml_pairs(data: bytes | str) -> list[tuple[str, str]]:
    import yaml

    obj = yaml.safe_load(data)
    if not isinstance(obj, dict):
        raise ValueError("yaml: the document must be one mapping")
    return [(str(k), canonical_text(v)) for k, v in obj.items()]


READERS = {"pdf": _pdf_pairs, "docx": _docx_pairs, "xlsx": _xlsx_pairs, "html": _html_pairs, "yaml": _yaml_pairs}


def read_pairs(fmt: str, data: bytes | str) -> list[tuple[str, str]]:
    """The ordered (field, value text) pairs the independent reader of ``fmt`` recovers from
    ``data`` (bytes; text for html and yaml). ``KeyError`` for a format without a reader."""
    return READERS[fmt](data)


def read_back(fmt: str, data: bytes) -> str:
    """The text the named extraction of a binary format (:data:`EXTRACTIONS`) gets from ``data``:
    pypdf's page text (layout mode, pages joined by a line break), or the Word table's / the
    sheet's rows with their cells joined by a tab, one row a line (numbers as
    :func:`~metamorph.studies.format_robustness.records.canonical_text` writes them). Cells keep
    their escaped text. ``KeyError`` for a text format."""
    if fmt == "pdf":
        return _pdf_text(data)
    if fmt == "docx":
        rows = _docx_rows(data)
    elif fmt == "xlsx":
        rows = [[v if isinstance(v, str) else canonical_text(v) for v in r] for r in _xlsx_rows(data)]
    else:
        raise KeyError(f"{fmt!r} is not a binary format; binary formats: {list(BINARY_FORMATS)}")
    return "".join("\t".join(r) + "\n" for r in rows)
